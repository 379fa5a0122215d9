/* Steady state: after warm-up, training steps allocate nothing. Everything a step needs
 * (activations, workspaces, staging, descriptors, prepared segments) was planned when it
 * was compiled, so N steps of a small model — inputs written, the learning rate changed,
 * the step run, the loss read — make
 *  - no allocation through the library's allocator (gd_alloc_count),
 *  - no heap allocation at all in the process, counted by wrapping malloc and its kin
 *    (glibc only, and not under the sanitizers, which own malloc themselves),
 *  - no device allocation or free (the test device counts them),
 * on the fast CPU backend, and through the test device with every op it lacks falling
 * back to the CPU reference, with and without host-visible memory. The three also agree
 * on the losses. */
#define _GNU_SOURCE 1 /* dladdr, to name where an allocation came from */
#include "testdev_util.h"

#include <stdatomic.h>
#include <stdlib.h>

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
#define COUNT_MALLOC 1
/* glibc's own entry points, so that these wrappers can count and pass on. */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static atomic_int counting;
static atomic_llong heap_allocs;
#define MAX_SITES 8
static void *sites[MAX_SITES]; /* callers of the first allocations counted */

static void count(void *caller)
{
    if (!atomic_load_explicit(&counting, memory_order_relaxed)) return;
    long long n = atomic_fetch_add(&heap_allocs, 1);
    if (n < MAX_SITES) sites[n] = caller;
}
void *malloc(size_t n)
{
    count(__builtin_return_address(0));
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t size)
{
    count(__builtin_return_address(0));
    return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n)
{
    count(__builtin_return_address(0));
    return __libc_realloc(p, n);
}
void *aligned_alloc(size_t align, size_t n)
{
    count(__builtin_return_address(0));
    return __libc_memalign(align, n);
}
void *memalign(size_t align, size_t n)
{
    count(__builtin_return_address(0));
    return __libc_memalign(align, n);
}
int posix_memalign(void **out, size_t align, size_t n)
{
    count(__builtin_return_address(0));
    void *p = __libc_memalign(align, n);
    if (p == NULL) return 12; /* ENOMEM */
    *out = p;
    return 0;
}
void free(void *p) { __libc_free(p); }

static void print_sites(long long n)
{
    for (long long i = 0; i < n && i < MAX_SITES; i++) {
        Dl_info info;
        if (dladdr(sites[i], &info) != 0 && info.dli_fname != NULL)
            fprintf(stderr, "  allocation %lld from %s+%#lx (%s)\n", i + 1, info.dli_fname,
                    (unsigned long)((char *)sites[i] - (char *)info.dli_fbase), info.dli_sname ? info.dli_sname : "?");
        else
            fprintf(stderr, "  allocation %lld from %p\n", i + 1, sites[i]);
    }
}
#endif


typedef struct config {
    const char *name, *variant, *backend;
    int builtins;    /* the built-in backends too: the test device's fallbacks go to the fast CPU backend */
} config;

#define WARMUP 2
#define STEPS 6

/* Trains on cf->backend of c: warm-up, then STEPS counted steps. Losses into loss. */
static void steady(gd_ctx *c, const config *cf, float *loss)
{
    const char *backend = cf->backend;
    gd_ctx *keep = ctx;
    ctx = c;
    CHECK(gd_ctx_use_backend(c, backend) == GD_OK, "no backend %s: %s", backend, gd_ctx_error(c));
    td_model m;
    gd_status s = td_model_build(c, &m);
    gd_program *p = s == GD_OK ? gd_compile(m.g, 1, &m.loss, GD_COMPILE_UPDATES) : NULL;
    CHECK(p != NULL, "%s: building and compiling: %s", backend, gd_ctx_error(c));
    for (int i = 0; i < WARMUP && p != NULL; i++)
        CHECK(td_model_step(&m, p, i, &loss[i]) == GD_OK, "%s: warm-up step: %s", backend, gd_ctx_error(c));
    const testdev_stats *st = td_stats(c);
    testdev_stats d0 = st != NULL ? *st : (testdev_stats){0};
    uint64_t compiles = c->compiles;
    gd_alloc_count_reset();
#ifdef COUNT_MALLOC
    atomic_store(&heap_allocs, 0);
    atomic_store(&counting, 1);
#endif
    for (int i = WARMUP; i < WARMUP + STEPS && p != NULL; i++) {
        s = gd_optimizer_set_lr(m.g, 1e-2 / (1 + i)); /* a schedule: a value written, nothing rebuilt */
        if (s == GD_OK) s = td_model_step(&m, p, i, &loss[i]);
        if (s != GD_OK) break;
    }
#ifdef COUNT_MALLOC
    atomic_store(&counting, 0);
    long long heap = atomic_load(&heap_allocs);
#endif
    int64_t lib = gd_alloc_count();
    CHECK(s == GD_OK, "%s: step: %s", backend, gd_ctx_error(c));
    CHECK(lib == 0, "%s: %lld allocations through the library's allocator in %d steps", cf->name, (long long)lib, STEPS);
#ifdef COUNT_MALLOC
    CHECK(heap == 0, "%s: %lld heap allocations in %d steps", cf->name, heap, STEPS);
    if (heap != 0) print_sites(heap);
#endif
    if (st != NULL && strcmp(backend, "testdev") == 0) {
        CHECK(st->allocs == d0.allocs && st->frees == d0.frees, "%s: %lld device allocations and %lld frees in %d steps",
              backend, (long long)(st->allocs - d0.allocs), (long long)(st->frees - d0.frees), STEPS);
        CHECK(st->prepares == d0.prepares && st->runs - d0.runs >= STEPS, "%s: %lld segments prepared, %lld run",
              backend, (long long)(st->prepares - d0.prepares), (long long)(st->runs - d0.runs));
    }
    CHECK(c->compiles == compiles, "%s: the steps compiled something", backend);
    gd_program_free(p);
    gd_graph_free(m.g);
    ctx = keep;
}

int main(void)
{
    unsetenv("GRADUS_EXECUTOR");
    unsetenv("GRADUS_SYNC");
    const config configs[] = {
        {"cpu", "testdev", "cpu", 1},
        {"testdev, fallbacks on cpu", "testdev", "testdev", 1},
        {"testdev host-visible, fallbacks on cpu", "testdev_hostvis", "testdev", 1},
        {"testdev, fallbacks on the reference", "testdev", "testdev", 0},
    };
    enum { NC = sizeof configs / sizeof configs[0] };
    float loss[NC][WARMUP + STEPS];
    memset(loss, 0, sizeof loss);
    for (int v = 0; v < NC; v++) {
        const config *cf = &configs[v];
        gd_ctx *c = td_new_ctx(cf->variant, cf->builtins);
        if (c == NULL) continue;
        if (td_backend(c, cf->backend) == NULL) {
            printf("steady state: no %s backend in this build, %s skipped\n", cf->backend, cf->name);
            loss[v][0] = NAN;
        } else {
            steady(c, cf, loss[v]);
        }
        gd_ctx_free(c);
    }
    for (int v = 1; v < NC; v++)
        for (int i = 0; i < WARMUP + STEPS && !isnan(loss[0][0]) && !isnan(loss[v][0]); i++)
            CHECK(fabsf(loss[v][i] - loss[0][i]) <= 1e-4f * fabsf(loss[0][i]) && isfinite(loss[v][i]),
                  "%s, step %d: loss %.7g, on cpu %.7g", configs[v].name, i, loss[v][i], loss[0][i]);
    return tu_finish("steady state");
}
