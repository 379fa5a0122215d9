/* plan.c — the actions a run performs, the memory they use, and the descriptors kernels
 * see: the actions, memory, describe, segments and bind phases of compile.c.
 *
 * Memory. Each root a program computes gets a slot on every backend that holds it (where
 * it is produced, and a mirror where another backend reads it), with the range of actions
 * it must survive. Slots of one backend are given offsets in the graph's arena there, so
 * that two slots share bytes only when their lifetimes do not overlap (largest first,
 * each at the lowest offset free for its whole lifetime). Workspaces that kernels declare
 * and host staging for copies between two devices are slots like the others, alive for
 * one action. The arena is shared by every program of the graph and grows here, at
 * compile time, never during a run. */
#include "program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GD_SLOT_ALIGN 256 /* what every device here wants for vector loads and tensor cores */

static int add_slot(gd_program *p, int root, gd_backend *be, size_t bytes, int kind)
{
    if (p->n_slots == p->cap_slots) {
        int c = p->cap_slots ? p->cap_slots * 2 : 64;
        gd_slot *s = gd_realloc(p->slots, sizeof *s * (size_t)c);
        if (s == NULL) return -1;
        p->slots = s;
        p->cap_slots = c;
    }
    gd_slot *s = &p->slots[p->n_slots];
    memset(s, 0, sizeof *s);
    s->root = root;
    s->be = be;
    s->bytes = bytes;
    s->kind = kind;
    s->first = s->last = -1;
    if (root >= 0 && kind != GD_SLOT_WORKSPACE) p->slot_of[root * p->n_backends + be->index] = p->n_slots;
    return p->n_slots++;
}

static gd_action *add_act(gd_program *p)
{
    if (p->n_acts == p->cap_acts) {
        int c = p->cap_acts ? p->cap_acts * 2 : 64;
        gd_action *a = gd_realloc(p->acts, sizeof *a * (size_t)c);
        if (a == NULL) return NULL;
        p->acts = a;
        p->cap_acts = c;
    }
    gd_action *a = &p->acts[p->n_acts++];
    memset(a, 0, sizeof *a);
    a->ws = a->staging = a->segment = a->wait_before = a->desc = -1;
    return a;
}

static void touch(gd_program *p, int s, int act)
{
    if (s < 0) return;
    if (p->slots[s].first < 0 || act < p->slots[s].first) p->slots[s].first = act;
    if (act > p->slots[s].last) p->slots[s].last = act;
}

static int is_leaf(const gd_tensor *v) { return v->kind != GD_V_NODE; }

/* The backend where root r's current bytes are made: a leaf's home, else the backend of
 * the node producing it. */
static gd_backend *root_home(const gd_program *p, int r)
{
    const gd_tensor *t = p->vals[r];
    if (is_leaf(t)) return t->home;
    int pn = p->vi[r].producer;
    return pn >= 0 ? p->pn[pn].be : NULL;
}

/* The slot through which backend `be` reads root r, adding a copy from r's home when
 * needed. Host-side backends read host-visible device memory in place. */
static int reader_slot(gd_program *p, int r, gd_backend *be)
{
    int nb = p->n_backends;
    int s = p->slot_of[r * nb + be->index];
    if (s >= 0) return s;
    gd_backend *home = root_home(p, r);
    int hs = home != NULL ? p->slot_of[r * nb + home->index] : -1;
    if (hs < 0) return -2; /* nothing made it: a bug upstream */
    if (!be->has_dev && home->host_visible) return hs;
    s = add_slot(p, r, be, p->slots[hs].bytes, GD_SLOT_PLANNED);
    gd_action *a = s < 0 ? NULL : add_act(p);
    if (a == NULL) return -1;
    a->kind = GD_ACT_COPY;
    a->src = hs;
    a->dst = s;
    int ai = p->n_acts - 1;
    if (home->has_dev && be->has_dev) {
        /* two devices: through a host buffer planned for this copy */
        a->staging = add_slot(p, -1, p->g->ctx->backends[0], p->slots[hs].bytes, GD_SLOT_WORKSPACE);
        if (a->staging < 0) return -1;
        touch(p, a->staging, ai);
    }
    touch(p, hs, ai);
    touch(p, s, ai);
    return s;
}

/* Descriptor of pnode x's node as its kernel will see it (data pointers bound later). */
static void fill_desc(gd_program *p, const gd_pnode *x, gd_desc *d)
{
    const gd_node *n = x->node;
    memset(d, 0, sizeof *d);
    for (int i = 0; i < n->n_in; i++) {
        d->t[i] = gd_value_desc(n->in[i], NULL);
        memcpy(d->t[i].stride, p->vi[n->in[i]->id].stride, sizeof d->t[i].stride);
        d->in[i] = &d->t[i];
    }
    for (int k = 0; k < n->n_out; k++) {
        d->t[n->n_in + k] = gd_value_desc(n->out[k], NULL);
        d->out[k] = &d->t[n->n_in + k];
    }
    d->node = (gdp_node){.size = sizeof(gdp_node), .op = n->op->name, .n_in = n->n_in, .n_out = n->n_out,
                         .in = d->in, .out = d->out, .attrs = gd_node_attrs(n), .id = n->id};
    d->node.label = gd_node_label(n, d->label, sizeof d->label);
    if (d->node.label != d->label) {
        snprintf(d->label, sizeof d->label, "%s", d->node.label);
        d->node.label = d->label;
    }
}

static size_t workspace_bytes(gd_program *p, const gd_pnode *x)
{
    gd_desc d;
    fill_desc(p, x, &d);
    if (x->kernel == NULL) return gd_ref_workspace(x->node->op, &d.node);
    if (x->kernel->k.workspace == NULL) return 0;
    return x->kernel->k.workspace(x->be->plugin.backend, &d.node);
}

/* last[r]: the last node (pnode index) reading root r, or p->n_pn for the roots of
 * targets (read after the run); -1 when nothing reads it. NULL when out of memory. */
static int *last_readers(const gd_program *p)
{
    int *last = gd_malloc(sizeof(int) * ((size_t)p->n_vals + 1));
    if (last == NULL) return NULL;
    for (int v = 0; v <= p->n_vals; v++) last[v] = -1;
    for (int i = 0; i < p->n_pn; i++) {
        if (p->pn[i].view) continue;
        const gd_node *n = p->pn[i].node;
        for (int k = 0; k < n->n_in; k++) last[p->vi[n->in[k]->id].root] = i;
    }
    for (int i = 0; i < p->n_targets; i++) last[p->vi[p->target_val[i]].root] = p->n_pn;
    return last;
}

/* The input whose slot node i's output 0 may take (its op's `reuse`), or -1: the input is
 * a whole buffer of a kernel's making (not a leaf, nor an update's new version; reshaped,
 * perhaps, but all of it in order), of the output's dtype and size, no other input of the
 * node reads it, and no later node nor the caller does. ins: the node's input slots on its
 * backend. */
static int reusable_input(const gd_program *p, int i, const int *ins, const int *last_read)
{
    const gd_node *n = p->pn[i].node;
    int a = n->op->reuse - 1;
    if (a < 0 || a >= n->n_in || n->is_update) return -1;
    const gd_tensor *in = n->in[a], *out = n->out[0];
    const gd_vinfo *vi = &p->vi[in->id];
    int r = vi->root;
    if (!vi->contiguous || vi->offset != 0 || gd_value_bytes(p->vals[r]) != gd_value_bytes(in))
        return -1;
    if (last_read[r] != i || is_leaf(p->vals[r]) || p->slots[ins[a]].kind != GD_SLOT_PLANNED ||
        p->slots[ins[a]].root != r)
        return -1;
    int pn = p->vi[r].producer;
    if (pn < 0 || p->pn[pn].node->is_update) return -1;
    if (in->dtype != out->dtype || gd_value_bytes(in) != gd_value_bytes(out)) return -1;
    for (int k = 0; k < n->n_in; k++)
        if (k != a && p->vi[n->in[k]->id].root == r) return -1;
    return a;
}

static gd_status kernel_actions(gd_program *p, const int *last_read);

gd_status gd_prog_actions(gd_program *p)
{
    gd_graph *g = p->g;
    gd_ctx *ctx = g->ctx;
    int nb = p->n_backends;
    size_t cells;
    if (gd_mul_size((size_t)p->n_vals + 1, (size_t)nb, &cells) != 0 ||
        (p->slot_of = gd_malloc(sizeof(int) * cells)) == NULL)
        return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
    for (size_t i = 0; i < cells; i++) p->slot_of[i] = -1;

    /* Leaves read by the program get storage now (gd_prog_plan_memory), so that nothing
     * is allocated when it runs. */
    char *used = gd_calloc((size_t)p->n_vals + 1, 1);
    if (used == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
    for (int i = 0; i < p->n_pn; i++)
        for (int k = 0; k < p->pn[i].node->n_in; k++) used[p->vi[p->pn[i].node->in[k]->id].root] = 1;
    for (int i = 0; i < p->n_targets; i++) used[p->vi[p->target_val[i]].root] = 1;
    gd_status st = GD_OK;
    for (int v = 0; v < p->n_vals && st == GD_OK; v++) {
        const gd_tensor *t = p->vals[v];
        if (!used[v] || !is_leaf(t)) continue;
        if (add_slot(p, v, t->home, gd_value_bytes(t), GD_SLOT_LEAF) < 0) st = gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
    }
    gd_free(used);
    if (st != GD_OK) return st;
    int *last_read = last_readers(p);
    if (last_read == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
    st = kernel_actions(p, last_read);
    gd_free(last_read);
    if (st != GD_OK) return st;
    /* Targets survive the run. */
    for (int i = 0; i < p->n_targets; i++) {
        int r = p->vi[p->target_val[i]].root;
        for (int b = 0; b < nb; b++) {
            int s = p->slot_of[r * nb + b];
            if (s >= 0) p->slots[s].last = p->n_acts;
        }
    }
    return GD_OK;
}

/* An action a node, in program order, with the copies its inputs and updates need. */
static gd_status kernel_actions(gd_program *p, const int *last_read)
{
    gd_ctx *ctx = p->g->ctx;
    int nb = p->n_backends;
    /* last[b]: the last action that put work on device backend b; a host kernel reading
     * that device's memory in place waits for it (an event, not a full synchronize). With
     * no such action yet in this run, what it reads may still be written by device work
     * queued before the run began (an in-place update of the run before, another program
     * of the graph), which no event of this program marks: the first host kernel to read
     * it synchronizes that device. */
    int last_dev[GD_MAX_BACKENDS], synced[GD_MAX_BACKENDS];
    for (int b = 0; b < nb; b++) last_dev[b] = -1, synced[b] = 0;
    for (int i = 0; i < p->n_pn; i++) {
        gd_pnode *x = &p->pn[i];
        if (x->view) continue;
        gd_node *n = x->node;
        int ins[GDP_MAX_INPUTS], wait = -1, sync = 0;
        for (int k = 0; k < n->n_in; k++) {
            int r = p->vi[n->in[k]->id].root;
            ins[k] = reader_slot(p, r, x->be);
            if (ins[k] == -2) return gd_fail(ctx, GD_ERR_INVALID, "compile: %s reads a value nothing produces", n->op->name);
            if (ins[k] < 0) return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
            gd_backend *hb = p->slots[ins[k]].be;
            if (x->be->has_dev || !hb->has_dev) continue;
            if (last_dev[hb->index] > wait) wait = last_dev[hb->index];
            if (last_dev[hb->index] < 0 && !synced[hb->index]) {
                sync |= 1 << hb->index;
                synced[hb->index] = 1;
            }
        }
        gd_action *act = add_act(p);
        if (act == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
        int ai = p->n_acts - 1;
        act->kind = GD_ACT_KERNEL;
        act->pnode = i;
        act->wait_before = wait;
        act->sync_before = sync;
        if (wait >= 0) p->acts[wait].record_after = 1;
        for (int k = 0; k < n->n_in; k++) {
            act->in[k] = ins[k];
            touch(p, ins[k], ai);
        }
        for (int k = 0; k < n->n_out; k++) {
            int v = n->out[k]->id;
            int a = n->is_update ? n->op->inplace[k] : -1;
            if (a < 0 && k == 0) a = reusable_input(p, i, ins, last_read);
            int s;
            if (a >= 0) {
                /* in place, or over an input read for the last time: the output shares the
                 * input's storage on this backend */
                s = ins[a];
                p->slot_of[v * nb + x->be->index] = s;
            } else {
                s = add_slot(p, v, x->be, gd_value_bytes(n->out[k]), GD_SLOT_PLANNED);
                if (s < 0) return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
            }
            p->acts[ai].out[k] = s;
            touch(p, s, ai);
        }
        size_t ws = workspace_bytes(p, x);
        if (ws > 0) {
            gd_backend *wb = x->kernel == NULL ? ctx->backends[0] : x->be;
            int s = add_slot(p, -1, wb, ws, GD_SLOT_WORKSPACE);
            if (s < 0) return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
            p->acts[ai].ws = s;
            touch(p, s, ai);
        }
        if (x->be->has_dev) last_dev[x->be->index] = ai;
        /* an update written into a mirror goes back to the leaf's home */
        for (int k = 0; k < n->n_out; k++) {
            int a = n->is_update ? n->op->inplace[k] : -1;
            if (a < 0) continue;
            int r = p->vi[n->in[a]->id].root;
            const gd_tensor *leafv = p->vals[r];
            int s = p->acts[ai].out[k];
            while (!is_leaf(leafv) && leafv->node != NULL && leafv->node->is_update) {
                /* an update of an update: the leaf is further up */
                const gd_node *u = leafv->node;
                int ua = u->op->inplace[leafv->out_index];
                r = p->vi[u->in[ua]->id].root;
                leafv = p->vals[r];
            }
            if (!is_leaf(leafv) || p->slots[s].be == leafv->home) continue;
            int hs = p->slot_of[r * nb + leafv->home->index];
            gd_action *c = add_act(p);
            if (c == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
            c->kind = GD_ACT_COPY;
            c->src = s;
            c->dst = hs;
            touch(p, s, p->n_acts - 1);
            touch(p, hs, p->n_acts - 1);
            p->slot_of[n->out[k]->id * nb + leafv->home->index] = hs;
            if (p->slots[s].be->has_dev && leafv->home->has_dev) {
                c->staging = add_slot(p, -1, ctx->backends[0], p->slots[s].bytes, GD_SLOT_WORKSPACE);
                if (c->staging < 0) return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
                touch(p, c->staging, p->n_acts - 1);
            }
        }
    }
    return GD_OK;
}

/* ---- memory -------------------------------------------------------------------------- */

static size_t align_up(size_t x) { return (x + GD_SLOT_ALIGN - 1) & ~(size_t)(GD_SLOT_ALIGN - 1); }

static int by_size_desc(const void *a, const void *b)
{
    const gd_slot *x = *(gd_slot *const *)a, *y = *(gd_slot *const *)b;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    return x->first - y->first;
}

static double gib(size_t b) { return (double)b / (1024.0 * 1024 * 1024); }

/* Offsets for backend b's slots; returns the bytes needed. */
static gd_status place_offsets(gd_program *p, gd_backend *b, size_t *need)
{
    gd_ctx *ctx = p->g->ctx;
    int n = 0;
    for (int s = 0; s < p->n_slots; s++) n += p->slots[s].be == b && p->slots[s].kind != GD_SLOT_LEAF;
    *need = 0;
    if (n == 0) return GD_OK;
    gd_slot **order = gd_malloc(sizeof *order * (size_t)n);
    if (order == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
    n = 0;
    for (int s = 0; s < p->n_slots; s++)
        if (p->slots[s].be == b && p->slots[s].kind != GD_SLOT_LEAF) order[n++] = &p->slots[s];
    size_t top = 0;
    if (ctx->guard) {
        /* the sweep: every slot its own bytes, with guard bytes around it */
        top = GD_GUARD_BYTES;
        for (int i = 0; i < n; i++) {
            order[i]->offset = top;
            top += align_up(order[i]->bytes + 2 * GD_GUARD_BYTES);
        }
    } else {
        qsort(order, (size_t)n, sizeof *order, by_size_desc);
        for (int i = 0; i < n; i++) {
            gd_slot *s = order[i];
            size_t size = align_up(s->bytes ? s->bytes : 1), off = 0;
            /* the lowest offset where s fits beside every placed slot alive at its time */
            for (int moved = 1; moved;) {
                moved = 0;
                for (int j = 0; j < i; j++) {
                    gd_slot *o = order[j];
                    if (o->last < s->first || s->last < o->first) continue;
                    size_t osz = align_up(o->bytes ? o->bytes : 1);
                    if (off < o->offset + osz && o->offset < off + size) {
                        off = o->offset + osz;
                        moved = 1;
                    }
                }
            }
            s->offset = off;
            if (off + size > top) top = off + size;
        }
    }
    gd_free(order);
    *need = top;
    return GD_OK;
}

gd_status gd_prog_plan_memory(gd_program *p)
{
    gd_graph *g = p->g;
    gd_ctx *ctx = g->ctx;
    size_t grow[GD_MAX_BACKENDS] = {0};
    for (int b = 0; b < p->n_backends; b++) {
        gd_status st = place_offsets(p, ctx->backends[b], &p->planned[b]);
        if (st != GD_OK) return st;
        if (p->planned[b] > g->arena[b].bytes) grow[b] = p->planned[b] - g->arena[b].bytes;
    }
    /* everything this needs that is not there yet, checked before any of it is taken */
    gd_status st = gd_leaves_reserve(g, "compile", grow);
    if (st != GD_OK) return st;
    for (int s = 0; s < p->n_slots; s++) {
        gd_slot *x = &p->slots[s];
        if (x->kind != GD_SLOT_LEAF) continue;
        if ((st = gd_leaf_storage(p->vals[x->root])) != GD_OK) return st;
        x->leaf_ptr = p->vals[x->root]->data;
    }
    for (int b = 0; b < p->n_backends; b++) {
        gd_backend *be = ctx->backends[b];
        size_t need = p->planned[b];
        gd_arena *a = &g->arena[b];
        if (need <= a->bytes) continue;
        /* The arena grows: what it holds is activations of earlier runs, never needed
         * again. Targets of those runs pointed into it: counting the move as a run makes
         * gd_tensor_read refuse them as stale instead of reading freed memory. */
        if (a->ptr != NULL) {
            gd_backend_free(be, a->ptr, a->bytes);
            g->runs++;
        }
        a->ptr = NULL;
        a->bytes = 0;
        a->gen++;
        st = gd_backend_alloc(ctx, be, need, &a->ptr);
        if (st != GD_OK) {
            char m[1024];
            snprintf(m, sizeof m, "%s", ctx->err);
            return gd_fail(ctx, st, "compile: activation memory of %.2f GiB on %s: %s", gib(need), be->name, m);
        }
        a->bytes = need;
    }
    return GD_OK;
}

void *gd_slot_ptr(const gd_program *p, int s)
{
    const gd_slot *x = &p->slots[s];
    if (x->kind == GD_SLOT_LEAF) return x->leaf_ptr;
    return (char *)p->g->arena[x->be->index].ptr + x->offset;
}

/* ---- descriptors and segments ----------------------------------------------------------- */

gd_status gd_prog_describe_nodes(gd_program *p)
{
    int n = 0;
    for (int a = 0; a < p->n_acts; a++) n += p->acts[a].kind == GD_ACT_KERNEL;
    p->descs = gd_calloc((size_t)n + 1, sizeof *p->descs);
    p->events = gd_calloc((size_t)p->n_acts + 1, sizeof *p->events);
    if (p->descs == NULL || p->events == NULL) return gd_fail(p->g->ctx, GD_ERR_NOMEM, "compile: out of memory");
    for (int a = 0; a < p->n_acts; a++) {
        gd_action *act = &p->acts[a];
        if (act->kind != GD_ACT_KERNEL) continue;
        act->desc = p->n_descs++;
        fill_desc(p, &p->pn[act->pnode], &p->descs[act->desc]);
    }
    /* events where a host kernel waits for device work */
    for (int a = 0; a < p->n_acts; a++) {
        if (!p->acts[a].record_after) continue;
        gd_backend *b = p->pn[p->acts[a].pnode].be;
        if (b->dev.event_create == NULL || b->dev.event_record == NULL) continue;
        gdp_err e = {.size = sizeof e};
        if (b->dev.event_create(b->plugin.backend, &p->events[a], &e) != GDP_OK)
            return gd_fail(p->g->ctx, GD_ERR_DEVICE, "%s: event_create: %s", b->name, e.msg);
    }
    return GD_OK;
}

gd_status gd_prog_segments(gd_program *p)
{
    gd_ctx *ctx = p->g->ctx;
    p->segs = gd_calloc((size_t)p->n_acts + 1, sizeof *p->segs);
    if (p->segs == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
    const char *env = getenv("GRADUS_EXECUTOR");
    int off = env != NULL && strcmp(env, "0") == 0;
    for (int a = 0; a < p->n_acts;) {
        gd_action *act = &p->acts[a];
        gd_backend *b = act->kind == GD_ACT_KERNEL ? p->pn[act->pnode].be : NULL;
        if (b == NULL || !b->has_exec || off || b->sync_every_kernel) {
            a++;
            continue;
        }
        int end = a;
        while (end < p->n_acts && p->acts[end].kind == GD_ACT_KERNEL && p->pn[p->acts[end].pnode].be == b) {
            end++;
            if (p->acts[end - 1].record_after || p->acts[end - 1].hook_after) break;
        }
        gd_segment_run *s = &p->segs[p->n_segs];
        s->be = b;
        s->first_act = a;
        s->n_acts = end - a;
        s->nodes = gd_malloc(sizeof *s->nodes * (size_t)s->n_acts);
        s->launch = gd_malloc(sizeof *s->launch * (size_t)s->n_acts);
        if (s->nodes == NULL || s->launch == NULL) {
            gd_free((void *)s->nodes);
            gd_free(s->launch);
            s->nodes = NULL;
            s->launch = NULL;
            return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
        }
        for (int i = 0; i < s->n_acts; i++) {
            gd_action *x = &p->acts[a + i];
            x->segment = p->n_segs;
            s->nodes[i] = &p->descs[x->desc].node;
            s->launch[i] = p->pn[x->pnode].kernel->k.launch;
        }
        p->n_segs++;
        a = end;
    }
    return GD_OK;
}

gd_status gd_prog_resegment(gd_program *p)
{
    for (int s = 0; s < p->n_segs; s++) {
        gd_segment_run *x = &p->segs[s];
        if (x->handle != NULL && x->be->exec.release != NULL) x->be->exec.release(x->be->plugin.backend, x->handle);
        gd_free(x->nodes);
        gd_free(x->launch);
    }
    gd_free(p->segs);
    p->segs = NULL;
    p->n_segs = 0;
    for (int a = 0; a < p->n_acts; a++) p->acts[a].segment = -1;
    p->bound = 0;         /* the next run prepares the new segments */
    p->prof_session = 0;  /* and a profile takes a new snapshot of the program */
    return gd_prog_segments(p);
}

void gd_prog_unbind(gd_program *p)
{
    for (int s = 0; s < p->n_segs; s++) {
        gd_segment_run *x = &p->segs[s];
        if (x->handle != NULL && x->be->exec.release != NULL) x->be->exec.release(x->be->plugin.backend, x->handle);
        x->handle = NULL;
    }
    for (int a = 0; p->events != NULL && a < p->n_acts; a++) {
        if (p->events[a] == NULL) continue;
        gd_backend *b = p->pn[p->acts[a].pnode].be;
        gdp_err e = {.size = sizeof e};
        if (b->dev.event_destroy != NULL) b->dev.event_destroy(b->plugin.backend, p->events[a], &e);
        p->events[a] = NULL;
    }
    p->bound = 0;
}

gd_status gd_prog_bind(gd_program *p)
{
    gd_ctx *ctx = p->g->ctx;
    /* executor handles point at old addresses: let them go first */
    for (int s = 0; s < p->n_segs; s++) {
        gd_segment_run *x = &p->segs[s];
        if (x->handle != NULL && x->be->exec.release != NULL) x->be->exec.release(x->be->plugin.backend, x->handle);
        x->handle = NULL;
    }
    for (int a = 0; a < p->n_acts; a++) {
        gd_action *act = &p->acts[a];
        if (act->kind != GD_ACT_KERNEL) continue;
        gd_desc *d = &p->descs[act->desc];
        const gd_node *n = p->pn[act->pnode].node;
        for (int i = 0; i < n->n_in; i++) {
            const gd_vinfo *vi = &p->vi[n->in[i]->id];
            d->t[i].data = (char *)gd_slot_ptr(p, act->in[i]) + vi->offset * (int64_t)gdp_dtype_size(d->t[i].dtype);
        }
        for (int k = 0; k < n->n_out; k++) d->t[n->n_in + k].data = gd_slot_ptr(p, act->out[k]);
        d->node.workspace = act->ws >= 0 ? gd_slot_ptr(p, act->ws) : NULL;
        d->node.workspace_bytes = act->ws >= 0 ? p->slots[act->ws].bytes : 0;
    }
    for (int b = 0; b < p->n_backends; b++) p->bound_gen[b] = p->g->arena[b].gen;
    for (int s = 0; s < p->n_segs; s++) {
        gd_segment_run *x = &p->segs[s];
        if (x->be->exec.prepare == NULL) continue;
        gdp_segment seg = {.size = sizeof seg, .n_nodes = x->n_acts, .nodes = x->nodes,
                           .launch = (const gdp_launch_fn *)x->launch, .stream = x->be->stream};
        gdp_err e = {.size = sizeof e};
        gdp_status st = x->be->exec.prepare(x->be->plugin.backend, &seg, &x->handle, &e);
        if (st == GDP_ERR_UNSUPPORTED) {
            x->handle = NULL; /* launched node by node */
            continue;
        }
        if (st != GDP_OK) {
            x->handle = NULL;
            return gd_fail(ctx, gd_status_from_plugin(st), "%s executor: preparing %d nodes: %s", x->be->name,
                           x->n_acts, e.msg);
        }
    }
    p->bound = 1;
    return GD_OK;
}
