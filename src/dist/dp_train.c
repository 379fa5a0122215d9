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
 * their moments only, then each parameter is broadcast from its owner (on the device when
 * its collective module broadcasts, else through the host). The update is the same
 * arithmetic on the same values wherever it runs, so the bits do not change.
 *
 * Device collectives: when the preferred backend has a collective module (the CUDA
 * plugin's NCCL), nothing goes through the host. The micro program adds each gradient into
 * its grad_sum state on the device (sum <- sum + grad: the order the host buffer has), the
 * device sums the states over the ranks in place, bucket by bucket, in its own
 * (run-to-run reproducible) order, and the update program zeroes them after AdamW has read
 * them (a skipped step zeroes them too). GRADUS_DEVICE_COLLECTIVE=0 keeps the sum on the
 * host.
 *
 * Buckets: the ranks sum the host buffer in buckets of whole parameters, formed from the
 * last parameter back (the order a backward pass finishes their gradients in) until each
 * holds gd_dist_bucket_bytes. Every rank forms the same buckets and sums them in the same
 * order, and each element's sum is the same rank-ordered sum however it is bucketed.
 *
 * Overlap: on the step's last micro-batch, a gradient is added into the buffer the moment
 * the backward has finished it (gd_program_on_ready), and a bucket whose gradients are all
 * in goes to a communication thread, which sums the buckets one at a time in bucket order
 * while the rest of the backward runs; gd_dp_reduce waits for it. Only the thread talks to
 * the other ranks meanwhile, so the transport is never entered twice at once (MPI needs
 * MPI_THREAD_SERIALIZED: without it, and with GRADUS_DP_OVERLAP=0, the buckets are summed
 * after the backward, as the same collectives in the same order). With a device
 * collective there is no thread: a callback on the bucket's last accumulation queues the
 * bucket's sums on the device (gd_program_on_ready_all, which also ends an executor's
 * segment there), where they run beside the rest of the backward; gd_dp_reduce waits for
 * them. Every rank runs the same program, so every rank queues the same sums in the same
 * order. */
#include "dist/dp_train.h"

#include "alloc.h"
#include "collective.h"
#include "core.h"
#include "dist/dist_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dp_param {
    gd_tensor *p, *grad, *sum; /* the parameter, its gradient (a target), its grad_sum state */
    gd_tensor *acc, *zero;     /* device sums: sum <- sum + grad (a target), sum <- 0 */
    size_t off, n;             /* where in the host buffer, how many floats */
    int owner;                 /* the rank that updates it (every rank without zero1: -1) */
    gd_dp *dp;                 /* for the ready callback */
    int index, bucket;
    int taken;                 /* overlap: added into the buffer during this run */
} dp_param;

typedef struct dp_bucket {
    int lo, hi;                /* parameters [lo, hi): one range of the host buffer */
    int pending;               /* overlap: gradients not yet added in this run */
    int queued;                /* device sums: queued on the device in this step */
    gd_dp *dp;                 /* for the device's ready callback */
} dp_bucket;

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
    int device;                /* the preferred backend sums (its collective module) */
    gd_collective *coll;       /* the device's collective, or NULL: sums through gd_dist */
    gd_tensor **updated;       /* AdamW's new parameters, NULL-terminated */
    gd_tensor **zeros;         /* device sums: the resets, n of them */
    gd_program *reset;         /* ... as a program, for a skipped step (made at the first) */
    char dev_during[96];       /* "<backend>, during the backward" */
    dp_bucket *buckets;
    int n_buckets;
    /* overlap: the main thread's side */
    int overlap;               /* the communication thread runs */
    int live, live_first;      /* this run is the step's last micro-batch (and its first) */
    int posted;                /* buckets handed to the thread in this step */
    int64_t early;             /* buckets handed over by callbacks, while the run went on */
    char what[64];
    gd_ctx *comm_ctx;          /* the transport's messages while the thread owns it */
    /* shared with the thread, under mu */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int q_posted, q_next, q_stop;
    gd_status q_status;
    char q_err[1024];
};

static gd_status fail_after(gd_ctx *ctx, const char *what)
{
    char m[768];
    snprintf(m, sizeof m, "%s", gd_ctx_error(ctx));
    gd_status s = gd_ctx_status(ctx) != GD_OK ? gd_ctx_status(ctx) : GD_ERR_INVALID;
    return gd_ctx_fail(ctx, s, "%s: %s", what, m[0] ? m : "unknown error");
}

static void stop_thread(gd_dp *dp);

void gd_dp_free(gd_dp *dp)
{
    if (dp == NULL) return;
    stop_thread(dp);
    gd_program_free(dp->reset);
    gd_free(dp->updated);
    gd_free(dp->zeros);
    gd_free(dp->buckets);
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
    if (st == GD_OK)
        snprintf(dp->dev_during, sizeof dp->dev_during, "%s, during the backward", gd_collective_backend(dp->coll));
    gd_free(id);
    return st;
}

const char *gd_dp_summed_on(const gd_dp *dp)
{
    if (dp->coll != NULL) return dp->early > 0 ? dp->dev_during : gd_collective_backend(dp->coll);
    return dp->early > 0 ? "host, during the backward" : "host";
}

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
    dp->device = gd_collective_id_bytes(ctx) > 0;
    dp->updated = gd_calloc((size_t)np + 1, sizeof *dp->updated);
    dp->zeros = gd_calloc((size_t)np + 1, sizeof *dp->zeros);
    if (dp->updated == NULL || dp->zeros == NULL) {
        st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "data parallelism: out of memory");
        goto done;
    }
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
        if (dp->device && (q->acc = gd_assign(q->sum, gd_add(q->sum, gp))) == NULL)
            st = fail_after(ctx, "data parallelism: the gradients' sums on the device");
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
    for (int i = 0; i < dp->n && st == GD_OK; i++) {
        dp_param *q = &dp->ps[i];
        if (gd_set_grad(g, q->p, grads[i]) != GD_OK) st = fail_after(ctx, "data parallelism: the gradients");
        if (q->owner < 0 || q->owner == gd_dist_rank(d)) mine[n_mine++] = q->p;
    }
    if (st == GD_OK && n_mine == 0)
        st = gd_ctx_fail(ctx, GD_ERR_INVALID, "rank %d of %d: the sharded optimizer gives this rank no parameter (%d in all)",
                         gd_dist_rank(d), ranks, dp->n);
    /* clipping by the norm over every gradient (with zero1 the optimizer sees only this
     * rank's share), as one process clips: the factor scales the updates' gradients */
    gd_adamw_config c = *oc;
    c.clip_norm = clip > 0 ? clip : 0;
    c.grad_norm = *norm;
    c.n_params = n_mine;
    c.params = mine;
    c.updated = dp->updated;
    if (st == GD_OK && gd_optimizer_adamw(g, &c) != GD_OK) st = fail_after(ctx, "the optimizer");
    /* the device's sums start the next step at zero: after AdamW read them (graph order) */
    for (int i = 0; i < dp->n && st == GD_OK && dp->device; i++) {
        dp_param *q = &dp->ps[i];
        int64_t shape[GD_MAX_DIMS];
        for (int k = 0; k < gd_tensor_ndim(q->sum); k++) shape[k] = gd_tensor_dim(q->sum, k);
        q->zero = dp->zeros[i] = gd_assign(q->sum, gd_zeros(g, GD_F32, gd_tensor_ndim(q->sum), shape));
        if (q->zero == NULL) st = fail_after(ctx, "data parallelism: resetting the gradients' sums");
    }
    if (st == GD_OK && dp->device) st = open_collective(dp);
    if (st == GD_OK) {
        /* the host buffer: the host's sums, or the parameters a sharded optimizer sends */
        int want_buf = !dp->device || (dp->zero1 && !gd_collective_can_broadcast(dp->coll));
        if (want_buf) dp->buf = gd_malloc(dp->total * sizeof(float));
        if (!dp->device) dp->tmp = gd_malloc(dp->largest * sizeof(float));
        if ((dp->buf == NULL && want_buf) || (dp->tmp == NULL && !dp->device))
            st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "data parallelism: out of memory for %zu gradients", dp->total);
    }
    if (st == GD_OK) {
        /* buckets from the last parameter back, each of whole parameters up to the bucket size */
        dp->buckets = gd_calloc((size_t)dp->n, sizeof *dp->buckets);
        if (dp->buckets == NULL) st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "data parallelism: out of memory");
        size_t cap = gd_dist_bucket_bytes(d) / sizeof(float), have = 0;
        for (int i = dp->n - 1; i >= 0 && st == GD_OK; i--) {
            if (have == 0) dp->buckets[dp->n_buckets++].hi = i + 1;
            dp_bucket *b = &dp->buckets[dp->n_buckets - 1];
            b->dp = dp;
            b->lo = i;
            dp->ps[i].bucket = dp->n_buckets - 1;
            dp->ps[i].index = i;
            dp->ps[i].dp = dp;
            have += dp->ps[i].n;
            if (have >= cap) have = 0;
        }
    }
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
gd_tensor *gd_dp_micro_target(const gd_dp *dp, int i) { return dp->device ? dp->ps[i].acc : dp->ps[i].grad; }
gd_tensor *gd_dp_sum(const gd_dp *dp, int i) { return dp->ps[i].sum; }

int gd_dp_update_targets(const gd_dp *dp, gd_tensor *norm, gd_tensor **out)
{
    int k = 0;
    out[k++] = norm;
    for (int i = 0; dp->updated[i] != NULL; i++) out[k++] = dp->updated[i];
    for (int i = 0; dp->device && i < dp->n; i++) out[k++] = dp->zeros[i];
    return k;
}

int gd_dp_update_target_cap(const gd_dp *dp) { return 2 * dp->n + 2; }

/* Adds parameter i's gradient of this run into the host buffer. */
static gd_status add_grad(gd_dp *dp, int i, int first)
{
    dp_param *q = &dp->ps[i];
    float *dst = dp->buf + q->off;
    gd_status st = gd_tensor_read(q->grad, first ? dst : dp->tmp, q->n * sizeof(float));
    if (st != GD_OK) return st;
    /* the order one process's accumulation state has: ((g1 + g2) + g3) ... */
    if (!first)
        for (size_t k = 0; k < q->n; k++) dst[k] += dp->tmp[k];
    return GD_OK;
}

static float *bucket_at(const gd_dp *dp, int b, size_t *n)
{
    const dp_param *lo = &dp->ps[dp->buckets[b].lo], *last = &dp->ps[dp->buckets[b].hi - 1];
    *n = last->off + last->n - lo->off;
    return dp->buf + lo->off;
}

/* ---- overlap ----------------------------------------------------------------------------- */

/* The communication thread: sums the posted buckets in order; after a failure it skips the
 * rest (the job is broken) and keeps the first message. */
static void *comm_main(void *arg)
{
    gd_dp *dp = arg;
    pthread_mutex_lock(&dp->mu);
    for (;;) {
        while (!dp->q_stop && dp->q_next >= dp->q_posted) pthread_cond_wait(&dp->cv, &dp->mu);
        if (dp->q_stop) break;
        int b = dp->q_next, ok = dp->q_status == GD_OK;
        pthread_mutex_unlock(&dp->mu);
        gd_status st = GD_OK;
        if (ok) {
            size_t n;
            float *at = bucket_at(dp, b, &n);
            st = gd_dist_allreduce_f32(dp->d, at, n, dp->what);
        }
        pthread_mutex_lock(&dp->mu);
        if (st != GD_OK && dp->q_status == GD_OK) {
            dp->q_status = st;
            snprintf(dp->q_err, sizeof dp->q_err, "%s", gd_ctx_error(dp->comm_ctx));
        }
        dp->q_next++;
        pthread_cond_broadcast(&dp->cv);
    }
    pthread_mutex_unlock(&dp->mu);
    return NULL;
}

/* Waits for the posted buckets; the transport's messages go to the graph's context again. */
static gd_status wait_posted(gd_dp *dp)
{
    pthread_mutex_lock(&dp->mu);
    while (dp->q_next < dp->q_posted) pthread_cond_wait(&dp->cv, &dp->mu);
    gd_status st = dp->q_status;
    char m[sizeof dp->q_err];
    memcpy(m, dp->q_err, sizeof m);
    dp->q_next = dp->q_posted = 0;
    dp->q_status = GD_OK;
    dp->q_err[0] = '\0';
    pthread_mutex_unlock(&dp->mu);
    dp->posted = 0;
    dp->live = 0;
    dp->d->ctx = dp->ctx;
    if (st != GD_OK) {
        gd_dist_set_broken(dp->d);
        return gd_ctx_fail(dp->ctx, st, "%s", m);
    }
    return GD_OK;
}

static void stop_thread(gd_dp *dp)
{
    if (!dp->overlap) return;
    pthread_mutex_lock(&dp->mu);
    dp->q_stop = 1; /* after the bucket in progress, whose wait the timeout bounds */
    pthread_cond_broadcast(&dp->cv);
    pthread_mutex_unlock(&dp->mu);
    pthread_join(dp->thread, NULL);
    pthread_cond_destroy(&dp->cv);
    pthread_mutex_destroy(&dp->mu);
    dp->overlap = 0;
    dp->live = 0;
    if (dp->q_status != GD_OK) gd_dist_set_broken(dp->d);
    dp->d->ctx = dp->ctx;
    gd_free(dp->comm_ctx);
    dp->comm_ctx = NULL;
}

void gd_dp_cancel(gd_dp *dp)
{
    if (dp == NULL) return;
    stop_thread(dp);
    if (dp->coll != NULL && dp->live) { /* sums may be queued: they end (or are aborted) first */
        dp->live = 0;
        if (gd_collective_finish(dp->coll, dp->d->timeout_s) != GD_OK) gd_dist_set_broken(dp->d);
    }
}

gd_status gd_dp_skipped(gd_dp *dp)
{
    if (dp->coll == NULL) return GD_OK; /* the host's sums are written whole each step */
    if (dp->reset == NULL && (dp->reset = gd_compile(gd_tensor_graph(dp->ps[0].p), dp->n, dp->zeros, 0)) == NULL)
        return fail_after(dp->ctx, "data parallelism: compiling the sums' reset");
    return gd_program_run(dp->reset);
}

/* Adds gradient i (once a run) and hands the thread every bucket now complete, in order. */
static gd_status take(gd_dp *dp, int i, int in_run)
{
    dp_param *q = &dp->ps[i];
    if (q->taken) return GD_OK;
    gd_status st = add_grad(dp, i, dp->live_first);
    if (st != GD_OK) return st;
    q->taken = 1;
    if (--dp->buckets[q->bucket].pending > 0) return GD_OK;
    int posted = dp->posted;
    while (posted < dp->n_buckets && dp->buckets[posted].pending == 0) posted++;
    if (posted == dp->posted) return GD_OK; /* an earlier bucket is not complete yet */
    if (in_run) dp->early += posted - dp->posted;
    dp->posted = posted;
    pthread_mutex_lock(&dp->mu);
    dp->q_posted = posted;
    pthread_cond_broadcast(&dp->cv);
    pthread_mutex_unlock(&dp->mu);
    return GD_OK;
}

static gd_status on_grad_ready(void *user, gd_tensor *grad)
{
    dp_param *q = user;
    (void)grad;
    return q->dp->live ? take(q->dp, q->index, 1) : GD_OK;
}

/* Queues the device's sums of bucket b (once a step). */
static gd_status queue_bucket(gd_dp *dp, int b)
{
    dp_bucket *k = &dp->buckets[b];
    if (k->queued) return GD_OK;
    k->queued = 1;
    for (int i = k->lo; i < k->hi; i++) {
        gd_status st = gd_collective_allreduce(dp->coll, dp->ps[i].sum);
        if (st != GD_OK) return st;
    }
    return GD_OK;
}

static gd_status on_bucket_ready(void *user, gd_tensor *last)
{
    dp_bucket *k = user;
    gd_dp *dp = k->dp;
    (void)last;
    if (!dp->live) return GD_OK; /* not the step's last micro-batch: more is added yet */
    dp->early++;
    return queue_bucket(dp, (int)(k - dp->buckets));
}

/* Device sums: a callback per bucket on the micro program. */
static gd_status attach_device(gd_dp *dp, gd_program *micro, int overlap)
{
    if (!overlap) return GD_OK;
    gd_tensor **ts = gd_calloc((size_t)dp->n + 1, sizeof *ts);
    if (ts == NULL) return gd_ctx_fail(dp->ctx, GD_ERR_NOMEM, "data parallelism: out of memory");
    gd_status st = GD_OK;
    for (int b = 0; b < dp->n_buckets && st == GD_OK; b++) {
        dp_bucket *k = &dp->buckets[b];
        for (int i = k->lo; i < k->hi; i++) ts[i - k->lo] = dp->ps[i].acc;
        st = gd_program_on_ready_all(micro, k->hi - k->lo, ts, on_bucket_ready, k);
    }
    gd_free(ts);
    return st;
}

gd_status gd_dp_attach(gd_dp *dp, gd_program *micro)
{
    const char *env = getenv("GRADUS_DP_OVERLAP");
    int overlap = !(env != NULL && strcmp(env, "0") == 0);
    if (dp->coll != NULL) return attach_device(dp, micro, overlap);
    if (gd_dist_size(dp->d) < 2 || !overlap) return GD_OK;
    if (!dp->d->serialized_threads) {
        gd_ctx_log(dp->ctx, "rank %d of %d: %s gives no MPI_THREAD_SERIALIZED: gradients are summed after the backward "
                   "pass, not during it", gd_dist_rank(dp->d), gd_dist_size(dp->d), gd_dist_transport(dp->d));
        return GD_OK;
    }
    for (int i = 0; i < dp->n; i++) {
        gd_status st = gd_program_on_ready(micro, dp->ps[i].grad, on_grad_ready, &dp->ps[i]);
        if (st != GD_OK) return st;
    }
    /* a context of its own for the transport's messages while the thread runs it: the
     * graph's is the main thread's */
    dp->comm_ctx = gd_calloc(1, sizeof *dp->comm_ctx);
    if (dp->comm_ctx == NULL) return gd_ctx_fail(dp->ctx, GD_ERR_NOMEM, "data parallelism: out of memory");
    if (pthread_mutex_init(&dp->mu, NULL) != 0) goto no_thread;
    if (pthread_cond_init(&dp->cv, NULL) != 0) {
        pthread_mutex_destroy(&dp->mu);
        goto no_thread;
    }
    if (pthread_create(&dp->thread, NULL, comm_main, dp) != 0) {
        pthread_cond_destroy(&dp->cv);
        pthread_mutex_destroy(&dp->mu);
        goto no_thread;
    }
    dp->overlap = 1;
    return GD_OK;
no_thread:
    gd_free(dp->comm_ctx);
    dp->comm_ctx = NULL;
    return gd_ctx_fail(dp->ctx, GD_ERR_NOMEM, "data parallelism: cannot start the communication thread");
}

void gd_dp_micro(gd_dp *dp, int64_t step, int first, int last)
{
    if (dp->coll != NULL) {
        dp->live = last;
        if (first)
            for (int b = 0; b < dp->n_buckets; b++) dp->buckets[b].queued = 0;
        return;
    }
    if (!dp->overlap || !last) return;
    /* the thread is idle (the last step's buckets were waited for): the buffer and the
     * transport are the main thread's until the first bucket is posted */
    dp->live = 1;
    dp->live_first = first;
    dp->posted = 0;
    snprintf(dp->what, sizeof dp->what, "the gradients of step %lld", (long long)step);
    for (int i = 0; i < dp->n; i++) dp->ps[i].taken = 0;
    for (int b = 0; b < dp->n_buckets; b++) dp->buckets[b].pending = dp->buckets[b].hi - dp->buckets[b].lo;
    memset(dp->comm_ctx, 0, sizeof *dp->comm_ctx);
    dp->d->ctx = dp->comm_ctx;
}

gd_status gd_dp_accumulate(gd_dp *dp, int first)
{
    if (dp->coll != NULL) return GD_OK; /* the micro program added them on the device */
    if (dp->live) { /* gradients no callback took (none, normally) */
        for (int i = 0; i < dp->n; i++) {
            gd_status st = take(dp, i, 0);
            if (st != GD_OK) return st;
        }
        return GD_OK;
    }
    for (int i = 0; i < dp->n; i++) {
        gd_status st = add_grad(dp, i, first);
        if (st != GD_OK) return st;
    }
    return GD_OK;
}

gd_status gd_dp_reduce(gd_dp *dp, int64_t step)
{
    char what[64];
    snprintf(what, sizeof what, "the gradients of step %lld", (long long)step);
    if (dp->coll != NULL) {
        /* the buckets no callback queued (all of them without overlap), in bucket order */
        gd_status st = GD_OK;
        for (int b = 0; b < dp->n_buckets && st == GD_OK; b++) st = queue_bucket(dp, b);
        dp->live = 0;
        gd_status fs = gd_collective_finish(dp->coll, dp->d->timeout_s);
        if (st == GD_OK) st = fs;
        if (st != GD_OK) gd_dist_set_broken(dp->d);
        return st;
    }
    gd_status st = GD_OK;
    if (dp->overlap) {
        st = wait_posted(dp);
    } else {
        for (int b = 0; b < dp->n_buckets && st == GD_OK; b++) {
            size_t n;
            float *at = bucket_at(dp, b, &n);
            st = gd_dist_allreduce_f32(dp->d, at, n, what);
        }
    }
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
    if (gd_collective_can_broadcast(dp->coll)) {
        for (int i = 0; i < dp->n && st == GD_OK; i++) st = gd_collective_broadcast(dp->coll, dp->ps[i].p, dp->ps[i].owner);
        gd_status fs = gd_collective_finish(dp->coll, dp->d->timeout_s);
        if (st == GD_OK) st = fs;
        if (st != GD_OK) gd_dist_set_broken(dp->d);
        return st;
    }
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
    /* the host buffer, the staging of one gradient, the grad_sum states; with device sums
     * the states alone (and the buffer a sharded optimizer sends parameters through) */
    if (dp->coll != NULL) *grad_bytes = (dp->buf != NULL ? 2 : 1) * dp->total * sizeof(float);
    else *grad_bytes = (2 * dp->total + dp->largest) * sizeof(float);
    *optimizer_bytes = 2 * mine * sizeof(float);
}
