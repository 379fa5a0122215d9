/* vmath.h — f32 exp, log, tanh, sigmoid and erf written for the auto-vectorizer.
 *
 * The references compute transcendental functions in double and round once; these agree
 * with them to a few units in the last place of f32 (measured over dense grids: exp, log
 * and tanh within 1 ulp, sigmoid 3, erf 2.5e-7 absolute), which is orders of magnitude
 * inside the ops' tolerances (normalized MSE 1e-8 and up), and they run 10-20x faster
 * than a scalar call into libm because a loop over them compiles to SIMD code.
 *
 * What keeps them vectorizable: no branches (both sides are computed and one is selected
 * with bit masks, gcpu_vm_sel), no calls (fmaf is one instruction where the target has
 * FMA, and is not used where it has not), no float-to-int conversions (the
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

/* a * b + c: one fused operation where the target has FMA (fewer instructions on the
 * critical path, and a rounding less), else two. The choice is made at compile time, so a
 * build gives the same bits whatever the thread count. */
#ifdef __FMA__
#define GCPU_MA(a, b, c) fmaf(a, b, c)
#else
#define GCPU_MA(a, b, c) ((a) * (b) + (c))
#endif

static inline float gcpu_vm_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t gcpu_vm_u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* c ? a : b, through bit masks: written as a float ?: the compiler may sink the
 * computation of a or b into a branch (an FP operation there must not be speculated under
 * -ftrapping-math), and then the loop does not vectorize. */
static inline float gcpu_vm_sel(int c, float a, float b)
{
    uint32_t m = 0u - (uint32_t)(c != 0);
    return gcpu_vm_f((gcpu_vm_u(a) & m) | (gcpu_vm_u(b) & ~m));
}

/* Keys that order floats as their values do (-0 just below +0) when compared as signed
 * integers: a max reduction over keys is an integer max, which vectorizes, where a float
 * one does not without -ffinite-math-only. A NaN with its sign bit clear sorts above +inf,
 * one with it set below -inf. */
static inline int32_t gcpu_order_key(float f)
{
    uint32_t u = gcpu_vm_u(f), neg = 0u - (u >> 31);
    return (int32_t)(u ^ (neg >> 1));
}
static inline float gcpu_order_unkey(int32_t k)
{
    uint32_t u = (uint32_t)k, neg = 0u - (u >> 31);
    return gcpu_vm_f(u ^ (neg >> 1));
}

/* The largest of x[0..n) (-inf when n == 0). With a NaN in x the result is either that NaN
 * or the largest number: callers use it where a NaN spoils the whole row either way. */
static inline float gcpu_max_row(const float *x, int64_t n)
{
    int32_t m = gcpu_order_key(-INFINITY);
    for (int64_t i = 0; i < n; i++) {
        int32_t k = gcpu_order_key(x[i]);
        m = k > m ? k : m;
    }
    return gcpu_order_unkey(m);
}

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
    float c = gcpu_vm_sel(x > -104.0f, x, -104.0f);
    c = gcpu_vm_sel(c < 89.0f, c, 89.0f);
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float k = GCPU_MA(c, 1.44269504088896341f, magic);
    int32_t n = (int32_t)(gcpu_vm_u(k) - gcpu_vm_u(magic));
    float fn = k - magic;
    float r = GCPU_MA(fn, -0.693359375f, c);   /* ln2, high part: few bits, so fn * it is exact */
    r = GCPU_MA(fn, 2.12194440e-4f, r);        /* ln2, low part */
    float p = 1.9875691500e-4f;
    p = GCPU_MA(p, r, 1.3981999507e-3f);
    p = GCPU_MA(p, r, 8.3334519073e-3f);
    p = GCPU_MA(p, r, 4.1665795894e-2f);
    p = GCPU_MA(p, r, 1.6666665459e-1f);
    p = GCPU_MA(p, r, 5.0000001201e-1f);
    p = GCPU_MA(p, r * r, r) + 1.0f;
    float a, b;
    gcpu_vm_pow2(n, &a, &b);
    float y = p * a * b;
    return gcpu_vm_sel(x == x, y, x);
}

/* log(x). x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by Cephes' polynomial in
 * m - 1, plus e ln2 in two parts. Subnormal x is scaled up by 2^25 first. */
static inline float gcpu_logf(float x)
{
    int sub = x < 1.17549435e-38f;                   /* subnormal, zero, negative */
    float s = gcpu_vm_sel(sub, x * 33554432.0f, x);  /* 2^25 */
    uint32_t u = gcpu_vm_u(s);
    int32_t e = (int32_t)((u >> 23) & 0xffu) - (sub ? 151 : 126); /* s = m' 2^e, m' in [0.5, 1) */
    float m = gcpu_vm_f((u & 0x007fffffu) | 0x3f000000u);
    int lo = m < 0.707106781186547524f;
    e = lo ? e - 1 : e;
    m = gcpu_vm_sel(lo, m + m - 1.0f, m - 1.0f);     /* m - 1 in [sqrt(1/2) - 1, sqrt(2) - 1) */
    float fe = (float)e;
    float z = m * m;
    float p = 7.0376836292e-2f;
    p = GCPU_MA(p, m, -1.1514610310e-1f);
    p = GCPU_MA(p, m, 1.1676998740e-1f);
    p = GCPU_MA(p, m, -1.2420140846e-1f);
    p = GCPU_MA(p, m, 1.4249322787e-1f);
    p = GCPU_MA(p, m, -1.6668057665e-1f);
    p = GCPU_MA(p, m, 2.0000714765e-1f);
    p = GCPU_MA(p, m, -2.4999993993e-1f);
    p = GCPU_MA(p, m, 3.3333331174e-1f);
    float y = p * m * z;
    y = y + fe * -2.12194440e-4f;
    y = y - 0.5f * z;
    y = m + y;
    y = y + fe * 0.693359375f;
    /* specials: log(+inf) = inf, log(0) = -inf, log(<0) = NaN, NaN stays */
    y = gcpu_vm_sel(x <= 3.4028235e38f, y, x + x);   /* false for inf and NaN */
    y = gcpu_vm_sel(x == 0.0f, -INFINITY, y);
    return gcpu_vm_sel(x < 0.0f, NAN, y);
}

/* 1 / (1 + e^-x), from e^-|x| so that nothing overflows: 1/(1+e) for x >= 0, e/(1+e) below
 * (the reference's form). */
static inline float gcpu_sigmoidf(float x)
{
    float ax = gcpu_vm_f(gcpu_vm_u(x) & 0x7fffffffu);
    float e = gcpu_expf(-ax);
    float d = 1.0f / (1.0f + e);
    return gcpu_vm_sel(x >= 0.0f, d, gcpu_vm_sel(x == x, e * d, x));
}

/* tanh(x): an odd polynomial (Cephes) below |x| = 0.625, where 1 - 2/(e^2x + 1) would
 * cancel, and that formula above it (e^2x = inf gives exactly 1). */
static inline float gcpu_tanhf(float x)
{
    float ax = gcpu_vm_f(gcpu_vm_u(x) & 0x7fffffffu);
    float z = x * x;
    float p = -5.70498872745e-3f;
    p = GCPU_MA(p, z, 2.06390887954e-2f);
    p = GCPU_MA(p, z, -5.37397155531e-2f);
    p = GCPU_MA(p, z, 1.33314422036e-1f);
    p = GCPU_MA(p, z, -3.33332819422e-1f);
    float small = x + x * z * p;
    float big = 1.0f - 2.0f / (gcpu_expf(ax + ax) + 1.0f);
    big = gcpu_vm_sel(x < 0.0f, -big, big);
    return gcpu_vm_sel(ax < 0.625f, small, gcpu_vm_sel(x == x, big, x));
}

/* erf(x): the Maclaurin series (10 terms, error < 1e-8) below |x| = 0.84375; above it
 * 1 - t P(t) e^-x^2 with t = 1/(1 + p|x|), Abramowitz and Stegun 7.1.26 (absolute error
 * below 1.5e-7), the form PyTorch's vectorized erf uses. */
static inline float gcpu_erff(float x)
{
    float ax = gcpu_vm_f(gcpu_vm_u(x) & 0x7fffffffu);
    float z = x * x;
    /* 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1)), n = 0 .. 10 */
    float q = 1.4807192815879218e-8f;
    q = GCPU_MA(q, z, -1.6365844691234924e-7f);
    q = GCPU_MA(q, z, 1.6462114365889246e-6f);
    q = GCPU_MA(q, z, -1.4925650358406250e-5f);
    q = GCPU_MA(q, z, 1.2055332981789664e-4f);
    q = GCPU_MA(q, z, -8.5483270234508520e-4f);
    q = GCPU_MA(q, z, 5.2239776254421880e-3f);
    q = GCPU_MA(q, z, -2.6866170645131252e-2f);
    q = GCPU_MA(q, z, 1.1283791670955126e-1f);
    q = GCPU_MA(q, z, -3.7612638903183754e-1f);
    q = GCPU_MA(q, z, 1.1283791670955126f);
    float small = x * q;
    float t = 1.0f / (1.0f + 0.3275911f * ax);
    float p = 1.061405429f;
    p = GCPU_MA(p, t, -1.453152027f);
    p = GCPU_MA(p, t, 1.421413741f);
    p = GCPU_MA(p, t, -0.284496736f);
    p = GCPU_MA(p, t, 0.254829592f);
    float big = 1.0f - p * t * gcpu_expf(-z);
    big = gcpu_vm_sel(x < 0.0f, -big, big);
    return gcpu_vm_sel(ax < 0.84375f, small, gcpu_vm_sel(x == x, big, x));
}

#endif
