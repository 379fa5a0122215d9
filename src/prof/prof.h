/* prof.h — the profiler as the core sees it: what compile.c, run.c and backend.c call
 * while a context records a trace (gd_profile_start in gradus.h, or GRADUS_PROFILE).
 *
 * A context that is not profiling has ctx->prof == NULL, and every hook sits behind one
 * test of that pointer, so profiling off costs a predictable branch per site. While it
 * is on, hooks append fixed-size records to memory (no I/O, no allocation once the
 * buffers have grown); the trace is written when profiling stops, on an explicit flush,
 * or when the context is freed.
 *
 * Times are nanoseconds of CLOCK_MONOTONIC, the clock gdp_host.now_ns gives plugins, so
 * that host spans, device spans from profiler modules and spans the core times itself
 * share one timeline. */
#ifndef GD_PROF_H
#define GD_PROF_H

#include "gradus.h"

#include <stdint.h>

#if defined(__GNUC__)
#define GD_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define GD_UNLIKELY(x) (x)
#endif

typedef struct gd_prof gd_prof;
struct gd_backend;

uint64_t gd_prof_now(void);

/* Compile phases, in the order compile.c runs them (names live in prof.c, so that the
 * core holds no string of them). */
enum gd_prof_phase {
    GD_PROF_SELECT = 0,
    GD_PROF_PASSES,
    GD_PROF_LAYOUT,
    GD_PROF_ACTIONS,
    GD_PROF_MEMORY,
    GD_PROF_DESCRIBE,
    GD_PROF_SEGMENTS,
    GD_PROF_BIND,
    GD_PROF_REBIND, /* a run re-points a program whose arena moved */
    GD_PROF_N_PHASES
};

/* What the host waited for. */
enum gd_prof_wait { GD_PROF_SYNC = 0, GD_PROF_EVENT = 1 };

/* A host span [t0, now] of compile phase `phase`. */
void gd_prof_phase(gd_prof *pr, int phase, uint64_t t0);
/* The whole compile [t0, now] of p (a program this profile now knows). */
void gd_prof_compiled(gd_prof *pr, gd_program *p, uint64_t t0);

/* A run of p: begin (collects device spans when many are pending) and end. */
void gd_prof_run_begin(gd_prof *pr, gd_program *p);
void gd_prof_run_end(gd_prof *pr, gd_program *p, uint64_t t0, gd_status st);
/* Action `act` of p ran from t0 to now: a copy between backends, or a kernel launch. A
 * launch on a backend whose kernels run on the calling thread and that has no profiler
 * module is the device span itself; on a device, it is the host's launch, and the
 * device's span comes later from the backend's profiler module. Each returns "now", the
 * start of the next action (so an action costs one reading of the clock). */
uint64_t gd_prof_copy(gd_prof *pr, const gd_program *p, int act, uint64_t t0);
uint64_t gd_prof_launch(gd_prof *pr, const gd_program *p, int act, uint64_t t0);
/* Segment `seg` of p ran through its backend's executor from t0 to now. */
uint64_t gd_prof_segment(gd_prof *pr, const gd_program *p, int seg, uint64_t t0);
/* The host waited for backend b (GD_PROF_SYNC, GD_PROF_EVENT) from t0 to now. */
void gd_prof_wait(gd_prof *pr, const struct gd_backend *b, int what, uint64_t t0);
/* Data between the application and a tensor (write = 1: into the graph). */
void gd_prof_transfer(gd_prof *pr, const gd_tensor *t, int write, size_t bytes, uint64_t t0);
/* Memory held on backend b changed: a counter sample. */
void gd_prof_memory(gd_prof *pr, const struct gd_backend *b);

/* Starts recording from GRADUS_PROFILE when it is set (gd_ctx_create calls it). */
void gd_prof_from_env(gd_ctx *ctx);
/* Writes the trace of a context about to go and stops (a failure is logged). */
void gd_prof_close(gd_ctx *ctx);

#endif
