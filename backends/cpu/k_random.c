/* k_random.c — ops that write values from attributes or counters, and selections:
 * fill, arange, rand_uniform, rand_normal, init_kaiming, init_xavier, dropout, cast, where.
 *
 * Definitions are in src/ops/creation.c, dropout.c, cast.c and elementwise.c. Every output
 * element depends only on its index, so the elements are split over threads in plain
 * chunks. Random ops draw element i from gdp_philox4x32(i, offset, seed) and then do the
 * reference's float operations in the reference's order (this file is compiled without
 * contraction of a*b+c), so their bits match. The creation ops take their dtype from an
 * attribute, so they are registered for every dtype they may produce: the host looks a
 * kernel up by the output's dtype when a node has no floating input.
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

/* ---- storing a double as the reference does ----------------------------------------------- */

/* creation.c's rule for integers: truncate toward zero, saturate at the type's range, NaN
 * stores 0; floats round to nearest through f32 for the half types. */
static int64_t saturate(double v, double lo, double hi, int64_t ilo, int64_t ihi)
{
    if (v != v) return 0;
    if (v <= lo) return ilo;
    if (v >= hi) return ihi;
    return (int64_t)v;
}

static void store_any(int32_t dt, void *p, int64_t i, double v)
{
    switch (dt) {
    case GDP_F32: ((float *)p)[i] = (float)v; break;
    case GDP_F64: ((double *)p)[i] = v; break;
    case GDP_F16: ((uint16_t *)p)[i] = gdp_f32_to_f16((float)v); break;
    case GDP_BF16: ((uint16_t *)p)[i] = gdp_f32_to_bf16((float)v); break;
    case GDP_I32: ((int32_t *)p)[i] = (int32_t)saturate(v, -2147483648.0, 2147483647.0, INT32_MIN, INT32_MAX); break;
    case GDP_I64:
        ((int64_t *)p)[i] = saturate(v, -9223372036854775808.0, 9223372036854775808.0, INT64_MIN, INT64_MAX);
        break;
    case GDP_U8: ((uint8_t *)p)[i] = (uint8_t)saturate(v, 0.0, 255.0, 0, 255); break;
    case GDP_I8: ((int8_t *)p)[i] = (int8_t)saturate(v, -128.0, 127.0, -128, 127); break;
    case GDP_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

/* ---- fill ------------------------------------------------------------------------------------ */

typedef struct fill_job {
    char *dst;
    size_t es;
    unsigned char pattern[8];
} fill_job;

static void fill_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const fill_job *j = ctx;
    if (j->es == 4) {
        uint32_t v;
        memcpy(&v, j->pattern, 4);
        uint32_t *d = (uint32_t *)(void *)j->dst;
        for (int64_t i = begin; i < end; i++) d[i] = v;
    } else if (j->es == 2) {
        uint16_t v;
        memcpy(&v, j->pattern, 2);
        uint16_t *d = (uint16_t *)(void *)j->dst;
        for (int64_t i = begin; i < end; i++) d[i] = v;
    } else if (j->es == 8) {
        uint64_t v;
        memcpy(&v, j->pattern, 8);
        uint64_t *d = (uint64_t *)(void *)j->dst;
        for (int64_t i = begin; i < end; i++) d[i] = v;
    } else {
        memset(j->dst + begin, j->pattern[0], (size_t)(end - begin));
    }
}

// y (shape) = value, converted once and replicated
static gdp_status k_fill(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    const gdp_tensor *y = n->out[0];
    fill_job j = {.dst = y->data, .es = gdp_dtype_size(y->dtype)};
    store_any(y->dtype, j.pattern, 0, gdp_attr_float(&n->attrs, "value", 0.0));
    gcpu_parallel_for_grain(gdp_numel(y), 4 * GCPU_GRAIN_ELEMS, fill_task, &j);
    return GDP_OK;
}

/* ---- arange ---------------------------------------------------------------------------------- */

typedef struct arange_job {
    const gdp_tensor *y;
    double start, step;
} arange_job;

static void arange_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const arange_job *j = ctx;
    if (j->y->dtype == GDP_F32) { /* the common case without the dtype switch */
        float *d = j->y->data;
        for (int64_t i = begin; i < end; i++) d[i] = (float)(j->start + (double)i * j->step);
        return;
    }
    for (int64_t i = begin; i < end; i++) store_any(j->y->dtype, j->y->data, i, j->start + (double)i * j->step);
}

// y (n) = start + i * step, in double, rounded once (as the reference)
static gdp_status k_arange(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    arange_job j = {.y = n->out[0], .start = gdp_attr_float(&n->attrs, "start", 0.0),
                    .step = gdp_attr_float(&n->attrs, "step", 1.0)};
    gcpu_parallel_for_grain(gdp_numel(j.y), GCPU_GRAIN_ELEMS, arange_task, &j);
    return GDP_OK;
}

/* ---- rand_uniform, rand_normal, init_kaiming, init_xavier ------------------------------------ */

enum { DRAW_UNIFORM, DRAW_NORMAL };

typedef struct rand_job {
    const gdp_tensor *y;
    int kind;
    float a, b; /* lo, hi or mean, std */
    uint64_t seed, offset;
} rand_job;

/* Element i, as creation.c draws it (same float operations, same order). */
static inline float draw(const rand_job *j, uint64_t i)
{
    gdp_philox_out r = gdp_philox4x32(i, j->offset, j->seed);
    if (j->kind == DRAW_UNIFORM) return j->a + (j->b - j->a) * gdp_u01(r.v[0]);
    const float two_pi = 6.28318530717958647692f;
    float u1 = gdp_u01(r.v[0]), u2 = gdp_u01(r.v[1]);
    float z = sqrtf(-2.0f * logf(u1)) * cosf(two_pi * u2);
    return j->a + j->b * z;
}

static void rand_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const rand_job *j = ctx;
    void *p = j->y->data;
    switch (j->y->dtype) {
    case GDP_F32:
        for (int64_t i = begin; i < end; i++) ((float *)p)[i] = draw(j, (uint64_t)i);
        break;
    case GDP_F16:
        for (int64_t i = begin; i < end; i++) ((uint16_t *)p)[i] = gdp_f32_to_f16(draw(j, (uint64_t)i));
        break;
    case GDP_BF16:
        for (int64_t i = begin; i < end; i++) ((uint16_t *)p)[i] = gdp_f32_to_bf16(draw(j, (uint64_t)i));
        break;
    default: /* f64 */
        for (int64_t i = begin; i < end; i++) ((double *)p)[i] = draw(j, (uint64_t)i);
        break;
    }
}

static gdp_status run_rand(const gdp_node *n, int kind, double a, double b)
{
    rand_job j = {.y = n->out[0], .kind = kind, .a = (float)a, .b = (float)b,
                  .seed = (uint64_t)gdp_attr_int(&n->attrs, "seed", 0),
                  .offset = (uint64_t)gdp_attr_int(&n->attrs, "offset", 0)};
    /* a Philox draw is some 40 integer operations: a smaller grain than a copy */
    gcpu_parallel_for_grain(gdp_numel(j.y), GCPU_GRAIN_ELEMS / 8, rand_task, &j);
    return GDP_OK;
}

// y (shape) uniform on [lo, hi)
static gdp_status k_rand_uniform(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    return run_rand(n, DRAW_UNIFORM, gdp_attr_float(&n->attrs, "lo", 0.0), gdp_attr_float(&n->attrs, "hi", 1.0));
}

// y (shape) normal(mean, std)
static gdp_status k_rand_normal(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    return run_rand(n, DRAW_NORMAL, gdp_attr_float(&n->attrs, "mean", 0.0), gdp_attr_float(&n->attrs, "std", 1.0));
}

/* fan_in and fan_out of a weight shape, as creation.c computes them. */
static void fans(const gdp_tensor *t, double *fan_in, double *fan_out)
{
    if (t->ndim == 0) { *fan_in = *fan_out = 1; return; }
    if (t->ndim == 1) { *fan_in = *fan_out = (double)t->shape[0]; return; }
    double field = 1;
    for (int k = 2; k < t->ndim; k++) field *= (double)t->shape[k];
    *fan_in = (double)t->shape[1] * field;
    *fan_out = (double)t->shape[0] * field;
}

// y (out, in, ...) normal(0, sqrt(2 / fan_in))
static gdp_status k_init_kaiming(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    double fan_in, fan_out;
    fans(n->out[0], &fan_in, &fan_out);
    return run_rand(n, DRAW_NORMAL, 0.0, fan_in > 0 ? sqrt(2.0 / fan_in) : 1.0);
}

// y (out, in, ...) uniform on [-b, b), b = sqrt(6 / (fan_in + fan_out))
static gdp_status k_init_xavier(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    double fan_in, fan_out;
    fans(n->out[0], &fan_in, &fan_out);
    float bound = fan_in + fan_out > 0 ? (float)sqrt(6.0 / (fan_in + fan_out)) : 1.0f;
    return run_rand(n, DRAW_UNIFORM, -bound, bound);
}

/* ---- dropout --------------------------------------------------------------------------------- */

typedef struct drop_job {
    const gdp_tensor *x, *y;
    float p, scale;
    uint64_t seed, step;
} drop_job;

static void drop_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const drop_job *j = ctx;
    int32_t dt = j->x->dtype;
    const float p = j->p, scale = j->scale;
    /* A float product is the double product rounded once: the reference's result. */
#define KEEP(i) (gdp_u01(gdp_philox4x32((uint64_t)(i), j->step, j->seed).v[0]) >= p)
    if (dt == GDP_F32) {
        const float *x = j->x->data;
        float *y = j->y->data;
        for (int64_t i = begin; i < end; i++) y[i] = KEEP(i) ? x[i] * scale : 0.0f;
    } else if (dt == GDP_F16) {
        const uint16_t *x = j->x->data;
        uint16_t *y = j->y->data;
        for (int64_t i = begin; i < end; i++) y[i] = gdp_f32_to_f16(KEEP(i) ? gdp_f16_to_f32(x[i]) * scale : 0.0f);
    } else {
        const uint16_t *x = j->x->data;
        uint16_t *y = j->y->data;
        for (int64_t i = begin; i < end; i++) y[i] = gdp_f32_to_bf16(KEEP(i) ? gdp_bf16_to_f32(x[i]) * scale : 0.0f);
    }
#undef KEEP
}

// y = x * mask / (1 - p), mask[i] = u01(philox(i, step, seed)[0]) >= p
static gdp_status k_dropout(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    drop_job j = {.x = n->in[0], .y = n->out[0], .seed = (uint64_t)gdp_attr_int(&n->attrs, "seed", 0)};
    j.p = (float)gdp_attr_float(&n->attrs, "p", 0.5);
    j.scale = 1.0f / (1.0f - j.p); /* inf when p = 1, but then nothing is kept */
    if (n->n_in > 1) {
        const gdp_tensor *s = n->in[1];
        /* read as an integer: a double would lose the low bits of a large step */
        j.step = s->dtype == GDP_I32 ? (uint64_t)(int64_t)((const int32_t *)s->data)[0]
                                     : (uint64_t)((const int64_t *)s->data)[0];
    }
    gcpu_parallel_for_grain(gdp_numel(j.x), GCPU_GRAIN_ELEMS / 8, drop_task, &j);
    return GDP_OK;
}

static int s_dropout(void *be, const gdp_node *n)
{
    (void)be;
    int32_t dt = n->in[0]->dtype;
    return (dt == GDP_F32 || dt == GDP_F16 || dt == GDP_BF16) && n->out[0]->dtype == dt &&
           (n->n_in < 2 || gdp_is_index(n->in[1]->dtype));
}

/* ---- cast ------------------------------------------------------------------------------------ */

/* cast.c's rules, element by element: floats go through double (the half types through
 * f32), integers through int64. */
static inline double load_float(int32_t dt, const void *p, int64_t i)
{
    switch (dt) {
    case GDP_F32: return ((const float *)p)[i];
    case GDP_F64: return ((const double *)p)[i];
    case GDP_F16: return gdp_f16_to_f32(((const uint16_t *)p)[i]);
    default: return gdp_bf16_to_f32(((const uint16_t *)p)[i]);
    }
}

static inline int64_t load_int(int32_t dt, const void *p, int64_t i)
{
    switch (dt) {
    case GDP_I32: return ((const int32_t *)p)[i];
    case GDP_I64: return ((const int64_t *)p)[i];
    case GDP_U8: return ((const uint8_t *)p)[i];
    case GDP_I8: return ((const int8_t *)p)[i];
    default: return ((const uint8_t *)p)[i] != 0; /* bool: any non-zero byte is true */
    }
}

/* Truncates toward zero into [lo, hi]; NaN -> 0 (the bounds are exact in double, and
 * INT64_MAX rounds up to 2^63, so `d >= hi` catches everything that does not fit). */
static inline int64_t trunc_sat(double d, int64_t lo, int64_t hi)
{
    if (d != d) return 0;
    if (d <= (double)lo) return lo;
    if (d >= (double)hi) return hi;
    return (int64_t)d;
}

static inline void store_from_float(int32_t dt, void *p, int64_t i, double d)
{
    switch (dt) {
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

static inline void store_from_int(int32_t dt, void *p, int64_t i, int64_t v)
{
    uint64_t u = (uint64_t)v; /* narrowing from unsigned wraps: the two's complement rule */
    switch (dt) {
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

typedef struct cast_job {
    const gdp_tensor *x, *y;
} cast_job;

static void cast_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const cast_job *j = ctx;
    int32_t from = j->x->dtype, to = j->y->dtype;
    const void *px = j->x->data;
    void *py = j->y->data;
    /* the mixed-precision conversions, without the per-element dtype switches */
    if (from == GDP_F32 && to == GDP_BF16) {
        for (int64_t i = begin; i < end; i++) ((uint16_t *)py)[i] = gdp_f32_to_bf16(((const float *)px)[i]);
    } else if (from == GDP_F32 && to == GDP_F16) {
        for (int64_t i = begin; i < end; i++) ((uint16_t *)py)[i] = gdp_f32_to_f16(((const float *)px)[i]);
    } else if (from == GDP_BF16 && to == GDP_F32) {
        for (int64_t i = begin; i < end; i++) ((float *)py)[i] = gdp_bf16_to_f32(((const uint16_t *)px)[i]);
    } else if (from == GDP_F16 && to == GDP_F32) {
        for (int64_t i = begin; i < end; i++) ((float *)py)[i] = gdp_f16_to_f32(((const uint16_t *)px)[i]);
    } else if (gdp_is_float(from)) {
        for (int64_t i = begin; i < end; i++) store_from_float(to, py, i, load_float(from, px, i));
    } else {
        for (int64_t i = begin; i < end; i++) store_from_int(to, py, i, load_int(from, px, i));
    }
}

// y = x converted to the target dtype
static gdp_status k_cast(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    cast_job j = {.x = n->in[0], .y = n->out[0]};
    gcpu_parallel_for_grain(gdp_numel(j.y), GCPU_GRAIN_ELEMS, cast_task, &j);
    return GDP_OK;
}

/* Every pair of dtypes: the node is keyed by its first floating input, else by its output. */
static int s_cast(void *be, const gdp_node *n)
{
    (void)be;
    return gdp_dtype_size(n->in[0]->dtype) != 0 && gdp_dtype_size(n->out[0]->dtype) != 0;
}

/* ---- where ----------------------------------------------------------------------------------- */

typedef struct where_job {
    const uint8_t *c;
    const char *a, *b;
    char *y;
    size_t es;
    int nd;
    int64_t shape[GDP_MAX_DIMS];
    int64_t st[3][GDP_MAX_DIMS]; /* element strides of cond, a, b along y's dims; 0 = broadcast */
} where_job;

#define WHERE_RUN(T)                                                                   \
    do {                                                                               \
        const T *pa = (const T *)(const void *)a, *pb = (const T *)(const void *)b;   \
        T *py = (T *)(void *)y;                                                        \
        if (sc == 1 && sa == 1 && sb == 1)                                             \
            for (int64_t i = 0; i < L; i++) py[i] = c[i] ? pa[i] : pb[i];             \
        else                                                                           \
            for (int64_t i = 0; i < L; i++) py[i] = c[i * sc] ? pa[i * sa] : pb[i * sb]; \
    } while (0)

/* Items are rows of y's last dim. */
static void where_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const where_job *j = ctx;
    int last = j->nd - 1;
    int64_t L = j->shape[last], sc = j->st[0][last], sa = j->st[1][last], sb = j->st[2][last];
    for (int64_t r = begin; r < end; r++) {
        int64_t off[3] = {0, 0, 0}, rem = r;
        for (int d = last - 1; d >= 0; d--) {
            int64_t i = rem % j->shape[d];
            rem /= j->shape[d];
            for (int k = 0; k < 3; k++) off[k] += i * j->st[k][d];
        }
        const uint8_t *c = j->c + off[0];
        const char *a = j->a + (size_t)off[1] * j->es, *b = j->b + (size_t)off[2] * j->es;
        char *y = j->y + (size_t)(r * L) * j->es;
        if (j->es == 4) WHERE_RUN(uint32_t);
        else WHERE_RUN(uint16_t);
    }
}

// y = cond ? a : b, the three broadcast together
static gdp_status k_where(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    const gdp_tensor *y = n->out[0];
    int64_t count = gdp_numel(y);
    if (count == 0) return GDP_OK;
    where_job j = {.c = n->in[0]->data, .a = n->in[1]->data, .b = n->in[2]->data, .y = y->data,
                   .es = gdp_dtype_size(y->dtype)};
    /* a scalar output is a one-element row */
    j.nd = y->ndim > 0 ? y->ndim : 1;
    for (int d = 0; d < j.nd; d++) j.shape[d] = y->ndim > 0 ? y->shape[d] : 1;
    for (int k = 0; k < 3; k++) {
        const gdp_tensor *t = n->in[k];
        int64_t s = 1;
        for (int d = j.nd - 1, e = t->ndim - 1; d >= 0; d--, e--) {
            int64_t dim = e >= 0 ? t->shape[e] : 1;
            j.st[k][d] = dim == 1 ? 0 : s;
            s *= dim;
        }
    }
    int64_t L = j.shape[j.nd - 1];
    gcpu_parallel_for_grain(count / L, GCPU_GRAIN_ELEMS / L + 1, where_task, &j);
    return GDP_OK;
}

static int s_where(void *be, const gdp_node *n)
{
    (void)be;
    size_t es = gdp_dtype_size(n->out[0]->dtype);
    return n->in[0]->dtype == GDP_BOOL && (es == 4 || es == 2) && n->in[1]->dtype == n->out[0]->dtype &&
           n->in[2]->dtype == n->out[0]->dtype;
}

/* ---- registration ---------------------------------------------------------------------------- */

gdp_status gcpu_register_random(gcpu_regctx *r, gdp_err *err)
{
    static const int32_t all[] = {GDP_F32, GDP_F16, GDP_BF16, GDP_I32, GDP_I64, GDP_U8, GDP_I8, GDP_BOOL, GDP_F64};
    static const int32_t floats[] = {GDP_F32, GDP_F16, GDP_BF16, GDP_F64};
    static const int32_t halfs[] = {GDP_F32, GDP_F16, GDP_BF16};
    gdp_status s = GDP_OK;
    for (size_t d = 0; d < sizeof all / sizeof all[0] && s == GDP_OK; d++) {
        s = gcpu_reg(r, "fill", all[d], k_fill, NULL, NULL, err);
        /* arange has no bool outputs (its shape rule refuses them) */
        if (s == GDP_OK && all[d] != GDP_BOOL) s = gcpu_reg(r, "arange", all[d], k_arange, NULL, NULL, err);
    }
    /* the random ops produce floats only; f64 outputs exist for gradient checks */
    for (size_t d = 0; d < sizeof floats / sizeof floats[0] && s == GDP_OK; d++) {
        s = gcpu_reg(r, "rand_uniform", floats[d], k_rand_uniform, NULL, NULL, err);
        if (s == GDP_OK) s = gcpu_reg(r, "rand_normal", floats[d], k_rand_normal, NULL, NULL, err);
        if (s == GDP_OK) s = gcpu_reg(r, "init_kaiming", floats[d], k_init_kaiming, NULL, NULL, err);
        if (s == GDP_OK) s = gcpu_reg(r, "init_xavier", floats[d], k_init_xavier, NULL, NULL, err);
    }
    /* dropout and where declare f32, f16 and bf16; where's integer case is keyed by i32.
     * cast is keyed by any dtype: its cases cover every pair. */
    for (size_t d = 0; d < sizeof halfs / sizeof halfs[0] && s == GDP_OK; d++) {
        s = gcpu_reg(r, "dropout", halfs[d], k_dropout, s_dropout, NULL, err);
        if (s == GDP_OK) s = gcpu_reg(r, "where", halfs[d], k_where, s_where, NULL, err);
    }
    if (s == GDP_OK) s = gcpu_reg(r, "where", GDP_I32, k_where, s_where, NULL, err);
    for (size_t d = 0; d < sizeof all / sizeof all[0] && s == GDP_OK; d++)
        s = gcpu_reg(r, "cast", all[d], k_cast, s_cast, NULL, err);
    return s;
}
