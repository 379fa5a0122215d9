/* test_sample.c — gd_lm_sample (src/nn/lm_sample.c): greedy, top-k, top-p and temperature
 * against a plain implementation of the documented steps (a full sort), token for token
 * over many draws and vocabularies; the frequencies of draws against the probabilities
 * they should follow; the sample op on the reference against the host function; gdp_exp
 * (the sampler's weights) against the C library's exp, and its branch-free form against it. */
#include "gradus_lm.h"
#include "gradus_semantics.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct item {
    float z;
    int32_t id;
} item;

static int order(const void *a, const void *b)
{
    const item *x = a, *y = b;
    if (x->z != y->z) return x->z > y->z ? -1 : 1;
    return x->id - y->id;
}

static int by_id(const void *a, const void *b) { return ((const item *)a)->id - ((const item *)b)->id; }

/* run[i] = the running sum of q through i in runs of GDP_SAMPLE_RUN (gradus_semantics.h),
 * done the plain way: each run's sum, the sums of the runs before each, then each value's. */
static void running(const double *q, int64_t n, double *run)
{
    int64_t nr = (n + GDP_SAMPLE_RUN - 1) / GDP_SAMPLE_RUN;
    double before = 0;
    for (int64_t c = 0; c < nr; c++) {
        double in = 0, sum = 0;
        for (int64_t j = c * GDP_SAMPLE_RUN; j < n && j < (c + 1) * GDP_SAMPLE_RUN; j++) sum += q[j];
        for (int64_t j = c * GDP_SAMPLE_RUN; j < n && j < (c + 1) * GDP_SAMPLE_RUN; j++) {
            in += q[j];
            run[j] = before + in;
        }
        before = before + sum;
    }
}

/* The steps of lm_sample.c's comment, done the slow way. */
static int32_t plain(const float *lg, int64_t V, const gd_sample_config *c, uint64_t counter)
{
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (lg[v] > lg[best]) best = v;
    if (!(c->temperature > 0)) return (int32_t)best;
    item *s = malloc(sizeof *s * (size_t)V);
    double *p = malloc(sizeof *p * (size_t)V);
    for (int64_t v = 0; v < V; v++) s[v] = (item){lg[v] / (float)c->temperature, (int32_t)v};
    qsort(s, (size_t)V, sizeof *s, order);
    int64_t n = c->top_k > 0 && c->top_k < V ? c->top_k : V;
    float max = s[0].z;
    qsort(s, (size_t)n, sizeof *s, by_id); /* the candidates in id order */
    double *run = malloc(sizeof *run * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = gdp_exp((double)s[i].z - (double)max);
    running(p, n, run);
    double total = run[n - 1];
    gdp_philox_out r = gdp_philox4x32(counter, 0x5a3d1e, c->seed);
    double un = ((double)(r.v[0] >> 5) * 67108864.0 + (double)(r.v[1] >> 6)) / 9007199254740992.0;
    int32_t out = -1;
    if (c->top_p > 0 && c->top_p < 1) {
        item *o = malloc(sizeof *o * (size_t)n);
        double *q = malloc(sizeof *q * (size_t)n), *f = malloc(sizeof *f * (size_t)n);
        double *fr = malloc(sizeof *fr * (size_t)n), *qr = malloc(sizeof *qr * (size_t)n);
        memcpy(o, s, sizeof *o * (size_t)n);
        qsort(o, (size_t)n, sizeof *o, order);
        for (int64_t k = 0; k < n; k++) { /* p of o[k]: find it among the id-ordered candidates */
            item *hit = bsearch(&o[k], s, (size_t)n, sizeof *s, by_id);
            q[k] = p[hit - s];
            f[k] = q[k] / total;
        }
        running(f, n, fr);
        running(q, n, qr);
        int64_t k = 0;
        while (k < n && !(fr[k] >= c->top_p)) k++;
        k = k < n ? k + 1 : n; /* taken: through the first reaching top_p */
        double u = un * qr[k - 1];
        for (int64_t i = 0; i < k && out < 0; i++)
            if (u < qr[i]) out = o[i].id;
        if (out < 0) out = o[k - 1].id;
        free(o), free(q), free(f), free(fr), free(qr);
    } else {
        double u = un * total;
        for (int64_t i = 0; i < n && out < 0; i++)
            if (u < run[i]) out = s[i].id;
        if (out < 0) out = s[n - 1].id;
    }
    free(s);
    free(p);
    free(run);
    return out;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double unit(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* gdp_run_sum_add, the running sums every sampler shares, against the plain runs, bit for
 * bit; and they are not the sums one value at a time (or the runs would not be checked). */
static void run_sums(void)
{
    enum { N = 5 * GDP_SAMPLE_RUN + 17 };
    double q[N], plain_run[N];
    for (int i = 0; i < N; i++) q[i] = unit() * (i % 7 == 0 ? 1e3 : 1.0);
    running(q, N, plain_run);
    gdp_run_sum rs = {0};
    double seq = 0;
    int same = 1, differ = 0;
    for (int i = 0; i < N; i++) {
        same &= gdp_run_sum_add(&rs, q[i]) == plain_run[i];
        seq += q[i];
        differ += seq != plain_run[i];
    }
    CHECK(same, "gdp_run_sum_add differs from the plain running sums in runs");
    CHECK(differ > 0, "sums in runs equal the sums one value at a time at all %d values", N);
    printf("running sums in runs of %d: as the plain steps at %d values, %d of them unlike one value at a time\n",
           GDP_SAMPLE_RUN, N, differ);
}

static void against_plain(void)
{
    static const int64_t Vs[] = {1, 2, 7, 100, 5000, 50000};
    static const gd_sample_config cs[] = {
        {0, 0, 0, 1}, {1, 0, 0, 2}, {0.7, 40, 0, 3}, {0.8, 0, 0.95, 4}, {1.3, 50, 0.9, 5}, {0.5, 1, 0, 6},
        {1, 0, 1e-9, 7}, {2, 3, 0.5, 8}, {1, 100000, 0.999, 9},
    };
    int checked = 0, bad = 0;
    for (size_t vi = 0; vi < sizeof Vs / sizeof Vs[0]; vi++) {
        int64_t V = Vs[vi];
        float *lg = malloc(sizeof *lg * (size_t)V);
        void *scratch = malloc(gd_lm_sample_scratch(V));
        for (int64_t v = 0; v < V; v++) lg[v] = (float)(4 * unit() - 2);
        if (V > 10) lg[V / 3] = lg[V / 2]; /* a tie, broken by id */
        for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
            for (uint64_t k = 0; k < (V > 1000 ? 12u : 60u); k++, checked++) {
                int32_t got = gd_lm_sample(lg, V, &cs[ci], k * 7919, scratch), want = plain(lg, V, &cs[ci], k * 7919);
                if (got != want && bad++ < 5)
                    CHECK(0, "V %lld, config %zu, draw %llu: %d, the plain steps give %d", (long long)V, ci,
                          (unsigned long long)k, (int)got, (int)want);
            }
        free(lg);
        free(scratch);
    }
    printf("gd_lm_sample against the plain steps: %d draws, %d differ\n", checked, bad);
}

/* Draw frequencies: p = (0.4, 0.3, 0.2, 0.1); top_p 0.5 keeps the first two (0.4 < 0.5 <=
 * 0.7), top_k 3 the first three; each frequency within 5 standard deviations. */
static void frequencies(void)
{
    const float lg[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    struct {
        gd_sample_config c;
        double want[4];
    } rows[] = {
        {{1, 0, 0, 11}, {0.4, 0.3, 0.2, 0.1}},
        {{1, 0, 0.5, 12}, {4.0 / 7, 3.0 / 7, 0, 0}},
        {{1, 3, 0, 13}, {4.0 / 9, 3.0 / 9, 2.0 / 9, 0}},
        {{2, 0, 0, 14}, {0, 0, 0, 0}}, /* temperature 2: p ~ sqrt of the above, filled below */
    };
    double r2[4], s2 = 0;
    for (int i = 0; i < 4; i++) s2 += r2[i] = sqrt(rows[0].want[i]);
    for (int i = 0; i < 4; i++) rows[3].want[i] = r2[i] / s2;
    char scratch[256];
    const int N = 20000;
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        int count[4] = {0};
        for (int k = 0; k < N; k++) count[gd_lm_sample(lg, 4, &rows[r].c, (uint64_t)k, scratch)]++;
        for (int i = 0; i < 4; i++) {
            double f = (double)count[i] / N, w = rows[r].want[i], sd = sqrt(w * (1 - w) / N);
            CHECK(fabs(f - w) <= 5 * sd + 1e-12, "config %zu: id %d drawn %.4f of the time, want %.4f", r, i, f, w);
        }
        printf("config %zu: frequencies %.3f %.3f %.3f %.3f (want %.3f %.3f %.3f %.3f)\n", r, (double)count[0] / N,
               (double)count[1] / N, (double)count[2] / N, (double)count[3] / N, rows[r].want[0], rows[r].want[1],
               rows[r].want[2], rows[r].want[3]);
    }
}

/* The sample op on the reference: the host function's tokens, row by row. */
static void op_against_host(void)
{
    enum { B = 5, V = 300 };
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = gd_input(g, "logits", GD_F32, 2, (int64_t[]){B, V}), *d = gd_input(g, "draw", GD_I64, 1, (int64_t[]){B});
    gd_sample_config c = {.temperature = 0.9, .top_k = 50, .top_p = 0.9, .seed = 21};
    gd_tensor *tok = gd_sample(x, d, &c);
    gd_program *p = tok != NULL ? gd_compile(g, 1, &tok, 0) : NULL;
    CHECK(p != NULL, "sample op: %s", gd_ctx_error(ctx));
    float lg[B * V];
    int64_t draw[B];
    for (int i = 0; i < B * V; i++) lg[i] = (float)(3 * unit());
    for (int b = 0; b < B; b++) draw[b] = 1000 + 17 * b;
    int32_t got[B] = {0};
    if (p != NULL && gd_tensor_write(x, lg, sizeof lg) == GD_OK && gd_tensor_write(d, draw, sizeof draw) == GD_OK &&
        gd_program_run(p) == GD_OK && gd_tensor_read(tok, got, sizeof got) == GD_OK) {
        char *scratch = malloc(gd_lm_sample_scratch(V));
        for (int b = 0; b < B; b++)
            CHECK(got[b] == gd_lm_sample(lg + b * V, V, &c, (uint64_t)draw[b], scratch), "row %d: op %d, host %d", b,
                  (int)got[b], (int)gd_lm_sample(lg + b * V, V, &c, (uint64_t)draw[b], scratch));
        free(scratch);
        printf("sample op: %d rows as the host sampler picks them\n", B);
    } else {
        CHECK(0, "sample op run: %s", gd_ctx_error(ctx));
    }
    gd_program_free(p);
    gd_graph_free(g);
}

/* gdp_exp, the weights' exp that every backend shares, against the C library's: within 2
 * ulp over the range a sampler uses (x <= 0) and beyond, with the edge values exact. */
static void exp_against_libm(void)
{
    int far = 0, n = 0;
    double worst = 0;
    for (int i = 0; i < 200000; i++) {
        double x = (unit() * 2 - 1) * (i % 4 == 0 ? 740.0 : i % 4 == 1 ? 40.0 : 1.0), a = gdp_exp(x), b = exp(x);
        if (b < 1e-300) continue; /* subnormal results: ulps of tiny values say little */
        double ulps = fabs(a - b) / (nextafter(b, INFINITY) - b);
        if (ulps > worst) worst = ulps;
        far += ulps > 2;
        n++;
    }
    CHECK(far == 0, "gdp_exp: %d of %d values more than 2 ulp from exp (worst %.2f)", far, n, worst);
    CHECK(gdp_exp(0) == 1 && gdp_exp(-INFINITY) == 0 && gdp_exp(-800) == 0 && isinf(gdp_exp(INFINITY)) &&
              isnan(gdp_exp(NAN)) && gdp_exp(-745.1) > 0,
          "gdp_exp edges: exp(0) %g, exp(-inf) %g, exp(-800) %g, exp(inf) %g, exp(-745.1) %g", gdp_exp(0),
          gdp_exp(-INFINITY), gdp_exp(-800), gdp_exp(INFINITY), gdp_exp(-745.1));
    printf("gdp_exp: %d values within %.2f ulp of exp\n", n, worst);
}

/* gdp_exp_in_range, the sampler's weights without branches, against gdp_exp bit for bit over
 * its range: random values at three scales, the ends, and the points where k changes (x
 * log2(e) + 1/2 an integer, and the doubles either side). */
static void exp_in_range(void)
{
    int differ = 0, n = 0;
    for (int i = 0; i < 600000; i++, n++) {
        const double u = unit(), x = -u * (i % 3 == 0 ? -GDP_EXP_RANGE_LO : i % 3 == 1 ? 4.0 : 1e-6);
        const double a = gdp_exp_in_range(x), b = gdp_exp(x);
        if (memcmp(&a, &b, sizeof a) != 0 && differ++ < 5) CHECK(0, "x %.17g: in range %.17g, gdp_exp %.17g", x, a, b);
    }
    for (int k = -1021; k <= 0; k++) {
        const double c = (k - 0.5) / 1.4426950408889634, xs[5] = {c, nextafter(c, -INFINITY), nextafter(c, 0),
                                                                   k == 0 ? 0.0 : c, GDP_EXP_RANGE_LO};
        for (int j = 0; j < 5; j++, n++) {
            if (!(xs[j] >= GDP_EXP_RANGE_LO && xs[j] <= 0)) continue;
            const double a = gdp_exp_in_range(xs[j]), b = gdp_exp(xs[j]);
            if (memcmp(&a, &b, sizeof a) != 0 && differ++ < 5)
                CHECK(0, "x %.17g: in range %.17g, gdp_exp %.17g", xs[j], a, b);
        }
    }
    const double z = gdp_exp_in_range(-0.0), one = gdp_exp_in_range(0.0);
    CHECK(z == 1 && one == 1, "gdp_exp_in_range(-0) %g, (0) %g", z, one);
    printf("gdp_exp_in_range: %d values as gdp_exp to the bit, %d differ\n", n, differ);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    run_sums();
    against_plain();
    frequencies();
    op_against_host();
    exp_against_libm();
    exp_in_range();
    return tu_finish("test_sample");
}
