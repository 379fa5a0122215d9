/* shm_sum.h — sums (and broadcasts) across the processes of one machine through shared
 * memory, for the test device's collective module (shm_sum.c). Each call returns 0, or -1 with `msg` set. */
#ifndef GRADUS_TESTDEV_SHM_SUM_H
#define GRADUS_TESTDEV_SHM_SUM_H

#include <stddef.h>
#include <stdint.h>

typedef struct shm_job shm_job;

/* Joins job `id` as rank `rank` of `size`; waits for every rank, at most timeout_s. */
int shm_job_open(uint64_t id, int rank, int size, double timeout_s, shm_job **out, char *msg, size_t cap);
/* Replaces `count` elements of `elem` bytes at `data` (host memory) by their sum over the
 * ranks, in rank order. Every rank calls it with the same count, in the same order. */
int shm_job_sum(shm_job *j, void *data, int64_t count, int elem, int is_float, double timeout_s, char *msg, size_t cap);
/* Replaces `bytes` bytes at `data` on every rank by rank root's. */
int shm_job_broadcast(shm_job *j, void *data, int64_t bytes, int root, double timeout_s, char *msg, size_t cap);
void shm_job_close(shm_job *j);

#endif
