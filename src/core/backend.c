/* backend.c — what the core does with a backend: memory, copies, synchronization and
 * kernel lookup, with the ABI's defaults filled in for missing optional functions. The
 * CPU reference is backend 0: host memory, and the op definitions' reference kernels. */
#include "core.h"

#include <stdlib.h>
#include <string.h>

gd_backend *gd_backend_ref_new(void)
{
    gd_backend *b = calloc(1, sizeof *b);
    if (b == NULL) return NULL;
    snprintf(b->name, sizeof b->name, "ref");
    b->is_ref = 1;
    b->host_visible = 1;
    return b;
}

void gd_backend_destroy(gd_backend *b)
{
    if (b == NULL) return;
    if (b->has_dev && b->stream != NULL && b->dev.stream_destroy != NULL) {
        gdp_err e = {.size = sizeof e};
        b->dev.stream_destroy(b->plugin.backend, b->stream, &e);
    }
    if (b->plugin.shutdown != NULL) b->plugin.shutdown(b->plugin.backend);
    /* The shared object stays loaded: a plugin's atexit handlers or thread-locals may
     * still point into it, and unloading buys nothing at process end. */
    free(b->kernels);
    free(b);
}

const gd_kernel_entry *gd_backend_kernel(const gd_backend *b, const gd_op_def *op, int32_t dtype)
{
    for (int i = 0; i < b->n_kernels; i++)
        if (b->kernels[i].op == op && b->kernels[i].dtype == dtype) return &b->kernels[i];
    return NULL;
}

gd_status gd_backend_alloc(gd_ctx *ctx, gd_backend *b, size_t bytes, void **ptr)
{
    size_t n = bytes ? bytes : 1;
    if (!b->has_dev) {
        /* Host memory, 64-byte aligned for vector kernels. */
        size_t rounded = (n + 63) & ~(size_t)63;
        *ptr = aligned_alloc(64, rounded);
        if (*ptr == NULL)
            return gd_fail(ctx, GD_ERR_NOMEM, "%s: cannot allocate %zu bytes of host memory", b->name, bytes);
        return GD_OK;
    }
    gdp_err e = {.size = sizeof e};
    gdp_status s = b->dev.alloc(b->plugin.backend, n, ptr, &e);
    if (s != GDP_OK) return gd_fail(ctx, s == GDP_ERR_NOMEM ? GD_ERR_NOMEM : GD_ERR_DEVICE, "%s: %s", b->name, e.msg);
    return GD_OK;
}

void gd_backend_free(gd_backend *b, void *ptr)
{
    if (ptr == NULL) return;
    if (!b->has_dev) {
        free(ptr);
        return;
    }
    gdp_err e = {.size = sizeof e};
    b->dev.free(b->plugin.backend, ptr, &e);
}

gd_status gd_backend_h2d(gd_ctx *ctx, gd_backend *b, void *dst, const void *src, size_t bytes)
{
    if (!b->has_dev) {
        memcpy(dst, src, bytes);
        return GD_OK;
    }
    gdp_err e = {.size = sizeof e};
    if (b->dev.copy_h2d(b->plugin.backend, dst, src, bytes, b->stream, &e) != GDP_OK)
        return gd_fail(ctx, GD_ERR_DEVICE, "%s: host-to-device copy of %zu bytes: %s", b->name, bytes, e.msg);
    return GD_OK;
}

gd_status gd_backend_d2h(gd_ctx *ctx, gd_backend *b, void *dst, const void *src, size_t bytes)
{
    if (!b->has_dev) {
        memcpy(dst, src, bytes);
        return GD_OK;
    }
    gdp_err e = {.size = sizeof e};
    if (b->dev.copy_d2h(b->plugin.backend, dst, src, bytes, b->stream, &e) != GDP_OK)
        return gd_fail(ctx, GD_ERR_DEVICE, "%s: device-to-host copy of %zu bytes: %s", b->name, bytes, e.msg);
    return GD_OK;
}

gd_status gd_backend_sync(gd_ctx *ctx, gd_backend *b)
{
    if (!b->has_dev || b->dev.synchronize == NULL) return GD_OK;
    gdp_err e = {.size = sizeof e};
    if (b->dev.synchronize(b->plugin.backend, b->stream, &e) != GDP_OK)
        return gd_fail(ctx, GD_ERR_DEVICE, "%s: synchronize: %s", b->name, e.msg);
    return GD_OK;
}

gd_status gd_backend_zero(gd_ctx *ctx, gd_backend *b, void *ptr, size_t bytes)
{
    if (!b->has_dev) {
        memset(ptr, 0, bytes);
        return GD_OK;
    }
    if (b->dev.memset_zero != NULL) {
        gdp_err e = {.size = sizeof e};
        if (b->dev.memset_zero(b->plugin.backend, ptr, bytes, b->stream, &e) != GDP_OK)
            return gd_fail(ctx, GD_ERR_DEVICE, "%s: memset: %s", b->name, e.msg);
        return GD_OK;
    }
    void *z = calloc(1, bytes ? bytes : 1);
    if (z == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "%s: cannot allocate %zu bytes of host memory", b->name, bytes);
    gd_status s = gd_backend_h2d(ctx, b, ptr, z, bytes);
    free(z);
    return s;
}

/* ---- the reference kernels, with f16/bf16 converted through f32 ------------------------ */

static int ref_handles(const gd_op_def *op, int32_t dt)
{
    unsigned mask = op->ref_dtypes ? op->ref_dtypes : ~(GD_M(GDP_F16) | GD_M(GDP_BF16));
    return (mask & GD_M(dt)) != 0;
}

static void convert(const gdp_tensor *src, const gdp_tensor *dst)
{
    int64_t n = gdp_numel(src);
    for (int64_t i = 0; i < n; i++) gd_ref_store(dst, i, gd_ref_load(src, i));
}

gd_status gd_ref_launch(gd_ctx *ctx, const gd_op_def *op, const gdp_node *node)
{
    gdp_err e = {.size = sizeof e};
    int need = 0;
    for (int i = 0; i < node->n_in; i++) need |= !ref_handles(op, node->in[i].dtype);
    for (int i = 0; i < node->n_out; i++) need |= !ref_handles(op, node->out[i].dtype);
    gdp_status s;
    if (!need) {
        s = op->ref(NULL, node, NULL, &e);
    } else {
        /* Widen every f16/bf16 operand to an f32 copy, run, round the outputs back. In-place
         * outputs alias their input's copy so that updates stay in place. */
        gdp_tensor in[GDP_MAX_INPUTS], out[GDP_MAX_OUTPUTS];
        void *tmp[GDP_MAX_INPUTS + GDP_MAX_OUTPUTS] = {0};
        int nt = 0;
        s = GDP_OK;
        for (int i = 0; i < node->n_in && s == GDP_OK; i++) {
            in[i] = node->in[i];
            if (ref_handles(op, in[i].dtype)) continue;
            in[i].dtype = GDP_F32;
            in[i].data = tmp[nt++] = malloc((size_t)(gdp_numel(&in[i]) ? gdp_numel(&in[i]) : 1) * 4);
            if (in[i].data == NULL) s = GDP_ERR_NOMEM;
            else convert(&node->in[i], &in[i]);
        }
        for (int k = 0; k < node->n_out && s == GDP_OK; k++) {
            out[k] = node->out[k];
            if (ref_handles(op, out[k].dtype)) continue;
            out[k].dtype = GDP_F32;
            int alias = -1;
            for (int i = 0; i < node->n_in; i++)
                if (node->in[i].data == node->out[k].data) alias = i;
            if (alias >= 0 && in[alias].dtype == GDP_F32 && in[alias].data != node->in[alias].data) {
                out[k].data = in[alias].data;
                continue;
            }
            out[k].data = tmp[nt++] = malloc((size_t)(gdp_numel(&out[k]) ? gdp_numel(&out[k]) : 1) * 4);
            if (out[k].data == NULL) s = GDP_ERR_NOMEM;
        }
        if (s == GDP_OK) {
            gdp_node n2 = *node;
            n2.in = in;
            n2.out = out;
            s = op->ref(NULL, &n2, NULL, &e);
            for (int k = 0; k < node->n_out && s == GDP_OK; k++)
                if (out[k].data != node->out[k].data) convert(&out[k], &node->out[k]);
        } else {
            snprintf(e.msg, sizeof e.msg, "out of memory widening operands to f32");
        }
        for (int i = 0; i < nt; i++) free(tmp[i]);
    }
    if (s != GDP_OK) return gd_fail(ctx, s == GDP_ERR_NOMEM ? GD_ERR_NOMEM : GD_ERR_INVALID, "%s: %s", op->name, e.msg);
    return GD_OK;
}
