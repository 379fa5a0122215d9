/* run.c — running a compiled program, and data in and out of tensors.
 *
 * A run executes the actions planned at compile time: kernel launches (or whole
 * segments through a backend's executor) and copies between backends. It allocates
 * nothing: descriptors, buffers, workspaces and staging were all planned. It waits for a
 * device only where a host kernel reads that device's memory in place, and then only for
 * the work that produced it (an event). */
#include "program.h"
#include "prof/prof.h"

#include <stdio.h>
#include <string.h>

static gd_status copy_slots(gd_ctx *ctx, gd_program *p, const gd_action *a)
{
    void *src = gd_slot_ptr(p, a->src), *dst = gd_slot_ptr(p, a->dst);
    gd_backend *A = p->slots[a->src].be, *B = p->slots[a->dst].be;
    size_t n = p->slots[a->src].bytes;
    if (A == B) {
        if (!A->has_dev) {
            memcpy(dst, src, n);
            return GD_OK;
        }
        if (A->dev.copy_d2d != NULL) {
            gdp_err e = {.size = sizeof e};
            gdp_status s = A->dev.copy_d2d(A->plugin.backend, dst, src, n, A->stream, &e);
            if (s != GDP_OK) return gd_fail(ctx, gd_status_from_plugin(s), "%s: device copy: %s", A->name, e.msg);
            return GD_OK;
        }
    }
    if (!A->has_dev) return gd_backend_h2d(ctx, B, dst, src, n);
    if (!B->has_dev) return gd_backend_d2h(ctx, A, dst, src, n);
    /* between two devices (or within one without copy_d2d): through the planned host buffer */
    void *tmp = gd_slot_ptr(p, a->staging);
    gd_status s = gd_backend_d2h(ctx, A, tmp, src, n);
    if (s == GD_OK) s = gd_backend_h2d(ctx, B, dst, tmp, n);
    return s;
}

/* Writes (check = 0) or verifies (check = 1) the guard bytes around every planned slot. */
static gd_status guards(gd_ctx *ctx, gd_program *p, int check)
{
    unsigned char pat[GD_GUARD_BYTES], got[GD_GUARD_BYTES];
    memset(pat, GD_GUARD_BYTE, sizeof pat);
    for (int i = 0; i < p->n_slots; i++) {
        gd_slot *s = &p->slots[i];
        if (s->kind == GD_SLOT_LEAF) continue;
        char *ptr = gd_slot_ptr(p, i);
        char *lo = ptr - GD_GUARD_BYTES, *hi = ptr + s->bytes;
        for (int side = 0; side < 2; side++) {
            char *at = side ? hi : lo;
            gd_status st = check ? gd_backend_d2h(ctx, s->be, got, at, sizeof got)
                                 : gd_backend_h2d(ctx, s->be, at, pat, sizeof pat);
            if (st != GD_OK) return st;
            if (check && memcmp(got, pat, sizeof pat) != 0) {
                char b[128];
                const char *who = "workspace";
                if (s->root >= 0) {
                    int pn = p->vi[s->root].producer;
                    who = pn >= 0 ? p->pn[pn].node->op->name : "input";
                }
                return gd_fail(ctx, GD_ERR_DEVICE, "%s on %s wrote %s the end of %s %s (guard bytes changed)", who,
                               s->be->name, side ? "past" : "before", s->root >= 0 ? "its output" : "a workspace",
                               s->root >= 0 ? gd_tensor_describe(p->vals[s->root], b, sizeof b) : "");
            }
        }
    }
    return GD_OK;
}

gd_status gd_program_check_guards(gd_program *p) { return guards(p->g->ctx, p, 1); }

/* The host waits for action `a`'s device work (its event, or the whole device). */
static gd_status wait_for(gd_ctx *ctx, gd_program *p, int a)
{
    gd_backend *b = p->pn[p->acts[a].pnode].be;
    void *ev = p->events[a];
    if (ev != NULL && b->dev.event_synchronize != NULL) {
        gdp_err e = {.size = sizeof e};
        uint64_t t0 = GD_UNLIKELY(ctx->prof != NULL) ? gd_prof_now() : 0;
        gdp_status s = b->dev.event_synchronize(b->plugin.backend, ev, &e);
        if (GD_UNLIKELY(ctx->prof != NULL)) gd_prof_wait(ctx->prof, b, GD_PROF_EVENT, t0);
        if (s != GDP_OK) return gd_fail(ctx, gd_status_from_plugin(s), "%s: %s", b->name, e.msg);
        return GD_OK;
    }
    return gd_backend_sync(ctx, b);
}

static gd_status kernel_failed(gd_ctx *ctx, gd_program *p, const gd_action *a, gdp_status ks, const char *msg)
{
    const gd_pnode *x = &p->pn[a->pnode];
    char sig[512];
    const gd_desc *d = &p->descs[a->desc];
    return gd_fail(ctx, gd_status_from_plugin(ks), "node %d '%s' on %s: %s: %s", x->node->id, d->node.label,
                   x->be->name, gd_pnode_sig(p, a->pnode, sig, sizeof sig), msg);
}

static gd_status launch(gd_ctx *ctx, gd_program *p, const gd_action *a)
{
    const gd_pnode *x = &p->pn[a->pnode];
    const gdp_node *node = &p->descs[a->desc].node;
    if (x->kernel == NULL) {
        gd_status st = gd_ref_launch(ctx, x->node->op, node);
        if (st != GD_OK) {
            char m[1024];
            snprintf(m, sizeof m, "%s", ctx->err);
            return gd_fail(ctx, st, "node %d '%s' on %s: %s: %s", x->node->id, node->label, x->be->name,
                           x->node->op->name, m);
        }
        return GD_OK;
    }
    gd_backend *b = x->be;
    gdp_err e = {.size = sizeof e};
    gdp_status ks = x->kernel->k.launch(b->plugin.backend, node, b->stream, &e);
    if (ks != GDP_OK) return kernel_failed(ctx, p, a, ks, e.msg);
    if (b->has_dev && b->sync_every_kernel) {
        gdp_err e2 = {.size = sizeof e2};
        gdp_status ss = b->dev.synchronize != NULL ? b->dev.synchronize(b->plugin.backend, b->stream, &e2) : GDP_OK;
        if (ss != GDP_OK) return kernel_failed(ctx, p, a, ss, e2.msg);
    }
    return GD_OK;
}

/* The slot target i is read from after a run: its root's, on the first backend holding it;
 * -1 for a leaf target (read from its own storage). */
static int target_slot(const gd_program *p, int i)
{
    if (p->targets[i]->kind != GD_V_NODE) return -1;
    int r = p->vi[p->target_val[i]].root;
    for (int b = 0; b < p->n_backends; b++) {
        int s = p->slot_of[r * p->n_backends + b];
        if (s >= 0) return s;
    }
    return -1;
}

/* Makes target i readable (gd_tensor_read) as this run's value. */
static void publish_target(gd_program *p, int i)
{
    gd_tensor *t = p->targets[i];
    int s = target_slot(p, i);
    if (s < 0) return;
    t->run_ptr = (char *)gd_slot_ptr(p, s) + p->vi[p->target_val[i]].offset * (int64_t)gdp_dtype_size(t->dtype);
    t->run_be = p->slots[s].be;
    t->run_seq = p->g->runs;
}

/* Each hook fires after the last action writing one of its targets' slots (a kernel's
 * output, or a copy into it); the hooks are then sorted by that action, stably, and that
 * action ends its executor segment. */
static void place_hooks(gd_program *p)
{
    for (int h = 0; h < p->n_hooks; h++) {
        gd_ready_hook *k = &p->hooks[h];
        k->at = -1;
        k->last = k->targets[0];
        for (int j = 0; j < k->n && k->at < p->n_acts; j++) {
            int s = target_slot(p, k->targets[j]), at = p->n_acts;
            for (int ai = p->n_acts - 1; ai >= 0 && s >= 0 && at == p->n_acts; ai--) {
                const gd_action *a = &p->acts[ai];
                if (a->kind == GD_ACT_COPY) {
                    if (a->dst == s) at = ai;
                    continue;
                }
                for (int o = 0; o < p->pn[a->pnode].node->n_out; o++)
                    if (a->out[o] == s) at = ai;
            }
            if (at > k->at) {
                k->at = at;
                k->last = k->targets[j];
            }
        }
    }
    for (int h = 1; h < p->n_hooks; h++) /* insertion sort: few hooks, and stable */
        for (int j = h; j > 0 && p->hooks[j - 1].at > p->hooks[j].at; j--) {
            gd_ready_hook tmp = p->hooks[j];
            p->hooks[j] = p->hooks[j - 1];
            p->hooks[j - 1] = tmp;
        }
    for (int a = 0; a < p->n_acts; a++) p->acts[a].hook_after = 0;
    for (int h = 0; h < p->n_hooks; h++)
        if (p->hooks[h].at < p->n_acts) p->acts[p->hooks[h].at].hook_after = 1;
}

gd_status gd_program_on_ready_all(gd_program *p, int n, gd_tensor *const *targets, gd_ready_fn fn, void *user)
{
    if (p == NULL) return GD_ERR_INVALID;
    gd_ctx *ctx = p->g->ctx;
    if (fn == NULL || n < 1 || targets == NULL)
        return gd_fail(ctx, GD_ERR_INVALID, "gd_program_on_ready: %s", fn == NULL ? "no callback" : "no target");
    int *ti = gd_malloc(sizeof *ti * (size_t)n);
    if (ti == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "gd_program_on_ready: out of memory");
    for (int j = 0; j < n; j++) {
        ti[j] = -1;
        for (int i = 0; i < p->n_targets && ti[j] < 0; i++)
            if (p->targets[i] == targets[j]) ti[j] = i;
        if (ti[j] < 0) {
            char b[128];
            gd_free(ti);
            return gd_fail(ctx, GD_ERR_INVALID, "gd_program_on_ready: not a target of the program: %s",
                           targets[j] != NULL ? gd_tensor_describe(targets[j], b, sizeof b) : "NULL");
        }
    }
    gd_ready_hook *h = gd_realloc(p->hooks, sizeof *h * ((size_t)p->n_hooks + 1));
    if (h == NULL) {
        gd_free(ti);
        return gd_fail(ctx, GD_ERR_NOMEM, "gd_program_on_ready: out of memory");
    }
    p->hooks = h;
    p->hooks[p->n_hooks++] = (gd_ready_hook){.targets = ti, .n = n, .fn = fn, .user = user, .at = p->n_acts};
    /* placed now, so that the executor's segments end where callbacks fire before the
     * program is prepared for a run */
    place_hooks(p);
    return gd_prog_resegment(p);
}

gd_status gd_program_on_ready(gd_program *p, gd_tensor *target, gd_ready_fn fn, void *user)
{
    return gd_program_on_ready_all(p, 1, &target, fn, user);
}

/* Calls the hooks not yet called whose action is at or before `done` (the last action run:
 * after a segment, its last). */
static gd_status fire_hooks(gd_program *p, int *next, int done)
{
    while (*next < p->n_hooks && p->hooks[*next].at <= done) {
        const gd_ready_hook *k = &p->hooks[(*next)++];
        for (int j = 0; j < k->n; j++) publish_target(p, k->targets[j]);
        gd_status st = k->fn(k->user, p->targets[k->last]);
        if (st != GD_OK) return st; /* with the callback's message */
    }
    return GD_OK;
}

/* The run itself; pr is the context's profile, NULL when not profiling. */
static gd_status run_actions(gd_program *p, gd_prof *pr)
{
    gd_graph *g = p->g;
    gd_ctx *ctx = g->ctx;
    for (int s = 0; s < p->n_slots; s++) {
        const gd_slot *x = &p->slots[s];
        if (x->kind != GD_SLOT_LEAF) continue;
        const gd_tensor *v = p->vals[x->root];
        if (v->kind == GD_V_INPUT && !v->written)
            return gd_fail(ctx, GD_ERR_INVALID, "run: input '%s' was never written (gd_tensor_write)", gd_tensor_name(v));
    }
    int moved = !p->bound;
    for (int b = 0; b < p->n_backends; b++) moved |= p->bound_gen[b] != g->arena[b].gen;
    if (moved) {
        /* another program of the graph grew an arena since: re-point (not re-plan) */
        uint64_t t0 = GD_UNLIKELY(pr != NULL) ? gd_prof_now() : 0;
        gd_status st = gd_prog_bind(p);
        if (GD_UNLIKELY(pr != NULL)) gd_prof_phase(pr, GD_PROF_REBIND, t0);
        if (st != GD_OK) return st;
    }
    if (ctx->guard) {
        gd_status gs = guards(ctx, p, 0);
        if (gs != GD_OK) return gs;
    }
    g->runs++; /* whatever targets of other programs held is overwritten from here */
    int next_hook = 0;
    /* Profiling: an action starts when the one before ended (one clock reading each) */
    uint64_t t0 = GD_UNLIKELY(pr != NULL) ? gd_prof_now() : 0;
    for (int ai = 0; ai < p->n_acts; ai++) {
        const gd_action *a = &p->acts[ai];
        gd_status st = GD_OK;
        for (int b = 0; a->sync_before != 0 && b < ctx->n_backends; b++)
            if ((a->sync_before & (1 << b)) && (st = gd_backend_sync(ctx, ctx->backends[b])) != GD_OK) return st;
        if (a->wait_before >= 0 && (st = wait_for(ctx, p, a->wait_before)) != GD_OK) return st;
        if (GD_UNLIKELY(pr != NULL) && (a->sync_before != 0 || a->wait_before >= 0)) t0 = gd_prof_now();
        if (a->kind == GD_ACT_COPY) {
            if ((st = copy_slots(ctx, p, a)) != GD_OK) return st;
            if (GD_UNLIKELY(pr != NULL)) t0 = gd_prof_copy(pr, p, ai, t0);
            if (next_hook < p->n_hooks && p->hooks[next_hook].at <= ai) {
                if ((st = fire_hooks(p, &next_hook, ai)) != GD_OK) return st;
                if (GD_UNLIKELY(pr != NULL)) t0 = gd_prof_now();
            }
            continue;
        }
        if (a->segment >= 0 && p->segs[a->segment].handle != NULL) {
            gd_segment_run *s = &p->segs[a->segment];
            gdp_err e = {.size = sizeof e};
            gdp_status es = s->be->exec.run(s->be->plugin.backend, s->handle, s->be->stream, &e);
            if (es != GDP_OK)
                return gd_fail(ctx, gd_status_from_plugin(es), "%s: running a segment of %d nodes: %s", s->be->name,
                               s->n_acts, e.msg);
            if (GD_UNLIKELY(pr != NULL)) t0 = gd_prof_segment(pr, p, a->segment, t0);
            ai = s->first_act + s->n_acts - 1; /* the segment's last action */
            a = &p->acts[ai];
        } else if ((st = launch(ctx, p, a)) != GD_OK) {
            return st;
        } else if (GD_UNLIKELY(pr != NULL)) {
            t0 = gd_prof_launch(pr, p, ai, t0);
        }
        if (a->record_after && p->events[ai] != NULL) {
            gd_backend *b = p->pn[a->pnode].be;
            gdp_err e = {.size = sizeof e};
            if (b->dev.event_record(b->plugin.backend, p->events[ai], b->stream, &e) != GDP_OK)
                return gd_fail(ctx, GD_ERR_DEVICE, "%s: event_record: %s", b->name, e.msg);
            if (GD_UNLIKELY(pr != NULL)) t0 = gd_prof_now();
        }
        if (next_hook < p->n_hooks && p->hooks[next_hook].at <= ai) {
            if ((st = fire_hooks(p, &next_hook, ai)) != GD_OK) return st;
            if (GD_UNLIKELY(pr != NULL)) t0 = gd_prof_now();
        }
    }
    /* bad data found by kernels that already finished on a device */
    for (int b = 0; b < ctx->n_backends; b++) {
        gd_backend *be = ctx->backends[b];
        if (!be->has_dev || be->dev.poll_error == NULL) continue;
        gdp_err e = {.size = sizeof e};
        gdp_status s = be->dev.poll_error(be->plugin.backend, &e);
        if (s != GDP_OK) return gd_fail(ctx, gd_status_from_plugin(s), "%s: %s", be->name, e.msg);
    }
    for (int i = 0; i < p->n_targets; i++) publish_target(p, i);
    return fire_hooks(p, &next_hook, p->n_acts);
}

gd_status gd_program_run(gd_program *p)
{
    if (p == NULL) return GD_ERR_INVALID;
    gd_prof *pr = p->g->ctx->prof;
    if (!GD_UNLIKELY(pr != NULL)) return run_actions(p, NULL);
    uint64_t t0 = gd_prof_now();
    gd_prof_run_begin(pr, p);
    gd_status st = run_actions(p, pr);
    gd_prof_run_end(pr, p, t0, st);
    return st;
}

gd_status gd_program_describe(const gd_program *p, void (*line)(void *, const char *), void *user)
{
    if (p == NULL) return GD_ERR_INVALID;
    gd_ctx *ctx = p->g->ctx;
    char buf[1400], sig[900];
    for (int i = 0; i < p->n_pn; i++) {
        const gd_pnode *x = &p->pn[i];
        if (!x->view) continue;
        char b[128];
        snprintf(buf, sizeof buf, "view %-4d %-8s %s -> %s", x->node->id, "", gd_pnode_sig(p, i, sig, sizeof sig),
                 gd_tensor_describe(x->node->out[0], b, sizeof b));
        if (line != NULL) line(user, buf);
        else gd_ctx_log(ctx, "%s", buf);
    }
    for (int ai = 0; ai < p->n_acts; ai++) {
        const gd_action *a = &p->acts[ai];
        if (a->kind == GD_ACT_COPY) {
            const gd_slot *s = &p->slots[a->src], *d = &p->slots[a->dst];
            const gd_tensor *v = p->vals[s->root];
            char b[128];
            snprintf(buf, sizeof buf, "copy  %s %s: %s -> %s", v->name ? v->name : "value",
                     gd_tensor_describe(v, b, sizeof b), s->be->name, d->be->name);
        } else {
            const gd_pnode *x = &p->pn[a->pnode];
            snprintf(buf, sizeof buf, "node %-4d %-8s %s%s%s", x->node->id, x->be->name,
                     gd_pnode_sig(p, a->pnode, sig, sizeof sig), x->fallback ? "  [fallback]" : "",
                     a->segment >= 0 && p->segs[a->segment].handle != NULL ? "  [segment]" : "");
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
    if (src == NULL && bytes > 0) return gd_fail(ctx, GD_ERR_INVALID, "write '%s': the source is NULL", gd_tensor_name(t));
    if (t->kind == GD_V_NODE)
        return gd_fail(ctx, GD_ERR_INVALID,
                       "write: %s is computed by an op; only inputs, parameters and states can be written",
                       gd_tensor_describe(t, b, sizeof b));
    if (bytes != gd_value_bytes(t))
        return gd_fail(ctx, GD_ERR_INVALID, "write '%s': %zu bytes given, %s holds %zu", gd_tensor_name(t), bytes,
                       gd_tensor_describe(t, b, sizeof b), gd_value_bytes(t));
    if (t->data == NULL) {
        gd_status s = gd_leaf_storage(t);
        if (s != GD_OK) return s;
    }
    uint64_t t0 = GD_UNLIKELY(ctx->prof != NULL) ? gd_prof_now() : 0;
    gd_status s = gd_backend_h2d(ctx, t->home, t->data, src, bytes);
    if (GD_UNLIKELY(ctx->prof != NULL)) gd_prof_transfer(ctx->prof, t, 1, bytes, t0);
    if (s == GD_OK) t->written = 1;
    return s;
}

/* f32, f16 and bf16 element i of p as a float */
static float float_at(gd_dtype dt, const unsigned char *p, size_t i)
{
    if (dt == GD_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return dt == GD_BF16 ? gdp_bf16_to_f32(h) : gdp_f16_to_f32(h);
}

gd_status gd_tensor_write_as(gd_tensor *t, gd_dtype src_dtype, const void *src, size_t bytes)
{
    if (t == NULL) return GD_ERR_INVALID;
    gd_dtype to = gd_tensor_dtype(t);
    if (src_dtype == to) return gd_tensor_write(t, src, bytes);
    gd_ctx *ctx = t->g->ctx;
    int from_float = src_dtype == GD_F32 || src_dtype == GD_F16 || src_dtype == GD_BF16;
    int to_float = to == GD_F32 || to == GD_F16 || to == GD_BF16;
    if (!from_float || !to_float)
        return gd_fail(ctx, GD_ERR_INVALID, "write '%s': %s values cannot be converted to %s", gd_tensor_name(t),
                       gd_dtype_name(src_dtype), gd_dtype_name(to));
    size_t n = (size_t)gd_tensor_numel(t), in = gd_dtype_size(src_dtype), out = gd_dtype_size(to);
    if (src == NULL || bytes != n * in)
        return gd_fail(ctx, GD_ERR_INVALID, "write '%s': %zu bytes of %s given, %zu values wanted", gd_tensor_name(t),
                       bytes, gd_dtype_name(src_dtype), n);
    unsigned char *buf = gd_malloc(n * out > 0 ? n * out : 1);
    if (buf == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "write '%s': out of memory converting to %s", gd_tensor_name(t), gd_dtype_name(to));
    for (size_t i = 0; i < n; i++) {
        float f = float_at(src_dtype, src, i);
        if (to == GD_F32) {
            memcpy(buf + 4 * i, &f, 4);
        } else {
            uint16_t h = to == GD_BF16 ? gdp_f32_to_bf16(f) : gdp_f32_to_f16(f);
            memcpy(buf + 2 * i, &h, 2);
        }
    }
    gd_status s = gd_tensor_write(t, buf, n * out);
    gd_free(buf);
    return s;
}

gd_status gd_tensor_read(gd_tensor *t, void *dst, size_t bytes)
{
    if (t == NULL) return GD_ERR_INVALID;
    gd_ctx *ctx = t->g->ctx;
    char b[128];
    if (dst == NULL && bytes > 0) return gd_fail(ctx, GD_ERR_INVALID, "read '%s': the destination is NULL", gd_tensor_name(t));
    if (bytes != gd_value_bytes(t))
        return gd_fail(ctx, GD_ERR_INVALID, "read '%s': %zu bytes given, %s holds %zu", gd_tensor_name(t), bytes,
                       gd_tensor_describe(t, b, sizeof b), gd_value_bytes(t));
    if (t->kind != GD_V_NODE) {
        if (t->data == NULL && t->kind == GD_V_INPUT)
            return gd_fail(ctx, GD_ERR_INVALID, "read '%s': the input was never written", gd_tensor_name(t));
        if (t->data == NULL) { /* a parameter or state not yet stored is still all zeros */
            memset(dst, 0, bytes);
            return GD_OK;
        }
        return gd_backend_d2h(ctx, t->home, dst, t->data, bytes);
    }
    if (t->run_ptr == NULL)
        return gd_fail(ctx, GD_ERR_INVALID, "read %s: not computed yet (make it a target of a program and run it)",
                       gd_tensor_describe(t, b, sizeof b));
    if (t->run_seq != t->g->runs)
        return gd_fail(ctx, GD_ERR_INVALID,
                       "read %s: the graph ran another program since this value was computed (or compiled one that "
                       "moved its activation memory), and programs of a graph share activation memory; read it before "
                       "the next run (or make it a target of that one)",
                       gd_tensor_describe(t, b, sizeof b));
    uint64_t t0 = GD_UNLIKELY(ctx->prof != NULL) ? gd_prof_now() : 0;
    gd_status s = gd_backend_d2h(ctx, t->run_be, dst, t->run_ptr, bytes);
    if (GD_UNLIKELY(ctx->prof != NULL)) gd_prof_transfer(ctx->prof, t, 0, bytes, t0);
    return s;
}
