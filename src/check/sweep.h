/* sweep.h — the conformance sweep: every op × dtype (and every mixed-precision form it
 * declares) × backend, each case run on the backend (strict: no fallback) and on the
 * reference with identical inputs, compared by normalized MSE with the op's tolerance,
 * guard bytes checked, a second run bitwise identical, and the backward pass compared for
 * differentiable ops. Every case also runs with strided inputs (harness.h: transposed,
 * sliced, broadcast views), forward and backward. */
#ifndef GD_SWEEP_H
#define GD_SWEEP_H

#include "harness.h"

/* partial: some runs were on the backend's kernel (verified), the others fell back */
enum gd_verdict { GD_V_VERIFIED = 0, GD_V_PARTIAL, GD_V_FALLBACK, GD_V_FAILING, GD_V_NA, GD_V_REFERENCE, GD_V_UNACCOUNTED };

typedef struct gd_sweep_cell {
    int verdict;          /* over every run: contiguous cases and strided variants */
    int cases;            /* cases run */
    double worst;         /* worst NMSE / tolerance ratio seen (0 when exact) */
    char note[512];       /* first failure, or why fallback */
    /* The strided variants alone: verified, partial, fallback, failing; n/a when no
     * case has an input to view (or the row is n/a). */
    int strided;
    int variant_runs;     /* forward runs of strided variants */
    /* Whether the kernel of this row's key takes strided inputs itself (GDP_KERNEL_STRIDED;
     * the op's ref_strided for the reference): 1, 0, or -1 when the backend has none. */
    int native;
} gd_sweep_cell;

typedef struct gd_sweep_row {
    const gd_op_def *op;
    int dtype;            /* -1 for ops whose dtype is an attribute; a mixed row's key dtype */
    const char *signature;/* a mixed-precision row: the form (op->mixed); NULL for dtype rows */
    gd_sweep_cell cell[GD_MAX_BACKENDS];
    /* Mask of the kernel key dtypes the row's cases have (an integer case of add is keyed
     * by i32): a kernel registered for one of them is exercised by the sweep. */
    unsigned case_keys;
} gd_sweep_row;

typedef struct gd_sweep {
    gd_sweep_row *rows;
    int n_rows;
    int n_backends;
    int count[GD_MAX_BACKENDS][GD_V_UNACCOUNTED + 1];
    int strided_count[GD_MAX_BACKENDS][GD_V_UNACCOUNTED + 1]; /* rows by their strided verdict */
    char registration[GD_MAX_BACKENDS][1024]; /* broken registrations per backend */
} gd_sweep;

/* Runs the sweep over the op named `only` (NULL: all) and the backend named `backend`
 * (NULL: all; the reference always runs). `progress` (may be NULL) gets one call per row.
 * A name that matches no op or no loaded backend is an error (gd_sweep_check). */
gd_status gd_sweep_run(gd_ctx *ctx, const char *only, const char *backend, gd_sweep *out,
                       void (*progress)(void *user, const gd_sweep_row *row, int i, int n), void *user);
void gd_sweep_free(gd_sweep *s);
/* GD_OK when `only` (unless NULL) names an op and `backend` (unless NULL) a loaded backend;
 * else an error whose message says which name matched nothing. */
gd_status gd_sweep_check(gd_ctx *ctx, const char *only, const char *backend);
/* GD_OK when `only` (unless NULL) names an op and `backend` (unless NULL) a loaded backend;
 * else an error whose message says which name matched nothing. */
gd_status gd_sweep_check(gd_ctx *ctx, const char *only, const char *backend);
const char *gd_verdict_name(int v);
/* Tolerance for a dtype (scales the op's f32 tolerance; 0 stays exact). */
double gd_sweep_tol(const gd_op_def *op, int dtype, int backward);
/* "f32", or a mixed row's signature: how a row is named. */
const char *gd_sweep_row_key(const gd_sweep_row *row);

#endif
