/* matmul.cu — matmul, linear and linear_act through cuBLASLt.
 *
 * gradus tensors are row-major and cuBLAS is column-major. A row-major (R, C) matrix is
 * the column-major (C, R) matrix with the same bytes, so the row-major product
 * C = op(A) op(B) is computed as the column-major product C^T = op(B)^T op(A)^T: the
 * operands swap places and every transpose flag is passed through unchanged.
 *
 * Numerics: f32 uses CUBLAS_COMPUTE_32F (no TF32: the sweep compares with an f64
 * oracle); f16 and bf16 multiply in tensor cores with f32 accumulation and f32 scaling,
 * and the mixed forms "bf16,bf16->f32" and "f16,f16->f32" write the f32 accumulator
 * without rounding it to the narrow type. For a given shape, alignment and workspace,
 * cuBLASLt picks the same algorithm every time, so results are bitwise reproducible.
 *
 * Views: matmul registers GDP_KERNEL_STRIDED. An operand whose matrices are row-major
 * with any row stride, or column-major (a transposed view: permute, or the transpose
 * attribute of the op that made it) is handed to cuBLASLt as it lies, the layout folded
 * into the operand's transpose flag and leading dimension; batch dims may have any
 * strides (0 for broadcast). supports() declines other layouts, and the host then makes
 * the operand contiguous.
 *
 * Workspace: each product node declares cuBLASLt's workspace (MM_WORKSPACE), planned by
 * the host like any buffer, so that two products on two streams never share scratch and
 * a captured graph keeps its own.
 *
 * Plans (descriptors, layouts and the heuristic's algorithm) are cached per shape, so the
 * steady state of a training step makes no heuristic queries.
 *
 * linear and linear_act over a few rows (a decode step: one token per sequence) go to
 * gemv.cu instead, which reads W once with the whole machine; cuBLASLt tiles for many rows.
 */
#include "cuda_internal.h"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

/* elementwise.cu: y = act(y) in place, the activations of linear_act that no cuBLASLt
 * epilogue computes exactly as the reference does. */
gdp_status cu_act_inplace(cu_backend *be, cudaStream_t s, int32_t dtype, void *y, int64_t n, int act, gdp_err *err);
/* gemv.cu: linear and linear_act over a few rows (a decode step), W read once */
int cu_gemv_takes(const gdp_node *n);
gdp_status cu_gemv_linear(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err);

#define MM_CACHE 64
#define MM_LIMIT ((int64_t)INT32_MAX)      /* dims, leading dims and batch counts we hand over */
#define MM_WORKSPACE ((size_t)32 << 20)    /* what cuBLASLt's faster algorithms want on Hopper */

typedef struct mm_key {
    int32_t in_type, out_type, trans_a, trans_b, epilogue, _pad;
    int64_t m, n, k, lda, ldb, ldd, batch, stride_a, stride_b, stride_d;
    int32_t align_a, align_b, align_c, align_d, align_bias, _pad2;
    int64_t workspace, aux_ld;
} mm_key;

/* What follows the product in cuBLASLt's epilogue: a bias (broadcast over the columns of
 * the column-major D), then relu; or GELU (the tanh form) with its input kept in aux; or
 * the product times GELU's derivative at aux (the backward). aux is laid out like D. An
 * addend C, laid out like D too (it may be D), is added to the product (beta = 1). */
typedef struct mm_epi {
    const void *bias;
    int relu, gelu_keep, dgelu;
    void *aux;
    int64_t aux_ld;
    const void *addend;
} mm_epi;

static cublasLtEpilogue_t epilogue_of(const mm_epi *e)
{
    if (e->dgelu) return CUBLASLT_EPILOGUE_DGELU;
    if (e->gelu_keep) return e->bias != NULL ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    if (e->bias != NULL) return e->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    return e->relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT;
}

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
    return GDP_OK;
}

void cu_matmul_close(cu_backend *be)
{
    if (be->mm != NULL) {
        for (int i = 0; i < MM_CACHE; i++) plan_release(&be->mm->plans[i]);
        free(be->mm);
        be->mm = NULL;
    }
    if (be->lt != NULL) (void)cublasLtDestroy((cublasLtHandle_t)be->lt);
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

/* The heuristic's first choice for small products with a short reduction dimension can
 * split K into hundreds of slices, each a few elements deep, plus a reduction over a
 * multi-megabyte workspace: measured on the H200, a 128x10x128 product took 51 us that
 * way and 4.5-9 us with at most 4 slices. So every split is kept at least SPLIT_K_DEPTH
 * deep: the chosen algorithm's split count is lowered to fit (to no split when K is
 * shorter than that), if cuBLASLt accepts the change; otherwise its choice stands. The
 * rule depends only on the shape, so the algorithm, and the bits, stay the same from
 * run to run. */
#define SPLIT_K_DEPTH 32
static void limit_split_k(cu_backend *be, mm_plan *p)
{
    int32_t splits = 1;
    size_t got = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits, &got) !=
            CUBLAS_STATUS_SUCCESS)
        return;
    int64_t most = p->key.k / SPLIT_K_DEPTH;
    if (most < 1) most = 1;
    if (splits <= most) return;
    cublasLtMatmulAlgo_t a = p->algo;
    int32_t want = (int32_t)most;
    if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &want, sizeof want) !=
        CUBLAS_STATUS_SUCCESS)
        return;
    if (want == 1) {
        uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
        if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none, sizeof none) !=
            CUBLAS_STATUS_SUCCESS)
            return;
    }
    cublasLtMatmulHeuristicResult_t check;
    memset(&check, 0, sizeof check);
    if (cublasLtMatmulAlgoCheck((cublasLtHandle_t)be->lt, p->op, p->la, p->lb, p->ld, p->ld, &a, &check) !=
            CUBLAS_STATUS_SUCCESS ||
        check.workspaceSize > (size_t)p->key.workspace)
        return;
    p->algo = a;
}

static gdp_status plan_build(cu_backend *be, mm_plan *p, const void *bias, gdp_err *err)
{
    const mm_key *k = &p->key;
    cudaDataType_t ti = lt_type(k->in_type), to = lt_type(k->out_type);
    LT_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)k->epilogue;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (bias != NULL) {
        int32_t bt = (int32_t)to;
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    if (k->aux_ld > 0) /* the aux matrix's pointer is set at each call, as the bias's */
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &k->aux_ld, sizeof k->aux_ld));
    gdp_status s = layout(&p->la, ti, k->trans_a ? k->k : k->m, k->trans_a ? k->m : k->k, k->lda, k->batch,
                          k->stride_a, err);
    if (s == GDP_OK)
        s = layout(&p->lb, ti, k->trans_b ? k->n : k->k, k->trans_b ? k->k : k->n, k->ldb, k->batch, k->stride_b, err);
    if (s == GDP_OK) s = layout(&p->ld, to, k->m, k->n, k->ldd, k->batch, k->stride_d, err);
    if (s != GDP_OK) return s;

    cublasLtMatmulPreference_t pref = NULL;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = (uint64_t)k->workspace;
    uint32_t al[4] = {(uint32_t)k->align_a, (uint32_t)k->align_b, (uint32_t)k->align_c, (uint32_t)k->align_d};
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
        return gdp_fail(err, GDP_ERR_UNSUPPORTED,
                        "cuBLASLt has no algorithm for dtype %d->%d, %lldx%lldx%lld, batch %lld", (int)k->in_type,
                        (int)k->out_type, (long long)k->m, (long long)k->n, (long long)k->k, (long long)k->batch);
    p->algo = res.algo;
    limit_split_k(be, p);
    p->valid = 1;
    return GDP_OK;
}

/* One operand as cuBLASLt reads it: row-major matrices (rows ld elements apart) at a batch
 * stride; trans = its op is the transpose of what is stored. */
typedef struct mm_operand {
    const void *p;
    int trans;
    int64_t ld, stride;
} mm_operand;

/* The product's scratch: the node's workspace. */
typedef struct mm_ws {
    void *p;
    size_t bytes;
} mm_ws;

/* Column-major, batched with strides (0 broadcasts an operand):
 *   D (m, n) = op(A) (m, k) @ op(B) (k, n), then the epilogue e (a bias (m) broadcast over
 *   columns, an activation, ...). Caller holds be->mu. */
static gdp_status gemm_locked(cu_backend *be, cudaStream_t s, int32_t in_dt, int32_t out_dt, int64_t m, int64_t n,
                              int64_t k, const mm_operand *A, const mm_operand *B, void *D, int64_t ldd, int64_t sd,
                              int64_t batch, const mm_epi *e, const mm_ws *ws, gdp_err *err)
{
    const void *bias = e->bias;
    size_t ei = gdp_dtype_size(in_dt), eo = gdp_dtype_size(out_dt);
    mm_key key;
    memset(&key, 0, sizeof key); /* padding too: keys are compared with memcmp */
    key.in_type = in_dt;
    key.out_type = out_dt;
    key.trans_a = A->trans;
    key.trans_b = B->trans;
    key.epilogue = (int32_t)epilogue_of(e);
    key.aux_ld = e->aux != NULL ? e->aux_ld : 0;
    key.m = m, key.n = n, key.k = k;
    key.lda = A->ld, key.ldb = B->ld, key.ldd = ldd;
    key.batch = batch;
    key.stride_a = A->stride, key.stride_b = B->stride, key.stride_d = sd;
    key.align_a = alignment(A->p, batch > 1 ? A->stride * (int64_t)ei : 0);
    key.align_b = alignment(B->p, batch > 1 ? B->stride * (int64_t)ei : 0);
    key.align_d = alignment(D, batch > 1 ? sd * (int64_t)eo : 0);
    key.align_c = e->addend != NULL ? alignment(e->addend, batch > 1 ? sd * (int64_t)eo : 0) : key.align_d;
    key.align_bias = bias != NULL ? alignment(bias, 0) : 0;
    key.workspace = (int64_t)ws->bytes;

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
    if (e->aux != NULL)
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e->aux, sizeof e->aux));
    const float one = 1.0f, zero = 0.0f;
    const void *C = e->addend != NULL ? e->addend : D;
    LT_TRY(cublasLtMatmul((cublasLtHandle_t)be->lt, p->op, &one, A->p, p->la, B->p, p->lb, e->addend != NULL ? &one : &zero,
                          C, p->ld, D, p->ld, &p->algo, ws->p, ws->bytes, s));
    return GDP_OK;
}

/* Row-major, batched:  C (M, N) = op(A) (M, K) @ op(B) (K, N), with C contiguous (rows N
 * apart). As column-major: C^T = op(B)^T op(A)^T, so B goes first. */
static gdp_status gemm_rowmajor(cu_backend *be, cudaStream_t s, int32_t in_dt, int32_t out_dt, int64_t M, int64_t N,
                                int64_t K, const mm_operand *A, const mm_operand *B, void *C, int64_t sc,
                                int64_t batch, const mm_epi *e, const mm_ws *ws, gdp_err *err)
{
    pthread_mutex_lock(&be->mu);
    gdp_status st = gemm_locked(be, s, in_dt, out_dt, N, M, K, B, A, C, N, sc, batch, e, ws, err);
    pthread_mutex_unlock(&be->mu);
    return st;
}

/* The node's workspace for cuBLASLt. */
static gdp_status mm_workspace(const gdp_node *node, mm_ws *ws, gdp_err *err)
{
    char *p = NULL;
    gdp_status st = cu_ws(node, MM_WORKSPACE, &p, err);
    ws->p = p;
    ws->bytes = st == GDP_OK ? MM_WORKSPACE : 0;
    return st;
}

static size_t mm_workspace_bytes(void *b, const gdp_node *n)
{
    (void)b;
    (void)n;
    return cu_ws_declare(MM_WORKSPACE);
}

/* ---- matmul -------------------------------------------------------------------------- */

/* How the last two dims (R, C) of t lie: row-major with rows *ld apart (returns 1), or
 * column-major, i.e. the transpose of a row-major (C, R) with rows *ld apart (returns 2);
 * 0 for any other layout. Dims of size 1 may have any stride. */
static int matrix_layout(const gdp_tensor *t, int64_t *ld)
{
    int nd = t->ndim;
    int64_t R = t->shape[nd - 2], C = t->shape[nd - 1], sr = t->stride[nd - 2], sc = t->stride[nd - 1];
    if (C == 1 || sc == 1) {
        int64_t l = R == 1 ? (C > 0 ? C : 1) : sr;
        if (l >= (C > 0 ? C : 1) && l <= MM_LIMIT) {
            *ld = l;
            return 1;
        }
    }
    if (R == 1 || sr == 1) {
        int64_t l = C == 1 ? (R > 0 ? R : 1) : sc;
        if (l >= (R > 0 ? R : 1) && l <= MM_LIMIT) {
            *ld = l;
            return 2;
        }
    }
    return 0;
}

/* Uniform products, and the mixed forms with f32 output from f16 or bf16 operands. */
static int matmul_dtypes_ok(const gdp_tensor *a, const gdp_tensor *b, const gdp_tensor *c)
{
    if (!cu_gpu_float(a->dtype) || b->dtype != a->dtype) return 0;
    return c->dtype == a->dtype || (c->dtype == GDP_F32 && gdp_is_half(a->dtype));
}

static int matmul_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 2 || n->n_out != 1) return 0;
    const gdp_tensor *a = n->in[0], *bb = n->in[1], *c = n->out[0];
    if (!matmul_dtypes_ok(a, bb, c)) return 0;
    if (a->ndim < 2 || bb->ndim < 2 || c->ndim < 2) return 0;
    int64_t lda, ldb;
    if (!matrix_layout(a, &lda) || !matrix_layout(bb, &ldb)) return 0;
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
    return t->stride[td];
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
    size_t ei = gdp_dtype_size(a->dtype), eo = gdp_dtype_size(c->dtype);
    if (total == 0) return GDP_OK;
    if (K == 0) {
        CU_TRY(cudaMemsetAsync(c->data, 0, (size_t)total * eo, s));
        return GDP_OK;
    }
    mm_ws ws;
    gdp_status wst = mm_workspace(node, &ws, err);
    if (wst != GDP_OK) return wst;
    mm_operand A, B;
    int la = matrix_layout(a, &A.ld), lb = matrix_layout(b, &B.ld);
    if (!la || !lb) return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda matmul: an operand's matrices are not row- or column-major");
    /* a column-major operand is the transpose of the row-major matrix that is stored */
    A.trans = ta ^ (la == 2);
    B.trans = tb ^ (lb == 2);
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
    /* One strided-batched call covers the innermost dims over which every operand steps
     * evenly (or not at all: broadcast); the rest (e.g. a (2,1,..) against b (5,..), or a
     * permuted batch) loops on the host, one call per outer index. */
    int inner = nd; /* dims [inner, nd) form the strided batch; [0, inner) loop */
    int64_t batch = 1, sa = 0, sb = 0, sc = 0;
    if (nd > 0) {
        inner = nd - 1;
        batch = dim[inner];
        sa = st_a[inner], sb = st_b[inner], sc = st_c[inner];
        /* Dim d joins when, for each operand, stepping along d is stepping over the whole
         * group (evenly) or nothing at all (broadcast on both sides). */
        while (inner > 0) {
            int d = inner - 1;
            if (st_a[d] != sa * batch || st_b[d] != sb * batch || st_c[d] != sc * batch) break;
            batch *= dim[d];
            inner = d;
        }
    }
    A.stride = sa;
    B.stride = sb;
    int64_t outer = cu_prod(dim, 0, inner);
    for (int64_t o = 0; o < outer; o++) {
        int64_t oa = 0, ob = 0, oc = 0, rest = o;
        for (int d = inner - 1; d >= 0; d--) {
            int64_t i = rest % dim[d];
            rest /= dim[d];
            oa += i * st_a[d], ob += i * st_b[d], oc += i * st_c[d];
        }
        A.p = (const char *)a->data + (size_t)oa * ei;
        B.p = (const char *)b->data + (size_t)ob * ei;
        const mm_epi none = {NULL, 0, 0, 0, NULL, 0, NULL};
        gdp_status r = gemm_rowmajor(be, s, a->dtype, c->dtype, M, N, K, &A, &B, (char *)c->data + (size_t)oc * eo,
                                     sc, batch, &none, &ws, err);
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
    if (!cu_gpu_float(x->dtype) || w->dtype != x->dtype || y->dtype != x->dtype || x->ndim < 1 || w->ndim != 2)
        return 0;
    if (n->n_in == 3 && (n->in[2]->dtype != x->dtype || n->in[2]->ndim != 1)) return 0;
    int64_t act = gdp_attr_int(&n->attrs, "act", 0);
    if (act < GDP_ACT_NONE || act >= GDP_ACT_COUNT) return 0;
    int64_t in = x->shape[x->ndim - 1], out = y->shape[y->ndim - 1];
    /* in = 0 would leave y = act(bias): not worth a path of its own. */
    return gdp_numel(x) / (in > 0 ? in : 1) <= MM_LIMIT && out <= MM_LIMIT && in >= 1 && in <= MM_LIMIT;
}

static const char *const linear_act_attrs[] = {"act", NULL};

// y (R, out) = act(x (R, in) @ W^T + b), W (out, in) or, with weight_in_out, (in, out)
static gdp_status linear_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *w = node->in[1], *y = node->out[0];
    const void *bias = node->n_in > 2 ? node->in[2]->data : NULL;
    int act = (int)gdp_attr_int(&node->attrs, "act", GDP_ACT_NONE);
    int wio = gdp_attr_int(&node->attrs, "weight_in_out", 0) != 0;
    int64_t in = x->shape[x->ndim - 1], out = y->shape[y->ndim - 1];
    int64_t R = gdp_numel(x) / in;
    if (R == 0 || out == 0) return GDP_OK;
    if (cu_gemv_takes(node)) return cu_gemv_linear(be, node, s, err);
    mm_ws ws;
    gdp_status st = mm_workspace(node, &ws, err);
    if (st != GDP_OK) return st;
    mm_operand A = {x->data, 0, in, 0}, B = {w->data, !wio, wio ? out : in, 0};
    const mm_epi e = {bias, act == GDP_ACT_RELU, 0, 0, NULL, 0, NULL};
    st = gemm_rowmajor(be, s, x->dtype, y->dtype, R, out, in, &A, &B, y->data, 0, 1, &e, &ws, err);
    if (st != GDP_OK || act == GDP_ACT_NONE || act == GDP_ACT_RELU) return st;
    return cu_act_inplace(be, s, y->dtype, y->data, R * out, act, err);
}
CU_LAUNCHER(linear_run)

/* ---- the GELU epilogues of training: linear_act_keep and matmul_act_grad --------------------
 * cuBLASLt computes GELU in its tanh form on the f32 accumulator (measured on the H200: within
 * 5e-6 of 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))) in f32, far from the erf form), and
 * its derivative the same way. So these kernels take act = gelu-tanh (GPT-2's) on f16 and
 * bf16, where the output's rounding covers the difference from the reference's rounding of z
 * first; the graph pass (fuse.cu) makes nothing else. */

/* Whether the half-precision float dtypes these epilogues are for. */
static int half_act_ok(const gdp_node *n, int32_t dt)
{
    return gdp_is_half(dt) && gdp_attr_int(&n->attrs, "act", 0) == GDP_ACT_GELU_TANH;
}

static int linear_keep_supports(void *b, const gdp_node *n)
{
    if (n->n_in < 2 || n->n_in > 3 || n->n_out != 2 || !half_act_ok(n, n->in[0]->dtype)) return 0;
    const gdp_tensor *y = n->out[0], *z = n->out[1];
    if (z->dtype != y->dtype || gdp_numel(z) != gdp_numel(y)) return 0;
    gdp_node one = *n; /* the product itself is linear_act's */
    one.n_out = 1;
    /* whole 16-byte rows of x, W, y and z: the shapes cuBLASLt's epilogue kernels take */
    return linear_supports(b, &one) && y->shape[y->ndim - 1] % 8 == 0 && n->in[0]->shape[n->in[0]->ndim - 1] % 8 == 0;
}

// y = gelu(z), z = x (R, in) @ W^T + b kept for the backward: one product, GELU_AUX(_BIAS)
static gdp_status linear_keep_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *w = node->in[1], *y = node->out[0], *z = node->out[1];
    int wio = gdp_attr_int(&node->attrs, "weight_in_out", 0) != 0;
    int64_t in = x->shape[x->ndim - 1], out = y->shape[y->ndim - 1];
    int64_t R = gdp_numel(x) / in;
    if (R == 0 || out == 0) return GDP_OK;
    mm_ws ws;
    gdp_status st = mm_workspace(node, &ws, err);
    if (st != GDP_OK) return st;
    mm_operand A = {x->data, 0, in, 0}, B = {w->data, !wio, wio ? out : in, 0};
    const mm_epi e = {node->n_in > 2 ? node->in[2]->data : NULL, 0, 1, 0, z->data, out, NULL};
    return gemm_rowmajor(be, s, x->dtype, y->dtype, R, out, in, &A, &B, y->data, 0, 1, &e, &ws, err);
}
CU_LAUNCHER(linear_keep_run)

static int matmul_grad_supports(void *b, const gdp_node *n)
{
    if (n->n_in != 3 || n->n_out != 1 || !half_act_ok(n, n->in[0]->dtype)) return 0;
    const gdp_tensor *a = n->in[0], *bb = n->in[1], *z = n->in[2], *dz = n->out[0];
    if (a->ndim != 2 || bb->ndim != 2 || bb->dtype != a->dtype || z->dtype != a->dtype || dz->dtype != a->dtype) return 0;
    int64_t lda, ldb;
    if (!matrix_layout(a, &lda) || !matrix_layout(bb, &ldb)) return 0;
    int ta = gdp_attr_int(&n->attrs, "transpose_a", 0) != 0, tb = gdp_attr_int(&n->attrs, "transpose_b", 0) != 0;
    int64_t M = ta ? a->shape[1] : a->shape[0], K = ta ? a->shape[0] : a->shape[1], N = tb ? bb->shape[0] : bb->shape[1];
    (void)b;
    /* z is the contiguous (M, N) aux matrix whatever its dims */
    return K >= 1 && M <= MM_LIMIT && N <= MM_LIMIT && K <= MM_LIMIT && N % 8 == 0 && lda % 8 == 0 && ldb % 8 == 0 &&
           gdp_is_contiguous(z);
}

/* y (M, N) = op(a) @ op(b) of a node's 2-D inputs 0 and 1 (its transpose attributes), then
 * the epilogue e; an aux matrix of e is laid out like y (its ld is N). */
static gdp_status gemm_2d(cu_backend *be, const gdp_node *node, cudaStream_t s, mm_epi e, gdp_err *err)
{
    const gdp_tensor *a = node->in[0], *b = node->in[1], *y = node->out[0];
    int ta = gdp_attr_int(&node->attrs, "transpose_a", 0) != 0, tb = gdp_attr_int(&node->attrs, "transpose_b", 0) != 0;
    int64_t M = ta ? a->shape[1] : a->shape[0], K = ta ? a->shape[0] : a->shape[1], N = tb ? b->shape[0] : b->shape[1];
    if (M == 0 || N == 0) return GDP_OK;
    mm_ws ws;
    gdp_status st = mm_workspace(node, &ws, err);
    if (st != GDP_OK) return st;
    mm_operand A, B;
    int la = matrix_layout(a, &A.ld), lb = matrix_layout(b, &B.ld);
    A.trans = ta ^ (la == 2), B.trans = tb ^ (lb == 2);
    A.p = a->data, B.p = b->data, A.stride = B.stride = 0;
    if (e.aux != NULL) e.aux_ld = N;
    return gemm_rowmajor(be, s, a->dtype, y->dtype, M, N, K, &A, &B, y->data, 0, 1, &e, &ws, err);
}

// dz (M, N) = (op(a) @ op(b)) * gelu'(z): the product in front of gelu_grad, DGELU
static gdp_status matmul_grad_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    return gemm_2d(be, node, s, {NULL, 0, 0, 1, node->in[2]->data, 0, NULL}, err);
}
CU_LAUNCHER(matmul_grad_run)

/* ---- matmul_acc: a product added to r, one GEMM with r as cuBLASLt's C (beta = 1) ---------
 * The sum comes out of the f32 accumulator rounded once, where the pair it replaces rounds
 * the product first: within the dtype's last place of the reference. */
static int matmul_acc_supports(void *b, const gdp_node *n)
{
    if (n->n_in != 3 || n->n_out != 1) return 0;
    const gdp_tensor *a = n->in[0], *bb = n->in[1], *r = n->in[2], *y = n->out[0];
    if (!cu_gpu_float(a->dtype) || a->ndim != 2 || bb->ndim != 2 || bb->dtype != a->dtype || r->dtype != a->dtype ||
        y->dtype != a->dtype)
        return 0;
    int64_t lda, ldb;
    if (!matrix_layout(a, &lda) || !matrix_layout(bb, &ldb)) return 0;
    int ta = gdp_attr_int(&n->attrs, "transpose_a", 0) != 0, tb = gdp_attr_int(&n->attrs, "transpose_b", 0) != 0;
    int64_t M = ta ? a->shape[1] : a->shape[0], K = ta ? a->shape[0] : a->shape[1], N = tb ? bb->shape[0] : bb->shape[1];
    (void)b;
    /* r and y are the contiguous (M, N) C and D whatever their dims */
    return K >= 1 && M <= MM_LIMIT && N <= MM_LIMIT && K <= MM_LIMIT && gdp_is_contiguous(r) && gdp_is_contiguous(y);
}

// y (M, N) = op(a) @ op(b) + r
static gdp_status matmul_acc_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    return gemm_2d(be, node, s, {NULL, 0, 0, 0, NULL, 0, node->in[2]->data}, err);
}
CU_LAUNCHER(matmul_acc_run)

#define MM(op, dt, flags, sup, fn, attrs) CU_KX(op, dt, flags, sup, fn, attrs, mm_workspace_bytes)

static const gdp_kernel kernels[] = {
    MM("matmul", GDP_F32, GDP_KERNEL_STRIDED, matmul_supports, matmul_run_launch, NULL),
    MM("matmul", GDP_F16, GDP_KERNEL_STRIDED, matmul_supports, matmul_run_launch, NULL),
    MM("matmul", GDP_BF16, GDP_KERNEL_STRIDED, matmul_supports, matmul_run_launch, NULL),
    /* the mixed forms: half operands, f32 product (the op's out_dtype attribute) */
    {sizeof(gdp_kernel), "matmul", -1, GDP_KERNEL_STRIDED, matmul_supports, matmul_run_launch, NULL, "bf16,bf16->f32",
     mm_workspace_bytes},
    {sizeof(gdp_kernel), "matmul", -1, GDP_KERNEL_STRIDED, matmul_supports, matmul_run_launch, NULL, "f16,f16->f32",
     mm_workspace_bytes},
    MM("linear", GDP_F32, 0, linear_supports, linear_run_launch, NULL),
    MM("linear", GDP_F16, 0, linear_supports, linear_run_launch, NULL),
    MM("linear", GDP_BF16, 0, linear_supports, linear_run_launch, NULL),
    MM("linear_act", GDP_F32, 0, linear_supports, linear_run_launch, linear_act_attrs),
    MM("linear_act", GDP_F16, 0, linear_supports, linear_run_launch, linear_act_attrs),
    MM("linear_act", GDP_BF16, 0, linear_supports, linear_run_launch, linear_act_attrs),
    MM("linear_act_keep", GDP_F16, 0, linear_keep_supports, linear_keep_run_launch, linear_act_attrs),
    MM("linear_act_keep", GDP_BF16, 0, linear_keep_supports, linear_keep_run_launch, linear_act_attrs),
    MM("matmul_act_grad", GDP_F16, 0, matmul_grad_supports, matmul_grad_run_launch, linear_act_attrs),
    MM("matmul_act_grad", GDP_BF16, 0, matmul_grad_supports, matmul_grad_run_launch, linear_act_attrs),
    MM("matmul_acc", GDP_F32, 0, matmul_acc_supports, matmul_acc_run_launch, NULL),
    MM("matmul_acc", GDP_F16, 0, matmul_acc_supports, matmul_acc_run_launch, NULL),
    MM("matmul_acc", GDP_BF16, 0, matmul_acc_supports, matmul_acc_run_launch, NULL),
};
CU_FAMILY(matmul, kernels);
