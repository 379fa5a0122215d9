/* plugin.cu — the exported entry point: finds the device, reads the settings, fills the
 * gdp_plugin, registers the kernel families, and wraps every kernel launch.
 *
 * Settings (through host->getenv):
 *   GRADUS_CUDA_MANAGED=1  managed memory; the device is then host visible, so the CPU
 *                          reference may run on it in place after a synchronize
 *   GRADUS_SYNC=1          synchronize after every kernel: errors name the kernel that
 *                          caused them (a debug switch; slow)
 *   GRADUS_CUDA_DEVICE=n   which device to use (default 0)
 *   GRADUS_CUDA_FUSE=0     no graph pass (bias + activation stay separate nodes)
 *   GRADUS_CUDA_ATTN_LSE=0 the graph pass leaves attention and attention_grad as they are
 *                          (the backward runs the forward again for its statistics)
 *   GRADUS_CUDA_ATTN_DS=0  the tensor-core attention backward recomputes dS for dq rather
 *                          than storing it from the dk/dv pass (what problems too long for
 *                          the stored dS do anyway)
 *   GRADUS_CUDA_NORM_FUSE=0 the graph pass leaves a decode step's RMS norms as nodes of their
 *                          own rather than in front of the products that read them (gemv.cu)
 *   GRADUS_CUDA_GRAPHS=0   no CUDA graphs: the executor declines, the host launches node
 *                          by node (GRADUS_EXECUTOR=0 turns executors off host-side)
 *   GRADUS_CUDNN=0         convolutions as im2col + cuBLAS even where cuDNN was built in
 *   GRADUS_CUDA_PDL=0      every kernel waits for the one in front to finish before it is
 *                          launched (by default the decode-step kernels may start early:
 *                          cu_launch in cuda_internal.h)
 *   GRADUS_CUDA_CLUSTERS=0 no thread-block clusters: decode attention combines its splits
 *                          with a second kernel (the same bits; attention_decode.cu)
 */
#include "cuda_internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* The families; each .cu defines one (see CU_FAMILY). */
extern const cu_family cu_family_matmul;
extern const cu_family cu_family_elementwise;
extern const cu_family cu_family_reduce;
extern const cu_family cu_family_softmax;
extern const cu_family cu_family_norm;
extern const cu_family cu_family_layout;
extern const cu_family cu_family_optim;
extern const cu_family cu_family_attention;
extern const cu_family cu_family_index;
extern const cu_family cu_family_random;
extern const cu_family cu_family_conv;
extern const cu_family cu_family_pool;
extern const cu_family cu_family_gemv;
extern const cu_family cu_family_sample;
extern const cu_family cu_family_rope_cache;
extern const gdp_graph_pass cu_fuse_pass; /* fuse.cu */
void cu_conv_close(cu_backend *be);       /* conv.cu: its cuDNN/cuBLAS handles */
void cu_gemv_open(cu_backend *be);        /* gemv.cu: its shared-memory opt-in */

static const cu_family *const families[] = {
    &cu_family_matmul, &cu_family_elementwise, &cu_family_reduce,
    &cu_family_softmax, &cu_family_norm, &cu_family_layout, &cu_family_optim,
    &cu_family_attention, &cu_family_index, &cu_family_random,
    &cu_family_conv, &cu_family_pool, &cu_family_gemv, &cu_family_sample,
    &cu_family_rope_cache,
};

static const char *setting(const gdp_host *host, const char *name)
{
    if (!GDP_HAS_FIELD(host, gdp_host, getenv) || host->getenv == NULL) return NULL;
    return host->getenv(host->host, name);
}

static int setting_on(const gdp_host *host, const char *name)
{
    const char *v = setting(host, name);
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

static void host_log(const gdp_host *host, const char *line)
{
    if (GDP_HAS_FIELD(host, gdp_host, log) && host->log != NULL) host->log(host->host, line);
}

void cu_log(const cu_backend *be, const char *fmt, ...)
{
    char line[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    host_log(be->host, line);
}

/* ---- kernel launches ------------------------------------------------------------------- */

gdp_status cu_run(void *backend, const gdp_node *node, void *stream, gdp_err *err, cu_run_fn fn)
{
    cu_backend *be = (cu_backend *)backend;
    if (be == NULL || node == NULL) return gdp_fail(err, GDP_ERR_INVALID, "cuda launch: NULL backend or node");
    cudaStream_t s = cu_stream(be, stream);
    CU_TRY(cudaSetDevice(be->device));
    /* While a segment is captured nothing runs: no timing events (a replayed graph is timed
     * as a whole by the executor) and nothing to wait for. */
    int live = !be->capturing;
    cudaEvent_t start = NULL;
    if (live && be->prof.on) cu_prof_begin(be, s, &start);
    gdp_status st = fn(be, node, s, err);
    if (st == GDP_OK) {
        /* Launch errors (bad configuration, missing kernel image) surface here. */
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            st = gdp_fail(err, GDP_ERR_DEVICE, "cuda %s: kernel launch failed: %s (%s)", node->op,
                          cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (start != NULL) cu_prof_end(be, s, node->label != NULL ? node->label : node->op, node->id, start);
    if (live && st == GDP_OK && be->sync_each) {
        cudaError_t e = cudaStreamSynchronize(s);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = gdp_fail(err, GDP_ERR_DEVICE, "cuda %s: kernel failed (GRADUS_SYNC): %s (%s)", node->op,
                          cudaGetErrorName(e), cudaGetErrorString(e));
        }
        if (st == GDP_OK) st = cu_bad_take(be, err);
    }
    return st;
}

/* ---- registration ----------------------------------------------------------------------- */

static gdp_status register_kernels(void *backend, const gdp_host *host, gdp_err *err)
{
    (void)backend;
    if (host == NULL || !GDP_HAS_FIELD(host, gdp_host, register_kernel) || host->register_kernel == NULL)
        return gdp_fail(err, GDP_ERR_INVALID, "cuda: host offers no register_kernel");
    int refused = 0;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        for (int k = 0; k < families[f]->count; k++) {
            const gdp_kernel *kd = &families[f]->kernels[k];
            gdp_err e;
            memset(&e, 0, sizeof e);
            e.size = sizeof e;
            if (host->register_kernel(host->host, kd, &e) != GDP_OK) {
                /* One refused kernel (an op this gradus does not know) must not take the
                 * others down: that op falls back, and the log says why. */
                char line[700];
                if (kd->signature != NULL)
                    snprintf(line, sizeof line, "kernel %s/%s not registered: %s", kd->op, kd->signature, e.msg);
                else
                    snprintf(line, sizeof line, "kernel %s/%d not registered: %s", kd->op, (int)kd->dtype, e.msg);
                host_log(host, line);
                refused++;
            }
        }
    }
    (void)refused;
    return GDP_OK;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

static void shutdown_backend(void *backend)
{
    cu_backend *be = (cu_backend *)backend;
    if (be == NULL) return;
    (void)cudaSetDevice(be->device);
    cu_conv_close(be); /* before the streams its handles were bound to go */
    cu_prof_close(be);
    cu_matmul_close(be);
    cu_device_close(be);
    pthread_mutex_destroy(&be->mu);
    free(be);
}

__global__ void cu_pdl_probe(void) { cu_pdl_wait(); }

static gdp_status open_backend(const gdp_host *host, cu_backend **out, gdp_err *err)
{
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gdp_fail(err, GDP_ERR_NODEVICE, "cudaGetDeviceCount: %s (%s)", cudaGetErrorName(e),
                        cudaGetErrorString(e));
    }
    if (count <= 0) return gdp_fail(err, GDP_ERR_NODEVICE, "cudaGetDeviceCount found no CUDA device");

    int dev = 0;
    const char *dv = setting(host, "GRADUS_CUDA_DEVICE");
    if (dv != NULL && dv[0] != '\0') {
        char *end = NULL;
        long v = strtol(dv, &end, 10);
        if (end == dv || *end != '\0' || v < 0 || v >= count)
            return gdp_fail(err, GDP_ERR_INVALID, "GRADUS_CUDA_DEVICE=%s: expected 0..%d", dv, count - 1);
        dev = (int)v;
    }

    cu_backend *be = (cu_backend *)calloc(1, sizeof *be);
    if (be == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "cuda: out of host memory");
    pthread_mutex_init(&be->mu, NULL);
    be->host = host;
    be->device = dev;
    be->managed = setting_on(host, "GRADUS_CUDA_MANAGED");
    be->sync_each = setting_on(host, "GRADUS_SYNC");
    const char *graphs = setting(host, "GRADUS_CUDA_GRAPHS");
    be->graphs = !(graphs != NULL && strcmp(graphs, "0") == 0);
    const char *tc = setting(host, "GRADUS_CUDA_TC_ATTENTION");
    be->tc_attention = !(tc != NULL && strcmp(tc, "0") == 0);
    const char *wide = setting(host, "GRADUS_CUDA_ATTN_WIDE"); /* 0: heads of 128 on the narrow tiles */
    be->tc_attn_wide = !(wide != NULL && strcmp(wide, "0") == 0);
    const char *lse = setting(host, "GRADUS_CUDA_ATTN_LSE");
    be->attn_lse = !(lse != NULL && strcmp(lse, "0") == 0);
    const char *ds = setting(host, "GRADUS_CUDA_ATTN_DS");
    be->attn_ds = !(ds != NULL && strcmp(ds, "0") == 0);
    const char *nf = setting(host, "GRADUS_CUDA_NORM_FUSE");
    be->norm_fuse = !(nf != NULL && strcmp(nf, "0") == 0);

    gdp_status s = cu_check(cudaSetDevice(dev), "cudaSetDevice", err);
    cudaDeviceProp prop;
    if (s == GDP_OK) s = cu_check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties", err);
    if (s == GDP_OK) {
        snprintf(be->name, sizeof be->name, "%s", prop.name);
        be->sm_count = prop.multiProcessorCount;
        be->smem_optin = prop.sharedMemPerBlockOptin;
        /* programmatic dependent launch and thread-block clusters: the device must have them
         * (sm_90), and the code the driver loaded must have been compiled for them, or
         * cu_pdl_wait is empty (a newer GPU running the compute_80 PTX, say) and an early
         * start would race, and the kernels' cluster paths are not there */
        const char *pdl = setting(host, "GRADUS_CUDA_PDL");
        cudaFuncAttributes fa;
        be->sm90 = prop.major >= 9 && cudaFuncGetAttributes(&fa, (const void *)cu_pdl_probe) == cudaSuccess &&
                   fa.ptxVersion >= 90;
        be->pdl = be->sm90 && !(pdl != NULL && strcmp(pdl, "0") == 0);
        /* wgmma is in sm_90a code only: the build says whether it made some, the device
         * whether it runs it (a 9.0 device; newer ones run the compute_80 PTX) */
        const char *wg = setting(host, "GRADUS_CUDA_WGMMA");
#ifdef GRADUS_CUDA_SM90A
        be->wgmma = be->sm90 && prop.major == 9 && prop.minor == 0 && !(wg != NULL && strcmp(wg, "0") == 0);
#else
        (void)wg;
#endif
        const char *cl = setting(host, "GRADUS_CUDA_CLUSTERS");
        be->clusters = be->sm90 && !(cl != NULL && strcmp(cl, "0") == 0);
        (void)cudaGetLastError();
        if (be->managed && !prop.managedMemory)
            s = gdp_fail(err, GDP_ERR_UNSUPPORTED, "GRADUS_CUDA_MANAGED=1: %s has no managed memory", prop.name);
    }
    if (s == GDP_OK) s = cu_device_open(be, err);
    if (s == GDP_OK) s = cu_matmul_open(be, err);
    if (s == GDP_OK) cu_attention_open(be);
    if (s == GDP_OK) cu_gemv_open(be);
    if (s != GDP_OK) {
        shutdown_backend(be);
        return s;
    }
    be->dev = cu_device_module;
    be->dev.name = be->name;
    be->dev.host_visible = be->managed;
    *out = be;
    return GDP_OK;
}

extern "C" __attribute__((visibility("default"))) gdp_status gradus_plugin_init(const gdp_host *host,
                                                                                  gdp_plugin *plugin,
                                                                                  gdp_err *err)
{
    if (plugin == NULL) return gdp_fail(err, GDP_ERR_INVALID, "cuda: plugin is NULL");
    if (GDP_HAS_FIELD(plugin, gdp_plugin, abi_minor)) {
        plugin->abi_major = GDP_ABI_MAJOR;
        plugin->abi_minor = GDP_ABI_MINOR;
    }
    if (host == NULL || !GDP_HAS_FIELD(host, gdp_host, abi_minor))
        return gdp_fail(err, GDP_ERR_INVALID, "cuda: host is NULL or too old");
    if (host->abi_major != GDP_ABI_MAJOR)
        return gdp_fail(err, GDP_ERR_VERSION, "cuda: plugin ABI %d, host ABI %d", GDP_ABI_MAJOR, host->abi_major);
    if (!GDP_HAS_FIELD(plugin, gdp_plugin, shutdown))
        return gdp_fail(err, GDP_ERR_VERSION, "cuda: host's gdp_plugin (%zu bytes) lacks fields this plugin fills",
                        plugin->size);

    cu_backend *be = NULL;
    gdp_status s = open_backend(host, &be, err);
    if (s != GDP_OK) return s;

    plugin->name = "cuda";
    plugin->priority = 100; /* above the CPU backends: the GPU is the point of loading us */
    plugin->backend = be;
    plugin->device = &be->dev;
    plugin->profiler = &cu_profiler_module;
    const char *fuse = setting(host, "GRADUS_CUDA_FUSE");
    plugin->graph_pass = fuse != NULL && strcmp(fuse, "0") == 0 ? NULL : &cu_fuse_pass;
    plugin->register_kernels = register_kernels;
    plugin->shutdown = shutdown_backend;
    if (GDP_HAS_FIELD(plugin, gdp_plugin, executor)) plugin->executor = &cu_executor_module;
#ifdef GRADUS_HAVE_NCCL
    if (GDP_HAS_FIELD(plugin, gdp_plugin, collective) && cu_nccl_available(host)) plugin->collective = &cu_collective_module;
#endif

    /* `gradus devices` shows the device; the log only mentions the debugging modes, so a
     * normal start stays quiet. The host prefixes the backend's name. */
    if (be->managed || be->sync_each || !be->graphs) {
        char line[400];
        snprintf(line, sizeof line, "%s (device %d)%s%s%s", be->name, be->device,
                 be->managed ? ", managed memory" : "", be->sync_each ? ", synchronous" : "",
                 be->graphs ? "" : ", no CUDA graphs");
        host_log(host, line);
    }
    return GDP_OK;
}
