/* cuda_plugin_host.h — what the tests of the CUDA plugin through its ABI share: a minimal
 * host (a kernel registry, log, getenv and clock), the plugin loaded as gradus loads it
 * (dlopen, one symbol), and helpers that describe nodes the way the host does and launch
 * them. Without a GPU (CI) the plugin declines and the tests print SKIP and return 77.
 *
 * Header-only, like testutil.h. Uses only gradus_plugin.h: the ABI's own tests, not
 * gradus's. */
#ifndef GD_TESTS_CUDA_PLUGIN_HOST_H
#define GD_TESTS_CUDA_PLUGIN_HOST_H

#include "gradus_plugin.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SKIP 77

static int failures;
#define CHECK(cond, ...)                                             \
    do {                                                             \
        if (!(cond)) {                                               \
            failures++;                                              \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);     \
            fprintf(stderr, __VA_ARGS__);                            \
            fprintf(stderr, "\n");                                   \
        }                                                            \
    } while (0)

/* ---- a minimal host ------------------------------------------------------------------- */

#define MAX_KERNELS 512
static gdp_kernel kernels[MAX_KERNELS];
static int n_kernels;

/* A kernel's key: (op, dtype), or (op, signature) for a mixed-precision form. */
static inline int same_key(const gdp_kernel *a, const gdp_kernel *b)
{
    if (strcmp(a->op, b->op) != 0 || (a->signature == NULL) != (b->signature == NULL)) return 0;
    return a->signature != NULL ? strcmp(a->signature, b->signature) == 0 : a->dtype == b->dtype;
}

static inline gdp_status reg(void *host, const gdp_kernel *k, gdp_err *err)
{
    (void)host;
    for (int i = 0; i < n_kernels; i++)
        if (same_key(&kernels[i], k)) return gdp_fail(err, GDP_ERR_INVALID, "duplicate kernel %s/%d", k->op, (int)k->dtype);
    if (n_kernels == MAX_KERNELS) return gdp_fail(err, GDP_ERR_NOMEM, "too many kernels");
    kernels[n_kernels++] = *k;
    return GDP_OK;
}

static inline void host_log(void *host, const char *line)
{
    (void)host;
    fprintf(stderr, "[plugin] %s\n", line);
}

static inline const char *host_getenv(void *host, const char *name)
{
    (void)host;
    return getenv(name);
}

static inline uint64_t host_now(void *host)
{
    (void)host;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline const gdp_kernel *find_kernel(const char *op, int32_t dt)
{
    for (int i = 0; i < n_kernels; i++)
        if (strcmp(kernels[i].op, op) == 0 && kernels[i].signature == NULL && kernels[i].dtype == dt) return &kernels[i];
    return NULL;
}

/* The kernel of a mixed-precision form, e.g. ("matmul", "bf16,bf16->f32"). */
static inline const gdp_kernel *find_sig(const char *op, const char *sig)
{
    for (int i = 0; i < n_kernels; i++)
        if (strcmp(kernels[i].op, op) == 0 && kernels[i].signature != NULL && strcmp(kernels[i].signature, sig) == 0)
            return &kernels[i];
    return NULL;
}

/* ---- helpers ----------------------------------------------------------------------------- */

static gdp_plugin P;
static const gdp_device *D;
static gdp_err E;

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static inline float frand(void) /* in [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static inline void *dev_upload(const void *src, size_t bytes)
{
    void *p = NULL;
    gdp_status s = D->alloc(P.backend, bytes, &p, &E);
    CHECK(s == GDP_OK, "alloc %zu: %s", bytes, E.msg);
    if (s == GDP_OK && src != NULL) CHECK(D->copy_h2d(P.backend, p, src, bytes, NULL, &E) == GDP_OK, "h2d: %s", E.msg);
    return p;
}

static inline gdp_tensor tensor(void *data, int32_t dt, int ndim, const int64_t *shape)
{
    gdp_tensor t;
    memset(&t, 0, sizeof t);
    t.size = sizeof t, t.data = data, t.dtype = dt, t.ndim = ndim;
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    gdp_set_contiguous(&t);
    return t;
}

/* A node as the host would describe it, with the workspace its kernel declares. */
typedef struct test_node {
    gdp_node n;
    const gdp_tensor *in[GDP_MAX_INPUTS], *out[GDP_MAX_OUTPUTS];
    const gdp_kernel *k;
} test_node;

/* The node for kernel k (or op's kernel of dtype dt when k is NULL). */
static inline int make_node_k(test_node *t, const gdp_kernel *k, const char *op, int32_t dt, int n_in, const gdp_tensor *in,
                       int n_out, const gdp_tensor *out, int n_attr, const gdp_attr *attrs, int32_t id, const char *label)
{
    memset(t, 0, sizeof *t);
    t->k = k != NULL ? k : find_kernel(op, dt);
    CHECK(t->k != NULL, "no kernel %s/%d", op, (int)dt);
    if (t->k == NULL) return 0;
    for (int i = 0; i < n_in && i < GDP_MAX_INPUTS; i++) t->in[i] = &in[i];
    for (int i = 0; i < n_out && i < GDP_MAX_OUTPUTS; i++) t->out[i] = &out[i];
    gdp_node *n = &t->n;
    n->size = sizeof *n, n->op = op, n->n_in = n_in, n->n_out = n_out, n->in = t->in, n->out = t->out;
    n->attrs.n = n_attr, n->attrs.items = attrs;
    n->id = id, n->label = label;
    int ok = t->k->supports == NULL || t->k->supports(P.backend, n);
    CHECK(ok, "%s/%d: supports() declined", op, (int)dt);
    if (!ok) return 0;
    size_t ws = t->k->workspace != NULL ? t->k->workspace(P.backend, n) : 0;
    if (ws > 0) {
        CHECK(D->alloc(P.backend, ws, &n->workspace, &E) == GDP_OK, "workspace of %zu bytes: %s", ws, E.msg);
        n->workspace_bytes = ws;
    }
    return 1;
}

static inline int make_node(test_node *t, const char *op, int32_t dt, int n_in, const gdp_tensor *in, int n_out,
                     const gdp_tensor *out, int n_attr, const gdp_attr *attrs, int32_t id, const char *label)
{
    return make_node_k(t, NULL, op, dt, n_in, in, n_out, out, n_attr, attrs, id, label);
}

/* Frees the workspace once the work before it is done (frees are ordered on the NULL stream). */
static inline void drop_node(test_node *t)
{
    if (t->n.workspace != NULL) D->free(P.backend, t->n.workspace, &E);
    t->n.workspace = NULL;
}

/* Runs a mixed-precision form's kernel; returns 0 if it was not run. */
static inline int launch_sig(const char *op, const char *sig, int n_in, const gdp_tensor *in, int n_out, const gdp_tensor *out,
                      int n_attr, const gdp_attr *attrs)
{
    const gdp_kernel *k = find_sig(op, sig);
    CHECK(k != NULL, "no kernel %s/%s", op, sig);
    test_node t;
    if (k == NULL || !make_node_k(&t, k, op, -1, n_in, in, n_out, out, n_attr, attrs, 0, sig)) return 0;
    gdp_status s = t.k->launch(P.backend, &t.n, NULL, &E);
    CHECK(s == GDP_OK, "%s/%s: launch: %s", op, sig, E.msg);
    drop_node(&t);
    return s == GDP_OK;
}

/* Runs op through the plugin's kernel; returns 0 if it was not run. */
static inline int launch_multi(const char *op, int32_t dt, int n_in, const gdp_tensor *in, int n_out, const gdp_tensor *out,
                        int n_attr, const gdp_attr *attrs, int32_t id, const char *label)
{
    test_node t;
    if (!make_node(&t, op, dt, n_in, in, n_out, out, n_attr, attrs, id, label)) return 0;
    gdp_status s = t.k->launch(P.backend, &t.n, NULL, &E);
    CHECK(s == GDP_OK, "%s: launch: %s", op, E.msg);
    drop_node(&t);
    return s == GDP_OK;
}

static inline int launch(const char *op, int32_t dt, int n_in, const gdp_tensor *in, const gdp_tensor *out, int n_attr,
                  const gdp_attr *attrs)
{
    return launch_multi(op, dt, n_in, in, 1, out, n_attr, attrs, 0, op);
}

static inline double max_rel_err(const float *got, const double *want, int64_t n)
{
    double num = 0, den = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        num += d * d, den += want[i] * want[i];
    }
    return sqrt(num / den);
}

/* ---- loading the plugin ------------------------------------------------------------------- */

#ifndef GD_BUILD_DIR
#define GD_BUILD_DIR "."
#endif

/* Loads the plugin the way gradus does: argv[1], else $GRADUS_CUDA_PLUGIN, else
 * libgradus_cuda.so in $GRADUS_PLUGIN_PATH (ctest sets it), else in the build's plugins/
 * folder (GD_BUILD_DIR, defined by the top-level CMakeLists.txt). Checks that a host of
 * another ABI major is refused, then initializes it with *host (which must outlive it) into
 * P and D and registers its kernels. 0 when it is ready; otherwise the test's exit status
 * (SKIP without a device). */
static inline int cuda_plugin_open(int argc, char **argv, void **dl_out, gdp_host *host)
{
    const char *path = argc > 1 ? argv[1] : getenv("GRADUS_CUDA_PLUGIN");
    const char *dir = getenv("GRADUS_PLUGIN_PATH");
    char buf[1024];
    if (path == NULL && dir != NULL && dir[0] != '\0' && strchr(dir, ':') == NULL) {
        snprintf(buf, sizeof buf, "%s/libgradus_cuda.so", dir);
        path = buf;
    }
    if (path == NULL) {
        snprintf(buf, sizeof buf, "%s/plugins/libgradus_cuda.so", GD_BUILD_DIR);
        path = buf;
    }
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    *dl_out = dl;
    if (dl == NULL) {
        printf("SKIP: no CUDA device (plugin not loadable: %s)\n", dlerror());
        return SKIP;
    }
    gdp_init_fn init;
    *(void **)&init = dlsym(dl, GDP_INIT_SYMBOL);
    if (init == NULL) {
        fprintf(stderr, "FAIL: %s does not export %s\n", path, GDP_INIT_SYMBOL);
        return 1;
    }
    memset(host, 0, sizeof *host);
    host->size = sizeof *host, host->abi_major = GDP_ABI_MAJOR, host->abi_minor = GDP_ABI_MINOR;
    host->register_kernel = reg, host->log = host_log, host->getenv = host_getenv, host->now_ns = host_now;
    memset(&P, 0, sizeof P);
    P.size = sizeof P;
    memset(&E, 0, sizeof E);
    E.size = sizeof E;

    /* A host of another major version is refused before anything else happens. */
    gdp_host wrong = *host;
    wrong.abi_major = GDP_ABI_MAJOR + 1;
    gdp_plugin scratch;
    memset(&scratch, 0, sizeof scratch);
    scratch.size = sizeof scratch;
    CHECK(init(&wrong, &scratch, &E) == GDP_ERR_VERSION, "wrong ABI major accepted");
    CHECK(scratch.abi_major == GDP_ABI_MAJOR, "plugin did not report its ABI");

    gdp_status s = init(host, &P, &E);
    if (s == GDP_ERR_NODEVICE) {
        printf("SKIP: no CUDA device (%s)\n", E.msg);
        return failures ? 1 : SKIP;
    }
    CHECK(s == GDP_OK, "init: %d %s", s, E.msg);
    if (s != GDP_OK) return 1;
    D = P.device;
    CHECK(D != NULL && D->alloc && D->free && D->copy_h2d && D->copy_d2h, "device module incomplete");
    if (D == NULL) return 1;
    printf("device: %s (host_visible %d)\n", D->name, D->host_visible);
    CHECK(P.register_kernels != NULL && P.register_kernels(P.backend, host, &E) == GDP_OK, "register_kernels: %s",
          E.msg);
    printf("kernels registered: %d\n", n_kernels);
    return 0;
}

/* The end of a test: a last synchronize, the plugin shut down and unloaded, the verdict. */
static inline int cuda_plugin_close(void *dl)
{
    CHECK(D->synchronize(P.backend, NULL, &E) == GDP_OK, "final synchronize: %s", E.msg);
    if (P.shutdown) P.shutdown(P.backend);
    dlclose(dl);
    printf("%s\n", failures ? "FAILED" : "OK");
    return failures ? 1 : 0;
}

#endif
