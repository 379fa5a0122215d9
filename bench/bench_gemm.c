/* bench_gemm.c — throughput of the fast CPU backend's own f32 GEMM against OpenBLAS (when
 * built with it) and a naive triple loop, on square sizes.
 *
 *   bench_gemm [--sizes 512,1024,2048] [--reps 7] [--warmup 2] [--threads N]
 *              [--naive-max 1024] [--trans | --layout nn|nt|tn|tt] [--min]
 *
 * --layout says which operands are stored transposed (A^T, B^T); --trans is tt.
 *
 * Method (printed with the numbers): C = A*B with A, B filled from a fixed-seed generator,
 * every implementation timed on the same buffers in one process, CLOCK_MONOTONIC around
 * each call, the median of --reps runs after --warmup untimed runs; GFLOP/s = 2*M*N*K / t.
 * The naive loop runs once (untimed warm-up skipped) and only up to --naive-max.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "gemm.h"
#include "threadpool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int use_min = 0; /* --min: best run instead of the median (for tuning on a noisy machine) */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void fill(float *p, int64_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        p[i] = (float)((s >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
    }
}

static void naive(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B, float *C)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++)
                s += (ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
            C[i * N + j] = s;
        }
}

/* OpenBLAS's threads busy-wait for a while after each call, and so (briefly) do the
 * pool's: let them fall asleep before timing the other implementation, so that neither is
 * measured while competing with the other's idle spinning. */
static void settle(void)
{
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* Median seconds of reps runs of impl (warmup runs first). */
static double time_impl(gcpu_gemm_impl impl, int ta, int tb, int64_t n, const float *A, const float *B, float *C,
                        int warmup, int reps)
{
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (t == NULL) return -1;
    settle();
    for (int r = 0; r < warmup + reps; r++) {
        double t0 = now_s();
        int st = gcpu_sgemm_impl(impl, ta, tb, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        double t1 = now_s();
        if (st != 0) {
            free(t);
            return -1;
        }
        if (r >= warmup) t[r - warmup] = t1 - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    double med = use_min ? t[0] : t[reps / 2];
    free(t);
    return med;
}

int main(int argc, char **argv)
{
    int64_t sizes[16] = {512, 1024, 2048};
    int n_sizes = 3, reps = 7, warmup = 2, threads = 0, ta = 0, tb = 0;
    int64_t naive_max = 1024;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            n_sizes = 0;
            for (char *s = strtok(argv[++i], ","); s != NULL && n_sizes < 16; s = strtok(NULL, ","))
                sizes[n_sizes++] = atoll(s);
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) {
            warmup = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--naive-max") == 0 && i + 1 < argc) {
            naive_max = atoll(argv[++i]);
        } else if (strcmp(argv[i], "--min") == 0) {
            use_min = 1;
        } else if (strcmp(argv[i], "--trans") == 0) {
            ta = tb = 1;
        } else if (strcmp(argv[i], "--layout") == 0 && i + 1 < argc && strlen(argv[i + 1]) == 2 &&
                   strchr("nt", argv[i + 1][0]) != NULL && strchr("nt", argv[i + 1][1]) != NULL) {
            ta = argv[i + 1][0] == 't';
            tb = argv[i + 1][1] == 't';
            i++;
        } else {
            fprintf(stderr, "usage: %s [--sizes a,b,..] [--reps N] [--warmup N] [--threads N] [--naive-max N] [--trans | --layout nn|nt|tn|tt] [--min]\n",
                    argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    int T = gcpu_pool_set_threads(threads);
    int blas = gcpu_gemm_have_blas();
    printf("bench_gemm: f32 C = A%s * B%s, square, row-major\n", ta ? "^T" : "", tb ? "^T" : "");
    printf("method: same buffers for every implementation, CLOCK_MONOTONIC per call, %s of %d runs after %d "
           "warm-up runs, 0.3 s pause before each implementation; naive: one run; GFLOP/s = 2n^3/t\n",
           use_min ? "best" : "median", reps, warmup);
    printf("own kernel: %s, threads: %d, OpenBLAS: %s\n\n", gcpu_gemm_kernel_name(), T, blas ? "yes" : "not built in");
    printf("%6s  %12s  %12s  %12s  %10s  %10s  %s\n", "n", "own GF/s", "openblas GF/s", "naive GF/s", "own/blas",
           "own/naive", "max|own-ref|");
    int rc = 0;
    for (int s = 0; s < n_sizes; s++) {
        int64_t n = sizes[s];
        size_t bytes = sizeof(float) * (size_t)(n * n);
        float *A = malloc(bytes), *B = malloc(bytes), *C = malloc(bytes), *R = malloc(bytes);
        if (A == NULL || B == NULL || C == NULL || R == NULL) {
            fprintf(stderr, "out of memory at n=%lld\n", (long long)n);
            return 1;
        }
        fill(A, n * n, 1);
        fill(B, n * n, 2);
        double flops = 2.0 * n * n * n;
        double t_own = time_impl(GCPU_GEMM_OWN, ta, tb, n, A, B, C, warmup, reps);
        double t_blas = blas ? time_impl(GCPU_GEMM_BLAS, ta, tb, n, A, B, R, warmup, reps) : -1;
        double t_naive = -1;
        if (n <= naive_max) {
            double t0 = now_s();
            naive(ta, tb, n, n, n, A, B, R);
            t_naive = now_s() - t0;
        }
        /* check own against whichever other result we have */
        double maxdiff = -1;
        if (blas || t_naive > 0) {
            maxdiff = 0;
            for (int64_t i = 0; i < n * n; i++) maxdiff = fmax(maxdiff, fabs((double)C[i] - R[i]));
            if (maxdiff > 1e-3 * sqrt((double)n)) rc = 1;
        }
        char g_own[32], g_blas[32] = "-", g_naive[32] = "-", r_blas[32] = "-", r_naive[32] = "-", md[32] = "-";
        snprintf(g_own, sizeof g_own, "%.1f", flops / t_own * 1e-9);
        if (t_blas > 0) {
            snprintf(g_blas, sizeof g_blas, "%.1f", flops / t_blas * 1e-9);
            snprintf(r_blas, sizeof r_blas, "%.2f", t_blas / t_own);
        }
        if (t_naive > 0) {
            snprintf(g_naive, sizeof g_naive, "%.2f", flops / t_naive * 1e-9);
            snprintf(r_naive, sizeof r_naive, "%.0fx", t_naive / t_own);
        }
        if (maxdiff >= 0) snprintf(md, sizeof md, "%.2g", maxdiff);
        printf("%6lld  %12s  %12s  %12s  %10s  %10s  %s\n", (long long)n, g_own, g_blas, g_naive, r_blas, r_naive, md);
        fflush(stdout);
        free(A); free(B); free(C); free(R);
    }
    if (rc) printf("\nFAIL: own GEMM differs from the reference beyond 1e-3*sqrt(n)\n");
    gcpu_pool_shutdown();
    return rc;
}
