/* k_optim.c — the optimizer updates adamw_update and sgd_update (f32, in place), and
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
    double lr, b1, b2, eps, wd, bc1, bc2, momentum;
    int nesterov;
} opt_job;

/* Elements go through in blocks of ADAM_BLOCK: widened into local double arrays, updated
 * there, stored back. The outputs alias the inputs (in place), so a single loop over the
 * tensors would not vectorize (gcc cannot prove the stores miss later loads); over the
 * local arrays each of the three loops is SIMD code, with the same arithmetic per element. */
#define ADAM_BLOCK 256

static void adamw_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const opt_job *j = ctx;
    const float *P = j->n->in[0]->data, *G = j->n->in[1]->data, *M = j->n->in[2]->data, *V = j->n->in[3]->data;
    float *Po = j->n->out[0]->data, *Mo = j->n->out[1]->data, *Vo = j->n->out[2]->data;
    const double lr = j->lr, b1 = j->b1, b2 = j->b2, eps = j->eps, wd = j->wd, bc1 = j->bc1, bc2 = j->bc2;
    double p[ADAM_BLOCK], g[ADAM_BLOCK], m[ADAM_BLOCK], v[ADAM_BLOCK];
    for (int64_t i0 = begin; i0 < end; i0 += ADAM_BLOCK) {
        int n = (int)(end - i0 < ADAM_BLOCK ? end - i0 : ADAM_BLOCK);
        for (int i = 0; i < n; i++) {
            p[i] = P[i0 + i];
            g[i] = G[i0 + i];
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
    }
}

// (p, g, m, v, step, lr) -> (p', m', v'): PyTorch AdamW, step 1-based
static gdp_status k_adamw(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    opt_job j = {.n = n};
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

GCPU_HALF_OF(k_clip_coef, s_f32)

gdp_status gcpu_register_optim(const gdp_host *host, gdp_err *err)
{
    gdp_status s = gcpu_reg(host, "adamw_update", GDP_F32, k_adamw, s_f32, NULL, err);
    if (s == GDP_OK) s = gcpu_reg(host, "sgd_update", GDP_F32, k_sgd, s_f32, NULL, err);
    if (s == GDP_OK) s = GCPU_REG_FLOATS(host, "clip_coef", k_clip_coef, s_f32, NULL, err);
    return s;
}
