/* plugin.c — the fast CPU backend's entry point.
 *
 * Built into libgradus and started by the loader through gradus_cpu_plugin_init (the
 * gdp_init_fn signature), so it goes through the same ABI checks as a shared-object
 * plugin. It has no device module: its kernels run on host memory, which the core
 * allocates as for the reference, and its priority (10) puts its kernels ahead of the
 * reference's (0) and behind any accelerator's.
 *
 * Instances. init runs once per gradus context. Each instance has its own thread count
 * (configure "threads") and its own scratch; the worker pool is one per process
 * (threadpool.h). Every launch runs with the pool held for this instance: the host is
 * given, for each kernel function, a trampoline that takes the pool, calls the kernel and
 * gives the pool back, so two contexts driven from two threads take turns kernel by kernel
 * and never see each other's scratch.
 */
#include "gemm.h"
#include "kernels.h"
#include "threadpool.h"

#include <stdlib.h>
#include <string.h>

/* Distinct kernel functions one instance may register (each needs a trampoline). */
#define MAX_LAUNCHES 256

typedef struct gcpu_backend {
    gcpu_user user;                     /* thread count and scratch, attached to the pool */
    int n_launch;
    gdp_launch_fn launch[MAX_LAUNCHES]; /* the kernel behind trampoline i */
} gcpu_backend;

struct gcpu_regctx {
    const gdp_host *host;
    gcpu_backend *be;
    int mixed; /* register the mixed-precision forms too */
};

static gdp_status launch_locked(void *be, int i, const gdp_node *n, void *stream, gdp_err *err)
{
    gcpu_backend *b = be;
    gcpu_launch_begin(&b->user);
    gdp_status s = b->launch[i](be, n, stream, err);
    gcpu_launch_end();
    return s;
}

/* Trampoline h*16+l calls the instance's kernel h*16+l under the pool's lock. */
#define TR(h, l)                                                                                   \
    static gdp_status tramp_##h##_##l(void *be, const gdp_node *n, void *stream, gdp_err *err) \
    {                                                                                              \
        return launch_locked(be, (h) * 16 + (l), n, stream, err);                                  \
    }
#define TR16(h) TR(h, 0) TR(h, 1) TR(h, 2) TR(h, 3) TR(h, 4) TR(h, 5) TR(h, 6) TR(h, 7) \
    TR(h, 8) TR(h, 9) TR(h, 10) TR(h, 11) TR(h, 12) TR(h, 13) TR(h, 14) TR(h, 15)
TR16(0) TR16(1) TR16(2) TR16(3) TR16(4) TR16(5) TR16(6) TR16(7)
TR16(8) TR16(9) TR16(10) TR16(11) TR16(12) TR16(13) TR16(14) TR16(15)
#undef TR
#define TR(h, l) tramp_##h##_##l,
static const gdp_launch_fn trampolines[MAX_LAUNCHES] = {
    TR16(0) TR16(1) TR16(2) TR16(3) TR16(4) TR16(5) TR16(6) TR16(7)
    TR16(8) TR16(9) TR16(10) TR16(11) TR16(12) TR16(13) TR16(14) TR16(15)
};
#undef TR
#undef TR16

gdp_status gcpu_register(gcpu_regctx *r, const gcpu_kdef *k, gdp_err *err)
{
    gcpu_backend *b = r->be;
    int i = 0;
    while (i < b->n_launch && b->launch[i] != k->launch) i++;
    if (i == b->n_launch) {
        if (b->n_launch == MAX_LAUNCHES)
            return gdp_fail(err, GDP_ERR_NOMEM, "cpu: more than %d kernel functions (%s)", MAX_LAUNCHES, k->op);
        b->launch[b->n_launch++] = k->launch;
    }
    gdp_kernel d = {.size = sizeof(gdp_kernel), .op = k->op, .dtype = k->dtype, .flags = k->flags,
                    .supports = k->supports, .launch = trampolines[i], .constrained_attrs = k->attrs,
                    .signature = k->signature, .workspace = k->workspace};
    return r->host->register_kernel(r->host->host, &d, err);
}

gdp_status gcpu_reg_mixed(gcpu_regctx *r, const char *op, const char *signature, uint32_t flags, gdp_launch_fn launch,
                          gdp_supports_fn supports, gdp_workspace_fn workspace, gdp_err *err)
{
    if (!r->mixed) return GDP_OK;
    gcpu_kdef k = {.op = op, .dtype = -1, .flags = flags, .launch = launch, .supports = supports,
                   .workspace = workspace, .signature = signature};
    return gcpu_register(r, &k, err);
}

gdp_status gcpu_reg_flags(gcpu_regctx *r, const char *op, int32_t dtype, uint32_t flags, gdp_launch_fn launch,
                          gdp_supports_fn supports, const char *const *attrs, gdp_err *err)
{
    gcpu_kdef k = {.op = op, .dtype = dtype, .flags = flags, .launch = launch, .supports = supports, .attrs = attrs};
    return gcpu_register(r, &k, err);
}

gdp_status gcpu_reg(gcpu_regctx *r, const char *op, int32_t dtype, gdp_launch_fn launch, gdp_supports_fn supports,
                    const char *const *attrs, gdp_err *err)
{
    return gcpu_reg_flags(r, op, dtype, 0, launch, supports, attrs, err);
}

gdp_status gcpu_register_kernels(void *backend, const gdp_host *host, int mixed, gdp_err *err)
{
    gcpu_regctx r = {.host = host, .be = backend, .mixed = mixed};
    gdp_status (*families[])(gcpu_regctx *, gdp_err *) = {
        gcpu_register_matmul, gcpu_register_conv, gcpu_register_pool, gcpu_register_elementwise,
        gcpu_register_reduce, gcpu_register_softmax, gcpu_register_optim, gcpu_register_layout,
        gcpu_register_norm, gcpu_register_attention, gcpu_register_index, gcpu_register_random,
        gcpu_register_unary, gcpu_register_activation, gcpu_register_quant,
    };
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        gdp_status s = families[i](&r, err);
        if (s != GDP_OK) return s;
    }
    return GDP_OK;
}

static gdp_status register_kernels(void *backend, const gdp_host *host, gdp_err *err)
{
    return gcpu_register_kernels(backend, host, 1, err);
}

/* key "threads": how many threads this instance's kernels use (<= 0: the default). */
static gdp_status cpu_configure(void *backend, const char *key, int64_t value, gdp_err *err)
{
    gcpu_backend *b = backend;
    if (key == NULL) return gdp_fail(err, GDP_ERR_INVALID, "cpu: configure without a key");
    if (strcmp(key, "threads") != 0) return GDP_OK; /* not a setting of this backend */
    int n = value <= 0 ? 0 : value > GCPU_MAX_THREADS ? GCPU_MAX_THREADS : (int)value;
    gcpu_user_set_threads(&b->user, n);
    return GDP_OK;
}

static void cpu_shutdown(void *backend)
{
    gcpu_backend *b = backend;
    gcpu_user_detach(&b->user);
    free(b);
}

gdp_status gradus_cpu_plugin_init(const gdp_host *host, gdp_plugin *plugin, gdp_err *err)
{
    if (plugin == NULL || host == NULL) return gdp_fail(err, GDP_ERR_INVALID, "cpu: no host or plugin struct");
    if (!GDP_HAS_FIELD(plugin, gdp_plugin, shutdown))
        return gdp_fail(err, GDP_ERR_VERSION, "cpu: host's gdp_plugin is too small (%zu bytes)", plugin->size);
    plugin->abi_major = GDP_ABI_MAJOR;
    plugin->abi_minor = GDP_ABI_MINOR;
    if (host->abi_major != GDP_ABI_MAJOR)
        return gdp_fail(err, GDP_ERR_VERSION, "cpu: host ABI %d, backend built for %d", host->abi_major,
                        GDP_ABI_MAJOR);
    gcpu_backend *b = calloc(1, sizeof *b);
    if (b == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "cpu: out of memory");
    /* GRADUS_THREADS through the host, so an application's settings callback is honoured;
     * the host's configure("threads") may change it later. */
    const char *t = GDP_HAS_FIELD(host, gdp_host, getenv) && host->getenv != NULL
                        ? host->getenv(host->host, "GRADUS_THREADS") : NULL;
    gcpu_user_attach(&b->user, t != NULL ? atoi(t) : 0);

    plugin->name = "cpu";
    plugin->priority = 10;
    plugin->backend = b;
    plugin->device = NULL;
    plugin->profiler = NULL;
    plugin->graph_pass = NULL;
    plugin->register_kernels = register_kernels;
    plugin->shutdown = cpu_shutdown;
    if (GDP_HAS_FIELD(plugin, gdp_plugin, configure)) plugin->configure = cpu_configure;
    return GDP_OK;
}
