/* testutil.h — helpers shared by the test programs: the CHECK macro and its failure
 * counter, the context (created without plugins, so the tests run on the reference),
 * building, compiling and running small graphs, comparing float results with a tolerance,
 * and checking that an error message names what it should.
 *
 * Header-only (static variables and static inline functions), so each tests/test_*.c is
 * still one program; include it first, after "gradus.h". A helper a test does not use
 * costs nothing. */
#ifndef GD_TESTS_TESTUTIL_H
#define GD_TESTS_TESTUTIL_H

#include "gradus.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- files ------------------------------------------------------------------------------- */

/* dir/name, in one of four rotating buffers: a call may take up to four such paths at once. */
static inline const char *tu_path(const char *dir, const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* ---- checks and the context --------------------------------------------------------- */

static int failures;
static gd_ctx *ctx;

/* Counts a failure and prints where it happened and the printf-style message. */
#define CHECK(cond, ...)                                         \
    do {                                                         \
        if (!(cond)) {                                           \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                        \
            fputc('\n', stderr);                                 \
            failures++;                                          \
        }                                                        \
    } while (0)

/* Creates ctx with no plugins; 1 on success, 0 (message printed) on failure. */
static inline int tu_open_ctx(void)
{
    gd_status s = gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1});
    if (s != GD_OK) fprintf(stderr, "FAIL: gd_ctx_create: %s\n", gd_status_name(s));
    return s == GD_OK;
}

/* Frees ctx and reports the count of failed checks; the exit status for main. */
static inline int tu_finish(const char *name)
{
    gd_ctx_free(ctx);
    ctx = NULL;
    if (failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, failures);
        return 1;
    }
    printf("%s: ok\n", name);
    return 0;
}

/* A new graph, with the last error cleared. */
static inline gd_graph *fresh(void)
{
    gd_ctx_clear_error(ctx);
    return gd_graph_new(ctx);
}

/* ---- building and running graphs ----------------------------------------------------- */

/* An f32 input; data (numel floats) is written into it unless NULL. */
static inline gd_tensor *in_f32(gd_graph *g, const char *name, int nd, const int64_t *shape, const float *data)
{
    gd_tensor *t = gd_input(g, name, GD_F32, nd, shape);
    if (t != NULL && data != NULL) gd_tensor_write(t, data, (size_t)gd_tensor_numel(t) * sizeof(float));
    return t;
}

/* Compiles the targets and runs them once; NULL (and a failure) when a target was not
 * built or either step fails. The caller frees the program. */
static inline gd_program *compile_run(gd_graph *g, int n, gd_tensor **targets)
{
    for (int i = 0; i < n; i++) {
        if (targets[i] == NULL) {
            CHECK(0, "target %d was not built: %s", i, gd_ctx_error(ctx));
            return NULL;
        }
    }
    gd_program *p = gd_compile(g, n, targets, 0);
    CHECK(p != NULL, "compile: %s", gd_ctx_error(ctx));
    if (p == NULL) return NULL;
    gd_status s = gd_program_run(p);
    CHECK(s == GD_OK, "run: %s", gd_ctx_error(ctx));
    if (s != GD_OK) {
        gd_program_free(p);
        return NULL;
    }
    return p;
}

/* Runs targets t[0..n) once and reads each whole into out[k]. 1 on success. */
static inline int run_read(gd_graph *g, int n, gd_tensor **t, void **out)
{
    for (int k = 0; k < n; k++)
        if (t[k] == NULL) {
            CHECK(0, "building failed: %s", gd_ctx_error(ctx));
            return 0;
        }
    gd_program *p = gd_compile(g, n, t, 0);
    if (p == NULL) {
        CHECK(0, "compile failed: %s", gd_ctx_error(ctx));
        return 0;
    }
    gd_status s = gd_program_run(p);
    CHECK(s == GD_OK, "run failed: %s", gd_ctx_error(ctx));
    for (int k = 0; k < n && s == GD_OK; k++) {
        s = gd_tensor_read(t[k], out[k], gd_dtype_size(gd_tensor_dtype(t[k])) * (size_t)gd_tensor_numel(t[k]));
        CHECK(s == GD_OK, "read failed: %s", gd_ctx_error(ctx));
    }
    gd_program_free(p);
    return s == GD_OK;
}

static inline int run1_read(gd_graph *g, gd_tensor *t, void *out) { return run_read(g, 1, &t, &out); }

/* ---- comparing results ---------------------------------------------------------------- */

/* got[0..n) against want[0..n), each within tol relative (plus tol absolute). */
static inline void expect_close(const char *what, const float *got, const double *want, int n, double tol)
{
    for (int i = 0; i < n; i++)
        CHECK(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])), "%s[%d] = %.9g, want %.9g", what, i, got[i], want[i]);
}

/* t's f32 values (at most 256) against want[0..n), as expect_close. */
static inline void expect_tensor(const char *what, gd_tensor *t, const double *want, int n, double tol)
{
    float got[256];
    CHECK(gd_tensor_numel(t) == n, "%s: %lld elements, %d expected", what, (long long)gd_tensor_numel(t), n);
    if (gd_tensor_numel(t) != n || n > 256) return;
    gd_status s = gd_tensor_read(t, got, (size_t)n * sizeof(float));
    CHECK(s == GD_OK, "%s: read: %s", what, gd_ctx_error(ctx));
    if (s != GD_OK) return;
    for (int i = 0; i < n; i++)
        CHECK(fabs(got[i] - want[i]) <= tol * (1.0 + fabs(want[i])), "%s[%d] = %.9g, expected %.9g", what, i,
              got[i], want[i]);
}

/* t (when built) must have the shape shape[0..ndim). */
static inline void expect_shape(gd_tensor *t, int ndim, const int64_t *shape)
{
    if (t == NULL) return;
    CHECK(gd_tensor_ndim(t) == ndim, "ndim %d, want %d", gd_tensor_ndim(t), ndim);
    for (int d = 0; d < ndim && d < gd_tensor_ndim(t); d++)
        CHECK(gd_tensor_dim(t, d) == shape[d], "dim %d is %lld, want %lld", d, (long long)gd_tensor_dim(t, d),
              (long long)shape[d]);
}

/* ---- error messages ------------------------------------------------------------------- */

/* The error message must mention every one of the (NULL-terminated) parts. */
static inline void check_error(const char *what, const char *const *parts)
{
    const char *e = gd_ctx_error(ctx);
    for (int i = 0; parts[i] != NULL; i++)
        CHECK(strstr(e, parts[i]) != NULL, "%s: message '%s' lacks '%s'", what, e, parts[i]);
}

/* The builder must have failed (t NULL) with a message mentioning every string in
 * needles[0..n); clears the error. */
static inline void expect_error(gd_tensor *t, const char *what, int n, const char *const *needles)
{
    CHECK(t == NULL, "%s: should have failed", what);
    const char *msg = gd_ctx_error(ctx);
    for (int i = 0; i < n; i++) CHECK(strstr(msg, needles[i]) != NULL, "%s: message '%s' lacks '%s'", what, msg, needles[i]);
    gd_ctx_clear_error(ctx);
}

#endif
