/* checked.h — size arithmetic that cannot wrap.
 *
 * Every product or sum that becomes an element count, a byte count or an offset goes
 * through these, in the core, the ops' shape rules and every file loader: a wrapped size
 * turns a huge request into a tiny buffer, and the next write runs off its end. Each
 * returns 0 and stores the result, or returns -1 (and leaves *out alone) on overflow or
 * a negative operand, so that the caller reports an error naming what was too large.
 */
#ifndef GD_CHECKED_H
#define GD_CHECKED_H

#include <stddef.h>
#include <stdint.h>

/* Element counts and dims: non-negative int64. */
static inline int gd_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return -1;
    *out = r;
    return 0;
}
static inline int gd_add_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) return -1;
    *out = r;
    return 0;
}

/* Byte counts. */
static inline int gd_mul_size(size_t a, size_t b, size_t *out)
{
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) return -1;
    *out = r;
    return 0;
}
static inline int gd_add_size(size_t a, size_t b, size_t *out)
{
    size_t r;
    if (__builtin_add_overflow(a, b, &r)) return -1;
    *out = r;
    return 0;
}

/* The product of n non-negative dims; -1 on overflow. Byte counts of tensors must also
 * fit: gd_numel_bytes multiplies by the element size as well. */
static inline int gd_numel_checked(int n, const int64_t *dims, int64_t *out)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        if (gd_mul_i64(p, dims[i], &p) != 0) return -1;
    *out = p;
    return 0;
}
static inline int gd_numel_bytes(int n, const int64_t *dims, size_t elem, size_t *out)
{
    int64_t count;
    if (gd_numel_checked(n, dims, &count) != 0) return -1;
    /* PTRDIFF_MAX bounds what one object can be in C */
    if ((uint64_t)count > (uint64_t)PTRDIFF_MAX) return -1;
    size_t bytes;
    if (gd_mul_size((size_t)count, elem, &bytes) != 0 || bytes > (size_t)PTRDIFF_MAX) return -1;
    *out = bytes;
    return 0;
}

#endif
