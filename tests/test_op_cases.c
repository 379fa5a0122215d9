/* Every sweep case of every op (its mixed-precision cases too) runs on the reference at
 * every dtype the op declares: no error, no write outside its outputs (guard bytes),
 * finite outputs, a second run bitwise identical to the first, and no allocation while
 * the program runs. Then again with its inputs as strided views (transposed, sliced,
 * broadcast), which the reference kernels read as they are: the result must be bitwise
 * the oracle's, which sees the same values contiguous (view ops run as kernels). Ops whose
 * output may take an input's bytes (`reuse`) run that way too, and must give bitwise what
 * they give into a buffer of their own. */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int fails, runs, variant_runs;

static int same_bits(const gd_case_out *a, const gd_case_out *b)
{
    if (a->n != b->n) return 0;
    for (int k = 0; k < a->n; k++) {
        size_t bytes = (size_t)gdp_numel(&a->t[k]) * gdp_dtype_size(a->t[k].dtype);
        if (a->t[k].dtype != b->t[k].dtype || memcmp(a->t[k].data, b->t[k].data, bytes) != 0) return 0;
    }
    return 1;
}

/* Runs the program once more with the allocation counter reset around the run alone. */
static int64_t allocations_in_run(gd_case_prog *cp)
{
    for (int k = 0; k < cp->n_in; k++)
        if (gd_tensor_write(cp->in[k], cp->in_host[k], gd_value_bytes(cp->in[k])) != GD_OK) return -1;
    gd_alloc_count_reset();
    gd_status st = gd_program_run(cp->prog);
    int64_t n = gd_alloc_count();
    return st == GD_OK ? n : -1;
}

/* Builds and runs the case twice; checks what every run must satisfy. 1 on success, with
 * the first run's outputs in *out. */
static int run_once(gd_ctx *ctx, const gd_op_def *op, const gd_case *cs, const char *spec, const char *dn,
                    const gd_case_opts *o, gd_case_out *out)
{
    const char *vn = o->oracle ? "oracle" : gd_case_variant_name(o->variant);
    gd_case_prog cp;
    gd_case_out b = {0};
    gd_status st = gd_case_build_ex(ctx, op, cs, o, &cp);
    if (st == GD_OK) st = gd_case_exec(&cp, out);
    if (st == GD_OK) st = gd_case_exec(&cp, &b);
    int ok = 0;
    runs++;
    variant_runs += gd_case_variant_strided(o->variant);
    if (st != GD_OK) {
        printf("FAIL %s %s \"%s\" %s %s: %s\n", op->name, dn, spec, gd_case_variant_name(o->variant), vn,
               gd_ctx_error(ctx));
    } else if (!same_bits(out, &b)) {
        printf("FAIL %s %s \"%s\" %s: two runs differ\n", op->name, dn, spec, vn);
    } else {
        ok = 1;
        for (int k = 0; k < out->n && ok; k++)
            for (int64_t j = 0; j < gdp_numel(&out->t[k]) && ok; j++)
                if (!isfinite(gd_ref_load(&out->t[k], j))) {
                    printf("FAIL %s %s \"%s\" %s: output %d element %lld is not finite\n", op->name, dn, spec, vn, k,
                           (long long)j);
                    ok = 0;
                }
        int64_t n = allocations_in_run(&cp);
        if (n != 0) {
            printf("FAIL %s %s \"%s\" %s: %lld allocations while the program ran %s\n", op->name, dn, spec, vn,
                   (long long)n, n < 0 ? gd_ctx_error(ctx) : "");
            ok = 0;
        }
    }
    fails += !ok;
    gd_case_out_free(&b);
    gd_case_prog_free(&cp);
    gd_ctx_clear_error(ctx);
    return ok;
}

static void run(gd_ctx *ctx, const gd_op_def *op, const char *spec, int dt)
{
    gd_case cs;
    char msg[256];
    if (gd_case_parse(spec, dt, &cs, msg, sizeof msg) != 0) return; /* test_registry reports it */
    const char *dn = gd_dtype_name((gd_dtype)dt);
    gd_case_out plain = {0}; /* the contiguous run's outputs */
    for (int v = 0; v < GD_VAR_COUNT; v++) {
        if (v > 0 && !gd_case_variant_applies(op, &cs, v)) continue;
        gd_case_out oracle = {0}, got = {0};
        gd_case_opts o = {.backend = 0, .seed = 42, .variant = v, .oracle = 1};
        int ok = run_once(ctx, op, &cs, spec, dn, &o, &oracle);
        o.oracle = 0;
        ok = run_once(ctx, op, &cs, spec, dn, &o, &got) && ok;
        if (ok && !same_bits(&oracle, &got)) {
            printf("FAIL %s %s \"%s\" %s: with views the result differs from the oracle's\n", op->name, dn, spec,
                   gd_case_variant_name(v));
            fails++;
        }
        /* the output written over its input: bitwise what it is in a buffer of its own */
        if (ok && v == GD_VAR_SHARED && !same_bits(&plain, &got)) {
            printf("FAIL %s %s \"%s\": with the output over input %d the result differs\n", op->name, dn, spec,
                   op->reuse - 1);
            fails++;
        }
        gd_case_out_free(&oracle);
        if (v == 0) plain = got;
        else gd_case_out_free(&got);
    }
    gd_case_out_free(&plain);
}

int main(void)
{
    gd_ctx *ctx;
    if (gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1}) != GD_OK) return 1;
    ctx->guard = 1;
    for (int i = 0; i < gd_registry_count(ctx->reg); i++) {
        const gd_op_def *op = gd_registry_get(ctx->reg, i);
        for (const char *const *c = op->cases; c != NULL && *c != NULL; c++)
            for (int dt = 0; dt < GDP_DTYPE_COUNT; dt++) {
                if (op->dtypes ? !(op->dtypes & GD_M(dt)) : dt != GDP_F32) continue;
                run(ctx, op, *c, dt);
            }
        for (const char *const *c = op->mixed_cases; c != NULL && *c != NULL; c++) run(ctx, op, *c, GDP_F32);
    }
    printf("%d case runs on the reference (%d with strided inputs), %d failures\n", runs, variant_runs, fails);
    gd_ctx_free(ctx);
    return fails != 0;
}
