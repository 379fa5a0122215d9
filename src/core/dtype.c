/* dtype.c — names, sizes and the f16/bf16 conversions every backend must agree on. */
#include "core.h"

#include <string.h>

static const char *const dtype_names[GDP_DTYPE_COUNT] = {"f32", "f16", "bf16", "i32", "i64", "u8", "i8", "bool", "f64"};

const char *gd_dtype_name(gd_dtype dt)
{
    return (int)dt >= 0 && (int)dt < GDP_DTYPE_COUNT ? dtype_names[dt] : "?";
}
size_t gd_dtype_size(gd_dtype dt) { return gdp_dtype_size(dt); }

int gd_dtype_from_name(const char *s, size_t len)
{
    for (int i = 0; i < GDP_DTYPE_COUNT; i++)
        if (strlen(dtype_names[i]) == len && strncmp(dtype_names[i], s, len) == 0) return i;
    return -1;
}

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float gd_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t gd_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

float gd_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf / nan */
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        /* subnormal: man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t gd_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);   /* nan */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* rounds to inf (>= 65520) */
    if (a < 0x38800000u) {
        /* result is subnormal or zero: value / 2^-24 rounded to nearest even */
        if (a < 0x33000000u) return sign;                      /* < 2^-25: rounds to 0 */
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)e;                              /* 14..24 -> 2^-24 units */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);               /* round mantissa to 10 bits */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

double gd_ref_load(const gdp_tensor *t, int64_t i)
{
    const void *p = t->data;
    switch (t->dtype) {
    case GDP_F32: return ((const float *)p)[i];
    case GDP_F64: return ((const double *)p)[i];
    case GDP_F16: return gd_f16_to_f32(((const uint16_t *)p)[i]);
    case GDP_BF16: return gd_bf16_to_f32(((const uint16_t *)p)[i]);
    case GDP_I32: return ((const int32_t *)p)[i];
    case GDP_I64: return (double)((const int64_t *)p)[i];
    case GDP_U8: return ((const uint8_t *)p)[i];
    case GDP_I8: return ((const int8_t *)p)[i];
    case GDP_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
    }
}

void gd_ref_store(const gdp_tensor *t, int64_t i, double v)
{
    void *p = t->data;
    switch (t->dtype) {
    case GDP_F32: ((float *)p)[i] = (float)v; break;
    case GDP_F64: ((double *)p)[i] = v; break;
    case GDP_F16: ((uint16_t *)p)[i] = gd_f32_to_f16((float)v); break;
    case GDP_BF16: ((uint16_t *)p)[i] = gd_f32_to_bf16((float)v); break;
    case GDP_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case GDP_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case GDP_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case GDP_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case GDP_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

void gd_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i];
    }
}
