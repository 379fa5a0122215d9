/* Every registered op is complete: a shape rule, a reference kernel, a doc line, sweep
 * cases that parse at every dtype it declares, and — when differentiable — at least one
 * case the gradient check can use. An op registered without these fails here. */
#include "cases.h"

#include <stdio.h>
#include <string.h>

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
