/* sweep.c — see sweep.h. */
#include "sweep.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *gd_verdict_name(int v)
{
    static const char *n[] = {"verified", "partial", "fallback", "failing", "n/a", "reference", "unaccounted"};
    return v >= 0 && v <= GD_V_UNACCOUNTED ? n[v] : "?";
}

double gd_sweep_tol(const gd_op_def *op, int dtype, int backward)
{
    if (op->tol <= 0) return 0;
    double t = op->tol;
    /* half precision: the result is rounded to 11 (f16) or 8 (bf16) significant bits, and a
     * backend may round intermediates differently than the reference, which rounds once */
    if (dtype == GDP_F16) t = fmax(t, 1e-5);
    if (dtype == GDP_BF16) t = fmax(t, 3e-4);
    return backward ? t * 10 : t;
}

static int same_bits(const gd_case_out *a, const gd_case_out *b)
{
    if (a->n != b->n) return 0;
    for (int k = 0; k < a->n; k++) {
        size_t bytes = (size_t)gdp_numel(&a->t[k]) * gdp_dtype_size(a->t[k].dtype);
        if (memcmp(a->t[k].data, b->t[k].data, bytes) != 0) return 0;
    }
    return 1;
}

/* Compares got against ref; returns 0 when within tolerance, else writes a note. */
static int compare(const gd_op_def *op, int dtype, int backward, const gd_case_out *ref, const gd_case_out *got,
                   double *worst, char *note, size_t cap)
{
    if (ref->n != got->n) {
        snprintf(note, cap, "%d outputs, reference has %d", got->n, ref->n);
        return 1;
    }
    double tol = gd_sweep_tol(op, dtype, backward);
    for (int k = 0; k < ref->n; k++) {
        if (tol == 0 || !gdp_is_float(ref->t[k].dtype)) {
            size_t bytes = (size_t)gdp_numel(&ref->t[k]) * gdp_dtype_size(ref->t[k].dtype);
            if (memcmp(ref->t[k].data, got->t[k].data, bytes) != 0) {
                int64_t j = 0;
                while (j < gdp_numel(&ref->t[k]) && gd_ref_load(&ref->t[k], j) == gd_ref_load(&got->t[k], j)) j++;
                snprintf(note, cap, "%soutput %d differs (exact op) at element %lld: %g vs reference %g",
                         backward ? "backward " : "", k, (long long)j, gd_ref_load(&got->t[k], j),
                         gd_ref_load(&ref->t[k], j));
                return 1;
            }
            continue;
        }
        int nan = 0;
        double e = gd_nmse(&ref->t[k], &got->t[k], &nan);
        if (nan) {
            snprintf(note, cap, "%soutput %d: NaN/Inf where the reference has none (or the reverse)",
                     backward ? "backward " : "", k);
            return 1;
        }
        if (e / tol > *worst) *worst = e / tol;
        if (!(e <= tol)) {
            snprintf(note, cap, "%soutput %d: NMSE %.3g over tolerance %.3g", backward ? "backward " : "", k, e, tol);
            return 1;
        }
    }
    return 0;
}

static int dtype_supported(const gd_backend *b, int dtype)
{
    for (int i = 0; i < b->n_kernels; i++)
        if (b->kernels[i].dtype == dtype) return 1;
    return 0;
}

/* ---- mixed-precision rows ------------------------------------------------------------ */

/* Calls f with each operand dtype of a signature "bf16,bf16->f32", in order. */
static void sig_dtypes(const char *sig, void (*f)(int dt, void *user), void *user)
{
    const char *p = sig;
    while (*p) {
        size_t n = strcspn(p, ",-");
        int dt = gd_dtype_from_name(p, n);
        if (dt >= 0) f(dt, user);
        p += n;
        while (*p == ',' || *p == '-' || *p == '>') p++;
    }
}

static void first_float(int dt, void *user)
{
    int *key = user;
    if (*key < 0 && gdp_is_float(dt)) *key = dt;
}

static void least_precise(int dt, void *user)
{
    int *t = user;
    if (dt == GDP_BF16 || (dt == GDP_F16 && *t != GDP_BF16)) *t = dt;
}

/* The dtype a kernel of the form is keyed by (its first floating operand's), and the one
 * its tolerance is scaled for (its least precise operand's). */
static int sig_key_dtype(const char *sig)
{
    int key = -1;
    sig_dtypes(sig, first_float, &key);
    return key;
}

static int sig_tol_dtype(const char *sig)
{
    int t = GDP_F32;
    sig_dtypes(sig, least_precise, &t);
    return t;
}

const char *gd_sweep_row_key(const gd_sweep_row *row)
{
    if (row->signature != NULL) return row->signature;
    return row->dtype < 0 ? "attr" : gd_dtype_name((gd_dtype)row->dtype);
}

/* Whether the backend's kernel for the row's key takes strided inputs itself: 1, 0, or -1
 * when it has none. A row keyed by an attribute (dtype -1) counts every uniform kernel of
 * the op: 1 only when all of them do. */
static int native_strided(const gd_backend *b, const gd_sweep_row *row)
{
    if (b->is_ref) return row->op->ref_strided != 0;
    int found = 0, all = 1;
    for (int i = 0; i < b->n_kernels; i++) {
        const gd_kernel_entry *e = &b->kernels[i];
        if (e->op != row->op) continue;
        if (row->signature != NULL ? e->signature == NULL || strcmp(e->signature, row->signature) != 0
                                   : e->signature != NULL || (row->dtype >= 0 && e->dtype != row->dtype))
            continue;
        found = 1;
        all &= (e->k.flags & GDP_KERNEL_STRIDED) != 0;
    }
    return found ? all : -1;
}

/* ---- one cell ------------------------------------------------------------------------- */

enum { RUN_OK, RUN_FALLBACK, RUN_FAILED, RUN_OTHER_FORM };

static void run_note(gd_sweep_cell *cell, const char *spec, int variant, int backward, const char *what)
{
    snprintf(cell->note, sizeof cell->note, "\"%s\"%s%s%s: %s", spec, variant ? " " : "",
             variant ? gd_case_variant_name(variant) : "", backward ? " backward" : "", what);
}

/* One case in one layout on backend b, forward then (for differentiable ops) backward,
 * against the oracle: the reference with view ops run as kernels. `sig`: the mixed form
 * the row is for (a case of another form is skipped). */
static int run_case(gd_ctx *ctx, const gd_op_def *op, const gd_case *cs, const char *spec, int variant, gd_backend *b,
                    int tol_dt, const char *sig, gd_sweep_cell *cell, unsigned *case_keys)
{
    int passes = op->grad != NULL ? 2 : 1;
    for (int backward = 0; backward < passes; backward++) {
        gd_case_prog rp, bp;
        gd_case_out ro = {0}, bo = {0}, bo2 = {0};
        int strict = ctx->strict;
        /* the oracle */
        ctx->strict = 0;
        gd_case_opts o = {.backend = 0, .backward = backward, .seed = 1234, .variant = variant, .oracle = 1};
        gd_status st = gd_case_build_ex(ctx, op, cs, &o, &rp);
        if (st == GD_OK && !backward && rp.n_fwd > 0) {
            const gd_node *n = rp.fwd[0]->node;
            if (sig != NULL) {
                char got[256];
                if (strcmp(gd_node_signature(n, got, sizeof got), sig) != 0) {
                    ctx->strict = strict;
                    gd_case_prog_free(&rp);
                    return RUN_OTHER_FORM;
                }
            } else {
                *case_keys |= GD_M(gd_node_key_dtype(n));
            }
            /* a case with integer outputs only (add of i32) has no backward pass */
            int any_float = 0;
            for (int k = 0; k < rp.n_fwd; k++) any_float |= gdp_is_float(rp.fwd[k]->dtype);
            if (!any_float) passes = 1;
        }
        if (st == GD_OK) st = gd_case_exec(&rp, &ro);
        if (st != GD_OK) {
            char m[600];
            snprintf(m, sizeof m, "the reference: %s", gd_ctx_error(ctx));
            cell->verdict = b->is_ref ? GD_V_FAILING : GD_V_UNACCOUNTED;
            run_note(cell, spec, variant, backward, m);
            ctx->strict = strict;
            gd_case_prog_free(&rp);
            gd_case_out_free(&ro);
            gd_ctx_clear_error(ctx);
            return RUN_FAILED;
        }
        /* the backend: strict for the op itself, fallbacks allowed in the loss and
         * gradient graph of the backward check (those ops have rows of their own); views
         * as a program has them */
        ctx->strict = backward ? 0 : 1;
        o = (gd_case_opts){.backend = b->index, .backward = backward, .seed = 1234, .variant = variant, .oracle = 0};
        st = gd_case_build_ex(ctx, op, cs, &o, &bp);
        ctx->strict = strict;
        if (st == GD_OK) st = gd_case_exec(&bp, &bo);
        if (st == GD_OK) st = gd_case_exec(&bp, &bo2);
        int result = RUN_OK;
        if (st == GD_ERR_STRICT) {
            result = RUN_FALLBACK;
            if (cell->note[0] == '\0') run_note(cell, spec, variant, 0, gd_ctx_error(ctx));
        } else if (st != GD_OK) {
            result = RUN_FAILED;
            run_note(cell, spec, variant, backward, gd_ctx_error(ctx));
        } else if (!same_bits(&bo, &bo2)) {
            result = RUN_FAILED;
            run_note(cell, spec, variant, backward, "second run not bitwise identical");
        } else {
            char note[200];
            if (compare(op, tol_dt, backward, &ro, &bo, &cell->worst, note, sizeof note) != 0) {
                result = RUN_FAILED;
                run_note(cell, spec, variant, 0, note);
            }
        }
        if (result == RUN_FAILED) cell->verdict = GD_V_FAILING;
        gd_case_prog_free(&rp);
        gd_case_prog_free(&bp);
        gd_case_out_free(&ro);
        gd_case_out_free(&bo);
        gd_case_out_free(&bo2);
        gd_ctx_clear_error(ctx);
        if (result != RUN_OK) return result; /* no backward check of a case that fell back */
    }
    return RUN_OK;
}

/* Verdict of runs that were not failures: all on the backend, some, or none. */
static int tally_verdict(int ok, int fallback)
{
    return fallback == 0 ? GD_V_VERIFIED : ok > 0 ? GD_V_PARTIAL : GD_V_FALLBACK;
}

/* One cell: the row's cases, contiguous and strided, on backend b. */
static void sweep_cell(gd_ctx *ctx, gd_sweep_row *row, gd_backend *b, gd_sweep_cell *cell)
{
    const gd_op_def *op = row->op;
    const char *sig = row->signature;
    int cdt = row->dtype < 0 || sig != NULL ? GDP_F32 : row->dtype;
    int tol_dt = sig != NULL ? sig_tol_dtype(sig) : cdt;
    cell->verdict = b->is_ref ? GD_V_REFERENCE : GD_V_VERIFIED;
    cell->strided = GD_V_NA;
    cell->native = native_strided(b, row);
    if (!b->is_ref && row->dtype >= 0 && !dtype_supported(b, row->dtype)) {
        cell->verdict = GD_V_NA;
        snprintf(cell->note, sizeof cell->note, "%s has no %s kernels", b->name, gd_dtype_name((gd_dtype)row->dtype));
        return;
    }
    int ok[2] = {0, 0}, fallback[2] = {0, 0}; /* [0] contiguous, [1] strided variants */
    for (const char *const *c = sig != NULL ? op->mixed_cases : op->cases; c != NULL && *c != NULL; c++) {
        gd_case cs;
        char msg[256];
        if (gd_case_parse(*c, cdt, &cs, msg, sizeof msg) != 0) {
            cell->verdict = GD_V_UNACCOUNTED;
            snprintf(cell->note, sizeof cell->note, "case \"%s\": %s", *c, msg);
            return;
        }
        for (int v = 0; v < GD_VAR_COUNT; v++) {
            if (v > 0 && !gd_case_variant_applies(op, &cs, v)) continue;
            int r = run_case(ctx, op, &cs, *c, v, b, tol_dt, sig, cell, &row->case_keys);
            if (r == RUN_OTHER_FORM) break;
            const int strided = gd_case_variant_strided(v);
            if (r == RUN_FAILED) {
                if (strided) cell->strided = GD_V_FAILING;
                return;
            }
            ok[strided] += r == RUN_OK;
            fallback[strided] += r == RUN_FALLBACK;
            if (v == 0) cell->cases++;
            else if (strided) cell->variant_runs++;
        }
    }
    if (sig != NULL && cell->cases == 0) {
        cell->verdict = GD_V_UNACCOUNTED;
        snprintf(cell->note, sizeof cell->note, "no case of mixed_cases has the form %s", sig);
        return;
    }
    if (cell->variant_runs > 0) cell->strided = tally_verdict(ok[1], fallback[1]);
    if (!b->is_ref) cell->verdict = tally_verdict(ok[0] + ok[1], fallback[0] + fallback[1]);
}

/* Adds a row; the caller sweeps it. */
static gd_sweep_row *add_row(gd_sweep *out, const gd_op_def *op, int dtype, const char *sig)
{
    gd_sweep_row *row = &out->rows[out->n_rows++];
    row->op = op;
    row->dtype = dtype;
    row->signature = sig;
    return row;
}

static int mixed_count(const gd_op_def *op)
{
    int n = 0;
    for (const char *const *m = op->mixed; m != NULL && *m != NULL; m++) n++;
    return n;
}

gd_status gd_sweep_check(gd_ctx *ctx, const char *only, const char *backend)
{
    if (only != NULL && only[0] == '\0') return gd_fail(ctx, GD_ERR_INVALID, "the op name is empty");
    if (only != NULL && gd_registry_find(ctx->reg, only) == NULL) {
        /* ops whose name contains the one given: "norm" -> layer_norm, rms_norm, ... */
        char like[256] = "";
        int n_like = 0;
        for (int i = 0; i < gd_registry_count(ctx->reg); i++) {
            const char *name = gd_registry_get(ctx->reg, i)->name;
            if (strstr(name, only) == NULL || n_like == 8) continue;
            size_t used = strlen(like);
            snprintf(like + used, sizeof like - used, "%s%s", n_like++ ? ", " : "", name);
        }
        return gd_fail(ctx, GD_ERR_INVALID, "no op named \"%s\"%s%s%s", only, n_like ? " (did you mean " : "",
                       like, n_like ? "?)" : "");
    }
    if (backend != NULL) {
        char have[256] = "";
        for (int i = 0; i < ctx->n_backends; i++) {
            if (strcmp(ctx->backends[i]->name, backend) == 0) return GD_OK;
            size_t used = strlen(have);
            snprintf(have + used, sizeof have - used, "%s%s", i ? ", " : "", ctx->backends[i]->name);
        }
        return gd_fail(ctx, GD_ERR_INVALID, "no backend named \"%s\" (loaded: %s)", backend, have);
    }
    return GD_OK;
}

gd_status gd_sweep_run(gd_ctx *ctx, const char *only, const char *backend, gd_sweep *out,
                       void (*progress)(void *, const gd_sweep_row *, int, int), void *user)
{
    memset(out, 0, sizeof *out);
    /* a name that matches nothing would sweep nothing and report success */
    gd_status cst = gd_sweep_check(ctx, only, backend);
    if (cst != GD_OK) return cst;
    int n_ops = gd_registry_count(ctx->reg), total = 0, cap = 1;
    for (int i = 0; i < n_ops; i++) {
        const gd_op_def *op = gd_registry_get(ctx->reg, i);
        cap += GDP_DTYPE_COUNT + mixed_count(op);
        if (only != NULL && strcmp(only, op->name) != 0) continue;
        total += (op->dtypes ? __builtin_popcount(op->dtypes & ~GD_M(GDP_F64)) : 1) + mixed_count(op);
    }
    out->rows = gd_calloc((size_t)cap, sizeof *out->rows);
    if (out->rows == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "sweep: out of memory");
    out->n_backends = ctx->n_backends;
    int guard = ctx->guard;
    ctx->guard = 1;
    for (int i = 0; i < n_ops; i++) {
        const gd_op_def *op = gd_registry_get(ctx->reg, i);
        if (only != NULL && strcmp(only, op->name) != 0) continue;
        /* the dtype rows, then one row per mixed-precision form */
        for (int dt = -1; dt < GDP_DTYPE_COUNT + mixed_count(op); dt++) {
            gd_sweep_row *row;
            if (dt >= GDP_DTYPE_COUNT) {
                const char *sig = op->mixed[dt - GDP_DTYPE_COUNT];
                row = add_row(out, op, sig_key_dtype(sig), sig);
            } else {
                if (dt == GDP_F64) continue; /* f64 exists for gradient checks on the reference */
                if (op->dtypes ? dt < 0 || !(op->dtypes & GD_M(dt)) : dt != -1) continue;
                row = add_row(out, op, dt, NULL);
            }
            for (int bi = 0; bi < ctx->n_backends; bi++) {
                gd_backend *b = ctx->backends[bi];
                gd_sweep_cell *cell = &row->cell[bi];
                if (backend != NULL && !b->is_ref && strcmp(backend, b->name) != 0) {
                    cell->verdict = cell->strided = GD_V_NA;
                    cell->native = native_strided(b, row);
                    snprintf(cell->note, sizeof cell->note, "not swept");
                    continue;
                }
                sweep_cell(ctx, row, b, cell);
                out->count[bi][cell->verdict]++;
                out->strided_count[bi][cell->strided]++;
            }
            if (progress != NULL) progress(user, row, out->n_rows, total);
        }
    }
    for (int bi = 0; bi < ctx->n_backends; bi++) {
        gd_backend *b = ctx->backends[bi];
        snprintf(out->registration[bi], sizeof out->registration[bi], "%s", b->bad_registrations);
        /* a kernel registered for an op × dtype the sweep never visits is unaccounted: the
         * dtype is neither one the op declares nor the key of one of its cases (a kernel
         * of a mixed form is visited by that form's row). Only ops swept are judged: with
         * --op, the others' case keys are unknown, not wrong. */
        for (int k = 0; k < b->n_kernels; k++) {
            const gd_kernel_entry *e = &b->kernels[k];
            int seen = 0, swept = 0;
            for (int r = 0; r < out->n_rows && !swept; r++) swept = out->rows[r].op == e->op;
            if (!swept) continue;
            if (e->signature != NULL) {
                for (int r = 0; r < out->n_rows && !seen; r++)
                    seen = out->rows[r].op == e->op && out->rows[r].signature != NULL &&
                           strcmp(out->rows[r].signature, e->signature) == 0;
            } else {
                unsigned keys = e->op->dtypes;
                for (int r = 0; r < out->n_rows; r++)
                    if (out->rows[r].op == e->op) keys |= out->rows[r].case_keys;
                seen = e->op->dtypes ? (keys & GD_M(e->dtype)) != 0 : 1;
            }
            if (!seen) {
                size_t used = strlen(out->registration[bi]);
                snprintf(out->registration[bi] + used, sizeof out->registration[bi] - used,
                         "kernel %s/%s for a form the op does not declare; ", e->op->name,
                         e->signature != NULL ? e->signature : gd_dtype_name((gd_dtype)e->dtype));
                out->count[bi][GD_V_UNACCOUNTED]++;
            }
        }
        if (b->bad_registrations[0] != '\0') out->count[bi][GD_V_FAILING]++;
    }
    ctx->guard = guard;
    return GD_OK;
}

void gd_sweep_free(gd_sweep *s)
{
    gd_free(s->rows);
    memset(s, 0, sizeof *s);
}
