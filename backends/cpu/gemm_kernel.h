/* gemm_kernel.h — the register-blocked micro-kernels of gemm.c, one per instruction set,
 * chosen when compiling (-march=native by default; GRADUS_PORTABLE builds get the
 * generic one).
 *
 * A micro-kernel computes one MR x NR tile of C from a packed A micro-panel (kc steps of
 * MR values: a[k*MR + i]) and a packed B micro-panel (kc steps of NR values: b[k*NR + j]),
 * both zero-padded, then applies the epilogue
 *
 *     beta == 0:  C = alpha*acc        beta == 1:  C = fma(alpha, acc, C)
 *     otherwise:  C = fma(alpha, acc, beta*C)
 *
 * The edge path (gemm.c) computes the same acc with alpha = 1, beta = 0 into a scratch
 * tile and applies the same formulas with fmaf, so an element's bits never depend on
 * whether it sat in a full or a partial tile. (With FMA hardware fmaf is one instruction;
 * without, both sides use the separate multiply and add written below.)
 */
#ifndef GCPU_GEMM_KERNEL_H
#define GCPU_GEMM_KERNEL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if !defined(GCPU_FORCE_GENERIC) && defined(__AVX512F__)
/* ---- AVX-512: 12 rows x 32 columns = 24 zmm accumulators ------------------------------ */
#include <immintrin.h>
#define GCPU_MR 12
#define GCPU_NR 32
#define GCPU_KERNEL_NAME "avx512 12x32"
#define GCPU_HAVE_FMA 1

static inline void gcpu_ukernel(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c,
                                int64_t ldc, float alpha, float beta)
{
    __m512 acc[GCPU_MR][2];
#pragma GCC unroll 16
    for (int i = 0; i < GCPU_MR; i++) {
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        /* C's tile, read by the epilogue: asked for now, it arrives during the k loop */
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0);
    }
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
        _mm_prefetch((const char *)(b + 8 * GCPU_NR), _MM_HINT_T0);
#pragma GCC unroll 16
        for (int i = 0; i < GCPU_MR; i++) {
            __m512 ai = _mm512_set1_ps(a[i]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
        a += GCPU_MR;
        b += GCPU_NR;
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 16
    for (int i = 0; i < GCPU_MR; i++) {
        float *ci = c + i * ldc;
        for (int h = 0; h < 2; h++) {
            __m512 r;
            if (beta == 0.0f) r = _mm512_mul_ps(va, acc[i][h]);
            else if (beta == 1.0f) r = _mm512_fmadd_ps(va, acc[i][h], _mm512_loadu_ps(ci + 16 * h));
            else r = _mm512_fmadd_ps(va, acc[i][h], _mm512_mul_ps(vb, _mm512_loadu_ps(ci + 16 * h)));
            _mm512_storeu_ps(ci + 16 * h, r);
        }
    }
}


/* A partial tile, m rows (1..MR) by n columns (1..NR), with the full kernel's arithmetic on
 * the elements it has (each element's FMA chain and epilogue are the same instructions),
 * so that its bits are those a full tile would give. Rows beyond m are not computed and
 * columns beyond n are masked: on the shapes of small layers (16 or 64 rows, 10 columns)
 * a padded full tile would be mostly waste. */
#define GCPU_HAVE_EDGE_KERNEL 1
static inline __attribute__((always_inline)) void gcpu_ukernel_part(const int m, const int halves, int64_t kc,
                                                                    const float *restrict a,
                                                                    const float *restrict b, float *restrict c,
                                                                    int64_t ldc, float alpha, float beta,
                                                                    __mmask16 k0, __mmask16 k1)
{
    __m512 acc[GCPU_MR][2];
#pragma GCC unroll 16
    for (int i = 0; i < m; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(b), b1 = halves > 1 ? _mm512_load_ps(b + 16) : b0;
#pragma GCC unroll 16
        for (int i = 0; i < m; i++) {
            __m512 ai = _mm512_set1_ps(a[i]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            if (halves > 1) acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
        a += GCPU_MR;
        b += GCPU_NR;
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 16
    for (int i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        for (int h = 0; h < halves; h++) {
            __mmask16 km = h == 0 ? k0 : k1;
            __m512 r;
            if (beta == 0.0f) r = _mm512_mul_ps(va, acc[i][h]);
            else if (beta == 1.0f) r = _mm512_fmadd_ps(va, acc[i][h], _mm512_maskz_loadu_ps(km, ci + 16 * h));
            else r = _mm512_fmadd_ps(va, acc[i][h], _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(km, ci + 16 * h)));
            _mm512_mask_storeu_ps(ci + 16 * h, km, r);
        }
    }
}

static inline void gcpu_ukernel_edge(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, float alpha,
                                     float beta, int m, int n)
{
    __mmask16 k0 = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
    __mmask16 k1 = n >= 32 ? (__mmask16)0xffff : n > 16 ? (__mmask16)((1u << (n - 16)) - 1u) : (__mmask16)0;
#define GCPU_PART_CASE(M_)                                                                      \
    case M_:                                                                                    \
        if (n > 16) gcpu_ukernel_part(M_, 2, kc, a, b, c, ldc, alpha, beta, k0, k1);            \
        else gcpu_ukernel_part(M_, 1, kc, a, b, c, ldc, alpha, beta, k0, k1);                   \
        break;
    switch (m) {
        GCPU_PART_CASE(1) GCPU_PART_CASE(2) GCPU_PART_CASE(3) GCPU_PART_CASE(4) GCPU_PART_CASE(5)
        GCPU_PART_CASE(6) GCPU_PART_CASE(7) GCPU_PART_CASE(8) GCPU_PART_CASE(9) GCPU_PART_CASE(10)
        GCPU_PART_CASE(11)
        default: GCPU_PART_CASE(12)
    }
#undef GCPU_PART_CASE
}

#elif !defined(GCPU_FORCE_GENERIC) && defined(__AVX2__) && defined(__FMA__)
/* ---- AVX2 + FMA: 6 rows x 16 columns = 12 ymm accumulators ---------------------------- */
#include <immintrin.h>
#define GCPU_MR 6
#define GCPU_NR 16
#define GCPU_KERNEL_NAME "avx2 6x16"
#define GCPU_HAVE_FMA 1

static inline void gcpu_ukernel(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c,
                                int64_t ldc, float alpha, float beta)
{
    __m256 acc[GCPU_MR][2];
#pragma GCC unroll 8
    for (int i = 0; i < GCPU_MR; i++) {
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0); /* C's tile, as above */
    }
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 8
        for (int i = 0; i < GCPU_MR; i++) {
            __m256 ai = _mm256_broadcast_ss(a + i);
            acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
        a += GCPU_MR;
        b += GCPU_NR;
    }
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#pragma GCC unroll 8
    for (int i = 0; i < GCPU_MR; i++) {
        float *ci = c + i * ldc;
        for (int h = 0; h < 2; h++) {
            __m256 r;
            if (beta == 0.0f) r = _mm256_mul_ps(va, acc[i][h]);
            else if (beta == 1.0f) r = _mm256_fmadd_ps(va, acc[i][h], _mm256_loadu_ps(ci + 8 * h));
            else r = _mm256_fmadd_ps(va, acc[i][h], _mm256_mul_ps(vb, _mm256_loadu_ps(ci + 8 * h)));
            _mm256_storeu_ps(ci + 8 * h, r);
        }
    }
}

#elif defined(__GNUC__)
/* ---- portable: GCC vector extensions, 4-wide (SSE2, NEON, ...): 6 x 8 ------------------ */
#define GCPU_MR 6
#define GCPU_NR 8
#define GCPU_KERNEL_NAME "generic-vec 6x8"
#define GCPU_HAVE_FMA 0
typedef float gcpu_v4 __attribute__((vector_size(16)));

static inline gcpu_v4 gcpu_v4_load(const float *p)
{
    gcpu_v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void gcpu_ukernel(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c,
                                int64_t ldc, float alpha, float beta)
{
    gcpu_v4 acc[GCPU_MR][2];
    const gcpu_v4 zero = {0, 0, 0, 0};
#pragma GCC unroll 8
    for (int i = 0; i < GCPU_MR; i++) acc[i][0] = acc[i][1] = zero;
    for (int64_t k = 0; k < kc; k++) {
        gcpu_v4 b0 = gcpu_v4_load(b), b1 = gcpu_v4_load(b + 4);
#pragma GCC unroll 8
        for (int i = 0; i < GCPU_MR; i++) {
            gcpu_v4 ai = zero + a[i];
            acc[i][0] += ai * b0; /* separate rounding: no contraction under -std=c11 */
            acc[i][1] += ai * b1;
        }
        a += GCPU_MR;
        b += GCPU_NR;
    }
    for (int i = 0; i < GCPU_MR; i++) {
        float *ci = c + i * ldc;
        for (int h = 0; h < 2; h++) {
            gcpu_v4 r, old = beta == 0.0f ? zero : gcpu_v4_load(ci + 4 * h);
            if (beta == 0.0f) r = alpha * acc[i][h];
            else if (beta == 1.0f) r = alpha * acc[i][h] + old;
            else r = alpha * acc[i][h] + beta * old;
            memcpy(ci + 4 * h, &r, sizeof r);
        }
    }
}

#else
/* ---- plain C ----------------------------------------------------------------------------- */
#define GCPU_MR 4
#define GCPU_NR 4
#define GCPU_KERNEL_NAME "scalar 4x4"
#define GCPU_HAVE_FMA 0

static inline void gcpu_ukernel(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c,
                                int64_t ldc, float alpha, float beta)
{
    float acc[GCPU_MR][GCPU_NR] = {{0}};
    for (int64_t k = 0; k < kc; k++, a += GCPU_MR, b += GCPU_NR)
        for (int i = 0; i < GCPU_MR; i++)
            for (int j = 0; j < GCPU_NR; j++) acc[i][j] += a[i] * b[j];
    for (int i = 0; i < GCPU_MR; i++)
        for (int j = 0; j < GCPU_NR; j++) {
            float *p = c + i * ldc + j;
            *p = beta == 0.0f ? alpha * acc[i][j] : beta == 1.0f ? alpha * acc[i][j] + *p
                                                                 : alpha * acc[i][j] + beta * *p;
        }
}
#endif

/* The epilogue of one element, bitwise equal to the kernels' vector epilogue above. */
static inline float gcpu_epilogue(float acc, float alpha, float beta, float old)
{
#if GCPU_HAVE_FMA
    if (beta == 0.0f) return alpha * acc;
    if (beta == 1.0f) return fmaf(alpha, acc, old);
    return fmaf(alpha, acc, beta * old);
#else
    if (beta == 0.0f) return alpha * acc;
    if (beta == 1.0f) return alpha * acc + old;
    return alpha * acc + beta * old;
#endif
}

#endif
