/* threadpool.c — see threadpool.h for the contract.
 *
 * Protocol. A job is published by writing its fields and then bumping `gen` (seq_cst).
 * Every worker acknowledges every job by decrementing `pending`, even when it has no chunk
 * in it: the caller therefore cannot publish the next job while a slow worker might still
 * be reading the fields of this one. Jobs of a single chunk never wake the workers at all.
 *
 * Sleeping without lost wake-ups: a worker increments `sleepers` and re-checks `gen` under
 * `sleep_mu` before waiting; the caller bumps `gen` and then reads `sleepers`. Both are
 * seq_cst, so at least one side sees the other's write; if the caller sees a sleeper it
 * broadcasts under the mutex, which the sleeper holds until it is inside the wait.
 *
 * Users. `api_mu` is held for a whole launch (gcpu_launch_begin .. end), so the job
 * fields, `cur` (whose scratch the workers use) and the thread count change only between
 * launches; a worker reads them after the acquire of `gen`, which orders them after the
 * caller's writes. Workers are created and joined only with api_mu held and no job out.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* How long an idle worker spins before sleeping. Kernels of one step follow each other
 * within microseconds; a sleeping worker takes tens of microseconds to wake. */
#define SPIN_NS 200000L

typedef struct pool {
    /* Held for a whole kernel launch (or one parallel_for outside a launch); also guards
     * the users' list and the workers' (re)creation. */
    pthread_mutex_t api_mu;
    pthread_mutex_t sleep_mu;
    pthread_cond_t sleep_cv;
    atomic_uint_fast64_t gen;
    atomic_int pending;
    atomic_int sleepers;
    atomic_int stop;
    /* the current job */
    gcpu_range_fn fn;
    void *ctx;
    int64_t n;
    int chunks;
    gcpu_user *cur;             /* whose launch holds the pool: its scratch */
    /* workers 1 .. nthreads-1; thread 0 is whoever calls */
    int nthreads;
    int created;
    uint_fast64_t start_gen;    /* gen when the workers were created */
    gcpu_user *users;           /* attached users; the pool has the most threads any wants */
    pthread_t th[GCPU_MAX_THREADS];
} pool;

static pool P = {
    .api_mu = PTHREAD_MUTEX_INITIALIZER,
    .sleep_mu = PTHREAD_MUTEX_INITIALIZER,
    .sleep_cv = PTHREAD_COND_INITIALIZER,
};
/* The user of calls made outside any launch (the GEMM's test and benchmark). */
static gcpu_user default_user;

/* Set while a thread runs chunks: its tid, so nested calls run inline as that thread. */
static _Thread_local int tl_in_pool = 0;
static _Thread_local int tl_tid = 0;
/* The user whose launch this thread holds the pool for, or NULL. */
static _Thread_local gcpu_user *tl_launch = NULL;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void run_chunk(int t)
{
    int64_t n = P.n, T = P.chunks;
    int64_t b = n * t / T, e = n * (t + 1) / T;
    if (b < e) P.fn(P.ctx, b, e, t);
}

static void *worker_main(void *arg)
{
    int tid = (int)(intptr_t)arg;
    tl_in_pool = 1;
    tl_tid = tid;
    /* Not atomic_load(&P.gen) here: a job may already have been published by the time this
     * thread first runs, and it must not be mistaken for the starting point. */
    uint_fast64_t seen = P.start_gen;
    for (;;) {
        /* Wait for a new generation: spin first, then sleep. */
        int64_t t0 = now_ns();
        unsigned spins = 0;
        while (atomic_load_explicit(&P.gen, memory_order_acquire) == seen && !atomic_load(&P.stop)) {
            cpu_relax();
            if ((++spins & 255) == 0 && now_ns() - t0 > SPIN_NS) {
                pthread_mutex_lock(&P.sleep_mu);
                atomic_fetch_add(&P.sleepers, 1);
                while (atomic_load(&P.gen) == seen && !atomic_load(&P.stop))
                    pthread_cond_wait(&P.sleep_cv, &P.sleep_mu);
                atomic_fetch_sub(&P.sleepers, 1);
                pthread_mutex_unlock(&P.sleep_mu);
            }
        }
        if (atomic_load(&P.stop)) return NULL;
        seen = atomic_load_explicit(&P.gen, memory_order_acquire);
        if (tid < P.chunks) run_chunk(tid);
        atomic_fetch_sub_explicit(&P.pending, 1, memory_order_release);
    }
}

int gcpu_default_threads(void)
{
    const char *s = getenv("GRADUS_THREADS");
    if (s != NULL && *s != '\0') {
        long v = strtol(s, NULL, 10);
        if (v > 0) return v > GCPU_MAX_THREADS ? GCPU_MAX_THREADS : (int)v;
    }
    int n = 0;
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
    if (n <= 0) {
        long v = sysconf(_SC_NPROCESSORS_ONLN);
        n = v > 0 ? (int)v : 1;
    }
    return n > GCPU_MAX_THREADS ? GCPU_MAX_THREADS : n;
}

/* Both with api_mu held. */
static void stop_workers(void)
{
    if (!P.created) return;
    pthread_mutex_lock(&P.sleep_mu);
    atomic_store(&P.stop, 1);
    pthread_cond_broadcast(&P.sleep_cv);
    pthread_mutex_unlock(&P.sleep_mu);
    for (int t = 1; t < P.nthreads; t++) pthread_join(P.th[t], NULL);
    atomic_store(&P.stop, 0);
    P.created = 0;
    P.nthreads = 0;
}

static void start_workers(int n)
{
    if (n < 1) n = 1;
    if (n > GCPU_MAX_THREADS) n = GCPU_MAX_THREADS;
    P.nthreads = 1;
    P.start_gen = atomic_load(&P.gen);
    for (int t = 1; t < n; t++) {
        if (pthread_create(&P.th[t], NULL, worker_main, (void *)(intptr_t)t) != 0) break;
        P.nthreads = t + 1; /* keep what could be created; fewer threads is not an error */
    }
    P.created = 1;
}

/* ---- users ------------------------------------------------------------------------------ */

static int clamp_threads(int n)
{
    if (n <= 0) n = gcpu_default_threads();
    return n > GCPU_MAX_THREADS ? GCPU_MAX_THREADS : n;
}

/* With api_mu held: as many workers as the most any attached user wants, none when no
 * user is left. Workers are only ever (re)created here, between launches. */
static void resize_locked(void)
{
    int want = 0;
    for (gcpu_user *u = P.users; u != NULL; u = u->next) want = u->threads > want ? u->threads : want;
    if (want == 0) {
        stop_workers();
        return;
    }
    if (P.created && P.nthreads == want) return;
    stop_workers();
    start_workers(want);
}

static void attach_locked(gcpu_user *u, int threads)
{
    u->threads = clamp_threads(threads);
    if (!u->attached) {
        u->attached = 1;
        u->next = P.users;
        P.users = u;
    }
    resize_locked();
}

static void free_scratch(gcpu_user *u)
{
    for (int t = 0; t < GCPU_MAX_THREADS; t++)
        for (int s = 0; s < GCPU_SCRATCH_SLOTS; s++) {
            free(u->scratch[t][s].p);
            u->scratch[t][s].p = NULL;
            u->scratch[t][s].cap = 0;
        }
}

static void detach_locked(gcpu_user *u)
{
    if (!u->attached) return;
    for (gcpu_user **pp = &P.users; *pp != NULL; pp = &(*pp)->next)
        if (*pp == u) {
            *pp = u->next;
            break;
        }
    u->attached = 0;
    u->next = NULL;
    free_scratch(u);
    resize_locked();
}

/* The threads u's parallel_for may use: its count, or fewer if the pool could not create
 * that many. With api_mu held. */
static int effective_threads(const gcpu_user *u)
{
    return u->threads < P.nthreads ? u->threads : P.nthreads;
}

int gcpu_user_attach(gcpu_user *u, int threads)
{
    pthread_mutex_lock(&P.api_mu);
    attach_locked(u, threads);
    int got = effective_threads(u);
    pthread_mutex_unlock(&P.api_mu);
    return got;
}

int gcpu_user_set_threads(gcpu_user *u, int threads)
{
    if (tl_launch != NULL || tl_in_pool) return u->threads; /* never resize under a launch */
    return gcpu_user_attach(u, threads);
}

void gcpu_user_detach(gcpu_user *u)
{
    if (tl_launch != NULL || tl_in_pool) return;
    pthread_mutex_lock(&P.api_mu);
    detach_locked(u);
    pthread_mutex_unlock(&P.api_mu);
}

void gcpu_launch_begin(gcpu_user *u)
{
    pthread_mutex_lock(&P.api_mu);
    if (!u->attached) attach_locked(u, u->threads); /* not expected: an instance attaches at init */
    P.cur = u;
    tl_launch = u;
}

void gcpu_launch_end(void)
{
    if (tl_launch == NULL) return;
    tl_launch = NULL;
    P.cur = NULL;
    pthread_mutex_unlock(&P.api_mu);
}

int gcpu_in_parallel(void)
{
    return tl_in_pool;
}

int gcpu_pool_threads(void)
{
    if (tl_launch != NULL) return effective_threads(tl_launch);
    if (tl_in_pool) return P.cur != NULL ? effective_threads(P.cur) : 1;
    pthread_mutex_lock(&P.api_mu);
    if (!default_user.attached) attach_locked(&default_user, 0);
    int n = effective_threads(&default_user);
    pthread_mutex_unlock(&P.api_mu);
    return n;
}

int gcpu_pool_set_threads(int n)
{
    return gcpu_user_set_threads(&default_user, n);
}

void gcpu_pool_shutdown(void)
{
    gcpu_user_detach(&default_user);
}

/* ---- parallel_for ------------------------------------------------------------------------- */

/* Runs the job on T threads of the pool; api_mu is held by the caller. */
static void run_job(int64_t n, int T, gcpu_range_fn fn, void *ctx)
{
    tl_in_pool = 1;
    tl_tid = 0;
    if (T <= 1) {
        fn(ctx, 0, n, 0);
    } else {
        P.fn = fn;
        P.ctx = ctx;
        P.n = n;
        P.chunks = T;
        atomic_store(&P.pending, P.nthreads - 1);
        atomic_fetch_add(&P.gen, 1);
        if (atomic_load(&P.sleepers) > 0) {
            pthread_mutex_lock(&P.sleep_mu);
            pthread_cond_broadcast(&P.sleep_cv);
            pthread_mutex_unlock(&P.sleep_mu);
        }
        run_chunk(0);
        unsigned spins = 0;
        while (atomic_load_explicit(&P.pending, memory_order_acquire) != 0) {
            cpu_relax();
            if (++spins > 4096) sched_yield(); /* a worker may have been descheduled */
        }
    }
    tl_in_pool = 0;
}

static void parallel_for_n(int64_t n, int want, gcpu_range_fn fn, void *ctx)
{
    if (n <= 0) return;
    if (tl_in_pool) { /* nested: the outer call already uses every thread */
        fn(ctx, 0, n, tl_tid);
        return;
    }
    gcpu_user *u = tl_launch;
    if (u == NULL) { /* outside a launch: the default user, for this call */
        pthread_mutex_lock(&P.api_mu);
        if (!default_user.attached) attach_locked(&default_user, 0);
        u = &default_user;
        P.cur = u;
    }
    int T = effective_threads(u);
    if (want > 0 && want < T) T = want;
    if ((int64_t)T > n) T = (int)n;
    run_job(n, T, fn, ctx);
    if (tl_launch == NULL) {
        P.cur = NULL;
        pthread_mutex_unlock(&P.api_mu);
    }
}

void gcpu_parallel_for(int64_t n, gcpu_range_fn fn, void *ctx)
{
    parallel_for_n(n, 0, fn, ctx);
}

void gcpu_parallel_for_grain(int64_t n, int64_t grain, gcpu_range_fn fn, void *ctx)
{
    if (grain < 1) grain = 1;
    int64_t want = n / grain;
    if (want < 1) want = 1;
    parallel_for_n(n, want > GCPU_MAX_THREADS ? GCPU_MAX_THREADS : (int)want, fn, ctx);
}

void *gcpu_scratch(int tid, int slot, size_t bytes)
{
    gcpu_user *u = tl_launch != NULL ? tl_launch : P.cur;
    if (u == NULL || tid < 0 || tid >= GCPU_MAX_THREADS || slot < 0 || slot >= GCPU_SCRATCH_SLOTS) return NULL;
    gcpu_scratch_buf *s = &u->scratch[tid][slot];
    if (s->cap >= bytes && s->p != NULL) return s->p;
    size_t cap = (bytes + 4095) & ~(size_t)4095;
    if (cap == 0) cap = 4096;
    void *p = NULL;
    if (posix_memalign(&p, 64, cap) != 0) return NULL;
    free(s->p);
    s->p = p;
    s->cap = cap;
    return p;
}
