/* compile.c — a graph into a program, in named phases:
 *
 *   select    the nodes the targets need (and every update, with GD_COMPILE_UPDATES);
 *             a training step's copies of its parameters first
 *   passes    each backend's graph pass rewrites the program's node list (pass.c)
 *   layout    views become aliases; each node is placed on the highest-priority backend
 *             whose kernel accepts it, contiguous copies go in front of kernels that need
 *             them (layout.c)
 *   actions   buffers per backend, copies where a value crosses backends, workspaces
 *   memory    offsets in the graph's arena of each backend, grown if needed (plan.c)
 *   describe  the node descriptors kernels will see, built once
 *   segments  runs of nodes on one backend, prepared by its executor (run.c binds them)
 *
 * Everything above "run" happens here, once; a run only executes the actions. */
#include "program.h"
#include "prof/prof.h"

#include <stdio.h>
#include <string.h>

int gd_prog_add_value(gd_program *p, gd_tensor *t)
{
    if (p->n_vals == p->cap_vals) {
        int c = p->cap_vals ? p->cap_vals * 2 : 64;
        gd_tensor **v = gd_realloc(p->vals, sizeof *v * (size_t)c);
        if (v == NULL) return -1;
        p->vals = v;
        gd_vinfo *vi = gd_realloc(p->vi, sizeof *vi * (size_t)c);
        if (vi == NULL) return -1;
        p->vi = vi;
        int *r = gd_realloc(p->readers, sizeof *r * (size_t)c);
        if (r == NULL) return -1;
        p->readers = r;
        p->cap_vals = c;
    }
    int id = p->n_vals++;
    p->vals[id] = t;
    memset(&p->vi[id], 0, sizeof p->vi[id]);
    p->vi[id].root = id;
    p->vi[id].producer = -1;
    p->vi[id].contiguous = 1;
    gdp_tensor d = gd_value_desc(t, NULL);
    memcpy(p->vi[id].stride, d.stride, sizeof d.stride);
    p->readers[id] = 0;
    return id;
}

int gd_prog_add_pnode(gd_program *p, gd_node *n, int owned)
{
    if (p->n_pn == p->cap_pn) {
        int c = p->cap_pn ? p->cap_pn * 2 : 64;
        gd_pnode *a = gd_realloc(p->pn, sizeof *a * (size_t)c);
        if (a == NULL) return -1;
        p->pn = a;
        p->cap_pn = c;
    }
    gd_pnode *x = &p->pn[p->n_pn];
    memset(x, 0, sizeof *x);
    x->node = n;
    x->owned = owned;
    return p->n_pn++;
}

const char *gd_pnode_sig(const gd_program *p, int pn, char *buf, size_t cap)
{
    const gd_node *n = p->pn[pn].node;
    size_t len = (size_t)snprintf(buf, cap, "%s(", n->op->name);
    for (int i = 0; i < n->n_in && len < cap; i++) {
        char b[128];
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", gd_tensor_describe(n->in[i], b, sizeof b));
    }
    if (len < cap) snprintf(buf + len, cap - len, ")");
    return buf;
}

int gd_program_fallbacks(const gd_program *p)
{
    int n = 0;
    for (int i = 0; p != NULL && i < p->n_pn; i++) n += !p->pn[i].dead && !p->pn[i].view && p->pn[i].fallback;
    return n;
}

/* ---- phase: select ------------------------------------------------------------------- */

/* A parameter in another form (a master weight in the compute dtype), made each step. */
static int param_copy(const gd_node *n) { return n->op->param_copy && n->n_in == 1 && n->in[0]->kind == GD_V_PARAM; }

gd_status gd_prog_select(gd_program *p, int n_targets, gd_tensor *const *targets)
{
    gd_graph *g = p->g;
    gd_ctx *ctx = g->ctx;
    p->n_graph_vals = g->n_values; /* values past these are the program's own */
    for (int v = 0; v < g->n_values; v++)
        if (gd_prog_add_value(p, g->values[v]) < 0) return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
    char *need = gd_calloc((size_t)g->n_values + 1, 1);
    char *run = gd_calloc((size_t)g->n_nodes + 1, 1);
    p->targets = gd_malloc(sizeof *p->targets * (size_t)(n_targets + 1));
    p->target_val = gd_malloc(sizeof *p->target_val * (size_t)(n_targets + 1));
    gd_status st = GD_OK;
    if (need == NULL || run == NULL || p->targets == NULL || p->target_val == NULL) {
        st = gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
        goto done;
    }
    p->n_targets = n_targets;
    for (int i = 0; i < n_targets; i++) {
        p->targets[i] = targets[i];
        p->target_val[i] = targets[i]->id;
        need[targets[i]->id] = 1;
    }
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        gd_node *n = g->nodes[i];
        int want = (p->flags & GD_COMPILE_UPDATES) && n->is_update;
        for (int k = 0; k < n->n_out; k++) want |= need[n->out[k]->id];
        if (!want) continue;
        run[i] = 1;
        for (int k = 0; k < n->n_in; k++) need[n->in[k]->id] = 1;
    }
    /* A training step first makes every parameter's copy it reads (param_copy: f32
     * master weights cast to the compute dtype), then runs the rest in graph order: the
     * copies of one step stand together, where a backend may run them as one launch. The
     * memory is mostly held anyway: a weight's copy is read again by the backward's product
     * for dx (a bias's copy, which is not, is small). Only copies before the first update
     * move, so none of them reads a parameter an update has already written. */
    if (p->flags & GD_COMPILE_UPDATES)
        for (int i = 0; i < g->n_nodes && st == GD_OK; i++) {
            gd_node *n = g->nodes[i];
            if (!run[i]) continue;
            if (n->is_update) break;
            if (!param_copy(n)) continue;
            if (gd_prog_add_pnode(p, n, 0) < 0) st = gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
            run[i] = 0;
        }
    for (int i = 0; i < g->n_nodes && st == GD_OK; i++) {
        if (!run[i]) continue;
        if (gd_prog_add_pnode(p, g->nodes[i], 0) < 0) st = gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
    }
done:
    gd_free(need);
    gd_free(run);
    return st;
}

/* ---- the whole compile ------------------------------------------------------------------ */

void gd_program_free(gd_program *p)
{
    if (p == NULL) return;
    gd_prog_unbind(p);
    /* targets it computed stay readable: they live in the graph's arena, not here */
    for (int i = 0; i < p->n_pn; i++)
        if (p->pn[i].owned) gd_node_free(p->pn[i].node);
    for (int v = p->n_graph_vals; v < p->n_vals; v++) {
        if (p->vals[v] == NULL) continue;
        gd_free(p->vals[v]->name);
        gd_free(p->vals[v]);
    }
    gd_free(p->pn);
    gd_free(p->vals);
    gd_free(p->vi);
    gd_free(p->readers);
    gd_free(p->targets);
    gd_free(p->target_val);
    gd_free(p->slots);
    gd_free(p->slot_of);
    gd_free(p->acts);
    gd_free(p->descs);
    gd_free(p->events);
    for (int h = 0; h < p->n_hooks; h++) gd_free(p->hooks[h].targets);
    gd_free(p->hooks);
    for (int s = 0; s < p->n_segs; s++) {
        gd_free(p->segs[s].nodes);
        gd_free(p->segs[s].launch);
    }
    gd_free(p->segs);
    gd_graph *g = p->g;
    gd_free(p);
    gd_graph_unref(g);
}

gd_program *gd_compile(gd_graph *g, int n_targets, gd_tensor *const *targets, int flags)
{
    if (g == NULL) return NULL;
    gd_ctx *ctx = g->ctx;
    if (n_targets < 0 || (n_targets > 0 && targets == NULL)) {
        gd_fail(ctx, GD_ERR_INVALID, "compile: %d targets at %p", n_targets, (const void *)targets);
        return NULL;
    }
    for (int i = 0; i < n_targets; i++) {
        if (targets[i] == NULL) {
            if (ctx->err[0] == '\0') gd_fail(ctx, GD_ERR_INVALID, "compile: target %d is NULL", i);
            return NULL; /* an earlier builder failed; its message stands */
        }
        if (targets[i]->g != g) {
            gd_fail(ctx, GD_ERR_INVALID, "compile: target %d belongs to another graph", i);
            return NULL;
        }
    }
    gd_program *p = gd_calloc(1, sizeof *p);
    if (p == NULL) {
        gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
        return NULL;
    }
    p->g = g;
    g->refs++;
    p->flags = flags;
    p->dev = ctx->backends[ctx->preferred];
    p->n_backends = ctx->n_backends;
    /* the phases after select, in order (a profile times each: enum gd_prof_phase) */
    static gd_status (*const phases[])(gd_program *) = {gd_prog_passes,        gd_prog_layout,
                                                         gd_prog_actions,       gd_prog_plan_memory,
                                                         gd_prog_describe_nodes, gd_prog_segments,
                                                         gd_prog_bind};
    gd_prof *pr = ctx->prof;
    uint64_t t_compile = GD_UNLIKELY(pr != NULL) ? gd_prof_now() : 0;
    gd_status st = gd_prog_select(p, n_targets, targets);
    if (GD_UNLIKELY(pr != NULL)) gd_prof_phase(pr, GD_PROF_SELECT, t_compile);
    for (int i = 0; st == GD_OK && i < (int)(sizeof phases / sizeof phases[0]); i++) {
        uint64_t t0 = GD_UNLIKELY(pr != NULL) ? gd_prof_now() : 0;
        st = phases[i](p);
        if (GD_UNLIKELY(pr != NULL)) gd_prof_phase(pr, GD_PROF_PASSES + i, t0);
    }
    if (st != GD_OK) {
        if (GD_UNLIKELY(pr != NULL)) gd_prof_compiled(pr, NULL, t_compile);
        gd_program_free(p);
        return NULL;
    }
    if (GD_UNLIKELY(pr != NULL)) gd_prof_compiled(pr, p, t_compile);
    ctx->compiles++;
    if (ctx->trace) gd_program_describe(p, NULL, NULL);
    return p;
}

size_t gd_program_planned_bytes(const gd_program *p, const char *backend)
{
    if (p == NULL || backend == NULL) return 0;
    for (int b = 0; b < p->n_backends; b++)
        if (strcmp(p->g->ctx->backends[b]->name, backend) == 0) return p->planned[b];
    return 0;
}

size_t gd_graph_arena_bytes(const gd_graph *g, const char *backend)
{
    if (g == NULL || backend == NULL) return 0;
    for (int b = 0; b < g->ctx->n_backends; b++)
        if (strcmp(g->ctx->backends[b]->name, backend) == 0) return g->arena[b].bytes;
    return 0;
}
