/* dropout.c — inverted dropout with a counter-based mask.
 *
 * Element i of x is dropped when u01(philox(i, step, seed)[0]) < p, the comparison made in
 * float ((float)p), and a kept element is multiplied by the float scale 1.0f / (1.0f - (float)p).
 * The mask depends only on (i, step, seed), never on the order elements are visited in, so
 * it is the same on every backend, and the backward pass rebuilds it instead of storing it:
 * the gradient is the same op applied to dy.
 *
 * `step` is an optional i64 (or i32) scalar the training loop advances so that every step
 * draws a fresh mask; without it the step is 0.
 */
#include "refwalk.h"

#include <stdint.h>

static int is_float_dtype(int32_t dt)
{
    return dt == GDP_F32 || dt == GDP_F16 || dt == GDP_BF16 || dt == GDP_F64;
}

static int dropout_infer(gd_infer *c)
{
    const gd_shape *x = &c->in[0];
    char b[96];
    if (!is_float_dtype(x->dtype))
        return gd_infer_fail(c, "x %s is not floating", gd_shape_str(x, b, sizeof b));
    if (c->n_in > 1) {
        const gd_shape *s = &c->in[1];
        if ((s->dtype != GDP_I64 && s->dtype != GDP_I32) || gd_shape_numel(s) != 1)
            return gd_infer_fail(c, "step must be an i64 scalar, got %s", gd_shape_str(s, b, sizeof b));
    }
    double p = gdp_attr_float(c->attrs, "p", 0.5);
    if (!(p >= 0 && p <= 1)) return gd_infer_fail(c, "p = %g is not in [0, 1]", p);
    c->out[0] = *x;
    c->n_out = 1;
    return 0;
}

static uint64_t step_value(const gdp_node *node)
{
    if (node->n_in < 2) return 0;
    const gdp_tensor *s = node->in[1];
    // read as an integer: a double would lose the low bits of a large step
    return s->dtype == GDP_I32 ? (uint64_t)(int64_t)((const int32_t *)s->data)[0] : (uint64_t)((const int64_t *)s->data)[0];
}

static gdp_status dropout_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *y = node->out[0];
    float p = (float)gdp_attr_float(&node->attrs, "p", 0.5);
    uint64_t seed = (uint64_t)gdp_attr_int(&node->attrs, "seed", 0);
    uint64_t step = step_value(node);
    float scale = 1.0f / (1.0f - p); // inf when p = 1, but then nothing is kept
    int64_t n = gdp_numel(x);
    rw_walk w; // element i of x in row-major order, whatever its strides
    rw_begin(&w, x->ndim, x->shape);
    rw_add(&w, x);
    for (int64_t i = 0; i < n; i++, rw_next(&w)) {
        float u = gdp_u01(gdp_philox4x32((uint64_t)i, step, seed).v[0]);
        // a product of two floats is exact in double: rounding it once matches a float backend
        rw_st(y, i, u < p ? 0.0 : rw_ld(x, w.off[0]) * (double)scale);
    }
    return GDP_OK;
}

static gd_tensor *dropout_node(gd_graph *g, gd_tensor *x, gd_tensor *step, double p, int64_t seed)
{
    gd_attr a[2] = {gd_attr_f("p", p), gd_attr_i("seed", seed)};
    gd_tensor *in[2] = {x, step};
    return gd_op(g, "dropout", step != NULL ? 2 : 1, in, 2, a);
}

static gd_status dropout_grad(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    // same p, seed and step: the mask is the forward one, by construction
    c->din[0] = dropout_node(c->g, c->dout[0], c->n_in > 1 ? c->in[1] : NULL, gdp_attr_float(c->attrs, "p", 0.5),
                             gdp_attr_int(c->attrs, "seed", 0));
    return c->din[0] != NULL ? GD_OK : GD_ERR_INVALID;
}

gd_tensor *gd_dropout(gd_tensor *x, double p, uint64_t seed, gd_tensor *step)
{
    if (x == NULL) return NULL;
    return dropout_node(gd_tensor_graph(x), x, step, p, (int64_t)seed);
}

static const char *const dropout_cases[] = {
    "f[4,16] | p=0.5 seed=3",
    "f[2,3,5] i64[]<10 | p=0.25 seed=11",
    "f[37] i64[]<1000 | p=0.9 seed=12345",
    "f[3,4] | p=0.0 seed=1",
    NULL};

GD_FAMILY(dropout)
{
    gd_register_op(r, &(gd_op_def){
        .name = "dropout", .min_in = 1, .max_in = 2, .n_out = 1, .attrs = "p:float seed:int", .dtypes = GD_FLOATS,
        .infer = dropout_infer, .grad = dropout_grad, .ref = dropout_ref, .cases = dropout_cases,
        .inplace = {-1, -1, -1, -1}, .tol = 1e-12, .ref_strided = 1,
        .doc = "(x, [step i64]): drops x[i] when u01(philox(i, step, seed)[0]) < p, scales the rest by 1/(1-p)"});
}
