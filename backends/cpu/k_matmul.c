/* k_matmul.c — matmul, linear and linear_act (f32) on the backend's GEMM.
 *
 * Definitions are in src/ops/matmul.c. The GEMM does the product; linear's bias and
 * activation are one more pass over the output, threaded over rows.
 *
 * Operands may be strided views (GDP_KERNEL_STRIDED): a matrix whose rows are contiguous
 * (row stride >= its width) is passed with that row stride as its leading dimension, and
 * one whose columns are contiguous (a transpose, as attention's k^T or a weight gradient's
 * x^T) is passed as the transpose of its storage, by flipping the GEMM's transpose flag.
 * Batch dims may have any strides. Anything else (both inner strides > 1) is declined by
 * supports(), and the planner makes that operand contiguous first.
 */
#include "gemm.h"
#include "kernels.h"
#include "vmath.h"

#include <math.h>
#include <stdatomic.h>

static gdp_status gemm_failed(const gdp_node *n, int st, int64_t M, int64_t N, int64_t K, gdp_err *err)
{
    return gdp_fail(err, st, "%s: GEMM %lldx%lldx%lld failed (%s)", n->op, (long long)M, (long long)N, (long long)K,
                    st == GDP_ERR_NOMEM ? "out of memory" : "invalid arguments");
}

/* How an (r, c) matrix with strides (sr, sc) reaches the GEMM: stored row-major with
 * leading dimension *ld (*tr = 0), or its transpose stored so (*tr = 1). 0 when neither
 * (the planner then makes it contiguous). Strides along dims of size 1 do not matter. */
static int mat_layout(int64_t r, int64_t c, int64_t sr, int64_t sc, int *tr, int64_t *ld)
{
    if ((c <= 1 || sc == 1) && (r <= 1 || sr >= c)) {
        *tr = 0;
        *ld = r <= 1 ? c : sr;
    } else if ((r <= 1 || sr == 1) && (c <= 1 || sc >= r)) {
        *tr = 1;
        *ld = c <= 1 ? r : sc;
    } else {
        return 0;
    }
    if (*ld < 1) *ld = 1; /* an empty matrix */
    return 1;
}

/* The last two dims of t (at least 2-D). */
static int mat_layout_of(const gdp_tensor *t, int *tr, int64_t *ld)
{
    int d = t->ndim - 2;
    return mat_layout(t->shape[d], t->shape[d + 1], t->stride[d], t->stride[d + 1], tr, ld);
}

/* ---- matmul -------------------------------------------------------------------------------- */

/* Offset of the matrix of operand t that output batch bi reads (batch dims right-aligned,
 * size-1 dims broadcast), through t's strides. */
static int64_t batch_offset(const gdp_tensor *t, const int64_t *out_shape, int nbat, int64_t bi)
{
    int tb = t->ndim - 2;
    int64_t off = 0;
    for (int d = nbat - 1; d >= 0; d--) {
        int64_t coord = bi % out_shape[d];
        bi /= out_shape[d];
        int td = d - (nbat - tb);
        if (td < 0) continue;
        if (t->shape[td] != 1) off += coord * t->stride[td];
    }
    return off;
}

typedef struct mm_job {
    const gdp_node *n;
    int ta, tb, nbat;         /* the GEMM's transpose flags, after the operands' layouts */
    int64_t M, N, K, lda, ldb;
    atomic_int status;
} mm_job;

static int mm_one(const mm_job *j, int64_t bi)
{
    const gdp_tensor *a = j->n->in[0], *b = j->n->in[1], *c = j->n->out[0];
    const float *pa = (const float *)a->data + batch_offset(a, c->shape, j->nbat, bi);
    const float *pb = (const float *)b->data + batch_offset(b, c->shape, j->nbat, bi);
    float *pc = (float *)c->data + bi * j->M * j->N;
    return gcpu_sgemm(j->ta, j->tb, j->M, j->N, j->K, 1.0f, pa, j->lda, pb, j->ldb, 0.0f, pc, j->N > 0 ? j->N : 1);
}

static void mm_batches(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    mm_job *j = ctx;
    for (int64_t bi = begin; bi < end; bi++) {
        int st = mm_one(j, bi);
        if (st != GDP_OK) atomic_store(&j->status, st); /* any failure will do */
    }
}

// C (..., M, N) = op(A) (..., M, K) @ op(B) (..., K, N)
static gdp_status k_matmul(void *backend, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)backend; (void)stream;
    const gdp_tensor *a = n->in[0], *c = n->out[0];
    mm_job j = {.n = n};
    atomic_init(&j.status, GDP_OK);
    int ta = gdp_attr_int(&n->attrs, "transpose_a", 0) != 0, tb = gdp_attr_int(&n->attrs, "transpose_b", 0) != 0;
    int sa, sb;
    if (!mat_layout_of(a, &sa, &j.lda) || !mat_layout_of(n->in[1], &sb, &j.ldb))
        return gdp_fail(err, GDP_ERR_INVALID, "matmul: an operand's strides fit no GEMM layout");
    j.ta = ta ^ sa;
    j.tb = tb ^ sb;
    j.nbat = c->ndim - 2;
    j.M = c->shape[j.nbat];
    j.N = c->shape[j.nbat + 1];
    j.K = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t batches = 1;
    for (int d = 0; d < j.nbat; d++) batches *= c->shape[d];
    if (batches == 0 || j.M == 0 || j.N == 0) return GDP_OK;
    /* Many small products: one per thread at a time (each GEMM then runs inline). Large
     * ones: one after the other, each threaded. The bits are the same either way. */
    if (batches > 1 && (double)j.M * j.N * j.K < 64.0 * 64 * 64)
        gcpu_parallel_for(batches, mm_batches, &j);
    else
        mm_batches(&j, 0, batches, 0);
    int st = atomic_load(&j.status);
    if (st != GDP_OK) return gemm_failed(n, st, j.M, j.N, j.K, err);
    return GDP_OK;
}

static int s_matmul(void *backend, const gdp_node *n)
{
    (void)backend;
    int tr;
    int64_t ld;
    return gcpu_all_f32(n) && n->in[0]->ndim >= 2 && n->in[1]->ndim >= 2 && mat_layout_of(n->in[0], &tr, &ld) &&
           mat_layout_of(n->in[1], &tr, &ld);
}

/* ---- linear, linear_act ---------------------------------------------------------------------- */

enum { ACT_NONE = 0, ACT_RELU = 1, ACT_GELU_TANH = 2, ACT_GELU = 3, ACT_SILU = 4 };

/* The smooth activations over a row, as k_activation.c computes them: the reference's
 * formulas with the vectorizable f32 functions of vmath.h (a few ulp from the reference's
 * double ones; the op's tolerance is 1e-7). One loop per activation, so each is SIMD code. */
static void act_smooth(int act, float *y, int64_t n)
{
    switch (act) {
    case ACT_GELU_TANH:
        for (int64_t k = 0; k < n; k++) {
            float z = y[k];
            y[k] = 0.5f * z * (1.0f + gcpu_tanhf(0.79788456080286535588f * (z + 0.044715f * z * z * z)));
        }
        break;
    case ACT_GELU:
        for (int64_t k = 0; k < n; k++) y[k] = 0.5f * y[k] * (1.0f + gcpu_erff(y[k] * 0.70710678118654752440f));
        break;
    case ACT_SILU:
        for (int64_t k = 0; k < n; k++) y[k] = y[k] * gcpu_sigmoidf(y[k]);
        break;
    default:
        break;
    }
}

typedef struct epi_job {
    float *y;
    const float *bias;
    int64_t out;
    int act;
} epi_job;

// y (R, out) = act(y + bias), rows [begin, end)
static void epilogue_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const epi_job *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        float *y = j->y + r * j->out;
        if (j->bias != NULL)
            for (int64_t k = 0; k < j->out; k++) y[k] += j->bias[k];
        if (j->act == ACT_RELU) {
            for (int64_t k = 0; k < j->out; k++) y[k] = y[k] < 0.0f ? 0.0f : y[k]; /* NaN passes */
        } else if (j->act != ACT_NONE) {
            act_smooth(j->act, y, j->out);
        }
    }
}

/* x (..., in) as an (R, in) matrix: its leading dims must step as one dim (a row stride
 * *rs); 0 when they do not. */
static int rows_of(const gdp_tensor *x, int64_t *R, int64_t *rs)
{
    int64_t rows = 1, step = -1, want = -1;
    for (int d = x->ndim - 2; d >= 0; d--) {
        int64_t n = x->shape[d];
        if (n == 1) continue;
        if (step < 0) step = x->stride[d];
        else if (x->stride[d] != want) return 0;
        want = x->stride[d] * n;
        rows *= n;
    }
    *R = rows;
    *rs = step < 0 ? (x->ndim > 0 ? x->shape[x->ndim - 1] : 1) : step;
    return 1;
}

/* The GEMM's view of linear's operands; 0 when a stride fits none. */
typedef struct lin_args {
    int64_t R, in, out, ldx, ldw;
    int tx, tw;
} lin_args;

static int lin_layout(const gdp_node *n, lin_args *l)
{
    const gdp_tensor *x = n->in[0], *w = n->in[1], *y = n->out[0];
    int wio = gdp_attr_int(&n->attrs, "weight_in_out", 0) != 0;
    int64_t rs;
    if (x->ndim < 1 || w->ndim != 2 || !rows_of(x, &l->R, &rs)) return 0;
    l->in = x->shape[x->ndim - 1];
    l->out = y->shape[y->ndim - 1];
    if (!mat_layout(l->R, l->in, rs, x->stride[x->ndim - 1], &l->tx, &l->ldx)) return 0;
    int sw;
    if (!mat_layout_of(w, &sw, &l->ldw)) return 0;
    l->tw = (!wio) ^ sw; /* W (out, in) is read transposed; (in, out) as it is */
    if (n->n_in > 2 && !gdp_is_contiguous(n->in[2])) return 0;
    return 1;
}

// y (R, out) = act(x (R, in) @ W^T + b); W (out, in), or (in, out) with weight_in_out=1
static gdp_status k_linear(void *backend, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)backend; (void)stream;
    const gdp_tensor *x = n->in[0], *w = n->in[1], *b = n->n_in > 2 ? n->in[2] : NULL, *y = n->out[0];
    int act = (int)gdp_attr_int(&n->attrs, "act", 0);
    lin_args l;
    if (!lin_layout(n, &l)) return gdp_fail(err, GDP_ERR_INVALID, "%s: an operand's strides fit no GEMM layout", n->op);
    if (l.R == 0 || l.out == 0) return GDP_OK;
    int st = gcpu_sgemm(l.tx, l.tw, l.R, l.out, l.in, 1.0f, x->data, l.ldx, w->data, l.ldw, 0.0f, y->data, l.out);
    if (st != GDP_OK) return gemm_failed(n, st, l.R, l.out, l.in, err);
    if (b == NULL && act == ACT_NONE) return GDP_OK;
    epi_job j = {.y = y->data, .bias = b != NULL ? b->data : NULL, .out = l.out, .act = act};
    int64_t grain = GCPU_GRAIN_ELEMS / (act == ACT_NONE || act == ACT_RELU ? 1 : 16) / l.out + 1;
    gcpu_parallel_for_grain(l.R, grain, epilogue_rows, &j);
    return GDP_OK;
}

static int s_linear(void *backend, const gdp_node *n)
{
    (void)backend;
    int64_t act = gdp_attr_int(&n->attrs, "act", 0);
    lin_args l;
    return gcpu_all_f32(n) && act >= ACT_NONE && act <= ACT_SILU && lin_layout(n, &l);
}

static const char *const linear_act_attrs[] = {"act", NULL};

/* f16 and bf16: the operands widened to f32 and the GEMM run in f32, as the reference
 * does (k_half.c) */
GCPU_HALF_OF(k_matmul, s_matmul, NULL)
GCPU_HALF_OF(k_linear, s_linear, NULL)

gdp_status gcpu_register_matmul(gcpu_regctx *r, gdp_err *err)
{
    gdp_status s = gcpu_reg_floats(r, "matmul", GCPU_FLOATS(k_matmul, s_matmul, NULL), GDP_KERNEL_STRIDED, NULL, err);
    if (s == GDP_OK)
        s = gcpu_reg_floats(r, "linear", GCPU_FLOATS(k_linear, s_linear, NULL), GDP_KERNEL_STRIDED, NULL, err);
    if (s == GDP_OK)
        s = gcpu_reg_floats(r, "linear_act", GCPU_FLOATS(k_linear, s_linear, NULL), GDP_KERNEL_STRIDED,
                            linear_act_attrs, err);
    /* half operands into an f32 product (out_dtype=f32): the half kernel already widens
     * only the half operands, and the GEMM writes the f32 output directly */
    static const char *const mixed[] = {"bf16,bf16->f32", "f16,f16->f32"};
    for (int i = 0; i < 2 && s == GDP_OK; i++)
        s = gcpu_reg_mixed(r, "matmul", mixed[i], GDP_KERNEL_STRIDED, k_matmul_half, k_matmul_half_ok,
                           k_matmul_half_ws, err);
    return s;
}
