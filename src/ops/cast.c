/* cast.c — conversion between any two of the nine dtypes.
 *
 * Rules (NumPy / PyTorch where those are defined, and defined here where they are not):
 *  - float -> float rounds to nearest, ties to even; f64 -> f16/bf16 goes through f32,
 *    as PyTorch does on the CPU;
 *  - float -> integer truncates toward zero and saturates at the target's range, NaN
 *    gives 0 (C leaves out-of-range conversions undefined; saturation is what GPUs do);
 *  - integer -> integer wraps modulo 2^bits (two's complement), as NumPy and PyTorch;
 *  - integer -> float rounds to nearest (i64 -> f32 directly, not through f64);
 *  - anything -> bool is x != 0 (NaN is true); bool -> number is 0 or 1.
 * The kernel handles f16 and bf16 itself, so it sees every dtype's raw bits.
 */
#include "core.h" /* widened_from looks at the node that made a value */
#include "refwalk.h"

#include <stdint.h>
#include <string.h>

static int is_float(int32_t dt) { return dt == GDP_F32 || dt == GDP_F16 || dt == GDP_BF16 || dt == GDP_F64; }

static double load_float(const gdp_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case GDP_F32: return ((const float *)t->data)[i];
    case GDP_F64: return ((const double *)t->data)[i];
    case GDP_F16: return gdp_f16_to_f32(((const uint16_t *)t->data)[i]);
    default: return gdp_bf16_to_f32(((const uint16_t *)t->data)[i]); // GDP_BF16
    }
}

static int64_t load_int(const gdp_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case GDP_I32: return ((const int32_t *)t->data)[i];
    case GDP_I64: return ((const int64_t *)t->data)[i];
    case GDP_U8: return ((const uint8_t *)t->data)[i];
    case GDP_I8: return ((const int8_t *)t->data)[i];
    default: return ((const uint8_t *)t->data)[i] != 0; // GDP_BOOL: any non-zero byte is true
    }
}

/* Truncates toward zero into [lo, hi]; NaN -> 0. The comparisons happen in double, where
 * every bound used here is exact (INT64_MAX rounds up to 2^63, which is what makes
 * `d >= hi` catch everything that does not fit). */
static int64_t trunc_sat(double d, int64_t lo, int64_t hi)
{
    if (d != d) return 0;
    if (d <= (double)lo) return lo;
    if (d >= (double)hi) return hi;
    return (int64_t)d;
}

static void store_from_float(const gdp_tensor *t, int64_t i, double d)
{
    void *p = t->data;
    switch (t->dtype) {
    case GDP_F32: ((float *)p)[i] = (float)d; break;
    case GDP_F64: ((double *)p)[i] = d; break;
    case GDP_F16: ((uint16_t *)p)[i] = gdp_f32_to_f16((float)d); break;
    case GDP_BF16: ((uint16_t *)p)[i] = gdp_f32_to_bf16((float)d); break;
    case GDP_I32: ((int32_t *)p)[i] = (int32_t)trunc_sat(d, INT32_MIN, INT32_MAX); break;
    case GDP_I64: ((int64_t *)p)[i] = trunc_sat(d, INT64_MIN, INT64_MAX); break;
    case GDP_U8: ((uint8_t *)p)[i] = (uint8_t)trunc_sat(d, 0, UINT8_MAX); break;
    case GDP_I8: ((int8_t *)p)[i] = (int8_t)trunc_sat(d, INT8_MIN, INT8_MAX); break;
    case GDP_BOOL: ((uint8_t *)p)[i] = d != 0; break;
    default: break;
    }
}

static void store_from_int(const gdp_tensor *t, int64_t i, int64_t v)
{
    void *p = t->data;
    uint64_t u = (uint64_t)v; // narrowing from unsigned wraps, the two's complement rule
    switch (t->dtype) {
    case GDP_F32: ((float *)p)[i] = (float)v; break;
    case GDP_F64: ((double *)p)[i] = (double)v; break;
    case GDP_F16: ((uint16_t *)p)[i] = gdp_f32_to_f16((float)v); break;
    case GDP_BF16: ((uint16_t *)p)[i] = gdp_f32_to_bf16((float)v); break;
    case GDP_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)u; break;
    case GDP_I64: ((int64_t *)p)[i] = v; break;
    case GDP_U8: ((uint8_t *)p)[i] = (uint8_t)u; break;
    case GDP_I8: ((int8_t *)p)[i] = (int8_t)(uint8_t)u; break;
    case GDP_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

static gdp_status ref_cast(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    const gdp_tensor *x = n->in[0], *y = n->out[0];
    int64_t count = gdp_numel(y);
    if (gdp_dtype_size(x->dtype) == 0 || gdp_dtype_size(y->dtype) == 0)
        return gdp_fail(err, GDP_ERR_UNSUPPORTED, "dtype %d -> %d is not supported", (int)x->dtype, (int)y->dtype);
    if (x->dtype == GDP_F32 && y->dtype == GDP_BF16 && gdp_is_contiguous(x)) { // the mixed-precision path, kept tight
        const float *px = x->data;
        uint16_t *py = y->data;
        for (int64_t i = 0; i < count; i++) py[i] = gdp_f32_to_bf16(px[i]);
        return GDP_OK;
    }
    rw_walk w; // x in row-major order, whatever its strides
    rw_begin(&w, x->ndim, x->shape);
    rw_add(&w, x);
    if (is_float(x->dtype)) {
        for (int64_t i = 0; i < count; i++, rw_next(&w)) store_from_float(y, i, load_float(x, w.off[0]));
    } else {
        for (int64_t i = 0; i < count; i++, rw_next(&w)) store_from_int(y, i, load_int(x, w.off[0]));
    }
    return GDP_OK;
}

static int infer_cast(gd_infer *c)
{
    const gdp_attr *a = gdp_attr_find(c->attrs, "dtype");
    if (a == NULL) return gd_infer_fail(c, "needs the attribute dtype (the target dtype)");
    int64_t to = gdp_attr_int(c->attrs, "dtype", -1);
    if (to < 0 || to >= GDP_DTYPE_COUNT) {
        char s[128];
        return gd_infer_fail(c, "x %s: target dtype %lld is not a dtype (0..%d)", gd_shape_str(&c->in[0], s, sizeof s),
                             (long long)to, GDP_DTYPE_COUNT - 1);
    }
    c->out[0] = c->in[0];
    c->out[0].dtype = (int32_t)to;
    return 0;
}

/* Between floating dtypes the cast is the identity up to rounding: the gradient is cast
 * back. Integer and bool ends carry no gradient. */
static gd_status grad_cast(gd_grad_ctx *c)
{
    gd_dtype from = gd_tensor_dtype(c->in[0]), to = gd_tensor_dtype(c->out[0]);
    if (c->dout[0] == NULL || !is_float(from) || !is_float(to)) return GD_OK;
    c->din[0] = gd_cast(c->dout[0], from);
    return c->din[0] != NULL ? GD_OK : GD_ERR_INVALID;
}

gd_tensor *gd_cast(gd_tensor *x, gd_dtype to)
{
    gd_attr a = gd_attr_i("dtype", (int64_t)to);
    return gd_op1(x, "cast", 1, &a);
}

/* Every source dtype to each of the nine targets: `n[..]` runs at f32, f16 and bf16 (the
 * sweep's float dtypes), the fixed-dtype rows cover f64 and the integers. Normal inputs
 * make float -> int truncation produce values other than 0. Only float -> f64 is smooth
 * enough in float64 for the gradient check; the other targets round, hence the "!". */
#define CAST_ROW(src)                                                                          \
    "!" src " | dtype=f32", "!" src " | dtype=f16", "!" src " | dtype=bf16", "!" src " | dtype=i32", \
        "!" src " | dtype=i64", "!" src " | dtype=u8", "!" src " | dtype=i8", "!" src " | dtype=bool"

static const char *const cast_cases[] = {
    CAST_ROW("n[3,5]"), "n[3,5] | dtype=f64", "n[] | dtype=f64",
    CAST_ROW("f64[4,3]"), "f64[4,3] | dtype=f64",
    CAST_ROW("i32[6]<-300:300"), "!i32[6]<-300:300 | dtype=f64",
    CAST_ROW("i64[2,3]<-300:300"), "!i64[2,3]<-300:300 | dtype=f64",
    CAST_ROW("u8[7]<256"), "!u8[7]<256 | dtype=f64",
    CAST_ROW("i8[7]<-128:128"), "!i8[7]<-128:128 | dtype=f64",
    CAST_ROW("bool[2,4]"), "!bool[2,4] | dtype=f64",
    NULL,
};

/* A cast of a bf16 or f16 value to f32 changes no number: its input, for gd_grad_narrow. */
static gd_tensor *widened_from(const gd_tensor *t)
{
    const gd_node *n = t->node;
    if (n == NULL || strcmp(n->op->name, "cast") != 0 || t->dtype != GDP_F32) return NULL;
    return gdp_is_half(n->in[0]->dtype) ? n->in[0] : NULL;
}

#define ALL_DTYPES (GD_M(GDP_DTYPE_COUNT) - 1u)

GD_FAMILY(cast)
{
    static const gd_op_def def = {
        .name = "cast", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "dtype:int", .dtypes = GD_FLOATS, .any_out_dtype = 1,
        .param_copy = 1, .infer = infer_cast, .grad = grad_cast, .ref = ref_cast, .ref_dtypes = ALL_DTYPES, .cases = cast_cases,
        .tol = 0, .ref_strided = 1,
        .doc = "to another dtype: floats round to nearest even, float->int truncates and saturates, int->int wraps, "
               "->bool is x != 0",
    };
    gd_register_op(r, &def);
    gd_registry_hooks(r)->widened_from = widened_from;
}
