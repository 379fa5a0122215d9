/* autodiff.c — reverse mode: walks the forward nodes backwards from the loss and asks
 * each op's gradient rule to append nodes computing its inputs' gradients. A value used
 * several times gets the sum of the contributions, in the order they come (the reverse of
 * the uses'); runs of partial ones are held back and added together by the ops' hook, so
 * that the gradients of slices tiling a tensor make one concatenation. */
#include "core.h"

#include <stdlib.h>
#include <string.h>


gd_tensor *gd_grad(gd_graph *g, gd_tensor *t)
{
    if (g == NULL || t == NULL) return NULL;
    return t->grad;
}

gd_tensor *gd_grad_narrow(gd_graph *g, gd_tensor *t)
{
    gd_tensor *d = gd_grad(g, t);
    const gd_core_hooks *hk = g != NULL ? &g->ctx->reg->hooks : NULL;
    gd_tensor *x = d != NULL && hk->widened_from != NULL ? hk->widened_from(d) : NULL;
    return x != NULL ? x : d;
}

gd_status gd_set_grad(gd_graph *g, gd_tensor *t, gd_tensor *grad)
{
    if (g == NULL) return GD_ERR_INVALID;
    if (t == NULL || grad == NULL) return gd_fail(g->ctx, GD_ERR_INVALID, "set_grad: NULL tensor");
    if (t->g != g || grad->g != g) return gd_fail(g->ctx, GD_ERR_INVALID, "set_grad: a tensor of another graph");
    if (grad->ndim != t->ndim || memcmp(grad->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) != 0 ||
        grad->dtype != t->dtype) {
        char a[128], b[128];
        return gd_fail(g->ctx, GD_ERR_SHAPE, "set_grad '%s': gradient %s for %s", gd_tensor_name(t),
                       gd_tensor_describe(grad, a, sizeof a), gd_tensor_describe(t, b, sizeof b));
    }
    t->grad = grad;
    return GD_OK;
}

/* Contributions autodiff holds back (see the hooks partial and add_partials): per value,
 * the run of partial ones that came last, in order, in a slot per use of the value. A run
 * is added to the gradient when a contribution that is not partial comes, and once the
 * value's first use has been differentiated, after which no contribution can come. */
typedef struct held {
    int *off;              /* value v's slots are slot[off[v] .. off[v] + n[v]) */
    int *n;
    int *first_use;        /* the forward node of v's first differentiable use; -1: none */
    gd_tensor **slot;
} held;

static void held_free(held *h)
{
    gd_free(h->off);
    gd_free(h->n);
    gd_free(h->first_use);
    gd_free(h->slot);
}

static int differentiable(const gd_node *n) { return !n->is_update && n->op->grad != NULL; }

static gd_status held_init(held *h, const gd_graph *g, int n_fwd, int n_vals)
{
    memset(h, 0, sizeof *h);
    size_t uses = 0;
    for (int i = 0; i < n_fwd; i++) uses += (size_t)g->nodes[i]->n_in;
    h->off = gd_calloc((size_t)n_vals + 1, sizeof *h->off);
    h->n = gd_calloc((size_t)n_vals, sizeof *h->n);
    h->first_use = gd_calloc((size_t)n_vals, sizeof *h->first_use);
    h->slot = gd_calloc(uses + 1, sizeof *h->slot);
    if (h->off == NULL || h->n == NULL || h->first_use == NULL || h->slot == NULL) {
        held_free(h);
        return -1;
    }
    for (int v = 0; v < n_vals; v++) h->first_use[v] = -1;
    for (int i = n_fwd - 1; i >= 0; i--) {
        const gd_node *n = g->nodes[i];
        if (!differentiable(n)) continue;
        for (int k = 0; k < n->n_in; k++) {
            h->off[n->in[k]->id + 1]++;
            h->first_use[n->in[k]->id] = i;
        }
    }
    for (int v = 0; v < n_vals; v++) h->off[v + 1] += h->off[v];
    return 0;
}

/* x's held contributions, added to its gradient. */
static gd_status held_release(gd_ctx *ctx, const gd_core_hooks *hk, held *h, gd_tensor *x)
{
    int n = h->n != NULL ? h->n[x->id] : 0;
    if (n == 0) return GD_OK;
    gd_tensor **parts = h->slot + h->off[x->id];
    gd_tensor *sum = n > 1 ? hk->add_partials(x->grad, n, parts)
                     : x->grad != NULL ? hk->accumulate(x->grad, parts[0]) : parts[0];
    h->n[x->id] = 0;
    if (sum == NULL) return ctx->status ? ctx->status : GD_ERR_NOMEM;
    x->grad = sum;
    return GD_OK;
}

/* Adds din, the gradient a rule gave input x, to x's gradient: in the order contributions
 * come, partial ones held back until their run ends. */
static gd_status contribute(gd_ctx *ctx, const gd_core_hooks *hk, held *h, gd_tensor *x, gd_tensor *din)
{
    if (h->slot != NULL && hk->partial(din)) {
        h->slot[h->off[x->id] + h->n[x->id]++] = din;
        return GD_OK;
    }
    gd_status st = held_release(ctx, hk, h, x);
    if (st != GD_OK) return st;
    gd_tensor *sum = x->grad == NULL ? din : hk->accumulate(x->grad, din);
    if (sum == NULL) return ctx->status ? ctx->status : GD_ERR_NOMEM;
    x->grad = sum;
    return GD_OK;
}

/* Appends the gradient nodes of forward node n and adds what they give its inputs to
 * their gradients. */
static gd_status node_grads(gd_graph *g, gd_node *n, const char *requires, const char *needed, held *h)
{
    gd_ctx *ctx = g->ctx;
    const gd_core_hooks *hk = &ctx->reg->hooks;
    gd_tensor *dout[GDP_MAX_OUTPUTS] = {0};
    int any_out = 0, any_in = 0;
    for (int k = 0; k < n->n_out; k++) {
        dout[k] = n->out[k]->grad;
        any_out |= dout[k] != NULL;
    }
    for (int k = 0; k < n->n_in; k++) any_in |= requires[n->in[k]->id] && needed[n->in[k]->id];
    if (!any_out || !any_in) return GD_OK;
    gd_tensor *din[GDP_MAX_INPUTS] = {0};
    gdp_attrs attrs = gd_node_attrs(n);
    gd_grad_ctx gc = {.g = g, .n_in = n->n_in, .n_out = n->n_out, .in = n->in, .out = n->out,
                      .attrs = &attrs, .dout = dout, .din = din};
    gd_status st = n->op->grad(&gc);
    /* a rule fails because a builder it called failed: that builder's status is the
     * one that says what happened (out of memory, a shape) */
    if (st != GD_OK && ctx->status != GD_OK) st = ctx->status;
    if (st != GD_OK) {
        char m[1024];
        snprintf(m, sizeof m, "%s", ctx->err);
        return gd_fail(ctx, st, "backward of %s (node %d): %s", n->op->name, n->id, m);
    }
    for (int k = 0; k < n->n_in; k++) {
        gd_tensor *x = n->in[k];
        if (din[k] == NULL || !requires[x->id]) continue;
        if (din[k]->ndim != x->ndim || memcmp(din[k]->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) != 0 ||
            din[k]->dtype != x->dtype) {
            char a[128], b[128];
            return gd_fail(ctx, GD_ERR_SHAPE, "backward of %s: gradient of input %d is %s but the input is %s",
                           n->op->name, k, gd_tensor_describe(din[k], a, sizeof a), gd_tensor_describe(x, b, sizeof b));
        }
        st = contribute(ctx, hk, h, x, din[k]);
        if (st != GD_OK) return st;
    }
    return GD_OK;
}

gd_status gd_backward(gd_graph *g, gd_tensor *loss)
{
    if (g == NULL) return GD_ERR_INVALID;
    gd_ctx *ctx = g->ctx;
    if (loss == NULL) return gd_fail(ctx, GD_ERR_INVALID, "backward: the loss is NULL (an earlier builder failed)");
    if (loss->g != g) return gd_fail(ctx, GD_ERR_INVALID, "backward: the loss belongs to another graph");
    if (gd_tensor_numel(loss) != 1 || !gdp_is_float(loss->dtype)) {
        char b[128];
        return gd_fail(ctx, GD_ERR_SHAPE, "backward: the loss must be a floating scalar, got %s",
                       gd_tensor_describe(loss, b, sizeof b));
    }
    if (g->backward_done) return gd_fail(ctx, GD_ERR_INVALID, "backward: already appended for this graph");
    const gd_core_hooks *hk = &ctx->reg->hooks;
    if (hk->accumulate == NULL || hk->ones_like == NULL)
        return gd_fail(ctx, GD_ERR_UNSUPPORTED, "backward: the ops that sum and seed gradients are not registered");

    int n_fwd = g->n_nodes, n_vals = g->n_values;
    /* requires[v]: value v depends on something differentiable (a float leaf). */
    char *requires = gd_calloc((size_t)n_vals, 1), *needed = gd_calloc((size_t)n_vals, 1);
    if (requires == NULL || needed == NULL) {
        gd_free(requires);
        gd_free(needed);
        return gd_fail(ctx, GD_ERR_NOMEM, "backward: out of memory");
    }
    for (int v = 0; v < n_vals; v++) {
        gd_tensor *t = g->values[v];
        if (t->kind == GD_V_PARAM || t->kind == GD_V_INPUT) requires[v] = (char)gdp_is_float(t->dtype);
    }
    for (int i = 0; i < n_fwd; i++) {
        gd_node *n = g->nodes[i];
        if (!differentiable(n)) continue;
        int any = 0;
        for (int k = 0; k < n->n_in; k++) any |= requires[n->in[k]->id];
        for (int k = 0; k < n->n_out; k++) requires[n->out[k]->id] = (char)(any && gdp_is_float(n->out[k]->dtype));
    }
    /* needed[v]: the loss depends on v. */
    needed[loss->id] = 1;
    for (int i = n_fwd - 1; i >= 0; i--) {
        gd_node *n = g->nodes[i];
        if (n->is_update) continue;
        int any = 0;
        for (int k = 0; k < n->n_out; k++) any |= needed[n->out[k]->id];
        if (any)
            for (int k = 0; k < n->n_in; k++) needed[n->in[k]->id] = 1;
    }
    if (!requires[loss->id]) {
        gd_free(requires);
        gd_free(needed);
        return gd_fail(ctx, GD_ERR_INVALID, "backward: the loss does not depend on any parameter or float input");
    }

    held h = {0};
    if (hk->partial != NULL && hk->add_partials != NULL && held_init(&h, g, n_fwd, n_vals) != 0) {
        gd_free(requires);
        gd_free(needed);
        return gd_fail(ctx, GD_ERR_NOMEM, "backward: out of memory");
    }
    gd_status st = GD_OK;
    loss->grad = hk->ones_like(loss);
    if (loss->grad == NULL) st = ctx->status ? ctx->status : GD_ERR_NOMEM;
    for (int i = n_fwd - 1; i >= 0 && st == GD_OK; i--) {
        gd_node *n = g->nodes[i];
        if (!differentiable(n)) continue;
        st = node_grads(g, n, requires, needed, &h);
        // node i was the first use of these inputs: every contribution to them is in
        for (int k = 0; k < n->n_in && st == GD_OK && h.first_use != NULL; k++)
            if (h.first_use[n->in[k]->id] == i) st = held_release(ctx, hk, &h, n->in[k]);
    }
    held_free(&h);
    gd_free(requires);
    gd_free(needed);
    if (st == GD_OK) g->backward_done = 1;
    return st;
}
