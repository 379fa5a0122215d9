/* alloc.h — the library's heap allocations, in one place so that tests can fail them.
 *
 * Everything in src/ allocates through these. gd_alloc_fail_at(n) makes the n-th
 * allocation from then on fail (0 turns it off), which is how the allocation-failure test
 * walks every allocation of building, compiling, running and freeing a training step and
 * checks that each failure comes back as GD_ERR_NOMEM with nothing leaked or crashed.
 * Counting is process-wide and atomic; it exists for tests and costs one atomic load.
 */
#ifndef GD_ALLOC_H
#define GD_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *gd_malloc(size_t bytes);
void *gd_calloc(size_t n, size_t size);
void *gd_realloc(void *p, size_t bytes);
char *gd_strdup(const char *s);
void gd_free(void *p);
/* Grows the array *p of *cap elements of elem bytes to hold at least need (doubling, from
 * first if it was empty); 0 on success, -1 on overflow or no memory (*p left as it was). */
int gd_grow_array(void **p, size_t *cap, size_t need, size_t elem, size_t first);
/* 64-byte aligned host memory for tensors (freed with gd_free). */
void *gd_aligned_alloc(size_t bytes);

/* Test control: fail the n-th allocation counted from this call (n >= 1), or none (0). */
void gd_alloc_fail_at(int64_t n);
/* Allocations made (or failed) since the last gd_alloc_fail_at or gd_alloc_count_reset. */
int64_t gd_alloc_count(void);
void gd_alloc_count_reset(void);

#endif
