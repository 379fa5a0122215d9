/* autodiff.c — reverse mode: walks the forward nodes backwards from the loss and asks
 * each op's gradient rule to append nodes computing its inputs' gradients. */
#include "core.h"

#include <stdlib.h>
#include <string.h>


gd_tensor *gd_grad(gd_graph *g, gd_tensor *t)
{
    if (g == NULL || t == NULL) return NULL;
    return t->grad;
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
        if (n->is_update || n->op->grad == NULL) continue;
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

    gd_status st = GD_OK;
    loss->grad = hk->ones_like(loss);
    if (loss->grad == NULL) st = ctx->status ? ctx->status : GD_ERR_NOMEM;
    for (int i = n_fwd - 1; i >= 0 && st == GD_OK; i--) {
        gd_node *n = g->nodes[i];
        if (n->is_update || n->op->grad == NULL) continue;
        gd_tensor *dout[GDP_MAX_OUTPUTS] = {0};
        int any_out = 0, any_in = 0;
        for (int k = 0; k < n->n_out; k++) {
            dout[k] = n->out[k]->grad;
            any_out |= dout[k] != NULL;
        }
        for (int k = 0; k < n->n_in; k++) any_in |= requires[n->in[k]->id] && needed[n->in[k]->id];
        if (!any_out || !any_in) continue;
        gd_tensor *din[GDP_MAX_INPUTS] = {0};
        gdp_attrs attrs = gd_node_attrs(n);
        gd_grad_ctx gc = {.g = g, .n_in = n->n_in, .n_out = n->n_out, .in = n->in, .out = n->out,
                      .attrs = &attrs, .dout = dout, .din = din};
        st = n->op->grad(&gc);
        /* a rule fails because a builder it called failed: that builder's status is the
         * one that says what happened (out of memory, a shape) */
        if (st != GD_OK && ctx->status != GD_OK) st = ctx->status;
        if (st != GD_OK) {
            char m[1024];
            snprintf(m, sizeof m, "%s", ctx->err);
            gd_fail(ctx, st, "backward of %s (node %d): %s", n->op->name, n->id, m);
            break;
        }
        for (int k = 0; k < n->n_in && st == GD_OK; k++) {
            gd_tensor *x = n->in[k];
            if (din[k] == NULL || !requires[x->id]) continue;
            if (din[k]->ndim != x->ndim || memcmp(din[k]->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) != 0 ||
                din[k]->dtype != x->dtype) {
                char a[128], b[128];
                st = gd_fail(ctx, GD_ERR_SHAPE, "backward of %s: gradient of input %d is %s but the input is %s",
                             n->op->name, k, gd_tensor_describe(din[k], a, sizeof a), gd_tensor_describe(x, b, sizeof b));
                break;
            }
            gd_tensor *sum = x->grad == NULL ? din[k] : hk->accumulate(x->grad, din[k]);
            if (sum == NULL) st = ctx->status ? ctx->status : GD_ERR_NOMEM;
            else x->grad = sum;
        }
    }
    gd_free(requires);
    gd_free(needed);
    if (st == GD_OK) g->backward_done = 1;
    return st;
}
