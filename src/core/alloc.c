/* alloc.c — see alloc.h. */
#include "alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_llong counted;   /* allocations since the last reset */
static atomic_llong fail_at;   /* fail when the count reaches this; 0: never */

static int should_fail(void)
{
    long long n = atomic_fetch_add(&counted, 1) + 1;
    long long f = atomic_load(&fail_at);
    return f > 0 && n == f;
}

void gd_alloc_fail_at(int64_t n)
{
    atomic_store(&counted, 0);
    atomic_store(&fail_at, n > 0 ? n : 0);
}
int64_t gd_alloc_count(void) { return atomic_load(&counted); }
void gd_alloc_count_reset(void) { atomic_store(&counted, 0); }

void *gd_malloc(size_t bytes) { return should_fail() ? NULL : malloc(bytes ? bytes : 1); }
void *gd_calloc(size_t n, size_t size) { return should_fail() ? NULL : calloc(n ? n : 1, size ? size : 1); }
void *gd_realloc(void *p, size_t bytes) { return should_fail() ? NULL : realloc(p, bytes ? bytes : 1); }
void gd_free(void *p) { free(p); }

int gd_grow_array(void **p, size_t *cap, size_t need, size_t elem, size_t first)
{
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : first ? first : 1;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) return -1;
        ncap *= 2;
    }
    if (elem != 0 && ncap > SIZE_MAX / elem) return -1;
    void *q = gd_realloc(*p, ncap * elem);
    if (q == NULL) return -1;
    *p = q;
    *cap = ncap;
    return 0;
}

char *gd_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = gd_malloc(n);
    if (d != NULL) memcpy(d, s, n);
    return d;
}

void *gd_aligned_alloc(size_t bytes)
{
    if (should_fail()) return NULL;
    size_t n = bytes ? bytes : 1;
    if (n > SIZE_MAX - 63) return NULL;
    return aligned_alloc(64, (n + 63) & ~(size_t)63);
}
