/* dist.c — gd_dist: which job this process belongs to, the transport that carries it,
 * and what every transport shares: buckets, the order of sums, messages naming the rank.
 *
 * Launch variables read:
 *   OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK   mpirun (Open MPI, MPICH): MPI
 *   RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT   a launcher of the usual kind: TCP
 *   GRADUS_DIST_TIMEOUT   seconds a collective waits for the others (default 300)
 */
#include "alloc.h"
#include "dist_impl.h"

#include <errno.h>
#include <stddef.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Whether the caller's options struct (of its own size) has `field`. */
#define GD_HAS_OPT(o, field) ((o)->size >= offsetof(gd_dist_options, field) + sizeof((o)->field))

double gd_dist_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t gd_dist_elem_size(gd_dist_elem e) { return e == GD_DIST_F64 ? sizeof(double) : sizeof(float); }

void gd_dist_sum_in_order(void *dst, const void *src, int k, size_t n, gd_dist_elem e)
{
    if (e == GD_DIST_F64) {
        double *o = dst;
        const double *s = src;
        for (size_t i = 0; i < n; i++) o[i] = s[i];
        for (int r = 1; r < k; r++)
            for (size_t i = 0; i < n; i++) o[i] += s[(size_t)r * n + i];
    } else {
        float *o = dst;
        const float *s = src;
        for (size_t i = 0; i < n; i++) o[i] = s[i];
        for (int r = 1; r < k; r++)
            for (size_t i = 0; i < n; i++) o[i] += s[(size_t)r * n + i];
    }
}

gd_status gd_dist_fail(gd_dist *d, gd_status s, const char *what, const char *fmt, ...)
{
    char m[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    d->broken = 1;
    return gd_ctx_fail(d->ctx, s, "rank %d of %d: %s: %s", d->rank, d->size, what != NULL ? what : "collective", m);
}

/* An integer launch variable; -1 when unset, -2 when set but not a number in [0, INT_MAX). */
static int env_int(const char *name)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') return -1;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || x < 0 || x >= INT_MAX) return -2;
    return (int)x;
}

static int mpi_launch(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL || getenv("PMIX_RANK") != NULL;
}

#ifndef GD_HAVE_MPI
static int job_size(void)
{
    int n = env_int("OMPI_COMM_WORLD_SIZE");
    if (n == -1) n = env_int("PMI_SIZE");
    if (n == -1) n = env_int("WORLD_SIZE");
    return n;
}
#endif

int gd_dist_launched(void) { return mpi_launch() || env_int("WORLD_SIZE") != -1; }

/* ---- a job of one ------------------------------------------------------------------------ */

static gd_status single_allreduce(gd_dist *d, void *buf, size_t n, gd_dist_elem e, const char *what)
{
    return GD_OK;
}
static gd_status single_broadcast(gd_dist *d, void *buf, size_t bytes, int root, const char *what)
{
    return GD_OK;
}
static void single_close(gd_dist *d, int broken) {}
static const gd_dist_ops single_ops = {"single", single_allreduce, single_broadcast, single_close};

/* ---- the API ----------------------------------------------------------------------------- */

gd_status gd_dist_open(gd_ctx *ctx, const gd_dist_options *opt, gd_dist **out)
{
    if (ctx == NULL) return GD_ERR_INVALID;
    if (out == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_dist_open: NULL output");
    *out = NULL;
    gd_dist *d = gd_calloc(1, sizeof *d);
    if (d == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "gd_dist_open: out of memory");
    d->ctx = ctx;
    d->ops = &single_ops;
    d->size = 1;
    d->serialized_threads = 1; /* TCP and a job of one keep no per-thread state */
    d->timeout_s = opt != NULL && GD_HAS_OPT(opt, timeout_s) && opt->timeout_s > 0 ? opt->timeout_s : 0;
    d->bucket_bytes = opt != NULL && GD_HAS_OPT(opt, bucket_bytes) && opt->bucket_bytes > 0 ? opt->bucket_bytes
                                                                                          : (size_t)4 << 20;
    if (d->bucket_bytes < 64) d->bucket_bytes = 64;
    if (d->timeout_s == 0) {
        const char *t = getenv("GRADUS_DIST_TIMEOUT");
        char *end = NULL;
        double v = t != NULL ? strtod(t, &end) : 0;
        if (t != NULL && (end == t || *end != '\0' || !(v > 0))) {
            gd_free(d);
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "GRADUS_DIST_TIMEOUT=%s: want a number of seconds above 0", t);
        }
        d->timeout_s = t != NULL ? v : 300;
    }
    gd_status st = GD_OK;
    if (mpi_launch()) {
#ifdef GD_HAVE_MPI
        st = gd_dist_mpi_open(d);
#else
        if (job_size() != 1)
            st = gd_ctx_fail(ctx, GD_ERR_UNSUPPORTED,
                             "launched by mpirun, but this gradus was built without MPI: rebuild with MPI found "
                             "(libopenmpi-dev), or launch with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
#endif
    } else if (env_int("WORLD_SIZE") != -1) {
        int rank = env_int("RANK"), size = env_int("WORLD_SIZE"), local = env_int("LOCAL_RANK");
        const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
        if (size < 1 || rank < 0 || rank >= size || local == -2)
            st = gd_ctx_fail(ctx, GD_ERR_INVALID, "RANK=%s, WORLD_SIZE=%s, LOCAL_RANK=%s: want 0 <= RANK < WORLD_SIZE",
                             getenv("RANK") ? getenv("RANK") : "(unset)", getenv("WORLD_SIZE"),
                             getenv("LOCAL_RANK") ? getenv("LOCAL_RANK") : "(unset)");
        else if (size > 1 && (addr == NULL || port == NULL))
            st = gd_ctx_fail(ctx, GD_ERR_INVALID, "rank %d of %d: MASTER_ADDR and MASTER_PORT must name the rendezvous",
                             rank, size);
        else if (size > 1)
            st = gd_dist_tcp_open(d, rank, size, local >= 0 ? local : rank, addr, port);
    }
    if (st != GD_OK) {
        gd_free(d);
        return st;
    }
    *out = d;
    return GD_OK;
}

int gd_dist_rank(const gd_dist *d) { return d != NULL ? d->rank : 0; }
int gd_dist_size(const gd_dist *d) { return d != NULL ? d->size : 1; }
int gd_dist_local_rank(const gd_dist *d) { return d != NULL ? d->local_rank : 0; }
const char *gd_dist_transport(const gd_dist *d) { return d != NULL ? d->ops->name : "single"; }
size_t gd_dist_bucket_bytes(const gd_dist *d) { return d != NULL ? d->bucket_bytes : (size_t)4 << 20; }
int gd_dist_broken(const gd_dist *d) { return d != NULL && d->broken; }
void gd_dist_set_broken(gd_dist *d)
{
    if (d != NULL) d->broken = 1;
}

/* The sum, bucket by bucket: each bucket is one collective of bounded size, so a
 * transport's scratch is a bucket's, whatever the model. */
static gd_status allreduce(gd_dist *d, void *buf, size_t n, gd_dist_elem e, const char *what)
{
    if (d == NULL) return GD_ERR_INVALID;
    if (n > 0 && buf == NULL) return gd_ctx_fail(d->ctx, GD_ERR_INVALID, "gd_dist_allreduce: NULL buffer");
    if (d->broken) return gd_dist_fail(d, GD_ERR_DEVICE, what, "an earlier collective failed");
    if (d->size == 1) return GD_OK;
    size_t es = gd_dist_elem_size(e), per = d->bucket_bytes / es;
    for (size_t at = 0; at < n; at += per) {
        size_t k = n - at < per ? n - at : per;
        gd_status st = d->ops->allreduce(d, (char *)buf + at * es, k, e, what);
        if (st != GD_OK) return st;
    }
    return GD_OK;
}

gd_status gd_dist_allreduce_f32(gd_dist *d, float *buf, size_t n, const char *what)
{
    return allreduce(d, buf, n, GD_DIST_F32, what);
}

gd_status gd_dist_allreduce_f64(gd_dist *d, double *buf, size_t n, const char *what)
{
    return allreduce(d, buf, n, GD_DIST_F64, what);
}

gd_status gd_dist_broadcast(gd_dist *d, void *buf, size_t bytes, int root, const char *what)
{
    if (d == NULL) return GD_ERR_INVALID;
    if (root < 0 || root >= d->size || (bytes > 0 && buf == NULL))
        return gd_ctx_fail(d->ctx, GD_ERR_INVALID, "gd_dist_broadcast: root %d of %d ranks, buffer %p", root, d->size,
                           buf);
    if (d->broken) return gd_dist_fail(d, GD_ERR_DEVICE, what, "an earlier collective failed");
    if (d->size == 1) return GD_OK;
    for (size_t at = 0; at < bytes; at += d->bucket_bytes) {
        size_t k = bytes - at < d->bucket_bytes ? bytes - at : d->bucket_bytes;
        gd_status st = d->ops->broadcast(d, (char *)buf + at, k, root, what);
        if (st != GD_OK) return st;
    }
    return GD_OK;
}

gd_status gd_dist_barrier(gd_dist *d, const char *what)
{
    double x = 0;
    return gd_dist_allreduce_f64(d, &x, 1, what);
}

void gd_dist_close(gd_dist *d)
{
    if (d == NULL) return;
    d->ops->close(d, d->broken);
    gd_free(d);
}
