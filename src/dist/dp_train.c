/* dp_train.c — data parallelism for the LM trainer.
 *
 * Each rank runs forward and backward on its micro-batches (the micro program, whose
 * targets are the loss and every parameter's gradient), adds the gradients into one host
 * buffer laid out parameter after parameter, and at the end of the step the ranks sum
 * that buffer bucket by bucket, in rank order (gd_dist). The sums go into states
 * "<param>.grad_sum", which the update program reads: scaled by 1 / (ranks x accum) — as
 * one process accumulating that many micro-batches scales them — clipped by their global
 * norm, and given to AdamW. So the update program holds no forward or backward node, and
 * N ranks of accumulation K compute what one process of accumulation N x K computes.
 *
 * ZeRO-1: parameters are dealt to ranks (whole tensors, each to the rank holding the
 * fewest bytes so far, in parameter order); a rank's AdamW updates its own and keeps
 * their moments only, then each parameter is broadcast from its owner. The update is the
 * same arithmetic on the same values wherever it runs, so the bits do not change.
 *
 * Device collectives: when the preferred backend has a collective module (the CUDA
 * plugin's NCCL), the ranks' sums are written to the grad_sum states as they are and the
 * device adds them there, in its own (run-to-run reproducible) order; the host buffer is
 * then only this rank's part. GRADUS_DEVICE_COLLECTIVE=0 keeps the sum on the host. */
#include "dist/dp_train.h"

#include "alloc.h"
#include "collective.h"
#include "dist/dist_impl.h"

#include <stdio.h>
#include <string.h>

typedef struct dp_param {
    gd_tensor *p, *grad, *sum; /* the parameter, its gradient (a target), its grad_sum state */
    size_t off, n;             /* where in the host buffer, how many floats */
    int owner;                 /* the rank that updates it (every rank without zero1: -1) */
} dp_param;

struct gd_dp {
    gd_ctx *ctx;
    gd_dist *d;
    int zero1;
    int n;
    dp_param *ps;
    float *buf, *tmp;          /* the step's gradient sum; one gradient */
    size_t total, largest;
    gd_st_entry *gathered;     /* gd_dp_gather_moments */
    float *gathered_data;
    char *gathered_names;      /* 512 bytes an entry */
    int n_gathered;
    gd_collective *coll;       /* the device's collective, or NULL: sums through gd_dist */
};

static gd_status fail_after(gd_ctx *ctx, const char *what)
{
    char m[768];
    snprintf(m, sizeof m, "%s", gd_ctx_error(ctx));
    gd_status s = gd_ctx_status(ctx) != GD_OK ? gd_ctx_status(ctx) : GD_ERR_INVALID;
    return gd_ctx_fail(ctx, s, "%s: %s", what, m[0] ? m : "unknown error");
}

void gd_dp_free(gd_dp *dp)
{
    if (dp == NULL) return;
    gd_free(dp->ps);
    gd_free(dp->buf);
    gd_free(dp->tmp);
    gd_free(dp->gathered);
    gd_free(dp->gathered_data);
    gd_free(dp->gathered_names);
    gd_collective_close(dp->coll);
    gd_free(dp);
}

/* Joins the device collective when the backend has one: rank 0 makes the id and every
 * rank gets it through gd_dist. */
static gd_status open_collective(gd_dp *dp)
{
    size_t idn = gd_collective_id_bytes(dp->ctx);
    if (idn == 0) return GD_OK;
    void *id = gd_calloc(1, idn);
    if (id == NULL) return gd_ctx_fail(dp->ctx, GD_ERR_NOMEM, "out of memory");
    gd_status st = gd_dist_rank(dp->d) == 0 ? gd_collective_unique_id(dp->ctx, id) : GD_OK;
    /* a rank 0 that failed sends zeros, so the others do not wait: their open fails too */
    gd_status bs = gd_dist_broadcast(dp->d, id, idn, 0, "the device collective's id");
    if (st == GD_OK) st = bs;
    if (st == GD_OK) st = gd_collective_open(dp->ctx, id, gd_dist_rank(dp->d), gd_dist_size(dp->d), &dp->coll);
    gd_free(id);
    return st;
}

const char *gd_dp_summed_on(const gd_dp *dp) { return dp->coll != NULL ? gd_collective_backend(dp->coll) : "host"; }

gd_status gd_dp_build(gd_graph *g, gd_dist *d, int64_t accum, double clip, const gd_adamw_config *oc, int zero1,
                      gd_tensor *unscale, gd_tensor **norm, gd_dp **out)
{
    gd_ctx *ctx = gd_graph_ctx(g);
    *out = NULL;
    gd_dp *dp = gd_calloc(1, sizeof *dp);
    int np = gd_graph_param_count(g);
    if (dp != NULL) dp->ps = gd_calloc((size_t)np + 1, sizeof *dp->ps);
    gd_tensor **grads = gd_calloc((size_t)np + 1, sizeof *grads), **mine = gd_calloc((size_t)np + 1, sizeof *mine);
    size_t *load = gd_calloc((size_t)gd_dist_size(d), sizeof *load);
    gd_status st = GD_OK;
    if (dp == NULL || dp->ps == NULL || grads == NULL || mine == NULL || load == NULL) {
        st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "data parallelism: out of memory");
        goto done;
    }
    dp->ctx = ctx;
    dp->d = d;
    dp->zero1 = zero1 && gd_dist_size(d) > 1;
    int ranks = gd_dist_size(d), n_mine = 0;
    double scale = 1.0 / ((double)ranks * (double)accum);
    for (int i = 0; i < np && st == GD_OK; i++) {
        gd_tensor *p = gd_graph_param(g, i), *gp = gd_grad(g, p);
        if (gp == NULL) continue;
        if (gd_tensor_dtype(gp) != GD_F32) {
            st = gd_ctx_fail(ctx, GD_ERR_UNSUPPORTED, "data parallelism: the gradient of %s is %s; f32 is summed",
                             gd_tensor_name(p), gd_dtype_name(gd_tensor_dtype(gp)));
            break;
        }
        char name[512];
        snprintf(name, sizeof name, "%s.grad_sum", gd_tensor_name(p));
        int64_t shape[GD_MAX_DIMS];
        for (int k = 0; k < gd_tensor_ndim(p); k++) shape[k] = gd_tensor_dim(p, k);
        dp_param *q = &dp->ps[dp->n];
        q->p = p;
        q->grad = gp;
        q->sum = gd_state(g, name, GD_F32, gd_tensor_ndim(p), shape);
        q->off = dp->total;
        q->n = (size_t)gd_tensor_numel(p);
        q->owner = -1;
        if (dp->zero1) {
            int best = 0;
            for (int r = 1; r < ranks; r++)
                if (load[r] < load[best]) best = r;
            q->owner = best;
            load[best] += q->n;
        }
        dp->total += q->n;
        if (q->n > dp->largest) dp->largest = q->n;
        grads[dp->n] = gd_scale(q->sum, scale, 0.0); /* what one process accumulating ranks x accum does */
        if (unscale != NULL) grads[dp->n] = gd_mul(grads[dp->n], unscale);
        if (grads[dp->n] == NULL) st = fail_after(ctx, "data parallelism: the gradient sums");
        dp->n++;
    }
    if (st == GD_OK && dp->n == 0) st = gd_ctx_fail(ctx, GD_ERR_INVALID, "no parameter has a gradient");
    if (st == GD_OK && (*norm = gd_label(gd_global_norm(g, dp->n, grads), "grad_norm")) == NULL)
        st = fail_after(ctx, "the gradient norm");
    /* clipping as gd_optimizer_adamw does it (clip_coef, then a product), over every
     * gradient: with zero1 the optimizer sees only this rank's share */
    gd_tensor *coef = NULL;
    if (st == GD_OK && clip > 0) {
        gd_attr a = gd_attr_f("max_norm", clip);
        if ((coef = gd_op(g, "clip_coef", 1, norm, 1, &a)) == NULL) st = fail_after(ctx, "clipping");
    }
    for (int i = 0; i < dp->n && st == GD_OK; i++) {
        dp_param *q = &dp->ps[i];
        gd_tensor *gr = coef != NULL ? gd_mul(grads[i], coef) : grads[i];
        if (gr == NULL || gd_set_grad(g, q->p, gr) != GD_OK) st = fail_after(ctx, "data parallelism: the gradients");
        if (q->owner < 0 || q->owner == gd_dist_rank(d)) mine[n_mine++] = q->p;
    }
    if (st == GD_OK && n_mine == 0)
        st = gd_ctx_fail(ctx, GD_ERR_INVALID, "rank %d of %d: the sharded optimizer gives this rank no parameter (%d in all)",
                         gd_dist_rank(d), ranks, dp->n);
    gd_adamw_config c = *oc;
    c.clip_norm = 0;
    c.n_params = n_mine;
    c.params = mine;
    if (st == GD_OK && gd_optimizer_adamw(g, &c) != GD_OK) st = fail_after(ctx, "the optimizer");
    if (st == GD_OK) {
        dp->buf = gd_malloc(dp->total * sizeof(float));
        dp->tmp = gd_malloc(dp->largest * sizeof(float));
        if (dp->buf == NULL || dp->tmp == NULL)
            st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "data parallelism: out of memory for %zu gradients", dp->total);
    }
    if (st == GD_OK) st = open_collective(dp);
done:
    gd_free(grads);
    gd_free(mine);
    gd_free(load);
    if (st != GD_OK) {
        gd_dp_free(dp);
        return st;
    }
    *out = dp;
    return GD_OK;
}

int gd_dp_grad_count(const gd_dp *dp) { return dp->n; }
gd_tensor *gd_dp_grad(const gd_dp *dp, int i) { return dp->ps[i].grad; }
gd_tensor *gd_dp_sum(const gd_dp *dp, int i) { return dp->ps[i].sum; }

gd_status gd_dp_accumulate(gd_dp *dp, int first)
{
    for (int i = 0; i < dp->n; i++) {
        dp_param *q = &dp->ps[i];
        float *dst = dp->buf + q->off;
        gd_status st = gd_tensor_read(q->grad, first ? dst : dp->tmp, q->n * sizeof(float));
        if (st != GD_OK) return st;
        /* the order one process's accumulation state has: ((g1 + g2) + g3) ... */
        if (!first)
            for (size_t k = 0; k < q->n; k++) dst[k] += dp->tmp[k];
    }
    return GD_OK;
}

gd_status gd_dp_reduce(gd_dp *dp, int64_t step)
{
    char what[64];
    snprintf(what, sizeof what, "the gradients of step %lld", (long long)step);
    if (dp->coll != NULL) {
        gd_status st = GD_OK;
        for (int i = 0; i < dp->n && st == GD_OK; i++)
            st = gd_tensor_write(dp->ps[i].sum, dp->buf + dp->ps[i].off, dp->ps[i].n * sizeof(float));
        for (int i = 0; i < dp->n && st == GD_OK; i++) st = gd_collective_allreduce(dp->coll, dp->ps[i].sum);
        if (st == GD_OK) st = gd_collective_finish(dp->coll, dp->d->timeout_s);
        if (st != GD_OK) gd_dist_set_broken(dp->d);
        return st;
    }
    gd_status st = gd_dist_allreduce_f32(dp->d, dp->buf, dp->total, what);
    for (int i = 0; i < dp->n && st == GD_OK; i++)
        st = gd_tensor_write(dp->ps[i].sum, dp->buf + dp->ps[i].off, dp->ps[i].n * sizeof(float));
    return st;
}

gd_status gd_dp_after_update(gd_dp *dp, int64_t step)
{
    if (!dp->zero1) return GD_OK;
    char what[64];
    snprintf(what, sizeof what, "the parameters updated in step %lld", (long long)step);
    int me = gd_dist_rank(dp->d);
    gd_status st = GD_OK;
    for (int i = 0; i < dp->n && st == GD_OK; i++) {
        dp_param *q = &dp->ps[i];
        size_t bytes = q->n * sizeof(float);
        /* the host buffer's gradient is spent: it carries the parameter */
        float *b = dp->buf + q->off;
        if (q->owner == me) st = gd_tensor_read(q->p, b, bytes);
        if (st == GD_OK) st = gd_dist_broadcast(dp->d, b, bytes, q->owner, what);
        if (st == GD_OK && q->owner != me) st = gd_tensor_write(q->p, b, bytes);
    }
    return st;
}

gd_status gd_dp_gather_moments(gd_dp *dp, const gd_st_entry **entries, int *n)
{
    *entries = NULL;
    *n = 0;
    if (!dp->zero1) return GD_OK;
    int me = gd_dist_rank(dp->d), count = 0;
    size_t floats = 0;
    for (int i = 0; i < dp->n; i++)
        if (dp->ps[i].owner != 0) {
            count += 2;
            floats += 2 * dp->ps[i].n;
        }
    gd_free(dp->gathered);
    gd_free(dp->gathered_data);
    gd_free(dp->gathered_names);
    dp->n_gathered = 0;
    dp->gathered = gd_calloc((size_t)count + 1, sizeof *dp->gathered);
    dp->gathered_data = gd_malloc((floats + 1) * sizeof(float));
    dp->gathered_names = gd_malloc(((size_t)count + 1) * 512);
    if (dp->gathered == NULL || dp->gathered_data == NULL || dp->gathered_names == NULL)
        return gd_ctx_fail(dp->ctx, GD_ERR_NOMEM, "checkpoint: out of memory for the optimizer's moments");
    gd_graph *g = gd_tensor_graph(dp->ps[0].p);
    static const char *const sfx[2] = {"adam_m", "adam_v"};
    size_t at = 0;
    gd_status st = GD_OK;
    for (int i = 0; i < dp->n && st == GD_OK; i++) {
        dp_param *q = &dp->ps[i];
        if (q->owner == 0) continue;
        for (int k = 0; k < 2 && st == GD_OK; k++) {
            char *name = dp->gathered_names + (size_t)dp->n_gathered * 512;
            snprintf(name, 512, "%s.%s", gd_tensor_name(q->p), sfx[k]);
            float *b = dp->gathered_data + at;
            if (q->owner == me) {
                gd_tensor *t = gd_graph_find(g, name);
                st = t != NULL ? gd_tensor_read(t, b, q->n * sizeof(float))
                               : gd_ctx_fail(dp->ctx, GD_ERR_INVALID, "checkpoint: no state %s", name);
            }
            if (st == GD_OK) st = gd_dist_broadcast(dp->d, b, q->n * sizeof(float), q->owner, "a checkpoint's moments");
            gd_st_entry *e = &dp->gathered[dp->n_gathered++];
            memset(e, 0, sizeof *e);
            e->name = name;
            e->dtype = GD_F32;
            e->ndim = gd_tensor_ndim(q->p);
            for (int k2 = 0; k2 < e->ndim; k2++) e->shape[k2] = gd_tensor_dim(q->p, k2);
            e->data = b;
            at += q->n;
        }
    }
    if (st != GD_OK) return st;
    *entries = dp->gathered;
    *n = me == 0 ? dp->n_gathered : 0;
    return GD_OK;
}

void gd_dp_memory(const gd_dp *dp, size_t *param_bytes, size_t *grad_bytes, size_t *optimizer_bytes)
{
    size_t mine = 0;
    for (int i = 0; i < dp->n; i++)
        if (dp->ps[i].owner < 0 || dp->ps[i].owner == gd_dist_rank(dp->d)) mine += dp->ps[i].n;
    *param_bytes = dp->total * sizeof(float);
    /* the host buffer, the staging of one gradient, the grad_sum states */
    *grad_bytes = (2 * dp->total + dp->largest) * sizeof(float);
    *optimizer_bytes = 2 * mine * sizeof(float);
}
