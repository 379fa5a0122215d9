/* dtype.c — dtype names and sizes, and the reference's generic element access. The
 * f16/bf16 conversions every backend must agree on live in gradus_semantics.h. */
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

int gd_dtype_parse(const char *name, gd_dtype *out)
{
    int i = name != NULL ? gd_dtype_from_name(name, strlen(name)) : -1;
    if (i >= 0 && out != NULL) *out = (gd_dtype)i;
    return i >= 0;
}

double gd_ref_load(const gdp_tensor *t, int64_t i)
{
    return gd_ref_load_at(t, gdp_is_contiguous(t) ? i : gdp_offset(t, i));
}

void gd_ref_store(const gdp_tensor *t, int64_t i, double v)
{
    gd_ref_store_at(t, gdp_is_contiguous(t) ? i : gdp_offset(t, i), v);
}

double gd_ref_load_at(const gdp_tensor *t, int64_t i)
{
    const void *p = t->data;
    switch (t->dtype) {
    case GDP_F32: return ((const float *)p)[i];
    case GDP_F64: return ((const double *)p)[i];
    case GDP_F16: return gdp_f16_to_f32(((const uint16_t *)p)[i]);
    case GDP_BF16: return gdp_bf16_to_f32(((const uint16_t *)p)[i]);
    case GDP_I32: return ((const int32_t *)p)[i];
    case GDP_I64: return (double)((const int64_t *)p)[i];
    case GDP_U8: return ((const uint8_t *)p)[i];
    case GDP_I8: return ((const int8_t *)p)[i];
    case GDP_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
    }
}

void gd_ref_store_at(const gdp_tensor *t, int64_t i, double v)
{
    void *p = t->data;
    switch (t->dtype) {
    case GDP_F32: ((float *)p)[i] = (float)v; break;
    case GDP_F64: ((double *)p)[i] = v; break;
    case GDP_F16: ((uint16_t *)p)[i] = gdp_f32_to_f16((float)v); break;
    case GDP_BF16: ((uint16_t *)p)[i] = gdp_f32_to_bf16((float)v); break;
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
