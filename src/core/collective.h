/* collective.h — a backend's collective module (gradus_plugin.h, ABI 2.2) as the library
 * uses it: sums over ranks of a parameter or state in the memory of its backend. The
 * ranks and the exchange of the job's id are the caller's (src/dist). */
#ifndef GD_COLLECTIVE_H
#define GD_COLLECTIVE_H

#include "gradus.h"

#include <stddef.h>

typedef struct gd_collective gd_collective;

/* The id size of the preferred backend's collective module; 0 when it has none (or
 * GRADUS_DEVICE_COLLECTIVE=0 turns device collectives off). */
size_t gd_collective_id_bytes(gd_ctx *ctx);
/* Rank 0: the id of a new job (id_bytes of it). */
gd_status gd_collective_unique_id(gd_ctx *ctx, void *id);
gd_status gd_collective_open(gd_ctx *ctx, const void *id, int rank, int size, gd_collective **out);
/* Queues the sum over ranks of a parameter or state, in place where it lives; it must live
 * on the collective's backend (written at least once). */
gd_status gd_collective_allreduce(gd_collective *c, gd_tensor *t);
/* Whether the module sends a rank's tensor to the others (gd_collective_broadcast). */
int gd_collective_can_broadcast(const gd_collective *c);
/* Queues replacing t, a parameter or state of the collective's backend, by rank root's. */
gd_status gd_collective_broadcast(gd_collective *c, gd_tensor *t, int root);
/* Waits for what was queued, at most timeout_s. */
gd_status gd_collective_finish(gd_collective *c, double timeout_s);
const char *gd_collective_backend(const gd_collective *c);
void gd_collective_close(gd_collective *c);

#endif
