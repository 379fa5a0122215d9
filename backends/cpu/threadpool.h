/* threadpool.h — the fast CPU backend's persistent worker pool.
 *
 * One pool per process, created on first use and sized from the cores this process may
 * run on (sched_getaffinity, else sysconf), unless GRADUS_THREADS or gcpu_pool_set_threads
 * says otherwise. Workers are created once and reused by every parallel_for: no thread is
 * created inside a training step. Idle workers spin for a short while (a step launches
 * many kernels back to back) and then sleep on a condition variable.
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

/* Runs items [begin, end) of a parallel_for on thread `tid` (0 .. threads-1; 0 is the
 * caller). */
typedef void (*gcpu_range_fn)(void *ctx, int64_t begin, int64_t end, int tid);

/* Splits n items over the pool as described above and returns when all are done. Calls
 * from inside a worker run inline (no nested parallelism). Calls from several application
 * threads are serialized. n <= 0 does nothing. */
void gcpu_parallel_for(int64_t n, gcpu_range_fn fn, void *ctx);

/* Like gcpu_parallel_for, but uses fewer threads when each would get less than `grain`
 * items (small work loses to the cost of waking workers). */
void gcpu_parallel_for_grain(int64_t n, int64_t grain, gcpu_range_fn fn, void *ctx);

/* 1 while the calling thread runs a chunk of a parallel_for (nested calls run inline). */
int gcpu_in_parallel(void);

/* Threads the pool uses (creating it if needed). */
int gcpu_pool_threads(void);
/* Sets the thread count; n <= 0 means the default (GRADUS_THREADS, else every core
 * available). Workers are (re)created at once. Must not be called from inside a
 * parallel_for. Returns the count in effect (smaller than asked if threads could not be
 * created). */
int gcpu_pool_set_threads(int n);
/* The default count: GRADUS_THREADS if set to a positive number, else the cores available. */
int gcpu_default_threads(void);
/* Stops and joins the workers and frees scratch memory. The pool is re-created on next use. */
void gcpu_pool_shutdown(void);

/* Per-thread scratch memory owned by the pool: a 64-byte aligned buffer of at least
 * `bytes` for thread `tid` and `slot` (0 .. GCPU_SCRATCH_SLOTS-1; different users of one
 * thread take different slots), kept between calls and grown on demand. NULL when out of
 * memory. Valid until the next call with the same (tid, slot) and a larger size. */
#define GCPU_SCRATCH_SLOTS 5
/* GCPU_SLOT_HALF: the f32 copies of a half-precision node's operands (k_half.c), alive
 * while the f32 kernel runs and uses the other slots. */
enum { GCPU_SLOT_GEMM_A = 0, GCPU_SLOT_GEMM_B = 1, GCPU_SLOT_KERNEL = 2, GCPU_SLOT_KERNEL2 = 3, GCPU_SLOT_HALF = 4 };
void *gcpu_scratch(int tid, int slot, size_t bytes);

#endif
