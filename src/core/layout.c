/* layout.c — the layout phase: where each value's elements are, and where each node runs.
 *
 * Walking the program in order:
 *  - a view op (reshape, permute, slice, expand) gets no kernel: its output is a view of
 *    its input's buffer, with the strides and offset its view rule gives. When the rule
 *    cannot express it (a reshape of a transposed value), the input is made contiguous
 *    first and the view is of that copy;
 *  - any other node goes to the preferred backend's kernel for its key (op and operand
 *    dtypes) if that kernel's supports() takes it, else the next backend down in
 *    priority, else the reference. A kernel that did not register GDP_KERNEL_STRIDED is
 *    asked about (and given) contiguous inputs, and a contiguous copy of each strided
 *    input is inserted in front of it; one that did is asked about the strided node and
 *    gets it as it is when it says yes.
 * Copies the planner inserts are nodes of the registry's contiguous op, placed like any
 * other, with values of the program's own. */
#include "program.h"

#include <stdio.h>
#include <string.h>

/* Backends to try for a node, in order: the preferred one, then lower-priority ones by
 * priority, the reference last. Backends above the preferred one are skipped: choosing
 * a backend means "at most this one". */
static int candidates(gd_ctx *ctx, gd_backend **order)
{
    gd_backend *pref = ctx->backends[ctx->preferred];
    int no = 0;
    order[no++] = pref;
    for (;;) {
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
    if (!pref->is_ref) order[no++] = ctx->backends[0];
    return no;
}

/* The node as supports() sees it: shapes, dtypes, strides (or contiguous ones). */
typedef struct view_desc {
    gdp_tensor t[GDP_MAX_INPUTS + GDP_MAX_OUTPUTS];
    const gdp_tensor *in[GDP_MAX_INPUTS];
    const gdp_tensor *out[GDP_MAX_OUTPUTS];
    char label[96];
    gdp_node node;
} view_desc;

static void make_view(const gd_program *p, const gd_node *n, int strided, view_desc *d)
{
    for (int i = 0; i < n->n_in; i++) {
        d->t[i] = gd_value_desc(n->in[i], NULL);
        if (strided) memcpy(d->t[i].stride, p->vi[n->in[i]->id].stride, sizeof d->t[i].stride);
        d->in[i] = &d->t[i];
    }
    for (int k = 0; k < n->n_out; k++) {
        d->t[n->n_in + k] = gd_value_desc(n->out[k], NULL);
        d->out[k] = &d->t[n->n_in + k];
    }
    d->node = (gdp_node){.size = sizeof(gdp_node), .op = n->op->name, .n_in = n->n_in, .n_out = n->n_out,
                         .in = d->in, .out = d->out, .attrs = gd_node_attrs(n), .id = n->id,
                         .label = gd_node_label(n, d->label, sizeof d->label)};
}

static int strided_inputs(const gd_program *p, const gd_node *n)
{
    int mask = 0;
    for (int i = 0; i < n->n_in; i++)
        if (!p->vi[n->in[i]->id].contiguous) mask |= 1 << i;
    return mask;
}

/* Chooses the backend and kernel of a kernel node; sets contig_in to the inputs that
 * must be made contiguous for it. A copy the planner inserts to make a value contiguous
 * (as_is) must take its input as it is: only a strided kernel (or the reference) will do. */
static void place(gd_program *p, gd_pnode *x, int as_is)
{
    gd_ctx *ctx = p->g->ctx;
    gd_backend *order[GD_MAX_BACKENDS + 1];
    int no = candidates(ctx, order);
    int strided = strided_inputs(p, x->node);
    view_desc sv, cv;
    make_view(p, x->node, 1, &sv);
    make_view(p, x->node, 0, &cv);
    for (int j = 0; j < no; j++) {
        gd_backend *b = order[j];
        if (b->is_ref) {
            x->be = b;
            x->kernel = NULL;
            x->contig_in = x->node->op->ref_strided || as_is ? 0 : strided;
            return;
        }
        const gd_kernel_entry *k = gd_backend_kernel(b, x->node);
        if (k == NULL) continue;
        void *be = b->plugin.backend;
        if (strided && (k->k.flags & GDP_KERNEL_STRIDED) && (k->k.supports == NULL || k->k.supports(be, &sv.node))) {
            x->be = b, x->kernel = k, x->contig_in = 0;
            return;
        }
        if (!as_is && (k->k.supports == NULL || k->k.supports(be, &cv.node))) {
            x->be = b, x->kernel = k, x->contig_in = strided;
            return;
        }
    }
}

/* A contiguous copy of value v, as a new node of the program appended at `out`. */
static int insert_copy(gd_program *p, int v, gd_pnode *out, int *n_out)
{
    gd_graph *g = p->g;
    gd_ctx *ctx = g->ctx;
    const gd_op_def *op = ctx->reg->hooks.contiguous_op != NULL ? gd_registry_find(ctx->reg, ctx->reg->hooks.contiguous_op) : NULL;
    if (op == NULL) {
        gd_fail(ctx, GD_ERR_UNSUPPORTED, "compile: no contiguous-copy op is registered");
        return -1;
    }
    gd_tensor *src = p->vals[v];
    gd_tensor *c = gd_calloc(1, sizeof *c);
    if (c == NULL) goto oom;
    *c = (gd_tensor){.g = g, .kind = GD_V_NODE, .dtype = src->dtype, .ndim = src->ndim};
    memcpy(c->shape, src->shape, sizeof c->shape);
    int cid = gd_prog_add_value(p, c);
    if (cid < 0) {
        gd_free(c);
        goto oom;
    }
    c->id = cid;
    gd_node *n = gd_node_make(g, op, 1, &src, 0, NULL, 1, &c);
    if (n == NULL) return -1;
    gd_pnode *x = &out[(*n_out)++];
    memset(x, 0, sizeof *x);
    x->node = n;
    x->owned = 1;
    place(p, x, 1);
    p->vi[cid].producer = (int)(x - out);
    gd_backend *pref = ctx->backends[ctx->preferred];
    x->fallback = x->be != pref;
    if (x->fallback && ctx->strict) {
        char b[128];
        gd_fail(ctx, GD_ERR_STRICT, "strict mode: no %s kernel makes a contiguous copy of the strided %s (%s), it "
                "would run on %s", pref->name, gd_tensor_describe(src, b, sizeof b),
                gd_dtype_name((gd_dtype)src->dtype), x->be->name);
        return -1;
    }
    return cid;
oom:
    gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
    return -1;
}

/* The node with some inputs replaced, as a node of the program's own. */
static gd_node *rewire(gd_program *p, gd_pnode *x, const int *new_in)
{
    gd_node *n = x->node;
    gd_tensor *in[GDP_MAX_INPUTS];
    for (int i = 0; i < n->n_in; i++) in[i] = p->vals[new_in[i]];
    gd_attr a[32];
    int na = n->n_attr < 32 ? n->n_attr : 32;
    for (int k = 0; k < na; k++) {
        const gdp_attr *s = &n->attrs[k];
        memset(&a[k], 0, sizeof a[k]);
        a[k].name = s->name;
        a[k].kind = (gd_attr_kind)s->kind;
        a[k].i = s->i;
        a[k].f = s->f;
        a[k].s = s->s;
        a[k].n = s->n;
        for (int j = 0; j < s->n && j < GD_MAX_DIMS; j++) a[k].ints[j] = s->ints[j];
    }
    gd_node *m = gd_node_make(p->g, n->op, n->n_in, in, na, a, n->n_out, n->out);
    if (m == NULL) return NULL;
    m->id = n->id; /* the same node, with other operands: keep its identity */
    if (n->label != NULL) m->label = gd_strdup(n->label);
    if (x->owned) gd_node_free(n);
    x->node = m;
    x->owned = 1;
    return m;
}

/* The view an op's rule gives for output 0 of x, on input 0 as laid out; -1 if none. */
static int apply_view(gd_program *p, gd_pnode *x)
{
    gd_node *n = x->node;
    const gd_vinfo *in = &p->vi[n->in[0]->id];
    gd_shape si = gd_value_shape(n->in[0]), so = gd_value_shape(n->out[0]);
    gdp_attrs a = gd_node_attrs(n);
    gd_vinfo *out = &p->vi[n->out[0]->id];
    int64_t stride[GDP_MAX_DIMS] = {0}, off = 0;
    if (n->op->view(&a, &si, in->stride, in->offset, &so, stride, &off) != 0) return -1;
    out->root = in->root;
    out->offset = off;
    memcpy(out->stride, stride, sizeof stride);
    gdp_tensor d = gd_value_desc(n->out[0], NULL);
    memcpy(d.stride, stride, sizeof stride);
    out->contiguous = gdp_is_contiguous(&d);
    return 0;
}

gd_status gd_prog_layout(gd_program *p)
{
    gd_ctx *ctx = p->g->ctx;
    gd_backend *pref = ctx->backends[ctx->preferred];
    /* Copies can at most double the node count (one per input is bounded by inputs, so
     * size by the inputs of all nodes). */
    int cap = 1;
    for (int i = 0; i < p->n_pn; i++) cap += 1 + (p->pn[i].dead ? 0 : p->pn[i].node->n_in);
    gd_pnode *out = gd_calloc((size_t)cap, sizeof *out);
    if (out == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
    int n_out = 0, fail_at = -1;
    gd_status st = GD_OK;
    for (int i = 0; i < p->n_pn && st == GD_OK; i++) {
        fail_at = i;
        gd_pnode x = p->pn[i];
        if (x.dead) {
            if (x.owned) gd_node_free(x.node);
            continue;
        }
        gd_node *n = x.node;
        int ins[GDP_MAX_INPUTS];
        for (int k = 0; k < n->n_in; k++) ins[k] = n->in[k]->id;
        if (n->op->view != NULL && !ctx->no_views) {
            x.view = 1;
            x.be = NULL;
            if (apply_view(p, &x) != 0) {
                /* not expressible on this layout: view a contiguous copy */
                int c = insert_copy(p, ins[0], out, &n_out);
                if (c < 0 || (ins[0] = c, rewire(p, &x, ins)) == NULL || apply_view(p, &x) != 0) {
                    if (c >= 0 && ctx->err[0] == '\0')
                        gd_fail(ctx, GD_ERR_INVALID, "compile: %s cannot view a contiguous input", n->op->name);
                    st = ctx->status ? ctx->status : GD_ERR_INVALID;
                    if (x.owned) gd_node_free(x.node);
                    break;
                }
            }
            p->vi[x.node->out[0]->id].producer = n_out;
            out[n_out++] = x;
            continue;
        }
        place(p, &x, 0);
        if (x.be != pref && ctx->strict) {
            char sig[512];
            st = gd_fail(ctx, GD_ERR_STRICT, "strict mode: no %s kernel accepts %s (%s), it would run on %s",
                         pref->name, gd_pnode_sig(p, i, sig, sizeof sig),
                         gd_dtype_name((gd_dtype)gd_node_key_dtype(n)), x.be->name);
            if (x.owned) gd_node_free(x.node);
            break;
        }
        x.fallback = x.be != pref;
        if (n->is_update) {
            /* an in-place output shares its input's storage: that input must be a whole,
             * contiguous buffer (a parameter or state, or an earlier update of one) */
            for (int k = 0; k < n->n_out; k++) {
                int a = n->op->inplace[k];
                if (a < 0) continue;
                const gd_vinfo *vi = &p->vi[ins[a]];
                const gd_tensor *root = p->vals[vi->root];
                if (!vi->contiguous || vi->offset != 0 || gd_tensor_numel(root) != gd_tensor_numel(n->in[a]) ||
                    (root->kind == GD_V_NODE && (root->node == NULL || !root->node->is_update))) {
                    char b[128];
                    st = gd_fail(ctx, GD_ERR_INVALID, "%s updates %s in place, which is a view or a computed value; "
                                 "updates write parameters and states", n->op->name,
                                 gd_tensor_describe(n->in[a], b, sizeof b));
                }
            }
            if (st != GD_OK) {
                if (x.owned) gd_node_free(x.node);
                break;
            }
        }
        if (x.contig_in) {
            for (int k = 0; k < n->n_in && st == GD_OK; k++) {
                if (!(x.contig_in & (1 << k))) continue;
                int c = insert_copy(p, ins[k], out, &n_out);
                if (c < 0) st = ctx->status ? ctx->status : GD_ERR_NOMEM;
                else ins[k] = c;
            }
            if (st == GD_OK && rewire(p, &x, ins) == NULL) st = ctx->status ? ctx->status : GD_ERR_NOMEM;
            if (st != GD_OK) {
                if (x.owned) gd_node_free(x.node);
                break;
            }
        }
        for (int k = 0; k < x.node->n_out; k++) p->vi[x.node->out[k]->id].producer = n_out;
        out[n_out++] = x;
    }
    if (st != GD_OK) {
        /* owned nodes are in `out` (those moved or made so far) and in p->pn past the one
         * that failed (already freed above); the first part of p->pn moved to `out` */
        for (int i = 0; i < n_out; i++)
            if (out[i].owned) gd_node_free(out[i].node);
        gd_free(out);
        for (int i = fail_at + 1; i < p->n_pn; i++)
            if (p->pn[i].owned) gd_node_free(p->pn[i].node);
        p->n_pn = 0;
        return st;
    }
    gd_free(p->pn);
    p->pn = out;
    p->n_pn = n_out;
    p->cap_pn = cap;
    /* Targets are read contiguous: a strided target gets a copy at the end. */
    for (int i = 0; i < p->n_targets && st == GD_OK; i++) {
        int v = p->target_val[i];
        if (p->vi[v].contiguous) continue;
        if (n_out + 1 > p->cap_pn) {
            gd_pnode *bigger = gd_realloc(p->pn, sizeof *bigger * (size_t)(p->cap_pn + p->n_targets + 1));
            if (bigger == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "compile: out of memory");
            p->pn = bigger;
            p->cap_pn += p->n_targets + 1;
        }
        int c = insert_copy(p, v, p->pn, &p->n_pn);
        if (c < 0) return ctx->status ? ctx->status : GD_ERR_NOMEM;
        p->target_val[i] = c;
        n_out = p->n_pn;
    }
    return st;
}
