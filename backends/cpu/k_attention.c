/* k_attention.c — rope, attention, attention_grad (f32; f16 and bf16 through f32 copies)
 * and cache_write.
 *
 * Definitions are in src/ops/attention.c: q (B, H, T, D), k and v (B, Hkv, S, D), query
 * head h reads key/value head h / (H / Hkv). An optional kv_len input (an i32/i64 scalar
 * read at launch) says how many keys are valid, L (default S); keys at L and beyond are
 * never read and get zero gradients. Causal query t sees keys s <= t + L - T (a prefix,
 * empty when that is negative, in which case the row's output and gradients are zero).
 * rope's optional position input (an i32/i64 scalar too) is the position of its row 0;
 * cache_write copies x's steps into a cache at a position, in place. A length or position
 * out of range is bad data: GDP_ERR_INVALID with the value in the message.
 *
 * The query heads of a group (H / Hkv of them share a key/value head) are adjacent in q,
 * so a group's queries are one run of G*T rows, and work is cut into blocks of those rows:
 * one GEMM then serves every head of the group.
 *
 * attention: per (b, kv head, block of rows), the scores are one GEMM (QB x n) against the
 * head's keys, the softmax is taken row by row in scratch, and the output is a second
 * GEMM (QB x D) written in place.
 *
 * attention_grad, in two passes, as FlashAttention-2 splits it so that no sum is shared
 * between threads:
 *   1. per (b, kv head, block of rows): P and dP = dy V^T, the row terms
 *      pdp = sum_s P dP, and dq = scale (P * (dP - pdp)) K; each row's max, 1/sum and
 *      pdp are kept (in the node's workspace);
 *   2. per (b, kv head, block of keys): for every block of the group's rows in order, P
 *      and dP of that tile again, dv += P^T dy and dk += scale dS^T q, accumulated by
 *      GEMMs with beta = 1 in a fixed order.
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
    int64_t B, T, H, D, half;
    const gdp_tensor *pos; /* NULL, a scalar, or one per batch row */
    int per_row;           /* pos is a vector: a table row per (b, t), not per t */
    double theta, sign;
    int interleaved;
    float *cs;    /* (T or B*T, half, 2): cos, sign * sin */
    double *freq; /* (half): theta^(-2i/D) */
} rope_job;

/* The angles as the reference computes them, in double, rounded once to float. */
static void rope_table(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const rope_job *j = ctx;
    for (int64_t r = begin; r < end; r++) { /* table row r: step t of batch row b */
        int64_t t = r % j->T, b = r / j->T;
        double pos = (double)(t + (j->pos != NULL ? gcpu_index_at(j->pos, b) : 0));
        float *cs = j->cs + r * 2 * j->half;
        for (int64_t i = 0; i < j->half; i++) {
            double angle = pos * j->freq[i];
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
        const float *cs = j->cs + (j->per_row ? bt : bt % j->T) * 2 * half;
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

/* The frequencies (half doubles), then the table (T, half, 2) floats. */
static size_t ws_rope(void *be, const gdp_node *n)
{
    (void)be;
    const gdp_tensor *x = n->in[0];
    int64_t half = x->shape[3] / 2, rows = n->n_in > 1 && gdp_numel(n->in[1]) > 1 ? x->shape[0] * x->shape[1] : x->shape[1];
    return gcpu_ws_piece(half, sizeof(double)) + gcpu_ws_piece(rows * 2 * half, sizeof(float));
}

// x (B, T, H, D) [, pos] -> y: pairs rotated by (t + pos) * theta^(-2i/D)
static gdp_status k_rope(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)stream;
    const gdp_tensor *x = n->in[0];
    rope_job j = {.x = x->data, .y = n->out[0]->data, .B = x->shape[0], .T = x->shape[1], .H = x->shape[2],
                  .D = x->shape[3]};
    j.half = j.D / 2;
    j.theta = gdp_attr_float(&n->attrs, "theta", 10000.0);
    j.interleaved = gdp_attr_int(&n->attrs, "interleaved", 1) != 0;
    j.pos = n->n_in > 1 ? n->in[1] : NULL;
    j.per_row = j.pos != NULL && gdp_numel(j.pos) > 1;
    j.sign = gdp_attr_int(&n->attrs, "inverse", 0) ? -1.0 : 1.0;
    if (gdp_numel(x) == 0 || j.half == 0) return GDP_OK;
    if (n->workspace == NULL || n->workspace_bytes < ws_rope(be, n))
        return gdp_fail(err, GDP_ERR_INVALID, "rope: workspace of %zu bytes is too small", n->workspace_bytes);
    j.freq = n->workspace;
    j.cs = (float *)(void *)((char *)n->workspace + gcpu_ws_piece(j.half, sizeof(double)));
    for (int64_t i = 0; i < j.half; i++) j.freq[i] = pow(j.theta, -2.0 * (double)i / (double)j.D);
    /* a cos and a sin in double cost some 50 ns */
    gcpu_parallel_for_grain(j.per_row ? j.B * j.T : j.T, GCPU_GRAIN_ELEMS / (8 * j.half) + 1, rope_table, &j);
    gcpu_parallel_for_grain(j.B * j.T, GCPU_GRAIN_ELEMS / (j.H * j.D) + 1, rope_rows, &j);
    return GDP_OK;
}

static int s_rope(void *be, const gdp_node *n)
{
    (void)be;
    const gdp_tensor *x = n->in[0];
    if (x->dtype != GDP_F32 || n->out[0]->dtype != GDP_F32 || x->ndim != 4 || x->shape[3] % 2 != 0) return 0;
    return n->n_in == 1 || (n->n_in == 2 && gcpu_is_index_per_row(n->in[1], x->shape[0]));
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
    int64_t L; /* valid keys: the first L of the S */
    int causal;
    float scale;
} attn_dims;

/* The dims of q and k, and kv_len from input len_at when the node has it (GDP_ERR_INVALID
 * when it lies outside [0, S]). */
static gdp_status dims_of(const gdp_node *n, const gdp_tensor *q, const gdp_tensor *k, int len_at, attn_dims *a,
                          gdp_err *err)
{
    *a = (attn_dims){q->shape[0], q->shape[1], q->shape[2], q->shape[3], k->shape[1], k->shape[2], 1, k->shape[2], 0, 0};
    a->group = a->Hkv > 0 ? a->H / a->Hkv : 1;
    a->causal = gdp_attr_int(&n->attrs, "causal", 0) != 0;
    double scale = gdp_attr_float(&n->attrs, "scale", 0.0);
    if (!(scale > 0)) scale = 1.0 / sqrt((double)a->D);
    a->scale = (float)scale;
    for (int64_t b = 0; n->n_in > len_at && b < a->B; b++) { /* a length for all rows, or one per row */
        int64_t L = gcpu_index_at(n->in[len_at], b);
        if (L < 0 || L > a->S)
            return gdp_fail(err, GDP_ERR_INVALID, "%s: kv_len = %lld (batch row %lld) is outside [0, %lld], the keys k has",
                            n->op, (long long)L, (long long)b, (long long)a->S);
        if (b == 0) a->L = L;
    }
    return GDP_OK;
}

/* The dims as batch row b sees them: its own kv_len when input len_at gives one per row. */
static attn_dims row_dims(const gdp_node *n, const attn_dims *a, int len_at, int64_t b)
{
    attn_dims r = *a;
    if (n->n_in > len_at) r.L = gcpu_index_at(n->in[len_at], b);
    return r;
}

/* How many keys query t sees: a prefix of the L valid keys. */
static inline int64_t visible(const attn_dims *a, int64_t t)
{
    if (!a->causal) return a->L;
    int64_t n = t + a->L - a->T + 1;
    return n < 0 ? 0 : n > a->L ? a->L : n;
}

/* Rows per block: enough for the GEMM's register tile, few enough that a block's scores
 * (QB x S floats, two such buffers in the backward pass) stay in cache. */
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

/* The query heads of a group read the same keys, and their rows are adjacent in q
 * (B, H, T, D): a group is one run of G*T rows, row r being query t = r % T of head
 * h = hkv*G + r / T. Blocks of rows are cut from that run, so one GEMM serves every head
 * of the group (a decoding step, T = 1, still gets G rows per GEMM). */
typedef struct attn_job {
    const gdp_node *n;
    attn_dims a;
    int64_t qb, nqb;            /* rows per block, blocks per group run */
    float *stat;                /* attention_grad: (B, H, T, 3) max, 1/sum, pdp */
    atomic_int status;
} attn_job;

static void fail_status(attn_job *j, int st)
{
    if (st != GDP_OK) atomic_store(&j->status, st); /* any failure will do */
}

/* Rows of block starting at row r0 of a group run, and the most keys any of them sees. */
static int64_t block_rows(const attn_job *j, const attn_dims *a, int64_t r0, int64_t *nmax)
{
    int64_t rows = a->group * a->T - r0 < j->qb ? a->group * a->T - r0 : j->qb, m = 0;
    for (int64_t i = 0; i < rows; i++) {
        int64_t nv = visible(a, (r0 + i) % a->T);
        m = nv > m ? nv : m;
    }
    *nmax = m;
    return rows;
}

/* Blocks of fewer rows than this (a decoding step: G*T rows in all) are done with dot
 * products and axpys straight from k and v, which are then read once, instead of GEMMs
 * that would pack all of k for a handful of rows. */
#define DIRECT_ROWS 8

static void attn_direct(const attn_dims *a, int64_t r0, int64_t rows, int64_t nmax, const float *q, const float *k,
                        const float *v, float *y, float *P)
{
    const int64_t D = a->D;
    for (int64_t s = 0; s < nmax; s++) {
        const float *ks = k + s * D;
        for (int64_t i = 0; i < rows; i++) {
            const float *qi = q + i * D;
            float acc[16] = {0};
            int64_t d = 0;
            for (; d + 16 <= D; d += 16)
                for (int l = 0; l < 16; l++) acc[l] += qi[d + l] * ks[d + l];
            for (int l = 0; d < D; d++, l++) acc[l] += qi[d] * ks[d];
            for (int l = 0; l < 8; l++) acc[l] += acc[l + 8];
            float dot = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            P[i * nmax + s] = a->scale * dot;
        }
    }
    for (int64_t i = 0; i < rows; i++) {
        float m, inv;
        softmax_row(P + i * nmax, visible(a, (r0 + i) % a->T), nmax, &m, &inv);
    }
    memset(y, 0, sizeof(float) * (size_t)(rows * D));
    for (int64_t s = 0; s < nmax; s++) {
        const float *vs = v + s * D;
        for (int64_t i = 0; i < rows; i++) {
            const float p = P[i * nmax + s];
            float *yi = y + i * D;
            if (p == 0.0f) continue; /* a masked key (the reference never reads it) adds nothing */
            for (int64_t d = 0; d < D; d++) yi[d] += p * vs[d];
        }
    }
}

// y rows [r0, r0 + rows) of group bkv = softmax(scale q k^T) v
static void attn_blocks(void *ctx, int64_t begin, int64_t end, int tid)
{
    attn_job *j = ctx;
    const attn_dims *a = &j->a;
    const int64_t D = a->D;
    const float *Q = j->n->in[0]->data, *K = j->n->in[1]->data, *V = j->n->in[2]->data;
    float *Y = j->n->out[0]->data;
    float *P = gcpu_scratch(tid, GCPU_SLOT_KERNEL, sizeof(float) * (size_t)(j->qb * a->S + 1));
    if (P == NULL) {
        fail_status(j, GDP_ERR_NOMEM);
        return;
    }
    for (int64_t it = begin; it < end; it++) {
        int64_t bkv = it / j->nqb, r0 = (it % j->nqb) * j->qb, nmax;
        attn_dims ab = row_dims(j->n, a, 3, bkv / a->Hkv); /* batch row b's cache length */
        int64_t rows = block_rows(j, &ab, r0, &nmax);
        int64_t row0 = bkv * a->group * a->T + r0;           /* first row in q and y */
        const float *q = Q + row0 * D;                       // (rows, D)
        const float *k = K + bkv * a->S * D, *v = V + bkv * a->S * D; // (S, D)
        float *y = Y + row0 * D;                             // (rows, D)
        if (nmax == 0) {
            memset(y, 0, sizeof(float) * (size_t)(rows * D));
            continue;
        }
        if (rows < DIRECT_ROWS) {
            attn_direct(&ab, r0, rows, nmax, q, k, v, y, P);
            continue;
        }
        int st = gcpu_sgemm(0, 1, rows, nmax, D, a->scale, q, D, k, D, 0.0f, P, nmax);
        for (int64_t i = 0; i < rows && st == GDP_OK; i++) {
            float m, inv;
            softmax_row(P + i * nmax, visible(&ab, (r0 + i) % a->T), nmax, &m, &inv);
        }
        if (st == GDP_OK) st = gcpu_sgemm(0, 0, rows, D, nmax, 1.0f, P, nmax, v, D, 0.0f, y, D);
        fail_status(j, st);
    }
}

/* Splits items over the pool, or, when there are too few to keep it busy, runs them one
 * after the other on this thread so that each GEMM is threaded instead. The bits are the
 * same either way (the GEMM's do not depend on its thread count). */
static void run_items(int64_t items, int64_t flops_per_item, gcpu_range_fn fn, attn_job *j)
{
    if (j->qb >= DIRECT_ROWS && items < gcpu_pool_threads() && flops_per_item >= 4 * 96 * 96 * 96) {
        fn(j, 0, items, 0);
        return;
    }
    /* items of at least ~1 MFLOP, so that small heads do not wake every thread */
    int64_t grain = (1 << 20) / (flops_per_item > 0 ? flops_per_item : 1);
    gcpu_parallel_for_grain(items, grain < 1 ? 1 : grain, fn, j);
}

static gdp_status attn_failed(const gdp_node *n, int st, gdp_err *err)
{
    return gdp_fail(err, st, "%s: %s", n->op, st == GDP_ERR_NOMEM ? "out of memory" : "GEMM failed");
}

static void attn_plan(attn_job *j)
{
    j->qb = query_block(&j->a);
    if (j->qb > j->a.group * j->a.T) j->qb = j->a.group * j->a.T; /* a decoding step: G*T rows */
    if (j->qb < 1) j->qb = 1;                                        /* no rows at all */
    j->nqb = (j->a.group * j->a.T + j->qb - 1) / j->qb;
}

// (q, k, v [, kv_len]) -> y (B, H, T, D)
static gdp_status k_attention(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    attn_job j = {.n = n};
    if (dims_of(n, n->in[0], n->in[1], 3, &j.a, err) != GDP_OK) return GDP_ERR_INVALID;
    atomic_init(&j.status, GDP_OK);
    if (gdp_numel(n->out[0]) == 0) return GDP_OK;
    attn_plan(&j);
    run_items(j.a.B * j.a.Hkv * j.nqb, 4 * j.qb * j.a.S * j.a.D, attn_blocks, &j);
    int st = atomic_load(&j.status);
    return st == GDP_OK ? GDP_OK : attn_failed(n, st, err);
}

/* nt 4-D f32 tensors, then an optional kv_len scalar; f32 outputs. */
static int attention_operands(const gdp_node *n, int nt)
{
    if (n->n_in < nt || n->n_in > nt + 1) return 0;
    for (int i = 0; i < nt; i++)
        if (n->in[i]->ndim != 4 || n->in[i]->dtype != GDP_F32) return 0;
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k]->dtype != GDP_F32) return 0;
    return n->n_in == nt || gcpu_is_index_scalar(n->in[nt]);
}
static int s_attention(void *be, const gdp_node *n)
{
    (void)be;
    if (n->n_in == 4 && n->in[0]->ndim == 4 && gcpu_is_index_per_row(n->in[3], n->in[0]->shape[0])) {
        for (int i = 0; i < 3; i++) /* a cache length per batch row: the forward pass takes it */
            if (n->in[i]->ndim != 4 || n->in[i]->dtype != GDP_F32) return 0;
        return n->out[0]->dtype == GDP_F32;
    }
    return attention_operands(n, 3);
}
static int s_attention_grad(void *be, const gdp_node *n) { (void)be; return attention_operands(n, 4); }

/* ---- attention_grad ------------------------------------------------------------------------- */

/* Pass 1 over (b, kv head, block of group rows): dq, and each row's max, 1/sum and pdp. */
static void grad_query_blocks(void *ctx, int64_t begin, int64_t end, int tid)
{
    attn_job *j = ctx;
    const attn_dims *a = &j->a;
    const int64_t D = a->D;
    const float *dY = j->n->in[0]->data, *Q = j->n->in[1]->data, *K = j->n->in[2]->data, *V = j->n->in[3]->data;
    float *dQ = j->n->out[0]->data;
    float *P = gcpu_scratch(tid, GCPU_SLOT_KERNEL, sizeof(float) * (size_t)(2 * j->qb * a->S + 1));
    if (P == NULL) {
        fail_status(j, GDP_ERR_NOMEM);
        return;
    }
    float *dP = P + j->qb * a->S;
    for (int64_t it = begin; it < end; it++) {
        int64_t bkv = it / j->nqb, r0 = (it % j->nqb) * j->qb, nmax;
        attn_dims ab = row_dims(j->n, a, 4, bkv / a->Hkv); /* batch row b's cache length */
        int64_t rows = block_rows(j, &ab, r0, &nmax);
        int64_t row0 = bkv * a->group * a->T + r0;
        const float *q = Q + row0 * D, *dy = dY + row0 * D;            // (rows, D)
        const float *k = K + bkv * a->S * D, *v = V + bkv * a->S * D;  // (S, D)
        float *dq = dQ + row0 * D;                                     // (rows, D)
        float *stat = j->stat + row0 * 3;
        if (nmax == 0) {
            memset(dq, 0, sizeof(float) * (size_t)(rows * D));
            for (int64_t i = 0; i < 3 * rows; i++) stat[i] = 0.0f;
            continue;
        }
        int st = gcpu_sgemm(0, 1, rows, nmax, D, a->scale, q, D, k, D, 0.0f, P, nmax);
        if (st == GDP_OK) st = gcpu_sgemm(0, 1, rows, nmax, D, 1.0f, dy, D, v, D, 0.0f, dP, nmax);
        for (int64_t i = 0; i < rows && st == GDP_OK; i++) {
            float *p = P + i * nmax, *dp = dP + i * nmax;
            int64_t nv = visible(&ab, (r0 + i) % a->T);
            softmax_row(p, nv, nmax, &stat[3 * i], &stat[3 * i + 1]);
            double acc[8] = {0};
            int64_t s = 0;
            for (; s + 8 <= nv; s += 8)
                for (int l = 0; l < 8; l++) acc[l] += (double)p[s + l] * dp[s + l];
            for (int l = 0; s < nv; s++, l++) acc[l] += (double)p[s] * dp[s];
            float pdp = (float)(((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])));
            stat[3 * i + 2] = pdp;
            /* dS in place of dP; zero where P is (the masked tail) */
            for (s = 0; s < nmax; s++) dp[s] = p[s] * (dp[s] - pdp);
        }
        if (st == GDP_OK) st = gcpu_sgemm(0, 0, rows, D, nmax, a->scale, dP, nmax, k, D, 0.0f, dq, D);
        fail_status(j, st);
    }
}

/* Pass 2 over (b, kv head, block of keys): dk and dv of those keys, from every block of
 * the group's rows in order. */
static void grad_key_blocks(void *ctx, int64_t begin, int64_t end, int tid)
{
    attn_job *j = ctx;
    const attn_dims *a = &j->a;
    const int64_t D = a->D, nkb = (a->S + KEY_BLOCK - 1) / KEY_BLOCK;
    const float *dY = j->n->in[0]->data, *Q = j->n->in[1]->data, *K = j->n->in[2]->data, *V = j->n->in[3]->data;
    float *dK = j->n->out[1]->data, *dV = j->n->out[2]->data;
    float *P = gcpu_scratch(tid, GCPU_SLOT_KERNEL, sizeof(float) * (size_t)(2 * j->qb * KEY_BLOCK));
    if (P == NULL) {
        fail_status(j, GDP_ERR_NOMEM);
        return;
    }
    float *dP = P + j->qb * KEY_BLOCK;
    for (int64_t it = begin; it < end; it++) {
        int64_t bkv = it / nkb, s0 = (it % nkb) * KEY_BLOCK;
        int64_t kb = a->S - s0 < KEY_BLOCK ? a->S - s0 : KEY_BLOCK;
        const float *k = K + (bkv * a->S + s0) * D, *v = V + (bkv * a->S + s0) * D; // (kb, D)
        float *dk = dK + (bkv * a->S + s0) * D, *dv = dV + (bkv * a->S + s0) * D;   // (kb, D)
        float beta = 0.0f;
        int st = GDP_OK;
        attn_dims ab = row_dims(j->n, a, 4, bkv / a->Hkv);
        for (int64_t r0 = 0; r0 < a->group * a->T && st == GDP_OK; r0 += j->qb) {
            int64_t nmax, rows = block_rows(j, &ab, r0, &nmax);
            if (nmax <= s0) continue; /* no row of this block sees these keys */
            int64_t row0 = bkv * a->group * a->T + r0;
            const float *q = Q + row0 * D, *dy = dY + row0 * D; // (rows, D)
            const float *stat = j->stat + row0 * 3;
            st = gcpu_sgemm(0, 1, rows, kb, D, a->scale, q, D, k, D, 0.0f, P, kb);
            if (st == GDP_OK) st = gcpu_sgemm(0, 1, rows, kb, D, 1.0f, dy, D, v, D, 0.0f, dP, kb);
            if (st != GDP_OK) break;
            for (int64_t i = 0; i < rows; i++) {
                float *p = P + i * kb, *dp = dP + i * kb;
                int64_t nv = visible(&ab, (r0 + i) % a->T) - s0; /* keys of this block row i sees */
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
        if (st == GDP_OK && beta == 0.0f) { /* no query sees these keys */
            memset(dk, 0, sizeof(float) * (size_t)(kb * D));
            memset(dv, 0, sizeof(float) * (size_t)(kb * D));
        }
        fail_status(j, st);
    }
}

/* The row statistics pass 1 leaves for pass 2: (B, H, T, 3) floats. */
static size_t ws_attention_grad(void *be, const gdp_node *n)
{
    (void)be;
    return gcpu_ws_piece(gdp_numel(n->in[1]) / (n->in[1]->shape[3] > 0 ? n->in[1]->shape[3] : 1) * 3, sizeof(float));
}

// (dy, q, k, v [, kv_len]) -> dq (B, H, T, D), dk, dv (B, Hkv, S, D)
static gdp_status k_attention_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)stream;
    attn_job j = {.n = n};
    if (dims_of(n, n->in[1], n->in[2], 4, &j.a, err) != GDP_OK) return GDP_ERR_INVALID;
    atomic_init(&j.status, GDP_OK);
    const attn_dims *a = &j.a;
    if (a->D == 0 || a->B == 0 || a->Hkv == 0) return GDP_OK; /* every output is empty */
    attn_plan(&j);
    if (a->T > 0 && a->H > 0) {
        j.stat = n->workspace;
        if (j.stat == NULL || n->workspace_bytes < ws_attention_grad(be, n))
            return gdp_fail(err, GDP_ERR_INVALID, "%s: workspace of %zu bytes is too small", n->op, n->workspace_bytes);
        run_items(a->B * a->Hkv * j.nqb, 8 * j.qb * a->S * a->D, grad_query_blocks, &j);
    }
    if (atomic_load(&j.status) == GDP_OK && a->S > 0) {
        int64_t nkb = (a->S + KEY_BLOCK - 1) / KEY_BLOCK;
        run_items(a->B * a->Hkv * nkb, 8 * KEY_BLOCK * a->group * a->T * a->D, grad_key_blocks, &j);
    }
    int st = atomic_load(&j.status);
    return st == GDP_OK ? GDP_OK : attn_failed(n, st, err);
}

/* ---- cache_write ------------------------------------------------------------------------- */

typedef struct cw_job {
    const char *x;
    char *y;
    size_t row;           /* bytes of x's (T, D) block */
    int64_t S, T, D;
    const gdp_tensor *pos; /* a scalar, or one per batch row (dim 0) */
    int64_t per_b;         /* (T, D) blocks per batch row */
    size_t es;
} cw_job;

static void cw_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const cw_job *j = ctx;
    for (int64_t o = begin; o < end; o++)
        memcpy(j->y + (size_t)((o * j->S + gcpu_index_at(j->pos, o / j->per_b)) * j->D) * j->es,
               j->x + (size_t)o * j->row, j->row);
}

typedef struct bytes_job {
    const char *src;
    char *dst;
    size_t n;
} bytes_job;

#define COPY_PIECE ((int64_t)1 << 16)

static void bytes_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const bytes_job *j = ctx;
    size_t b = (size_t)(begin * COPY_PIECE), e = (size_t)(end * COPY_PIECE);
    if (e > j->n) e = j->n;
    if (e > b) memcpy(j->dst + b, j->src + b, e - b);
}

// (cache (..., S, D), x (..., T, D), pos) -> cache' with steps [pos, pos + T) replaced by x
static gdp_status k_cache_write(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    const gdp_tensor *c = n->in[0], *x = n->in[1], *y = n->out[0];
    int nd = y->ndim;
    cw_job j = {.x = x->data, .y = y->data, .S = y->shape[nd - 2], .T = x->shape[nd - 2], .D = y->shape[nd - 1],
                .pos = n->in[2], .es = gdp_dtype_size(y->dtype)};
    for (int64_t b = 0; b < y->shape[0]; b++) {
        int64_t pos = gcpu_index_at(j.pos, b);
        if (pos < 0 || pos > j.S - j.T)
            return gdp_fail(err, GDP_ERR_INVALID,
                            "cache_write: pos = %lld (batch row %lld): steps [%lld, %lld) do not fit the cache's %lld",
                            (long long)pos, (long long)b, (long long)pos, (long long)(pos + j.T), (long long)j.S);
    }
    if (y->data != c->data) { /* not in place: the cache first */
        bytes_job b = {.src = c->data, .dst = y->data, .n = (size_t)gdp_numel(y) * j.es};
        gcpu_parallel_for_grain(((int64_t)b.n + COPY_PIECE - 1) / COPY_PIECE, 16, bytes_task, &b);
    }
    j.row = (size_t)(j.T * j.D) * j.es;
    if (j.row == 0) return GDP_OK;
    int64_t outer = gdp_numel(x) / (j.T * j.D);
    j.per_b = y->shape[0] > 0 ? outer / y->shape[0] : 1;
    if (j.per_b < 1) j.per_b = 1;
    gcpu_parallel_for_grain(outer, (int64_t)(4 * GCPU_GRAIN_ELEMS / j.row) + 1, cw_rows, &j);
    return GDP_OK;
}

static int s_cache_write(void *be, const gdp_node *n)
{
    (void)be;
    return n->in[0]->ndim >= 2 && gcpu_is_index_per_row(n->in[2], n->in[0]->shape[0]);
}

/* f16 and bf16: the f32 kernels on f32 copies, rounded back, as the reference does them */
GCPU_HALF_OF(k_rope, s_rope, ws_rope)
GCPU_HALF_OF(k_attention, s_attention, NULL)
GCPU_HALF_OF(k_attention_grad, s_attention_grad, ws_attention_grad)

gdp_status gcpu_register_attention(gcpu_regctx *r, gdp_err *err)
{
    gdp_status s = gcpu_reg_floats(r, "rope", GCPU_FLOATS(k_rope, s_rope, ws_rope), 0, NULL, err);
    if (s == GDP_OK) s = gcpu_reg_floats(r, "attention", GCPU_FLOATS(k_attention, s_attention, NULL), 0, NULL, err);
    if (s == GDP_OK)
        s = gcpu_reg_floats(r, "attention_grad", GCPU_FLOATS(k_attention_grad, s_attention_grad, ws_attention_grad), 0,
                            NULL, err);
    /* cache_write moves bytes: one kernel for every float dtype, and i32 (a decoder's record
     * of its sampled tokens) */
    static const int32_t dts[] = {GDP_F32, GDP_F16, GDP_BF16, GDP_I32};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0] && s == GDP_OK; d++)
        s = gcpu_reg(r, "cache_write", dts[d], k_cache_write, s_cache_write, NULL, err);
    return s;
}
