/* gradus_semantics.h — op semantics that the core and every backend must agree on, bit
 * for bit: the dtype numbering and predicates, the f16/bf16 conversions, the numbering of
 * activations and pooling modes in op attributes, the counter-based generator, and the
 * sampler's draw and exp.
 *
 * Header-only, plain C (usable from C++ and from CUDA device code), versioned with the
 * plugin ABI: a change of meaning here is a change of GDP_ABI_MAJOR. A backend includes
 * this (through gradus_plugin.h) instead of keeping its own copies, so that "round to
 * nearest even" or "activation 2" cannot drift between the reference and a kernel.
 */
#ifndef GRADUS_SEMANTICS_H
#define GRADUS_SEMANTICS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__CUDACC__)
#define GDP_HD __host__ __device__
#else
#define GDP_HD
#endif

/* ---- data types (values are part of the ABI) ---------------------------------------- */

typedef enum gdp_dtype {
    GDP_F32 = 0,
    GDP_F16 = 1,
    GDP_BF16 = 2,
    GDP_I32 = 3,
    GDP_I64 = 4,
    GDP_U8 = 5,
    GDP_I8 = 6,
    GDP_BOOL = 7,
    GDP_F64 = 8,
    GDP_DTYPE_COUNT = 9
} gdp_dtype;

static inline GDP_HD size_t gdp_dtype_size(int32_t dt)
{
    switch (dt) {
    case GDP_F32: case GDP_I32: return 4;
    case GDP_F16: case GDP_BF16: return 2;
    case GDP_I64: case GDP_F64: return 8;
    case GDP_U8: case GDP_I8: case GDP_BOOL: return 1;
    default: return 0;
    }
}
static inline GDP_HD int gdp_is_float(int32_t dt)
{
    return dt == GDP_F32 || dt == GDP_F16 || dt == GDP_BF16 || dt == GDP_F64;
}
static inline GDP_HD int gdp_is_half(int32_t dt) { return dt == GDP_F16 || dt == GDP_BF16; }
/* The integer types an index operand may have (ids, targets, positions, lengths). */
static inline GDP_HD int gdp_is_index(int32_t dt) { return dt == GDP_I32 || dt == GDP_I64; }
static inline GDP_HD int gdp_is_int(int32_t dt)
{
    return dt == GDP_I32 || dt == GDP_I64 || dt == GDP_U8 || dt == GDP_I8;
}

/* ---- f16 and bf16 <-> f32: round to nearest, ties to even; NaN stays NaN ------------ */

static inline GDP_HD float gdp_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline GDP_HD uint32_t gdp_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline GDP_HD float gdp_bf16_to_f32(uint16_t h) { return gdp_bits_f32((uint32_t)h << 16); }

static inline GDP_HD uint16_t gdp_f32_to_bf16(float f)
{
    uint32_t u = gdp_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline GDP_HD float gdp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (e == 0x1f) return gdp_bits_f32(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
    if (e == 0) {
        if (man == 0) return gdp_bits_f32(sign);
        float v = (float)man * (1.0f / 16777216.0f); /* subnormal: man * 2^-24 */
        return sign ? -v : v;
    }
    return gdp_bits_f32(sign | ((e + 112u) << 23) | (man << 13));
}

static inline GDP_HD uint16_t gdp_f32_to_f16(float f)
{
    uint32_t u = gdp_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf (>= 65520) */
    if (a < 0x38800000u) {                                   /* subnormal or zero */
        if (a < 0x33000000u) return sign;                     /* < 2^-25 rounds to 0 */
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)e; /* 14..24: to units of 2^-24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u); /* round the mantissa to 10 bits */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

/* ---- int8 quantization: int8 weights and linear_w8a8 --------------------------------- */

/* A row of values is quantized symmetrically: scale = (its largest magnitude) / 127 in f32
 * (0 for a row of zeros; NaNs are ignored), and each value becomes x / scale in f32,
 * limited to [-127, 127] and rounded to nearest, ties to even (0 when the scale is 0 or x
 * is NaN). The rounding adds and subtracts 1.5 * 2^23, which is exact IEEE single
 * arithmetic on every backend, with no dependence on a math library. */
static inline GDP_HD float gdp_q8_amax(float amax, float x)
{
    float a = x < 0 ? -x : x;
    return a > amax ? a : amax;
}
static inline GDP_HD float gdp_q8_scale(float amax) { return amax / 127.0f; }
static inline GDP_HD int8_t gdp_q8(float x, float scale)
{
    if (!(scale > 0) || x != x) return 0;
    float v = x / scale;
    v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
    v = (v + 12582912.0f) - 12582912.0f;
    return (int8_t)v;
}
/* linear_w8a8's output before its bias, from the exact integer dot product of a row of
 * quantized x (scale sx) with a row of int8 weights (scale sw): f32 products in this order. */
static inline GDP_HD float gdp_q8_dequant(int64_t dot, float sx, float sw) { return ((float)dot * sx) * sw; }

/* ---- numbering used in op attributes ------------------------------------------------ */

/* The `act` attribute of linear_act (and of every fused op with an activation epilogue). */
typedef enum gdp_activation {
    GDP_ACT_NONE = 0,
    GDP_ACT_RELU = 1,
    GDP_ACT_GELU_TANH = 2, /* 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))) */
    GDP_ACT_GELU = 3,      /* 0.5 z (1 + erf(z / sqrt 2)) */
    GDP_ACT_SILU = 4,      /* z sigmoid(z) */
    GDP_ACT_COUNT = 5
} gdp_activation;

/* Pooling modes, for backends that share one kernel between the pooling ops. */
typedef enum gdp_pool_mode { GDP_POOL_MAX = 0, GDP_POOL_AVG = 1 } gdp_pool_mode;

/* ---- the counter-based generator --------------------------------------------------- */

/* Philox4x32-10 (Salmon et al., SC'11). Random ops and dropout draw element i's numbers
 * from counter (i, offset) under key (seed), so every backend produces the same values
 * whatever order it visits elements in. Backends must use exactly this. */
typedef struct gdp_philox_out { uint32_t v[4]; } gdp_philox_out;

static inline GDP_HD gdp_philox_out gdp_philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t seed)
{
    uint32_t c0 = (uint32_t)counter_lo, c1 = (uint32_t)(counter_lo >> 32);
    uint32_t c2 = (uint32_t)counter_hi, c3 = (uint32_t)(counter_hi >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    gdp_philox_out o;
    o.v[0] = c0;
    o.v[1] = c1;
    o.v[2] = c2;
    o.v[3] = c3;
    return o;
}

/* A float in (0, 1) from 32 random bits, never 0 or 1 (safe for log). 23 bits, so that
 * the largest value, (2^23 - 0.5) / 2^23, is still exactly representable below 1. */
static inline GDP_HD float gdp_u01(uint32_t bits) { return ((float)(bits >> 9) + 0.5f) * (1.0f / 8388608.0f); }

/* ---- sampling (the sample op and gd_lm_sample) --------------------------------------- */

/* Draw `counter` of a sampling run seeded `seed`: a double in [0, 1) from 53 random bits
 * (every step exact), the same on every machine, so a seed gives the same tokens everywhere. */
static inline GDP_HD double gdp_sample_u53(uint64_t seed, uint64_t counter)
{
    gdp_philox_out r = gdp_philox4x32(counter, 0x5a3d1e, seed);
    return ((double)(r.v[0] >> 5) * 67108864.0 + (double)(r.v[1] >> 6)) / 9007199254740992.0;
}

/* A sampler's sums (weights, and their fractions of the total) in runs: a list of values is
 * cut into consecutive runs of GDP_SAMPLE_RUN, each run summed from its first value, one
 * rounded addition at a time; the running sum at value i is R + s, R the sum of the runs
 * before i's (added one after the other, from 0) and s i's run's sum through i. The total
 * is the running sum at the last value. Every step is a rounded double addition in a fixed
 * order, so host and device agree to the bit; the runs let a device sum them in parallel
 * and add only one value a run in turn (a sum one value at a time over a vocabulary of
 * 150,000 is that many dependent additions). Running sums only grow with i. */
#define GDP_SAMPLE_RUN 256
typedef struct gdp_run_sum {
    double before, in; /* the runs before, this run so far */
    int64_t k;         /* values of this run so far */
} gdp_run_sum;
/* Adds v as the next value; returns the running sum through it. */
static inline double gdp_run_sum_add(gdp_run_sum *s, double v)
{
    s->in = s->in + v;
    const double run = s->before + s->in;
    if (++s->k == GDP_SAMPLE_RUN) s->before = run, s->in = 0, s->k = 0;
    return run;
}

/* One IEEE double operation each. Device code names its rounding, since nvcc would fuse a
 * multiply and an add into one fma. Host code gives each operation a statement of its own,
 * which ISO C (-std=c11) does not fuse across; GCC's GNU modes (-std=gnu11, the default) do
 * on machines with fma, so a backend including this header must build with -std=c11 or
 * -ffp-contract=off (gradus does) to get the same bits as the device. */
#if defined(__CUDA_ARCH__)
#define GDP_DMUL_(a, b) __dmul_rn((a), (b))
#define GDP_DADD_(a, b) __dadd_rn((a), (b))
#else
#define GDP_DMUL_(a, b) ((a) * (b))
#define GDP_DADD_(a, b) ((a) + (b))
#endif

/* 2^k as a double, for -1022 <= k <= 1023 */
static inline GDP_HD double gdp_pow2_(int k)
{
    uint64_t u = (uint64_t)(k + 1023) << 52;
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* gdp_exp's steps, shared by its two forms below: r = x - kd ln2 (ln2 in two parts, the first
 * with 21 trailing zero bits so that kd times it is exact), then exp(r) by its Taylor series
 * up to r^13/13! (the rest below 1e-17 relative). */
static inline GDP_HD double gdp_exp_reduce_(double x, double kd)
{
    double t = GDP_DMUL_(kd, -0.6931471803691238); /* exact */
    double r = GDP_DADD_(x, t);
    t = GDP_DMUL_(kd, -1.9082149292705877e-10);
    return GDP_DADD_(r, t);
}
static inline GDP_HD double gdp_exp_poly_(double r)
{
    /* Horner, highest power first: q = q * r + 1/n! */
    double q = 1.6059043836821613e-10;
    q = GDP_DMUL_(q, r);
    q = GDP_DADD_(q, 2.08767569878681e-09);
    q = GDP_DMUL_(q, r);
    q = GDP_DADD_(q, 2.505210838544172e-08);
    q = GDP_DMUL_(q, r);
    q = GDP_DADD_(q, 2.755731922398589e-07);
    q = GDP_DMUL_(q, r);
    q = GDP_DADD_(q, 2.7557319223985893e-06);
    q = GDP_DMUL_(q, r);
    q = GDP_DADD_(q, 2.48015873015873e-05);
    q = GDP_DMUL_(q, r);
    q = GDP_DADD_(q, 0.0001984126984126984);
    q = GDP_DMUL_(q, r);
    q = GDP_DADD_(q, 0.001388888888888889);
    q = GDP_DMUL_(q, r);
    q = GDP_DADD_(q, 0.008333333333333333);
    q = GDP_DMUL_(q, r);
    q = GDP_DADD_(q, 0.041666666666666664);
    q = GDP_DMUL_(q, r);
    q = GDP_DADD_(q, 0.16666666666666666);
    q = GDP_DMUL_(q, r);
    q = GDP_DADD_(q, 0.5);
    q = GDP_DMUL_(q, r);
    q = GDP_DADD_(q, 1.0);
    q = GDP_DMUL_(q, r);
    return GDP_DADD_(q, 1.0);
}

/* exp(x) in double, bit for bit the same on every machine (within about 2 ulp of the true
 * value). A sampler sums such weights in double and compares the sums with a draw, and the
 * C library's exp and a GPU's differ in the last bit often enough that a token could
 * change. x = k ln2 + r with |r| <= ln2/2, k = floor(x log2(e) + 1/2), exp(r) as above, then
 * times 2^k. */
static inline GDP_HD double gdp_exp(double x)
{
    if (x != x) return x;
    if (x > 709.782712893384) return gdp_pow2_(1023) * 2.0; /* overflows to +inf */
    if (x < -745.2) return 0.0;
    double t = GDP_DMUL_(x, 1.4426950408889634);
    t = GDP_DADD_(t, 0.5);
    const double kd = floor(t);
    const int k = (int)kd;
    double q = gdp_exp_poly_(gdp_exp_reduce_(x, kd));
    /* times 2^k in at most two exact-or-once-rounded steps: k runs from -1075 to 1024 */
    if (k > 1023) {
        q = GDP_DMUL_(q, gdp_pow2_(1023));
        return GDP_DMUL_(q, gdp_pow2_(k - 1023));
    }
    if (k < -1022) {
        q = GDP_DMUL_(q, gdp_pow2_(k + 54));
        return GDP_DMUL_(q, gdp_pow2_(-54));
    }
    return GDP_DMUL_(q, gdp_pow2_(k));
}

/* gdp_exp(x) for x in [GDP_EXP_RANGE_LO, 0], the range of a sampler's weights exp(z - max z)
 * but for the smallest, the same operations in the same order without a branch: floor(t)
 * from t rounded to an integer by adding and taking away 1.5 * 2^52, less one where that
 * rounded up; 2^k from k + 1023 in the low bits of kd + 2^52 + 1023, moved into the exponent.
 * A host loop of these can run several at once in vector registers (when built with
 * -fno-trapping-math). Outside the range the result means nothing: use gdp_exp. */
#define GDP_EXP_RANGE_LO (-708.0)
static inline GDP_HD double gdp_exp_in_range(double x)
{
    double t = GDP_DMUL_(x, 1.4426950408889634);
    t = GDP_DADD_(t, 0.5);
    const double rnd = GDP_DADD_(GDP_DADD_(t, 6755399441055744.0), -6755399441055744.0);
    const double kd = GDP_DADD_(rnd, rnd > t ? -1.0 : 0.0);
    const double q = gdp_exp_poly_(gdp_exp_reduce_(x, kd));
    const double e = GDP_DADD_(kd, 4503599627371519.0); /* 2^52 + 1023 + k */
    uint64_t b;
    memcpy(&b, &e, sizeof b);
    b <<= 52;
    double p2;
    memcpy(&p2, &b, sizeof p2);
    return GDP_DMUL_(q, p2);
}

#ifdef __cplusplus
}
#endif
#endif /* GRADUS_SEMANTICS_H */
