/* test_cpu_gemm.c — the fast CPU backend's GEMM against a naive float64 product.
 *
 * For many shapes (odd, 1xN, Nx1, not multiples of the blocks, K = 0), every transpose
 * pair, several alpha/beta, padded leading dimensions, on 1, 2 and 3 threads:
 *  - each element within a bound proportional to sum_k |a||b| (float32 rounding);
 *  - beta == 0 never reads C (C starts as NaN);
 *  - nothing outside the M x N window of C is written (guard values around and between rows);
 *  - two runs are bitwise identical, and so are runs on different thread counts.
 * OpenBLAS, when built in, gets the same correctness checks (not the thread-count one),
 * and must have run on the calling thread only.
 * Returns 0 when everything passes; prints each failure.
 */
#include "gemm.h"
#include "threadpool.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
static int checks = 0;

static uint64_t rng = 0x1234567887654321ull;
static float frand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
}

#define GUARD 1234.5f
#define PAD 3 /* extra columns of C (ldc = N + PAD) and guard elements on each side */

typedef struct problem {
    int ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    float alpha, beta;
    float *A, *B, *C0; /* C0: initial C (with guards) */
    size_t c_len;
} problem;

static void make(problem *p, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, float beta)
{
    memset(p, 0, sizeof *p);
    p->ta = ta; p->tb = tb; p->M = M; p->N = N; p->K = K; p->alpha = alpha; p->beta = beta;
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    p->lda = ac + (M % 3); /* padded leading dimensions on some shapes */
    p->ldb = bc + (N % 2);
    p->ldc = N + PAD;
    if (p->lda < 1) p->lda = 1;
    if (p->ldb < 1) p->ldb = 1;
    p->A = malloc(sizeof(float) * (size_t)(ar * p->lda + 1));
    p->B = malloc(sizeof(float) * (size_t)(br * p->ldb + 1));
    p->c_len = (size_t)(M * p->ldc + 2 * PAD);
    p->C0 = malloc(sizeof(float) * p->c_len);
    for (int64_t i = 0; i < ar * p->lda; i++) p->A[i] = frand();
    for (int64_t i = 0; i < br * p->ldb; i++) p->B[i] = frand();
    for (size_t i = 0; i < p->c_len; i++) p->C0[i] = GUARD;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) p->C0[PAD + i * p->ldc + j] = beta == 0.0f ? NAN : frand();
}

static void unmake(problem *p)
{
    free(p->A); free(p->B); free(p->C0);
}

static int run(const problem *p, gcpu_gemm_impl impl, float *C)
{
    memcpy(C, p->C0, sizeof(float) * p->c_len);
    return gcpu_sgemm_impl(impl, p->ta, p->tb, p->M, p->N, p->K, p->alpha, p->A, p->lda, p->B, p->ldb, p->beta,
                           C + PAD, p->ldc);
}

static void fail(const problem *p, const char *what, const char *detail)
{
    failures++;
    if (failures <= 30)
        printf("FAIL %s: ta=%d tb=%d M=%lld N=%lld K=%lld alpha=%g beta=%g threads=%d: %s\n", what, p->ta, p->tb,
               (long long)p->M, (long long)p->N, (long long)p->K, p->alpha, p->beta, gcpu_pool_threads(), detail);
}

/* Compares C with the float64 product; checks guards. */
static void check(const problem *p, const float *C, const char *what)
{
    char msg[200];
    checks++;
    for (size_t i = 0; i < p->c_len; i++) {
        int64_t off = (int64_t)i - PAD, r = off / p->ldc, c = off - r * p->ldc;
        int inside = off >= 0 && r < p->M && c < p->N;
        if (!inside && memcmp(&C[i], &(float){GUARD}, sizeof(float)) != 0) {
            snprintf(msg, sizeof msg, "guard at offset %lld overwritten with %g", (long long)off, C[i]);
            fail(p, what, msg);
            return;
        }
    }
    for (int64_t i = 0; i < p->M; i++)
        for (int64_t j = 0; j < p->N; j++) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < p->K; k++) {
                double a = p->ta ? p->A[k * p->lda + i] : p->A[i * p->lda + k];
                double b = p->tb ? p->B[j * p->ldb + k] : p->B[k * p->ldb + j];
                s += a * b;
                mag += fabs(a * b);
            }
            double old = p->beta == 0.0f ? 0.0 : p->C0[PAD + i * p->ldc + j];
            double ref = p->alpha * s + p->beta * old;
            double bound = 1e-6 * (4.0 + (double)p->K) * (fabs(p->alpha) * mag + fabs(p->beta * old)) + 1e-30;
            double got = C[PAD + i * p->ldc + j];
            if (!(fabs(got - ref) <= bound)) {
                snprintf(msg, sizeof msg, "C[%lld,%lld] = %.9g, want %.9g (bound %.3g)", (long long)i, (long long)j,
                         got, ref, bound);
                fail(p, what, msg);
                return;
            }
        }
}

static int same_bits(const float *x, const float *y, size_t n)
{
    return memcmp(x, y, sizeof(float) * n) == 0;
}

static void test_shape(int64_t M, int64_t N, int64_t K, float alpha, float beta)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            problem p;
            make(&p, ta, tb, M, N, K, alpha, beta);
            float *C1 = malloc(sizeof(float) * p.c_len), *C2 = malloc(sizeof(float) * p.c_len);
            float *Cref = malloc(sizeof(float) * p.c_len);
            int threads[3] = {1, 2, 3};
            for (int t = 0; t < 3; t++) {
                gcpu_pool_set_threads(threads[t]);
                if (run(&p, GCPU_GEMM_OWN, C1) != 0) { fail(&p, "own", "returned an error"); continue; }
                check(&p, C1, "own");
                if (run(&p, GCPU_GEMM_OWN, C2) != 0 || !same_bits(C1, C2, p.c_len))
                    fail(&p, "own", "second run not bitwise identical");
                if (t == 0) memcpy(Cref, C1, sizeof(float) * p.c_len);
                else if (!same_bits(C1, Cref, p.c_len)) fail(&p, "own", "result depends on the thread count");
            }
            if (gcpu_gemm_have_blas()) {
                gcpu_pool_set_threads(2);
                if (run(&p, GCPU_GEMM_BLAS, C1) != 0) fail(&p, "blas", "returned an error");
                else check(&p, C1, "blas");
            }
            free(C1); free(C2); free(Cref);
            unmake(&p);
        }
}

static void test_errors(void)
{
    float x[4] = {0};
    checks++;
    if (gcpu_sgemm(0, 0, -1, 2, 2, 1, x, 2, x, 2, 0, x, 2) == 0) { failures++; printf("FAIL: M < 0 accepted\n"); }
    if (gcpu_sgemm(0, 0, 2, 2, 2, 1, x, 1, x, 2, 0, x, 2) == 0) { failures++; printf("FAIL: lda < K accepted\n"); }
    if (gcpu_sgemm(0, 0, 2, 2, 2, 1, x, 2, x, 2, 0, x, 1) == 0) { failures++; printf("FAIL: ldc < N accepted\n"); }
    if (gcpu_sgemm(0, 0, 0, 0, 0, 1, x, 1, x, 1, 0, x, 1) != 0) { failures++; printf("FAIL: empty rejected\n"); }
}

int main(void)
{
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {1, 37, 5}, {37, 1, 5}, {1, 1, 300}, {1, 513, 129}, {513, 1, 129}, {2, 3, 4},
        {7, 9, 11}, {12, 32, 8}, {13, 33, 257}, {24, 64, 256}, {25, 65, 255}, {100, 100, 100},
        {128, 10, 784}, {128, 784, 10}, {10, 784, 128}, {191, 67, 300}, {200, 300, 513},
        {97, 1031, 33}, {5, 4, 0}, {0, 4, 5}, {4, 0, 5}, {300, 257, 520},
    };
    static const float ab[][2] = {{1, 0}, {1, 1}, {-0.5f, 2.0f}, {0, 0.5f}, {2, 0}};
    int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    printf("test_cpu_gemm: kernel %s, OpenBLAS %s\n", gcpu_gemm_kernel_name(), gcpu_gemm_have_blas() ? "yes" : "no");
    for (int s = 0; s < n_shapes; s++) {
        /* every alpha/beta on the small shapes, two on the large ones (the float64 oracle is slow) */
        int big = shapes[s][0] * shapes[s][1] * shapes[s][2] > 2000000;
        for (int k = 0; k < 5; k++) {
            if (big && k > 1) break;
            test_shape(shapes[s][0], shapes[s][1], shapes[s][2], ab[k][0], ab[k][1]);
        }
    }
    test_errors();
    /* OpenBLAS ran above on pools of 1 to 3 threads, and always on the calling thread
     * only: its own workers must never get work (see gemm.c) */
    if (gcpu_gemm_have_blas()) {
        int bt = gcpu_blas_threads();
        checks++;
        if (bt != 1 && bt != -1) {
            printf("FAIL: OpenBLAS runs on %d threads after BLAS calls, want 1\n", bt);
            failures++;
        }
    }
    gcpu_pool_shutdown();
    printf("%s: %d checks, %d failures\n", failures ? "FAIL" : "ok", checks, failures);
    return failures ? 1 : 0;
}
