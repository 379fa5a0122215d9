/* k_softmax.c — softmax and log_softmax along the last axis, cross_entropy and its
 * gradient (f32 logits, i32/i64 targets), threaded over rows.
 *
 * Definitions are in src/ops/softmax.c. Each row is computed as the reference does it
 * (maximum subtracted, sums in double), so results agree to the last bit or nearly; the
 * loss adds its per-row terms in row order after the threads are done, so it does not
 * depend on the thread count.
 */
#include "kernels.h"

#include <math.h>
#include <stdlib.h>

/* log(sum(exp(row))), stably */
static double logsumexp(const float *x, int64_t n)
{
    double m = -INFINITY, s = 0.0;
    for (int64_t k = 0; k < n; k++) m = fmax(m, (double)x[k]);
    for (int64_t k = 0; k < n; k++) s += exp((double)x[k] - m);
    return m + log(s);
}

/* ---- softmax, log_softmax (last axis) ---------------------------------------------------------- */

typedef struct sm_job {
    const float *x;
    float *y;
    int64_t n;
    int log_space;
} sm_job;

static void sm_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const sm_job *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        const float *x = j->x + r * j->n;
        float *y = j->y + r * j->n;
        double m = -INFINITY, s = 0.0;
        for (int64_t k = 0; k < j->n; k++) m = fmax(m, (double)x[k]);
        for (int64_t k = 0; k < j->n; k++) s += exp((double)x[k] - m);
        double log_s = log(s);
        for (int64_t k = 0; k < j->n; k++) {
            double z = (double)x[k] - m;
            y[k] = (float)(j->log_space ? z - log_s : exp(z) / s);
        }
    }
}

static int last_axis(const gdp_node *n)
{
    const gdp_tensor *x = &n->in[0];
    int64_t axis = gdp_attr_int(&n->attrs, "axis", -1);
    if (axis < 0) axis += x->ndim;
    if (axis < 0 || axis >= x->ndim) return 0;
    for (int d = (int)axis + 1; d < x->ndim; d++)
        if (x->shape[d] != 1) return 0;
    return 1;
}

static gdp_status softmax_any(const gdp_node *n, int log_space, gdp_err *err)
{
    if (!last_axis(n)) return gdp_fail(err, GDP_ERR_UNSUPPORTED, "%s: only the last axis is handled", n->op);
    const gdp_tensor *x = &n->in[0];
    int64_t axis = gdp_attr_int(&n->attrs, "axis", -1);
    if (axis < 0) axis += x->ndim;
    sm_job j = {.x = x->data, .y = n->out[0].data, .n = x->shape[axis], .log_space = log_space};
    if (j.n == 0) return GDP_OK;
    gcpu_parallel_for_grain(gdp_numel(x) / j.n, GCPU_GRAIN_ELEMS / (8 * j.n) + 1, sm_rows, &j);
    return GDP_OK;
}

static gdp_status k_softmax(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    return softmax_any(n, 0, err);
}

static gdp_status k_log_softmax(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    return softmax_any(n, 1, err);
}

static int s_softmax(void *backend, const gdp_node *n)
{
    (void)backend;
    return gcpu_all_f32(n) && last_axis(n);
}

/* ---- cross_entropy, cross_entropy_grad ----------------------------------------------------------- */

static int64_t target_at(const gdp_tensor *t, int64_t i)
{
    return t->dtype == GDP_I32 ? ((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

/* Counts rows whose target is not ignore_index; fails on a target outside [0, C). */
static gdp_status ce_count(const gdp_node *n, const gdp_tensor *t, int64_t rows, int64_t C, int64_t ignore,
                           int64_t *count, gdp_err *err)
{
    *count = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t v = target_at(t, r);
        if (v == ignore) continue;
        if (v < 0 || v >= C)
            return gdp_fail(err, GDP_ERR_INVALID, "%s: targets[%lld] = %lld is not a class of [0, %lld) nor ignore_index %lld",
                            n->op, (long long)r, (long long)v, (long long)C, (long long)ignore);
        (*count)++;
    }
    return GDP_OK;
}

typedef struct ce_job {
    const float *x;
    const gdp_tensor *t;
    int64_t C, ignore;
    double *loss;   /* per row (forward) */
    float *dx;      /* (backward) */
    double scale;
} ce_job;

static void ce_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const ce_job *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        int64_t v = target_at(j->t, r);
        const float *x = j->x + r * j->C;
        j->loss[r] = v == j->ignore ? 0.0 : logsumexp(x, j->C) - (double)x[v];
    }
}

static void ce_grad_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const ce_job *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        int64_t v = target_at(j->t, r);
        const float *x = j->x + r * j->C;
        float *dx = j->dx + r * j->C;
        if (v == j->ignore) {
            for (int64_t k = 0; k < j->C; k++) dx[k] = 0.0f;
            continue;
        }
        double lse = logsumexp(x, j->C);
        for (int64_t k = 0; k < j->C; k++) {
            double p = exp((double)x[k] - lse);
            dx[k] = (float)((p - (k == v ? 1.0 : 0.0)) * j->scale);
        }
    }
}

// logits (N, C), targets (N) -> loss () = mean over kept rows of logsumexp(row) - row[target]
static gdp_status k_cross_entropy(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    const gdp_tensor *x = &n->in[0], *t = &n->in[1];
    ce_job j = {.x = x->data, .t = t, .C = x->shape[x->ndim - 1], .ignore = gdp_attr_int(&n->attrs, "ignore_index", -100)};
    int64_t rows = gdp_numel(t), count;
    gdp_status s = ce_count(n, t, rows, j.C, j.ignore, &count, err);
    if (s != GDP_OK) return s;
    j.loss = malloc(sizeof(double) * (size_t)(rows > 0 ? rows : 1));
    if (j.loss == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "%s: out of memory", n->op);
    gcpu_parallel_for_grain(rows, GCPU_GRAIN_ELEMS / (8 * j.C + 1) + 1, ce_rows, &j);
    double total = 0.0;
    for (int64_t r = 0; r < rows; r++) total += j.loss[r]; /* in row order, as the reference */
    free(j.loss);
    ((float *)n->out[0].data)[0] = (float)(count > 0 ? total / (double)count : 0.0);
    return GDP_OK;
}

// dloss (), logits (N, C), targets (N) -> dlogits = (softmax(row) - onehot(target)) * dloss / count
static gdp_status k_cross_entropy_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    const gdp_tensor *dl = &n->in[0], *x = &n->in[1], *t = &n->in[2];
    ce_job j = {.x = x->data, .t = t, .C = x->shape[x->ndim - 1], .dx = n->out[0].data,
                .ignore = gdp_attr_int(&n->attrs, "ignore_index", -100)};
    int64_t rows = gdp_numel(t), count;
    gdp_status s = ce_count(n, t, rows, j.C, j.ignore, &count, err);
    if (s != GDP_OK) return s;
    j.scale = count > 0 ? (double)((const float *)dl->data)[0] / (double)count : 0.0;
    gcpu_parallel_for_grain(rows, GCPU_GRAIN_ELEMS / (8 * j.C + 1) + 1, ce_grad_rows, &j);
    return GDP_OK;
}

static int s_ce(void *backend, const gdp_node *n)
{
    (void)backend;
    const gdp_tensor *t = &n->in[n->n_in - 1];
    for (int i = 0; i < n->n_in - 1; i++)
        if (n->in[i].dtype != GDP_F32) return 0;
    return n->out[0].dtype == GDP_F32 && (t->dtype == GDP_I32 || t->dtype == GDP_I64);
}

static const char *const softmax_attrs[] = {"axis", NULL};

gdp_status gcpu_register_softmax(const gdp_host *host, gdp_err *err)
{
    gdp_status s = gcpu_reg(host, "softmax", GDP_F32, k_softmax, s_softmax, softmax_attrs, err);
    if (s == GDP_OK) s = gcpu_reg(host, "log_softmax", GDP_F32, k_log_softmax, s_softmax, softmax_attrs, err);
    if (s == GDP_OK) s = gcpu_reg(host, "cross_entropy", GDP_F32, k_cross_entropy, s_ce, NULL, err);
    if (s == GDP_OK) s = gcpu_reg(host, "cross_entropy_grad", GDP_F32, k_cross_entropy_grad, s_ce, NULL, err);
    return s;
}
