/* The conformance sweep over every backend this build has (the reference, the built-in
 * fast CPU backend when present, and the test device): failing 0, unaccounted 0, and the
 * test device's own kernels verified rather than falling back. The sweep has a row for
 * each mixed-precision form an op declares, and ran the strided variants: on the
 * reference, whose kernels all read strides, every row with a case to view verified them. */
#include "sweep.h"

#include <stdio.h>
#include <string.h>

int main(void)
{
    gd_ctx *ctx = NULL;
    if (gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .plugin_path = ""}) != GD_OK) return 1;
    char path[1024];
    snprintf(path, sizeof path, "%s/plugins-test/libgradus_testdev.so", GD_BUILD_DIR);
    if (gd_plugin_load_file(ctx, path) != GD_OK) {
        printf("FAIL: %s\n", gd_ctx_error(ctx));
        return 1;
    }
    gd_sweep s;
    if (gd_sweep_run(ctx, NULL, NULL, &s, NULL, NULL) != GD_OK) {
        printf("FAIL: %s\n", gd_ctx_error(ctx));
        return 1;
    }
    int fails = 0, forms = 0, mixed_rows = 0, strided_rows = 0;
    for (int i = 0; i < gd_registry_count(ctx->reg); i++)
        for (const char *const *m = gd_registry_get(ctx->reg, i)->mixed; m != NULL && *m != NULL; m++) forms++;
    for (int i = 0; i < s.n_rows; i++) {
        mixed_rows += s.rows[i].signature != NULL;
        const gd_sweep_cell *ref = &s.rows[i].cell[0];
        if (ref->variant_runs > 0) {
            strided_rows++;
            if (ref->strided != GD_V_VERIFIED || ref->native != 1) {
                printf("FAIL %s %s: the reference's strided runs are %s (native %d)\n", s.rows[i].op->name,
                       gd_sweep_row_key(&s.rows[i]), gd_verdict_name(ref->strided), ref->native);
                fails++;
            }
        }
        for (int b = 0; b < s.n_backends; b++) {
            int v = s.rows[i].cell[b].verdict;
            if (v == GD_V_FAILING || v == GD_V_UNACCOUNTED) {
                printf("FAIL %s %s on %s: %s: %s\n", s.rows[i].op->name, gd_sweep_row_key(&s.rows[i]),
                       gd_backend_name(ctx, b), gd_verdict_name(v), s.rows[i].cell[b].note);
                fails++;
            }
            const char *op = s.rows[i].op->name;
            if (strcmp(gd_backend_name(ctx, b), "testdev") == 0 && s.rows[i].dtype == GDP_F32 &&
                (strcmp(op, "relu") == 0 || strcmp(op, "add") == 0 || strcmp(op, "matmul") == 0 ||
                 strcmp(op, "linear_act") == 0) && v != GD_V_VERIFIED && v != GD_V_PARTIAL) {
                printf("FAIL %s f32 on testdev is %s, not verified for any case: %s\n", op, gd_verdict_name(v), s.rows[i].cell[b].note);
                fails++;
            }
        }
    }
    if (mixed_rows != forms || forms == 0) {
        printf("FAIL %d mixed-precision rows for the %d forms the ops declare\n", mixed_rows, forms);
        fails++;
    }
    if (strided_rows * 2 < s.n_rows) {
        printf("FAIL strided variants ran in only %d of %d rows\n", strided_rows, s.n_rows);
        fails++;
    }
    printf("%d rows, %d of them mixed-precision forms, %d with strided variants\n", s.n_rows, mixed_rows, strided_rows);
    for (int b = 0; b < s.n_backends; b++) {
        printf("%-8s verified %d partial %d fallback %d failing %d n/a %d unaccounted %d; strided: verified %d "
               "partial %d fallback %d\n", gd_backend_name(ctx, b),
               b == 0 ? s.count[b][GD_V_REFERENCE] : s.count[b][GD_V_VERIFIED], s.count[b][GD_V_PARTIAL], s.count[b][GD_V_FALLBACK],
               s.count[b][GD_V_FAILING], s.count[b][GD_V_NA], s.count[b][GD_V_UNACCOUNTED],
               s.strided_count[b][GD_V_VERIFIED], s.strided_count[b][GD_V_PARTIAL], s.strided_count[b][GD_V_FALLBACK]);
        fails += s.count[b][GD_V_FAILING] + s.count[b][GD_V_UNACCOUNTED];
    }
    gd_sweep_free(&s);

    /* One op: only its kernels are judged. A kernel of another op is not "for a dtype the
     * op does not declare" just because that op's cases (which key it) did not run. */
    if (gd_sweep_run(ctx, "relu", NULL, &s, NULL, NULL) != GD_OK) {
        printf("FAIL: sweep of relu: %s\n", gd_ctx_error(ctx));
        fails++;
    } else {
        for (int b = 0; b < s.n_backends; b++) {
            if (s.registration[b][0] != '\0' || s.count[b][GD_V_UNACCOUNTED] != 0 || s.count[b][GD_V_FAILING] != 0) {
                printf("FAIL: sweep of relu on %s: %d unaccounted, %d failing, registrations: %s\n",
                       gd_backend_name(ctx, b), s.count[b][GD_V_UNACCOUNTED], s.count[b][GD_V_FAILING], s.registration[b]);
                fails++;
            }
        }
        if (s.n_rows != 3) {
            printf("FAIL: sweep of relu has %d rows, want 3 (f32, f16, bf16)\n", s.n_rows);
            fails++;
        }
        gd_sweep_free(&s);
    }
    /* A name that matches nothing is an error that names it, not an empty sweep that passes. */
    static const struct {
        const char *op, *backend, *want;
    } bad[] = {{"nosuch", NULL, "no op named \"nosuch\""},
               {"", NULL, "the op name is empty"},
               {"norm", NULL, "did you mean add_layer_norm, add_rms_norm, global_norm, layer_norm"},
               {NULL, "nosuch", "no backend named \"nosuch\" (loaded: ref"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        gd_ctx_clear_error(ctx);
        gd_status st = gd_sweep_run(ctx, bad[k].op, bad[k].backend, &s, NULL, NULL);
        if (st == GD_OK || strstr(gd_ctx_error(ctx), bad[k].want) == NULL) {
            printf("FAIL: sweep --op %s --backend %s: status %d, message '%s', want '%s'\n", bad[k].op ? bad[k].op : "-",
                   bad[k].backend ? bad[k].backend : "-", st, gd_ctx_error(ctx), bad[k].want);
            fails++;
        }
        gd_sweep_free(&s);
    }
    gd_ctx_free(ctx);
    return fails != 0;
}
