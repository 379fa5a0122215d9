/* direct.c — one op on buffers a caller owns, for framework bridges.
 *
 * A bridge (bridges/tensorflow) keeps its tensors in a backend's memory, allocated through
 * that backend's device module, and asks gradus to run one op on them at a time. The op is
 * checked as a graph node would be (its attributes and shape rule, on a scratch graph that
 * never runs), then runs as the staircase says: the backend's kernel when it has one that
 * takes the node, else the reference on host copies of the operands (copied in, run,
 * copied out), which is what a backend without that op must still be able to do. In
 * strict mode the fallback is an error instead. Unlike a program, this allocates per call
 * (workspaces, host copies): a bridge's framework allocates per op anyway. */
#include "checked.h"
#include "core.h"

#include <stdio.h>
#include <string.h>

static gd_backend *find_backend(gd_ctx *ctx, const char *name)
{
    for (int i = 0; i < ctx->n_backends; i++)
        if (strcmp(ctx->backends[i]->name, name) == 0) return ctx->backends[i];
    return NULL;
}

gd_status gd_backend_device(gd_ctx *ctx, const char *name, const struct gdp_device **device, void **instance,
                            void **stream)
{
    if (ctx == NULL) return GD_ERR_INVALID;
    if (name == NULL || device == NULL || instance == NULL || stream == NULL)
        return gd_fail(ctx, GD_ERR_INVALID, "backend device: NULL argument");
    gd_backend *b = find_backend(ctx, name);
    if (b == NULL) return gd_fail(ctx, GD_ERR_INVALID, "backend device: no backend named '%s'", name);
    *device = b->has_dev ? &b->dev : NULL;
    *instance = b->plugin.backend;
    *stream = b->stream;
    return GD_OK;
}

/* Bytes from t->data to the end of the last element t addresses (strides are never
 * negative, so that is the span a copy must cover); -1 when that does not fit. */
static int span_bytes(const gdp_tensor *t, size_t *out)
{
    int64_t n = gdp_numel(t), last = 0, term;
    if (n == 0) {
        *out = 0;
        return 0;
    }
    for (int d = 0; d < t->ndim; d++)
        if (t->stride[d] < 0 || gd_mul_i64(t->shape[d] - 1, t->stride[d], &term) != 0 || gd_add_i64(last, term, &last) != 0)
            return -1;
    return gd_add_i64(last, 1, &last) != 0 ? -1 : gd_mul_size((size_t)last, gdp_dtype_size(t->dtype), out);
}

static int dense_bytes(const gdp_tensor *t, size_t *out)
{
    return gd_numel_bytes(t->ndim, t->shape, gdp_dtype_size(t->dtype), out);
}

/* Checks the call against the op: a scratch graph holds one node made from the operands'
 * shapes, so attributes and the shape rule are checked by the code every node goes
 * through; its outputs must match what the caller gave. */
static gd_status check_node(gd_ctx *ctx, gd_graph *g, const char *op, int n_in, const gdp_tensor *const *in,
                            int n_out, const gdp_tensor *const *out, int n_attr, const gd_attr *attrs,
                            gd_node **node)
{
    gd_tensor *vin[GDP_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) {
        if (in[i] == NULL || in[i]->ndim < 0 || in[i]->ndim > GDP_MAX_DIMS)
            return gd_fail(ctx, GD_ERR_INVALID, "%s: input %d is NULL or has a bad rank", op, i);
        char name[16];
        snprintf(name, sizeof name, "in%d", i);
        vin[i] = gd_input(g, name, (gd_dtype)in[i]->dtype, in[i]->ndim, in[i]->shape);
        if (vin[i] == NULL) return gd_ctx_status(ctx);
    }
    gd_tensor *vout[GDP_MAX_OUTPUTS] = {0};
    gd_status s = gd_op_multi(g, op, n_in, vin, n_attr, attrs, n_out, vout);
    if (s != GD_OK) return s;
    for (int k = 0; k < n_out; k++) {
        const gd_tensor *v = vout[k];
        if (v == NULL) return gd_fail(ctx, GD_ERR_SHAPE, "%s: has fewer than %d outputs", op, n_out);
        int same = out[k] != NULL && v->dtype == out[k]->dtype && v->ndim == out[k]->ndim && gdp_is_contiguous(out[k]);
        for (int d = 0; same && d < v->ndim; d++) same = v->shape[d] == out[k]->shape[d];
        if (!same) {
            char want[128];
            gd_tensor_describe(v, want, sizeof want);
            return gd_fail(ctx, GD_ERR_SHAPE, "%s: output %d must be a contiguous %s", op, k, want);
        }
    }
    *node = vout[0]->node;
    return GD_OK;
}

static gd_status dev_fail(gd_ctx *ctx, gd_backend *b, const char *what, gdp_status s, const gdp_err *e)
{
    return gd_fail(ctx, gd_status_from_plugin(s), "%s: %s: %s", b->name, what, e->msg);
}

/* The backend's own kernel, with its workspace allocated for this call. */
static gd_status run_kernel(gd_ctx *ctx, gd_backend *b, const gd_kernel_entry *k, gdp_node *nd, void *stream)
{
    gdp_err e = {.size = sizeof e};
    size_t ws = k->k.workspace != NULL ? k->k.workspace(b->plugin.backend, nd) : 0;
    void *wptr = NULL;
    if (ws > 0) {
        gd_status s = gd_backend_alloc(ctx, b, ws, &wptr);
        if (s != GD_OK) return s;
        nd->workspace = wptr;
        nd->workspace_bytes = ws;
    }
    gdp_status ks = k->k.launch(b->plugin.backend, nd, stream, &e);
    gd_status st = ks == GDP_OK ? GD_OK : gd_fail(ctx, gd_status_from_plugin(ks), "%s on %s: %s", nd->op, b->name, e.msg);
    /* the workspace may be freed only once the kernel is done with it; GRADUS_SYNC asks
     * for every kernel to be waited for, so that an error names its kernel */
    if (b->has_dev && b->dev.synchronize != NULL && (wptr != NULL || b->sync_every_kernel)) {
        gdp_status ss = b->dev.synchronize(b->plugin.backend, stream, &e);
        if (ss != GDP_OK && st == GD_OK) st = dev_fail(ctx, b, nd->op, ss, &e);
    }
    gd_backend_free(b, wptr, ws);
    return st;
}

/* The reference on host copies of the operands. An output that is an input's buffer (an
 * in-place update) shares that input's copy, so the update stays in place. */
static gd_status run_fallback(gd_ctx *ctx, gd_backend *b, const gd_op_def *op, gdp_node *nd, void *stream)
{
    gdp_tensor in[GDP_MAX_INPUTS], out[GDP_MAX_OUTPUTS];
    const gdp_tensor *inp[GDP_MAX_INPUTS], *outp[GDP_MAX_OUTPUTS];
    void *bufs[GDP_MAX_INPUTS + GDP_MAX_OUTPUTS] = {0};
    int nb = 0;
    gd_status st = GD_OK;
    gdp_err e = {.size = sizeof e};
    for (int i = 0; i < nd->n_in; i++) {
        in[i] = *nd->in[i];
        inp[i] = &in[i];
        if (!b->has_dev) continue; /* host memory: run in place */
        size_t bytes;
        if (span_bytes(&in[i], &bytes) != 0) {
            st = gd_fail(ctx, GD_ERR_INVALID, "%s: input %d addresses more bytes than fit in memory", op->name, i);
            goto done;
        }
        void *h = gd_malloc(bytes ? bytes : 1);
        if (h == NULL) {
            st = gd_fail(ctx, GD_ERR_NOMEM, "%s: host copy of input %d (%zu bytes)", op->name, i, bytes);
            goto done;
        }
        bufs[nb++] = h;
        if (bytes > 0) {
            gdp_status s = b->dev.copy_d2h(b->plugin.backend, h, nd->in[i]->data, bytes, stream, &e);
            if (s != GDP_OK) {
                st = dev_fail(ctx, b, "device-to-host copy", s, &e);
                goto done;
            }
        }
        in[i].data = h;
    }
    for (int k = 0; k < nd->n_out; k++) {
        out[k] = *nd->out[k];
        outp[k] = &out[k];
        if (!b->has_dev) continue;
        int alias = -1;
        for (int i = 0; i < nd->n_in && alias < 0; i++)
            if (nd->in[i]->data == nd->out[k]->data) alias = i;
        if (alias >= 0) {
            out[k].data = in[alias].data;
            continue;
        }
        size_t bytes;
        if (dense_bytes(&out[k], &bytes) != 0) {
            st = gd_fail(ctx, GD_ERR_INVALID, "%s: output %d is larger than fits in memory", op->name, k);
            goto done;
        }
        void *h = gd_malloc(bytes ? bytes : 1);
        if (h == NULL) {
            st = gd_fail(ctx, GD_ERR_NOMEM, "%s: host copy of output %d (%zu bytes)", op->name, k, bytes);
            goto done;
        }
        bufs[nb++] = h;
        out[k].data = h;
    }
    gdp_node hn = *nd;
    hn.in = inp;
    hn.out = outp;
    size_t ws = gd_ref_workspace(op, &hn);
    void *wptr = ws > 0 ? gd_malloc(ws) : NULL;
    if (ws > 0 && wptr == NULL) {
        st = gd_fail(ctx, GD_ERR_NOMEM, "%s: reference workspace of %zu bytes", op->name, ws);
        goto done;
    }
    hn.workspace = wptr;
    hn.workspace_bytes = ws;
    st = gd_ref_launch(ctx, op, &hn);
    gd_free(wptr);
    if (st != GD_OK) {
        char m[1024];
        snprintf(m, sizeof m, "%s", ctx->err);
        st = gd_fail(ctx, st, "%s on the reference: %s", op->name, m);
        goto done;
    }
    for (int k = 0; k < nd->n_out && b->has_dev; k++) {
        size_t bytes = 0;
        dense_bytes(&out[k], &bytes); /* checked above */
        if (bytes == 0) continue;
        gdp_status s = b->dev.copy_h2d(b->plugin.backend, nd->out[k]->data, out[k].data, bytes, stream, &e);
        if (s != GDP_OK) {
            st = dev_fail(ctx, b, "host-to-device copy", s, &e);
            goto done;
        }
    }
done:
    for (int i = 0; i < nb; i++) gd_free(bufs[i]);
    return st;
}

gd_status gd_backend_run_op(gd_ctx *ctx, const char *backend, const char *op, int n_in,
                            const struct gdp_tensor *const *in, int n_out, const struct gdp_tensor *const *out,
                            int n_attr, const gd_attr *attrs, void *stream, int *on_backend)
{
    if (ctx == NULL) return GD_ERR_INVALID;
    if (on_backend != NULL) *on_backend = 0;
    if (backend == NULL || op == NULL || (n_in > 0 && in == NULL) || out == NULL)
        return gd_fail(ctx, GD_ERR_INVALID, "run op: NULL argument");
    if (n_in < 0 || n_in > GDP_MAX_INPUTS || n_out < 1 || n_out > GDP_MAX_OUTPUTS)
        return gd_fail(ctx, GD_ERR_INVALID, "run op %s: %d inputs and %d outputs", op, n_in, n_out);
    gd_backend *b = find_backend(ctx, backend);
    if (b == NULL) return gd_fail(ctx, GD_ERR_INVALID, "run op %s: no backend named '%s'", op, backend);
    gd_graph *g = gd_graph_new(ctx);
    if (g == NULL) return gd_ctx_status(ctx);
    gd_node *n = NULL;
    gd_status st = check_node(ctx, g, op, n_in, in, n_out, out, n_attr, attrs, &n);
    if (st != GD_OK) goto done;
    if (stream == NULL) stream = b->stream;
    gdp_node nd = {.size = sizeof nd, .op = n->op->name, .n_in = n_in, .n_out = n_out, .in = in, .out = out,
                   .attrs = gd_node_attrs(n), .id = 0, .label = n->op->name};
    const gd_kernel_entry *k = b->is_ref ? NULL : gd_backend_kernel(b, n);
    /* A kernel that refuses strides gets contiguous copies made on the backend (the
     * planner's contiguous op, itself run by this function), as a program would. */
    gdp_tensor cin[GDP_MAX_INPUTS];
    const gdp_tensor *cinp[GDP_MAX_INPUTS];
    void *tmp[GDP_MAX_INPUTS] = {0};
    size_t tmp_bytes[GDP_MAX_INPUTS] = {0};
    const char *contig = ctx->reg->hooks.contiguous_op;
    if (k != NULL && !(k->k.flags & GDP_KERNEL_STRIDED) && contig != NULL && strcmp(op, contig) != 0) {
        for (int i = 0; i < n_in && st == GD_OK; i++) {
            cin[i] = *in[i];
            cinp[i] = &cin[i];
            if (gdp_is_contiguous(in[i])) continue;
            if (dense_bytes(in[i], &tmp_bytes[i]) != 0) {
                st = gd_fail(ctx, GD_ERR_INVALID, "%s: input %d is larger than fits in memory", op, i);
                break;
            }
            st = gd_backend_alloc(ctx, b, tmp_bytes[i], &tmp[i]);
            if (st != GD_OK) break;
            cin[i].data = tmp[i];
            gdp_set_contiguous(&cin[i]);
            const gdp_tensor *src[1] = {in[i]}, *dst[1] = {&cin[i]};
            st = gd_backend_run_op(ctx, backend, contig, 1, src, 1, dst, 0, NULL, stream, NULL);
        }
        nd.in = cinp;
    }
    int strided = 0;
    for (int i = 0; i < n_in; i++) strided |= !gdp_is_contiguous(nd.in[i]);
    if (k != NULL && strided && !(k->k.flags & GDP_KERNEL_STRIDED)) k = NULL;
    if (k != NULL && k->k.supports != NULL && !k->k.supports(b->plugin.backend, &nd)) k = NULL;
    if (st != GD_OK) {
        /* a contiguous copy failed; its message is in the context */
    } else if (k != NULL) {
        st = run_kernel(ctx, b, k, &nd, stream);
        if (st == GD_OK && on_backend != NULL) *on_backend = 1;
    } else if (ctx->strict && !b->is_ref) {
        char sig[256];
        st = gd_fail(ctx, GD_ERR_STRICT, "%s: no kernel on %s takes %s (strict mode)", n->op->name, b->name,
                     gd_node_signature(n, sig, sizeof sig));
    } else {
        nd.in = in;
        st = run_fallback(ctx, b, n->op, &nd, stream);
    }
    int any_tmp = 0;
    for (int i = 0; i < n_in; i++) any_tmp |= tmp[i] != NULL;
    if (any_tmp) {
        /* the copies may be freed once the kernel is done with them */
        if (b->has_dev && b->dev.synchronize != NULL) {
            gdp_err e = {.size = sizeof e};
            gdp_status ss = b->dev.synchronize(b->plugin.backend, stream, &e);
            if (ss != GDP_OK && st == GD_OK) st = dev_fail(ctx, b, "synchronize", ss, &e);
        }
        for (int i = 0; i < n_in; i++) gd_backend_free(b, tmp[i], tmp_bytes[i]);
    }
done:
    gd_graph_free(g);
    return st;
}
