/* k_half.c — f16 and bf16 kernels made of f32 ones (see kernels.h, GCPU_HALF_OF).
 *
 * The reference runs a half-precision node by widening its f16/bf16 operands to f32,
 * running its f32 kernel and rounding the outputs back to nearest even (src/core/backend.c,
 * gd_ref_launch). Doing exactly that around this backend's f32 kernels makes every one of
 * them a half kernel that agrees with the oracle as well as the f32 kernel does, at the
 * cost of two conversion passes, which are cheap next to anything but the simplest ops.
 *
 * The f32 copies live in the node's workspace, which the host plans with the program
 * (gcpu_half_workspace says how much): nothing is allocated while a program runs. The
 * workspace starts with the f32 kernel's own (for the f32 node), then one contiguous copy
 * per half input, then one per half output. Conversions are split over the pool by
 * element; each element's conversion is independent, so thread count does not change a
 * bit. Mixed-precision forms (bf16 inputs, an f32 output) go through here as well: only
 * the half operands are converted.
 */
#include "kernels.h"

/* ---- conversions ------------------------------------------------------------------------- */

typedef struct conv_job {
    const gdp_tensor *t; /* the half tensor (its shape and strides) */
    float *f;            /* the contiguous f32 copy */
    int widen;           /* 1: t -> f, 0: f -> t (t contiguous then) */
} conv_job;

/* Elements [begin, end) of a strided t into f, row by row of its last dim. */
static void widen_strided(const gdp_tensor *t, float *f, int64_t begin, int64_t end)
{
    int nd = t->ndim, in = nd - 1;
    int64_t L = t->shape[in], s = t->stride[in], idx[GDP_MAX_DIMS], off = 0, rem = begin / L;
    for (int d = in - 1; d >= 0; d--) {
        idx[d] = rem % t->shape[d];
        rem /= t->shape[d];
        off += idx[d] * t->stride[d];
    }
    const uint16_t *src = t->data;
    int64_t i = begin, c = begin % L;
    while (i < end) {
        int64_t n = L - c < end - i ? L - c : end - i;
        const uint16_t *row = src + off + c * s;
        if (t->dtype == GDP_F16)
            for (int64_t k = 0; k < n; k++) f[i + k] = gdp_f16_to_f32(row[k * s]);
        else
            for (int64_t k = 0; k < n; k++) f[i + k] = gdp_bf16_to_f32(row[k * s]);
        i += n;
        c = 0;
        for (int d = in - 1; d >= 0; d--) { /* next row */
            off += t->stride[d];
            if (++idx[d] < t->shape[d]) break;
            off -= t->stride[d] * t->shape[d];
            idx[d] = 0;
        }
    }
}

static void conv_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const conv_job *j = ctx;
    if (!j->widen)
        gcpu_store_f32(j->t->dtype, j->t->data, begin, j->f + begin, end - begin);
    else if (gdp_is_contiguous(j->t))
        gcpu_load_f32(j->t->dtype, j->t->data, begin, j->f + begin, end - begin);
    else
        widen_strided(j->t, j->f, begin, end);
}

static void convert(const gdp_tensor *t, float *f, int widen)
{
    conv_job j = {.t = t, .f = f, .widen = widen};
    gcpu_parallel_for_grain(gdp_numel(t), GCPU_GRAIN_ELEMS, conv_task, &j);
}

/* ---- the f32 node ------------------------------------------------------------------------ */

typedef struct f32_node {
    gdp_node n;
    gdp_tensor in[GDP_MAX_INPUTS], out[GDP_MAX_OUTPUTS];
    const gdp_tensor *inp[GDP_MAX_INPUTS], *outp[GDP_MAX_OUTPUTS];
} f32_node;

/* n with its f16/bf16 operands as contiguous f32 (data pointers still n's). 0 when n has
 * more operands than the ABI allows. */
static int make_f32(const gdp_node *n, f32_node *f)
{
    if (n->n_in > GDP_MAX_INPUTS || n->n_out > GDP_MAX_OUTPUTS) return 0;
    for (int i = 0; i < n->n_in; i++) {
        f->in[i] = *n->in[i];
        f->inp[i] = &f->in[i];
        if (!gdp_is_half(f->in[i].dtype)) continue;
        f->in[i].dtype = GDP_F32;
        gdp_set_contiguous(&f->in[i]);
    }
    for (int k = 0; k < n->n_out; k++) {
        f->out[k] = *n->out[k];
        f->outp[k] = &f->out[k];
        if (gdp_is_half(f->out[k].dtype)) f->out[k].dtype = GDP_F32;
    }
    f->n = *n;
    f->n.in = f->inp;
    f->n.out = f->outp;
    f->n.workspace = NULL;
    f->n.workspace_bytes = 0;
    return 1;
}

/* The f32 kernel's part of the workspace, rounded up to a cache line. */
static size_t inner_bytes(gdp_workspace_fn f32, void *be, const gdp_node *f)
{
    return f32 != NULL ? gcpu_ws_piece((int64_t)f32(be, f), 1) : 0;
}

size_t gcpu_half_workspace(gdp_workspace_fn f32, void *be, const gdp_node *n)
{
    f32_node f;
    if (!make_f32(n, &f)) return 0;
    size_t total = inner_bytes(f32, be, &f.n);
    for (int i = 0; i < n->n_in; i++)
        if (gdp_is_half(n->in[i]->dtype)) total += gcpu_ws_piece(gdp_numel(n->in[i]), sizeof(float));
    /* which output is in place is not known before data pointers are: room for each */
    for (int k = 0; k < n->n_out; k++)
        if (gdp_is_half(n->out[k]->dtype)) total += gcpu_ws_piece(gdp_numel(n->out[k]), sizeof(float));
    return total;
}

gdp_status gcpu_half_launch(gdp_launch_fn f32, void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    f32_node f;
    if (!make_f32(n, &f)) return gdp_fail(err, GDP_ERR_INVALID, "%s: %d inputs, %d outputs", n->op, n->n_in, n->n_out);
    /* the layout gcpu_half_workspace planned; the f32 kernel's part is n->workspace_bytes
     * less the copies */
    size_t copies = 0;
    for (int i = 0; i < n->n_in; i++)
        if (gdp_is_half(n->in[i]->dtype)) copies += gcpu_ws_piece(gdp_numel(n->in[i]), sizeof(float));
    for (int k = 0; k < n->n_out; k++)
        if (gdp_is_half(n->out[k]->dtype)) copies += gcpu_ws_piece(gdp_numel(n->out[k]), sizeof(float));
    if (copies > 0 && (n->workspace == NULL || n->workspace_bytes < copies))
        return gdp_fail(err, GDP_ERR_INVALID, "%s: %zu bytes of workspace for f32 copies of f16/bf16 operands, %zu needed",
                        n->op, n->workspace_bytes, copies);
    char *ws = n->workspace;
    size_t inner = n->workspace_bytes - copies;
    if (inner > 0) {
        f.n.workspace = ws;
        f.n.workspace_bytes = inner;
    }
    char *at = ws != NULL ? ws + inner : NULL;
    for (int i = 0; i < n->n_in; i++) {
        if (!gdp_is_half(n->in[i]->dtype)) continue;
        f.in[i].data = at;
        at += gcpu_ws_piece(gdp_numel(n->in[i]), sizeof(float));
        convert(n->in[i], f.in[i].data, 1);
    }
    for (int k = 0; k < n->n_out; k++) {
        if (!gdp_is_half(n->out[k]->dtype)) continue;
        int alias = -1;
        for (int i = 0; i < n->n_in; i++)
            if (gdp_is_half(n->in[i]->dtype) && n->in[i]->data == n->out[k]->data) alias = i;
        f.out[k].data = alias >= 0 ? f.in[alias].data : at;
        at += gcpu_ws_piece(gdp_numel(n->out[k]), sizeof(float));
    }
    gdp_status s = f32(be, &f.n, stream, err);
    if (s != GDP_OK) return s;
    for (int k = 0; k < n->n_out; k++)
        if (gdp_is_half(n->out[k]->dtype)) convert(n->out[k], f.out[k].data, 0);
    return GDP_OK;
}

int gcpu_half_supports(gdp_supports_fn f32, void *be, const gdp_node *n)
{
    f32_node f;
    if (!make_f32(n, &f)) return 0;
    return f32 == NULL || f32(be, &f.n);
}

gdp_status gcpu_reg_floats(gcpu_regctx *r, const char *op, gcpu_floats k, uint32_t flags, const char *const *attrs,
                           gdp_err *err)
{
    gcpu_kdef d = {.op = op, .dtype = GDP_F32, .flags = flags, .launch = k.f32, .supports = k.f32_ok,
                   .workspace = k.f32_ws, .attrs = attrs};
    gdp_status s = gcpu_register(r, &d, err);
    d.launch = k.half;
    d.supports = k.half_ok;
    d.workspace = k.half_ws;
    d.dtype = GDP_F16;
    if (s == GDP_OK) s = gcpu_register(r, &d, err);
    d.dtype = GDP_BF16;
    if (s == GDP_OK) s = gcpu_register(r, &d, err);
    return s;
}
