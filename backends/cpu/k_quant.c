/* k_quant.c — linear layers over int8 weights (linear_q8, linear_w8a8) on the CPU.
 *
 * Decoding reads every weight once per token, so int8 weights move a quarter of the bytes
 * of f32 ones. Work is split over output channels (each thread a block of weight rows,
 * every row of x against them), so each weight is read once per launch whatever the row
 * count. Weight-only: the dot products in f32 over 16 interleaved partial sums (added in a
 * fixed order: independent of the thread count), then the row's scale and bias. W8A8:
 * every row of x is quantized first (gradus_semantics.h's rounding, the reference's bytes),
 * then exact int32 dot products and the f32 steps of gdp_q8_dequant, as the reference.
 * Halves: x, b and y widened through f32 by k_half.c; the i8 and f32 operands pass as they
 * are.
 */
#include "gradus_semantics.h"
#include "kernels.h"

#include <string.h>

#define LANES 16

typedef struct q8_job {
    const float *x, *scale, *bias, *sx;
    const int8_t *w, *xq;
    float *y;
    int64_t R, in, out;
} q8_job;

/* Rows of x must be contiguous and back to back, W (out, in) contiguous. */
static int q8_layout_ok(void *backend, const gdp_node *n)
{
    (void)backend;
    for (int i = 0; i < n->n_in; i++)
        if (!gdp_is_contiguous(n->in[i])) return 0;
    return n->in[0]->dtype == GDP_F32 && n->in[1]->dtype == GDP_I8 && n->in[2]->dtype == GDP_F32 &&
           n->out[0]->dtype == GDP_F32 && (n->n_in < 4 || n->in[3]->dtype == GDP_F32);
}

static void q8_rows(void *ctx, int64_t n0, int64_t n1, int tid)
{
    (void)tid;
    const q8_job *j = ctx;
    const int64_t K = j->in, K16 = K / LANES * LANES;
    for (int64_t n = n0; n < n1; n++) {
        const int8_t *w = j->w + n * K;
        for (int64_t r = 0; r < j->R; r++) {
            const float *x = j->x + r * K;
            float acc[LANES] = {0};
            for (int64_t k = 0; k < K16; k += LANES)
                for (int l = 0; l < LANES; l++) acc[l] += x[k + l] * (float)w[k + l];
            float sum = 0;
            for (int l = 0; l < LANES; l++) sum += acc[l];
            for (int64_t k = K16; k < K; k++) sum += x[k] * (float)w[k];
            j->y[r * j->out + n] = sum * j->scale[n] + (j->bias != NULL ? j->bias[n] : 0.0f);
        }
    }
}

static void w8a8_rows(void *ctx, int64_t n0, int64_t n1, int tid)
{
    (void)tid;
    const q8_job *j = ctx;
    const int64_t K = j->in;
    for (int64_t n = n0; n < n1; n++) {
        const int8_t *w = j->w + n * K;
        for (int64_t r = 0; r < j->R; r++) {
            const int8_t *xq = j->xq + r * K;
            int32_t dot = 0;
            for (int64_t k = 0; k < K; k++) dot += (int32_t)xq[k] * (int32_t)w[k];
            float v = gdp_q8_dequant(dot, j->sx[r], j->scale[n]);
            if (j->bias != NULL) v += j->bias[n];
            j->y[r * j->out + n] = v;
        }
    }
}

static void quantize_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    (void)tid;
    const q8_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * j->in;
        float amax = 0;
        for (int64_t k = 0; k < j->in; k++) amax = gdp_q8_amax(amax, x[k]);
        float s = gdp_q8_scale(amax);
        ((float *)j->sx)[r] = s;
        for (int64_t k = 0; k < j->in; k++) ((int8_t *)j->xq)[r * j->in + k] = gdp_q8(x[k], s);
    }
}

static q8_job job_of(const gdp_node *n)
{
    const gdp_tensor *w = n->in[1];
    q8_job j = {.x = n->in[0]->data, .w = w->data, .scale = n->in[2]->data,
                .bias = n->n_in > 3 ? n->in[3]->data : NULL, .y = n->out[0]->data, .in = w->shape[1],
                .out = w->shape[0]};
    j.R = j.in > 0 ? gdp_numel(n->in[0]) / j.in : 0;
    return j;
}

/* Output channels per chunk: enough that a chunk reads ~64 KiB of weights, and all of them
 * (one thread) for a product too small to repay waking the pool — as the f32 GEMV does. */
static int64_t grain_of(const q8_job *j)
{
    if (gcpu_in_parallel() || (double)j->R * (double)j->out * (double)j->in < (double)GCPU_PARALLEL_MIN_FLOPS)
        return j->out > 0 ? j->out : 1;
    int64_t g = 65536 / (j->in > 0 ? j->in : 1);
    return g < 16 ? 16 : g;
}

static gdp_status k_linear_q8(void *backend, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)backend, (void)stream, (void)err;
    q8_job j = job_of(n);
    if (j.R > 0 && j.out > 0) gcpu_parallel_for_grain(j.out, grain_of(&j), q8_rows, &j);
    return GDP_OK;
}

/* W8A8's scratch: each row of x quantized, and its scale */
static size_t ws_w8a8(void *backend, const gdp_node *n)
{
    (void)backend;
    q8_job j = job_of(n);
    return (size_t)(j.R * j.in) + 64 + sizeof(float) * (size_t)(j.R + 1);
}

static gdp_status k_linear_w8a8(void *backend, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)backend, (void)stream;
    q8_job j = job_of(n);
    if (j.R == 0 || j.out == 0) return GDP_OK;
    if (n->workspace == NULL || n->workspace_bytes < ws_w8a8(backend, n))
        return gdp_fail(err, GDP_ERR_INVALID, "%s: no workspace for the quantized activations", n->op);
    float *sx = n->workspace;
    j.sx = sx;
    j.xq = (int8_t *)(sx + j.R + 1);
    gcpu_parallel_for_grain(j.R, 1, quantize_rows, &j);
    gcpu_parallel_for_grain(j.out, grain_of(&j), w8a8_rows, &j);
    return GDP_OK;
}

GCPU_HALF_OF(k_linear_q8, q8_layout_ok, NULL)
GCPU_HALF_OF(k_linear_w8a8, q8_layout_ok, ws_w8a8)

gdp_status gcpu_register_quant(gcpu_regctx *r, gdp_err *err)
{
    static const char *const half[] = {"bf16,i8,f32->bf16", "bf16,i8,f32,bf16->bf16", "f16,i8,f32->f16",
                                       "f16,i8,f32,f16->f16"};
    gdp_status s = gcpu_register(r, &(gcpu_kdef){"linear_q8", GDP_F32, 0, k_linear_q8, q8_layout_ok, NULL, NULL, NULL}, err);
    if (s == GDP_OK)
        s = gcpu_register(r, &(gcpu_kdef){"linear_w8a8", GDP_F32, 0, k_linear_w8a8, q8_layout_ok, ws_w8a8, NULL, NULL},
                          err);
    for (int i = 0; i < 4 && s == GDP_OK; i++) {
        s = gcpu_reg_mixed(r, "linear_q8", half[i], 0, k_linear_q8_half, k_linear_q8_half_ok, k_linear_q8_half_ws, err);
        if (s == GDP_OK)
            s = gcpu_reg_mixed(r, "linear_w8a8", half[i], 0, k_linear_w8a8_half, k_linear_w8a8_half_ok,
                               k_linear_w8a8_half_ws, err);
    }
    return s;
}
