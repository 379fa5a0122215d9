/* hooks.c — what the core tells the profile while it compiles and runs programs, and the
 * spans backends' profiler modules report.
 *
 * Device spans carry a node id (gdp_span.node_id), not a program: ids repeat across
 * programs and graphs. So the host keeps, per backend with a profiler module, the
 * launches it made in order (a node, or a whole segment followed by its nodes), and each
 * span is matched to the oldest pending launch it can belong to: a span with a node id
 * to that node's launch (alone or inside a segment), a span of node -1 to a segment. A
 * device executes a stream in order, so the match is nearly always the head; launches
 * passed over had no span (a backend that timed the segment as a whole, a dropped span).
 * Spans are collected when many launches are pending and when the trace is written, so
 * a profiled step waits for nothing it would not wait for anyway. */
#include "program.h"
#include "record.h"

#include <stdio.h>
#include <string.h>

#define GD_PROF_COLLECT_AT 8192 /* pending launches that make a run collect first */
#define GD_PROF_MATCH_WINDOW 65536

/* "f32[64,1,28,28], f32[8,1,3,3] -> f32[64,8,28,28]" */
static void shapes_str(const gdp_node *n, char *buf, size_t cap)
{
    size_t len = 0;
    for (int k = 0; k < n->n_in + n->n_out && len + 1 < cap; k++) {
        const gdp_tensor *t = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
        const char *sep = k == 0 ? "" : k == n->n_in ? " -> " : ", ";
        if (k == n->n_in && n->n_in == 0) sep = "-> ";
        len += (size_t)snprintf(buf + len, cap - len, "%s%s[", sep, gd_dtype_name((gd_dtype)t->dtype));
        for (int d = 0; d < t->ndim && len + 1 < cap; d++)
            len += (size_t)snprintf(buf + len, cap - len, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        if (len + 1 < cap) len += (size_t)snprintf(buf + len, cap - len, "]");
    }
    if (len >= cap && cap > 0) buf[cap - 1] = '\0';
}

static void free_prog(gd_pprog *x)
{
    gd_free(x->nodes);
    gd_free(x->by_id);
    gd_free(x->seg_first);
    gd_free(x->seg_count);
    memset(x, 0, sizeof *x);
}

int32_t gd_prof_program(gd_prof *pr, gd_program *p)
{
    if (p->prof_session == pr->session) return p->prof_prog;
    if (pr->n_progs == pr->cap_progs) {
        int32_t c = pr->cap_progs ? pr->cap_progs * 2 : 16;
        gd_pprog *a = gd_realloc(pr->progs, sizeof *a * (size_t)c);
        if (a == NULL) goto oom;
        pr->progs = a;
        pr->cap_progs = c;
    }
    gd_pprog *x = &pr->progs[pr->n_progs];
    memset(x, 0, sizeof *x);
    x->serial = pr->n_progs + 1;
    x->flags = p->flags;
    x->n_nodes = p->n_descs;
    x->n_segs = p->n_segs;
    x->nodes = gd_calloc((size_t)p->n_descs + 1, sizeof *x->nodes);
    x->seg_first = gd_calloc((size_t)p->n_segs + 1, sizeof *x->seg_first);
    x->seg_count = gd_calloc((size_t)p->n_segs + 1, sizeof *x->seg_count);
    if (x->nodes == NULL || x->seg_first == NULL || x->seg_count == NULL) goto oom_prog;
    char buf[1024];
    unsigned used = 0;
    for (int a = 0; a < p->n_acts; a++) {
        const gd_action *act = &p->acts[a];
        if (act->kind != GD_ACT_KERNEL) continue;
        const gd_pnode *pn = &p->pn[act->pnode];
        const gdp_node *n = &p->descs[act->desc].node;
        gd_pnode_info *ni = &x->nodes[act->desc];
        ni->id = n->id;
        ni->backend = pn->be->index;
        used |= 1u << pn->be->index;
        ni->seg = act->segment;
        ni->dtype = n->n_out > 0 ? n->out[0]->dtype : GDP_F32;
        ni->label = gd_prof_str(pr, n->label);
        ni->op = gd_prof_str(pr, n->op);
        shapes_str(n, buf, sizeof buf);
        ni->shapes = gd_prof_str(pr, buf);
        ni->bytes = ni->flops = -1;
        if (pn->node->op->cost != NULL) pn->node->op->cost(n, &ni->bytes, &ni->flops);
        if (n->id > x->max_id) x->max_id = n->id;
    }
    x->by_id = gd_malloc(sizeof *x->by_id * ((size_t)x->max_id + 1));
    if (x->by_id == NULL) goto oom_prog;
    for (int32_t i = 0; i <= x->max_id; i++) x->by_id[i] = -1;
    for (int32_t i = 0; i < x->n_nodes; i++)
        if (x->nodes[i].id >= 0) x->by_id[x->nodes[i].id] = i;
    for (int s = 0; s < p->n_segs; s++) {
        x->seg_first[s] = p->acts[p->segs[s].first_act].desc;
        x->seg_count[s] = p->segs[s].n_acts;
    }
    /* what it computes, for people reading the trace */
    size_t len = (size_t)snprintf(buf, sizeof buf, "program %d: %d kernel node%s on", x->serial, x->n_nodes,
                                  x->n_nodes == 1 ? "" : "s");
    for (int b = 0; b < p->n_backends && len < sizeof buf; b++)
        if (used & (1u << b)) len += (size_t)snprintf(buf + len, sizeof buf - len, " %s", pr->ctx->backends[b]->name);
    for (int i = 0; i < p->n_targets && len < sizeof buf; i++) {
        const gd_tensor *t = p->targets[i];
        char lb[96];
        const char *nm = gd_tensor_name(t);
        if (nm[0] == '\0' && t->node != NULL) nm = gd_node_label(t->node, lb, sizeof lb);
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", i == 0 ? "; targets " : ", ", nm);
    }
    if ((p->flags & GD_COMPILE_UPDATES) && len < sizeof buf) snprintf(buf + len, sizeof buf - len, "; with updates");
    x->desc = gd_prof_str(pr, buf);
    p->prof_session = pr->session;
    p->prof_prog = pr->n_progs;
    return pr->n_progs++;
oom_prog:
    free_prog(x);
oom:
    pr->failed_memory = 1;
    return -1;
}

/* ---- compile and run --------------------------------------------------------------------- */

static const char *const phase_names[GD_PROF_N_PHASES] = {"select", "passes", "layout", "actions", "memory",
                                                          "describe", "segments", "bind", "re-bind"};

void gd_prof_phase(gd_prof *pr, int phase, uint64_t t0)
{
    gd_pev *e = gd_prof_event(pr, GD_PCAT_PHASE, pr->host_track, t0, gd_prof_now());
    if (e != NULL) e->name = gd_prof_str(pr, phase >= 0 && phase < GD_PROF_N_PHASES ? phase_names[phase] : "?");
}

void gd_prof_compiled(gd_prof *pr, gd_program *p, uint64_t t0)
{
    int32_t prog = p != NULL ? gd_prof_program(pr, p) : -1;
    gd_pev *e = gd_prof_event(pr, GD_PCAT_COMPILE, pr->host_track, t0, gd_prof_now());
    if (e == NULL) return;
    e->prog = prog;
    if (p == NULL) e->name = gd_prof_str(pr, "compile (failed)");
}

void gd_prof_run_begin(gd_prof *pr, gd_program *p)
{
    size_t pending = 0;
    for (int b = 0; b < pr->n_be; b++) pending += pr->be[b].q_len;
    if (pending > GD_PROF_COLLECT_AT) gd_prof_collect(pr, 0);
    pr->cur_prog = gd_prof_program(pr, p);
    pr->cur_run = pr->cur_prog >= 0 ? ++pr->progs[pr->cur_prog].runs : -1;
}

void gd_prof_run_end(gd_prof *pr, gd_program *p, uint64_t t0, gd_status st)
{
    (void)p;
    gd_pev *e = gd_prof_event(pr, GD_PCAT_RUN, pr->host_track, t0, gd_prof_now());
    if (e != NULL) {
        e->prog = pr->cur_prog;
        e->run = pr->cur_run;
        e->val = st; /* non-zero: the run failed with this status */
    }
    pr->cur_prog = pr->cur_run = -1;
}

/* Remembers a launch on backend b whose span its profiler module will report. */
static void pending(gd_prof *pr, int b, int32_t node, int32_t seg, int32_t node_id, uint64_t t)
{
    gd_pbackend *x = &pr->be[b];
    if (x->q_head > 0 && x->q_head + x->q_len == x->q_cap) {
        memmove(x->q, x->q + x->q_head, x->q_len * sizeof *x->q);
        x->q_head = 0;
    }
    if (x->q_head + x->q_len == x->q_cap) {
        size_t c = x->q_cap ? x->q_cap * 2 : 1024;
        gd_plaunch *q = c < ((size_t)1 << 28) ? gd_realloc(x->q, c * sizeof *q) : NULL;
        if (q == NULL) {
            pr->failed_memory = 1; /* its span will show as unmatched device work */
            return;
        }
        x->q = q;
        x->q_cap = c;
    }
    gd_plaunch *e = &x->q[x->q_head + x->q_len++];
    e->prog = pr->cur_prog;
    e->run = pr->cur_run;
    e->node = node;
    e->seg = seg;
    e->node_id = node_id;
    e->t = t;
}

uint64_t gd_prof_launch(gd_prof *pr, const gd_program *p, int act, uint64_t t0)
{
    const gd_action *a = &p->acts[act];
    int b = p->pn[a->pnode].be->index;
    gd_pbackend *x = gd_prof_backend(pr, p->pn[a->pnode].be);
    uint64_t t1 = gd_prof_now();
    gd_pev *e = x->host_timed ? gd_prof_event(pr, GD_PCAT_NODE, x->track, t0, t1)
                              : gd_prof_event(pr, GD_PCAT_LAUNCH, pr->host_track, t0, t1);
    if (e != NULL) {
        e->prog = pr->cur_prog;
        e->run = pr->cur_run;
        e->node = a->desc;
    }
    if (x->profiled) pending(pr, b, a->desc, -1, p->descs[a->desc].node.id, t0);
    return t1;
}

uint64_t gd_prof_segment(gd_prof *pr, const gd_program *p, int seg, uint64_t t0)
{
    const gd_segment_run *s = &p->segs[seg];
    int b = s->be->index;
    gd_pbackend *x = gd_prof_backend(pr, s->be);
    uint64_t t1 = gd_prof_now();
    gd_pev *e = x->host_timed ? gd_prof_event(pr, GD_PCAT_DEVSEG, x->track, t0, t1)
                              : gd_prof_event(pr, GD_PCAT_SEGMENT, pr->host_track, t0, t1);
    if (e != NULL) {
        e->prog = pr->cur_prog;
        e->run = pr->cur_run;
        e->node = seg;
    }
    if (!x->profiled) return t1;
    pending(pr, b, -1, seg, -1, t0);
    for (int i = 0; i < s->n_acts; i++) {
        int d = p->acts[s->first_act + i].desc;
        pending(pr, b, d, seg, p->descs[d].node.id, t0);
    }
    return t1;
}

uint64_t gd_prof_copy(gd_prof *pr, const gd_program *p, int act, uint64_t t0)
{
    const gd_action *a = &p->acts[act];
    const gd_slot *src = &p->slots[a->src], *dst = &p->slots[a->dst];
    uint64_t t1 = gd_prof_now();
    gd_pev *e = gd_prof_event(pr, GD_PCAT_COPY, pr->host_track, t0, t1);
    if (e == NULL) return t1;
    char name[160];
    snprintf(name, sizeof name, "copy %s -> %s", src->be->name, dst->be->name);
    e->name = gd_prof_str(pr, name);
    e->prog = pr->cur_prog;
    e->run = pr->cur_run;
    e->val = (double)src->bytes;
    return t1;
}

void gd_prof_wait(gd_prof *pr, const gd_backend *b, int what, uint64_t t0)
{
    gd_pev *e = gd_prof_event(pr, GD_PCAT_SYNC, pr->host_track, t0, gd_prof_now());
    if (e == NULL) return;
    char name[96];
    snprintf(name, sizeof name, "%s %s", what == GD_PROF_EVENT ? "wait for an event of" : "synchronize", b->name);
    e->name = gd_prof_str(pr, name);
    e->prog = pr->cur_prog;
    e->run = pr->cur_run;
}

void gd_prof_transfer(gd_prof *pr, const gd_tensor *t, int write, size_t bytes, uint64_t t0)
{
    gd_pev *e = gd_prof_event(pr, GD_PCAT_TRANSFER, pr->host_track, t0, gd_prof_now());
    if (e == NULL) return;
    char name[160], lb[96];
    const char *nm = gd_tensor_name(t);
    if (nm[0] == '\0' && t->node != NULL) nm = gd_node_label(t->node, lb, sizeof lb);
    snprintf(name, sizeof name, "%s %s", write ? "write" : "read", nm);
    e->name = gd_prof_str(pr, name);
    e->val = (double)bytes;
}

/* ---- device spans -------------------------------------------------------------------------- */

/* Index (from the head) of the launch span s belongs to, or -1. */
static long match(const gd_pbackend *x, const gdp_span *s)
{
    size_t window = x->q_len < GD_PROF_MATCH_WINDOW ? x->q_len : GD_PROF_MATCH_WINDOW;
    for (size_t i = 0; i < window; i++) {
        const gd_plaunch *e = &x->q[x->q_head + i];
        if (s->node_id < 0 ? e->node < 0 : e->node >= 0 && e->node_id == s->node_id) return (long)i;
    }
    return -1;
}

static void record_span(gd_prof *pr, int b, const gdp_span *s)
{
    gd_pbackend *x = &pr->be[b];
    int16_t track = x->track;
    if (s->stream_id != 0) {
        char name[96];
        snprintf(name, sizeof name, "%s stream %d", pr->ctx->backends[b]->name, (int)s->stream_id);
        track = gd_prof_track(pr, gd_prof_backend_pid(b), s->stream_id, name);
    }
    long i = match(x, s);
    uint64_t t0 = s->start_ns, t1 = s->end_ns;
    if (i < 0) {
        pr->unmatched++;
        gd_pev *e = gd_prof_event(pr, GD_PCAT_DEVICE, track, t0, t1);
        if (e != NULL) e->name = gd_prof_str(pr, s->name != NULL ? s->name : "?");
        return;
    }
    gd_plaunch l = x->q[x->q_head + (size_t)i];
    x->q_head += (size_t)i + 1;
    x->q_len -= (size_t)i + 1;
    /* Work cannot start before it was launched: a start earlier than that is the error of
     * mapping the device's clock onto the host's, so only the start moves (keeping spans
     * of one stream apart). */
    if (t0 < l.t) {
        t0 = l.t;
        pr->clamped++;
    }
    if (t1 < t0) t1 = t0;
    gd_pev *e = gd_prof_event(pr, l.node < 0 ? GD_PCAT_DEVSEG : GD_PCAT_NODE, track, t0, t1);
    if (e == NULL) return;
    e->prog = l.prog;
    e->run = l.run;
    e->node = l.node < 0 ? l.seg : l.node;
    e->seg = l.node < 0 ? -1 : l.seg;
    if (l.node < 0 && s->name != NULL) e->name = gd_prof_str(pr, s->name);
}

gd_status gd_prof_collect(gd_prof *pr, int all)
{
    gd_ctx *ctx = pr->ctx;
    gd_status first = GD_OK;
    for (int b = 0; b < pr->n_be; b++) {
        gd_backend *be = ctx->backends[b];
        gd_pbackend *x = &pr->be[b];
        if (!x->profiled) continue;
        if (all) {
            /* spans are of finished work: let the device finish first */
            gd_status st = gd_backend_sync(ctx, be);
            if (st != GD_OK && first == GD_OK) first = st;
        }
        for (int rounds = 0; rounds < 1 << 20; rounds++) {
            int32_t n = 0;
            gdp_err e = {.size = sizeof e};
            if (be->prof_mod.collect(be->plugin.backend, pr->spans, pr->cap_spans, &n, &e) != GDP_OK) {
                gd_ctx_log(ctx, "profile: collecting %s's spans: %s", be->name, e.msg);
                break;
            }
            if (n < 0 || n > pr->cap_spans) n = 0;
            for (int32_t k = 0; k < n; k++) record_span(pr, b, &pr->spans[k]);
            if (n < pr->cap_spans) break;
        }
        if (all) { /* what is still pending had no span and will get none */
            x->q_head = 0;
            x->q_len = 0;
        }
    }
    return first;
}
