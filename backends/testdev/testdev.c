/* testdev.c — a test "accelerator": device memory that the host cannot touch, a handful of
 * f32 kernels (matmul, add, relu, and a fused linear_act its graph pass installs), and
 * nothing else, so that every other op of a model falls back to the CPU across copies.
 * docs/plugin-abi.md walks through this file as the worked example of a backend.
 *
 * Device pointers are host pointers with bit 62 set: any host code that dereferences one
 * instead of copying faults at once (that address is not canonical on x86-64 or arm64),
 * which is how the tests prove the scheduler inserts copies. Kernels clear the bit. */
#include "gradus_plugin.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG ((uintptr_t)1 << 62)
static void *dev_to_host(const void *p) { return (void *)((uintptr_t)p & ~TAG); }
static void *host_to_dev(void *p) { return (void *)((uintptr_t)p | TAG); }

typedef struct testdev {
    size_t allocated, peak;
    int launches;
    const gdp_host *host;
} testdev;

static testdev the_device;

/* ---- device module ------------------------------------------------------------------ */

static gdp_status td_alloc(void *be, size_t bytes, void **ptr, gdp_err *err)
{
    testdev *d = be;
    /* a size prefix so that free can account; 64 bytes keeps data aligned */
    char *p = aligned_alloc(64, 64 + ((bytes + 63) & ~(size_t)63));
    if (p == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "testdev: cannot allocate %zu bytes", bytes);
    memcpy(p, &bytes, sizeof bytes);
    d->allocated += bytes;
    if (d->allocated > d->peak) d->peak = d->allocated;
    *ptr = host_to_dev(p + 64);
    return GDP_OK;
}

static gdp_status td_free(void *be, void *ptr, gdp_err *err)
{
    (void)err;
    testdev *d = be;
    if (ptr == NULL) return GDP_OK;
    char *p = (char *)dev_to_host(ptr) - 64;
    size_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    d->allocated -= bytes;
    free(p);
    return GDP_OK;
}

static gdp_status td_h2d(void *be, void *dst, const void *src, size_t n, void *stream, gdp_err *err)
{
    (void)be, (void)stream, (void)err;
    memcpy(dev_to_host(dst), src, n);
    return GDP_OK;
}
static gdp_status td_d2h(void *be, void *dst, const void *src, size_t n, void *stream, gdp_err *err)
{
    (void)be, (void)stream, (void)err;
    memcpy(dst, dev_to_host(src), n);
    return GDP_OK;
}
static gdp_status td_d2d(void *be, void *dst, const void *src, size_t n, void *stream, gdp_err *err)
{
    (void)be, (void)stream, (void)err;
    memmove(dev_to_host(dst), dev_to_host(src), n);
    return GDP_OK;
}
static gdp_status td_meminfo(void *be, size_t *fr, size_t *total, gdp_err *err)
{
    (void)err;
    testdev *d = be;
    *total = (size_t)1 << 30;
    *fr = *total > d->allocated ? *total - d->allocated : 0;
    return GDP_OK;
}

static const gdp_device td_device = {
    .size = sizeof(gdp_device),
    .name = "testdev (host memory behind copies)",
    .host_visible = 0,
    .alloc = td_alloc,
    .free = td_free,
    .copy_h2d = td_h2d,
    .copy_d2h = td_d2h,
    .copy_d2d = td_d2d,
    .memory_info = td_meminfo,
    /* no streams, events, synchronize or memset: the ABI's defaults apply */
};

/* ---- kernels ------------------------------------------------------------------------- */

static const float *IN(const gdp_node *n, int k) { return dev_to_host(n->in[k].data); }
static float *OUT(const gdp_node *n, int k) { return dev_to_host(n->out[k].data); }

/* matmul: 2-D f32 without transposes only — everything else falls back. */
static int matmul_supports(void *be, const gdp_node *n)
{
    (void)be;
    return n->in[0].ndim == 2 && n->in[1].ndim == 2 && n->in[0].dtype == GDP_F32 &&
           gdp_attr_int(&n->attrs, "transpose_a", 0) == 0 && gdp_attr_int(&n->attrs, "transpose_b", 0) == 0;
}
static gdp_status matmul_launch(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be, (void)stream, (void)err;
    int64_t M = n->in[0].shape[0], K = n->in[0].shape[1], N = n->in[1].shape[1];
    const float *a = IN(n, 0), *b = IN(n, 1);
    float *c = OUT(n, 0);
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            double s = 0; // (M, K) @ (K, N), accumulated in double like the reference
            for (int64_t k = 0; k < K; k++) s += (double)a[i * K + k] * b[k * N + j];
            c[i * N + j] = (float)s;
        }
    }
    return GDP_OK;
}

static int same_shape(const gdp_tensor *a, const gdp_tensor *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

static int add_supports(void *be, const gdp_node *n)
{
    (void)be;
    return same_shape(&n->in[0], &n->in[1]) && n->in[0].dtype == GDP_F32;
}
static gdp_status add_launch(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)stream;
    testdev *d = be;
#ifdef TESTDEV_KERNEL_FAIL
    if (++d->launches == 3) return gdp_fail(err, GDP_ERR_DEVICE, "testdev: simulated failure of the third add");
#else
    (void)d, (void)err;
#endif
    int64_t count = gdp_numel(&n->out[0]);
    const float *a = IN(n, 0), *b = IN(n, 1);
    float *y = OUT(n, 0);
    for (int64_t i = 0; i < count; i++) y[i] = a[i] + b[i];
    return GDP_OK;
}

static gdp_status relu_launch(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be, (void)stream, (void)err;
    int64_t count = gdp_numel(&n->out[0]);
    const float *x = IN(n, 0);
    float *y = OUT(n, 0);
    for (int64_t i = 0; i < count; i++) y[i] = x[i] > 0 ? x[i] : 0;
    return GDP_OK;
}

/* linear_act with act = relu (1) or none (0), W (out, in), bias present, x 2-D. */
static int linear_act_supports(void *be, const gdp_node *n)
{
    (void)be;
    int64_t act = gdp_attr_int(&n->attrs, "act", 0);
    return n->n_in == 3 && n->in[0].ndim == 2 && n->in[0].dtype == GDP_F32 && (act == 0 || act == 1) &&
           gdp_attr_int(&n->attrs, "weight_in_out", 0) == 0;
}
static gdp_status linear_act_launch(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be, (void)stream, (void)err;
    int64_t R = n->in[0].shape[0], I = n->in[0].shape[1], O = n->in[1].shape[0];
    int relu = gdp_attr_int(&n->attrs, "act", 0) == 1;
    const float *x = IN(n, 0), *w = IN(n, 1), *b = IN(n, 2);
    float *y = OUT(n, 0);
    for (int64_t r = 0; r < R; r++) {
        for (int64_t o = 0; o < O; o++) {
            double s = 0; // (R, I) . (O, I)^T
            for (int64_t i = 0; i < I; i++) s += (double)x[r * I + i] * w[o * I + i];
            float v = (float)s + b[o]; /* the bias added in f32, as the reference does */
            y[r * O + o] = relu && v < 0 ? 0 : v;
        }
    }
    return GDP_OK;
}

static const char *const matmul_attrs[] = {"transpose_a", "transpose_b", NULL};
static const char *const linear_act_attrs[] = {"act", "weight_in_out", NULL};

static gdp_status td_register(void *be, const gdp_host *host, gdp_err *err)
{
    (void)be;
    const gdp_kernel ks[] = {
        {.size = sizeof(gdp_kernel), .op = "matmul", .dtype = GDP_F32, .supports = matmul_supports,
         .launch = matmul_launch, .constrained_attrs = matmul_attrs},
        {.size = sizeof(gdp_kernel), .op = "add", .dtype = GDP_F32, .supports = add_supports, .launch = add_launch},
        {.size = sizeof(gdp_kernel), .op = "relu", .dtype = GDP_F32, .launch = relu_launch},
        {.size = sizeof(gdp_kernel), .op = "linear_act", .dtype = GDP_F32, .supports = linear_act_supports,
         .launch = linear_act_launch, .constrained_attrs = linear_act_attrs},
#ifdef TESTDEV_BAD_REGISTRATIONS
        /* broken on purpose: a duplicate, and a constraint on an attribute relu lacks */
        {.size = sizeof(gdp_kernel), .op = "add", .dtype = GDP_F32, .launch = add_launch},
        {.size = sizeof(gdp_kernel), .op = "relu", .dtype = GDP_F16, .launch = relu_launch,
         .constrained_attrs = matmul_attrs},
#endif
    };
    gdp_status worst = GDP_OK;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        gdp_status s = host->register_kernel(host->host, &ks[i], err);
        if (s != GDP_OK) worst = s; /* keep going: the host records what it refused */
    }
    return worst;
}

/* ---- graph pass: linear (with bias) followed by relu becomes linear_act --------------- */

static gdp_status td_pass(void *be, gdp_graph_view *g, gdp_err *err)
{
    testdev *d = be;
    int fused = 0;
    int32_t n = g->node_count(g->graph);
    for (int32_t id = 0; id < n; id++) {
        const char *op = g->node_op(g->graph, id);
        if (op == NULL || strcmp(op, "relu") != 0) continue;
        int32_t out_index = 0, lin = g->node_input(g->graph, id, 0, &out_index);
        if (lin < 0) continue;
        const char *lop = g->node_op(g->graph, lin);
        if (lop == NULL || strcmp(lop, "linear") != 0 || g->node_n_inputs(g->graph, lin) != 3) continue;
        if (g->node_users(g->graph, lin, 0) != 1) continue; /* its output is needed elsewhere */
        gdp_tensor x;
        if (g->node_input_desc(g->graph, lin, 0, &x) != GDP_OK || x.ndim != 2 || x.dtype != GDP_F32) continue;
        const int32_t in_nodes[3] = {-1, -1, -1}, in_outs[3] = {0, 1, 2};
        const gdp_attr act = {.name = "act", .kind = GDP_ATTR_INT, .i = 1};
        gdp_status s = g->replace_chain(g->graph, lin, id, "linear_act", 3, in_nodes, in_outs, &act, 1, err);
        if (s != GDP_OK) return s;
        fused++;
    }
    /* Through the host pointer kept since init: the ABI promises it outlives the plugin's
     * use (the sanitizer build checks this call). */
    if (fused > 0 && d->host->getenv(d->host->host, "GRADUS_TESTDEV_VERBOSE") != NULL) {
        char line[64];
        snprintf(line, sizeof line, "fused %d linear+relu chains", fused);
        d->host->log(d->host->host, line);
    }
    return GDP_OK;
}

static const gdp_graph_pass td_graph_pass = {.size = sizeof(gdp_graph_pass), .name = "fuse linear+relu", .run = td_pass};

/* ---- entry point ---------------------------------------------------------------------- */

__attribute__((visibility("default"))) gdp_status gradus_plugin_init(const gdp_host *host, gdp_plugin *plugin, gdp_err *err)
{
#ifdef TESTDEV_EARLY_FAIL
    /* as a plugin that checks its arguments before it says which ABI it speaks */
    return gdp_fail(err, GDP_ERR_INVALID, "testdev: simulated failure before the ABI version is set");
#endif
    plugin->abi_major = GDP_ABI_MAJOR;
    plugin->abi_minor = GDP_ABI_MINOR;
#ifdef TESTDEV_BAD_ABI
    plugin->abi_major = GDP_ABI_MAJOR + 1; /* as if built against a future gradus */
    return GDP_OK;
#endif
    if (host->abi_major != GDP_ABI_MAJOR) return gdp_fail(err, GDP_ERR_VERSION, "testdev: host ABI %d", host->abi_major);
#ifdef TESTDEV_INIT_FAIL
    return gdp_fail(err, GDP_ERR_DEVICE, "testdev: simulated initialization failure");
#endif
#ifdef TESTDEV_NO_DEVICE
    return gdp_fail(err, GDP_ERR_NODEVICE, "testdev: no device present (simulated)");
#endif
    memset(&the_device, 0, sizeof the_device);
    the_device.host = host;
    plugin->name = "testdev";
    plugin->priority = 50;
    plugin->backend = &the_device;
    plugin->device = &td_device;
    plugin->graph_pass = &td_graph_pass;
    plugin->register_kernels = td_register;
    return GDP_OK;
}
