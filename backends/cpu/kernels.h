/* kernels.h — what the kernel families of the fast CPU backend share.
 *
 * The backend is a plugin like any other: it sees nodes only through gradus_plugin.h and
 * registers one kernel per (op, dtype) through the host. Each family file (k_*.c) exports
 * gcpu_register_<family>, called by plugin.c. Kernels run on host memory (the backend has
 * no device module), are threaded over the pool with static chunking, and keep every
 * result independent of the thread count: work is split by output element, and sums
 * across chunks use partitions fixed by the shape, combined in a fixed order.
 */
#ifndef GCPU_KERNELS_H
#define GCPU_KERNELS_H

#include "gradus_plugin.h"
#include "threadpool.h"

#include <stdint.h>

/* One registration; supports may be NULL (every node of op and dtype), attrs is the
 * NULL-terminated list of attributes supports() looks at, or NULL. */
gdp_status gcpu_reg(const gdp_host *host, const char *op, int32_t dtype, gdp_launch_fn launch,
                    gdp_supports_fn supports, const char *const *attrs, gdp_err *err);
/* The same with GDP_KERNEL_* flags (a kernel that reads strided inputs). */
gdp_status gcpu_reg_flags(const gdp_host *host, const char *op, int32_t dtype, uint32_t flags, gdp_launch_fn launch,
                          gdp_supports_fn supports, const char *const *attrs, gdp_err *err);

gdp_status gcpu_register_matmul(const gdp_host *host, gdp_err *err);
gdp_status gcpu_register_conv(const gdp_host *host, gdp_err *err);
gdp_status gcpu_register_pool(const gdp_host *host, gdp_err *err);
gdp_status gcpu_register_elementwise(const gdp_host *host, gdp_err *err);
gdp_status gcpu_register_reduce(const gdp_host *host, gdp_err *err);
gdp_status gcpu_register_softmax(const gdp_host *host, gdp_err *err);
gdp_status gcpu_register_optim(const gdp_host *host, gdp_err *err);
gdp_status gcpu_register_layout(const gdp_host *host, gdp_err *err);
gdp_status gcpu_register_norm(const gdp_host *host, gdp_err *err);
gdp_status gcpu_register_attention(const gdp_host *host, gdp_err *err);
gdp_status gcpu_register_index(const gdp_host *host, gdp_err *err);
gdp_status gcpu_register_random(const gdp_host *host, gdp_err *err);
gdp_status gcpu_register_unary(const gdp_host *host, gdp_err *err);
gdp_status gcpu_register_activation(const gdp_host *host, gdp_err *err);

/* f16 and bf16 through f32 (k_half.c), as the reference does them: the node's f16/bf16
 * operands are widened into f32 scratch, the f32 kernel runs on an f32 copy of the node,
 * and its f16/bf16 outputs are rounded back to nearest even (an output updated in place
 * lives in its input's f32 copy meanwhile). Other operands (indices, f32) pass as they
 * are. supports: the f32 kernel's answer for the f32 copy of the node (1 when NULL). */
gdp_status gcpu_half_launch(gdp_launch_fn f32, void *be, const gdp_node *n, void *stream, gdp_err *err);
int gcpu_half_supports(gdp_supports_fn f32, void *be, const gdp_node *n);

/* Defines launch##_half and launch##_half_ok, the f16/bf16 kernel made of an f32 one. */
#define GCPU_HALF_OF(launch, supports)                                                          \
    static gdp_status launch##_half(void *be_, const gdp_node *n_, void *stream_, gdp_err *err_) \
    {                                                                                           \
        return gcpu_half_launch(launch, be_, n_, stream_, err_);                                \
    }                                                                                           \
    static int launch##_half_ok(void *be_, const gdp_node *n_)                                  \
    {                                                                                           \
        return gcpu_half_supports(supports, be_, n_);                                           \
    }

/* Registers an f32 kernel and, for f16 and bf16, the half kernel made of it. */
gdp_status gcpu_reg_floats(const gdp_host *host, const char *op, gdp_launch_fn launch, gdp_supports_fn supports,
                           gdp_launch_fn half, gdp_supports_fn half_supports, const char *const *attrs,
                           gdp_err *err);
/* The same for a kernel that has a GCPU_HALF_OF above it. */
#define GCPU_REG_FLOATS(host, op, launch, supports, attrs, err) \
    gcpu_reg_floats(host, op, launch, supports, launch##_half, launch##_half_ok, attrs, err)

/* 1 when every input and output listed (by index; -1 ends) is f32. */
static inline int gcpu_all_f32(const gdp_node *n)
{
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i]->dtype != GDP_F32) return 0;
    for (int i = 0; i < n->n_out; i++)
        if (n->out[i]->dtype != GDP_F32) return 0;
    return 1;
}

/* Items per chunk below which a parallel_for would lose to its own cost, for cheap
 * per-element work (a few ns an element against a few us to wake a worker). */
#define GCPU_GRAIN_ELEMS 16384

/* f16 and bf16 <-> f32, bit for bit the conversions of src/core/dtype.c (round to nearest,
 * ties to even; NaN stays NaN), which the reference and the sweep use: a kernel that
 * widens half rows to f32 and rounds its results back with these agrees with the oracle. */
static inline float gcpu_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t gcpu_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float gcpu_bf16_to_f32(uint16_t h) { return gcpu_bits_f32((uint32_t)h << 16); }
static inline uint16_t gcpu_f32_to_bf16(float f)
{
    uint32_t u = gcpu_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float gcpu_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (e == 0x1f) return gcpu_bits_f32(sign | 0x7f800000u | (man << 13));
    if (e == 0) {
        if (man == 0) return gcpu_bits_f32(sign);
        float v = (float)man * (1.0f / 16777216.0f); /* subnormal: man * 2^-24 */
        return sign ? -v : v;
    }
    return gcpu_bits_f32(sign | ((e + 112u) << 23) | (man << 13));
}
static inline uint16_t gcpu_f32_to_f16(float f)
{
    uint32_t u = gcpu_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
    if (a < 0x38800000u) {                                   /* subnormal or zero */
        if (a < 0x33000000u) return sign;
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)e;
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}
/* n elements of a float tensor of dtype dt (f32, f16 or bf16) from element `at` into f32,
 * and back (f32 rows are copied). */
static inline void gcpu_load_f32(int32_t dt, const void *src, int64_t at, float *dst, int64_t n)
{
    if (dt == GDP_F32) {
        memcpy(dst, (const float *)src + at, sizeof(float) * (size_t)n);
    } else if (dt == GDP_F16) {
        const uint16_t *s = (const uint16_t *)src + at;
        for (int64_t i = 0; i < n; i++) dst[i] = gcpu_f16_to_f32(s[i]);
    } else {
        const uint16_t *s = (const uint16_t *)src + at;
        for (int64_t i = 0; i < n; i++) dst[i] = gcpu_bf16_to_f32(s[i]);
    }
}
static inline void gcpu_store_f32(int32_t dt, void *dst, int64_t at, const float *src, int64_t n)
{
    if (dt == GDP_F32) {
        memcpy((float *)dst + at, src, sizeof(float) * (size_t)n);
    } else if (dt == GDP_F16) {
        uint16_t *d = (uint16_t *)dst + at;
        for (int64_t i = 0; i < n; i++) d[i] = gcpu_f32_to_f16(src[i]);
    } else {
        uint16_t *d = (uint16_t *)dst + at;
        for (int64_t i = 0; i < n; i++) d[i] = gcpu_f32_to_bf16(src[i]);
    }
}

#endif
