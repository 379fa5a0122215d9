/* shm_sum.c — the test device's sums across processes: the ranks of a job on one machine
 * meet in a shared-memory file named by the job's id and add their buffers there, a chunk
 * at a time, in rank order (rank 0's value + rank 1's + ...). Rank order is what the
 * host's own path adds in, so a job that sums here gives the same bits as one that sums
 * through the host: that is what the tests compare.
 *
 * A barrier is a counter and a generation number in the file (C11 atomics on shared
 * memory); a wait that passes its deadline fails, naming the job, so that a rank that died
 * stops the others instead of hanging them. */
#define _GNU_SOURCE
#include "shm_sum.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHUNK ((size_t)1 << 20) /* bytes a rank puts in at a time */

typedef struct shm_head {
    _Atomic uint32_t arrived; /* ranks at the barrier now */
    _Atomic uint32_t gen;     /* barriers passed */
    _Atomic uint32_t failed;  /* a rank gave up: the job is broken */
} shm_head;

struct shm_job {
    shm_head *head;
    unsigned char *slots; /* size x CHUNK */
    size_t bytes;
    int rank, size;
    char name[64];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int barrier(shm_job *j, double timeout_s, char *msg, size_t cap)
{
    uint32_t g = atomic_load(&j->head->gen);
    if (atomic_fetch_add(&j->head->arrived, 1) + 1 == (uint32_t)j->size) {
        atomic_store(&j->head->arrived, 0);
        atomic_fetch_add(&j->head->gen, 1);
        return 0;
    }
    double deadline = now_s() + timeout_s;
    while (atomic_load(&j->head->gen) == g) {
        if (atomic_load(&j->head->failed)) {
            snprintf(msg, cap, "job %s: another rank gave up", j->name);
            return -1;
        }
        if (now_s() > deadline) {
            atomic_store(&j->head->failed, 1);
            snprintf(msg, cap, "job %s: waited %g s for the other ranks: a rank died, hangs or stopped early", j->name,
                     timeout_s);
            return -1;
        }
        sched_yield();
    }
    return 0;
}

int shm_job_open(uint64_t id, int rank, int size, double timeout_s, shm_job **out, char *msg, size_t cap)
{
    *out = NULL;
    shm_job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        snprintf(msg, cap, "out of memory");
        return -1;
    }
    snprintf(j->name, sizeof j->name, "/gradus-testdev-%016llx", (unsigned long long)id);
    j->rank = rank;
    j->size = size;
    j->bytes = sizeof(shm_head) + (size_t)size * CHUNK;
    /* every rank creates or opens it and gives it the same size; zero-filled when new */
    int fd = shm_open(j->name, O_RDWR | O_CREAT, 0600);
    void *m = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, (off_t)j->bytes) == 0)
        m = mmap(NULL, j->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    if (fd >= 0) close(fd);
    if (m == MAP_FAILED) {
        snprintf(msg, cap, "job %s: shared memory: %s", j->name, strerror(e));
        free(j);
        return -1;
    }
    j->head = m;
    j->slots = (unsigned char *)m + sizeof(shm_head);
    /* everyone is in: the name can go (the mappings stay) */
    if (barrier(j, timeout_s, msg, cap) != 0) {
        shm_job_close(j);
        return -1;
    }
    if (rank == 0) shm_unlink(j->name);
    *out = j;
    return 0;
}

int shm_job_sum(shm_job *j, void *data, int64_t count, int elem, int is_float, double timeout_s, char *msg, size_t cap)
{
    size_t per = CHUNK / (size_t)elem;
    for (int64_t at = 0; at < count; at += (int64_t)per) {
        size_t n = (size_t)(count - at) < per ? (size_t)(count - at) : per;
        unsigned char *mine = (unsigned char *)data + (size_t)at * (size_t)elem;
        memcpy(j->slots + (size_t)j->rank * CHUNK, mine, n * (size_t)elem);
        if (barrier(j, timeout_s, msg, cap) != 0) return -1;
        const unsigned char *in = j->slots;
        for (size_t i = 0; i < n; i++) { /* rank 0's value, then + each other rank's */
            const size_t at_i = i * (size_t)elem;
            if (is_float && elem == 4) {
                float s = *(const float *)(in + at_i);
                for (int r = 1; r < j->size; r++) s += *(const float *)(in + (size_t)r * CHUNK + at_i);
                ((float *)mine)[i] = s;
            } else if (is_float && elem == 8) {
                double s = *(const double *)(in + at_i);
                for (int r = 1; r < j->size; r++) s += *(const double *)(in + (size_t)r * CHUNK + at_i);
                ((double *)mine)[i] = s;
            } else if (elem == 4) {
                int32_t s = *(const int32_t *)(in + at_i);
                for (int r = 1; r < j->size; r++) s += *(const int32_t *)(in + (size_t)r * CHUNK + at_i);
                ((int32_t *)mine)[i] = s;
            } else {
                int64_t s = *(const int64_t *)(in + at_i);
                for (int r = 1; r < j->size; r++) s += *(const int64_t *)(in + (size_t)r * CHUNK + at_i);
                ((int64_t *)mine)[i] = s;
            }
        }
        /* the slots are read: the next chunk may overwrite them */
        if (barrier(j, timeout_s, msg, cap) != 0) return -1;
    }
    return 0;
}

int shm_job_broadcast(shm_job *j, void *data, int64_t bytes, int root, double timeout_s, char *msg, size_t cap)
{
    for (int64_t at = 0; at < bytes; at += (int64_t)CHUNK) {
        size_t n = (size_t)(bytes - at) < CHUNK ? (size_t)(bytes - at) : CHUNK;
        unsigned char *mine = (unsigned char *)data + at;
        if (j->rank == root) memcpy(j->slots, mine, n);
        if (barrier(j, timeout_s, msg, cap) != 0) return -1;
        if (j->rank != root) memcpy(mine, j->slots, n);
        if (barrier(j, timeout_s, msg, cap) != 0) return -1;
    }
    return 0;
}

void shm_job_close(shm_job *j)
{
    if (j == NULL) return;
    munmap(j->head, j->bytes);
    free(j);
}
