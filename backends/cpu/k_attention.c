/* k_attention.c — rope, attention and attention_grad (f32).
 *
 * Definitions are in src/ops/attention.c: q (B, H, T, D), k and v (B, Hkv, S, D), query
 * head h reads key/value head h / (H / Hkv); causal query t sees keys s <= t + S - T (a
 * prefix, empty when that is negative, in which case the row's output and gradients are
 * zero).
 *
 * attention: work items are (b, h, block of query rows). A block's scores are one GEMM
 * (QB x n) against the head's keys, the softmax is taken row by row in scratch, and the
 * output is a second GEMM (QB x D) written in place.
 *
 * attention_grad, in two passes, as FlashAttention-2 splits it so that no sum is shared
 * between threads:
 *   1. per (b, h, query block): P and dP = dy V^T, the row terms pdp = sum_s P dP, and
 *      dq = scale (P * (dP - pdp)) K; each row's max, 1/sum and pdp are kept;
 *   2. per (b, kv head, block of keys): for every query head of the group and every query
 *      block in order, P and dP of that tile again, dv += P^T dy and dk += scale dS^T q,
 *      accumulated by GEMMs with beta = 1 in a fixed order.
 * Every block size is a function of the shape, and the GEMM's bits do not depend on the
 * thread count, so neither do these.
 *
 * The exponentials use a polynomial (below) that vectorizes; its error, a few units in
 * the last place, is far inside the op's tolerance.
 */
#include "gemm.h"
#include "kernels.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* ---- rope ----------------------------------------------------------------------------------- */

typedef struct rope_job {
    const float *x;
    float *y;
    int64_t B, T, H, D, half, pos_offset;
    double theta, sign;
    int interleaved;
    float *cs; /* (T, half, 2): cos, sign * sin */
} rope_job;

/* The angles as the reference computes them, in double, rounded once to float. */
static void rope_table(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const rope_job *j = ctx;
    for (int64_t t = begin; t < end; t++) {
        double pos = (double)(t + j->pos_offset);
        float *cs = j->cs + t * 2 * j->half;
        for (int64_t i = 0; i < j->half; i++) {
            double angle = pos * pow(j->theta, -2.0 * (double)i / (double)j->D);
            cs[2 * i] = (float)cos(angle);
            cs[2 * i + 1] = (float)(j->sign * sin(angle));
        }
    }
}

// rows (b, t) of x (B, T, H, D): each head's pairs rotated by the angles of t
static void rope_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const rope_job *j = ctx;
    const int64_t H = j->H, D = j->D, half = j->half;
    for (int64_t bt = begin; bt < end; bt++) {
        const float *cs = j->cs + (bt % j->T) * 2 * half;
        for (int64_t h = 0; h < H; h++) {
            const float *x = j->x + (bt * H + h) * D;
            float *y = j->y + (bt * H + h) * D;
            if (j->interleaved) {
                for (int64_t i = 0; i < half; i++) {
                    float x0 = x[2 * i], x1 = x[2 * i + 1], c = cs[2 * i], s = cs[2 * i + 1];
                    y[2 * i] = x0 * c - x1 * s;
                    y[2 * i + 1] = x0 * s + x1 * c;
                }
            } else {
                for (int64_t i = 0; i < half; i++) {
                    float x0 = x[i], x1 = x[i + half], c = cs[2 * i], s = cs[2 * i + 1];
                    y[i] = x0 * c - x1 * s;
                    y[i + half] = x0 * s + x1 * c;
                }
            }
        }
    }
}

static gdp_status k_rope(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    const gdp_tensor *x = &n->in[0];
    rope_job j = {.x = x->data, .y = n->out[0].data, .B = x->shape[0], .T = x->shape[1], .H = x->shape[2],
                  .D = x->shape[3]};
    j.half = j.D / 2;
    j.theta = gdp_attr_float(&n->attrs, "theta", 10000.0);
    j.interleaved = gdp_attr_int(&n->attrs, "interleaved", 1) != 0;
    j.pos_offset = gdp_attr_int(&n->attrs, "pos_offset", 0);
    j.sign = gdp_attr_int(&n->attrs, "inverse", 0) ? -1.0 : 1.0;
    if (gdp_numel(x) == 0 || j.half == 0) return GDP_OK;
    /* the table is (T, D) floats in the caller's scratch; the row pass needs no other */
    j.cs = gcpu_scratch(0, GCPU_SLOT_KERNEL2, sizeof(float) * (size_t)(j.T * 2 * j.half));
    if (j.cs == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "rope: no memory for %lld angles", (long long)(j.T * j.half));
    /* a cos and a sin in double cost some 50 ns */
    gcpu_parallel_for_grain(j.T, GCPU_GRAIN_ELEMS / (8 * j.half) + 1, rope_table, &j);
    gcpu_parallel_for_grain(j.B * j.T, GCPU_GRAIN_ELEMS / (j.H * j.D) + 1, rope_rows, &j);
    return GDP_OK;
}

static int s_rope(void *be, const gdp_node *n)
{
    (void)be;
    return gcpu_all_f32(n) && n->in[0].ndim == 4 && n->in[0].shape[3] % 2 == 0;
}

/* ---- shared by attention and attention_grad ------------------------------------------------- */

/* e^x for x <= 0 (a score minus its row's maximum), in operations that vectorize:
 * x = n ln2 + r with |r| <= ln2/2, e^r by the Cephes expf polynomial, times 2^n. Below
 * -87 the result is clamped to about 1.6e-38 instead of the tiny value exp() gives; to a
 * softmax both are nothing. A NaN comes back as NaN. */
static inline float exp_neg(float x)
{
    float xc = x >= -87.0f ? x : -87.0f;
    float fn = floorf(xc * 1.44269504088896341f + 0.5f);
    float r = xc - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float e = p * r * r + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)fn + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, 4);
    return x == x ? e * two_n : x;
}

typedef struct attn_dims {
    int64_t B, H, T, D, Hkv, S, group;
    int causal;
    float scale;
} attn_dims;

static attn_dims dims_of(const gdp_node *n, const gdp_tensor *q, const gdp_tensor *k)
{
    attn_dims a = {q->shape[0], q->shape[1], q->shape[2], q->shape[3], k->shape[1], k->shape[2], 1, 0, 0};
    a.group = a.Hkv > 0 ? a.H / a.Hkv : 1;
    a.causal = gdp_attr_int(&n->attrs, "causal", 0) != 0;
    double scale = gdp_attr_float(&n->attrs, "scale", 0.0);
    if (!(scale > 0)) scale = 1.0 / sqrt((double)a.D);
    a.scale = (float)scale;
    return a;
}

/* How many keys query t sees: a prefix of the S keys. */
static inline int64_t visible(const attn_dims *a, int64_t t)
{
    if (!a->causal) return a->S;
    int64_t n = t + a->S - a->T + 1;
    return n < 0 ? 0 : n > a->S ? a->S : n;
}

/* Query rows per block: enough for the GEMM's register tile, few enough that a block's
 * scores (QB x S floats, two such buffers in the backward pass) stay in cache. */
static int64_t query_block(const attn_dims *a)
{
    int64_t qb = 65536 / (a->S > 0 ? a->S : 1);
    return qb < 12 ? 12 : qb > 64 ? 64 : qb;
}

#define KEY_BLOCK 64

/* Row p of n scores (already scaled) becomes the softmax over them, and the rest of the
 * row up to nmax zeros; returns the maximum and 1/sum in *m and *inv (0 and 0 when n is 0). */
static void softmax_row(float *p, int64_t n, int64_t nmax, float *m_out, float *inv_out)
{
    for (int64_t s = n; s < nmax; s++) p[s] = 0.0f;
    if (n == 0) {
        *m_out = 0.0f;
        *inv_out = 0.0f;
        return;
    }
    float m = -INFINITY;
    for (int64_t s = 0; s < n; s++) m = p[s] > m ? p[s] : m;
    for (int64_t s = 0; s < n; s++) p[s] = exp_neg(p[s] - m);
    double acc[8] = {0};
    int64_t s = 0;
    for (; s + 8 <= n; s += 8)
        for (int l = 0; l < 8; l++) acc[l] += p[s + l];
    for (int l = 0; s < n; s++, l++) acc[l] += p[s];
    double sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    float inv = (float)(1.0 / sum);
    for (s = 0; s < n; s++) p[s] *= inv;
    *m_out = m;
    *inv_out = inv;
}

/* ---- attention ------------------------------------------------------------------------------ */

typedef struct attn_job {
    const gdp_node *n;
    attn_dims a;
    int64_t qb, nqb;            /* query rows per block, blocks per head */
    float *stat;                /* attention_grad: (B, H, T, 3) max, 1/sum, pdp */
    atomic_int status;
} attn_job;

static void fail_status(attn_job *j, int st)
{
    if (st != GDP_OK) atomic_store(&j->status, st); /* any failure will do */
}

// y[b, h, t0:t1] = softmax(scale q k^T) v for one block of query rows
static void attn_blocks(void *ctx, int64_t begin, int64_t end, int tid)
{
    attn_job *j = ctx;
    const attn_dims *a = &j->a;
    const float *Q = j->n->in[0].data, *K = j->n->in[1].data, *V = j->n->in[2].data;
    float *Y = j->n->out[0].data;
    float *P = gcpu_scratch(tid, GCPU_SLOT_KERNEL, sizeof(float) * (size_t)(j->qb * a->S + 1));
    if (P == NULL) {
        fail_status(j, GDP_ERR_NOMEM);
        return;
    }
    for (int64_t it = begin; it < end; it++) {
        int64_t bh = it / j->nqb, t0 = (it % j->nqb) * j->qb;
        int64_t rows = a->T - t0 < j->qb ? a->T - t0 : j->qb;
        int64_t b = bh / a->H, h = bh % a->H;
        const float *q = Q + (bh * a->T + t0) * a->D;                 // (rows, D)
        const float *k = K + (b * a->Hkv + h / a->group) * a->S * a->D; // (S, D)
        const float *v = V + (b * a->Hkv + h / a->group) * a->S * a->D; // (S, D)
        float *y = Y + (bh * a->T + t0) * a->D;                       // (rows, D)
        int64_t nmax = visible(a, t0 + rows - 1);
        if (nmax == 0 || a->D == 0) {
            memset(y, 0, sizeof(float) * (size_t)(rows * a->D));
            continue;
        }
        int st = gcpu_sgemm(0, 1, rows, nmax, a->D, a->scale, q, a->D, k, a->D, 0.0f, P, nmax);
        for (int64_t i = 0; i < rows && st == GDP_OK; i++) {
            float m, inv;
            softmax_row(P + i * nmax, visible(a, t0 + i), nmax, &m, &inv);
        }
        if (st == GDP_OK) st = gcpu_sgemm(0, 0, rows, a->D, nmax, 1.0f, P, nmax, v, a->D, 0.0f, y, a->D);
        fail_status(j, st);
    }
}

/* Items of at least ~1 MFLOP each, so that small heads do not wake every thread. */
static int64_t item_grain(int64_t flops_per_item)
{
    int64_t g = (1 << 20) / (flops_per_item > 0 ? flops_per_item : 1);
    return g < 1 ? 1 : g;
}

static gdp_status attn_failed(const gdp_node *n, int st, gdp_err *err)
{
    return gdp_fail(err, st, "%s: %s", n->op, st == GDP_ERR_NOMEM ? "out of memory" : "GEMM failed");
}

static gdp_status k_attention(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    attn_job j = {.n = n, .a = dims_of(n, &n->in[0], &n->in[1])};
    atomic_init(&j.status, GDP_OK);
    if (gdp_numel(&n->out[0]) == 0) return GDP_OK;
    j.qb = query_block(&j.a);
    j.nqb = (j.a.T + j.qb - 1) / j.qb;
    int64_t items = j.a.B * j.a.H * j.nqb;
    gcpu_parallel_for_grain(items, item_grain(4 * j.qb * j.a.S * j.a.D), attn_blocks, &j);
    int st = atomic_load(&j.status);
    return st == GDP_OK ? GDP_OK : attn_failed(n, st, err);
}

static int s_attention(void *be, const gdp_node *n)
{
    (void)be;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i].ndim != 4) return 0;
    return gcpu_all_f32(n);
}

/* ---- attention_grad ------------------------------------------------------------------------- */

/* Pass 1 over (b, h, query block): dq, and each row's max, 1/sum and pdp. */
static void grad_query_blocks(void *ctx, int64_t begin, int64_t end, int tid)
{
    attn_job *j = ctx;
    const attn_dims *a = &j->a;
    const float *dY = j->n->in[0].data, *Q = j->n->in[1].data, *K = j->n->in[2].data, *V = j->n->in[3].data;
    float *dQ = j->n->out[0].data;
    float *P = gcpu_scratch(tid, GCPU_SLOT_KERNEL, sizeof(float) * (size_t)(2 * j->qb * a->S + 1));
    if (P == NULL) {
        fail_status(j, GDP_ERR_NOMEM);
        return;
    }
    float *dP = P + j->qb * a->S;
    for (int64_t it = begin; it < end; it++) {
        int64_t bh = it / j->nqb, t0 = (it % j->nqb) * j->qb;
        int64_t rows = a->T - t0 < j->qb ? a->T - t0 : j->qb;
        int64_t b = bh / a->H, h = bh % a->H, D = a->D;
        const float *q = Q + (bh * a->T + t0) * D, *dy = dY + (bh * a->T + t0) * D; // (rows, D)
        const float *k = K + (b * a->Hkv + h / a->group) * a->S * D;               // (S, D)
        const float *v = V + (b * a->Hkv + h / a->group) * a->S * D;               // (S, D)
        float *dq = dQ + (bh * a->T + t0) * D;                                      // (rows, D)
        float *stat = j->stat + (bh * a->T + t0) * 3;
        int64_t nmax = visible(a, t0 + rows - 1);
        if (nmax == 0 || D == 0) {
            memset(dq, 0, sizeof(float) * (size_t)(rows * D));
            for (int64_t i = 0; i < 3 * rows; i++) stat[i] = 0.0f;
            continue;
        }
        int st = gcpu_sgemm(0, 1, rows, nmax, D, a->scale, q, D, k, D, 0.0f, P, nmax);
        if (st == GDP_OK) st = gcpu_sgemm(0, 1, rows, nmax, D, 1.0f, dy, D, v, D, 0.0f, dP, nmax);
        for (int64_t i = 0; i < rows && st == GDP_OK; i++) {
            float *p = P + i * nmax, *dp = dP + i * nmax;
            int64_t nv = visible(a, t0 + i);
            softmax_row(p, nv, nmax, &stat[3 * i], &stat[3 * i + 1]);
            double acc[8] = {0};
            int64_t s = 0;
            for (; s + 8 <= nv; s += 8)
                for (int l = 0; l < 8; l++) acc[l] += (double)p[s + l] * dp[s + l];
            for (int l = 0; s < nv; s++, l++) acc[l] += (double)p[s] * dp[s];
            float pdp = (float)(((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])));
            stat[3 * i + 2] = pdp;
            /* dS, in place of dP; zero where P is (the masked tail) */
            for (s = 0; s < nmax; s++) dp[s] = p[s] * (dp[s] - pdp);
        }
        if (st == GDP_OK) st = gcpu_sgemm(0, 0, rows, D, nmax, a->scale, dP, nmax, k, D, 0.0f, dq, D);
        fail_status(j, st);
    }
}

/* Pass 2 over (b, kv head, key block): dk and dv of those keys. */
static void grad_key_blocks(void *ctx, int64_t begin, int64_t end, int tid)
{
    attn_job *j = ctx;
    const attn_dims *a = &j->a;
    const float *dY = j->n->in[0].data, *Q = j->n->in[1].data, *K = j->n->in[2].data, *V = j->n->in[3].data;
    float *dK = j->n->out[1].data, *dV = j->n->out[2].data;
    int64_t nkb = (a->S + KEY_BLOCK - 1) / KEY_BLOCK, D = a->D;
    float *P = gcpu_scratch(tid, GCPU_SLOT_KERNEL, sizeof(float) * (size_t)(2 * j->qb * KEY_BLOCK));
    if (P == NULL) {
        fail_status(j, GDP_ERR_NOMEM);
        return;
    }
    float *dP = P + j->qb * KEY_BLOCK;
    for (int64_t it = begin; it < end; it++) {
        int64_t bkv = it / nkb, s0 = (it % nkb) * KEY_BLOCK;
        int64_t kb = a->S - s0 < KEY_BLOCK ? a->S - s0 : KEY_BLOCK;
        int64_t b = bkv / a->Hkv, hkv = bkv % a->Hkv;
        const float *k = K + (bkv * a->S + s0) * D, *v = V + (bkv * a->S + s0) * D; // (kb, D)
        float *dk = dK + (bkv * a->S + s0) * D, *dv = dV + (bkv * a->S + s0) * D;   // (kb, D)
        /* the first query row that sees key s0: t + S - T >= s0 */
        int64_t t_first = a->causal ? s0 + a->T - a->S : 0;
        if (t_first < 0) t_first = 0;
        float beta = 0.0f;
        int st = GDP_OK;
        for (int64_t g = 0; g < a->group && st == GDP_OK; g++) {
            int64_t bh = b * a->H + hkv * a->group + g;
            /* query blocks as pass 1 cut them, from the one holding t_first */
            for (int64_t t0 = t_first / j->qb * j->qb; t0 < a->T && st == GDP_OK; t0 += j->qb) {
                int64_t rows = a->T - t0 < j->qb ? a->T - t0 : j->qb;
                const float *q = Q + (bh * a->T + t0) * D, *dy = dY + (bh * a->T + t0) * D; // (rows, D)
                const float *stat = j->stat + (bh * a->T + t0) * 3;
                st = gcpu_sgemm(0, 1, rows, kb, D, a->scale, q, D, k, D, 0.0f, P, kb);
                if (st == GDP_OK) st = gcpu_sgemm(0, 1, rows, kb, D, 1.0f, dy, D, v, D, 0.0f, dP, kb);
                if (st != GDP_OK) break;
                for (int64_t i = 0; i < rows; i++) {
                    float *p = P + i * kb, *dp = dP + i * kb;
                    int64_t nv = visible(a, t0 + i) - s0; /* keys of this block row i sees */
                    nv = nv < 0 ? 0 : nv > kb ? kb : nv;
                    const float m = stat[3 * i], inv = stat[3 * i + 1], pdp = stat[3 * i + 2];
                    for (int64_t s = 0; s < nv; s++) {
                        p[s] = exp_neg(p[s] - m) * inv;
                        dp[s] = p[s] * (dp[s] - pdp);
                    }
                    for (int64_t s = nv; s < kb; s++) p[s] = dp[s] = 0.0f;
                }
                st = gcpu_sgemm(1, 0, kb, D, rows, 1.0f, P, kb, dy, D, beta, dv, D);
                if (st == GDP_OK) st = gcpu_sgemm(1, 0, kb, D, rows, a->scale, dP, kb, q, D, beta, dk, D);
                beta = 1.0f;
            }
        }
        if (st == GDP_OK && beta == 0.0f) { /* no query sees these keys */
            memset(dk, 0, sizeof(float) * (size_t)(kb * D));
            memset(dv, 0, sizeof(float) * (size_t)(kb * D));
        }
        fail_status(j, st);
    }
}

// (dy, q, k, v) -> dq (B, H, T, D), dk, dv (B, Hkv, S, D)
static gdp_status k_attention_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    attn_job j = {.n = n, .a = dims_of(n, &n->in[1], &n->in[2])};
    atomic_init(&j.status, GDP_OK);
    const attn_dims *a = &j.a;
    if (a->D == 0 || a->B == 0) return GDP_OK; /* every output is empty */
    j.qb = query_block(a);
    j.nqb = (a->T + j.qb - 1) / j.qb;
    if (a->T > 0 && a->H > 0) {
        /* row statistics for pass 2 in the caller's second slot (the threads use the first) */
        j.stat = gcpu_scratch(0, GCPU_SLOT_KERNEL2, sizeof(float) * (size_t)(a->B * a->H * a->T * 3));
        if (j.stat == NULL) return attn_failed(n, GDP_ERR_NOMEM, err);
        gcpu_parallel_for_grain(a->B * a->H * j.nqb, item_grain(8 * j.qb * a->S * a->D), grad_query_blocks, &j);
    }
    if (atomic_load(&j.status) == GDP_OK && a->S > 0 && a->Hkv > 0) {
        int64_t nkb = (a->S + KEY_BLOCK - 1) / KEY_BLOCK;
        gcpu_parallel_for_grain(a->B * a->Hkv * nkb, item_grain(8 * KEY_BLOCK * a->group * a->T * a->D),
                                grad_key_blocks, &j);
    }
    int st = atomic_load(&j.status);
    return st == GDP_OK ? GDP_OK : attn_failed(n, st, err);
}

gdp_status gcpu_register_attention(const gdp_host *host, gdp_err *err)
{
    gdp_status s = gcpu_reg(host, "rope", GDP_F32, k_rope, s_rope, NULL, err);
    if (s == GDP_OK) s = gcpu_reg(host, "attention", GDP_F32, k_attention, s_attention, NULL, err);
    if (s == GDP_OK) s = gcpu_reg(host, "attention_grad", GDP_F32, k_attention_grad, s_attention, NULL, err);
    return s;
}
