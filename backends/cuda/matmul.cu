/* matmul.cu — matmul, linear and linear_act through cuBLASLt.
 *
 * gradus tensors are row-major and cuBLAS is column-major. A row-major (R, C) matrix is
 * the column-major (C, R) matrix with the same bytes, so the row-major product
 * C = op(A) op(B) is computed as the column-major product C^T = op(B)^T op(A)^T: the
 * operands swap places and every transpose flag is passed through unchanged.
 *
 * Numerics: f32 uses CUBLAS_COMPUTE_32F (no TF32: the sweep compares with an f64
 * oracle); f16 and bf16 multiply in tensor cores with f32 accumulation and f32 scaling.
 * For a given shape, alignment and workspace, cuBLASLt picks the same algorithm every
 * time, so results are bitwise reproducible run to run.
 *
 * Plans (descriptors, layouts and the heuristic's algorithm) are cached per shape, so the
 * steady state of a training step makes no heuristic queries.
 */
#include "cuda_internal.h"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

enum { ACT_NONE = 0, ACT_RELU = 1, ACT_GELU_TANH = 2, ACT_GELU = 3, ACT_SILU = 4 }; /* linear_act's numbering */

/* elementwise.cu: y = act(y) in place, the activations of linear_act that no cuBLASLt
 * epilogue computes exactly as the reference does. */
gdp_status cu_act_inplace(cu_backend *be, cudaStream_t s, int32_t dtype, void *y, int64_t n, int act, gdp_err *err);

#define MM_CACHE 64
#define MM_LIMIT ((int64_t)INT32_MAX) /* dims, leading dims and batch counts we hand over */

typedef struct mm_key {
    int32_t dtype, trans_a, trans_b, epilogue;
    int64_t m, n, k, lda, ldb, ldd, batch, stride_a, stride_b, stride_d;
    int32_t align_a, align_b, align_d, align_bias;
    int64_t workspace;
} mm_key;

typedef struct mm_plan {
    mm_key key;
    int valid;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} mm_plan;

struct cu_mm_cache {
    mm_plan plans[MM_CACHE];
    int next; /* round-robin victim */
};

static gdp_status lt_check(cublasStatus_t st, const char *call, gdp_err *err)
{
    if (st == CUBLAS_STATUS_SUCCESS) return GDP_OK;
    return gdp_fail(err, st == CUBLAS_STATUS_ALLOC_FAILED ? GDP_ERR_NOMEM : GDP_ERR_DEVICE,
                    "cuBLASLt: %s failed: %s (%d)", call, cublasGetStatusString(st), (int)st);
}
#define LT_TRY(call)                                                   \
    do {                                                               \
        gdp_status lt_s_ = lt_check((call), #call, err);               \
        if (lt_s_ != GDP_OK) return lt_s_;                             \
    } while (0)

static void plan_release(mm_plan *p)
{
    if (p->op != NULL) (void)cublasLtMatmulDescDestroy(p->op);
    if (p->la != NULL) (void)cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb != NULL) (void)cublasLtMatrixLayoutDestroy(p->lb);
    if (p->ld != NULL) (void)cublasLtMatrixLayoutDestroy(p->ld);
    memset(p, 0, sizeof *p);
}

gdp_status cu_matmul_open(cu_backend *be, gdp_err *err)
{
    cublasLtHandle_t h = NULL;
    LT_TRY(cublasLtCreate(&h));
    be->lt = h;
    be->mm = (cu_mm_cache *)calloc(1, sizeof *be->mm);
    if (be->mm == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "cuda: out of host memory");
    /* Allocated once, outside any step; cuBLASLt needs it for its faster algorithms. */
    CU_TRY(cudaMalloc(&be->lt_ws, CU_LT_WORKSPACE));
    return GDP_OK;
}

void cu_matmul_close(cu_backend *be)
{
    if (be->mm != NULL) {
        for (int i = 0; i < MM_CACHE; i++) plan_release(&be->mm->plans[i]);
        free(be->mm);
        be->mm = NULL;
    }
    if (be->lt_ws != NULL) (void)cudaFree(be->lt_ws);
    if (be->lt != NULL) (void)cublasLtDestroy((cublasLtHandle_t)be->lt);
    be->lt_ws = NULL;
    be->lt = NULL;
}

/* Largest power of two up to 256 dividing the address and every byte stride: what the
 * heuristic may assume of each batch's pointer. */
static int32_t alignment(const void *p, int64_t stride_bytes)
{
    uint64_t bits = (uint64_t)(uintptr_t)p | (uint64_t)stride_bytes | 256u;
    return (int32_t)(bits & (~bits + 1));
}

static cudaDataType_t lt_type(int32_t dt)
{
    return dt == GDP_F16 ? CUDA_R_16F : dt == GDP_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static gdp_status layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld,
                         int64_t batch, int64_t stride, gdp_err *err)
{
    LT_TRY(cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
    int32_t b = (int32_t)batch;
    LT_TRY(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
    LT_TRY(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    return GDP_OK;
}

static gdp_status plan_build(cu_backend *be, mm_plan *p, const void *bias, gdp_err *err)
{
    const mm_key *k = &p->key;
    cudaDataType_t t = lt_type(k->dtype);
    LT_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)k->epilogue;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (bias != NULL) {
        int32_t bt = (int32_t)t;
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    gdp_status s = layout(&p->la, t, k->trans_a ? k->k : k->m, k->trans_a ? k->m : k->k, k->lda, k->batch,
                          k->stride_a, err);
    if (s == GDP_OK)
        s = layout(&p->lb, t, k->trans_b ? k->n : k->k, k->trans_b ? k->k : k->n, k->ldb, k->batch, k->stride_b, err);
    if (s == GDP_OK) s = layout(&p->ld, t, k->m, k->n, k->ldd, k->batch, k->stride_d, err);
    if (s != GDP_OK) return s;

    cublasLtMatmulPreference_t pref = NULL;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = (uint64_t)k->workspace;
    uint32_t al[4] = {(uint32_t)k->align_a, (uint32_t)k->align_b, (uint32_t)k->align_d, (uint32_t)k->align_d};
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasLtMatmulPreferenceSetAttribute(pref, which[i], &al[i], sizeof al[i]);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    memset(&res, 0, sizeof res);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)be->lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &res,
                                            &found);
    (void)cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS) return lt_check(st, "cublasLtMatmulAlgoGetHeuristic", err);
    if (found < 1)
        return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuBLASLt has no algorithm for dtype %d, %lldx%lldx%lld, batch %lld",
                        (int)k->dtype, (long long)k->m, (long long)k->n, (long long)k->k, (long long)k->batch);
    p->algo = res.algo;
    p->valid = 1;
    return GDP_OK;
}

/* Column-major, batched with strides (0 broadcasts an operand):
 *   D (m, n) = op(A) (m, k) @ op(B) (k, n) [+ bias (m) broadcast over columns] [relu]
 * Caller holds be->mu. */
static gdp_status gemm_locked(cu_backend *be, cudaStream_t s, int32_t dtype, int trans_a, int trans_b, int64_t m,
                              int64_t n, int64_t k, const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb,
                              int64_t sb, void *D, int64_t ldd, int64_t sd, int64_t batch, const void *bias, int relu,
                              gdp_err *err)
{
    size_t es = gdp_dtype_size(dtype);
    mm_key key;
    memset(&key, 0, sizeof key); /* padding too: keys are compared with memcmp */
    key.dtype = dtype;
    key.trans_a = trans_a;
    key.trans_b = trans_b;
    key.epilogue = (int32_t)(bias != NULL ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                          : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT));
    key.m = m, key.n = n, key.k = k;
    key.lda = lda, key.ldb = ldb, key.ldd = ldd;
    key.batch = batch;
    key.stride_a = sa, key.stride_b = sb, key.stride_d = sd;
    key.align_a = alignment(A, batch > 1 ? sa * (int64_t)es : 0);
    key.align_b = alignment(B, batch > 1 ? sb * (int64_t)es : 0);
    key.align_d = alignment(D, batch > 1 ? sd * (int64_t)es : 0);
    key.align_bias = bias != NULL ? alignment(bias, 0) : 0;
    /* The workspace is shared, so only the compute stream uses it: two streams running
     * matmuls at once must not scribble over each other's scratch. */
    key.workspace = s == be->compute ? (int64_t)CU_LT_WORKSPACE : 0;

    cu_mm_cache *c = be->mm;
    mm_plan *p = NULL;
    for (int i = 0; i < MM_CACHE && p == NULL; i++)
        if (c->plans[i].valid && memcmp(&c->plans[i].key, &key, sizeof key) == 0) p = &c->plans[i];
    if (p == NULL) {
        p = &c->plans[c->next];
        c->next = (c->next + 1) % MM_CACHE;
        plan_release(p);
        p->key = key;
        gdp_status st = plan_build(be, p, bias, err);
        if (st != GDP_OK) {
            plan_release(p);
            return st;
        }
    }
    if (bias != NULL)
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const float one = 1.0f, zero = 0.0f;
    LT_TRY(cublasLtMatmul((cublasLtHandle_t)be->lt, p->op, &one, A, p->la, B, p->lb, &zero, D, p->ld, D, p->ld, &p->algo,
                          key.workspace ? be->lt_ws : NULL, (size_t)key.workspace, s));
    return GDP_OK;
}

/* Row-major, batched:  C (M, N) = op(A) (M, K) @ op(B) (K, N), each operand's stored
 * matrix being (M, K) / (K, M) and (K, N) / (N, K) as its flag says. */
static gdp_status gemm_rowmajor(cu_backend *be, cudaStream_t s, int32_t dtype, int ta, int tb, int64_t M, int64_t N,
                                int64_t K, const void *A, int64_t sa, const void *B, int64_t sb, void *C, int64_t sc,
                                int64_t batch, const void *bias, int relu, gdp_err *err)
{
    int64_t lda_row = ta ? M : K; /* last dim of A as stored */
    int64_t ldb_row = tb ? K : N;
    pthread_mutex_lock(&be->mu);
    gdp_status st = gemm_locked(be, s, dtype, tb, ta, N, M, K, B, ldb_row, sb, A, lda_row, sa, C, N, sc, batch, bias,
                                relu, err);
    pthread_mutex_unlock(&be->mu);
    return st;
}

/* ---- matmul -------------------------------------------------------------------------- */

static int dims_ok(int64_t M, int64_t N, int64_t K)
{
    return M <= MM_LIMIT && N <= MM_LIMIT && K >= 1 && K <= MM_LIMIT;
}

static int matmul_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 2 || n->n_out != 1) return 0;
    const gdp_tensor *a = n->in[0], *bb = n->in[1], *c = n->out[0];
    if (!cu_is_float(a->dtype) || bb->dtype != a->dtype || c->dtype != a->dtype) return 0;
    if (a->ndim < 2 || bb->ndim < 2 || c->ndim < 2) return 0;
    int ta = gdp_attr_int(&n->attrs, "transpose_a", 0) != 0;
    int64_t K = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t M = c->shape[c->ndim - 2], N = c->shape[c->ndim - 1];
    /* K = 0 is served too (the product is zero); only the sizes cuBLASLt takes matter. */
    return M <= MM_LIMIT && N <= MM_LIMIT && K <= MM_LIMIT && cu_prod(c->shape, 0, c->ndim - 2) <= MM_LIMIT;
}

/* Element stride of operand t's matrices along output batch dim d (0 where t is broadcast
 * or has no such dim); t's batch dims are right-aligned to the output's. */
static int64_t batch_stride(const gdp_tensor *t, const gdp_tensor *c, int d)
{
    int nbat = c->ndim - 2, tb = t->ndim - 2, td = d - (nbat - tb);
    if (td < 0 || t->shape[td] == 1) return 0;
    return cu_prod(t->shape, td + 1, t->ndim);
}

// C (..., M, N) = op(A) (..., M, K) @ op(B) (..., K, N), batch dims broadcast
static gdp_status matmul_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *a = node->in[0], *b = node->in[1], *c = node->out[0];
    int ta = gdp_attr_int(&node->attrs, "transpose_a", 0) != 0;
    int tb = gdp_attr_int(&node->attrs, "transpose_b", 0) != 0;
    int nbat = c->ndim - 2;
    int64_t M = c->shape[nbat], N = c->shape[nbat + 1];
    int64_t K = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t total = gdp_numel(c);
    size_t es = gdp_dtype_size(c->dtype);
    if (total == 0) return GDP_OK;
    if (K == 0) {
        CU_TRY(cudaMemsetAsync(c->data, 0, (size_t)total * es, s));
        return GDP_OK;
    }
    /* The output's batch dims, size-1 ones dropped, with each operand's stride. */
    int nd = 0;
    int64_t dim[GDP_MAX_DIMS], st_a[GDP_MAX_DIMS], st_b[GDP_MAX_DIMS], st_c[GDP_MAX_DIMS];
    for (int d = 0; d < nbat; d++) {
        if (c->shape[d] == 1) continue;
        dim[nd] = c->shape[d];
        st_a[nd] = batch_stride(a, c, d);
        st_b[nd] = batch_stride(b, c, d);
        st_c[nd] = cu_prod(c->shape, d + 1, c->ndim);
        nd++;
    }
    /* One strided-batched call covers the innermost dims over which every operand is
     * either contiguous or broadcast throughout; the rest (e.g. a (2,1,..) against
     * b (5,..)) loops on the host, one call per outer index. */
    int inner = nd; /* dims [inner, nd) form the strided batch; [0, inner) loop */
    int64_t batch = 1, sa = 0, sb = 0, sc = 0;
    if (nd > 0) {
        inner = nd - 1;
        batch = dim[inner];
        sa = st_a[inner], sb = st_b[inner], sc = st_c[inner];
        /* Dim d joins when, for each operand, stepping along d is stepping over the whole
         * group (contiguous) or nothing at all (broadcast on both sides). */
        while (inner > 0) {
            int d = inner - 1;
            if (st_a[d] != sa * batch || st_b[d] != sb * batch || st_c[d] != sc * batch) break;
            batch *= dim[d];
            inner = d;
        }
    }
    int64_t outer = cu_prod(dim, 0, inner);
    for (int64_t o = 0; o < outer; o++) {
        int64_t oa = 0, ob = 0, oc = 0, rest = o;
        for (int d = inner - 1; d >= 0; d--) {
            int64_t i = rest % dim[d];
            rest /= dim[d];
            oa += i * st_a[d], ob += i * st_b[d], oc += i * st_c[d];
        }
        gdp_status r = gemm_rowmajor(be, s, c->dtype, ta, tb, M, N, K, (const char *)a->data + (size_t)oa * es, sa,
                                     (const char *)b->data + (size_t)ob * es, sb, (char *)c->data + (size_t)oc * es, sc,
                                     batch, NULL, 0, err);
        if (r != GDP_OK) return r;
    }
    return GDP_OK;
}
CU_LAUNCHER(matmul_run)

/* ---- linear, linear_act ------------------------------------------------------------------ */

static int linear_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in < 2 || n->n_in > 3 || n->n_out != 1) return 0;
    const gdp_tensor *x = n->in[0], *w = n->in[1], *y = n->out[0];
    if (!cu_is_float(x->dtype) || w->dtype != x->dtype || y->dtype != x->dtype || x->ndim < 1 || w->ndim != 2)
        return 0;
    if (n->n_in == 3 && (n->in[2]->dtype != x->dtype || n->in[2]->ndim != 1)) return 0;
    int64_t act = gdp_attr_int(&n->attrs, "act", 0);
    if (act < ACT_NONE || act > ACT_SILU) return 0;
    int64_t in = x->shape[x->ndim - 1], out = y->shape[y->ndim - 1];
    /* in = 0 would leave y = act(bias): not worth a path of its own. */
    return dims_ok(gdp_numel(x) / (in > 0 ? in : 1), out, in);
}

static const char *const linear_act_attrs[] = {"act", NULL};

// y (R, out) = act(x (R, in) @ W^T + b), W (out, in) or, with weight_in_out, (in, out)
static gdp_status linear_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *w = node->in[1], *y = node->out[0];
    const void *bias = node->n_in > 2 ? node->in[2]->data : NULL;
    int act = (int)gdp_attr_int(&node->attrs, "act", ACT_NONE);
    int wio = gdp_attr_int(&node->attrs, "weight_in_out", 0) != 0;
    int64_t in = x->shape[x->ndim - 1], out = y->shape[y->ndim - 1];
    int64_t R = gdp_numel(x) / in;
    if (R == 0 || out == 0) return GDP_OK;
    gdp_status st = gemm_rowmajor(be, s, x->dtype, 0, !wio, R, out, in, x->data, 0, w->data, 0, y->data, 0, 1, bias,
                                  act == ACT_RELU, err);
    if (st != GDP_OK || act == ACT_NONE || act == ACT_RELU) return st;
    return cu_act_inplace(be, s, y->dtype, y->data, R * out, act, err);
}
CU_LAUNCHER(linear_run)

static const gdp_kernel kernels[] = {
    CU_K("matmul", GDP_F32, matmul_supports, matmul_run_launch, NULL),
    CU_K("matmul", GDP_F16, matmul_supports, matmul_run_launch, NULL),
    CU_K("matmul", GDP_BF16, matmul_supports, matmul_run_launch, NULL),
    CU_K("linear", GDP_F32, linear_supports, linear_run_launch, NULL),
    CU_K("linear", GDP_F16, linear_supports, linear_run_launch, NULL),
    CU_K("linear", GDP_BF16, linear_supports, linear_run_launch, NULL),
    CU_K("linear_act", GDP_F32, linear_supports, linear_run_launch, linear_act_attrs),
    CU_K("linear_act", GDP_F16, linear_supports, linear_run_launch, linear_act_attrs),
    CU_K("linear_act", GDP_BF16, linear_supports, linear_run_launch, linear_act_attrs),
};
CU_FAMILY(matmul, kernels);
