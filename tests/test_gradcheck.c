/* Every differentiable op's gradient rule, checked against central finite differences in
 * float64 on the reference, over the op's sweep cases (those not marked '!'). The loss is
 * sum_k sum(out_k * r_k) with fixed random r_k, so every output element contributes. */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PROBES 48 /* elements probed per input (evenly spaced) */

static double host_loss(const gd_case_prog *cp, const gd_case_out *o)
{
    double l = 0;
    for (int k = 0; k < o->n; k++) {
        if (cp->r_host[k] == NULL) continue;
        gdp_tensor r = o->t[k];
        r.data = cp->r_host[k];
        for (int64_t j = 0; j < gdp_numel(&o->t[k]); j++) l += gd_ref_load(&o->t[k], j) * gd_ref_load(&r, j);
    }
    return l;
}

static int check_case(gd_ctx *ctx, const gd_op_def *op, const char *spec, int *probes)
{
    gd_case cs;
    char msg[256];
    if (gd_case_parse(spec, GDP_F64, &cs, msg, sizeof msg) != 0 || cs.nograd) return 0;
    gd_case_prog bw, fw;
    gd_case_out ana = {0};
    if (gd_case_build(ctx, op, &cs, 0, 1, 7, &bw) != GD_OK || gd_case_exec(&bw, &ana) != GD_OK) {
        printf("FAIL %s \"%s\": backward: %s\n", op->name, spec, gd_ctx_error(ctx));
        gd_case_prog_free(&bw);
        gd_case_out_free(&ana);
        return 1;
    }
    int fails = 0;
    if (gd_case_build(ctx, op, &cs, 0, 0, 7, &fw) != GD_OK) {
        printf("FAIL %s \"%s\": forward: %s\n", op->name, spec, gd_ctx_error(ctx));
        fails = 1;
    }
    /* the forward program shares the seeds, so its inputs equal the backward's; give it
     * the backward's loss weights */
    for (int k = 0; k < GDP_MAX_OUTPUTS && !fails; k++) {
        fw.r_host[k] = bw.r_host[k];
        bw.r_host[k] = NULL;
    }
    for (int t = 0; t < ana.n && !fails; t++) {
        int k = bw.target_input[t];
        gdp_tensor x = gd_value_desc(fw.in[k], fw.in_host[k]);
        int64_t n = gdp_numel(&x), step = n > MAX_PROBES ? n / MAX_PROBES : 1;
        for (int64_t j = 0; j < n && !fails; j += step) {
            double x0 = gd_ref_load(&x, j), h = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1);
            gd_case_out o1 = {0}, o2 = {0};
            gd_ref_store(&x, j, x0 + h);
            gd_status s1 = gd_case_exec(&fw, &o1);
            gd_ref_store(&x, j, x0 - h);
            gd_status s2 = gd_case_exec(&fw, &o2);
            gd_ref_store(&x, j, x0);
            if (s1 != GD_OK || s2 != GD_OK) {
                printf("FAIL %s \"%s\": forward: %s\n", op->name, spec, gd_ctx_error(ctx));
                fails = 1;
            } else {
                double num = (host_loss(&fw, &o1) - host_loss(&fw, &o2)) / (2 * h);
                double a = gd_ref_load(&ana.t[t], j);
                double tol = 1e-6 + 1e-4 * fmax(fabs(num), fabs(a));
                (*probes)++;
                if (!(fabs(num - a) <= tol)) {
                    printf("FAIL %s \"%s\": d/d input %d [%lld]: analytic %.9g, numeric %.9g\n", op->name, spec, k,
                           (long long)j, a, num);
                    fails = 1;
                }
            }
            gd_case_out_free(&o1);
            gd_case_out_free(&o2);
        }
    }
    gd_case_out_free(&ana);
    gd_case_prog_free(&bw);
    gd_case_prog_free(&fw);
    return fails;
}

int main(int argc, char **argv)
{
    gd_ctx *ctx;
    if (gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1}) != GD_OK) return 1;
    int fails = 0, ops = 0, cases = 0, probes = 0;
    for (int i = 0; i < gd_registry_count(ctx->reg); i++) {
        const gd_op_def *op = gd_registry_get(ctx->reg, i);
        if (op->grad == NULL) continue;
        if (argc > 1 && strcmp(argv[1], op->name) != 0) continue;
        ops++;
        for (const char *const *c = op->cases; c != NULL && *c != NULL; c++) {
            if ((*c)[0] == '!') continue;
            cases++;
            fails += check_case(ctx, op, *c, &probes);
            gd_ctx_clear_error(ctx);
        }
    }
    printf("gradient check: %d differentiable ops, %d cases, %d probes, %d failures\n", ops, cases, probes, fails);
    gd_ctx_free(ctx);
    return fails != 0 || ops == 0;
}
