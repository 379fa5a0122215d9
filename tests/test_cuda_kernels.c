/* test_cuda_kernels.c — the CUDA kernels on shapes larger than the sweep's cases, which
 * are kept tiny for the reference's sake and so never reach the paths that matter on a
 * GPU: several key tiles and query tiles in attention, head dims that need more than the
 * default 48 KiB of shared memory, reductions split into chunks, 16-byte vector paths with
 * tails, softmax rows held in registers, scatter-adds with many repeated ids.
 *
 * Each case runs on the reference and on the CUDA plugin with the same inputs, like the
 * sweep: strict placement (no fallback), guard bytes checked, NMSE within the op's
 * tolerance (exact for exact ops), and a second run bitwise identical. Without a GPU the
 * plugin declines and the test prints SKIP and returns 77.
 */
#include "harness.h"
#include "sweep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP 77

typedef struct tcase {
    const char *op;
    int32_t dtype;
    int backward; /* also compare the backward graph (the op's gradient kernels) */
    const char *spec;
} tcase;

static const tcase cases[] = {
    /* attention: multiple query and key tiles, GQA, causal with S > T and S < T, D over
     * 32 lanes (2, 4 and 8 columns per lane; D >= 128 takes the shared-memory opt-in) */
    {"attention", GDP_F32, 1, "n[2,4,37,40] n[2,2,70,40] n[2,2,70,40] | causal=1"},
    {"attention", GDP_F32, 1, "n[1,2,50,16] n[1,2,20,16] n[1,2,20,16] | causal=1"},
    {"attention", GDP_F32, 0, "n[2,8,256,64] n[2,2,256,64] n[2,2,256,64] | causal=1"},
    {"attention", GDP_BF16, 1, "n[1,4,130,128] n[1,4,130,128] n[1,4,130,128] | causal=1"},
    {"attention", GDP_F16, 0, "n[1,3,5,200] n[1,1,45,200] n[1,1,45,200] | causal=1"},
    {"attention_grad", GDP_F32, 0, "n[1,8,140,16] n[1,8,140,16] n[1,2,600,16] n[1,2,600,16] | causal=1"},
    {"attention_grad", GDP_F32, 0, "n[1,2,40,130] n[1,2,40,130] n[1,1,33,130] n[1,1,33,130] | causal=1"},
    {"attention_grad", GDP_F32, 0, "n[2,4,96,128] n[2,4,96,128] n[2,4,96,128] n[2,4,96,128] | causal=0 scale=0.2"},
    {"attention_grad", GDP_BF16, 0, "n[1,2,20,256] n[1,2,20,256] n[1,2,50,256] n[1,2,50,256]"},
    {"rope", GDP_F32, 1, "n[2,40,3,64] | interleaved=0 pos_offset=7"},
    {"rope", GDP_BF16, 0, "n[1,20,2,128] | interleaved=1 theta=1000000.0 inverse=1"},
    /* reductions: chunked rows, chunked columns, middle axes, vector tails */
    {"sum", GDP_F32, 0, "n[1000,1000]"},
    {"sum", GDP_F32, 0, "n[3,50001] | axes=[1]"},
    {"mean", GDP_F16, 0, "n[7,40000] | axes=[1]"},
    {"sum", GDP_F32, 1, "n[2000,33] | axes=[0]"},
    {"mean", GDP_BF16, 0, "n[4,3000,5] | axes=[1]"},
    {"sum", GDP_F32, 0, "n[512,4096] | axes=[1]"},
    /* softmax in registers (up to 8192 f32 / 16384 f16 per row) and beyond */
    {"softmax", GDP_F32, 1, "n[64,4096]"},
    {"softmax", GDP_F32, 0, "n[3,8192]"},
    {"log_softmax", GDP_F16, 0, "n[2,16384]"},
    {"softmax", GDP_F32, 0, "n[4,9000]"},
    {"log_softmax", GDP_F32, 1, "n[33,1000]"},
    /* elementwise vector paths with tails */
    {"scale", GDP_F32, 0, "n[1000003] | s=2.0 bias=1.0"},
    {"relu", GDP_F32, 1, "n[1000003]"},
    {"gelu", GDP_BF16, 1, "n[4097] | approximate=0"},
    {"add", GDP_F32, 1, "n[100001] n[100001]"},
    {"mul", GDP_F16, 1, "n[999] n[999]"},
    {"add", GDP_I32, 0, "i32[300,7]<-2000000000:2000000000 i32[7]<-2000000000:2000000000"},
    /* indexing and losses */
    {"embedding_grad", GDP_F32, 0, "n[4096,64] i64[4096]<100 | num_embeddings=100"},
    {"embedding_grad", GDP_BF16, 0, "n[8,25,70] i32[8,25]<1000 | num_embeddings=1000"},
    {"index_select_grad", GDP_F32, 0, "n[3,200,5] i64[200]<37 | axis=1 input_shape=[3,37,5]"},
    {"embedding", GDP_F32, 1, "n[50,96] i64[16,33]<50"},
    {"mse", GDP_F32, 1, "n[300000] n[300000]"},
    /* random numbers and dropout */
    {"dropout", GDP_F32, 1, "n[100000] i64[]<100 | p=0.3 seed=7"},
    {"rand_normal", -1, 0, "| shape=[100000] dtype=f32 mean=0.5 std=2.0 seed=77 offset=3"},
    {"rand_uniform", -1, 0, "| shape=[1000,7] dtype=bf16 lo=-3.0 hi=2.0 seed=1 offset=0"},
    {"init_kaiming", -1, 0, "| shape=[256,128,3,3] dtype=f32 seed=4 offset=0"},
    {"arange", -1, 0, "| n=100000 dtype=i64 start=-5.0 step=3.0"},
    {"fill", -1, 0, "| shape=[1000001] dtype=f16 value=0.1"},
};

static int run_case(gd_ctx *ctx, int bi, const tcase *t)
{
    const gd_op_def *op = gd_registry_find(ctx->reg, t->op);
    if (op == NULL) {
        printf("FAIL %s: no such op\n", t->op);
        return 1;
    }
    int32_t dt = t->dtype < 0 ? GDP_F32 : t->dtype;
    gd_case cs;
    char msg[256];
    if (gd_case_parse(t->spec, dt, &cs, msg, sizeof msg) != 0) {
        printf("FAIL %s \"%s\": %s\n", t->op, t->spec, msg);
        return 1;
    }
    int fails = 0;
    for (int backward = 0; backward <= t->backward; backward++) {
        gd_case_prog rp, bp;
        gd_case_out ro = {0}, bo = {0}, bo2 = {0};
        memset(&rp, 0, sizeof rp);
        memset(&bp, 0, sizeof bp);
        const char *what = "reference";
        ctx->strict = 0;
        gd_status st = gd_case_build(ctx, op, &cs, 0, backward, 1234, &rp);
        if (st == GD_OK) st = gd_case_exec(&rp, &ro);
        if (st == GD_OK) {
            what = "cuda";
            ctx->strict = backward ? 0 : 1; /* the loss and gradient graph may fall back */
            st = gd_case_build(ctx, op, &cs, bi, backward, 1234, &bp);
            if (st == GD_OK) st = gd_case_exec(&bp, &bo);
            if (st == GD_OK) st = gd_case_exec(&bp, &bo2);
        }
        if (st != GD_OK) {
            printf("FAIL %s %s \"%s\"%s: %s: %s\n", t->op, gd_dtype_name((gd_dtype)dt), t->spec,
                   backward ? " backward" : "", what, gd_ctx_error(ctx));
            fails++;
        } else {
            double tol = gd_sweep_tol(op, dt, backward);
            for (int k = 0; k < ro.n; k++) {
                size_t bytes = (size_t)gdp_numel(&ro.t[k]) * gdp_dtype_size(ro.t[k].dtype);
                int32_t odt = ro.t[k].dtype;
                int is_f = odt == GDP_F32 || odt == GDP_F16 || odt == GDP_BF16 || odt == GDP_F64;
                int nan = 0;
                double e = is_f ? gd_nmse(&ro.t[k], &bo.t[k], &nan) : 0;
                int same = memcmp(bo.t[k].data, bo2.t[k].data, bytes) == 0;
                int ok = same && !nan &&
                         (tol == 0 || !is_f ? memcmp(ro.t[k].data, bo.t[k].data, bytes) == 0 : e <= tol);
                printf("%s %s %s \"%s\"%s output %d: nmse %.3g (tol %.3g)%s%s\n", ok ? "ok  " : "FAIL", t->op,
                       gd_dtype_name((gd_dtype)dt), t->spec, backward ? " backward" : "", k, e, tol,
                       same ? "" : ", second run differs", nan ? ", NaN/Inf mismatch" : "");
                fails += !ok;
            }
        }
        gd_case_prog_free(&rp);
        gd_case_prog_free(&bp);
        gd_case_out_free(&ro);
        gd_case_out_free(&bo);
        gd_case_out_free(&bo2);
        gd_ctx_clear_error(ctx);
    }
    return fails;
}

int main(int argc, char **argv)
{
    gd_ctx *ctx = NULL;
    if (gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .plugin_path = ""}) != GD_OK) return 1;
    char path[1024];
    const char *env = getenv("GRADUS_CUDA_PLUGIN");
    if (argc > 1) snprintf(path, sizeof path, "%s", argv[1]);
    else if (env != NULL && env[0] != '\0') snprintf(path, sizeof path, "%s", env);
    else snprintf(path, sizeof path, "%s/plugins/libgradus_cuda.so", GD_BUILD_DIR);
    gd_status ls = gd_plugin_load_file(ctx, path);
    int bi = -1;
    for (int i = 0; i < ctx->n_backends; i++)
        if (strcmp(gd_backend_name(ctx, i), "cuda") == 0) bi = i;
    if (ls != GD_OK || bi < 0) {
        printf("SKIP: no CUDA backend (%s)\n", ls != GD_OK ? gd_ctx_error(ctx) : "the plugin declined: no device");
        gd_ctx_free(ctx);
        return SKIP;
    }
    ctx->guard = 1;
    int fails = 0, n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) fails += run_case(ctx, bi, &cases[i]) != 0;
    printf("%d passed, %d failed\n", n - fails, fails);
    gd_ctx_free(ctx);
    return fails != 0;
}
