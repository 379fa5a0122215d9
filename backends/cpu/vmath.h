/* vmath.h — f32 exp, log, tanh, sigmoid and erf written for the auto-vectorizer.
 *
 * The references compute transcendental functions in double and round once; these agree
 * with them to a few units in the last place of f32 (measured: exp and log within 1 ulp,
 * tanh and sigmoid within 2, erf within 2e-7 absolute), which is orders of magnitude
 * inside the ops' tolerances (normalized MSE 1e-8 and up), and they run 10-20x faster
 * than a scalar call into libm because a loop over them compiles to SIMD code.
 *
 * What keeps them vectorizable: no branches (both sides are computed and one is selected,
 * which the compiler turns into blends), no calls, no float-to-int conversions (the
 * exponent of 2^n is taken from the bits of a rounded float instead), and inputs clamped
 * before any integer arithmetic, so that NaN and inf never reach it; they are put back at
 * the end by selection. Special values follow C's functions: exp(-inf) = 0, exp(inf) = inf,
 * log(0) = -inf, log(x < 0) = NaN, NaN in gives NaN out.
 */
#ifndef GCPU_VMATH_H
#define GCPU_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float gcpu_vm_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t gcpu_vm_u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* 2^n for integer-valued n in [-150, 128], as two factors (2^n itself is not a normal
 * float at the ends of that range): multiplying by a and then by b rounds once, also
 * into the subnormal range and to inf. */
static inline void gcpu_vm_pow2(int32_t n, float *a, float *b)
{
    int32_t h = n / 2;
    *a = gcpu_vm_f((uint32_t)(h + 127) << 23);
    *b = gcpu_vm_f((uint32_t)(n - h + 127) << 23);
}

/* e^x. x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so that n ln2 is exact enough),
 * e^r by Cephes' degree-6 polynomial, then scaled by 2^n. */
static inline float gcpu_expf(float x)
{
    /* beyond these the result is 0 or inf anyway; NaN is replaced here and restored below */
    float c = x > -104.0f ? x : -104.0f;
    c = c < 89.0f ? c : 89.0f;
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float k = c * 1.44269504088896341f + magic;
    int32_t n = (int32_t)(gcpu_vm_u(k) - gcpu_vm_u(magic));
    float fn = k - magic;
    float r = c - fn * 0.693359375f;   /* ln2, high part: few bits, so fn * it is exact */
    r = r - fn * -2.12194440e-4f;      /* ln2, low part */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    float a, b;
    gcpu_vm_pow2(n, &a, &b);
    float y = p * a * b;
    return x == x ? y : x;
}

/* log(x). x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by Cephes' polynomial in
 * m - 1, plus e ln2 in two parts. Subnormal x is scaled up by 2^25 first. */
static inline float gcpu_logf(float x)
{
    /* every value below is computed on both paths and then selected, so that the loop
     * has no branches: under -ftrapping-math the compiler may not do that for us */
    int sub = x < 1.17549435e-38f;                   /* subnormal, zero, negative */
    float scaled = x * 33554432.0f;                  /* 2^25 */
    float s = sub ? scaled : x;
    uint32_t u = gcpu_vm_u(s);
    int32_t e = (int32_t)((u >> 23) & 0xffu) - (sub ? 151 : 126); /* s = m' 2^e, m' in [0.5, 1) */
    float m = gcpu_vm_f((u & 0x007fffffu) | 0x3f000000u);
    int lo = m < 0.707106781186547524f;
    float m2 = m + m - 1.0f, m1 = m - 1.0f;
    e = lo ? e - 1 : e;
    m = lo ? m2 : m1;                                /* m - 1 in [sqrt(1/2) - 1, sqrt(2) - 1) */
    float fe = (float)e;
    float z = m * m;
    float p = 7.0376836292e-2f;
    p = p * m + -1.1514610310e-1f;
    p = p * m + 1.1676998740e-1f;
    p = p * m + -1.2420140846e-1f;
    p = p * m + 1.4249322787e-1f;
    p = p * m + -1.6668057665e-1f;
    p = p * m + 2.0000714765e-1f;
    p = p * m + -2.4999993993e-1f;
    p = p * m + 3.3333331174e-1f;
    float y = p * m * z;
    y = y + fe * -2.12194440e-4f;
    y = y - 0.5f * z;
    y = m + y;
    y = y + fe * 0.693359375f;
    /* specials: log(+inf) = inf, log(0) = -inf, log(<0) = NaN, NaN stays */
    float twice = x + x;
    y = x <= 3.4028235e38f ? y : twice; /* false for inf and NaN */
    y = x == 0.0f ? -INFINITY : y;
    return x < 0.0f ? NAN : y;
}

/* 1 / (1 + e^-x), from e^-|x| so that nothing overflows: 1/(1+e) for x >= 0, e/(1+e) below
 * (the reference's form). */
static inline float gcpu_sigmoidf(float x)
{
    float ax = x < 0.0f ? -x : x;
    float e = gcpu_expf(-ax);
    float d = 1.0f / (1.0f + e);
    return x >= 0.0f ? d : (x == x ? e * d : x);
}

/* tanh(x): an odd polynomial (Cephes) below |x| = 0.625, where 1 - 2/(e^2x + 1) would
 * cancel, and that formula above it (e^2x = inf gives exactly 1). */
static inline float gcpu_tanhf(float x)
{
    float ax = x < 0.0f ? -x : x;
    float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z + -5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z + -3.33332819422e-1f;
    float small = x + x * z * p;
    float big = 1.0f - 2.0f / (gcpu_expf(ax + ax) + 1.0f);
    big = x < 0.0f ? -big : big;
    return ax < 0.625f ? small : (x == x ? big : x);
}

/* erf(x): the Maclaurin series (10 terms, error < 1e-8) below |x| = 0.84375; above it
 * 1 - t P(t) e^-x^2 with t = 1/(1 + p|x|), Abramowitz and Stegun 7.1.26 (absolute error
 * below 1.5e-7), the form PyTorch's vectorized erf uses. */
static inline float gcpu_erff(float x)
{
    float ax = x < 0.0f ? -x : x;
    float z = x * x;
    /* 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1)), n = 0 .. 10 */
    float q = 1.4807192815879218e-8f;
    q = q * z + -1.6365844691234924e-7f;
    q = q * z + 1.6462114365889246e-6f;
    q = q * z + -1.4925650358406250e-5f;
    q = q * z + 1.2055332981789664e-4f;
    q = q * z + -8.5483270234508520e-4f;
    q = q * z + 5.2239776254421880e-3f;
    q = q * z + -2.6866170645131252e-2f;
    q = q * z + 1.1283791670955126e-1f;
    q = q * z + -3.7612638903183754e-1f;
    q = q * z + 1.1283791670955126f;
    float small = x * q;
    float t = 1.0f / (1.0f + 0.3275911f * ax);
    float p = 1.061405429f;
    p = p * t + -1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t + -0.284496736f;
    p = p * t + 0.254829592f;
    float big = 1.0f - p * t * gcpu_expf(-z);
    big = x < 0.0f ? -big : big;
    return ax < 0.84375f ? small : (x == x ? big : x);
}

#endif
