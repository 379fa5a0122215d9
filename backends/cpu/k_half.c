/* k_half.c — f16 and bf16 kernels made of f32 ones (see kernels.h, GCPU_HALF_OF).
 *
 * The reference runs a half-precision node by widening its f16/bf16 operands to f32,
 * running its f32 kernel and rounding the outputs back to nearest even (src/core/backend.c,
 * gd_ref_launch). Doing exactly that around this backend's f32 kernels makes every one of
 * them a half kernel that agrees with the oracle as well as the f32 kernel does, at the
 * cost of two conversion passes, which are cheap next to anything but the simplest ops.
 *
 * The f32 copies live in one per-thread scratch buffer of the calling thread (slot
 * GCPU_SLOT_HALF, which no f32 kernel uses), kept between launches: a step allocates
 * nothing once the buffer has grown to its largest node. Conversions are split over the
 * pool by element; each element's conversion is independent, so thread count does not
 * change a bit.
 */
#include "kernels.h"


/* Offsets into the scratch buffer are rounded up to a cache line. */
static size_t f32_bytes(const gdp_tensor *t) { return ((size_t)gdp_numel(t) * sizeof(float) + 63) & ~(size_t)63; }

typedef struct conv_job {
    int32_t dt;
    const void *src;
    void *dst;
    int widen; /* 1: dt -> f32, 0: f32 -> dt */
} conv_job;

static void conv_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const conv_job *j = ctx;
    if (j->widen) gcpu_load_f32(j->dt, j->src, begin, (float *)j->dst + begin, end - begin);
    else gcpu_store_f32(j->dt, j->dst, begin, (const float *)j->src + begin, end - begin);
}

static void convert(int32_t dt, const void *src, void *dst, int64_t n, int widen)
{
    conv_job j = {.dt = dt, .src = src, .dst = dst, .widen = widen};
    gcpu_parallel_for_grain(n, GCPU_GRAIN_ELEMS, conv_task, &j);
}

gdp_status gcpu_half_launch(gdp_launch_fn f32, void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    if (n->n_in > GDP_MAX_INPUTS || n->n_out > GDP_MAX_OUTPUTS)
        return gdp_fail(err, GDP_ERR_INVALID, "%s: %d inputs, %d outputs", n->op, n->n_in, n->n_out);
    gdp_tensor in[GDP_MAX_INPUTS], out[GDP_MAX_OUTPUTS];
    const gdp_tensor *inp[GDP_MAX_INPUTS], *outp[GDP_MAX_OUTPUTS];
    size_t in_at[GDP_MAX_INPUTS], out_at[GDP_MAX_OUTPUTS], total = 0;
    int alias[GDP_MAX_OUTPUTS];
    /* plan: where each f32 copy goes */
    for (int i = 0; i < n->n_in; i++) {
        in[i] = *n->in[i];
        inp[i] = &in[i];
        if (!gdp_is_half(in[i].dtype)) continue;
        in_at[i] = total;
        total += f32_bytes(&in[i]);
    }
    for (int k = 0; k < n->n_out; k++) {
        out[k] = *n->out[k];
        outp[k] = &out[k];
        alias[k] = -1;
        if (!gdp_is_half(out[k].dtype)) continue;
        for (int i = 0; i < n->n_in; i++)
            if (gdp_is_half(n->in[i]->dtype) && n->in[i]->data == out[k].data) alias[k] = i;
        if (alias[k] >= 0) continue;
        out_at[k] = total;
        total += f32_bytes(&out[k]);
    }
    char *buf = gcpu_scratch(0, GCPU_SLOT_HALF, total > 0 ? total : 64);
    if (buf == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "%s: out of memory for f32 copies", n->op);
    for (int i = 0; i < n->n_in; i++) {
        if (!gdp_is_half(in[i].dtype)) continue;
        in[i].data = buf + in_at[i];
        in[i].dtype = GDP_F32;
        gdp_set_contiguous(&in[i]);
        convert(n->in[i]->dtype, n->in[i]->data, in[i].data, gdp_numel(&in[i]), 1);
    }
    for (int k = 0; k < n->n_out; k++) {
        if (!gdp_is_half(out[k].dtype)) continue;
        out[k].data = alias[k] >= 0 ? in[alias[k]].data : buf + out_at[k];
        out[k].dtype = GDP_F32;
    }
    gdp_node n2 = *n;
    n2.in = inp;
    n2.out = outp;
    gdp_status s = f32(be, &n2, stream, err);
    if (s != GDP_OK) return s;
    for (int k = 0; k < n->n_out; k++)
        if (gdp_is_half(n->out[k]->dtype)) convert(n->out[k]->dtype, out[k].data, n->out[k]->data, gdp_numel(&out[k]), 0);
    return GDP_OK;
}

int gcpu_half_supports(gdp_supports_fn f32, void *be, const gdp_node *n)
{
    if (n->n_in > GDP_MAX_INPUTS || n->n_out > GDP_MAX_OUTPUTS) return 0;
    if (f32 == NULL) return 1;
    gdp_tensor in[GDP_MAX_INPUTS], out[GDP_MAX_OUTPUTS];
    const gdp_tensor *inp[GDP_MAX_INPUTS], *outp[GDP_MAX_OUTPUTS];
    for (int i = 0; i < n->n_in; i++) {
        in[i] = *n->in[i];
        inp[i] = &in[i];
        if (gdp_is_half(in[i].dtype)) in[i].dtype = GDP_F32;
    }
    for (int k = 0; k < n->n_out; k++) {
        out[k] = *n->out[k];
        outp[k] = &out[k];
        if (gdp_is_half(out[k].dtype)) out[k].dtype = GDP_F32;
    }
    gdp_node n2 = *n;
    n2.in = inp;
    n2.out = outp;
    return f32(be, &n2);
}

gdp_status gcpu_reg_floats(const gdp_host *host, const char *op, gdp_launch_fn launch, gdp_supports_fn supports,
                           gdp_launch_fn half, gdp_supports_fn half_supports, const char *const *attrs, gdp_err *err)
{
    gdp_status s = gcpu_reg(host, op, GDP_F32, launch, supports, attrs, err);
    if (s == GDP_OK) s = gcpu_reg(host, op, GDP_F16, half, half_supports, attrs, err);
    if (s == GDP_OK) s = gcpu_reg(host, op, GDP_BF16, half, half_supports, attrs, err);
    return s;
}
