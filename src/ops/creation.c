/* creation.c — ops that make a tensor from nothing but attributes: fill, arange, and the
 * counter-based random generators (uniform, normal, Kaiming and Xavier initializers).
 *
 * Random numbers. Element i (row-major) draws r = gdp_philox4x32(i, offset, seed), so its
 * value does not depend on how many threads or blocks a backend uses. The arithmetic after
 * the draw is done in float (f32), written out exactly below, so that a backend doing the
 * same float operations matches the reference to the last bit or close to it:
 *   uniform:  lo + (hi - lo) * u01(r.v[0])                      (lo, hi rounded to float)
 *   normal:   mean + std * (sqrtf(-2 * logf(u1)) * cosf(2pi * u2)),
 *             u1 = u01(r.v[0]), u2 = u01(r.v[1]), 2pi rounded to float
 *   kaiming:  normal with mean 0, std = (float)sqrt(2 / fan_in)
 *   xavier:   uniform on [-b, b), b = (float)sqrt(6 / (fan_in + fan_out))
 * fan_in = shape[1] * prod(shape[2:]), fan_out = shape[0] * prod(shape[2:]) (a linear
 * (out, in) or a conv (out, in, kh, kw)); a 1-D shape has fan_in = fan_out = shape[0].
 */
#include "core.h"

#include <math.h>
#include <stdint.h>

#define NO_INPLACE {-1, -1, -1, -1}

static int is_float_dtype(int32_t dt)
{
    return dt == GDP_F32 || dt == GDP_F16 || dt == GDP_BF16 || dt == GDP_F64;
}

/* ---- storing a double into any dtype ------------------------------------------------ */

/* Integers saturate at the type's range and truncate toward zero (NaN stores 0), so no
 * value is undefined behaviour; floats round to nearest. */
static int64_t saturate(double v, double lo, double hi, int64_t ilo, int64_t ihi)
{
    if (v != v) return 0;
    if (v <= lo) return ilo;
    if (v >= hi) return ihi;
    return (int64_t)v;
}

static void store_any(const gdp_tensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case GDP_I32: ((int32_t *)t->data)[i] = (int32_t)saturate(v, -2147483648.0, 2147483647.0, INT32_MIN, INT32_MAX); break;
    // 2^63 itself does not fit: anything at or above it saturates.
    case GDP_I64: ((int64_t *)t->data)[i] = saturate(v, -9223372036854775808.0, 9223372036854775808.0, INT64_MIN, INT64_MAX); break;
    case GDP_U8: ((uint8_t *)t->data)[i] = (uint8_t)saturate(v, 0.0, 255.0, 0, 255); break;
    case GDP_I8: ((int8_t *)t->data)[i] = (int8_t)saturate(v, -128.0, 127.0, -128, 127); break;
    case GDP_BOOL: ((uint8_t *)t->data)[i] = v != 0; break;
    default: gd_ref_store(t, i, v); break;
    }
}

/* ---- shape rules ------------------------------------------------------------------- */

/* The output of a zero-input op: "shape" (absent: a scalar) and "dtype" (absent: f32). */
static int shape_from_attrs(gd_infer *c, int need_float)
{
    gd_shape *s = &c->out[0];
    const gdp_attr *a = gdp_attr_find(c->attrs, "shape");
    int n = a != NULL && a->kind == GDP_ATTR_INTS ? a->n : 0;
    if (n > GDP_MAX_DIMS) return gd_infer_fail(c, "shape has %d dims, at most %d allowed", n, GDP_MAX_DIMS);
    s->ndim = n;
    for (int k = 0; k < n; k++) {
        if (a->ints[k] < 0) return gd_infer_fail(c, "shape[%d] = %lld is negative", k, (long long)a->ints[k]);
        s->dim[k] = a->ints[k];
    }
    int64_t dt = gdp_attr_int(c->attrs, "dtype", GDP_F32);
    if (dt < 0 || dt >= GDP_DTYPE_COUNT) return gd_infer_fail(c, "dtype %lld is not a dtype", (long long)dt);
    if (need_float && !is_float_dtype((int32_t)dt))
        return gd_infer_fail(c, "dtype %s is not a floating type", gd_dtype_name((gd_dtype)dt));
    s->dtype = (int32_t)dt;
    c->n_out = 1;
    return 0;
}

/* Whether v, truncated toward zero, lies in an integer dtype's range (floats: always). */
static int fits_dtype(int32_t dt, double v)
{
    switch (dt) {
    case GDP_I32: return v > -2147483649.0 && v < 2147483648.0;
    case GDP_I64: return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
    case GDP_U8: return v > -1.0 && v < 256.0;
    case GDP_I8: return v > -129.0 && v < 128.0;
    default: return 1;
    }
}

static int fill_infer(gd_infer *c)
{
    if (shape_from_attrs(c, 0) != 0) return -1;
    double v = gdp_attr_float(c->attrs, "value", 0.0);
    if (!fits_dtype(c->out[0].dtype, v))
        return gd_infer_fail(c, "value %g does not fit dtype %s", v, gd_dtype_name((gd_dtype)c->out[0].dtype));
    return 0;
}

static int arange_infer(gd_infer *c)
{
    int64_t n = gdp_attr_int(c->attrs, "n", 0);
    int64_t dt = gdp_attr_int(c->attrs, "dtype", GDP_F32);
    if (n < 0) return gd_infer_fail(c, "n = %lld is negative", (long long)n);
    if (dt < 0 || dt >= GDP_DTYPE_COUNT || dt == GDP_BOOL)
        return gd_infer_fail(c, "dtype %s is not numeric", gd_dtype_name((gd_dtype)dt));
    double start = gdp_attr_float(c->attrs, "start", 0.0), step = gdp_attr_float(c->attrs, "step", 1.0);
    double last = n > 0 ? start + (double)(n - 1) * step : start;
    if (!fits_dtype((int32_t)dt, start) || !fits_dtype((int32_t)dt, last))
        return gd_infer_fail(c, "values %g .. %g do not fit dtype %s", start, last, gd_dtype_name((gd_dtype)dt));
    c->out[0].dtype = (int32_t)dt;
    c->out[0].ndim = 1;
    c->out[0].dim[0] = n;
    c->n_out = 1;
    return 0;
}

static int rand_uniform_infer(gd_infer *c)
{
    if (shape_from_attrs(c, 1) != 0) return -1;
    double lo = gdp_attr_float(c->attrs, "lo", 0.0), hi = gdp_attr_float(c->attrs, "hi", 1.0);
    if (!(lo <= hi)) return gd_infer_fail(c, "lo = %g is above hi = %g", lo, hi);
    return 0;
}

static int rand_normal_infer(gd_infer *c)
{
    if (shape_from_attrs(c, 1) != 0) return -1;
    double std = gdp_attr_float(c->attrs, "std", 1.0);
    if (!(std >= 0)) return gd_infer_fail(c, "std = %g is negative", std);
    return 0;
}

static int init_infer(gd_infer *c) { return shape_from_attrs(c, 1); }

/* ---- reference kernels ------------------------------------------------------------- */

static gdp_status fill_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *out = node->out[0];
    double v = gdp_attr_float(&node->attrs, "value", 0.0);
    int64_t n = gdp_numel(out);
    for (int64_t i = 0; i < n; i++) store_any(out, i, v);
    return GDP_OK;
}

static gdp_status arange_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    // computed in double and rounded once, so a float backend must do the same
    const gdp_tensor *out = node->out[0];
    double start = gdp_attr_float(&node->attrs, "start", 0.0), step = gdp_attr_float(&node->attrs, "step", 1.0);
    int64_t n = gdp_numel(out);
    for (int64_t i = 0; i < n; i++) store_any(out, i, start + (double)i * step);
    return GDP_OK;
}

static float draw_uniform(uint64_t i, uint64_t offset, uint64_t seed, float lo, float hi)
{
    gdp_philox_out r = gdp_philox4x32(i, offset, seed);
    return lo + (hi - lo) * gdp_u01(r.v[0]);
}

static float draw_normal(uint64_t i, uint64_t offset, uint64_t seed, float mean, float std)
{
    const float two_pi = 6.28318530717958647692f;
    gdp_philox_out r = gdp_philox4x32(i, offset, seed);
    float u1 = gdp_u01(r.v[0]), u2 = gdp_u01(r.v[1]);
    float z = sqrtf(-2.0f * logf(u1)) * cosf(two_pi * u2);
    return mean + std * z;
}

/* fan_in and fan_out of a weight shape, as for a linear (out, in) or conv (out, in, kh, kw). */
static void fans(const gdp_tensor *t, double *fan_in, double *fan_out)
{
    if (t->ndim == 0) { *fan_in = *fan_out = 1; return; }
    if (t->ndim == 1) { *fan_in = *fan_out = (double)t->shape[0]; return; }
    double field = 1;
    for (int k = 2; k < t->ndim; k++) field *= (double)t->shape[k];
    *fan_in = (double)t->shape[1] * field;
    *fan_out = (double)t->shape[0] * field;
}

enum { DRAW_UNIFORM, DRAW_NORMAL };

static void fill_random(const gdp_node *node, int kind, double a, double b)
{
    const gdp_tensor *out = node->out[0];
    uint64_t seed = (uint64_t)gdp_attr_int(&node->attrs, "seed", 0);
    uint64_t offset = (uint64_t)gdp_attr_int(&node->attrs, "offset", 0);
    int64_t n = gdp_numel(out);
    for (int64_t i = 0; i < n; i++) {
        float v = kind == DRAW_UNIFORM ? draw_uniform((uint64_t)i, offset, seed, (float)a, (float)b)
                                       : draw_normal((uint64_t)i, offset, seed, (float)a, (float)b);
        gd_ref_store(out, i, v);
    }
}

static gdp_status rand_uniform_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    fill_random(node, DRAW_UNIFORM, gdp_attr_float(&node->attrs, "lo", 0.0), gdp_attr_float(&node->attrs, "hi", 1.0));
    return GDP_OK;
}

static gdp_status rand_normal_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    fill_random(node, DRAW_NORMAL, gdp_attr_float(&node->attrs, "mean", 0.0), gdp_attr_float(&node->attrs, "std", 1.0));
    return GDP_OK;
}

static gdp_status init_kaiming_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    double fan_in, fan_out;
    fans(node->out[0], &fan_in, &fan_out);
    // an empty weight has no elements to draw; any std will do
    fill_random(node, DRAW_NORMAL, 0.0, fan_in > 0 ? sqrt(2.0 / fan_in) : 1.0);
    return GDP_OK;
}

static gdp_status init_xavier_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    double fan_in, fan_out;
    fans(node->out[0], &fan_in, &fan_out);
    float bound = fan_in + fan_out > 0 ? (float)sqrt(6.0 / (fan_in + fan_out)) : 1.0f;
    fill_random(node, DRAW_UNIFORM, -bound, bound);
    return GDP_OK;
}

/* ---- builders ---------------------------------------------------------------------- */

static int shape_ok(gd_graph *g, const char *op, int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > GDP_MAX_DIMS) {
        gd_fail_null(g, GD_ERR_INVALID, "%s: ndim %d is not in [0, %d]", op, ndim, GDP_MAX_DIMS);
        return 0;
    }
    if (ndim > 0 && shape == NULL) {
        gd_fail_null(g, GD_ERR_INVALID, "%s: shape is NULL with ndim %d", op, ndim);
        return 0;
    }
    return 1;
}

gd_tensor *gd_fill(gd_graph *g, gd_dtype dt, int ndim, const int64_t *shape, double value)
{
    if (g == NULL || !shape_ok(g, "fill", ndim, shape)) return NULL;
    gd_attr a[3] = {gd_attr_is("shape", ndim, shape), gd_attr_i("dtype", dt), gd_attr_f("value", value)};
    return gd_op(g, "fill", 0, NULL, 3, a);
}

gd_tensor *gd_zeros(gd_graph *g, gd_dtype dt, int ndim, const int64_t *shape) { return gd_fill(g, dt, ndim, shape, 0.0); }
gd_tensor *gd_ones(gd_graph *g, gd_dtype dt, int ndim, const int64_t *shape) { return gd_fill(g, dt, ndim, shape, 1.0); }

gd_tensor *gd_arange(gd_graph *g, gd_dtype dt, int64_t n, double start, double step)
{
    if (g == NULL) return NULL;
    gd_attr a[4] = {gd_attr_i("n", n), gd_attr_i("dtype", dt), gd_attr_f("start", start), gd_attr_f("step", step)};
    return gd_op(g, "arange", 0, NULL, 4, a);
}

gd_tensor *gd_rand_uniform(gd_graph *g, gd_dtype dt, int ndim, const int64_t *shape, double lo, double hi, uint64_t seed)
{
    if (g == NULL || !shape_ok(g, "rand_uniform", ndim, shape)) return NULL;
    gd_attr a[6] = {gd_attr_is("shape", ndim, shape), gd_attr_i("dtype", dt), gd_attr_f("lo", lo),
                    gd_attr_f("hi", hi), gd_attr_i("seed", (int64_t)seed), gd_attr_i("offset", 0)};
    return gd_op(g, "rand_uniform", 0, NULL, 6, a);
}

gd_tensor *gd_rand_normal(gd_graph *g, gd_dtype dt, int ndim, const int64_t *shape, double mean, double std, uint64_t seed)
{
    if (g == NULL || !shape_ok(g, "rand_normal", ndim, shape)) return NULL;
    gd_attr a[6] = {gd_attr_is("shape", ndim, shape), gd_attr_i("dtype", dt), gd_attr_f("mean", mean),
                    gd_attr_f("std", std), gd_attr_i("seed", (int64_t)seed), gd_attr_i("offset", 0)};
    return gd_op(g, "rand_normal", 0, NULL, 6, a);
}

static gd_tensor *init_op(gd_graph *g, const char *op, gd_dtype dt, int ndim, const int64_t *shape, uint64_t seed)
{
    if (g == NULL || !shape_ok(g, op, ndim, shape)) return NULL;
    gd_attr a[4] = {gd_attr_is("shape", ndim, shape), gd_attr_i("dtype", dt), gd_attr_i("seed", (int64_t)seed),
                    gd_attr_i("offset", 0)};
    return gd_op(g, op, 0, NULL, 4, a);
}

gd_tensor *gd_init_kaiming(gd_graph *g, gd_dtype dt, int ndim, const int64_t *shape, uint64_t seed)
{
    return init_op(g, "init_kaiming", dt, ndim, shape, seed);
}

gd_tensor *gd_init_xavier(gd_graph *g, gd_dtype dt, int ndim, const int64_t *shape, uint64_t seed)
{
    return init_op(g, "init_xavier", dt, ndim, shape, seed);
}

/* ---- what autodiff and gd_graph_init_params ask for ------------------------------- */

static gd_tensor *ones_like(gd_tensor *x)
{
    if (x == NULL) return NULL;
    gd_shape s = gd_tensor_shape(x);
    return gd_ones(gd_tensor_graph(x), gd_tensor_dtype(x), s.ndim, s.dim);
}

static gd_tensor *initializer(gd_graph *g, int kind, double std, gd_dtype dt, int ndim, const int64_t *shape,
                              uint64_t seed)
{
    switch (kind) {
    case GD_INIT_ZEROS: return gd_zeros(g, dt, ndim, shape);
    case GD_INIT_ONES: return gd_ones(g, dt, ndim, shape);
    case GD_INIT_KAIMING: return gd_init_kaiming(g, dt, ndim, shape, seed);
    case GD_INIT_XAVIER: return gd_init_xavier(g, dt, ndim, shape, seed);
    case GD_INIT_NORMAL: return gd_rand_normal(g, dt, ndim, shape, 0.0, std, seed);
    default: return gd_fail_null(g, GD_ERR_INVALID, "init: unknown initializer %d", kind);
    }
}

/* ---- registration ------------------------------------------------------------------ */

static const char *const fill_cases[] = {
    "| shape=[2,3] dtype=f32 value=1.5",
    "| shape=[4] dtype=f16 value=-2.25",
    "| shape=[3,2] dtype=bf16 value=0.1",
    "| shape=[5] dtype=i32 value=7.0",
    "| shape=[2,2,2] dtype=i64 value=-3.0",
    NULL};

static const char *const arange_cases[] = {
    "| n=7 dtype=f32 start=0.5 step=0.25",
    "| n=9 dtype=f16 start=-2.0 step=0.5",
    "| n=5 dtype=bf16 start=1.0 step=3.0",
    "| n=6 dtype=i32 start=10.0 step=-3.0",
    "| n=11 dtype=i64 start=0.0 step=1.0",
    NULL};

static const char *const rand_uniform_cases[] = {
    "| shape=[8,16] dtype=f32 lo=-2.0 hi=3.0 seed=5 offset=0",
    "| shape=[33] dtype=f16 lo=0.0 hi=1.0 seed=1 offset=2",
    "| shape=[4,5,3] dtype=bf16 lo=-1.0 hi=1.0 seed=99 offset=0",
    NULL};

static const char *const rand_normal_cases[] = {
    "| shape=[8,16] dtype=f32 mean=0.0 std=1.0 seed=5 offset=0",
    "| shape=[33] dtype=f16 mean=1.0 std=0.5 seed=2 offset=7",
    "| shape=[4,5,3] dtype=bf16 mean=-1.0 std=2.0 seed=123 offset=0",
    NULL};

static const char *const init_cases[] = {
    "| shape=[16,8] dtype=f32 seed=3 offset=0",
    "| shape=[6,4,3,3] dtype=f16 seed=4 offset=0",
    "| shape=[10] dtype=bf16 seed=5 offset=1",
    NULL};

GD_FAMILY(creation)
{
    gd_registry_hooks(r)->ones_like = ones_like;
    gd_registry_hooks(r)->initializer = initializer;
    gd_register_op(r, &(gd_op_def){
        .name = "fill", .min_in = 0, .max_in = 0, .n_out = 1, .attrs = "shape:ints dtype:int value:float",
        .dtypes = 0, .infer = fill_infer, .ref = fill_ref, .cases = fill_cases, .inplace = NO_INPLACE, .ref_strided = 1,
        .tol = 0, .doc = "a tensor of `shape` and `dtype` with every element `value` (integers truncate)"});
    gd_register_op(r, &(gd_op_def){
        .name = "arange", .min_in = 0, .max_in = 0, .n_out = 1, .attrs = "n:int dtype:int start:float step:float",
        .dtypes = 0, .infer = arange_infer, .ref = arange_ref, .cases = arange_cases, .inplace = NO_INPLACE, .ref_strided = 1,
        .tol = 1e-12, .doc = "(n): start + i*step computed in double, rounded once to dtype"});
    gd_register_op(r, &(gd_op_def){
        .name = "rand_uniform", .min_in = 0, .max_in = 0, .n_out = 1,
        .attrs = "shape:ints dtype:int lo:float hi:float seed:int offset:int", .dtypes = 0,
        .infer = rand_uniform_infer, .ref = rand_uniform_ref, .cases = rand_uniform_cases, .inplace = NO_INPLACE, .ref_strided = 1,
        .tol = 1e-12, .doc = "uniform in [lo, hi): element i is lo + (hi-lo)*u01(philox(i, offset, seed)[0]) in f32"});
    gd_register_op(r, &(gd_op_def){
        .name = "rand_normal", .min_in = 0, .max_in = 0, .n_out = 1,
        .attrs = "shape:ints dtype:int mean:float std:float seed:int offset:int", .dtypes = 0,
        .infer = rand_normal_infer, .ref = rand_normal_ref, .cases = rand_normal_cases, .inplace = NO_INPLACE, .ref_strided = 1,
        .tol = 1e-10, .doc = "normal(mean, std): Box-Muller (cos branch) in f32 from philox(i, offset, seed)[0..1]"});
    gd_register_op(r, &(gd_op_def){
        .name = "init_kaiming", .min_in = 0, .max_in = 0, .n_out = 1, .attrs = "shape:ints dtype:int seed:int offset:int",
        .dtypes = 0, .infer = init_infer, .ref = init_kaiming_ref, .cases = init_cases, .inplace = NO_INPLACE, .ref_strided = 1,
        .tol = 1e-10, .doc = "rand_normal with mean 0, std sqrt(2/fan_in); fan_in = shape[1]*prod(shape[2:])"});
    gd_register_op(r, &(gd_op_def){
        .name = "init_xavier", .min_in = 0, .max_in = 0, .n_out = 1, .attrs = "shape:ints dtype:int seed:int offset:int",
        .dtypes = 0, .infer = init_infer, .ref = init_xavier_ref, .cases = init_cases, .inplace = NO_INPLACE, .ref_strided = 1,
        .tol = 1e-12, .doc = "rand_uniform on [-b, b), b = sqrt(6/(fan_in+fan_out))"});
}
