/* gemm.c — cache-blocked, packed f32 GEMM (see gemm.h).
 *
 * The loop nest is the usual one for a packed GEMM:
 *
 *   for jc over N in NC columns          B block (KC x NC) packed once, stays in L2/L3
 *     for pc over K in KC steps
 *       pack op(B)[pc.., jc..] into NR-wide micro-panels
 *       for ic over M in MC rows          A block (MC x KC) packed, stays in L2
 *         pack op(A)[ic.., pc..] into MR-tall micro-panels
 *         for jr over NR micro-panels     one B micro-panel (KC x NR), from L1 or L2
 *           for ir over MR micro-panels
 *             micro-kernel: C[ir.., jr..] (MR x NR) += A panel * B panel
 *
 * Threads do not share packed data: C is cut into a grid of rectangles aligned to MR and
 * NR, and each thread runs the whole nest above on its own rectangle with its own packing
 * buffers. That re-packs a little (each thread packs the part of A and B it needs, a few
 * percent of the work for the sizes that are worth threading) but needs no barrier, and
 * every element of C is computed by the same sequence of instructions whatever the grid:
 * the sum over k always runs in the same KC blocks and the same order, so results do not
 * depend on the thread count.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "gemm.h"
#include "gemm_kernel.h"
#include "threadpool.h"

#include "gradus_plugin.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef GRADUS_CPU_HAVE_BLAS
#include <cblas.h>
#include <pthread.h>
#endif

/* Block sizes, measured with bench_gemm on the machines we have. Each K block reads and
 * writes all of its C tiles once more (the micro-kernel adds into C), so KC sets C's
 * traffic: at KC = 256 a core moved about 2.7 GB/s of C at its FMA peak, and products of
 * 2048 and up ran 15% below it. KC = 512 halves that. The B micro-panel (KC*NR*4 bytes,
 * 64 KiB with the AVX-512 kernel) then no longer sits in L1; it streams from L2 with the
 * A micro-panels, and costs less than the C traffic did. MC*KC*4 of A stays in L2. */
#ifndef GCPU_KC
#define GCPU_KC 512
#endif
#ifndef GCPU_MC
#define GCPU_MC (GCPU_MR * 16)
#endif
#ifndef GCPU_NC
#define GCPU_NC (GCPU_NR * 64)
#endif


/* ---- packing ---------------------------------------------------------------------------- */

/* op(A)[m0 .. m0+mc, k0 .. k0+kc] into MR-tall micro-panels, zero-padded to a multiple of MR. */
static void pack_a(int ta, const float *A, int64_t lda, int64_t m0, int64_t mc, int64_t k0, int64_t kc, float *dst)
{
    if (ta) {
        /* A stored (K, M): row k holds the block's mc values in one run. Read each such row
         * once, k outermost, into every panel: panel by panel, a panel's kc rows are lda
         * apart (a page apart for a wide A: a logits gradient's 32,000 columns), and every
         * panel walked them all again. */
        for (int64_t k = 0; k < kc; k++) {
            const float *s = A + (k0 + k) * lda + m0;
            for (int64_t ir = 0; ir < mc; ir += GCPU_MR) {
                const int m = (int)(mc - ir < GCPU_MR ? mc - ir : GCPU_MR);
                float *dk = dst + ir * kc + k * GCPU_MR;
                for (int i = 0; i < m; i++) dk[i] = s[ir + i];
                for (int i = m; i < GCPU_MR; i++) dk[i] = 0.0f;
            }
        }
        return;
    }
    for (int64_t ir = 0; ir < mc; ir += GCPU_MR) {
        int m = (int)(mc - ir < GCPU_MR ? mc - ir : GCPU_MR);
        float *d = dst + ir * kc;
        /* rows of A are contiguous in k: gather MR of them per k step */
        const float *rows[GCPU_MR];
        for (int i = 0; i < GCPU_MR; i++) rows[i] = A + (m0 + ir + (i < m ? i : 0)) * lda + k0;
        if (m == GCPU_MR) {
            for (int64_t k = 0; k < kc; k++)
                for (int i = 0; i < GCPU_MR; i++) d[k * GCPU_MR + i] = rows[i][k];
        } else {
            for (int64_t k = 0; k < kc; k++)
                for (int i = 0; i < GCPU_MR; i++) d[k * GCPU_MR + i] = i < m ? rows[i][k] : 0.0f;
        }
    }
}

/* op(B)[k0 .. k0+kc, n0 .. n0+nc] into NR-wide micro-panels, zero-padded to a multiple of NR. */
static void pack_b(int tb, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst)
{
    for (int64_t jr = 0; jr < nc; jr += GCPU_NR) {
        int n = (int)(nc - jr < GCPU_NR ? nc - jr : GCPU_NR);
        float *d = dst + jr * kc;
        if (!tb) {
            for (int64_t k = 0; k < kc; k++) {
                const float *s = B + (k0 + k) * ldb + n0 + jr;
                float *dk = d + k * GCPU_NR;
                if (n == GCPU_NR) {
                    memcpy(dk, s, sizeof(float) * GCPU_NR);
                } else {
                    for (int j = 0; j < n; j++) dk[j] = s[j];
                    for (int j = n; j < GCPU_NR; j++) dk[j] = 0.0f;
                }
            }
        } else {
            /* B stored (N, K): column j of op(B) is row j of B, contiguous in k. Read in
             * runs of 16 k a row, so that both the rows' lines and the panel's stay in L1
             * (the panel, KC*NR*4 bytes, is larger than L1: a column at a time over all of
             * kc would miss on every store). */
            const float *rows[GCPU_NR];
            for (int j = 0; j < GCPU_NR; j++) rows[j] = B + (n0 + jr + (j < n ? j : 0)) * ldb + k0;
            for (int64_t kk = 0; kk < kc; kk += 16) {
                const int64_t ke = kc - kk < 16 ? kc : kk + 16;
                for (int j = 0; j < GCPU_NR; j++) {
                    const float *s = rows[j];
                    if (j < n)
                        for (int64_t k = kk; k < ke; k++) d[k * GCPU_NR + j] = s[k];
                    else
                        for (int64_t k = kk; k < ke; k++) d[k * GCPU_NR + j] = 0.0f;
                }
            }
        }
    }
}

/* ---- one rectangle of C, one thread ------------------------------------------------------ */

typedef struct gemm_args {
    int ta, tb;
    int64_t M, N, K;
    float alpha, beta;
    const float *A, *B;
    int64_t lda, ldb, ldc;
    float *C;
    /* the grid of rectangles */
    int64_t gm, gn;          /* rectangles along M and N */
    int64_t bm, bn;          /* rectangle size (multiples of MR, NR) */
    atomic_int failed;
} gemm_args;

static void edge_tile(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, float alpha, float beta,
                      int m, int n)
{
#ifdef GCPU_HAVE_EDGE_KERNEL
    gcpu_ukernel_edge(kc, a, b, c, ldc, alpha, beta, m, n);
#else
    float tile[GCPU_MR * GCPU_NR] __attribute__((aligned(64)));
    gcpu_ukernel(kc, a, b, tile, GCPU_NR, 1.0f, 0.0f);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float *p = c + i * ldc + j;
            *p = gcpu_epilogue(tile[i * GCPU_NR + j], alpha, beta, beta == 0.0f ? 0.0f : *p);
        }
#endif
}

static int64_t round_up(int64_t x, int64_t q)
{
    return (x + q - 1) / q * q;
}

static int gemm_rect(const gemm_args *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, int tid)
{
    /* packing buffers as large as this rectangle's blocks need, not the block sizes */
    const int64_t kb = g->K < GCPU_KC ? g->K : GCPU_KC;
    const int64_t mb = round_up(m1 - m0 < GCPU_MC ? m1 - m0 : GCPU_MC, GCPU_MR);
    const int64_t nb = round_up(n1 - n0 < GCPU_NC ? n1 - n0 : GCPU_NC, GCPU_NR);
    float *pa = gcpu_scratch(tid, GCPU_SLOT_GEMM_A, sizeof(float) * (size_t)(mb * kb));
    float *pb = gcpu_scratch(tid, GCPU_SLOT_GEMM_B, sizeof(float) * (size_t)(kb * nb));
    if (pa == NULL || pb == NULL) return GDP_ERR_NOMEM;
    for (int64_t jc = n0; jc < n1; jc += GCPU_NC) {
        int64_t nc = n1 - jc < GCPU_NC ? n1 - jc : GCPU_NC;
        for (int64_t pc = 0; pc < g->K; pc += GCPU_KC) {
            int64_t kc = g->K - pc < GCPU_KC ? g->K - pc : GCPU_KC;
            /* the first K block applies the caller's beta; later ones accumulate */
            float beta = pc == 0 ? g->beta : 1.0f;
            pack_b(g->tb, g->B, g->ldb, pc, kc, jc, nc, pb);
            for (int64_t ic = m0; ic < m1; ic += GCPU_MC) {
                int64_t mc = m1 - ic < GCPU_MC ? m1 - ic : GCPU_MC;
                pack_a(g->ta, g->A, g->lda, ic, mc, pc, kc, pa);
                for (int64_t jr = 0; jr < nc; jr += GCPU_NR) {
                    int n = (int)(nc - jr < GCPU_NR ? nc - jr : GCPU_NR);
                    for (int64_t ir = 0; ir < mc; ir += GCPU_MR) {
                        int m = (int)(mc - ir < GCPU_MR ? mc - ir : GCPU_MR);
                        float *c = g->C + (ic + ir) * g->ldc + jc + jr;
                        if (m == GCPU_MR && n == GCPU_NR)
                            gcpu_ukernel(kc, pa + ir * kc, pb + jr * kc, c, g->ldc, g->alpha, beta);
                        else
                            edge_tile(kc, pa + ir * kc, pb + jr * kc, c, g->ldc, g->alpha, beta, m, n);
                    }
                }
            }
        }
    }
    return GDP_OK;
}

static void gemm_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    gemm_args *g = ctx;
    for (int64_t r = begin; r < end; r++) {
        int64_t rm = r / g->gn, rn = r % g->gn;
        int64_t m0 = rm * g->bm, n0 = rn * g->bn;
        int64_t m1 = m0 + g->bm < g->M ? m0 + g->bm : g->M;
        int64_t n1 = n0 + g->bn < g->N ? n0 + g->bn : g->N;
        if (m0 >= m1 || n0 >= n1) continue;
        if (gemm_rect(g, m0, m1, n0, n1, tid) != GDP_OK) atomic_store(&g->failed, 1);
    }
}

/* Picks the grid: T rectangles (or fewer) whose largest one is cheapest, counting the
 * micro-kernel work plus the packing each rectangle repeats. */
static void choose_grid(gemm_args *g, int T)
{
    int64_t best = -1;
    g->gm = g->gn = 1;
    g->bm = round_up(g->M, GCPU_MR);
    g->bn = round_up(g->N, GCPU_NR);
    for (int gm = 1; gm <= T; gm++) {
        int gn = T / gm;
        int64_t bm = round_up((g->M + gm - 1) / gm, GCPU_MR);
        int64_t bn = round_up((g->N + gn - 1) / gn, GCPU_NR);
        int64_t cost = bm * bn + 2 * (bm + bn) * GCPU_MR; /* per unit of K */
        if (best < 0 || cost < best) {
            best = cost;
            g->gm = (g->M + bm - 1) / bm;
            g->gn = (g->N + bn - 1) / bn;
            g->bm = bm;
            g->bn = bn;
        }
    }
}

static void scale_c(int64_t M, int64_t N, float beta, float *C, int64_t ldc)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
}

/* ---- a few rows: matrix-vector products -------------------------------------------------
 * With M <= GEMV_ROWS (a decoder's step: one token's activations against every weight),
 * packing B costs as much as the product, which is bound by reading B once. These loops
 * stream B instead: with B stored (N, K) (op(B) = B^T, a linear layer's weight), each output
 * is a dot product of two contiguous rows; with B stored (K, N), each row of B is added,
 * scaled, into the output row. Each output's sum runs over k in one fixed order (in
 * GEMV_LANES interleaved partial sums, added in order at the end, for the dot products), on
 * one thread, so results do not depend on the thread count; they differ from the packed
 * path's in rounding, as any two orders do. */
#define GEMV_ROWS 4
#define GEMV_LANES 16

typedef struct gemv_args {
    int64_t M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
    int tb;
} gemv_args;

static void gemv_store(const gemv_args *g, float *c, float v)
{
    *c = g->beta == 0.0f ? g->alpha * v : g->alpha * v + g->beta * *c;
}

/* columns [j0, j1) of every row, B stored (N, K) */
static void gemv_dot(void *ctx, int64_t j0, int64_t j1, int tid)
{
    (void)tid;
    const gemv_args *g = ctx;
    const int64_t K = g->K, K16 = K / GEMV_LANES * GEMV_LANES;
    for (int64_t m = 0; m < g->M; m++) {
        const float *a = g->A + m * g->lda;
        for (int64_t j = j0; j < j1; j++) {
            const float *b = g->B + j * g->ldb;
            float acc[GEMV_LANES] = {0};
            for (int64_t k = 0; k < K16; k += GEMV_LANES)
                for (int u = 0; u < GEMV_LANES; u++) acc[u] += a[k + u] * b[k + u];
            float sum = 0.0f;
            for (int u = 0; u < GEMV_LANES; u++) sum += acc[u];
            for (int64_t k = K16; k < K; k++) sum += a[k] * b[k];
            gemv_store(g, g->C + m * g->ldc + j, sum);
        }
    }
}

/* columns [j0, j1) of every row, B stored (K, N): c[j0..j1) = sum over k of a[k] B[k, j0..j1) */
static void gemv_axpy(void *ctx, int64_t j0, int64_t j1, int tid)
{
    (void)tid;
    const gemv_args *g = ctx;
    enum { W = 256 }; /* columns at a time, kept in a local sum */
    for (int64_t m = 0; m < g->M; m++) {
        const float *a = g->A + m * g->lda;
        for (int64_t c0 = j0; c0 < j1; c0 += W) {
            const int64_t w = j1 - c0 < W ? j1 - c0 : W;
            float acc[W];
            for (int64_t j = 0; j < w; j++) acc[j] = 0.0f;
            for (int64_t k = 0; k < g->K; k++) {
                const float ak = a[k], *b = g->B + k * g->ldb + c0;
                for (int64_t j = 0; j < w; j++) acc[j] += ak * b[j];
            }
            for (int64_t j = 0; j < w; j++) gemv_store(g, g->C + m * g->ldc + c0 + j, acc[j]);
        }
    }
}

static void gemv(int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                 int64_t ldb, float beta, float *C, int64_t ldc)
{
    gemv_args g = {.M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc, .alpha = alpha, .beta = beta,
                   .A = A, .B = B, .C = C, .tb = tb};
    /* enough columns per thread that a chunk reads at least ~64 KiB of B */
    int64_t grain = (16384 + K - 1) / (K > 0 ? K : 1);
    if (grain < 16) grain = 16;
    if (gcpu_in_parallel() || (double)M * N * K < (double)GCPU_PARALLEL_MIN_FLOPS) grain = N > 0 ? N : 1;
    gcpu_parallel_for_grain(N, grain, tb ? gemv_dot : gemv_axpy, &g);
}

static int gemm_own(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                    const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (K == 0 || alpha == 0.0f) {
        if (beta != 1.0f) scale_c(M, N, beta, C, ldc);
        return GDP_OK;
    }
    if (M <= GEMV_ROWS && !ta) {
        gemv(tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return GDP_OK;
    }
    gemm_args g = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta,
                   .A = A, .B = B, .lda = lda, .ldb = ldb, .ldc = ldc, .C = C};
    atomic_init(&g.failed, 0);
    int T = 1;
    if ((double)M * N * K >= (double)GCPU_PARALLEL_MIN_FLOPS && !gcpu_in_parallel()) T = gcpu_pool_threads();
    choose_grid(&g, T);
    gcpu_parallel_for(g.gm * g.gn, gemm_task, &g);
    return atomic_load(&g.failed) ? GDP_ERR_NOMEM : GDP_OK;
}

/* ---- OpenBLAS ------------------------------------------------------------------------------ */

#ifdef GRADUS_CPU_HAVE_BLAS
/* OpenBLAS runs on the calling thread only. This backend parallelizes GEMMs itself (a
 * BLAS call inside a parallel_for is already one of the pool's tasks), so OpenBLAS's own
 * worker threads would only compete with the pool's; and under a memory limit those
 * workers retry a failed buffer allocation forever, which hangs the process at exit.
 * With one thread, OpenBLAS never hands work to a worker.
 *
 * Why the call and not OPENBLAS_NUM_THREADS=1 in the environment: OpenBLAS reads the
 * variable in its load-time constructor, which as a dependency of libgradus runs before
 * any gradus code, so setting it from here would come too late (and setenv from a
 * library races with getenv on other threads). openblas_set_num_threads works whenever
 * it is called, so it is called once, before the first BLAS call this backend makes,
 * and not at load: a process that never uses OpenBLAS through gradus keeps its settings.
 * Not in an OpenMP build of OpenBLAS, where the call is omp_set_num_threads, which would
 * change the thread count of the application's own OpenMP regions. */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_single_thread(void)
{
    if (openblas_get_parallel() != OPENBLAS_OPENMP) openblas_set_num_threads(1);
}
#endif

int gcpu_blas_threads(void)
{
#ifdef GRADUS_CPU_HAVE_BLAS
    return openblas_get_parallel() == OPENBLAS_OPENMP ? -1 : openblas_get_num_threads();
#else
    return 0;
#endif
}

static int gemm_blas(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
#ifdef GRADUS_CPU_HAVE_BLAS
    const int64_t lim = 0x7fffffff;
    if (M > lim || N > lim || K > lim || lda > lim || ldb > lim || ldc > lim) return GDP_ERR_UNSUPPORTED;
    pthread_once(&blas_once, blas_single_thread);
    /* OpenBLAS's beta == 0 path stores zeros without reading C, as BLAS requires. */
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
    return GDP_OK;
#else
    (void)ta; (void)tb; (void)M; (void)N; (void)K; (void)alpha; (void)A; (void)lda;
    (void)B; (void)ldb; (void)beta; (void)C; (void)ldc;
    return GDP_ERR_UNSUPPORTED;
#endif
}

/* ---- choice ------------------------------------------------------------------------------- */

/* Process-wide (a tuning knob, not an instance's state); atomic, as instances may read it
 * from two threads. -1: not read yet from GRADUS_GEMM. */
static atomic_int policy = -1;

static gcpu_gemm_impl current_policy(void)
{
    int p = atomic_load_explicit(&policy, memory_order_relaxed);
    if (p < 0) {
        const char *s = getenv("GRADUS_GEMM");
        p = GCPU_GEMM_AUTO;
        if (s != NULL && strcmp(s, "own") == 0) p = GCPU_GEMM_OWN;
        if (s != NULL && strcmp(s, "blas") == 0) p = GCPU_GEMM_BLAS;
        int unset = -1;
        atomic_compare_exchange_strong(&policy, &unset, p);
        p = atomic_load(&policy);
    }
    return (gcpu_gemm_impl)p;
}

void gcpu_gemm_set_policy(gcpu_gemm_impl impl)
{
    atomic_store(&policy, (int)impl);
}

int gcpu_gemm_have_blas(void)
{
#ifdef GRADUS_CPU_HAVE_BLAS
    return 1;
#else
    return 0;
#endif
}

const char *gcpu_gemm_kernel_name(void)
{
    return GCPU_KERNEL_NAME;
}

/* The rule, from bench_gemm on the 2-core AMD EPYC (Zen 4) dev machine, OpenBLAS 0.3.21:
 * own and OpenBLAS are within a few percent of each other at 256..2048, square and
 * transposed, 1 and 2 threads (both near the FMA peak), and own wins at small sizes. The
 * own GEMM also runs on the backend's pool, where OpenBLAS's threads would busy-wait
 * against it, and its results do not depend on the thread count. So: own everywhere,
 * OpenBLAS only when asked for (GRADUS_GEMM=blas or gcpu_gemm_set_policy). A machine where
 * OpenBLAS wins by a margin for some shapes changes this function, after measuring. */
gcpu_gemm_impl gcpu_gemm_choose(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K)
{
    (void)trans_a; (void)trans_b; (void)M; (void)N; (void)K;
    gcpu_gemm_impl p = current_policy();
    if (!gcpu_gemm_have_blas()) return GCPU_GEMM_OWN;
    if (p != GCPU_GEMM_AUTO) return p;
    return GCPU_GEMM_OWN;
}

static int check_args(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc)
{
    if (M < 0 || N < 0 || K < 0) return GDP_ERR_INVALID;
    if (lda < (ta ? (M > 1 ? M : 1) : (K > 1 ? K : 1))) return GDP_ERR_INVALID;
    if (ldb < (tb ? (K > 1 ? K : 1) : (N > 1 ? N : 1))) return GDP_ERR_INVALID;
    if (ldc < (N > 1 ? N : 1)) return GDP_ERR_INVALID;
    return GDP_OK;
}

int gcpu_sgemm_impl(gcpu_gemm_impl impl, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    int st = check_args(trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (st != GDP_OK) return st;
    if (M == 0 || N == 0) return GDP_OK;
    if (impl == GCPU_GEMM_AUTO) impl = gcpu_gemm_choose(trans_a, trans_b, M, N, K);
    if (impl == GCPU_GEMM_BLAS) return gemm_blas(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return gemm_own(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

int gcpu_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
               const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    return gcpu_sgemm_impl(GCPU_GEMM_AUTO, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
