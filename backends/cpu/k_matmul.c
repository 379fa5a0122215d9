/* k_matmul.c — matmul, linear and linear_act (f32) on the backend's GEMM.
 *
 * Definitions are in src/ops/matmul.c. The GEMM does the product; linear's bias and
 * activation are one more pass over the output, threaded over rows.
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

/* ---- matmul -------------------------------------------------------------------------------- */

/* Offset of the matrix of operand t that output batch bi reads (batch dims right-aligned,
 * size-1 dims broadcast), as in the reference. */
static int64_t batch_offset(const gdp_tensor *t, const int64_t *out_shape, int nbat, int64_t bi)
{
    int tb = t->ndim - 2;
    int64_t off = 0, stride = t->shape[t->ndim - 2] * t->shape[t->ndim - 1];
    for (int d = nbat - 1; d >= 0; d--) {
        int64_t coord = bi % out_shape[d];
        bi /= out_shape[d];
        int td = d - (nbat - tb);
        if (td < 0) continue;
        if (t->shape[td] != 1) off += coord * stride;
        stride *= t->shape[td];
    }
    return off;
}

typedef struct mm_job {
    const gdp_node *n;
    int ta, tb, nbat;
    int64_t M, N, K;
    atomic_int status;
} mm_job;

static int mm_one(const mm_job *j, int64_t bi)
{
    const gdp_tensor *a = j->n->in[0], *b = j->n->in[1], *c = j->n->out[0];
    const float *pa = (const float *)a->data + batch_offset(a, c->shape, j->nbat, bi);
    const float *pb = (const float *)b->data + batch_offset(b, c->shape, j->nbat, bi);
    float *pc = (float *)c->data + bi * j->M * j->N;
    int64_t lda = j->ta ? j->M : j->K, ldb = j->tb ? j->K : j->N;
    return gcpu_sgemm(j->ta, j->tb, j->M, j->N, j->K, 1.0f, pa, lda > 0 ? lda : 1, pb, ldb > 0 ? ldb : 1, 0.0f, pc,
                      j->N > 0 ? j->N : 1);
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
    j.ta = gdp_attr_int(&n->attrs, "transpose_a", 0) != 0;
    j.tb = gdp_attr_int(&n->attrs, "transpose_b", 0) != 0;
    j.nbat = c->ndim - 2;
    j.M = c->shape[j.nbat];
    j.N = c->shape[j.nbat + 1];
    j.K = j.ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
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
    return gcpu_all_f32(n);
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

// y (R, out) = act(x (R, in) @ W^T + b); W (out, in), or (in, out) with weight_in_out=1
static gdp_status k_linear(void *backend, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)backend; (void)stream;
    const gdp_tensor *x = n->in[0], *w = n->in[1], *b = n->n_in > 2 ? n->in[2] : NULL, *y = n->out[0];
    int act = (int)gdp_attr_int(&n->attrs, "act", 0);
    int wio = gdp_attr_int(&n->attrs, "weight_in_out", 0) != 0;
    int64_t in = x->shape[x->ndim - 1], out = y->shape[y->ndim - 1];
    int64_t R = out > 0 ? gdp_numel(y) / out : 0;
    if (R == 0 || out == 0) return GDP_OK;
    int st = gcpu_sgemm(0, !wio, R, out, in, 1.0f, x->data, in > 0 ? in : 1, w->data, wio ? out : (in > 0 ? in : 1),
                        0.0f, y->data, out);
    if (st != GDP_OK) return gemm_failed(n, st, R, out, in, err);
    if (b == NULL && act == ACT_NONE) return GDP_OK;
    epi_job j = {.y = y->data, .bias = b != NULL ? b->data : NULL, .out = out, .act = act};
    int64_t grain = GCPU_GRAIN_ELEMS / (act == ACT_NONE || act == ACT_RELU ? 1 : 16) / out + 1;
    gcpu_parallel_for_grain(R, grain, epilogue_rows, &j);
    return GDP_OK;
}

static int s_linear(void *backend, const gdp_node *n)
{
    (void)backend;
    int64_t act = gdp_attr_int(&n->attrs, "act", 0);
    return gcpu_all_f32(n) && act >= ACT_NONE && act <= ACT_SILU;
}

static const char *const linear_act_attrs[] = {"act", NULL};

/* f16 and bf16: the operands widened to f32 and the GEMM run in f32, as the reference
 * does (k_half.c) */
GCPU_HALF_OF(k_matmul, s_matmul)
GCPU_HALF_OF(k_linear, s_linear)

gdp_status gcpu_register_matmul(const gdp_host *host, gdp_err *err)
{
    gdp_status s = GCPU_REG_FLOATS(host, "matmul", k_matmul, s_matmul, NULL, err);
    if (s == GDP_OK) s = GCPU_REG_FLOATS(host, "linear", k_linear, s_linear, NULL, err);
    if (s == GDP_OK) s = GCPU_REG_FLOATS(host, "linear_act", k_linear, s_linear, linear_act_attrs, err);
    return s;
}
