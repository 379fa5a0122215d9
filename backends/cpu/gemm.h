/* gemm.h — single-precision matrix product of the fast CPU backend.
 *
 *     C = alpha * op(A) * op(B) + beta * C       row-major; op(X) = X or X^T
 *
 * op(A) is (M, K), op(B) is (K, N), C is (M, N); lda/ldb/ldc are row strides in elements
 * of A, B, C as stored (A is (M, K) or, transposed, (K, M)). beta == 0 means C is not read
 * (it may hold NaN). Two implementations: the one in gemm.c (cache-blocked, packed,
 * SIMD micro-kernel, threaded over the pool) and, when built with OpenBLAS,
 * cblas_sgemm. Each is deterministic: a result never depends on the thread count, and
 * runs repeat bitwise. gcpu_gemm_choose says which one a shape gets.
 */
#ifndef GCPU_GEMM_H
#define GCPU_GEMM_H

#include <stdint.h>

typedef enum gcpu_gemm_impl {
    GCPU_GEMM_AUTO = 0, /* per shape, by the rule in gcpu_gemm_choose */
    GCPU_GEMM_OWN = 1,
    GCPU_GEMM_BLAS = 2
} gcpu_gemm_impl;

/* Returns 0 (GDP_OK), GDP_ERR_INVALID for negative sizes or short leading dimensions, or
 * GDP_ERR_NOMEM when packing buffers cannot be had. */
int gcpu_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
               int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* The same with the implementation forced; GCPU_GEMM_BLAS without OpenBLAS returns
 * GDP_ERR_UNSUPPORTED. */
int gcpu_sgemm_impl(gcpu_gemm_impl impl, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                    float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                    float *C, int64_t ldc);

/* Which implementation gcpu_sgemm uses for this shape (never AUTO). */
gcpu_gemm_impl gcpu_gemm_choose(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K);
/* Forces one implementation for every shape (AUTO restores the rule). The default comes
 * from GRADUS_GEMM=own|blas|auto. */
void gcpu_gemm_set_policy(gcpu_gemm_impl impl);
int gcpu_gemm_have_blas(void);
/* The threads an OpenBLAS call would run on now: 1 (the calling thread) once this
 * backend has made a BLAS call (see gemm.c); -1 for an OpenMP build of OpenBLAS, whose
 * threads the application's OpenMP settings decide; 0 without OpenBLAS. */
int gcpu_blas_threads(void);
/* Human-readable description of the micro-kernel, e.g. "avx512 12x32". */
const char *gcpu_gemm_kernel_name(void);

#endif
