/* threadpool.h — the fast CPU backend's persistent worker pool, shared by its instances.
 *
 * One pool per process: workers are created once and reused by every parallel_for (no
 * thread is created inside a training step). Idle workers spin for a short while (a step
 * launches many kernels back to back) and then sleep on a condition variable.
 *
 * Users. Each backend instance (one per gradus context) is a gcpu_user: it has its own
 * thread count and its own per-thread scratch. A kernel launch runs between
 * gcpu_launch_begin and gcpu_launch_end, which hold the pool's lock for the whole launch:
 * two instances called from two threads take turns kernel by kernel, and while a launch
 * runs, the pool's workers use its user's thread count and scratch. The pool has as many
 * workers as the most any attached user wants; it is stopped when the last one detaches.
 *
 * Calls made outside a launch (the GEMM's own test and benchmark) use a process-wide
 * default user, locked for the duration of each parallel_for.
 *
 * Work splits statically: n items go to T = min(threads, n) contiguous chunks, chunk t
 * being [n*t/T, n*(t+1)/T), always run by thread t. Kernels that make each output depend
 * only on its own items (never on where chunks begin) are therefore bitwise deterministic
 * whatever the thread count.
 */
#ifndef GCPU_THREADPOOL_H
#define GCPU_THREADPOOL_H

#include <stddef.h>
#include <stdint.h>

#define GCPU_MAX_THREADS 256

/* Per-thread scratch memory of a user: a 64-byte aligned buffer of at least `bytes` for
 * thread `tid` and `slot`, kept between calls and grown on demand (so a warm step
 * allocates nothing). Different users of one thread take different slots. Scratch whose
 * size follows from the node alone is a declared workspace instead (gdp_kernel.workspace). */
#define GCPU_SCRATCH_SLOTS 3
enum { GCPU_SLOT_GEMM_A = 0, GCPU_SLOT_GEMM_B = 1, GCPU_SLOT_KERNEL = 2 };

typedef struct gcpu_scratch_buf {
    void *p;
    size_t cap;
} gcpu_scratch_buf;

typedef struct gcpu_user {
    int threads;                 /* wanted, >= 1 */
    int attached;
    struct gcpu_user *next;      /* the pool's list of attached users */
    gcpu_scratch_buf scratch[GCPU_MAX_THREADS][GCPU_SCRATCH_SLOTS];
} gcpu_user;

/* Runs items [begin, end) of a parallel_for on thread `tid` (0 .. threads-1; 0 is the
 * caller). */
typedef void (*gcpu_range_fn)(void *ctx, int64_t begin, int64_t end, int tid);

/* Attaches u (zeroed by the caller) with `threads` threads (<= 0: the default), growing
 * the pool if needed. Returns the count in effect. */
int gcpu_user_attach(gcpu_user *u, int threads);
/* Sets u's thread count (<= 0: the default) and resizes the pool to the largest count of
 * the users attached. Must not be called inside a launch. Returns the count in effect
 * (smaller than asked if threads could not be created). */
int gcpu_user_set_threads(gcpu_user *u, int threads);
/* Detaches u and frees its scratch; the pool stops when no user is left. */
void gcpu_user_detach(gcpu_user *u);

/* Takes the pool for a kernel launch of u: parallel_for, scratch and the thread count
 * refer to u until gcpu_launch_end. Not nestable. */
void gcpu_launch_begin(gcpu_user *u);
void gcpu_launch_end(void);

/* Splits n items over the pool as described above and returns when all are done. Calls
 * from inside a worker run inline (no nested parallelism). n <= 0 does nothing. */
void gcpu_parallel_for(int64_t n, gcpu_range_fn fn, void *ctx);

/* Below this many multiply-adds a product (a GEMM, a matrix-vector product) runs on one
 * thread: waking workers costs more. */
#define GCPU_PARALLEL_MIN_FLOPS (96 * 96 * 96)

/* Like gcpu_parallel_for, but uses fewer threads when each would get less than `grain`
 * items (small work loses to the cost of waking workers). */
void gcpu_parallel_for_grain(int64_t n, int64_t grain, gcpu_range_fn fn, void *ctx);

/* 1 while the calling thread runs a chunk of a parallel_for (nested calls run inline). */
int gcpu_in_parallel(void);

/* Threads a parallel_for of the current user uses (inside a launch: the launching
 * instance's; elsewhere: the default user's). */
int gcpu_pool_threads(void);
/* The default user's thread count (for direct calls of the GEMM); n <= 0: the default.
 * Returns the count in effect. */
int gcpu_pool_set_threads(int n);
/* The default count: GRADUS_THREADS if set to a positive number, else the cores available. */
int gcpu_default_threads(void);
/* Detaches the default user (freeing its scratch); the pool stops if no user is left. */
void gcpu_pool_shutdown(void);

/* Scratch of the current user (see above) for thread tid. NULL when out of memory. Valid
 * until the next call with the same (tid, slot) and a larger size. */
void *gcpu_scratch(int tid, int slot, size_t bytes);

#endif
