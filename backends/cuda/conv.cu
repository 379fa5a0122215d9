/* conv.cu — the conv family (src/ops/conv.c): conv2d, conv2d_grad_input and
 * conv2d_grad_weight, NCHW, square stride / padding / dilation, groups.
 *
 * Two paths compute the same thing:
 *  - cuDNN (when CMake found it: GRADUS_HAVE_CUDNN). Descriptors and the algorithm are
 *    chosen once per shape with cudnnGet*Algorithm_v7 (a heuristic: no benchmarking, no
 *    host synchronization, the same choice every run) and cached. Only algorithms cuDNN
 *    reports deterministic are taken, so reruns are bitwise identical; f32 runs with
 *    CUDNN_FMA_MATH, because CUDNN_DEFAULT_MATH lets Ampere and newer use TF32, whose
 *    10-bit mantissa cannot meet the oracle's 1e-7 NMSE.
 *  - im2col + cuBLAS GEMM, written here: the path when cuDNN is absent, disabled
 *    (GRADUS_CUDNN=0), or has no acceptable algorithm for a shape. It follows the
 *    reference's decomposition (one GEMM per sample and group, batched over groups),
 *    its col2im is a gather (each dx element sums its taps in a fixed order: no atomics),
 *    and the weight gradient sums samples by successive GEMMs with beta = 1, in order.
 *    f16/bf16 products accumulate in f32 (GEMM compute type, f32 dcol and dw).
 *
 * Workspace: the node declares it (conv_workspace, at compile time), and that is also when
 * the cuDNN and cuBLAS handles are made and the cuDNN plan chosen, so that a launch only
 * launches and can be captured into a CUDA graph. With a cuDNN plan the workspace is the
 * larger of the algorithm's and the im2col path's for one sample at a time (cuDNN may
 * still decline at run time); without one, the im2col path gets room for as many samples
 * as CONV_COL_BYTES of columns hold.
 *
 * cudnn and cuBLAS handles live in a per-backend state kept here (found by backend
 * pointer) and released by cu_conv_close from the plugin's shutdown. One mutex per state
 * guards the handles (their stream binding) and the plan cache.
 */
#include "cuda_internal.h"

#include <cublas_v2.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#ifdef GRADUS_HAVE_CUDNN
#include <cudnn.h>
#endif

#define THREADS 256
#define CONV_CACHE 256                        /* cached cuDNN plans per backend */
#define CONV_WS_CAP ((size_t)1 << 30)         /* largest cuDNN workspace accepted */
#define CONV_COL_BYTES ((size_t)64 << 20)     /* im2col scratch per chunk of samples */
#define CONV_BLAS_WS ((size_t)4 << 20)        /* cuBLAS workspace of one im2col call */
#define CONV_MAX_BACKENDS 16
#define CONV_INT_LIM ((int64_t)INT32_MAX)     /* cuDNN and cuBLAS take int sizes */

enum { K_FWD = 0, K_BWD_DATA = 1, K_BWD_FILTER = 2 };
static const char *const kind_name[] = {"conv2d", "conv2d_grad_input", "conv2d_grad_weight"};

typedef struct conv_geom {
    int64_t N, C, H, W;     // input
    int64_t Co, Cg, kh, kw; // weight (Co, C/groups, kh, kw)
    int64_t Ho, Wo;         // output
    int64_t stride, pad, dil, groups;
} conv_geom;

/* ---- geometry: the shape rule of src/ops/conv.c, as a yes/no ----------------------------- */

/* Fills g from the node's attributes (the reference's defaults) and the shapes of x, w and
 * y, whichever of them are the node's inputs or output; 0 unless they are consistent and
 * every size fits the int that cuDNN and cuBLAS take. */
static int geom_of(const gdp_node *n, const gdp_tensor *x, const gdp_tensor *w, const gdp_tensor *y, conv_geom *g)
{
    if (x->ndim != 4 || w->ndim != 4 || y->ndim != 4) return 0;
    g->stride = gdp_attr_int(&n->attrs, "stride", 1);
    g->pad = gdp_attr_int(&n->attrs, "padding", 0);
    g->dil = gdp_attr_int(&n->attrs, "dilation", 1);
    g->groups = gdp_attr_int(&n->attrs, "groups", 1);
    if (g->stride < 1 || g->pad < 0 || g->dil < 1 || g->groups < 1) return 0;
    if (g->stride > CONV_INT_LIM || g->pad > CONV_INT_LIM || g->dil > CONV_INT_LIM || g->groups > CONV_INT_LIM) return 0;
    for (int i = 0; i < 4; i++)
        if (x->shape[i] < 1 || x->shape[i] > CONV_INT_LIM || w->shape[i] < 1 || w->shape[i] > CONV_INT_LIM) return 0;
    /* Element counts below 2^31; from here on no product of sizes overflows int64. */
    if (gdp_numel(x) > CONV_INT_LIM || gdp_numel(w) > CONV_INT_LIM || gdp_numel(y) > CONV_INT_LIM) return 0;
    g->N = x->shape[0], g->C = x->shape[1], g->H = x->shape[2], g->W = x->shape[3];
    g->Co = w->shape[0], g->Cg = w->shape[1], g->kh = w->shape[2], g->kw = w->shape[3];
    if (g->C % g->groups != 0 || g->Co % g->groups != 0 || g->Cg * g->groups != g->C) return 0;
    if (g->H + 2 * g->pad < g->dil * (g->kh - 1) + 1 || g->W + 2 * g->pad < g->dil * (g->kw - 1) + 1) return 0;
    g->Ho = (g->H + 2 * g->pad - g->dil * (g->kh - 1) - 1) / g->stride + 1;
    g->Wo = (g->W + 2 * g->pad - g->dil * (g->kw - 1) - 1) / g->stride + 1;
    if (y->shape[0] != g->N || y->shape[1] != g->Co || y->shape[2] != g->Ho || y->shape[3] != g->Wo) return 0;
    /* One sample's im2col matrix (C kh kw, Ho Wo): C kh kw <= numel(w) since Co >= groups. */
    if (g->C * g->kh * g->kw * g->Ho * g->Wo > CONV_INT_LIM) return 0;
    return 1;
}

static int float_node(const gdp_node *n)
{
    int32_t dt = n->out[0]->dtype;
    if (!cu_gpu_float(dt)) return 0;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i]->dtype != dt) return 0;
    return 1;
}

/* The tensors of a node in conv2d's terms; NULL bias when there is none. */
typedef struct conv_io {
    const gdp_tensor *x, *w, *y, *b;
} conv_io;

static int node_io(const gdp_node *n, int kind, conv_io *io)
{
    memset(io, 0, sizeof *io);
    if (n->n_out != 1 || n->n_in < 2 || n->n_in > (kind == K_FWD ? 3 : 2)) return 0;
    if (kind == K_FWD) io->x = n->in[0], io->w = n->in[1], io->y = n->out[0], io->b = n->n_in > 2 ? n->in[2] : NULL;
    if (kind == K_BWD_DATA) io->y = n->in[0], io->w = n->in[1], io->x = n->out[0];
    if (kind == K_BWD_FILTER) io->y = n->in[0], io->x = n->in[1], io->w = n->out[0];
    return 1;
}

static int conv_supports_kind(const gdp_node *n, int kind)
{
    conv_io io;
    conv_geom g;
    if (!node_io(n, kind, &io) || !float_node(n) || !geom_of(n, io.x, io.w, io.y, &g)) return 0;
    return io.b == NULL || (io.b->ndim == 1 && io.b->shape[0] == g.Co);
}

static int conv2d_supports(void *b, const gdp_node *n) { (void)b; return conv_supports_kind(n, K_FWD); }
static int grad_input_supports(void *b, const gdp_node *n) { (void)b; return conv_supports_kind(n, K_BWD_DATA); }
static int grad_weight_supports(void *b, const gdp_node *n) { (void)b; return conv_supports_kind(n, K_BWD_FILTER); }

/* ---- per-backend state ----------------------------------------------------------------------- */

typedef struct conv_key {
    int32_t kind, dtype;
    conv_geom g;
} conv_key;

typedef struct conv_plan {
    conv_key key;
    int valid;
    int algo;  /* cuDNN algorithm, or -1: none acceptable, the im2col path runs */
    size_t ws; /* its workspace bytes */
#ifdef GRADUS_HAVE_CUDNN
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
#endif
} conv_plan;

typedef struct conv_state {
    cu_backend *be;
    pthread_mutex_t mu;   /* guards everything below */
    int dnn_tried;        /* cuDNN handle creation attempted */
    void *dnn;            /* cudnnHandle_t; NULL: cuDNN absent, disabled or failed */
    cublasHandle_t blas;  /* the im2col path's, created on first use */
    conv_plan plans[CONV_CACHE];
    int next;             /* round-robin victim */
} conv_state;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static conv_state *reg[CONV_MAX_BACKENDS];

static void conv_log(const cu_backend *be, const char *fmt, ...)
{
    const gdp_host *h = be->host;
    if (!GDP_HAS_FIELD(h, gdp_host, log) || h->log == NULL) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    h->log(h->host, line);
}

static gdp_status state_of(cu_backend *be, conv_state **out, gdp_err *err)
{
    *out = NULL;
    pthread_mutex_lock(&reg_mu);
    int free_slot = -1;
    for (int i = 0; i < CONV_MAX_BACKENDS && *out == NULL; i++) {
        if (reg[i] != NULL && reg[i]->be == be) *out = reg[i];
        if (reg[i] == NULL && free_slot < 0) free_slot = i;
    }
    if (*out == NULL && free_slot >= 0) {
        conv_state *cs = (conv_state *)calloc(1, sizeof *cs);
        if (cs != NULL) {
            cs->be = be;
            pthread_mutex_init(&cs->mu, NULL);
            reg[free_slot] = cs;
            *out = cs;
        }
    }
    pthread_mutex_unlock(&reg_mu);
    if (*out == NULL)
        return gdp_fail(err, GDP_ERR_NOMEM, "conv: no room for the state of another backend (out of memory?)");
    return GDP_OK;
}

#ifdef GRADUS_HAVE_CUDNN
static void plan_release(conv_plan *p)
{
    if (p->xd != NULL) (void)cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd != NULL) (void)cudnnDestroyTensorDescriptor(p->yd);
    if (p->wd != NULL) (void)cudnnDestroyFilterDescriptor(p->wd);
    if (p->cd != NULL) (void)cudnnDestroyConvolutionDescriptor(p->cd);
    memset(p, 0, sizeof *p);
}
#else
static void plan_release(conv_plan *p) { memset(p, 0, sizeof *p); }
#endif

/* Called from the plugin's shutdown, with the backend's device current. */
void cu_conv_close(cu_backend *be)
{
    conv_state *cs = NULL;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < CONV_MAX_BACKENDS; i++)
        if (reg[i] != NULL && reg[i]->be == be) {
            cs = reg[i];
            reg[i] = NULL;
        }
    pthread_mutex_unlock(&reg_mu);
    if (cs == NULL) return;
    for (int i = 0; i < CONV_CACHE; i++) plan_release(&cs->plans[i]);
#ifdef GRADUS_HAVE_CUDNN
    if (cs->dnn != NULL) (void)cudnnDestroy((cudnnHandle_t)cs->dnn);
#endif
    if (cs->blas != NULL) (void)cublasDestroy(cs->blas);
    pthread_mutex_destroy(&cs->mu);
    free(cs);
}

/* ---- kernels ------------------------------------------------------------------------------------ */

// col (nb, C kh kw, Ho Wo) from x (nb, C, H, W): row (c, i, j) holds what kernel tap (i, j)
// of channel c sees at every output position; zero where the tap lands in the padding
template <typename T>
__global__ void im2col_kernel(const T *x, T *col, int64_t total, conv_geom g)
{
    int64_t P = g.Ho * g.Wo;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t p = e % P, r = e / P;
        int64_t j = r % g.kw;
        r /= g.kw;
        int64_t i = r % g.kh;
        r /= g.kh; /* r = n C + c */
        int64_t ih = (p / g.Wo) * g.stride - g.pad + i * g.dil;
        int64_t iw = (p % g.Wo) * g.stride - g.pad + j * g.dil;
        int in = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
        cu_st(col, e, in ? cu_ld(x, (r * g.H + ih) * g.W + iw) : 0.0f);
    }
}

// dx (nb, C, H, W) = the adjoint of im2col applied to dcol (nb, C kh kw, Ho Wo): each
// element sums the taps that saw it, in (i, j) order
template <typename T>
__global__ void col2im_kernel(const float *dcol, T *dx, int64_t total, conv_geom g)
{
    int64_t P = g.Ho * g.Wo;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t w = e % g.W, t = e / g.W, h = t % g.H;
        t /= g.H; /* t = n C + c */
        float acc = 0.0f;
        for (int64_t i = 0; i < g.kh; i++) {
            int64_t a = h + g.pad - i * g.dil; /* = oh stride */
            if (a < 0) break;                  /* only falls as i grows */
            if (a % g.stride != 0 || a / g.stride >= g.Ho) continue;
            for (int64_t j = 0; j < g.kw; j++) {
                int64_t b = w + g.pad - j * g.dil;
                if (b < 0) break;
                if (b % g.stride != 0 || b / g.stride >= g.Wo) continue;
                acc += dcol[((t * g.kh + i) * g.kw + j) * P + (a / g.stride) * g.Wo + b / g.stride];
            }
        }
        cu_st(dx, e, acc);
    }
}

// y (rows = N Co, P) = bias[row % Co] broadcast, or += it when `add`
template <typename T>
__global__ void bias_kernel(T *y, const T *bias, int64_t rows, int64_t P, int64_t Co, int add)
{
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        float b = cu_ld(bias, row % Co);
        T *yr = y + row * P;
        for (int64_t p = threadIdx.x; p < P; p += blockDim.x) cu_st(yr, p, add ? cu_ld(yr, p) + b : b);
    }
}

template <typename T>
__global__ void from_f32_kernel(const float *src, T *dst, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        cu_st(dst, i, src[i]);
}

static unsigned row_blocks(const cu_backend *be, int64_t rows)
{
    int64_t cap = (int64_t)(be->sm_count > 0 ? be->sm_count : 80) * 16;
    return (unsigned)(rows < 1 ? 1 : rows < cap ? rows : cap);
}

static gdp_status bias_apply(cu_backend *be, cudaStream_t s, const gdp_node *node, const conv_geom &g, const void *bias,
                             void *y, int add, gdp_err *err)
{
    int64_t rows = g.N * g.Co, P = g.Ho * g.Wo;
    CU_FLOAT_SWITCH(node->out[0]->dtype, T,
                    bias_kernel<T><<<row_blocks(be, rows), THREADS, 0, s>>>((T *)y, (const T *)bias, rows, P, g.Co, add));
    return GDP_OK;
}

/* ---- the im2col path ------------------------------------------------------------------------------ */

static gdp_status blas_check(cublasStatus_t st, const char *call, gdp_err *err)
{
    if (st == CUBLAS_STATUS_SUCCESS) return GDP_OK;
    return gdp_fail(err, st == CUBLAS_STATUS_ALLOC_FAILED ? GDP_ERR_NOMEM : GDP_ERR_DEVICE, "cuBLAS: %s failed: %s (%d)",
                    call, cublasGetStatusString(st), (int)st);
}
#define BLAS_TRY(call)                                                 \
    do {                                                               \
        gdp_status b_s_ = blas_check((call), #call, err);              \
        if (b_s_ != GDP_OK) return b_s_;                               \
    } while (0)

static cudaDataType_t blas_type(int32_t dt)
{
    return dt == GDP_F16 ? CUDA_R_16F : dt == GDP_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* Column-major, batched over `batch` matrices at the given element strides:
 *   C (m, n) = op(A) (m, k) @ op(B) (k, n) + beta C,
 * A and B of type `ab`, C of type `ct`, f32 compute (CUBLAS_COMPUTE_32F never uses TF32). */
static gdp_status gemm(conv_state *cs, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                       cudaDataType_t ab, const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,
                       float beta, cudaDataType_t ct, void *C, int64_t ldc, int64_t sc, int64_t batch, gdp_err *err)
{
    const float alpha = 1.0f;
    BLAS_TRY(cublasGemmStridedBatchedEx(cs->blas, ta, tb, (int)m, (int)n, (int)k, &alpha, A, ab, (int)lda, (long long)sa,
                                        B, ab, (int)ldb, (long long)sb, &beta, C, ct, (int)ldc, (long long)sc, (int)batch,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return GDP_OK;
}

/* Samples per chunk whose scratch of `per_sample` bytes fits `cap` bytes (at least 1). */
static int64_t chunk_of(size_t per_sample, size_t cap, int64_t N)
{
    int64_t nb = per_sample > 0 ? (int64_t)(cap / per_sample) : N;
    return nb < 1 ? 1 : nb > N ? N : nb;
}

/* The im2col path's scratch: cuBLAS's workspace; col (nb, R, P) of the dtype, or f32 dcol
 * for the input gradient; an f32 dw accumulator for an f16/bf16 weight gradient. */
typedef struct col_sizes {
    size_t per;   /* col bytes of one sample */
    size_t acc;   /* the f32 dw accumulator */
} col_sizes;

static col_sizes col_sizes_of(int kind, int32_t dt, const conv_geom &g)
{
    col_sizes c;
    int64_t P = g.Ho * g.Wo, K = g.Cg * g.kh * g.kw, R = g.C * g.kh * g.kw;
    c.per = (size_t)(R * P) * (kind == K_BWD_DATA ? sizeof(float) : gdp_dtype_size(dt));
    c.acc = kind == K_BWD_FILTER && dt != GDP_F32 ? (size_t)(g.Co * K) * sizeof(float) : 0;
    return c;
}

/* Bytes of im2col scratch for nb samples at a time. */
static size_t col_scratch(const col_sizes &c, int64_t nb)
{
    return CONV_BLAS_WS + cu_ws_round(c.per * (size_t)nb) + c.acc;
}

/* Row-major per sample n and group g, with P = Ho Wo, K = Cg kh kw, R = C kh kw = groups K:
 *   forward      y[n, g] (Cog, P) = w_g (Cog, K) @ col[n, g] (K, P)        (+ bias)
 *   grad input   dcol[n, g] (K, P) = w_g^T (K, Cog) @ dy[n, g] (Cog, P), then col2im
 *   grad weight  dw_g (Cog, K) += dy[n, g] (Cog, P) @ col[n, g]^T (P, K)
 * Each is one cuBLAS call per sample, batched over groups. A row-major (r, c) matrix is the
 * column-major (c, r) one, so each product is issued transposed: C^T = op(B)^T op(A)^T. */
static gdp_status im2col_run(conv_state *cs, int kind, const gdp_node *node, const conv_io &io, const conv_geom &g,
                             cudaStream_t s, gdp_err *err)
{
    cu_backend *be = cs->be;
    if (cs->blas == NULL) return gdp_fail(err, GDP_ERR_INVALID, "cuda %s: no cuBLAS handle (no workspace was asked for)", node->op);
    int32_t dt = node->out[0]->dtype;
    size_t es = gdp_dtype_size(dt);
    cudaDataType_t t = blas_type(dt);
    int64_t P = g.Ho * g.Wo, K = g.Cg * g.kh * g.kw, R = g.C * g.kh * g.kw, Cog = g.Co / g.groups;
    /* as many samples per chunk as the workspace holds columns for */
    col_sizes cz = col_sizes_of(kind, dt, g);
    char *scratch = NULL;
    gdp_status st = cu_ws(node, col_scratch(cz, 1), &scratch, err);
    if (st != GDP_OK) return st;
    size_t fixed = 2 * CU_WS_ALIGN + CONV_BLAS_WS + cz.acc; /* alignment slack, cuBLAS's, dw's */
    size_t room = node->workspace_bytes > fixed ? node->workspace_bytes - fixed : 0;
    int64_t nb = chunk_of(cz.per, room, g.N);
    size_t col_bytes = cu_ws_round(cz.per * (size_t)nb); /* keeps what follows aligned */
    /* cublasSetStream puts the handle back on its default workspace, which is shared by
       every stream the handle ever ran on; a part of the node's workspace is not. Its size
       is fixed, so cuBLAS's choice of kernel (and so the result) is too. */
    st = blas_check(cublasSetStream(cs->blas, s), "cublasSetStream", err);
    if (st == GDP_OK) st = blas_check(cublasSetWorkspace(cs->blas, scratch, CONV_BLAS_WS), "cublasSetWorkspace", err);
    char *col = scratch + CONV_BLAS_WS;
    float *dw32 = cz.acc > 0 ? (float *)(col + col_bytes) : (float *)io.w->data;

    const char *x = (const char *)io.x->data, *w = (const char *)io.w->data, *y = (const char *)io.y->data;
    if (st == GDP_OK && kind == K_FWD && io.b != NULL) st = bias_apply(be, s, node, g, io.b->data, io.y->data, 0, err);
    for (int64_t n0 = 0; n0 < g.N && st == GDP_OK; n0 += nb) {
        int64_t cnt = g.N - n0 < nb ? g.N - n0 : nb;
        const char *xc = x + (size_t)(n0 * g.C * g.H * g.W) * es;
        if (kind != K_BWD_DATA) {
            int64_t total = cnt * R * P;
            switch (dt) {
            case GDP_F32: im2col_kernel<float><<<cu_blocks(be, total, THREADS), THREADS, 0, s>>>((const float *)xc, (float *)col, total, g); break;
            case GDP_F16: im2col_kernel<__half><<<cu_blocks(be, total, THREADS), THREADS, 0, s>>>((const __half *)xc, (__half *)col, total, g); break;
            default:
                im2col_kernel<__nv_bfloat16><<<cu_blocks(be, total, THREADS), THREADS, 0, s>>>(
                    (const __nv_bfloat16 *)xc, (__nv_bfloat16 *)col, total, g);
                break;
            }
        }
        for (int64_t i = 0; i < cnt && st == GDP_OK; i++) {
            int64_t n = n0 + i;
            const char *col_n = col + (size_t)(i * R * P) * es;
            const char *y_n = y + (size_t)(n * g.Co * P) * es;
            if (kind == K_FWD) // y_n^T (P, Cog) = col_n^T (P, K) @ w_g^T (K, Cog)
                st = gemm(cs, CUBLAS_OP_N, CUBLAS_OP_N, P, Cog, K, t, col_n, P, K * P, w, K, Cog * K,
                          io.b != NULL ? 1.0f : 0.0f, t, (void *)y_n, P, Cog * P, g.groups, err);
            else if (kind == K_BWD_DATA) // dcol_n^T (P, K) = dy_n^T (P, Cog) @ w_g (Cog, K)
                st = gemm(cs, CUBLAS_OP_N, CUBLAS_OP_T, P, K, Cog, t, y_n, P, Cog * P, w, K, Cog * K, 0.0f, CUDA_R_32F,
                          col + (size_t)(i * R * P) * sizeof(float), P, K * P, g.groups, err);
            else // dw_g^T (K, Cog) += col_n (K, P) @ dy_n^T (P, Cog)
                st = gemm(cs, CUBLAS_OP_T, CUBLAS_OP_N, K, Cog, P, t, col_n, P, K * P, y_n, P, Cog * P,
                          n == 0 ? 0.0f : 1.0f, CUDA_R_32F, dw32, K, Cog * K, g.groups, err);
        }
        if (st == GDP_OK && kind == K_BWD_DATA) {
            int64_t total = cnt * g.C * g.H * g.W;
            char *dxc = (char *)io.x->data + (size_t)(n0 * g.C * g.H * g.W) * es;
            switch (dt) {
            case GDP_F32: col2im_kernel<float><<<cu_blocks(be, total, THREADS), THREADS, 0, s>>>((const float *)col, (float *)dxc, total, g); break;
            case GDP_F16: col2im_kernel<__half><<<cu_blocks(be, total, THREADS), THREADS, 0, s>>>((const float *)col, (__half *)dxc, total, g); break;
            default:
                col2im_kernel<__nv_bfloat16><<<cu_blocks(be, total, THREADS), THREADS, 0, s>>>(
                    (const float *)col, (__nv_bfloat16 *)dxc, total, g);
                break;
            }
        }
    }
    if (st == GDP_OK && cz.acc > 0) {
        int64_t total = g.Co * K;
        if (dt == GDP_F16)
            from_f32_kernel<__half><<<cu_blocks(be, total, THREADS), THREADS, 0, s>>>(dw32, (__half *)io.w->data, total);
        else
            from_f32_kernel<__nv_bfloat16><<<cu_blocks(be, total, THREADS), THREADS, 0, s>>>(
                dw32, (__nv_bfloat16 *)io.w->data, total);
    }
    return st;
}

/* ---- the cuDNN path ---------------------------------------------------------------------------------- */

#ifdef GRADUS_HAVE_CUDNN
static cudnnDataType_t dnn_type(int32_t dt)
{
    return dt == GDP_F16 ? CUDNN_DATA_HALF : dt == GDP_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* f32 must stay fp32 (FMA kernels); f16/bf16 may use tensor cores, not down-conversion. */
static int math_ok(int32_t dtype, cudnnMathType_t m)
{
    return dtype == GDP_F32 ? m == CUDNN_FMA_MATH : m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

/* The first (the heuristic's best) acceptable entry: it ran the query successfully, is
 * deterministic, keeps the precision and fits the workspace cap. -1 if none is. */
template <typename Perf>
static int pick_algo(const Perf *perf, int n, int32_t dtype, size_t *ws, cudnnMathType_t *math)
{
    for (int i = 0; i < n; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC) continue;
        if (!math_ok(dtype, perf[i].mathType) || perf[i].memory > CONV_WS_CAP) continue;
        *ws = perf[i].memory;
        *math = perf[i].mathType;
        return (int)perf[i].algo;
    }
    return -1;
}

/* Descriptors, then the algorithm. A status other than success means cuDNN refused this
 * shape (a descriptor it does not take, no output dims it agrees with): the plan is then
 * kept with algo -1, and the im2col path serves the shape. */
static cudnnStatus_t plan_build(cudnnHandle_t h, conv_plan *p)
{
    const conv_geom &g = p->key.g;
    int kind = p->key.kind;
    cudnnDataType_t dt = dnn_type(p->key.dtype);
    p->algo = -1;
    cudnnStatus_t st = cudnnCreateTensorDescriptor(&p->xd);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnCreateTensorDescriptor(&p->yd);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnCreateFilterDescriptor(&p->wd);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnCreateConvolutionDescriptor(&p->cd);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnSetTensor4dDescriptor(p->xd, CUDNN_TENSOR_NCHW, dt, (int)g.N, (int)g.C, (int)g.H, (int)g.W);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnSetTensor4dDescriptor(p->yd, CUDNN_TENSOR_NCHW, dt, (int)g.N, (int)g.Co, (int)g.Ho, (int)g.Wo);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnSetFilter4dDescriptor(p->wd, dt, CUDNN_TENSOR_NCHW, (int)g.Co, (int)g.Cg, (int)g.kh, (int)g.kw);
    /* Cross-correlation, as the reference computes; f32 accumulation for every dtype. */
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnSetConvolution2dDescriptor(p->cd, (int)g.pad, (int)g.pad, (int)g.stride, (int)g.stride, (int)g.dil,
                                             (int)g.dil, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnSetConvolutionGroupCount(p->cd, (int)g.groups);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnSetConvolutionMathType(p->cd, p->key.dtype == GDP_F32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH);
    int on = 0, oc = 0, oh = 0, ow = 0;
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnGetConvolution2dForwardOutputDim(p->cd, p->xd, p->wd, &on, &oc, &oh, &ow);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (on != g.N || oc != g.Co || oh != g.Ho || ow != g.Wo) return CUDNN_STATUS_NOT_SUPPORTED;

    int got = 0, algo = -1;
    size_t ws = 0, need = 0;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    if (kind == K_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        st = cudnnGetConvolutionForwardAlgorithm_v7(h, p->xd, p->wd, p->cd, p->yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got,
                                                    perf);
        if (st == CUDNN_STATUS_SUCCESS) algo = pick_algo(perf, got, p->key.dtype, &ws, &math);
    } else if (kind == K_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        st = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->wd, p->yd, p->cd, p->xd,
                                                         CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf);
        if (st == CUDNN_STATUS_SUCCESS) algo = pick_algo(perf, got, p->key.dtype, &ws, &math);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        st = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->xd, p->yd, p->cd, p->wd,
                                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf);
        if (st == CUDNN_STATUS_SUCCESS) algo = pick_algo(perf, got, p->key.dtype, &ws, &math);
    }
    if (st != CUDNN_STATUS_SUCCESS || algo < 0) return st != CUDNN_STATUS_SUCCESS ? st : CUDNN_STATUS_NOT_SUPPORTED;
    /* The algorithm runs under the math type it was reported with (cuDNN picks kernels by
     * algorithm and math type together); then the workspace it needs under that type. */
    st = cudnnSetConvolutionMathType(p->cd, math);
    if (st == CUDNN_STATUS_SUCCESS && kind == K_FWD)
        st = cudnnGetConvolutionForwardWorkspaceSize(h, p->xd, p->wd, p->cd, p->yd, (cudnnConvolutionFwdAlgo_t)algo, &need);
    if (st == CUDNN_STATUS_SUCCESS && kind == K_BWD_DATA)
        st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, p->wd, p->yd, p->cd, p->xd,
                                                          (cudnnConvolutionBwdDataAlgo_t)algo, &need);
    if (st == CUDNN_STATUS_SUCCESS && kind == K_BWD_FILTER)
        st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p->xd, p->yd, p->cd, p->wd,
                                                            (cudnnConvolutionBwdFilterAlgo_t)algo, &need);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (need > ws) ws = need;
    if (ws > CONV_WS_CAP) return CUDNN_STATUS_NOT_SUPPORTED;
    p->algo = algo;
    p->ws = ws;
    return CUDNN_STATUS_SUCCESS;
}

/* The cached plan for a key, built on a miss. Caller holds cs->mu. */
static conv_plan *plan_for(conv_state *cs, const conv_key *key)
{
    for (int i = 0; i < CONV_CACHE; i++)
        if (cs->plans[i].valid && memcmp(&cs->plans[i].key, key, sizeof *key) == 0) return &cs->plans[i];
    conv_plan *p = &cs->plans[cs->next];
    cs->next = (cs->next + 1) % CONV_CACHE;
    plan_release(p);
    p->key = *key;
    cudnnStatus_t st = plan_build((cudnnHandle_t)cs->dnn, p);
    if (st != CUDNN_STATUS_SUCCESS) {
        /* Not an error: the im2col path computes the same. Said once per shape, since the
         * plan (with algo -1) is cached like any other. */
        const conv_geom &g = key->g;
        conv_log(cs->be, "cuda %s: cuDNN takes no deterministic%s algorithm for x [%lld, %lld, %lld, %lld] w [%lld, "
                         "%lld, %lld, %lld] dtype %d (%s); using im2col + cuBLAS",
                 kind_name[key->kind], key->dtype == GDP_F32 ? " fp32" : "", (long long)g.N, (long long)g.C,
                 (long long)g.H, (long long)g.W, (long long)g.Co, (long long)g.Cg, (long long)g.kh, (long long)g.kw,
                 (int)key->dtype, cudnnGetErrorString(st));
        plan_release(p);
        p->key = *key;
        p->algo = -1;
    }
    p->valid = 1;
    return p;
}

/* Runs the node through cuDNN; *done = 0 (and GDP_OK) when cuDNN declines this call, so
 * that the caller runs the im2col path instead. Caller holds cs->mu. */
static gdp_status dnn_run(conv_state *cs, int kind, const gdp_node *node, const conv_io &io, const conv_geom &g,
                          cudaStream_t s, int *done, gdp_err *err)
{
    *done = 0;
    conv_key key;
    memset(&key, 0, sizeof key); /* padding too: keys are compared with memcmp */
    key.kind = kind;
    key.dtype = node->out[0]->dtype;
    key.g = g;
    conv_plan *p = plan_for(cs, &key);
    if (p->algo < 0) return GDP_OK;
    cudnnHandle_t h = (cudnnHandle_t)cs->dnn;
    cudnnStatus_t r = cudnnSetStream(h, s);
    if (r != CUDNN_STATUS_SUCCESS)
        return gdp_fail(err, GDP_ERR_DEVICE, "cuda %s: cudnnSetStream failed: %s", node->op, cudnnGetErrorString(r));
    char *ws = NULL;
    if (p->ws > 0) {
        gdp_status st = cu_ws(node, p->ws, &ws, err);
        if (st != GDP_OK) return st;
    }
    /* alpha and beta are float for float, half and bfloat16 data alike; beta = 0: the
     * output is written without being read. */
    const float one = 1.0f, zero = 0.0f;
    if (kind == K_FWD)
        r = cudnnConvolutionForward(h, &one, p->xd, io.x->data, p->wd, io.w->data, p->cd, (cudnnConvolutionFwdAlgo_t)p->algo,
                                    ws, p->ws, &zero, p->yd, io.y->data);
    else if (kind == K_BWD_DATA)
        r = cudnnConvolutionBackwardData(h, &one, p->wd, io.w->data, p->yd, io.y->data, p->cd,
                                         (cudnnConvolutionBwdDataAlgo_t)p->algo, ws, p->ws, &zero, p->xd, io.x->data);
    else
        r = cudnnConvolutionBackwardFilter(h, &one, p->xd, io.x->data, p->yd, io.y->data, p->cd,
                                           (cudnnConvolutionBwdFilterAlgo_t)p->algo, ws, p->ws, &zero, p->wd, io.w->data);
    /* NOT_SUPPORTED at run time (e.g. an alignment a kernel needs) is checked before any
     * launch: nothing was written, and the im2col path takes over. */
    if (r == CUDNN_STATUS_NOT_SUPPORTED) return GDP_OK;
    if (r != CUDNN_STATUS_SUCCESS)
        return gdp_fail(err, r == CUDNN_STATUS_ALLOC_FAILED ? GDP_ERR_NOMEM : GDP_ERR_DEVICE,
                        "cuda %s: cuDNN algorithm %d failed: %s", node->op, p->algo, cudnnGetErrorString(r));
    *done = 1;
    if (kind == K_FWD && io.b != NULL) return bias_apply(cs->be, s, node, g, io.b->data, io.y->data, 1, err);
    return GDP_OK;
}
#endif

/* ---- launchers ------------------------------------------------------------------------------------------ */

/* Creates the cuDNN handle on first use unless GRADUS_CUDNN=0. Caller holds cs->mu. */
static void dnn_open(conv_state *cs)
{
    if (cs->dnn_tried) return;
    cs->dnn_tried = 1;
#ifdef GRADUS_HAVE_CUDNN
    const gdp_host *h = cs->be->host;
    const char *v = GDP_HAS_FIELD(h, gdp_host, getenv) && h->getenv != NULL ? h->getenv(h->host, "GRADUS_CUDNN") : NULL;
    if (v != NULL && strcmp(v, "0") == 0) {
        conv_log(cs->be, "conv: GRADUS_CUDNN=0, convolutions run as im2col + cuBLAS");
        return;
    }
    cudnnHandle_t dnn = NULL;
    cudnnStatus_t st = cudnnCreate(&dnn);
    if (st != CUDNN_STATUS_SUCCESS) {
        conv_log(cs->be, "conv: cudnnCreate failed (%s); convolutions run as im2col + cuBLAS", cudnnGetErrorString(st));
        return;
    }
    cs->dnn = dnn;
#else
    conv_log(cs->be, "conv: built without cuDNN; convolutions run as im2col + cuBLAS");
#endif
}

/* Declared at compile time; also where the handles are made and the cuDNN plan chosen. */
static size_t conv_workspace_kind(void *b, const gdp_node *node, int kind)
{
    cu_backend *be = (cu_backend *)b;
    conv_io io;
    conv_geom g;
    if (!node_io(node, kind, &io) || !float_node(node) || !geom_of(node, io.x, io.w, io.y, &g)) return 0;
    conv_state *cs = NULL;
    gdp_err e;
    memset(&e, 0, sizeof e);
    e.size = sizeof e;
    if (cudaSetDevice(be->device) != cudaSuccess || state_of(be, &cs, &e) != GDP_OK) {
        (void)cudaGetLastError();
        return 0; /* the launch then says what is missing */
    }
    int32_t dt = node->out[0]->dtype;
    col_sizes cz = col_sizes_of(kind, dt, g);
    size_t need = 0;
    pthread_mutex_lock(&cs->mu);
    dnn_open(cs);
    /* the im2col path may run even with cuDNN (it declines some calls at run time) */
    if (cs->blas == NULL && cublasCreate(&cs->blas) != CUBLAS_STATUS_SUCCESS) {
        cs->blas = NULL;
        conv_log(be, "conv: cublasCreate failed; the im2col path cannot run");
    }
#ifdef GRADUS_HAVE_CUDNN
    if (cs->dnn != NULL) {
        conv_key key;
        memset(&key, 0, sizeof key); /* padding too: keys are compared with memcmp */
        key.kind = kind;
        key.dtype = dt;
        key.g = g;
        const conv_plan *p = plan_for(cs, &key);
        need = col_scratch(cz, 1);
        if (p->algo >= 0 && p->ws > need) need = p->ws;
    }
#endif
    if (need == 0) need = col_scratch(cz, chunk_of(cz.per, CONV_COL_BYTES, g.N));
    pthread_mutex_unlock(&cs->mu);
    return cu_ws_declare(need);
}

static size_t conv2d_workspace(void *b, const gdp_node *n) { return conv_workspace_kind(b, n, K_FWD); }
static size_t grad_input_workspace(void *b, const gdp_node *n) { return conv_workspace_kind(b, n, K_BWD_DATA); }
static size_t grad_weight_workspace(void *b, const gdp_node *n) { return conv_workspace_kind(b, n, K_BWD_FILTER); }

static gdp_status conv_run_kind(cu_backend *be, const gdp_node *node, cudaStream_t s, int kind, gdp_err *err)
{
    conv_io io;
    conv_geom g;
    if (!node_io(node, kind, &io) || !float_node(node) || !geom_of(node, io.x, io.w, io.y, &g))
        return gdp_fail(err, GDP_ERR_INVALID, "cuda %s: node does not match the op's shape rule", kind_name[kind]);
    conv_state *cs = NULL;
    gdp_status st = state_of(be, &cs, err);
    if (st != GDP_OK) return st;
    pthread_mutex_lock(&cs->mu);
    dnn_open(cs);
    int done = 0;
#ifdef GRADUS_HAVE_CUDNN
    if (cs->dnn != NULL) st = dnn_run(cs, kind, node, io, g, s, &done, err);
#endif
    if (st == GDP_OK && !done) st = im2col_run(cs, kind, node, io, g, s, err);
    pthread_mutex_unlock(&cs->mu);
    return st;
}

// y (N, Co, Ho, Wo) = conv(x (N, C, H, W), w (Co, Cg, kh, kw)) + b (Co)
static gdp_status conv2d_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    return conv_run_kind(be, node, s, K_FWD, err);
}
CU_LAUNCHER(conv2d_run)

// (dy (N, Co, Ho, Wo), w) -> dx (N, C, H, W)
static gdp_status grad_input_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    return conv_run_kind(be, node, s, K_BWD_DATA, err);
}
CU_LAUNCHER(grad_input_run)

// (dy (N, Co, Ho, Wo), x) -> dw (Co, Cg, kh, kw), summed over samples
static gdp_status grad_weight_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    return conv_run_kind(be, node, s, K_BWD_FILTER, err);
}
CU_LAUNCHER(grad_weight_run)

static const char *const conv_attr_names[] = {"stride", "padding", "dilation", "groups", NULL};

#define FLOATS3(op, sup, fn, attrs, ws) \
    CU_KX(op, GDP_F32, 0, sup, fn, attrs, ws), CU_KX(op, GDP_F16, 0, sup, fn, attrs, ws), \
        CU_KX(op, GDP_BF16, 0, sup, fn, attrs, ws)

static const gdp_kernel kernels[] = {
    FLOATS3("conv2d", conv2d_supports, conv2d_run_launch, conv_attr_names, conv2d_workspace),
    FLOATS3("conv2d_grad_input", grad_input_supports, grad_input_run_launch, conv_attr_names, grad_input_workspace),
    FLOATS3("conv2d_grad_weight", grad_weight_supports, grad_weight_run_launch, conv_attr_names, grad_weight_workspace),
};
CU_FAMILY(conv, kernels);
