/* Every sweep case of every op runs on the reference at every dtype the op declares:
 * no error, no write outside its outputs (guard bytes), finite outputs, and a second run
 * bitwise identical to the first. */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    gd_ctx *ctx;
    if (gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1}) != GD_OK) return 1;
    ctx->guard = 1;
    int fails = 0, runs = 0;
    for (int i = 0; i < gd_registry_count(ctx->reg); i++) {
        const gd_op_def *op = gd_registry_get(ctx->reg, i);
        for (const char *const *c = op->cases; c != NULL && *c != NULL; c++) {
            for (int dt = 0; dt < GDP_DTYPE_COUNT; dt++) {
                if (op->dtypes ? !(op->dtypes & GD_M(dt)) : dt != GDP_F32) continue;
                gd_case cs;
                char msg[256];
                if (gd_case_parse(*c, dt, &cs, msg, sizeof msg) != 0) continue; /* test_registry reports it */
                gd_case_prog cp;
                gd_case_out a = {0}, b = {0};
                gd_status st = gd_case_build(ctx, op, &cs, 0, 0, 42, &cp);
                if (st == GD_OK) st = gd_case_exec(&cp, &a);
                if (st == GD_OK) st = gd_case_exec(&cp, &b);
                runs++;
                if (st != GD_OK) {
                    printf("FAIL %s %s \"%s\": %s\n", op->name, gd_dtype_name((gd_dtype)dt), *c, gd_ctx_error(ctx));
                    fails++;
                } else {
                    for (int k = 0; k < a.n; k++) {
                        size_t bytes = (size_t)gdp_numel(&a.t[k]) * gdp_dtype_size(a.t[k].dtype);
                        if (memcmp(a.t[k].data, b.t[k].data, bytes) != 0) {
                            printf("FAIL %s %s \"%s\": output %d differs between two runs\n", op->name,
                                   gd_dtype_name((gd_dtype)dt), *c, k);
                            fails++;
                        }
                        for (int64_t j = 0; j < gdp_numel(&a.t[k]); j++) {
                            if (!isfinite(gd_ref_load(&a.t[k], j))) {
                                printf("FAIL %s %s \"%s\": output %d element %lld is not finite\n", op->name,
                                       gd_dtype_name((gd_dtype)dt), *c, k, (long long)j);
                                fails++;
                                break;
                            }
                        }
                    }
                }
                gd_case_out_free(&a);
                gd_case_out_free(&b);
                gd_case_prog_free(&cp);
                gd_ctx_clear_error(ctx);
            }
        }
    }
    printf("%d case runs on the reference, %d failures\n", runs, fails);
    gd_ctx_free(ctx);
    return fails != 0;
}
