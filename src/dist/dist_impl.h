/* dist_impl.h — what the transports of gd_dist (dist_mpi.c, dist_tcp.c) share with dist.c.
 *
 * A transport moves bytes; the summing is dist.c's (gd_dist_sum_in_order), so every
 * transport adds the ranks' values in the same order and gets the same bits. */
#ifndef GD_DIST_IMPL_H
#define GD_DIST_IMPL_H

#include "gradus_dist.h"

#include <stddef.h>
#include <stdint.h>

typedef enum gd_dist_elem { GD_DIST_F32 = 0, GD_DIST_F64 = 1 } gd_dist_elem;

typedef struct gd_dist_ops {
    const char *name;
    /* Sum over ranks, in rank order, of n elements of buf, in place. */
    gd_status (*allreduce)(gd_dist *d, void *buf, size_t n, gd_dist_elem e, const char *what);
    gd_status (*broadcast)(gd_dist *d, void *buf, size_t bytes, int root, const char *what);
    /* Leaves the job; `broken`: without waiting for anyone. */
    void (*close)(gd_dist *d, int broken);
} gd_dist_ops;

struct gd_dist {
    gd_ctx *ctx;
    const gd_dist_ops *ops;
    int rank, size, local_rank;
    double timeout_s;
    size_t bucket_bytes;
    int broken;
    int serialized_threads; /* collectives may come from another thread, one at a time */
    void *impl;       /* the transport's state */
};

/* dst[i] = src_0[i] + src_1[i] + ... + src_{k-1}[i] for k blocks of n elements laid one
 * after another in src, added in that order (block 0 first). */
void gd_dist_sum_in_order(void *dst, const void *src, int k, size_t n, gd_dist_elem e);
size_t gd_dist_elem_size(gd_dist_elem e);
/* Marks d broken and fails with "rank R of N: <what>: <message>". */
gd_status gd_dist_fail(gd_dist *d, gd_status s, const char *what, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
double gd_dist_now(void);

/* Transports: each fills d->ops, rank, size, local_rank and impl, or fails. */
gd_status gd_dist_tcp_open(gd_dist *d, int rank, int size, int local_rank, const char *addr, const char *port);
#ifdef GD_HAVE_MPI
gd_status gd_dist_mpi_open(gd_dist *d);
#endif

#endif
