/* test_cpu_ops.c — the fast CPU backend's kernels at sizes the sweep's small cases do not
 * reach: long rows and their vector tails, many rows split over threads, several rows
 * per thread, reductions over every kind of axis layout, transposes big enough to be
 * tiled, half-precision through the f32 kernels. Each case runs on the reference and on
 * "cpu" (strict: no fallback) with the same inputs and is compared like the sweep does
 * (normalized MSE within the op's tolerance, or bit for bit for exact ops); then it runs
 * again with a different thread count and must give the same bits. */
#include "sweep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static int backend_index(gd_ctx *ctx, const char *name)
{
    for (int i = 0; gd_backend_name(ctx, i) != NULL; i++)
        if (strcmp(gd_backend_name(ctx, i), name) == 0) return i;
    return -1;
}

static int same_bits(const gd_case_out *a, const gd_case_out *b)
{
    if (a->n != b->n) return 0;
    for (int k = 0; k < a->n; k++)
        if (memcmp(a->t[k].data, b->t[k].data, (size_t)gdp_numel(&a->t[k]) * gdp_dtype_size(a->t[k].dtype)) != 0)
            return 0;
    return 1;
}

/* Runs op on backend `be` (strict), results into out. */
static gd_status run_on(gd_ctx *ctx, const gd_op_def *op, const gd_case *cs, int be, gd_case_out *out)
{
    gd_case_prog p;
    ctx->strict = be != 0;
    gd_status st = gd_case_build(ctx, op, cs, be, 0, 99, &p);
    if (st == GD_OK) st = gd_case_exec(&p, out);
    gd_case_prog_free(&p);
    ctx->strict = 0;
    return st;
}

static void check(gd_ctx *ctx, int cpu, const char *name, const char *spec, int32_t dtype)
{
    const gd_op_def *op = gd_registry_find(ctx->reg, name);
    gd_case cs;
    char msg[256];
    if (op == NULL || gd_case_parse(spec, dtype, &cs, msg, sizeof msg) != 0) {
        printf("FAIL %s \"%s\": %s\n", name, spec, op == NULL ? "no such op" : msg);
        failures++;
        return;
    }
    gd_case_out ref = {0}, got = {0}, again = {0};
    gd_ctx_set_threads(ctx, 0);
    gd_status st = run_on(ctx, op, &cs, 0, &ref);
    if (st == GD_OK) st = run_on(ctx, op, &cs, cpu, &got);
    gd_ctx_set_threads(ctx, 3); /* other chunk boundaries */
    if (st == GD_OK) st = run_on(ctx, op, &cs, cpu, &again);
    gd_ctx_set_threads(ctx, 0);
    if (st != GD_OK) {
        printf("FAIL %s \"%s\" %s: %s\n", name, spec, gd_dtype_name((gd_dtype)dtype), gd_ctx_error(ctx));
        failures++;
    } else if (!same_bits(&got, &again)) {
        printf("FAIL %s \"%s\" %s: the bits depend on the thread count\n", name, spec, gd_dtype_name((gd_dtype)dtype));
        failures++;
    } else {
        double tol = gd_sweep_tol(op, dtype, 0);
        for (int k = 0; k < ref.n; k++) {
            const gdp_tensor *r = &ref.t[k], *g = &got.t[k];
            int is_f = r->dtype == GDP_F32 || r->dtype == GDP_F16 || r->dtype == GDP_BF16;
            if (tol == 0 || !is_f) {
                if (memcmp(r->data, g->data, (size_t)gdp_numel(r) * gdp_dtype_size(r->dtype)) != 0) {
                    printf("FAIL %s \"%s\" %s: output %d differs from the reference (exact op)\n", name, spec,
                           gd_dtype_name((gd_dtype)dtype), k);
                    failures++;
                }
                continue;
            }
            int nan = 0;
            double e = gd_nmse(r, g, &nan);
            if (getenv("GRADUS_TEST_VERBOSE") != NULL)
                printf("%-18s %-48s %-4s NMSE %.3g = %.3g of the tolerance\n", name, spec, gd_dtype_name((gd_dtype)dtype), e,
                       e / tol);
            if (nan || !(e <= tol)) {
                printf("FAIL %s \"%s\" %s: output %d NMSE %.3g (tolerance %.3g)%s\n", name, spec,
                       gd_dtype_name((gd_dtype)dtype), k, e, tol, nan ? ", NaN/Inf mismatch" : "");
                failures++;
            }
        }
    }
    gd_case_out_free(&ref);
    gd_case_out_free(&got);
    gd_case_out_free(&again);
    gd_ctx_clear_error(ctx);
}

int main(void)
{
    gd_ctx *ctx = NULL;
    if (gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .plugin_path = ""}) != GD_OK) return 1;
    int cpu = backend_index(ctx, "cpu");
    if (cpu < 0) {
        printf("SKIP: no cpu backend in this build\n");
        gd_ctx_free(ctx);
        return 77;
    }
    static const struct { const char *op, *spec; } f32_cases[] = {
        /* broadcasting binary ops: long rows, a long broadcast row, tiny rows, integers */
        {"add", "n[257,1031] n[1031]"}, {"sub", "n[3,1,4099] n[5,1]"}, {"mul", "n[70001] n[]"},
        {"div", "n[97,3] p[97,1]"}, {"minimum", "n[129,257] n[129,1]"}, {"maximum", "n[40000] n[40000]"},
        {"add", "i32[300,301]<-50:50 i32[301]<-50:50"}, {"mul", "i64[70,3,50]<-9:9 i64[3,1]<-9:9"},
        {"maximum", "i64[20001]<-9:9 i64[]<-9:9"},
        {"minimum_grad", "n[64,100] n[64,100] n[100]"}, {"maximum_grad", "n[3,40,50] n[40,1] n[3,1,50]"},
        /* unary math */
        {"exp", "n[100003]"}, {"log", "p[100003]"}, {"sqrt", "p[70001]"}, {"rsqrt", "p[70001]"},
        {"pow", "n[70001] | p=3"}, {"pow", "p[50001] | p=-1.5"}, {"pow", "p[50001] | p=0.5"},
        {"clamp", "n[70001] | lo=-0.5 hi=0.7"}, {"abs", "n[70001]"}, {"neg", "i64[30001]<-5:5"},
        {"abs_grad", "n[70001] n[70001]"}, {"clamp_grad", "n[70001] n[70001] | lo=-0.3 hi=1.1"},
        {"scale", "n[70001] | s=2.5 bias=-1"},
        /* activations */
        {"gelu", "n[70001] | approximate=0"}, {"gelu", "n[70001] | approximate=1"},
        {"gelu_grad", "n[70001] n[70001] | approximate=0"}, {"gelu_grad", "n[70001] n[70001] | approximate=1"},
        {"silu", "n[70001]"}, {"silu_grad", "n[70001] n[70001]"}, {"sigmoid", "n[70001]"},
        {"sigmoid_grad", "n[70001] p[70001]"}, {"tanh", "n[70001]"}, {"tanh_grad", "n[70001] f[70001]"},
        {"relu", "n[70001]"}, {"relu_grad", "n[70001] n[70001]"},
        /* reductions: every layout */
        {"sum", "n[1000003]"}, {"sum", "n[300,500] | axes=[1]"}, {"sum", "n[300,500] | axes=[0]"},
        {"sum", "n[4,50,6,30] | axes=[0,2]"}, {"sum", "n[4,50,6,30] | axes=[1,3]"},
        {"sum", "n[3,5,7,11,13] | axes=[0,2,4]"}, {"mean", "n[3,5,7,11,13] | axes=[1,3] keepdims=1"},
        {"mean", "n[20000,7] | axes=[0]"}, {"max", "n[300,500] | axes=[1]"}, {"max", "n[300,500] | axes=[0]"},
        {"max", "n[4,50,6,30] | axes=[0,2]"}, {"max", "n[4,50,6,30] | axes=[1,3]"}, {"max", "n[100001]"},
        {"max_grad", "n[4,6] n[4,50,6,30] | axes=[1,3]"}, {"max_grad", "n[50,30] n[4,50,6,30] | axes=[0,2]"},
        {"argmax", "n[300,1000] | axis=1"}, {"argmax", "n[50,300,40] | axis=1"}, {"argmax", "n[3000,5] | axis=0"},
        {"global_norm", "n[1000,300] n[7] n[20000]"},
        /* softmax family along every kind of axis, losses */
        {"softmax", "n[64,4099]"}, {"softmax", "n[30,70,50] | axis=1"}, {"softmax", "n[200,3] | axis=0"},
        {"log_softmax", "n[64,4099]"}, {"log_softmax", "n[30,70,130] | axis=1"},
        {"softmax_grad", "n[64,4099] p[64,4099]"}, {"softmax_grad", "n[30,70,50] p[30,70,50] | axis=1"},
        {"log_softmax_grad", "n[64,4099] n[64,4099]"}, {"log_softmax_grad", "n[30,70,50] n[30,70,50] | axis=-2"},
        {"cross_entropy", "n[512,1000] i64[512]<1000"}, {"cross_entropy_grad", "f[] n[512,1000] i32[512]<1000"},
        {"mse", "n[300,1001] n[300,1001]"},
        /* strided copies */
        {"permute", "n[64,128,96] | perm=[2,0,1]"}, {"permute", "n[300,500] | perm=[1,0]"},
        {"permute", "n[8,30,4,64] | perm=[0,2,1,3]"}, {"permute", "n[5,33,70] | perm=[1,2,0]"},
        {"expand", "n[300,1] | shape=[7,300,500]"}, {"expand", "n[500] | shape=[300,500]"},
        /* pooling */
        {"avg_pool2d", "n[8,16,32,32] | kernel=3 stride=2 padding=1"},
        {"avg_pool2d_grad", "n[8,16,16,16] | kernel=3 stride=2 padding=1 input_shape=[8,16,32,32]"},
        {"avg_pool2d", "n[4,8,30,30] | kernel=2"},
    };
    for (size_t i = 0; i < sizeof f32_cases / sizeof f32_cases[0]; i++)
        check(ctx, cpu, f32_cases[i].op, f32_cases[i].spec, GDP_F32);
    /* half precision through the f32 kernels */
    static const struct { const char *op, *spec; } half_cases[] = {
        {"add", "n[257,1031] n[1031]"}, {"gelu", "n[70001] | approximate=0"}, {"softmax", "n[64,4099]"},
        {"sum", "n[300,500] | axes=[0]"}, {"matmul", "n[65,70] n[70,33]"}, {"argmax", "n[300,1000] | axis=1"},
        {"cross_entropy", "n[64,100] i32[64]<100"}, {"max_pool2d", "n[4,8,16,16] | kernel=2"},
        {"permute", "n[300,500] | perm=[1,0]"}, {"maximum_grad", "n[64,100] n[64,100] n[100]"},
        /* the fast paths of the CNN step: direct stride-1 convolutions and their gradients,
         * 2x2 max-pool rows of every width, AdamW, the classifier's GEMM shapes */
        {"conv2d", "n[64,1,28,28] n[16,1,3,3] n[16] | padding=1"},
        {"conv2d", "n[8,16,14,14] n[32,16,3,3] n[32] | padding=1"},
        {"conv2d", "n[1,16,14,14] n[32,16,3,3] n[32] | padding=1"},
        {"conv2d", "n[2,5,37,41] n[7,5,3,3] n[7] | padding=1"},
        {"conv2d", "n[2,5,37,41] n[13,5,3,3] | padding=0"},
        {"conv2d", "n[3,6,20,19] n[9,2,3,5] n[9] | padding=2 groups=3"},
        {"conv2d", "n[2,4,17,18] n[25,4,3,3] n[25] | padding=2 dilation=2"},
        {"conv2d", "n[2,3,9,40] n[4,3,5,5] n[4] | padding=2"},
        {"conv2d", "n[2,3,9,40] n[4,3,1,1] n[4] | padding=1"},
        {"conv2d", "n[2,8,6,6] n[30,8,1,1] n[30]"},
        {"conv2d", "n[2,3,10,10] n[4,3,3,3] n[4] | padding=1 stride=2"},
        {"conv2d_grad_input", "n[8,32,14,14] n[32,16,3,3] | padding=1 input_shape=[8,16,14,14]"},
        {"conv2d_grad_input", "n[1,32,14,14] n[32,16,3,3] | padding=1 input_shape=[1,16,14,14]"},
        {"conv2d_grad_input", "n[2,7,37,41] n[7,5,3,3] | padding=1 input_shape=[2,5,37,41]"},
        {"conv2d_grad_input", "n[2,13,35,39] n[13,5,3,3] | input_shape=[2,5,37,41]"},
        {"conv2d_grad_input", "n[3,9,22,19] n[9,2,3,5] | padding=2 groups=3 input_shape=[3,6,20,19]"},
        {"conv2d_grad_input", "n[2,25,17,18] n[25,4,3,3] | padding=2 dilation=2 input_shape=[2,4,17,18]"},
        {"conv2d_grad_input", "n[2,4,9,40] n[4,3,5,5] | padding=2 input_shape=[2,3,9,40]"},
        {"conv2d_grad_input", "n[2,4,11,42] n[4,3,1,1] | padding=1 input_shape=[2,3,9,40]"},
        {"conv2d_grad_input", "n[2,4,12,12] n[4,3,3,3] | padding=2 input_shape=[2,3,10,10]"},
        {"conv2d_grad_weight", "n[64,16,28,28] n[64,1,28,28] | padding=1 weight_shape=[16,1,3,3]"},
        {"conv2d_grad_weight", "n[8,32,14,14] n[8,16,14,14] | padding=1 weight_shape=[32,16,3,3]"},
        {"conv2d_grad_weight", "n[2,7,37,41] n[2,5,37,41] | padding=1 weight_shape=[7,5,3,3]"},
        {"conv2d_grad_weight", "n[2,13,35,39] n[2,5,37,41] | weight_shape=[13,5,3,3]"},
        {"conv2d_grad_weight", "n[3,9,22,19] n[3,6,20,19] | padding=2 groups=3 weight_shape=[9,2,3,5]"},
        {"conv2d_grad_weight", "n[2,25,17,18] n[2,4,17,18] | padding=2 dilation=2 weight_shape=[25,4,3,3]"},
        {"conv2d_grad_weight", "n[2,4,9,40] n[2,3,9,40] | padding=2 weight_shape=[4,3,5,5]"},
        {"conv2d_grad_weight", "n[40,4,9,9] n[40,3,9,9] | padding=1 weight_shape=[4,3,3,3]"},
        {"conv2d_grad_weight", "n[2,4,11,42] n[2,3,9,40] | padding=1 weight_shape=[4,3,1,1]"},
        {"max_pool2d", "n[4,8,28,28] | kernel=2"}, {"max_pool2d", "n[4,8,35,37] | kernel=2"},
        {"max_pool2d_grad", "n[4,8,14,14] n[4,8,28,28] | kernel=2"}, {"max_pool2d_grad", "n[4,8,17,18] n[4,8,35,37] | kernel=2"},
        {"max_pool2d_grad", "n[2,3,20,3] n[2,3,40,7] | kernel=2"},
        {"adamw_update", "f32[1000,301] f32[1000,301] f32[1000,301] f32[1000,301]<0.5:2 f32[]<1:3 f32[]<0.5:2"},
        {"adamw_update", "f32[7] f32[7] f32[7] f32[7]<0.5:2 f32[]<1:3 f32[]<0.5:2"},
        {"linear", "n[64,1568] n[128,1568] n[128]"}, {"linear", "n[64,128] n[10,128] n[10]"},
        {"linear_act", "n[64,1568] n[128,1568] n[128] | act=1"},
        {"matmul", "n[64,10] n[10,128]"}, {"matmul", "n[64,10] n[64,128] | transpose_a=1"},
        {"matmul", "n[64,128] n[128,1568]"}, {"matmul", "n[64,128] n[64,1568] | transpose_a=1"},
        {"matmul", "n[37,53] n[53,71]"}, {"matmul", "n[300,200] n[250,200] | transpose_b=1"},
        {"cross_entropy", "n[64,10] i32[64]<10"}, {"cross_entropy_grad", "f[] n[64,10] i32[64]<10"},
        {"sum", "n[64,32,14,14] | axes=[0,2,3]"}, {"sum", "n[64,128] | axes=[0]"},
        {"relu_grad", "n[64,16,28,28] n[64,16,28,28]"},
    };
    for (size_t i = 0; i < sizeof half_cases / sizeof half_cases[0]; i++) {
        check(ctx, cpu, half_cases[i].op, half_cases[i].spec, GDP_F16);
        check(ctx, cpu, half_cases[i].op, half_cases[i].spec, GDP_BF16);
    }
    gd_ctx_free(ctx);
    if (failures == 0) printf("ok\n");
    return failures != 0;
}
