/* lm_sample.c — picking the next token from a row of logits (gd_lm_sample), the definition
 * the `sample` op's reference uses too, so that host and device pick the same tokens.
 *
 * Greedy (temperature 0): the first highest logit. Otherwise, with z = logit / temperature
 * (f32) and the order "larger z first, then lower id" (total):
 *   1. the candidates are the first top_k in that order (all V when top_k is 0);
 *   2. each weighs p = exp(z - max z) in double (gdp_exp: the same bits on every machine);
 *      their total is summed in id order;
 *   3. with 0 < top_p < 1, the candidates are taken in order while the running mass (each
 *      p / total, summed in that order) stays below top_p, the one reaching it included, and
 *      the draw walks them in that order; otherwise the draw walks every candidate in id
 *      order;
 *   4. the draw u = gdp_sample_u53(seed, counter) * (mass walked) picks the first whose
 *      running sum exceeds u.
 * Every sum and running sum is summed in runs of GDP_SAMPLE_RUN (gdp_run_sum in
 * gradus_semantics.h), in exactly these orders: a device kernel reproduces them to pick
 * the same tokens (backends/cuda/sample.cu).
 * Work: a selection in O(V) for top-k (not a sort of V), a heap for top-p that stops as soon
 * as the mass is reached, so a peaked distribution costs about one pass over the logits; a
 * flat one, which the heap would pop most of, is put in order by a radix sort instead (with
 * no heap at all when the total shows that HEAP_POPS candidates cannot reach the mass). */
#include "gradus_lm.h"
#include "gradus_semantics.h"

#include <stdlib.h>
#include <string.h>

typedef struct cand {
    float z;
    int32_t id;
} cand;

static int before(cand a, cand b) { return a.z > b.z || (a.z == b.z && a.id < b.id); }

static void swap(cand *a, cand *b)
{
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Reorders c[0..n) so that its first k come before every other in the order (k < n). */
static void select_first(cand *c, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2; /* median of three as the pivot, moved to hi */
        if (before(c[mid], c[lo])) swap(&c[mid], &c[lo]);
        if (before(c[hi], c[lo])) swap(&c[hi], &c[lo]);
        if (before(c[mid], c[hi])) swap(&c[mid], &c[hi]);
        cand pivot = c[hi];
        int64_t store = lo;
        for (int64_t i = lo; i < hi; i++)
            if (before(c[i], pivot)) swap(&c[i], &c[store++]);
        swap(&c[store], &c[hi]);
        if (store == k || store == k - 1) return; /* [0, k) all before [k, n) */
        if (store < k) lo = store + 1;
        else hi = store - 1;
    }
}

static int by_id(const void *a, const void *b)
{
    return ((const cand *)a)->id - ((const cand *)b)->id;
}

/* max-heap of candidate indices h[0..n), first in the order on top */
static void sift(const cand *c, int32_t *h, int64_t n, int64_t i)
{
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, top = i;
        if (l < n && before(c[h[l]], c[h[top]])) top = l;
        if (r < n && before(c[h[r]], c[h[top]])) top = r;
        if (top == i) return;
        int32_t t = h[i];
        h[i] = h[top];
        h[top] = t;
        i = top;
    }
}

/* The order as a key: a smaller key is ahead (a larger z; -0 as +0, which compare equal). */
static uint32_t order_key(float z)
{
    uint32_t u;
    z = z == 0.0f ? 0.0f : z;
    memcpy(&u, &z, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending with z */
    return ~u;
}

/* o[0..n) = the indices of c in the order: a stable radix sort of the keys, a byte at a
 * time from the lowest, starting from id order (c is in id order), so equal keys stay in
 * id order. The keys move with the indices (k, then ktmp: n each), so that a pass reads
 * them in a row rather than through the indices; a byte every key shares is skipped. tmp
 * holds n more indices. Returns whichever of o and tmp holds the order. */
static int32_t *radix_order(const cand *c, int64_t n, int32_t *o, int32_t *tmp, uint32_t *k, uint32_t *ktmp)
{
    int64_t count[4][257];
    memset(count, 0, sizeof count);
    for (int64_t i = 0; i < n; i++) {
        const uint32_t key = order_key(c[i].z);
        k[i] = key, o[i] = (int32_t)i;
        for (int d = 0; d < 4; d++) count[d][((key >> (8 * d)) & 255u) + 1]++;
    }
    for (int d = 0; d < 4; d++) {
        const int shift = 8 * d;
        int64_t *cnt = count[d];
        if (cnt[((k[0] >> shift) & 255u) + 1] == n) continue; /* one value of this byte: the order stands */
        for (int b = 0; b < 256; b++) cnt[b + 1] += cnt[b];
        for (int64_t i = 0; i < n; i++) {
            const int64_t at = cnt[(k[i] >> shift) & 255u]++;
            tmp[at] = o[i], ktmp[at] = k[i];
        }
        int32_t *t = o;
        o = tmp, tmp = t;
        uint32_t *kt = k;
        k = ktmp, ktmp = kt;
    }
    return o;
}

/* p[i] = gdp_exp((double)cs[i].z - max) for i < n: gdp_exp_in_range where it holds, a
 * loop without branches that the compiler runs several at once in vector registers (this
 * file is built with -fno-trapping-math for that; no result changes), then gdp_exp for the
 * few below its range (-inf logits among them). */
static void weights(const cand *cs, int64_t n, float max, double *p)
{
    for (int64_t i = 0; i < n; i++) p[i] = gdp_exp_in_range((double)cs[i].z - (double)max);
    for (int64_t i = 0; i < n; i++) {
        const double x = (double)cs[i].z - (double)max;
        if (!(x >= GDP_EXP_RANGE_LO)) p[i] = gdp_exp(x);
    }
}

/* Candidates popped off the heap before a row counts as flat (radix_order then). */
#define HEAP_POPS 1024

int32_t gd_lm_sample(const float *logits, int64_t V, const gd_sample_config *c, uint64_t counter, void *scratch)
{
    if (c == NULL || !(c->temperature > 0)) { /* greedy */
        int64_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        return (int32_t)best;
    }
    cand *cs = scratch;
    double *p = (double *)(cs + V);
    int32_t *h = (int32_t *)(p + V);
    for (int64_t v = 0; v < V; v++) cs[v] = (cand){logits[v] / (float)c->temperature, (int32_t)v};
    int64_t n = c->top_k > 0 && c->top_k < V ? c->top_k : V;
    if (n < V) {
        select_first(cs, V, n);
        qsort(cs, (size_t)n, sizeof *cs, by_id); /* the candidates in id order */
    }
    float max = cs[0].z;
    for (int64_t i = 1; i < n; i++)
        if (cs[i].z > max) max = cs[i].z;
    double total = 0;
    gdp_run_sum ts = {0};
    weights(cs, n, max, p);
    for (int64_t i = 0; i < n; i++) total = gdp_run_sum_add(&ts, p[i]);
    if (c->top_p > 0 && c->top_p < 1) {
        double mass = 0;
        gdp_run_sum fs = {0}, ms = {0};
        int64_t taken = 0; /* candidates walked in order so far */
        /* A heap pays when the mass is reached within HEAP_POPS candidates. Each weighs at
         * most 1 (p = exp(z - max z)), so when HEAP_POPS of them cannot reach top_p of the
         * total (with room for the roundings) the row is flat and goes straight to the radix
         * sort: the same candidates in the same order, the same sums. */
        if (!((double)HEAP_POPS * (1 + 1e-9) < c->top_p * total)) {
            /* candidates in order off a heap until their mass reaches top_p; h[n - k ..)
             * holds the k taken, the first at the end */
            for (int64_t i = 0; i < n; i++) h[i] = (int32_t)i;
            for (int64_t i = n / 2 - 1; i >= 0; i--) sift(cs, h, n, i);
            int64_t left = n;
            int reached = 0;
            while (left > 0 && n - left < HEAP_POPS) {
                int32_t top = h[0];
                h[0] = h[--left];
                h[left] = top;
                sift(cs, h, left, 0);
                const double frac = gdp_run_sum_add(&fs, p[top] / total);
                mass = gdp_run_sum_add(&ms, p[top]);
                if ((reached = frac >= c->top_p)) break;
            }
            if (reached || left == 0) {
                const double u = gdp_sample_u53(c->seed, counter) * mass;
                gdp_run_sum as = {0};
                for (int64_t i = n - 1; i >= left; i--)
                    if (u < gdp_run_sum_add(&as, p[h[i]])) return cs[h[i]].id;
                return cs[h[left]].id;
            }
            taken = n - left; /* the radix order's first ones: the sums go on from there */
        }
        /* flat: every candidate in order, the sums going on from those taken */
        uint32_t *keys = (uint32_t *)(h + 2 * n);
        int32_t *o = radix_order(cs, n, h, h + n, keys, keys + n);
        while (taken < n) {
            const int32_t i = o[taken++];
            const double frac = gdp_run_sum_add(&fs, p[i] / total);
            mass = gdp_run_sum_add(&ms, p[i]);
            if (frac >= c->top_p) break;
        }
        const double u = gdp_sample_u53(c->seed, counter) * mass;
        gdp_run_sum as = {0};
        for (int64_t i = 0; i < taken; i++)
            if (u < gdp_run_sum_add(&as, p[o[i]])) return cs[o[i]].id;
        return cs[o[taken - 1]].id;
    }
    double u = gdp_sample_u53(c->seed, counter) * total;
    gdp_run_sum as = {0};
    for (int64_t i = 0; i < n; i++)
        if (u < gdp_run_sum_add(&as, p[i])) return cs[i].id;
    return cs[n - 1].id;
}

size_t gd_lm_sample_scratch(int64_t V)
{
    return (size_t)V * (sizeof(cand) + sizeof(double) + 2 * sizeof(int32_t) + 2 * sizeof(uint32_t)) + 16;
}
