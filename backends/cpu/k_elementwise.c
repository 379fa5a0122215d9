/* k_elementwise.c — the broadcasting binary ops: add, sub, mul, div, minimum, maximum
 * (f32, and i32/i64 where the op has integer cases), and minimum_grad, maximum_grad.
 *
 * Definitions are in src/ops/elementwise.c. The reference computes floats in double and
 * rounds once; for +, -, *, / of two floats that is the same as the float operation
 * (double has more than twice float's precision), and minimum/maximum only select, so
 * these kernels match the reference bit for bit. Integers wrap on overflow, as the
 * reference's int64 arithmetic stored back to the operand width does. f16 and bf16 run
 * through the f32 kernels (k_half.c).
 *
 * Operands are walked through their strides (ewplan.h): broadcasts step by 0, and views
 * the planner passes as they are (the kernels register with GDP_KERNEL_STRIDED: a
 * transpose or a slice feeding an add needs no copy) by their own strides. Inner runs of
 * stride 1 or 0 take plain vector loops; others a strided loop. Items never share an
 * output element, so the thread count changes no bit.
 */
#include "ewplan.h"

#include <string.h>

/* ---- binary ops ------------------------------------------------------------------------------- */

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MIN, OP_MAX };

typedef struct bin_job {
    int op;
    int32_t dt;
    const void *a, *b;
    void *y;
    gcpu_ewplan p;
} bin_job;

/* y[0..n) = a[i*sa] op b[i*sb]: a loop for each of sa, sb in {0, 1}, so that each one is
 * a plain vector loop, and a strided one for views. min and max: NaN in either operand gives NaN, and a tie gives a (the
 * reference's rule, which decides where the gradient goes and the sign of a zero). */
static void bin_f32(int op, const float *a, int64_t sa, const float *b, int64_t sb, float *y, int64_t n)
{
#define LOOPS(T, EXPR)                                                                                     \
    if (sa == 1 && sb == 1) for (int64_t i = 0; i < n; i++) { T x = a[i], z = b[i]; y[i] = EXPR; }           \
    else if (sa == 1 && sb == 0) { T z = b[0]; for (int64_t i = 0; i < n; i++) { T x = a[i]; y[i] = EXPR; } } \
    else if (sa == 0 && sb == 1) { T x = a[0]; for (int64_t i = 0; i < n; i++) { T z = b[i]; y[i] = EXPR; } } \
    else if (sa == 0 && sb == 0) { T x = a[0], z = b[0]; for (int64_t i = 0; i < n; i++) y[i] = EXPR; }       \
    else for (int64_t i = 0; i < n; i++) { T x = a[i * sa], z = b[i * sb]; y[i] = EXPR; }
    switch (op) {
    case OP_ADD: LOOPS(float, x + z); break;
    case OP_SUB: LOOPS(float, x - z); break;
    case OP_MUL: LOOPS(float, x * z); break;
    case OP_DIV: LOOPS(float, x / z); break;
    case OP_MIN: LOOPS(float, ((x <= z) | (x != x)) ? x : z); break;
    default: LOOPS(float, ((x >= z) | (x != x)) ? x : z); break;
    }
}

/* Integers: unsigned arithmetic wraps where signed would be undefined; the conversion
 * back to the signed type is modular in gcc and clang, as the reference's is. */
#define BIN_INT(name, T, U)                                                                        \
    static void name(int op, const T *a, int64_t sa, const T *b, int64_t sb, T *y, int64_t n)      \
    {                                                                                              \
        switch (op) {                                                                              \
        case OP_ADD: LOOPS(T, (T)((U)x + (U)z)); break;                                            \
        case OP_SUB: LOOPS(T, (T)((U)x - (U)z)); break;                                            \
        case OP_MUL: LOOPS(T, (T)((U)x * (U)z)); break;                                            \
        case OP_MIN: LOOPS(T, x <= z ? x : z); break;                                              \
        default: LOOPS(T, x >= z ? x : z); break;                                                  \
        }                                                                                          \
    }
BIN_INT(bin_i32, int32_t, uint32_t)
BIN_INT(bin_i64, int64_t, uint64_t)
#undef LOOPS

static void bin_row(const void *ctx, int64_t oy, const int64_t *off, int64_t n)
{
    const bin_job *j = ctx;
    int in = j->p.ndim - 1;
    int64_t sa = j->p.st[0][in], sb = j->p.st[1][in];
    if (j->dt == GDP_F32)
        bin_f32(j->op, (const float *)j->a + off[0], sa, (const float *)j->b + off[1], sb, (float *)j->y + oy, n);
    else if (j->dt == GDP_I32)
        bin_i32(j->op, (const int32_t *)j->a + off[0], sa, (const int32_t *)j->b + off[1], sb, (int32_t *)j->y + oy, n);
    else
        bin_i64(j->op, (const int64_t *)j->a + off[0], sa, (const int64_t *)j->b + off[1], sb, (int64_t *)j->y + oy, n);
}

static void bin_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const bin_job *j = ctx;
    gcpu_ewplan_walk(&j->p, 2, begin, end, bin_row, j);
}

static gdp_status binary(const gdp_node *n, int op)
{
    const gdp_tensor *ops[2] = {n->in[0], n->in[1]}, *y = n->out[0];
    if (gdp_numel(y) == 0) return GDP_OK;
    bin_job j = {.op = op, .dt = y->dtype, .a = ops[0]->data, .b = ops[1]->data, .y = y->data};
    gcpu_ewplan_make(&j.p, y, 2, ops);
    gcpu_parallel_for_grain(gcpu_ewplan_items(&j.p), gcpu_ewplan_grain(&j.p, GCPU_GRAIN_ELEMS), bin_task, &j);
    return GDP_OK;
}

#define BINARY_KERNEL(name, OP)                                                           \
    static gdp_status k_##name(void *be, const gdp_node *n, void *stream, gdp_err *err)  \
    {                                                                                     \
        (void)be; (void)stream; (void)err;                                                \
        return binary(n, OP);                                                             \
    }                                                                                     \
    GCPU_HALF_OF(k_##name, s_f32, NULL)
static int s_f32(void *backend, const gdp_node *n);
BINARY_KERNEL(add, OP_ADD)
BINARY_KERNEL(sub, OP_SUB)
BINARY_KERNEL(mul, OP_MUL)
BINARY_KERNEL(div, OP_DIV)
BINARY_KERNEL(minimum, OP_MIN)
BINARY_KERNEL(maximum, OP_MAX)

/* ---- minimum_grad, maximum_grad ------------------------------------------------------------------ */

/* (dy, a, b) -> (da, db), all of dy's shape: dy goes where the forward op picked, +0 to
 * the other side. */
typedef struct mmg_job {
    int is_max;
    const float *dy, *a, *b;
    float *da, *db;
    gcpu_ewplan p;
} mmg_job;

static void mmg_row(const void *ctx, int64_t oy, const int64_t *off, int64_t n)
{
    const mmg_job *j = ctx;
    int in = j->p.ndim - 1;
    int64_t sg = j->p.st[0][in], sa = j->p.st[1][in], sb = j->p.st[2][in];
    const float *g = j->dy + off[0], *a = j->a + off[1], *b = j->b + off[2];
    float *da = j->da + oy, *db = j->db + oy;
#define PICK(TO_A)                              \
    for (int64_t i = 0; i < n; i++) {           \
        float x = a[i * sa], z = b[i * sb];     \
        float gi = g[i * sg];                   \
        int to_a = TO_A;                        \
        da[i] = to_a ? gi : 0.0f;               \
        db[i] = to_a ? 0.0f : gi;               \
    }
    if (j->is_max) PICK((x >= z) | (x != x))
    else PICK((x <= z) | (x != x))
#undef PICK
}

static void mmg_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const mmg_job *j = ctx;
    gcpu_ewplan_walk(&j->p, 3, begin, end, mmg_row, j);
}

static gdp_status minmax_grad(const gdp_node *n, int is_max)
{
    const gdp_tensor *ops[3] = {n->in[0], n->in[1], n->in[2]};
    if (gdp_numel(n->out[0]) == 0) return GDP_OK;
    mmg_job j = {.is_max = is_max, .dy = ops[0]->data, .a = ops[1]->data, .b = ops[2]->data,
                 .da = n->out[0]->data, .db = n->out[1]->data};
    gcpu_ewplan_make(&j.p, n->out[0], 3, ops);
    gcpu_parallel_for_grain(gcpu_ewplan_items(&j.p), gcpu_ewplan_grain(&j.p, GCPU_GRAIN_ELEMS), mmg_task, &j);
    return GDP_OK;
}

static gdp_status k_minimum_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    return minmax_grad(n, 0);
}
GCPU_HALF_OF(k_minimum_grad, s_f32, NULL)

static gdp_status k_maximum_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    return minmax_grad(n, 1);
}
GCPU_HALF_OF(k_maximum_grad, s_f32, NULL)

/* ---- registration ---------------------------------------------------------------------------- */

static int s_f32(void *backend, const gdp_node *n)
{
    (void)backend;
    return gcpu_all_f32(n);
}

/* every operand of the one integer dtype (the key the kernel is registered under) */
static int same_int(const gdp_node *n, int32_t dt)
{
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i]->dtype != dt) return 0;
    return n->out[0]->dtype == dt;
}
static int s_i32(void *backend, const gdp_node *n) { (void)backend; return same_int(n, GDP_I32); }
static int s_i64(void *backend, const gdp_node *n) { (void)backend; return same_int(n, GDP_I64); }

/* Every kernel here reads its inputs through their strides. */
gdp_status gcpu_register_elementwise(gcpu_regctx *r, gdp_err *err)
{
    static const struct {
        const char *op;
        gcpu_floats k;
        int ints; /* also integer operands */
    } ks[] = {
        {"add", GCPU_FLOATS_INIT(k_add, s_f32, NULL), 1},
        {"sub", GCPU_FLOATS_INIT(k_sub, s_f32, NULL), 1},
        {"mul", GCPU_FLOATS_INIT(k_mul, s_f32, NULL), 1},
        {"div", GCPU_FLOATS_INIT(k_div, s_f32, NULL), 0},
        {"minimum", GCPU_FLOATS_INIT(k_minimum, s_f32, NULL), 1},
        {"maximum", GCPU_FLOATS_INIT(k_maximum, s_f32, NULL), 1},
        {"minimum_grad", GCPU_FLOATS_INIT(k_minimum_grad, s_f32, NULL), 0},
        {"maximum_grad", GCPU_FLOATS_INIT(k_maximum_grad, s_f32, NULL), 0},
    };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        const uint32_t fl = GDP_KERNEL_STRIDED;
        gdp_status s = gcpu_reg_floats(r, ks[i].op, ks[i].k, fl, NULL, err);
        if (s == GDP_OK && ks[i].ints) s = gcpu_reg_flags(r, ks[i].op, GDP_I32, fl, ks[i].k.f32, s_i32, NULL, err);
        if (s == GDP_OK && ks[i].ints) s = gcpu_reg_flags(r, ks[i].op, GDP_I64, fl, ks[i].k.f32, s_i64, NULL, err);
        if (s != GDP_OK) return s;
    }
    return GDP_OK;
}
