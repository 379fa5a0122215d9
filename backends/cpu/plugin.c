/* plugin.c — the fast CPU backend's entry point.
 *
 * Built into libgradus and started by the loader through gradus_cpu_plugin_init (the
 * gdp_init_fn signature), so it goes through the same ABI checks as a shared-object
 * plugin. It has no device module: its kernels run on host memory, which the core
 * allocates as for the reference, and its priority (10) puts its kernels ahead of the
 * reference's (0) and behind any accelerator's.
 */
#include "gemm.h"
#include "kernels.h"
#include "threadpool.h"

#include <stdatomic.h>
#include <stdlib.h>

typedef struct gcpu_backend {
    int threads;
} gcpu_backend;

/* Instances alive: the pool is shared by all of them and stopped with the last. */
static atomic_int live_instances;

gdp_status gcpu_reg_flags(const gdp_host *host, const char *op, int32_t dtype, uint32_t flags, gdp_launch_fn launch,
                          gdp_supports_fn supports, const char *const *attrs, gdp_err *err)
{
    gdp_kernel k = {.size = sizeof(gdp_kernel), .op = op, .dtype = dtype, .flags = flags, .supports = supports,
                    .launch = launch, .constrained_attrs = attrs};
    return host->register_kernel(host->host, &k, err);
}

gdp_status gcpu_reg(const gdp_host *host, const char *op, int32_t dtype, gdp_launch_fn launch,
                    gdp_supports_fn supports, const char *const *attrs, gdp_err *err)
{
    return gcpu_reg_flags(host, op, dtype, 0, launch, supports, attrs, err);
}

static gdp_status register_kernels(void *backend, const gdp_host *host, gdp_err *err)
{
    (void)backend;
    gdp_status (*families[])(const gdp_host *, gdp_err *) = {
        gcpu_register_matmul, gcpu_register_conv, gcpu_register_pool, gcpu_register_elementwise,
        gcpu_register_reduce, gcpu_register_softmax, gcpu_register_optim, gcpu_register_layout,
        gcpu_register_norm, gcpu_register_attention, gcpu_register_index, gcpu_register_random,
        gcpu_register_unary, gcpu_register_activation,
    };
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        gdp_status s = families[i](host, err);
        if (s != GDP_OK) return s;
    }
    return GDP_OK;
}

static void cpu_shutdown(void *backend)
{
    free(backend);
    if (atomic_fetch_sub(&live_instances, 1) == 1) gcpu_pool_shutdown();
}

/* For the core's gd_ctx_set_threads: the ABI has no thread setting, and this backend is
 * linked in, so the core may call it directly. n <= 0: the default. */
int gradus_cpu_set_threads(int n)
{
    return gcpu_pool_set_threads(n);
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
    /* GRADUS_THREADS through the host, so an application's settings callback is honoured. */
    const char *t = GDP_HAS_FIELD(host, gdp_host, getenv) && host->getenv != NULL
                        ? host->getenv(host->host, "GRADUS_THREADS") : NULL;
    int want = t != NULL ? atoi(t) : 0;
    b->threads = want > 0 ? gcpu_pool_set_threads(want) : gcpu_pool_threads();
    atomic_fetch_add(&live_instances, 1);

    plugin->name = "cpu";
    plugin->priority = 10;
    plugin->backend = b;
    plugin->device = NULL;
    plugin->profiler = NULL;
    plugin->graph_pass = NULL;
    plugin->register_kernels = register_kernels;
    plugin->shutdown = cpu_shutdown;
    return GDP_OK;
}
