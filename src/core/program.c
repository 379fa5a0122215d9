/* program.c — compiling a graph into a program and running it.
 *
 * compile: collect the nodes the targets need (plus updates) → the backends' graph passes
 * → placement (each node on the highest-priority backend whose kernel accepts it, else the
 * CPU) → slots (where each value lives on each backend that reads it; copies where a value
 * crosses backends, once per backend, not once per consumer) → buffers reused by lifetime.
 * run: the actions in order; nothing is planned or allocated here. */
#include "core.h"

#include <stdlib.h>
#include <string.h>

gd_status gd_graph_run_passes(gd_graph *g);

typedef struct slot {
    gd_tensor *v;
    gd_backend *be;
    void *ptr;
    size_t bytes;
    int persistent;      /* the leaf's own storage: never planned, never freed here */
    int first, last;     /* action range it must survive */
} slot;

enum { ACT_KERNEL, ACT_COPY };

typedef struct action {
    int kind;
    int step;            /* ACT_KERNEL */
    int src, dst;        /* ACT_COPY: slot indices */
    int in[GDP_MAX_INPUTS], out[GDP_MAX_OUTPUTS]; /* ACT_KERNEL: slot indices */
} action;

typedef struct gd_plan {
    slot *slots;
    int n_slots, cap_slots;
    int *slot_of;        /* [value * n_backends + backend] -> slot, -1 */
    int n_backends;
    action *acts;
    int n_acts, cap_acts;
    void **bufs;         /* allocations made for this program */
    gd_backend **buf_be;
    int n_bufs;
} gd_plan;

static int add_slot(gd_plan *p, gd_tensor *v, gd_backend *be)
{
    if (p->n_slots == p->cap_slots) {
        int c = p->cap_slots ? p->cap_slots * 2 : 64;
        slot *s = realloc(p->slots, (size_t)c * sizeof *s);
        if (s == NULL) return -1;
        p->slots = s;
        p->cap_slots = c;
    }
    slot *s = &p->slots[p->n_slots];
    memset(s, 0, sizeof *s);
    s->v = v;
    s->be = be;
    s->bytes = gd_value_bytes(v);
    s->first = s->last = -1;
    p->slot_of[v->id * p->n_backends + be->index] = p->n_slots;
    return p->n_slots++;
}

static action *add_act(gd_plan *p)
{
    if (p->n_acts == p->cap_acts) {
        int c = p->cap_acts ? p->cap_acts * 2 : 64;
        action *a = realloc(p->acts, (size_t)c * sizeof *a);
        if (a == NULL) return NULL;
        p->acts = a;
        p->cap_acts = c;
    }
    action *a = &p->acts[p->n_acts++];
    memset(a, 0, sizeof *a);
    return a;
}

static void touch(gd_plan *p, int s, int act)
{
    if (p->slots[s].first < 0) p->slots[s].first = act;
    if (act > p->slots[s].last) p->slots[s].last = act;
}

static int is_leaf(const gd_tensor *v) { return v->kind != GD_V_NODE; }

/* Describes a node for supports() and for messages (data pointers NULL). */
static gdp_node node_view(const gd_node *n, gdp_tensor *in, gdp_tensor *out, gdp_attr *attrs_unused)
{
    (void)attrs_unused;
    for (int i = 0; i < n->n_in; i++) in[i] = gd_value_desc(n->in[i], NULL);
    for (int k = 0; k < n->n_out; k++) out[k] = gd_value_desc(n->out[k], NULL);
    gdp_node v = {.size = sizeof v, .op = n->op->name, .n_in = n->n_in, .n_out = n->n_out, .in = in, .out = out,
                  .attrs = gd_node_attrs(n)};
    return v;
}

static const char *node_sig(const gd_node *n, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "%s(", n->op->name);
    for (int i = 0; i < n->n_in && len < cap; i++) {
        char b[128];
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", gd_tensor_describe(n->in[i], b, sizeof b));
    }
    if (len < cap) snprintf(buf + len, cap - len, ")");
    return buf;
}

/* Chooses the backend for a node: the preferred one, then lower-priority ones, then the
 * reference. Backends of higher priority than the preferred are skipped: choosing a
 * backend means "at most this one". */
static gd_backend *place(gd_ctx *ctx, const gd_node *n, const gd_kernel_entry **kernel)
{
    gd_backend *pref = ctx->backends[ctx->preferred];
    gdp_tensor in[GDP_MAX_INPUTS], out[GDP_MAX_OUTPUTS];
    gdp_node view = node_view(n, in, out, NULL);
    int32_t key = gd_node_key_dtype(n);
    gd_backend *order[GD_MAX_BACKENDS];
    int no = 0;
    order[no++] = pref;
    for (int pass = 0; pass < ctx->n_backends; pass++) {
        /* remaining non-ref backends in descending priority below the preferred */
        gd_backend *best = NULL;
        for (int i = 1; i < ctx->n_backends; i++) {
            gd_backend *b = ctx->backends[i];
            int used = 0;
            for (int j = 0; j < no; j++) used |= order[j] == b;
            if (used || b->priority > pref->priority) continue;
            if (best == NULL || b->priority > best->priority) best = b;
        }
        if (best == NULL) break;
        order[no++] = best;
    }
    for (int j = 0; j < no; j++) {
        gd_backend *b = order[j];
        if (b->is_ref) continue;
        const gd_kernel_entry *k = gd_backend_kernel(b, n->op, key);
        if (k == NULL) continue;
        if (k->k.supports != NULL && !k->k.supports(b->plugin.backend, &view)) continue;
        *kernel = k;
        return b;
    }
    *kernel = NULL;
    return ctx->backends[0];
}

static void plan_free(gd_plan *p)
{
    if (p == NULL) return;
    for (int i = 0; i < p->n_bufs; i++) gd_backend_free(p->buf_be[i], p->bufs[i]);
    free(p->bufs);
    free(p->buf_be);
    free(p->slots);
    free(p->slot_of);
    free(p->acts);
    free(p);
}

void gd_program_free(gd_program *prog)
{
    if (prog == NULL) return;
    for (int i = 0; i < prog->n_targets; i++)
        if (prog->targets[i]->run_be != NULL) {
            prog->targets[i]->run_ptr = NULL;
            prog->targets[i]->run_be = NULL;
        }
    plan_free(prog->plan);
    free(prog->steps);
    free(prog->targets);
    free(prog);
}

/* Assigns memory to planned slots: a slot takes a free buffer of its backend that is large
 * enough (best fit) once the buffer's previous slot is dead. */
static gd_status allocate(gd_ctx *ctx, gd_plan *p)
{
    typedef struct { void *ptr; size_t bytes; gd_backend *be; int free_after; } buf;
    buf *bufs = calloc((size_t)p->n_slots + 1, sizeof *bufs);
    int nb = 0;
    if (bufs == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
    /* slots in order of first use */
    int *order = malloc(sizeof(int) * (size_t)(p->n_slots + 1));
    if (order == NULL) {
        free(bufs);
        return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
    }
    int no = 0;
    for (int a = 0; a < p->n_acts; a++)
        for (int s = 0; s < p->n_slots; s++)
            if (!p->slots[s].persistent && p->slots[s].ptr == NULL && p->slots[s].first == a) order[no++] = s;
    gd_status st = GD_OK;
    for (int i = 0; i < no && st == GD_OK; i++) {
        slot *s = &p->slots[order[i]];
        int best = -1;
        for (int b = 0; b < nb; b++) {
            if (bufs[b].be != s->be || bufs[b].free_after >= s->first || bufs[b].bytes < s->bytes) continue;
            if (best < 0 || bufs[b].bytes < bufs[best].bytes) best = b;
        }
        if (ctx->guard) best = -1; /* every slot its own padded buffer */
        if (best < 0) {
            best = nb++;
            bufs[best].be = s->be;
            bufs[best].bytes = s->bytes;
            st = gd_backend_alloc(ctx, s->be, s->bytes + (ctx->guard ? 2 * GD_GUARD_BYTES : 0), &bufs[best].ptr);
        }
        s->ptr = ctx->guard ? (char *)bufs[best].ptr + GD_GUARD_BYTES : bufs[best].ptr;
        bufs[best].free_after = s->last;
    }
    p->bufs = calloc((size_t)nb + 1, sizeof(void *));
    p->buf_be = calloc((size_t)nb + 1, sizeof(gd_backend *));
    if (p->bufs == NULL || p->buf_be == NULL) st = gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
    for (int b = 0; b < nb; b++) {
        if (p->bufs != NULL && p->buf_be != NULL) {
            p->bufs[p->n_bufs] = bufs[b].ptr;
            p->buf_be[p->n_bufs++] = bufs[b].be;
        } else {
            gd_backend_free(bufs[b].be, bufs[b].ptr);
        }
    }
    free(order);
    free(bufs);
    return st;
}

/* The slot through which backend `be` reads value v, creating a copy from v's home if
 * needed. Host-only backends read host-visible device memory in place. */
static int reader_slot(gd_plan *p, gd_tensor *v, gd_backend *be, gd_backend *home, int act_index, int *err)
{
    int nbk = p->n_backends;
    int s = p->slot_of[v->id * nbk + be->index];
    if (s >= 0) return s;
    int hs = p->slot_of[v->id * nbk + home->index];
    if (!be->has_dev && home->host_visible) return hs;
    s = add_slot(p, v, be);
    action *a = add_act(p);
    if (s < 0 || a == NULL) {
        *err = 1;
        return -1;
    }
    a->kind = ACT_COPY;
    a->src = hs;
    a->dst = s;
    touch(p, hs, act_index);
    touch(p, s, act_index);
    return s;
}

gd_program *gd_compile(gd_graph *g, int n_targets, gd_tensor *const *targets, int flags)
{
    if (g == NULL) return NULL;
    gd_ctx *ctx = g->ctx;
    for (int i = 0; i < n_targets; i++) {
        if (targets[i] == NULL) return NULL; /* an earlier builder failed; its message stands */
        if (targets[i]->g != g) {
            gd_fail(ctx, GD_ERR_INVALID, "compile: target %d belongs to another graph", i);
            return NULL;
        }
    }
    for (int i = 0; i < n_targets; i++) {
        if (targets[i]->node != NULL && targets[i]->node->dead) {
            char b[128];
            gd_fail(ctx, GD_ERR_INVALID,
                    "compile: target %s was fused away by a backend's graph pass when an earlier program was "
                    "compiled; make it a target of that first program too (or disable the pass)",
                    gd_tensor_describe(targets[i], b, sizeof b));
            return NULL;
        }
        targets[i]->exposed = 1;
    }
    if (gd_graph_run_passes(g) != GD_OK) return NULL;

    gd_backend **node_be = NULL;
    gd_program *prog = calloc(1, sizeof *prog);
    gd_plan *p = calloc(1, sizeof *p);
    char *need = calloc((size_t)g->n_values + 1, 1);
    if (prog == NULL || p == NULL || need == NULL) goto oom;
    prog->g = g;
    prog->plan = p;
    prog->dev = ctx->backends[ctx->preferred];
    prog->targets = malloc(sizeof(gd_tensor *) * (size_t)(n_targets + 1));
    if (prog->targets == NULL) goto oom;
    prog->n_targets = n_targets;
    for (int i = 0; i < n_targets; i++) {
        prog->targets[i] = targets[i];
        need[targets[i]->id] = 1;
    }
    /* Which nodes run: those the targets need, and every update when asked. */
    char *run = calloc((size_t)g->n_nodes + 1, 1);
    if (run == NULL) goto oom;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        gd_node *n = g->nodes[i];
        if (n->dead) continue;
        int want = (flags & GD_COMPILE_UPDATES) && n->is_update;
        for (int k = 0; k < n->n_out; k++) want |= need[n->out[k]->id];
        if (!want) continue;
        run[i] = 1;
        for (int k = 0; k < n->n_in; k++) need[n->in[k]->id] = 1;
    }
    int n_run = 0;
    for (int i = 0; i < g->n_nodes; i++) n_run += run[i];
    prog->steps = calloc((size_t)n_run + 1, sizeof *prog->steps);
    if (prog->steps == NULL) {
        free(run);
        goto oom;
    }
    gd_backend *pref = ctx->backends[ctx->preferred];
    for (int i = 0; i < g->n_nodes; i++) {
        if (!run[i]) continue;
        gd_step *st = &prog->steps[prog->n_steps++];
        st->node = g->nodes[i];
        st->be = place(ctx, st->node, &st->kernel);
        st->fallback = st->be != pref;
        if (st->fallback && ctx->strict) {
            char sig[512];
            gd_fail(ctx, GD_ERR_STRICT, "strict mode: no %s kernel accepts %s (%s), it would run on %s",
                    pref->name, node_sig(st->node, sig, sizeof sig), gd_dtype_name((gd_dtype)gd_node_key_dtype(st->node)),
                    st->be->name);
            free(run);
            goto fail;
        }
    }
    free(run);

    /* Inputs live on the preferred backend; they are allocated on first use. */
    for (int v = 0; v < g->n_values; v++) {
        gd_tensor *t = g->values[v];
        if (!need[v] || t->kind != GD_V_INPUT || t->data != NULL) continue;
        if (gd_backend_alloc(ctx, pref, gd_value_bytes(t), &t->data) != GD_OK) goto fail;
        t->home = pref;
    }

    node_be = calloc((size_t)g->n_nodes + 1, sizeof *node_be);
    if (node_be == NULL) goto oom;
    for (int i = 0; i < prog->n_steps; i++) node_be[prog->steps[i].node->id] = prog->steps[i].be;

    /* Slots and actions. */
    p->n_backends = ctx->n_backends;
    p->slot_of = malloc(sizeof(int) * (size_t)(g->n_values + 1) * (size_t)p->n_backends);
    if (p->slot_of == NULL) goto oom;
    for (int i = 0; i < (g->n_values + 1) * p->n_backends; i++) p->slot_of[i] = -1;
    for (int v = 0; v < g->n_values; v++) {
        gd_tensor *t = g->values[v];
        if (!need[v] || !is_leaf(t)) continue;
        int s = add_slot(p, t, t->home);
        if (s < 0) goto oom;
        p->slots[s].persistent = 1;
        p->slots[s].ptr = t->data;
    }
    for (int i = 0; i < prog->n_steps; i++) {
        gd_step *st = &prog->steps[i];
        gd_node *n = st->node;
        int err = 0;
        int ins[GDP_MAX_INPUTS];
        for (int k = 0; k < n->n_in; k++) {
            gd_tensor *v = n->in[k];
            /* a computed value lives where the step producing it ran */
            gd_backend *home = is_leaf(v) ? v->home : node_be[v->node->id];
            ins[k] = reader_slot(p, v, st->be, home, p->n_acts, &err);
            if (err) goto oom;
        }
        action *a = add_act(p);
        if (a == NULL) goto oom;
        int ai = p->n_acts - 1;
        a->kind = ACT_KERNEL;
        a->step = i;
        for (int k = 0; k < n->n_in; k++) {
            a->in[k] = ins[k];
            touch(p, ins[k], ai);
        }
        for (int k = 0; k < n->n_out; k++) {
            gd_tensor *v = n->out[k];
            int alias = n->is_update ? n->op->inplace[k] : -1;
            int s;
            if (alias >= 0) {
                /* in place: the output is the input's slot on this backend */
                s = ins[alias];
                p->slot_of[v->id * p->n_backends + st->be->index] = s;
            } else {
                s = add_slot(p, v, st->be);
                if (s < 0) goto oom;
            }
            p->acts[ai].out[k] = s;
            touch(p, s, ai);
            gd_tensor *leafv = alias >= 0 ? n->in[alias] : NULL;
            if (leafv != NULL && is_leaf(leafv) && p->slots[s].v == leafv && p->slots[s].be != leafv->home &&
                !(p->slots[s].ptr == leafv->data)) {
                /* updated a mirror: write it back to the leaf's home */
                int hs = p->slot_of[leafv->id * p->n_backends + leafv->home->index];
                action *c = add_act(p);
                if (c == NULL) goto oom;
                c->kind = ACT_COPY;
                c->src = s;
                c->dst = hs;
                touch(p, s, p->n_acts - 1);
                touch(p, hs, p->n_acts - 1);
            }
        }
    }
    /* Targets survive the run. */
    for (int i = 0; i < n_targets; i++) {
        gd_tensor *t = targets[i];
        for (int b = 0; b < p->n_backends; b++) {
            int s = p->slot_of[t->id * p->n_backends + b];
            if (s >= 0) p->slots[s].last = p->n_acts;
        }
    }
    if (allocate(ctx, p) != GD_OK) goto fail;
    free(need);
    free(node_be);
    if (ctx->trace) gd_program_describe(prog, NULL, NULL);
    return prog;
oom:
    gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
fail:
    free(need);
    free(node_be);
    if (prog == NULL || prog->plan == NULL) plan_free(p);
    gd_program_free(prog);
    return NULL;
}

static gd_backend *slot_be(const gd_plan *p, int s) { return p->slots[s].be; }

static gd_status do_copy(gd_ctx *ctx, gd_plan *p, const action *a)
{
    slot *src = &p->slots[a->src], *dst = &p->slots[a->dst];
    size_t n = src->bytes;
    gd_backend *A = src->be, *B = dst->be;
    if (A == B) {
        if (!A->has_dev) {
            memcpy(dst->ptr, src->ptr, n);
            return GD_OK;
        }
        if (A->dev.copy_d2d != NULL) {
            gdp_err e = {.size = sizeof e};
            if (A->dev.copy_d2d(A->plugin.backend, dst->ptr, src->ptr, n, A->stream, &e) != GDP_OK)
                return gd_fail(ctx, GD_ERR_DEVICE, "%s: device copy: %s", A->name, e.msg);
            return GD_OK;
        }
    }
    if (!A->has_dev) return gd_backend_h2d(ctx, B, dst->ptr, src->ptr, n);
    if (!B->has_dev) return gd_backend_d2h(ctx, A, dst->ptr, src->ptr, n);
    void *tmp = malloc(n ? n : 1);
    if (tmp == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "copy between %s and %s: out of host memory", A->name, B->name);
    gd_status s = gd_backend_d2h(ctx, A, tmp, src->ptr, n);
    if (s == GD_OK) s = gd_backend_h2d(ctx, B, dst->ptr, tmp, n);
    free(tmp);
    return s;
}

/* Writes (check = 0) or verifies (check = 1) the guard bytes around every planned slot. */
static gd_status guards(gd_ctx *ctx, gd_plan *p, int check)
{
    unsigned char pat[GD_GUARD_BYTES], got[GD_GUARD_BYTES];
    memset(pat, GD_GUARD_BYTE, sizeof pat);
    for (int i = 0; i < p->n_slots; i++) {
        slot *s = &p->slots[i];
        if (s->persistent || s->ptr == NULL) continue;
        char *lo = (char *)s->ptr - GD_GUARD_BYTES, *hi = (char *)s->ptr + s->bytes;
        for (int side = 0; side < 2; side++) {
            char *at = side ? hi : lo;
            gd_status st = check ? gd_backend_d2h(ctx, s->be, got, at, sizeof got)
                                 : gd_backend_h2d(ctx, s->be, at, pat, sizeof pat);
            if (st != GD_OK) return st;
            if (check && memcmp(got, pat, sizeof pat) != 0) {
                char b[128];
                const char *who = s->v->node != NULL ? s->v->node->op->name : "input";
                return gd_fail(ctx, GD_ERR_DEVICE, "%s on %s wrote %s the end of its output %s (guard bytes changed)",
                               who, s->be->name, side ? "past" : "before", gd_tensor_describe(s->v, b, sizeof b));
            }
        }
    }
    return GD_OK;
}

gd_status gd_program_check_guards(gd_program *prog) { return guards(prog->g->ctx, prog->plan, 1); }

gd_status gd_program_run(gd_program *prog)
{
    if (prog == NULL) return GD_ERR_INVALID;
    gd_graph *g = prog->g;
    gd_ctx *ctx = g->ctx;
    gd_plan *p = prog->plan;
    for (int s = 0; s < p->n_slots; s++) {
        gd_tensor *v = p->slots[s].v;
        if (p->slots[s].persistent && v->kind == GD_V_INPUT && !v->written)
            return gd_fail(ctx, GD_ERR_INVALID, "run: input '%s' was never written (gd_tensor_write)", gd_tensor_name(v));
    }
    if (ctx->guard) {
        gd_status gs = guards(ctx, p, 0);
        if (gs != GD_OK) return gs;
    }
    /* dirty[b]: backend b may have device work in flight that host code must wait for. */
    char dirty[GD_MAX_BACKENDS] = {0};
    for (int ai = 0; ai < p->n_acts; ai++) {
        const action *a = &p->acts[ai];
        gd_status st = GD_OK;
        if (a->kind == ACT_COPY) {
            st = do_copy(ctx, p, a);
            gd_backend *B = slot_be(p, a->dst);
            if (B->has_dev) dirty[B->index] = 1;
            if (st != GD_OK) return st;
            continue;
        }
        gd_step *step = &prog->steps[a->step];
        gd_node *n = step->node;
        gdp_tensor in[GDP_MAX_INPUTS], out[GDP_MAX_OUTPUTS];
        for (int k = 0; k < n->n_in; k++) {
            in[k] = gd_value_desc(n->in[k], p->slots[a->in[k]].ptr);
            gd_backend *hb = slot_be(p, a->in[k]);
            if (!step->be->has_dev && hb->has_dev && dirty[hb->index]) {
                /* host kernel reading host-visible device memory: wait for the device */
                if ((st = gd_backend_sync(ctx, hb)) != GD_OK) return st;
                dirty[hb->index] = 0;
            }
        }
        for (int k = 0; k < n->n_out; k++) {
            out[k] = gd_value_desc(n->out[k], p->slots[a->out[k]].ptr);
            gd_backend *hb = slot_be(p, a->out[k]);
            if (!step->be->has_dev && hb->has_dev && dirty[hb->index]) {
                if ((st = gd_backend_sync(ctx, hb)) != GD_OK) return st;
                dirty[hb->index] = 0;
            }
        }
        gdp_node view = {.size = sizeof view, .op = n->op->name, .n_in = n->n_in, .n_out = n->n_out,
                         .in = in, .out = out, .attrs = gd_node_attrs(n)};
        if (step->kernel == NULL) {
            st = gd_ref_launch(ctx, n->op, &view);
            if (st != GD_OK) {
                char m[1024];
                snprintf(m, sizeof m, "%s", ctx->err);
                return gd_fail(ctx, st, "node %d on %s: %s", n->id, step->be->name, m);
            }
        } else {
            gd_backend *b = step->be;
            gdp_err e = {.size = sizeof e};
            gdp_status ks = step->kernel->k.launch(b->plugin.backend, &view, b->stream, &e);
            if (ks != GDP_OK) {
                char sig[512];
                return gd_fail(ctx, ks == GDP_ERR_NOMEM ? GD_ERR_NOMEM : GD_ERR_DEVICE, "%s kernel %s failed: %s",
                               b->name, node_sig(n, sig, sizeof sig), e.msg);
            }
            if (b->has_dev) {
                dirty[b->index] = 1;
                if (b->sync_every_kernel) {
                    if ((st = gd_backend_sync(ctx, b)) != GD_OK) return st;
                    dirty[b->index] = 0;
                }
            }
        }
    }
    for (int i = 0; i < prog->n_targets; i++) {
        gd_tensor *t = prog->targets[i];
        if (is_leaf(t)) continue;
        for (int b = 0; b < p->n_backends; b++) {
            int s = p->slot_of[t->id * p->n_backends + b];
            if (s >= 0) {
                t->run_ptr = p->slots[s].ptr;
                t->run_be = p->slots[s].be;
                break;
            }
        }
    }
    return GD_OK;
}

gd_status gd_program_describe(const gd_program *prog, void (*line)(void *, const char *), void *user)
{
    gd_ctx *ctx = prog->g->ctx;
    const gd_plan *p = prog->plan;
    char buf[1200], sig[900];
    for (int ai = 0; ai < p->n_acts; ai++) {
        const action *a = &p->acts[ai];
        if (a->kind == ACT_COPY) {
            const slot *s = &p->slots[a->src], *d = &p->slots[a->dst];
            char b[128];
            snprintf(buf, sizeof buf, "copy  %s %s: %s -> %s", s->v->name ? s->v->name : "value",
                     gd_tensor_describe(s->v, b, sizeof b), s->be->name, d->be->name);
        } else {
            const gd_step *st = &prog->steps[a->step];
            snprintf(buf, sizeof buf, "node %-4d %-8s %s%s", st->node->id, st->be->name,
                     node_sig(st->node, sig, sizeof sig), st->fallback ? "  [fallback]" : "");
        }
        if (line != NULL) line(user, buf);
        else gd_ctx_log(ctx, "%s", buf);
    }
    return GD_OK;
}

/* ---- data in and out ----------------------------------------------------------------------- */

gd_status gd_tensor_write(gd_tensor *t, const void *src, size_t bytes)
{
    if (t == NULL) return GD_ERR_INVALID;
    gd_ctx *ctx = t->g->ctx;
    char b[128];
    if (t->kind == GD_V_NODE)
        return gd_fail(ctx, GD_ERR_INVALID, "write: %s is computed by an op; only inputs, parameters and states can be written",
                       gd_tensor_describe(t, b, sizeof b));
    if (bytes != gd_value_bytes(t))
        return gd_fail(ctx, GD_ERR_INVALID, "write '%s': %zu bytes given, %s holds %zu", gd_tensor_name(t), bytes,
                       gd_tensor_describe(t, b, sizeof b), gd_value_bytes(t));
    if (t->data == NULL) {
        gd_backend *pref = ctx->backends[ctx->preferred];
        gd_status s = gd_backend_alloc(ctx, pref, bytes, &t->data);
        if (s != GD_OK) return s;
        t->home = pref;
    }
    gd_status s = gd_backend_h2d(ctx, t->home, t->data, src, bytes);
    if (s == GD_OK) t->written = 1;
    return s;
}

gd_status gd_tensor_read(gd_tensor *t, void *dst, size_t bytes)
{
    if (t == NULL) return GD_ERR_INVALID;
    gd_ctx *ctx = t->g->ctx;
    char b[128];
    if (bytes != gd_value_bytes(t))
        return gd_fail(ctx, GD_ERR_INVALID, "read '%s': %zu bytes given, %s holds %zu", gd_tensor_name(t), bytes,
                       gd_tensor_describe(t, b, sizeof b), gd_value_bytes(t));
    if (is_leaf(t)) {
        if (t->data == NULL)
            return gd_fail(ctx, GD_ERR_INVALID, "read '%s': the input was never written", gd_tensor_name(t));
        return gd_backend_d2h(ctx, t->home, dst, t->data, bytes);
    }
    if (t->run_ptr == NULL)
        return gd_fail(ctx, GD_ERR_INVALID, "read %s: not computed yet (make it a target of a program and run it)",
                       gd_tensor_describe(t, b, sizeof b));
    return gd_backend_d2h(ctx, t->run_be, dst, t->run_ptr, bytes);
}
