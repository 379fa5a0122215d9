/* softmax.cu — the softmax family (src/ops/softmax.c): softmax, log_softmax, their
 * backward ops, cross_entropy (and its backward op), mse.
 *
 * A tensor is read as (outer, n, inner) around the softmax axis: outer * inner rows of n
 * elements lying `inner` apart. One block handles one row at a time; the row's maximum
 * and sums are block reductions in double over a fixed tree, so results are deterministic
 * and follow the reference (fmax for the maximum, which skips NaN just as it does).
 *
 * softmax and log_softmax over a contiguous last axis of up to 8192 f32 (16384 f16/bf16)
 * elements take a faster path: the row is read once into registers with 16-byte vectors,
 * computed in float (within a few 1e-7 relative of the double reference, far inside the
 * ops' tolerance) with the row's sum in double, and written once: one read and one write
 * of the tensor, which is what bounds a softmax on a GPU.
 */
#include "cu_vec.h"
#include "cuda_internal.h"

#include <math.h>
#include <string.h>

#define THREADS 256

/* Block-wide sum / max of one double per thread, in a fixed order; every thread gets the
 * result. `sh` is THREADS doubles of shared memory. */
static __device__ double block_sum(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads(); /* sh is reused by the next reduction */
    return r;
}

static __device__ double block_max(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) sh[threadIdx.x] = fmax(sh[threadIdx.x], sh[threadIdx.x + w]);
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

enum { S_SOFTMAX, S_LOG_SOFTMAX, S_SOFTMAX_GRAD, S_LOG_SOFTMAX_GRAD };

// x (outer, n, inner) -> y, normalized along n; or (dy, y) -> dx for the grad modes
template <typename T>
__global__ void softmax_kernel(const T *x, const T *y_in, T *out, int64_t outer, int64_t n, int64_t inner, int mode)
{
    __shared__ double sh[THREADS];
    for (int64_t row = blockIdx.x; row < outer * inner; row += gridDim.x) {
        int64_t base = (row / inner) * n * inner + row % inner;
        if (mode == S_SOFTMAX || mode == S_LOG_SOFTMAX) {
            double m = -INFINITY;
            for (int64_t k = threadIdx.x; k < n; k += blockDim.x) m = fmax(m, (double)cu_ld(x, base + k * inner));
            m = block_max(m, sh);
            double s = 0.0;
            for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += exp((double)cu_ld(x, base + k * inner) - m);
            s = block_sum(s, sh);
            double log_s = log(s);
            for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
                double z = (double)cu_ld(x, base + k * inner) - m;
                cu_std(out, base + k * inner, mode == S_LOG_SOFTMAX ? z - log_s : exp(z) / s);
            }
        } else {
            /* x is dy here; y_in the forward output */
            double acc = 0.0;
            for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
                double dy = (double)cu_ld(x, base + k * inner);
                acc += mode == S_SOFTMAX_GRAD ? dy * (double)cu_ld(y_in, base + k * inner) : dy;
            }
            acc = block_sum(acc, sh);
            for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
                int64_t i = base + k * inner;
                double dy = (double)cu_ld(x, i), y = (double)cu_ld(y_in, i);
                cu_std(out, i, mode == S_SOFTMAX_GRAD ? y * (dy - acc) : dy - exp(y) * acc);
            }
        }
    }
}

#define SM_MAX_NV 8 /* vectors per thread held in registers */

// x (rows, n) -> y: softmax (or log_softmax) of each row; a block per row, the row in
// registers: element e of the row sits in vector (e / N) % THREADS's thread, slot e / (N * THREADS)
template <typename T, int NV>
__global__ void __launch_bounds__(THREADS) softmax_reg_kernel(const T *x, T *y, int64_t rows, int64_t n, int log_mode)
{
    constexpr int N = cu_vec<T>::N;
    __shared__ double shd[32];
    __shared__ float shf[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t base = r * n;
        float v[NV][N];
        float m = -INFINITY;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int64_t e = ((int64_t)k * blockDim.x + threadIdx.x) * N;
            if (e < n) { /* n % N == 0: a vector is all in or all out */
                cu_ld16(x, base + e, v[k]);
#pragma unroll
                for (int j = 0; j < N; j++) m = fmaxf(m, v[k][j]);
            }
        }
        m = cu_block_max_f(m, shf);
        /* float per element: conversions to and from double run at 1/8 the rate of float
         * arithmetic on sm_90 and would bound this kernel; a thread's partial sum (at most
         * 64 terms) is taken to double for the block sum */
        float part = 0.0f;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            if (((int64_t)k * blockDim.x + threadIdx.x) * N >= n) continue;
#pragma unroll
            for (int j = 0; j < N; j++) {
                float z = v[k][j] - m;
                float ex = expf(z);
                part += ex;
                v[k][j] = log_mode ? z : ex;
            }
        }
        const double sum = cu_block_sum_d((double)part, shd);
        const float inv = (float)(1.0 / sum), log_s = (float)log(sum);
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int64_t e = ((int64_t)k * blockDim.x + threadIdx.x) * N;
            if (e >= n) continue;
            float out[N];
#pragma unroll
            for (int j = 0; j < N; j++) out[j] = log_mode ? v[k][j] - log_s : v[k][j] * inv;
            cu_st16(y, base + e, out);
        }
    }
}

/* Runs the register path when the layout allows it; *done says whether it did. */
template <typename T>
static void softmax_reg_launch(cu_backend *be, cudaStream_t s, const gdp_node *node, int64_t outer, int64_t n,
                               int64_t inner, int log_mode, int *done)
{
    constexpr int N = cu_vec<T>::N;
    const void *x = node->in[0]->data;
    void *y = node->out[0]->data;
    *done = 0;
    if (inner != 1 || n % N != 0 || n > (int64_t)THREADS * N * SM_MAX_NV || !cu_aligned16(x) || !cu_aligned16(y)) return;
    int64_t per_thread = (n / N + THREADS - 1) / THREADS;
    unsigned g = cu_blocks(be, outer * THREADS, THREADS);
    if (per_thread <= 1) softmax_reg_kernel<T, 1><<<g, THREADS, 0, s>>>((const T *)x, (T *)y, outer, n, log_mode);
    else if (per_thread <= 2) softmax_reg_kernel<T, 2><<<g, THREADS, 0, s>>>((const T *)x, (T *)y, outer, n, log_mode);
    else if (per_thread <= 4) softmax_reg_kernel<T, 4><<<g, THREADS, 0, s>>>((const T *)x, (T *)y, outer, n, log_mode);
    else softmax_reg_kernel<T, 8><<<g, THREADS, 0, s>>>((const T *)x, (T *)y, outer, n, log_mode);
    *done = 1;
}

static int split_axis(const gdp_node *n, const gdp_tensor *x, int64_t *outer, int64_t *len, int64_t *inner)
{
    int a = cu_axis(gdp_attr_int(&n->attrs, "axis", -1), x->ndim);
    if (a < 0) return 0;
    *outer = cu_prod(x->shape, 0, a);
    *len = x->shape[a];
    *inner = cu_prod(x->shape, a + 1, x->ndim);
    return 1;
}

static int same_all(const gdp_node *n)
{
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i]->dtype != n->out[0]->dtype || !cu_same_shape(n->in[i], n->out[0])) return 0;
    return cu_gpu_float(n->out[0]->dtype);
}

static int softmax_supports(void *b, const gdp_node *n)
{
    (void)b;
    int64_t o, l, i;
    int is_grad = strstr(n->op, "_grad") != NULL;
    return n->n_in == (is_grad ? 2 : 1) && n->n_out == 1 && same_all(n) && split_axis(n, n->out[0], &o, &l, &i);
}

static gdp_status softmax_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    int64_t outer, n, inner;
    const gdp_tensor *y = node->out[0];
    split_axis(node, y, &outer, &n, &inner);
    if (gdp_numel(y) == 0) return GDP_OK;
    int mode = strcmp(node->op, "softmax") == 0       ? S_SOFTMAX
               : strcmp(node->op, "log_softmax") == 0 ? S_LOG_SOFTMAX
               : strcmp(node->op, "softmax_grad") == 0 ? S_SOFTMAX_GRAD
                                                       : S_LOG_SOFTMAX_GRAD;
    if (mode == S_SOFTMAX || mode == S_LOG_SOFTMAX) {
        int done = 0;
        CU_FLOAT_SWITCH(y->dtype, T, softmax_reg_launch<T>(be, s, node, outer, n, inner, mode == S_LOG_SOFTMAX, &done));
        if (done) return GDP_OK;
    }
    const void *second = node->n_in > 1 ? node->in[1]->data : NULL;
    unsigned g = cu_blocks(be, outer * inner * THREADS, THREADS);
    CU_FLOAT_SWITCH(y->dtype, T,
                    softmax_kernel<T><<<g, THREADS, 0, s>>>((const T *)node->in[0]->data, (const T *)second, (T *)y->data,
                                                            outer, n, inner, mode));
    return GDP_OK;
}
CU_LAUNCHER(softmax_run)

/* ---- cross_entropy ------------------------------------------------------------------------ */

static __device__ __forceinline__ int64_t load_target(const void *t, int is64, int64_t i)
{
    return is64 ? ((const int64_t *)t)[i] : (int64_t)((const int32_t *)t)[i];
}

/* The cross-entropy kernels read a row of logits once for its log-sum-exp: each thread
 * keeps a running maximum m and sum s of exp(x - m) over its elements (an online softmax),
 * rescaling s when m grows, and the block combines the threads' pairs in a fixed order
 * (a shuffle butterfly, then the warps in order). Elements are widened to float and the
 * threads' pairs kept in float, as softmax_reg_kernel does (a row of 50k classes sums
 * ~100 terms per thread, within about 1e-6 relative of the double reference, far inside
 * the ops' tolerance); the threads' sums are scaled to the row's maximum and added in
 * double, the loss (m + log(s) - x[target]) and the mean taken in double.
 * Rows whose length is a multiple of a 16-byte vector, on aligned tensors, are read in
 * vectors (a GPT-2 head's 50304 columns are). Only the first K columns (`classes`) take
 * part; the gradient writes zeros past them. */
#define CE_THREADS 512

/* e^d as ex2.approx of d log2(e): a multiply and one special-function instruction, where
 * expf spends some eight instructions on its last ulp. Within 2 ulp plus the rounding of
 * the product (about 1e-6 relative at |d| = 10), far inside the ops' tolerance; results
 * below 2^-126 flush to zero; -inf gives 0, NaN stays NaN. A row of the loss takes two
 * exponentials an element; with expf they (and a 64-bit compare an element for the
 * target, now made once a vector) bounded the gradient kernel, not the row's reads. */
static __device__ __forceinline__ float ce_exp(float d)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d * 1.4426950408889634f));
    return r;
}

/* Folds V more elements into (m, s). NaN and infinities end as the reference's two
 * passes end: a NaN element makes s NaN, and so does an infinite maximum. */
template <int V> static __device__ __forceinline__ void ce_fold(float &m, float &s, const float (&v)[V])
{
    float vm = v[0];
#pragma unroll
    for (int j = 1; j < V; j++) vm = fmaxf(vm, v[j]);
    const float nm = fmaxf(m, vm);
    if (nm == -INFINITY) {
        /* nothing above -inf yet: no term counts, but a NaN must still reach s */
        float t = 0.0f;
#pragma unroll
        for (int j = 0; j < V; j++) t += v[j] == -INFINITY ? 0.0f : v[j];
        s += t;
        return;
    }
    float t = 0.0f;
#pragma unroll
    for (int j = 0; j < V; j++) t += ce_exp(v[j] - nm);
    s = (m == nm ? s : __fmul_rn(s, ce_exp(m - nm))) + t;
    m = nm;
}

/* The block's log-sum-exp of elements [0, K) of the row at x + base, in double; every
 * thread gets it. `vec`: read 16-byte vectors (base and the tensor aligned to them). */
template <typename T>
static __device__ double ce_row_lse(const T *x, int64_t base, int64_t K, int vec, float *shm, double *shs)
{
    constexpr int N = cu_vec<T>::N;
    float m = -INFINITY, s = 0.0f;
    if (vec) {
        const int64_t step = (int64_t)blockDim.x * N, full = K / N * N;
        int64_t e = (int64_t)threadIdx.x * N;
        /* four vectors in flight per thread, then one at a time */
        for (; e + 3 * step < full; e += 4 * step) {
            float v[4][N];
#pragma unroll
            for (int u = 0; u < 4; u++) cu_ld16(x, base + e + u * step, v[u]);
#pragma unroll
            for (int u = 0; u < 4; u++) ce_fold<N>(m, s, v[u]);
        }
        for (; e < K; e += step) {
            float v[N];
            cu_ld16(x, base + e, v); /* the row's columns run to a multiple of N past K */
#pragma unroll
            for (int j = 0; j < N; j++)
                if (e + j >= K) v[j] = -INFINITY;
            ce_fold<N>(m, s, v);
        }
    } else {
        for (int64_t e = threadIdx.x; e < K; e += blockDim.x) {
            float v[1] = {cu_ld(x, base + e)};
            ce_fold<1>(m, s, v);
        }
    }
    /* The block's maximum M first (fmax: any order gives the same), then each thread's sum
     * scaled to it once, in float, and the scaled sums added in double in a fixed order: a
     * butterfly (a + b on one lane is b + a on its partner, so all lanes agree), then the
     * warps in order, in every thread. One exponential a thread; merging the threads' pairs
     * online instead took two double exponentials per merge, 21 merges a thread, which cost
     * more than the row's own reads. */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float M = m;
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(CU_FULL_MASK, M, o));
    if (lane == 0) shm[warp] = M;
    __syncthreads();
    M = shm[0];
    for (int w = 1; w < nw; w++) M = fmaxf(M, shm[w]);
    /* nothing above -inf: no scaling (s holds 0, or the NaN a NaN element left) */
    double sd = M == -INFINITY || m == M ? (double)s : (double)__fmul_rn(s, ce_exp(m - M));
    for (int o = 16; o > 0; o >>= 1) sd += __shfl_xor_sync(CU_FULL_MASK, sd, o);
    if (lane == 0) shs[warp] = sd;
    __syncthreads();
    sd = shs[0];
    for (int w = 1; w < nw; w++) sd += shs[w]; /* warp order, in every thread */
    __syncthreads(); /* shm, shs are reused by the next row */
    /* an infinite maximum leaves exp(inf - inf) in the reference's sum: NaN */
    return isinf(M) ? (double)NAN : (double)M + log(sd);
}

/* Per row: loss[r] = logsumexp(row[:K]) - row[target] (0 for ignored rows) and kept[r].
 * A target that names no class is reported (baddata.cu) and its row's loss is NaN. */
template <typename T>
__global__ void __launch_bounds__(CE_THREADS) ce_rows_kernel(const T *x, const void *t, int t64, int64_t N, int64_t C,
                                                             int64_t K, int vec, int64_t ignore, double *loss,
                                                             double *kept, cu_bad bad)
{
    __shared__ float shm[32];
    __shared__ double shs[32];
    for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
        int64_t target = load_target(t, t64, r);
        if (target == ignore) {
            if (threadIdx.x == 0) loss[r] = 0.0, kept[r] = 0.0;
            continue; /* uniform across the block: no thread reaches the reductions */
        }
        const double lse = ce_row_lse(x, r * C, K, vec, shm, shs);
        if (threadIdx.x == 0) {
            int ok = target >= 0 && target < K;
            if (!ok) cu_report(bad, target, r);
            loss[r] = ok ? lse - (double)cu_ld(x, r * C + target) : NAN;
            kept[r] = 1.0;
        }
    }
}

/* One block: total = sum of loss, count = sum of kept, each in a fixed order; writes the
 * mean loss total / count (0 when nothing is kept) to y[0], a T or (y32: the mixed forms'
 * loss of f16/bf16 logits) a float. */
template <typename T>
__global__ void ce_total_kernel(const double *loss, const double *kept, int64_t N, void *y, int y32)
{
    __shared__ double sh[THREADS];
    double a = 0.0, c = 0.0;
    for (int64_t r = threadIdx.x; r < N; r += blockDim.x) a += loss[r], c += kept[r];
    a = block_sum(a, sh);
    c = block_sum(c, sh);
    if (threadIdx.x == 0) {
        if (y32) cu_std((float *)y, 0, c > 0 ? a / c : 0.0);
        else cu_std((T *)y, 0, c > 0 ? a / c : 0.0);
    }
}

/* How many targets the mean is over (those not ignored), summed in a block's fixed order
 * (`sh` 32 doubles). Every block of the grad kernel calls it when N is small (no kernel of
 * its own); one block of ce_count_kernel does, when N is large, for the grad kernel to read. */
static __device__ double ce_count(const void *t, int t64, int64_t N, int64_t ignore, double *sh)
{
    double c = 0.0;
    for (int64_t r = threadIdx.x; r < N; r += blockDim.x) c += load_target(t, t64, r) != ignore ? 1.0 : 0.0;
    return cu_block_sum_d(c, sh);
}

__global__ void ce_count_kernel(const void *t, int t64, int64_t N, int64_t ignore, double *count)
{
    __shared__ double sh[32];
    double c = ce_count(t, t64, N, ignore, sh);
    if (threadIdx.x == 0) count[0] = c;
}

/* dx[k] of one element: (p - onehot) * scale among the classes, 0 past them (NaN in a row
 * whose target is bad). */
static __device__ __forceinline__ float ce_dx(float x, int64_t k, int64_t target, int64_t K, float lse, float scale,
                                              int ok)
{
    if (k >= K) return 0.0f;
    if (!ok) return NAN;
    return (ce_exp(x - lse) - (k == target ? 1.0f : 0.0f)) * scale;
}

// dloss (), logits (N, C), targets (N) -> dlogits = (softmax(row[:K]) - onehot(target)) * dloss / count,
// zeros past K; `counted` holds the count, or is NULL for the block to count itself. Two
// reads of a row (its log-sum-exp, then the gradient) and one write. dloss is a T or (dl32:
// the mixed forms, f16/bf16 logits) a float. With `loss` (cross_entropy_with_grad) the row's
// loss and weight go to loss[r], kept[r] as ce_rows_kernel writes them, for ce_total_kernel:
// the forward's pass over the logits is this one's first. (Its row sums are the forward's
// when both read vectors: dlogits, a planned output, is 16-byte aligned, so `vec` is the
// forward's unless the logits themselves are not.)
template <typename T>
__global__ void __launch_bounds__(CE_THREADS) ce_grad_kernel(const void *dl, int dl32, const T *x, const void *t, int t64, int64_t N,
                                                             int64_t C, int64_t K, int vec, int64_t ignore,
                                                             const double *counted, T *dx, cu_bad bad, double *loss,
                                                             double *kept)
{
    constexpr int NV = cu_vec<T>::N;
    __shared__ float shm[32];
    __shared__ double shs[32];
    __shared__ double shc[32];
    const double count = counted != NULL ? counted[0] : ce_count(t, t64, N, ignore, shc);
    const double dloss = dl32 ? (double)((const float *)dl)[0] : (double)cu_ld((const T *)dl, 0);
    const float scale = (float)(count > 0 ? dloss / count : 0.0);
    for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
        const int64_t target = load_target(t, t64, r), base = r * C;
        if (target == ignore) {
            if (loss != NULL && threadIdx.x == 0) loss[r] = 0.0, kept[r] = 0.0;
            for (int64_t k = threadIdx.x; k < C; k += blockDim.x) cu_st(dx, base + k, 0.0f);
            continue;
        }
        const int ok = target >= 0 && target < K;
        /* the target's logit before the row's barriers: past them dx may overwrite x (reuse) */
        const double xt = loss != NULL && ok && threadIdx.x == 0 ? (double)cu_ld(x, base + target) : 0.0;
        const double lse_d = ce_row_lse(x, base, K, vec, shm, shs);
        const float lse = (float)lse_d;
        if (!ok && threadIdx.x == 0) cu_report(bad, target, r);
        if (loss != NULL && threadIdx.x == 0) loss[r] = ok ? lse_d - xt : NAN, kept[r] = 1.0;
        if (vec) {
            const int64_t step = (int64_t)blockDim.x * NV, full = K / NV * NV;
            const float lse_v = ok ? lse : NAN;
            int64_t e = (int64_t)threadIdx.x * NV;
            /* four vectors of classes in flight per thread (loads are not moved past the
             * stores by the compiler, which cannot know that dx is not x) */
            for (; e + 3 * step < full; e += 4 * step) {
                float v[4][NV];
#pragma unroll
                for (int u = 0; u < 4; u++) cu_ld16(x, base + e + u * step, v[u]);
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    /* all classes here: ce_dx's expression with the target found once a
                     * vector (tj, or -1) and a bad row's NaN carried by its lse */
                    const int64_t k0 = e + u * step;
                    const int tj = (uint64_t)(target - k0) < (uint64_t)NV ? (int)(target - k0) : -1;
#pragma unroll
                    for (int j = 0; j < NV; j++) v[u][j] = (ce_exp(v[u][j] - lse_v) - (j == tj ? 1.0f : 0.0f)) * scale;
                    cu_st16(dx, base + k0, v[u]);
                }
            }
            for (; e < C; e += step) {
                float v[NV] = {};
                if (e < K) cu_ld16(x, base + e, v); /* no need to read columns past the classes */
#pragma unroll
                for (int j = 0; j < NV; j++) v[j] = e < K ? ce_dx(v[j], e + j, target, K, lse, scale, ok) : 0.0f;
                cu_st16(dx, base + e, v);
            }
        } else {
            for (int64_t k = threadIdx.x; k < C; k += blockDim.x)
                cu_st(dx, base + k, k < K ? ce_dx(cu_ld(x, base + k), k, target, K, lse, scale, ok) : 0.0f);
        }
    }
}

/* cross_entropy_with_grad: the gradient's node with the forward's loss as a second output */
static int ce_fused(const gdp_node *n) { return strcmp(n->op, "cross_entropy_with_grad") == 0; }

static int ce_supports(void *b, const gdp_node *n)
{
    (void)b;
    const int fused = ce_fused(n), is_grad = fused || strcmp(n->op, "cross_entropy_grad") == 0;
    if (n->n_in != (is_grad ? 3 : 2) || n->n_out != 1 + fused) return 0;
    const gdp_tensor *x = n->in[is_grad ? 1 : 0], *t = n->in[is_grad ? 2 : 1];
    /* the loss (and dloss) in the logits' dtype, or f32 for f16/bf16 logits (the mixed forms) */
    const gdp_tensor *loss = is_grad ? n->in[0] : n->out[0];
    const int loss_ok = loss->dtype == x->dtype || (loss->dtype == GDP_F32 && x->dtype != GDP_F32);
    if (!cu_gpu_float(x->dtype) || !gdp_is_index(t->dtype) || !loss_ok || x->ndim < 1) return 0;
    if (is_grad && (n->out[0]->dtype != x->dtype || gdp_numel(n->in[0]) != 1 || !cu_same_shape(n->out[0], x)))
        return 0;
    if (fused && (n->out[1]->dtype != loss->dtype || gdp_numel(n->out[1]) != 1)) return 0;
    if (!is_grad && gdp_numel(n->out[0]) != 1) return 0;
    int64_t C = x->shape[x->ndim - 1], K = gdp_attr_int(&n->attrs, "classes", C);
    return C >= 1 && K >= 1 && K <= C && gdp_numel(t) * C == gdp_numel(x);
}

/* Targets up to which each block of the grad kernel counts the kept ones itself. */
#define CE_SELF_COUNT 4096

/* The forward's row losses and row weights (kept or not); the grad's count; both for the
 * fused node (the count after the rows). */
static size_t ce_scratch(const gdp_node *n)
{
    const int fused = ce_fused(n), is_grad = fused || strcmp(n->op, "cross_entropy_grad") == 0;
    return (size_t)(fused ? 2 * gdp_numel(n->in[2]) + 1 : is_grad ? 1 : 2 * gdp_numel(n->in[1]) + 1) * sizeof(double);
}

static size_t ce_workspace(void *b, const gdp_node *n)
{
    (void)b;
    return cu_ws_declare(ce_scratch(n));
}

static gdp_status ce_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const int fused = ce_fused(node), is_grad = fused || strcmp(node->op, "cross_entropy_grad") == 0;
    const gdp_tensor *x = node->in[is_grad ? 1 : 0], *t = node->in[is_grad ? 2 : 1], *y = node->out[0];
    int64_t C = x->shape[x->ndim - 1], N = gdp_numel(t), K = gdp_attr_int(&node->attrs, "classes", C);
    int64_t ignore = gdp_attr_int(&node->attrs, "ignore_index", -100);
    int t64 = t->dtype == GDP_I64;
    const int dl32 = is_grad && node->in[0]->dtype != x->dtype, y32 = !is_grad && y->dtype != x->dtype;
    /* rows of whole vectors: every row starts on a vector, and the columns past K that a
     * vector holding the last classes covers are still the row's */
    int vec = C % (16 / (int64_t)gdp_dtype_size(x->dtype)) == 0 && cu_aligned16(x->data) &&
              (!is_grad || cu_aligned16(y->data));
    char *ws = NULL;
    gdp_status st = cu_ws(node, ce_scratch(node), &ws, err);
    if (st != GDP_OK) return st;
    cu_bad bad = cu_bad_for(be, node, CU_BAD_TARGET, K, ignore, t);
    unsigned g = cu_blocks(be, N * CE_THREADS, CE_THREADS);
    if (is_grad) {
        /* Only the count of kept targets is needed from the whole batch: each block counts
         * them itself when that is cheap, else one small kernel does, before. */
        double *counted = NULL, *loss = fused ? (double *)ws : NULL, *kept = fused ? loss + N : NULL;
        if (N > CE_SELF_COUNT) {
            counted = (double *)ws + (fused ? 2 * N : 0); /* one double after the fused node's rows */
            ce_count_kernel<<<1, THREADS, 0, s>>>(t->data, t64, N, ignore, counted);
        }
        const gdp_tensor *l = fused ? node->out[1] : NULL;
        CU_FLOAT_SWITCH(x->dtype, T,
                        ce_grad_kernel<T><<<g, CE_THREADS, 0, s>>>(node->in[0]->data, dl32, (const T *)x->data,
                                                                  t->data, t64, N, C, K, vec, ignore, counted,
                                                                  (T *)y->data, bad, loss, kept);
                        if (fused) ce_total_kernel<T><<<1, THREADS, 0, s>>>(loss, kept, N, l->data, l->dtype != x->dtype));
        return GDP_OK;
    }
    double *loss = (double *)ws, *kept = loss + N; /* the forward's 2 N + 1 doubles */
    CU_FLOAT_SWITCH(x->dtype, T,
                    ce_rows_kernel<T><<<g, CE_THREADS, 0, s>>>((const T *)x->data, t->data, t64, N, C, K, vec, ignore,
                                                              loss, kept, bad);
                    ce_total_kernel<T><<<1, THREADS, 0, s>>>(loss, kept, N, y->data, y32));
    return GDP_OK;
}
CU_LAUNCHER(ce_run)

static const char *const axis_attrs[] = {"axis", NULL};

#define FLOATS3(op, sup, fn, attrs) \
    CU_K(op, GDP_F32, sup, fn, attrs), CU_K(op, GDP_F16, sup, fn, attrs), CU_K(op, GDP_BF16, sup, fn, attrs)
static const char *const ce_attrs[] = {"classes", NULL};
#define CE(op, dt) CU_KX(op, dt, 0, ce_supports, ce_run_launch, ce_attrs, ce_workspace)
#define CE_SIG(op, sig) CU_KSIG(op, sig, ce_supports, ce_run_launch, ce_attrs, ce_workspace)

static const gdp_kernel kernels[] = {
    FLOATS3("softmax", softmax_supports, softmax_run_launch, axis_attrs),
    FLOATS3("log_softmax", softmax_supports, softmax_run_launch, axis_attrs),
    FLOATS3("softmax_grad", softmax_supports, softmax_run_launch, axis_attrs),
    FLOATS3("log_softmax_grad", softmax_supports, softmax_run_launch, axis_attrs),
    CE("cross_entropy", GDP_F32), CE("cross_entropy", GDP_F16), CE("cross_entropy", GDP_BF16),
    CE("cross_entropy_grad", GDP_F32), CE("cross_entropy_grad", GDP_F16), CE("cross_entropy_grad", GDP_BF16),
    /* f16/bf16 logits with an f32 loss, and its gradient from an f32 dloss */
    CE_SIG("cross_entropy", "bf16,i32->f32"), CE_SIG("cross_entropy", "bf16,i64->f32"),
    CE_SIG("cross_entropy", "f16,i32->f32"), CE_SIG("cross_entropy", "f16,i64->f32"),
    CE_SIG("cross_entropy_grad", "f32,bf16,i32->bf16"), CE_SIG("cross_entropy_grad", "f32,bf16,i64->bf16"),
    CE_SIG("cross_entropy_grad", "f32,f16,i32->f16"), CE_SIG("cross_entropy_grad", "f32,f16,i64->f16"),
    CE("cross_entropy_with_grad", GDP_F32), CE("cross_entropy_with_grad", GDP_F16), CE("cross_entropy_with_grad", GDP_BF16),
    CE_SIG("cross_entropy_with_grad", "f32,bf16,i32->bf16,f32"), CE_SIG("cross_entropy_with_grad", "f32,bf16,i64->bf16,f32"),
    CE_SIG("cross_entropy_with_grad", "f32,f16,i32->f16,f32"), CE_SIG("cross_entropy_with_grad", "f32,f16,i64->f16,f32"),
};
CU_FAMILY(softmax, kernels);
