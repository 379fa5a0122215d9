/* backend.c — what the core does with a backend: memory, copies, synchronization and
 * kernel lookup, with the ABI's defaults filled in for missing optional functions. The
 * CPU reference is backend 0: host memory, and the op definitions' reference kernels. */
#include "core.h"
#include "prof/prof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

gd_backend *gd_backend_ref_new(void)
{
    gd_backend *b = gd_calloc(1, sizeof *b);
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
    for (int i = 0; i < b->n_kernels; i++) gd_free(b->kernels[i].signature);
    gd_free(b->kernels);
    gd_free(b);
}

const gd_kernel_entry *gd_backend_kernel(const gd_backend *b, const gd_node *n)
{
    if (gd_node_uniform(n)) {
        int32_t key = gd_node_key_dtype(n);
        for (int i = 0; i < b->n_kernels; i++)
            if (b->kernels[i].op == n->op && b->kernels[i].signature == NULL && b->kernels[i].dtype == key)
                return &b->kernels[i];
        return NULL;
    }
    char sig[256];
    gd_node_signature(n, sig, sizeof sig);
    for (int i = 0; i < b->n_kernels; i++)
        if (b->kernels[i].op == n->op && b->kernels[i].signature != NULL && strcmp(b->kernels[i].signature, sig) == 0)
            return &b->kernels[i];
    return NULL;
}

gd_status gd_status_from_plugin(gdp_status s)
{
    switch (s) {
    case GDP_OK: return GD_OK;
    case GDP_ERR_INVALID: return GD_ERR_INVALID;
    case GDP_ERR_UNSUPPORTED: return GD_ERR_UNSUPPORTED;
    case GDP_ERR_NOMEM: return GD_ERR_NOMEM;
    case GDP_ERR_VERSION: return GD_ERR_VERSION;
    case GDP_ERR_NODEVICE: return GD_ERR_NODEVICE;
    default: return GD_ERR_DEVICE;
    }
}

/* Host memory the machine has: a host backend never plans past it (over-committed
 * memory would be killed by the OS when touched instead of failing here). */
static size_t host_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

size_t gd_backend_free_bytes(gd_backend *b)
{
    if (!b->has_dev) {
        size_t total = host_memory();
        return total > b->host_bytes ? total - b->host_bytes : 0;
    }
    if (b->dev.memory_info == NULL) return 0;
    size_t fr = 0, total = 0;
    gdp_err e = {.size = sizeof e};
    if (b->dev.memory_info(b->plugin.backend, &fr, &total, &e) != GDP_OK) return 0;
    return fr;
}

static double gib(size_t b) { return (double)b / (1024.0 * 1024 * 1024); }

gd_status gd_backend_alloc(gd_ctx *ctx, gd_backend *b, size_t bytes, void **ptr)
{
    *ptr = NULL;
    size_t n = bytes ? bytes : 1;
    if (!b->has_dev) {
        size_t total = host_memory();
        if (total > 0 && (n > total || b->host_bytes > total - n))
            return gd_fail(ctx, GD_ERR_NOMEM,
                           "%s: %.2f GiB more host memory would make %.2f GiB, more than the machine's %.2f GiB",
                           b->name, gib(n), gib(b->host_bytes + n), gib(total));
        *ptr = gd_aligned_alloc(n);
        if (*ptr == NULL)
            return gd_fail(ctx, GD_ERR_NOMEM, "%s: cannot allocate %zu bytes of host memory", b->name, bytes);
        b->host_bytes += n;
        if (GD_UNLIKELY(ctx->prof != NULL)) gd_prof_memory(ctx->prof, b);
        return GD_OK;
    }
    gdp_err e = {.size = sizeof e};
    gdp_status s = b->dev.alloc(b->plugin.backend, n, ptr, &e);
    if (s != GDP_OK) {
        *ptr = NULL;
        return gd_fail(ctx, s == GDP_ERR_NOMEM ? GD_ERR_NOMEM : GD_ERR_DEVICE, "%s: %s", b->name, e.msg);
    }
    b->dev_bytes += n;
    if (GD_UNLIKELY(ctx->prof != NULL)) gd_prof_memory(ctx->prof, b);
    return GD_OK;
}

void gd_backend_free(gd_backend *b, void *ptr, size_t bytes)
{
    if (ptr == NULL) return;
    size_t n = bytes ? bytes : 1;
    if (!b->has_dev) {
        b->host_bytes = b->host_bytes > n ? b->host_bytes - n : 0;
        gd_free(ptr);
    } else {
        gdp_err e = {.size = sizeof e};
        b->dev.free(b->plugin.backend, ptr, &e);
        b->dev_bytes = b->dev_bytes > n ? b->dev_bytes - n : 0;
    }
    gd_ctx *ctx = b->host_ctx.ctx; /* NULL for the reference, which no context started */
    if (GD_UNLIKELY(ctx != NULL && ctx->prof != NULL)) gd_prof_memory(ctx->prof, b);
}

gd_status gd_backend_h2d(gd_ctx *ctx, gd_backend *b, void *dst, const void *src, size_t bytes)
{
    if (!b->has_dev) {
        memcpy(dst, src, bytes);
        return GD_OK;
    }
    gdp_err e = {.size = sizeof e};
    gdp_status s = b->dev.copy_h2d(b->plugin.backend, dst, src, bytes, b->stream, &e);
    if (s != GDP_OK)
        return gd_fail(ctx, gd_status_from_plugin(s), "%s: host-to-device copy of %zu bytes: %s", b->name, bytes, e.msg);
    return GD_OK;
}

gd_status gd_backend_d2h(gd_ctx *ctx, gd_backend *b, void *dst, const void *src, size_t bytes)
{
    if (!b->has_dev) {
        memcpy(dst, src, bytes);
        return GD_OK;
    }
    gdp_err e = {.size = sizeof e};
    gdp_status s = b->dev.copy_d2h(b->plugin.backend, dst, src, bytes, b->stream, &e);
    if (s != GDP_OK)
        return gd_fail(ctx, gd_status_from_plugin(s), "%s: device-to-host copy of %zu bytes: %s", b->name, bytes, e.msg);
    return GD_OK;
}

gd_status gd_backend_sync(gd_ctx *ctx, gd_backend *b)
{
    if (!b->has_dev || b->dev.synchronize == NULL) return GD_OK;
    gdp_err e = {.size = sizeof e};
    uint64_t t0 = GD_UNLIKELY(ctx->prof != NULL) ? gd_prof_now() : 0;
    gdp_status s = b->dev.synchronize(b->plugin.backend, b->stream, &e);
    if (GD_UNLIKELY(ctx->prof != NULL)) gd_prof_wait(ctx->prof, b, GD_PROF_SYNC, t0);
    if (s != GDP_OK) return gd_fail(ctx, gd_status_from_plugin(s), "%s: %s", b->name, e.msg);
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
    void *z = gd_calloc(1, bytes ? bytes : 1);
    if (z == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "%s: cannot allocate %zu bytes of host memory", b->name, bytes);
    gd_status s = gd_backend_h2d(ctx, b, ptr, z, bytes);
    gd_free(z);
    return s;
}

/* ---- the reference kernels, with f16/bf16 converted through f32 ------------------------ */

static int ref_handles(const gd_op_def *op, int32_t dt)
{
    unsigned mask = op->ref_dtypes ? op->ref_dtypes : ~(GD_M(GDP_F16) | GD_M(GDP_BF16));
    return (mask & GD_M(dt)) != 0;
}

/* f32 copy of a half operand: contiguous, 64-byte aligned pieces of the workspace. */
static size_t widened_bytes(const gdp_tensor *t) { return ((size_t)gdp_numel(t) * 4 + 63) & ~(size_t)63; }

static int in_place_of(const gdp_node *node, int k)
{
    for (int i = 0; i < node->n_in; i++)
        if (node->in[i]->data == node->out[k]->data && node->in[i]->data != NULL) return i;
    return -1;
}

/* The workspace of a reference launch: the op's own scratch first, then the f32 copies. */
static size_t own_workspace(const gd_op_def *op, const gdp_node *node)
{
    return op->ref_workspace != NULL ? (op->ref_workspace(node) + 63) & ~(size_t)63 : 0;
}

size_t gd_ref_workspace(const gd_op_def *op, const gdp_node *node)
{
    size_t total = own_workspace(op, node);
    for (int i = 0; i < node->n_in; i++)
        if (!ref_handles(op, node->in[i]->dtype)) total += widened_bytes(node->in[i]);
    /* an in-place output shares its input's f32 copy, but which output is in place is not
     * known before data pointers are: plan for every output */
    for (int k = 0; k < node->n_out; k++)
        if (!ref_handles(op, node->out[k]->dtype)) total += widened_bytes(node->out[k]);
    return total;
}

/* dst = src element by element, as gd_ref_store(dst, i, gd_ref_load(src, i)) converts each.
 * Contiguous tensors (every f32 copy, most operands) skip the layout check an element, and
 * the widening of halves and their rounding back, the common pairs, run as plain loops. */
static void convert(const gdp_tensor *src, const gdp_tensor *dst)
{
    const int64_t n = gdp_numel(src);
    if (!gdp_is_contiguous(src) || !gdp_is_contiguous(dst)) {
        for (int64_t i = 0; i < n; i++) gd_ref_store(dst, i, gd_ref_load(src, i));
        return;
    }
    const uint16_t *hs = src->data;
    const float *fs = src->data;
    uint16_t *hd = dst->data;
    float *fd = dst->data;
    if (dst->dtype == GDP_F32 && src->dtype == GDP_BF16)
        for (int64_t i = 0; i < n; i++) fd[i] = gdp_bf16_to_f32(hs[i]);
    else if (dst->dtype == GDP_F32 && src->dtype == GDP_F16)
        for (int64_t i = 0; i < n; i++) fd[i] = gdp_f16_to_f32(hs[i]);
    else if (dst->dtype == GDP_BF16 && src->dtype == GDP_F32)
        for (int64_t i = 0; i < n; i++) hd[i] = gdp_f32_to_bf16(fs[i]);
    else if (dst->dtype == GDP_F16 && src->dtype == GDP_F32)
        for (int64_t i = 0; i < n; i++) hd[i] = gdp_f32_to_f16(fs[i]);
    else
        for (int64_t i = 0; i < n; i++) gd_ref_store_at(dst, i, gd_ref_load_at(src, i));
}

gd_status gd_ref_launch(gd_ctx *ctx, const gd_op_def *op, const gdp_node *node)
{
    gdp_err e = {.size = sizeof e};
    int need = 0;
    for (int i = 0; i < node->n_in; i++) need |= !ref_handles(op, node->in[i]->dtype);
    for (int i = 0; i < node->n_out; i++) need |= !ref_handles(op, node->out[i]->dtype);
    gdp_status s;
    if (!need) {
        s = op->ref(NULL, node, NULL, &e);
    } else {
        /* Widen every f16/bf16 operand to an f32 copy in the workspace, run, round the
         * outputs back. In-place outputs alias their input's copy so that updates stay in
         * place. */
        gdp_tensor in[GDP_MAX_INPUTS], out[GDP_MAX_OUTPUTS];
        const gdp_tensor *inp[GDP_MAX_INPUTS], *outp[GDP_MAX_OUTPUTS];
        char *ws = node->workspace;
        size_t used = own_workspace(op, node);
        if (ws == NULL || node->workspace_bytes < gd_ref_workspace(op, node))
            return gd_fail(ctx, GD_ERR_INVALID, "the reference needs a workspace for f16/bf16 operands");
        for (int i = 0; i < node->n_in; i++) {
            in[i] = *node->in[i];
            inp[i] = &in[i];
            if (ref_handles(op, in[i].dtype)) continue;
            in[i].dtype = GDP_F32;
            in[i].data = ws + used;
            gdp_set_contiguous(&in[i]);
            used += widened_bytes(node->in[i]);
            convert(node->in[i], &in[i]);
        }
        for (int k = 0; k < node->n_out; k++) {
            out[k] = *node->out[k];
            outp[k] = &out[k];
            if (ref_handles(op, out[k].dtype)) continue;
            out[k].dtype = GDP_F32;
            int alias = in_place_of(node, k);
            if (alias >= 0 && in[alias].dtype == GDP_F32 && in[alias].data != node->in[alias]->data) {
                out[k].data = in[alias].data;
                continue;
            }
            out[k].data = ws + used;
            used += widened_bytes(node->out[k]);
        }
        gdp_node n2 = *node;
        n2.in = inp;
        n2.out = outp;
        s = op->ref(NULL, &n2, NULL, &e);
        for (int k = 0; k < node->n_out && s == GDP_OK; k++)
            if (out[k].data != node->out[k]->data) convert(&out[k], node->out[k]);
    }
    if (s != GDP_OK) return gd_fail(ctx, gd_status_from_plugin(s), "%s", e.msg);
    return GD_OK;
}
