/* Every registered op is complete: a shape rule, a reference kernel that reads strided
 * inputs itself, a doc line, sweep cases that parse at every dtype it declares, and —
 * when differentiable — at least one case the gradient check can use. Every mixed-precision
 * form it declares has a case of exactly that form, and each of its mixed cases is one of
 * its forms. An op registered without these fails here. */
#include "harness.h"

#include <stdio.h>
#include <string.h>

/* The mixed-precision forms of op against its mixed cases: each case, built on the
 * reference, makes a node of a declared form, and each form has a case. */
static int check_mixed(gd_ctx *ctx, const gd_op_def *op)
{
    int fails = 0, n_forms = 0, covered[16] = {0};
    for (const char *const *m = op->mixed; m != NULL && *m != NULL; m++) n_forms++;
    if (n_forms > 16 || (n_forms > 0) != (op->mixed_cases != NULL && op->mixed_cases[0] != NULL)) {
        printf("FAIL %s: %d mixed forms and %s mixed cases\n", op->name, n_forms,
               op->mixed_cases != NULL && op->mixed_cases[0] != NULL ? "some" : "no");
        return 1;
    }
    for (const char *const *c = op->mixed_cases; c != NULL && *c != NULL; c++) {
        gd_case cs;
        char msg[256], sig[256];
        if (gd_case_parse(*c, GDP_F32, &cs, msg, sizeof msg) != 0) {
            printf("FAIL %s: mixed case \"%s\": %s\n", op->name, *c, msg);
            fails++;
            continue;
        }
        gd_case_prog cp;
        if (gd_case_build(ctx, op, &cs, 0, 0, 1, &cp) != GD_OK) {
            printf("FAIL %s: mixed case \"%s\" does not build: %s\n", op->name, *c, gd_ctx_error(ctx));
            fails++;
            gd_case_prog_free(&cp);
            gd_ctx_clear_error(ctx);
            continue;
        }
        gd_node_signature(cp.fwd[0]->node, sig, sizeof sig);
        int form = -1;
        for (int k = 0; k < n_forms; k++)
            if (strcmp(op->mixed[k], sig) == 0) form = k;
        if (form < 0) {
            printf("FAIL %s: mixed case \"%s\" makes %s, not a declared form\n", op->name, *c, sig);
            fails++;
        } else {
            covered[form]++;
        }
        gd_case_prog_free(&cp);
    }
    for (int k = 0; k < n_forms; k++)
        if (covered[k] == 0) {
            printf("FAIL %s: no mixed case of the form %s\n", op->name, op->mixed[k]);
            fails++;
        }
    return fails;
}

int main(void)
{
    gd_ctx *ctx;
    if (gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1}) != GD_OK) return 1;
    const gd_registry *r = ctx->reg;
    int fails = 0, n = gd_registry_count(r);
    for (int i = 0; i < n; i++) {
        const gd_op_def *op = gd_registry_get(r, i);
        if (op->infer == NULL || op->ref == NULL) {
            printf("FAIL %s: missing %s\n", op->name, op->infer == NULL ? "shape rule" : "reference kernel");
            fails++;
        }
        if (op->doc == NULL || op->doc[0] == '\0') {
            printf("FAIL %s: no doc line\n", op->name);
            fails++;
        }
        if (op->n_out < 1 || op->n_out > GDP_MAX_OUTPUTS || op->min_in < 0 || op->max_in > GDP_MAX_INPUTS ||
            op->min_in > op->max_in) {
            printf("FAIL %s: bad arity (%d..%d inputs, %d outputs)\n", op->name, op->min_in, op->max_in, op->n_out);
            fails++;
        }
        int n_cases = 0, n_grad_cases = 0;
        for (const char *const *c = op->cases; c != NULL && *c != NULL; c++) {
            n_cases++;
            for (int dt = 0; dt < GDP_DTYPE_COUNT; dt++) {
                if (op->dtypes ? !(op->dtypes & GD_M(dt)) : dt != GDP_F32) continue;
                gd_case cs;
                char msg[256];
                if (gd_case_parse(*c, dt, &cs, msg, sizeof msg) != 0) {
                    printf("FAIL %s: case \"%s\": %s\n", op->name, *c, msg);
                    fails++;
                    continue;
                }
                if (cs.n_in < op->min_in || cs.n_in > op->max_in) {
                    printf("FAIL %s: case \"%s\" has %d inputs\n", op->name, *c, cs.n_in);
                    fails++;
                }
                n_grad_cases += dt == GDP_F32 && !cs.nograd;
            }
        }
        if (n_cases == 0) {
            printf("FAIL %s: no sweep cases\n", op->name);
            fails++;
        }
        if (op->grad != NULL && n_grad_cases == 0) {
            printf("FAIL %s: differentiable but every case is excluded from the gradient check\n", op->name);
            fails++;
        }
        if (!op->ref_strided) {
            printf("FAIL %s: the reference kernel does not read strided inputs (ref_strided)\n", op->name);
            fails++;
        }
        fails += check_mixed(ctx, op);
        if (op->updates && op->grad != NULL) {
            printf("FAIL %s: an in-place update cannot be differentiable\n", op->name);
            fails++;
        }
    }
    if (gd_registry_find(r, "no_such_op") != NULL) fails++;
    printf("%d ops checked, %d problems\n", n, fails);
    gd_ctx_free(ctx);
    return fails != 0;
}
