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
 * Broadcasting: operands are aligned to the right of the output's shape with stride 0
 * where they are broadcast; neighbouring dims are merged wherever every operand steps
 * across them as across one dim, leaving an inner run along which each operand steps by
 * 1 or 0. Work items are pieces of rows of that run, so one long row is split as well as
 * many short ones; items never share an output element, so the thread count changes no
 * bit.
 */
#include "kernels.h"

#include <string.h>

/* ---- the broadcast plan ------------------------------------------------------------------ */

#define MAX_OPS 3    /* operands read per element */
#define PIECE 8192   /* elements of a row per work item at most */

typedef struct bplan {
    int ndim;                          /* merged dims, outer to inner; the last is the run */
    int64_t shape[GDP_MAX_DIMS];
    int64_t st[MAX_OPS][GDP_MAX_DIMS]; /* per operand, in elements */
    int64_t rows, len;                 /* rows of the run, and its length */
    int64_t pieces;                    /* work items per row */
} bplan;

/* Plans the walk of y's elements for operands ops[0..nops) (each broadcastable to y). */
static void bplan_make(bplan *p, const gdp_tensor *y, int nops, const gdp_tensor *const *ops)
{
    int nd = y->ndim;
    int64_t st[MAX_OPS][GDP_MAX_DIMS];
    for (int k = 0; k < nops; k++) {
        int64_t s = 1;
        for (int d = nd - 1, e = ops[k]->ndim - 1; d >= 0; d--, e--) {
            int64_t dim = e >= 0 ? ops[k]->shape[e] : 1;
            st[k][d] = dim == 1 ? 0 : s;
            s *= dim;
        }
    }
    /* merge from the inside out; size-1 dims drop out. The dims are collected inner first
     * and reversed at the end. */
    int64_t sh[GDP_MAX_DIMS], ms[MAX_OPS][GDP_MAX_DIMS];
    int m = 0;
    for (int d = nd - 1; d >= 0; d--) {
        if (y->shape[d] == 1) continue;
        int merge = m > 0;
        for (int k = 0; k < nops && merge; k++) merge = st[k][d] == ms[k][m - 1] * sh[m - 1];
        if (merge) {
            sh[m - 1] *= y->shape[d];
            continue;
        }
        sh[m] = y->shape[d];
        for (int k = 0; k < nops; k++) ms[k][m] = st[k][d];
        m++;
    }
    if (m == 0) { /* a single element */
        sh[0] = 1;
        for (int k = 0; k < nops; k++) ms[k][0] = 0;
        m = 1;
    }
    p->ndim = m;
    for (int i = 0; i < m; i++) {
        p->shape[m - 1 - i] = sh[i];
        for (int k = 0; k < nops; k++) p->st[k][m - 1 - i] = ms[k][i];
    }
    p->len = p->shape[m - 1];
    p->rows = gdp_numel(y) / p->len;
    p->pieces = (p->len + PIECE - 1) / PIECE;
}

/* Calls row(ctx, y offset, operand offsets, n) for every piece of rows in items
 * [begin, end) (item = row * pieces + piece). Offsets of successive rows are kept like an
 * odometer: one division per dim for the first row of the range only. */
typedef void (*row_fn)(const void *ctx, int64_t oy, const int64_t *off, int64_t n);

static void bplan_walk(const bplan *p, int nops, int64_t begin, int64_t end, row_fn row, const void *ctx)
{
    int outer = p->ndim - 1;
    int64_t idx[GDP_MAX_DIMS], off[MAX_OPS] = {0};
    int64_t r = begin / p->pieces, piece = begin % p->pieces, rem = r;
    for (int d = outer - 1; d >= 0; d--) {
        idx[d] = rem % p->shape[d];
        rem /= p->shape[d];
        for (int k = 0; k < nops; k++) off[k] += idx[d] * p->st[k][d];
    }
    for (int64_t it = begin; it < end;) {
        int64_t s = piece * PIECE, n = p->len - s < PIECE ? p->len - s : PIECE;
        int64_t o[MAX_OPS];
        for (int k = 0; k < nops; k++) o[k] = off[k] + s * p->st[k][outer];
        row(ctx, r * p->len + s, o, n);
        it++;
        if (++piece < p->pieces) continue;
        piece = 0;
        r++;
        for (int d = outer - 1; d >= 0; d--) { /* next row */
            for (int k = 0; k < nops; k++) off[k] += p->st[k][d];
            if (++idx[d] < p->shape[d]) break;
            for (int k = 0; k < nops; k++) off[k] -= p->st[k][d] * p->shape[d];
            idx[d] = 0;
        }
    }
}

static int64_t bplan_grain(const bplan *p)
{
    int64_t per_item = p->len < PIECE ? p->len : PIECE;
    return GCPU_GRAIN_ELEMS / per_item + 1;
}

/* ---- binary ops ------------------------------------------------------------------------------- */

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MIN, OP_MAX };

typedef struct bin_job {
    int op;
    int32_t dt;
    const void *a, *b;
    void *y;
    bplan p;
} bin_job;

/* y[0..n) = a[i*sa] op b[i*sb], sa and sb in {0, 1}: four loops, so that each one is a
 * plain vector loop. min and max: NaN in either operand gives NaN, and a tie gives a (the
 * reference's rule, which decides where the gradient goes and the sign of a zero). */
static void bin_f32(int op, const float *a, int64_t sa, const float *b, int64_t sb, float *y, int64_t n)
{
#define LOOPS(T, EXPR)                                                                                     \
    if (sa == 1 && sb == 1) for (int64_t i = 0; i < n; i++) { T x = a[i], z = b[i]; y[i] = EXPR; }           \
    else if (sa == 1) { T z = b[0]; for (int64_t i = 0; i < n; i++) { T x = a[i]; y[i] = EXPR; } }          \
    else if (sb == 1) { T x = a[0]; for (int64_t i = 0; i < n; i++) { T z = b[i]; y[i] = EXPR; } }          \
    else { T x = a[0], z = b[0]; for (int64_t i = 0; i < n; i++) y[i] = EXPR; }
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
    bplan_walk(&j->p, 2, begin, end, bin_row, j);
}

static gdp_status binary(const gdp_node *n, int op)
{
    const gdp_tensor *ops[2] = {&n->in[0], &n->in[1]}, *y = &n->out[0];
    if (gdp_numel(y) == 0) return GDP_OK;
    bin_job j = {.op = op, .dt = y->dtype, .a = ops[0]->data, .b = ops[1]->data, .y = y->data};
    bplan_make(&j.p, y, 2, ops);
    gcpu_parallel_for_grain(j.p.rows * j.p.pieces, bplan_grain(&j.p), bin_task, &j);
    return GDP_OK;
}

#define BINARY_KERNEL(name, OP)                                                           \
    static gdp_status k_##name(void *be, const gdp_node *n, void *stream, gdp_err *err)  \
    {                                                                                     \
        (void)be; (void)stream; (void)err;                                                \
        return binary(n, OP);                                                             \
    }                                                                                     \
    GCPU_HALF_OF(k_##name, s_f32)
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
    bplan p;
} mmg_job;

static void mmg_row(const void *ctx, int64_t oy, const int64_t *off, int64_t n)
{
    const mmg_job *j = ctx;
    int in = j->p.ndim - 1;
    int64_t sa = j->p.st[1][in], sb = j->p.st[2][in];
    const float *g = j->dy + off[0], *a = j->a + off[1], *b = j->b + off[2];
    float *da = j->da + oy, *db = j->db + oy;
#define PICK(TO_A)                              \
    for (int64_t i = 0; i < n; i++) {           \
        float x = a[i * sa], z = b[i * sb];     \
        int to_a = TO_A;                        \
        da[i] = to_a ? g[i] : 0.0f;             \
        db[i] = to_a ? 0.0f : g[i];             \
    }
    if (j->is_max) PICK((x >= z) | (x != x))
    else PICK((x <= z) | (x != x))
#undef PICK
}

static void mmg_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const mmg_job *j = ctx;
    bplan_walk(&j->p, 3, begin, end, mmg_row, j);
}

static gdp_status minmax_grad(const gdp_node *n, int is_max)
{
    const gdp_tensor *ops[3] = {&n->in[0], &n->in[1], &n->in[2]};
    if (gdp_numel(&n->out[0]) == 0) return GDP_OK;
    mmg_job j = {.is_max = is_max, .dy = ops[0]->data, .a = ops[1]->data, .b = ops[2]->data,
                 .da = n->out[0].data, .db = n->out[1].data};
    bplan_make(&j.p, &n->out[0], 3, ops);
    gcpu_parallel_for_grain(j.p.rows * j.p.pieces, bplan_grain(&j.p), mmg_task, &j);
    return GDP_OK;
}

static gdp_status k_minimum_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    return minmax_grad(n, 0);
}
GCPU_HALF_OF(k_minimum_grad, s_f32)

static gdp_status k_maximum_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    return minmax_grad(n, 1);
}
GCPU_HALF_OF(k_maximum_grad, s_f32)

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
        if (n->in[i].dtype != dt) return 0;
    return n->out[0].dtype == dt;
}
static int s_i32(void *backend, const gdp_node *n) { (void)backend; return same_int(n, GDP_I32); }
static int s_i64(void *backend, const gdp_node *n) { (void)backend; return same_int(n, GDP_I64); }

gdp_status gcpu_register_elementwise(const gdp_host *host, gdp_err *err)
{
    static const struct {
        const char *op;
        gdp_launch_fn f32, half;
        gdp_supports_fn half_ok;
        int ints; /* also integer operands */
    } ks[] = {
        {"add", k_add, k_add_half, k_add_half_ok, 1},
        {"sub", k_sub, k_sub_half, k_sub_half_ok, 1},
        {"mul", k_mul, k_mul_half, k_mul_half_ok, 1},
        {"div", k_div, k_div_half, k_div_half_ok, 0},
        {"minimum", k_minimum, k_minimum_half, k_minimum_half_ok, 1},
        {"maximum", k_maximum, k_maximum_half, k_maximum_half_ok, 1},
        {"minimum_grad", k_minimum_grad, k_minimum_grad_half, k_minimum_grad_half_ok, 0},
        {"maximum_grad", k_maximum_grad, k_maximum_grad_half, k_maximum_grad_half_ok, 0},
    };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        gdp_status s = gcpu_reg_floats(host, ks[i].op, ks[i].f32, s_f32, ks[i].half, ks[i].half_ok, NULL, err);
        if (s == GDP_OK && ks[i].ints) s = gcpu_reg(host, ks[i].op, GDP_I32, ks[i].f32, s_i32, NULL, err);
        if (s == GDP_OK && ks[i].ints) s = gcpu_reg(host, ks[i].op, GDP_I64, ks[i].f32, s_i64, NULL, err);
        if (s != GDP_OK) return s;
    }
    return GDP_OK;
}
