/* gradus_dist.h — several processes training one model: data parallelism.
 *
 * Each process (a *rank*) holds the whole model, trains on its own slice of every global
 * batch, and the ranks sum their gradients before each optimizer step. A gd_dist is this
 * process's membership in such a job; gd_lm_train takes one (gd_lm_train_config.dist).
 *
 * Launch: `mpirun -n N gradus train lm ...` (through MPI, when gradus was built with it),
 * or N processes started with RANK, WORLD_SIZE (and LOCAL_RANK) and a rendezvous address
 * MASTER_ADDR:MASTER_PORT in their environment (through TCP, always available). A process
 * started neither way is a job of one.
 *
 * Exactness. Every sum over ranks is taken in rank order (0, 1, ..., N-1), whatever the
 * transport, so a run repeats bit for bit, and N ranks training micro-batches of B equal
 * one process accumulating N micro-batches of B (gradient accumulation) bit for bit.
 *
 * Faults. A collective waits at most `timeout_s` for the others; past it, it fails with a
 * message naming this rank and what it waited for, and the job is broken: gd_dist_close
 * then leaves without the goodbye the others would never answer, and the launcher (or the
 * others' own timeouts) ends the rest.
 */
#ifndef GRADUS_DIST_H
#define GRADUS_DIST_H

#include "gradus.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gd_dist gd_dist;

typedef struct gd_dist_options {
    size_t size;          /* sizeof(gd_dist_options) */
    double timeout_s;     /* how long a collective waits for the others; 0: GRADUS_DIST_TIMEOUT, else 300 */
    size_t bucket_bytes;  /* gradients are summed in buckets of this size; 0: 4 MiB */
} gd_dist_options;

/* 1 when the environment says this process was launched as a rank of a job (mpirun's
 * variables, or WORLD_SIZE), even a job of one: what a command checks before it joins. */
int gd_dist_launched(void);

/* Joins the job this process was launched into (see above). opt may be NULL. A launch
 * through mpirun in a gradus built without MPI is refused (UNSUPPORTED), saying so. */
gd_status gd_dist_open(gd_ctx *ctx, const gd_dist_options *opt, gd_dist **out);
int gd_dist_rank(const gd_dist *d);        /* 0 for NULL */
int gd_dist_size(const gd_dist *d);        /* 1 for NULL */
int gd_dist_local_rank(const gd_dist *d);  /* rank among the processes of this machine: its GPU */
const char *gd_dist_transport(const gd_dist *d); /* "mpi", "tcp" or "single" */
size_t gd_dist_bucket_bytes(const gd_dist *d);
/* Element-wise sums over the ranks, in rank order, of n values, in place. `what` names
 * the values in messages ("gradients of step 12"). */
gd_status gd_dist_allreduce_f32(gd_dist *d, float *buf, size_t n, const char *what);
gd_status gd_dist_allreduce_f64(gd_dist *d, double *buf, size_t n, const char *what);
/* bytes from rank root to every rank. */
gd_status gd_dist_broadcast(gd_dist *d, void *buf, size_t bytes, int root, const char *what);
gd_status gd_dist_barrier(gd_dist *d, const char *what);
/* 1 once a collective failed (a timeout, a lost peer): the job cannot go on. */
int gd_dist_broken(const gd_dist *d);
/* Marks the job broken from this rank's side: a rank stopping on an error of its own (a
 * failed step, a file it cannot write) calls it before gd_dist_close, which then does not
 * wait for ranks that are themselves waiting for it. */
void gd_dist_set_broken(gd_dist *d);
/* Leaves the job (with the others, unless it is broken) and frees d. */
void gd_dist_close(gd_dist *d);

#ifdef __cplusplus
}
#endif
#endif /* GRADUS_DIST_H */
