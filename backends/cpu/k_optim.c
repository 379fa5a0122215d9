/* k_optim.c — the optimizer updates adamw_update (f32, and its mixed-precision forms with a
 * half copy of the weights) and sgd_update (f32, in place), and
 * clip_coef, the factor of clipping by global norm (f32; f16 and bf16 through k_half.c).
 * assign is a copy, in k_layout.c.
 *
 * Definitions are in src/ops/optim.c. Outputs may alias inputs (p' over p, moments over
 * moments): each element is read completely before it is written, as in the reference.
 * The arithmetic is the reference's, in double per element, so results match it to the
 * last bit. AdamW's three double divisions and square root per element make it bound by
 * the divider rather than by memory (about 6 cycles an element with AVX-512, in vectors
 * of 8): computed in f32 it would be several times faster, at the price of that exactness.
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

typedef struct opt_job {
    const gdp_node *n;
    double lr, b1, b2, eps, wd, bc1, bc2, momentum, gs;
    int nesterov;
} opt_job;

/* Elements go through in blocks of ADAM_BLOCK: widened into local double arrays, updated
 * there, stored back. The outputs alias the inputs (in place), so a single loop over the
 * tensors would not vectorize (gcc cannot prove the stores miss later loads); over the
 * local arrays each of the three loops is SIMD code, with the same arithmetic per element.
 *
 * Mixed precision: the gradient may be bf16 or f16 (the gradient of a half copy of the
 * weights), and an optional 7th input, that half copy, gets p' rounded to its dtype (4th
 * output, in place). The master weights and moments stay f32. An optional last f32 scalar
 * (7th without a copy, 8th with one) multiplies the gradient: clipping's factor. */
#define ADAM_BLOCK 256

static void adamw_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const opt_job *j = ctx;
    const gdp_node *nd = j->n;
    const float *P = nd->in[0]->data, *M = nd->in[2]->data, *V = nd->in[3]->data;
    const void *G = nd->in[1]->data;
    const int32_t gdt = nd->in[1]->dtype;
    float *Po = nd->out[0]->data, *Mo = nd->out[1]->data, *Vo = nd->out[2]->data;
    void *Co = nd->n_out > 3 ? nd->out[3]->data : NULL;
    const int32_t cdt = nd->n_out > 3 ? nd->out[3]->dtype : GDP_F32;
    const double lr = j->lr, b1 = j->b1, b2 = j->b2, eps = j->eps, wd = j->wd, bc1 = j->bc1, bc2 = j->bc2, gs = j->gs;
    double p[ADAM_BLOCK], g[ADAM_BLOCK], m[ADAM_BLOCK], v[ADAM_BLOCK];
    float h[ADAM_BLOCK];
    for (int64_t i0 = begin; i0 < end; i0 += ADAM_BLOCK) {
        int n = (int)(end - i0 < ADAM_BLOCK ? end - i0 : ADAM_BLOCK);
        if (gdt == GDP_F32) {
            for (int i = 0; i < n; i++) g[i] = ((const float *)G)[i0 + i] * gs;
        } else {
            gcpu_load_f32(gdt, G, i0, h, n);
            for (int i = 0; i < n; i++) g[i] = h[i] * gs;
        }
        for (int i = 0; i < n; i++) {
            p[i] = P[i0 + i];
            m[i] = M[i0 + i];
            v[i] = V[i0 + i];
        }
        for (int i = 0; i < n; i++) {
            double pi = p[i], gi = g[i], mi = m[i], vi = v[i];
            pi -= lr * wd * pi;
            mi = b1 * mi + (1.0 - b1) * gi;
            vi = b2 * vi + (1.0 - b2) * gi * gi;
            pi -= lr * (mi / bc1) / (sqrt(vi / bc2) + eps);
            p[i] = pi;
            m[i] = mi;
            v[i] = vi;
        }
        for (int i = 0; i < n; i++) {
            Po[i0 + i] = (float)p[i];
            Mo[i0 + i] = (float)m[i];
            Vo[i0 + i] = (float)v[i];
        }
        if (Co != NULL) { /* the copy: p' as stored, rounded to the copy's dtype */
            for (int i = 0; i < n; i++) h[i] = Po[i0 + i];
            gcpu_store_f32(cdt, Co, i0, h, n);
        }
    }
}

/* The gradient scale's input: the last, when it is an f32 scalar after the six (a copy is
 * f16 or bf16); -1 without one. */
static int adamw_gscale(const gdp_node *n)
{
    return n->n_in > 6 && n->in[n->n_in - 1]->dtype == GDP_F32 ? n->n_in - 1 : -1;
}

// (p, g, m, v, step, lr [, copy] [, gscale]) -> (p', m', v' [, copy']): PyTorch AdamW, step 1-based
static gdp_status k_adamw(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    opt_job j = {.n = n};
    const int is = adamw_gscale(n);
    j.gs = is >= 0 ? ((const float *)n->in[is]->data)[0] : 1.0;
    double t = ((const float *)n->in[4]->data)[0];
    j.lr = ((const float *)n->in[5]->data)[0];
    j.b1 = gdp_attr_float(&n->attrs, "beta1", 0.9);
    j.b2 = gdp_attr_float(&n->attrs, "beta2", 0.999);
    j.eps = gdp_attr_float(&n->attrs, "eps", 1e-8);
    j.wd = gdp_attr_float(&n->attrs, "weight_decay", 0.0);
    j.bc1 = 1.0 - pow(j.b1, t);
    j.bc2 = 1.0 - pow(j.b2, t);
    gcpu_parallel_for_grain(gdp_numel(n->in[0]), GCPU_GRAIN_ELEMS / 4, adamw_task, &j);
    return GDP_OK;
}

/* The mixed forms: p, m, v, step, lr and their outputs f32; g f32 or the copy's dtype
 * (any half dtype without a copy); the copy (7th input, 4th output) bf16 or f16, of p's
 * shape. */
static int s_adamw_mixed(void *be, const gdp_node *n)
{
    (void)be;
    const int copy = n->n_out == 4;
    if (n->n_in < 6 + copy || n->n_in > 7 + copy || n->n_out != 3 + copy) return 0;
    const int is = adamw_gscale(n);
    if (n->n_in == 7 + copy && (is < 0 || gdp_numel(n->in[is]) != 1)) return 0;
    const int32_t cdt = copy ? n->in[6]->dtype : n->in[1]->dtype;
    if (copy && (n->out[3]->dtype != cdt || gdp_numel(n->in[6]) != gdp_numel(n->in[0]))) return 0;
    if (!gdp_is_half(cdt) || (n->in[1]->dtype != GDP_F32 && n->in[1]->dtype != cdt)) return 0;
    for (int i = 0; i < 6; i++)
        if (i != 1 && n->in[i]->dtype != GDP_F32) return 0;
    for (int k = 0; k < 3; k++)
        if (n->out[k]->dtype != GDP_F32) return 0;
    return 1;
}

static void sgd_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const opt_job *j = ctx;
    const float *P = j->n->in[0]->data, *G = j->n->in[1]->data, *B = j->n->in[2]->data;
    float *Po = j->n->out[0]->data, *Bo = j->n->out[1]->data;
    for (int64_t i = begin; i < end; i++) {
        double p = P[i], g = G[i], buf = B[i];
        g += j->wd * p;
        buf = j->momentum * buf + g;
        double update = j->nesterov ? g + j->momentum * buf : buf;
        Po[i] = (float)(p - j->lr * update);
        Bo[i] = (float)buf;
    }
}

// (p, g, buf, lr) -> (p', buf'): PyTorch SGD with momentum, weight decay, nesterov
static gdp_status k_sgd(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    opt_job j = {.n = n};
    j.lr = ((const float *)n->in[3]->data)[0];
    j.momentum = gdp_attr_float(&n->attrs, "momentum", 0.0);
    j.wd = gdp_attr_float(&n->attrs, "weight_decay", 0.0);
    j.nesterov = gdp_attr_int(&n->attrs, "nesterov", 0) != 0;
    gcpu_parallel_for_grain(gdp_numel(n->in[0]), GCPU_GRAIN_ELEMS / 2, sgd_task, &j);
    return GDP_OK;
}

// (norm) -> min(1, max_norm / (norm + 1e-6)), a scalar; a NaN norm gives NaN, as the reference
static gdp_status k_clip_coef(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    double norm = ((const float *)n->in[0]->data)[0];
    double coef = gdp_attr_float(&n->attrs, "max_norm", 1.0) / (norm + 1e-6);
    ((float *)n->out[0]->data)[0] = (float)(coef > 1.0 ? 1.0 : coef);
    return GDP_OK;
}

static int s_f32(void *backend, const gdp_node *n)
{
    (void)backend;
    return gcpu_all_f32(n);
}

GCPU_HALF_OF(k_clip_coef, s_f32, NULL)

gdp_status gcpu_register_optim(gcpu_regctx *r, gdp_err *err)
{
    gdp_status s = gcpu_reg(r, "adamw_update", GDP_F32, k_adamw, s_f32, NULL, err);
    static const char *const mixed[] = {
        "f32,bf16,f32,f32,f32,f32,bf16->f32,f32,f32,bf16", "f32,f32,f32,f32,f32,f32,bf16->f32,f32,f32,bf16",
        "f32,f16,f32,f32,f32,f32,f16->f32,f32,f32,f16",    "f32,f32,f32,f32,f32,f32,f16->f32,f32,f32,f16",
        "f32,bf16,f32,f32,f32,f32,bf16,f32->f32,f32,f32,bf16", "f32,f16,f32,f32,f32,f32,f16,f32->f32,f32,f32,f16",
        "f32,bf16,f32,f32,f32,f32->f32,f32,f32",           "f32,f16,f32,f32,f32,f32->f32,f32,f32",
        "f32,bf16,f32,f32,f32,f32,f32->f32,f32,f32",       "f32,f16,f32,f32,f32,f32,f32->f32,f32,f32",
    };
    for (int i = 0; i < 10 && s == GDP_OK; i++)
        s = gcpu_reg_mixed(r, "adamw_update", mixed[i], 0, k_adamw, s_adamw_mixed, NULL, err);
    if (s == GDP_OK) s = gcpu_reg(r, "sgd_update", GDP_F32, k_sgd, s_f32, NULL, err);
    if (s == GDP_OK) s = gcpu_reg_floats(r, "clip_coef", GCPU_FLOATS(k_clip_coef, s_f32, NULL), 0, NULL, err);
    return s;
}
