/* sweep.c — see sweep.h. */
#include "sweep.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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
        int is_f = ref->t[k].dtype == GDP_F32 || ref->t[k].dtype == GDP_F16 || ref->t[k].dtype == GDP_BF16 ||
                   ref->t[k].dtype == GDP_F64;
        if (tol == 0 || !is_f) {
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

/* One cell: the op's cases at dtype on backend b. */
static void sweep_cell(gd_ctx *ctx, const gd_op_def *op, int dtype, gd_backend *b, gd_sweep_cell *cell,
                       unsigned *case_keys)
{
    int cdt = dtype < 0 ? GDP_F32 : dtype;
    cell->verdict = b->is_ref ? GD_V_REFERENCE : GD_V_VERIFIED;
    int n_ok = 0, n_fallback = 0;
    if (!b->is_ref && dtype >= 0 && !dtype_supported(b, dtype)) {
        cell->verdict = GD_V_NA;
        snprintf(cell->note, sizeof cell->note, "%s has no %s kernels", b->name, gd_dtype_name((gd_dtype)dtype));
        return;
    }
    for (const char *const *c = op->cases; c != NULL && *c != NULL; c++) {
        gd_case cs;
        char msg[256];
        if (gd_case_parse(*c, cdt, &cs, msg, sizeof msg) != 0) {
            cell->verdict = GD_V_UNACCOUNTED;
            snprintf(cell->note, sizeof cell->note, "case \"%s\": %s", *c, msg);
            return;
        }
        int passes = op->grad != NULL && !b->is_ref ? 2 : 1;
        for (int backward = 0; backward < passes; backward++) {
            gd_case_prog rp, bp;
            gd_case_out ro = {0}, bo = {0}, bo2 = {0};
            int strict = ctx->strict;
            /* the reference result */
            ctx->strict = 0;
            gd_status st = gd_case_build(ctx, op, &cs, 0, backward, 1234, &rp);
            if (st == GD_OK && rp.n_fwd > 0 && rp.fwd[0]->node != NULL)
                *case_keys |= GD_M(gd_node_key_dtype(rp.fwd[0]->node));
            if (st == GD_OK && !backward) {
                /* a case with integer outputs only (add of i32) has no backward pass */
                int any_float = 0;
                for (int k = 0; k < rp.n_fwd; k++) {
                    int32_t d = rp.fwd[k]->dtype;
                    any_float |= d == GDP_F32 || d == GDP_F16 || d == GDP_BF16 || d == GDP_F64;
                }
                if (!any_float) passes = 1;
            }
            if (st == GD_OK) st = gd_case_exec(&rp, &ro);
            if (st != GD_OK) {
                cell->verdict = b->is_ref ? GD_V_FAILING : GD_V_UNACCOUNTED;
                snprintf(cell->note, sizeof cell->note, "reference%s on \"%s\": %s", backward ? " backward" : "", *c,
                         gd_ctx_error(ctx));
                ctx->strict = strict;
                gd_case_prog_free(&rp);
                gd_case_out_free(&ro);
                return;
            }
            /* the backend: strict for the op itself, fallbacks allowed in the loss and
             * gradient graph of the backward check (those ops have rows of their own) */
            ctx->strict = backward ? 0 : 1;
            st = gd_case_build(ctx, op, &cs, b->index, backward, 1234, &bp);
            ctx->strict = strict;
            if (st == GD_OK) st = gd_case_exec(&bp, &bo);
            if (st == GD_OK) st = gd_case_exec(&bp, &bo2);
            int bad = 0;
            if (st == GD_ERR_STRICT) {
                n_fallback++;
                if (cell->note[0] == '\0') snprintf(cell->note, sizeof cell->note, "no kernel accepts \"%s\"", *c);
            } else if (st != GD_OK) {
                cell->verdict = GD_V_FAILING;
                snprintf(cell->note, sizeof cell->note, "\"%s\"%s: %s", *c, backward ? " backward" : "", gd_ctx_error(ctx));
                bad = 1;
            } else if (!same_bits(&bo, &bo2)) {
                cell->verdict = GD_V_FAILING;
                snprintf(cell->note, sizeof cell->note, "\"%s\"%s: second run not bitwise identical", *c,
                         backward ? " backward" : "");
                bad = 1;
            } else if (!b->is_ref) {
                char note[200];
                if (compare(op, cdt, backward, &ro, &bo, &cell->worst, note, sizeof note) != 0) {
                    cell->verdict = GD_V_FAILING;
                    snprintf(cell->note, sizeof cell->note, "\"%s\": %s", *c, note);
                    bad = 1;
                }
            }
            if (st == GD_OK && !bad) n_ok += !backward;
            cell->cases += !backward;
            gd_case_prog_free(&rp);
            gd_case_prog_free(&bp);
            gd_case_out_free(&ro);
            gd_case_out_free(&bo);
            gd_case_out_free(&bo2);
            gd_ctx_clear_error(ctx);
            if (bad) return;
            if (st == GD_ERR_STRICT) break; /* no backward check of a case that fell back */
        }
    }
    if (!b->is_ref && n_fallback > 0) cell->verdict = n_ok > 0 ? GD_V_PARTIAL : GD_V_FALLBACK;
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
    gd_status st = gd_sweep_check(ctx, only, backend);
    if (st != GD_OK) return st;
    int n_ops = gd_registry_count(ctx->reg);
    out->rows = calloc((size_t)n_ops * GDP_DTYPE_COUNT + 1, sizeof *out->rows);
    if (out->rows == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "sweep: out of memory");
    out->n_backends = ctx->n_backends;
    int guard = ctx->guard;
    ctx->guard = 1;
    int total = 0;
    for (int i = 0; i < n_ops; i++) {
        const gd_op_def *op = gd_registry_get(ctx->reg, i);
        if (only != NULL && strcmp(only, op->name) != 0) continue;
        total += op->dtypes ? __builtin_popcount(op->dtypes & ~GD_M(GDP_F64)) : 1;
    }
    for (int i = 0; i < n_ops; i++) {
        const gd_op_def *op = gd_registry_get(ctx->reg, i);
        if (only != NULL && strcmp(only, op->name) != 0) continue;
        for (int dt = -1; dt < GDP_DTYPE_COUNT; dt++) {
            if (dt == GDP_F64) continue; /* f64 exists for gradient checks on the reference */
            if (op->dtypes ? dt < 0 || !(op->dtypes & GD_M(dt)) : dt != -1) continue;
            gd_sweep_row *row = &out->rows[out->n_rows++];
            row->op = op;
            row->dtype = dt;
            for (int bi = 0; bi < ctx->n_backends; bi++) {
                gd_backend *b = ctx->backends[bi];
                gd_sweep_cell *cell = &row->cell[bi];
                if (backend != NULL && !b->is_ref && strcmp(backend, b->name) != 0) {
                    cell->verdict = GD_V_NA;
                    snprintf(cell->note, sizeof cell->note, "not swept");
                    continue;
                }
                sweep_cell(ctx, op, dt, b, cell, &row->case_keys);
                out->count[bi][cell->verdict]++;
            }
            if (progress != NULL) progress(user, row, out->n_rows, total);
        }
    }
    for (int bi = 0; bi < ctx->n_backends; bi++) {
        gd_backend *b = ctx->backends[bi];
        snprintf(out->registration[bi], sizeof out->registration[bi], "%s", b->bad_registrations);
        /* a kernel registered for an op × dtype the sweep never visits is unaccounted: the
         * dtype is neither one the op declares nor the key of one of its cases. Only ops
         * swept are judged: with --op, the others' case keys are unknown, not wrong. */
        for (int k = 0; k < b->n_kernels; k++) {
            const gd_kernel_entry *e = &b->kernels[k];
            unsigned keys = e->op->dtypes;
            int swept = 0;
            for (int r = 0; r < out->n_rows; r++)
                if (out->rows[r].op == e->op) keys |= out->rows[r].case_keys, swept = 1;
            if (!swept) continue;
            int seen = e->op->dtypes ? (keys & GD_M(e->dtype)) != 0 : 1;
            if (!seen) {
                size_t used = strlen(out->registration[bi]);
                snprintf(out->registration[bi] + used, sizeof out->registration[bi] - used,
                         "kernel %s/%s for a dtype the op does not declare; ", e->op->name,
                         gd_dtype_name((gd_dtype)e->dtype));
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
    free(s->rows);
    memset(s, 0, sizeof *s);
}
