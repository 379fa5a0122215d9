/* test_cuda_kernels.c — the CUDA kernels on shapes larger than the sweep's cases, which
 * are kept tiny for the reference's sake and so never reach the paths that matter on a
 * GPU: several key tiles and query tiles in attention, head dims that need more than the
 * default 48 KiB of shared memory, reductions split into chunks, 16-byte vector paths with
 * tails, softmax rows held in registers, scatter-adds with many repeated ids.
 *
 * Each case runs on the reference and on the CUDA plugin with the same inputs, like the
 * sweep: strict placement (no fallback), guard bytes checked, NMSE within the op's
 * tolerance (exact for exact ops), and a second run bitwise identical (a replay of the
 * captured CUDA graph). Runtime scalars ride along: rope's pos, attention's kv_len,
 * cache_write's pos. Then views (transposed matmul operands, strided elementwise inputs)
 * must reach the kernels without copies, programs must run as captured segments, bad
 * data found on the device must fail the run or the read, naming the node and the value,
 * and a language model's decode step must become the fused nodes the graph pass promises
 * (six a Llama layer) and compute what the reference computes, as must a training step,
 * whose attention keeps its lse for the backward (attention_lse, attention_grad_lse).
 * Without a GPU the plugin declines and the test prints SKIP and returns 77.
 */
#include "gradus_lm.h"
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
    {"attention_grad", GDP_BF16, 0, "n[2,4,300,64] n[2,4,300,64] n[2,2,300,64] n[2,2,300,64] | causal=1"},
    {"attention_grad", GDP_F16, 0, "n[1,4,200,128] n[1,4,200,128] n[1,4,200,128] n[1,4,200,128] | causal=1"},
    /* tensor-core tiles handed out heaviest first in groups of 32 heads: 39 heads (a partial
     * group), 150 rows (past the forward's 128-row block for heads of 64); causal over fewer
     * keys than queries, whose first rows see none */
    {"attention", GDP_BF16, 1, "n[3,13,150,64] n[3,13,150,64] n[3,13,150,64] | causal=1"},
    {"attention_grad", GDP_F16, 0, "n[1,4,200,64] n[1,4,200,64] n[1,2,120,64] n[1,2,120,64] | causal=1"},
    /* attention with kv_len: keys past it ignored, causal rows lined up with the last valid
     * key (a decoder's cache); several key tiles, and rows that see no key */
    {"attention", GDP_F32, 1, "n[2,4,37,40] n[2,2,70,40] n[2,2,70,40] i32[]<50:51 | causal=1"},
    {"attention", GDP_F32, 0, "n[1,2,5,64] n[1,1,300,64] n[1,1,300,64] i64[]<130:131 | causal=1"},
    {"attention", GDP_BF16, 0, "n[1,4,3,128] n[1,4,90,128] n[1,4,90,128] i32[]<2:3 | causal=1"},
    {"attention_grad", GDP_F32, 0, "n[1,8,140,16] n[1,8,140,16] n[1,2,600,16] n[1,2,600,16] i32[]<333:334 | causal=1"},
    {"attention_grad", GDP_F32, 0, "n[1,2,40,64] n[1,2,40,64] n[1,2,70,64] n[1,2,70,64] i64[]<45:46"},
    {"cache_write", GDP_F32, 0, "n[2,4,300,64] n[2,4,7,64] i32[]<100:101"},
    {"cache_write", GDP_BF16, 0, "n[1,8,64,128] n[1,8,64,128] i64[]<0:1"},
    {"rope", GDP_F32, 1, "n[2,40,3,64] i64[]<7:8 | interleaved=0"},
    {"rope", GDP_BF16, 0, "n[1,20,2,128] i32[]<1000:1001 | interleaved=1 theta=1000000.0 inverse=1"},
    /* four heads a thread (heads by fours): halves and interleaved pairs, positions per row */
    {"rope", GDP_BF16, 1, "n[2,40,8,128] i32[]<100:101 | interleaved=0 theta=1000000.0"},
    {"rope", GDP_F16, 0, "n[3,9,4,64] i32[3]<0:500"},
    /* decode-step products with the RMS norm in front (gemv.cu's prologue): rows summed by
     * shuffles (K <= 2048) and by the tree beyond, shared memory past 48 KiB (the opt-in),
     * K in 16-byte pieces and not; and with the residual added in the epilogue */
    {"linear_qkv", GDP_F32, 0, "n[8,4096] n[96,4096] n[32,4096] n[32,4096] p[4096] | eps=1e-5"},
    {"linear_qkv", GDP_BF16, 0, "n[2,1,1536] n[256,1536] n[64,1536] n[64,1536] p[1536]"},
    {"linear_qkv", GDP_F16, 0, "n[3,1001] n[100,1001] n[30,1001] n[30,1001] p[1001] | eps=0.01"},
    /* with rope and the cache writes in the epilogue: a stories110m layer's shape at two
     * positions per row, GQA with a head of 128 and two decode steps */
    {"linear_qkv_rope", GDP_BF16, 0, "n[2,1,768] n[768,768] n[768,768] n[768,768] n[2,12,40,64] n[2,12,40,64] "
                                     "i32[2]<0:40 p[768] | interleaved=0"},
    {"linear_qkv_rope", GDP_F32, 0, "n[1,2,1024] n[512,1024] n[256,1024] n[256,1024] n[1,2,30,128] n[1,2,30,128] "
                                    "i64[]<0:28 p[1024] | interleaved=0 theta=1000000.0 eps=1e-6"},
    {"rope_cache_write", GDP_BF16, 0, "n[2,1,16,128] n[2,1,8,128] n[2,1,8,128] n[2,8,40,128] n[2,8,40,128] i32[2]<0:40 "
                                      "p[128] p[128] | interleaved=0 theta=1000000.0 eps=1e-6"},
    {"linear_qkv_rope", GDP_F16, 0, "n[3,1,200] n[96,200] n[32,200] n[32,200] n[3,2,9,16] n[3,2,9,16] i32[3]<0:9"},
    {"linear_swiglu", GDP_BF16, 0, "n[8,4096] n[200,4096] n[200,4096] p[4096]"},
    {"linear_swiglu", GDP_F32, 0, "n[1,2048] n[300,2048] n[300,2048] p[2048] | eps=1e-6"},
    {"linear_swiglu", GDP_F16, 0, "n[5,777] n[64,777] n[64,777] p[777]"},
    {"linear_add", GDP_F32, 0, "n[8,4096] n[512,4096] n[8,512]"},
    {"linear_add", GDP_BF16, 0, "n[3,1,2048] n[300,2048] n[300] n[3,1,300]"},
    {"linear_add", GDP_F16, 0, "n[1,1001] n[77,1001] n[1,77]"},
    /* reductions: chunked rows, chunked columns, middle axes, vector tails */
    {"sum", GDP_F32, 0, "n[1000,1000]"},
    {"sum", GDP_F32, 0, "n[3,50001] | axes=[1]"},
    {"mean", GDP_F16, 0, "n[7,40000] | axes=[1]"},
    {"sum", GDP_F32, 1, "n[2000,33] | axes=[0]"},
    {"mean", GDP_BF16, 0, "n[4,3000,5] | axes=[1]"},
    {"sum", GDP_F32, 0, "n[512,4096] | axes=[1]"},
    /* column sums read in 16-byte vectors: a bias gradient's shape, several planes, f16 */
    {"sum", GDP_BF16, 0, "n[16384,768] | axes=[0]"},
    {"sum", GDP_F32, 0, "n[3,2500,64] | axes=[1]"},
    {"mean", GDP_F16, 0, "n[1500,24] | axes=[0]"},
    {"sum", GDP_BF16, 0, "n[4096,3072] | axes=[0] dtype=f32"},
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
    /* the scatter-adds sort the ids (one 8-bit pass for < 256 rows, two for GPT-2's 50257,
     * three past 65535) and sum each row in position order: 16-byte vectors and single
     * columns, rows of a few positions and long ones (more than 16: the heavy kernel), a
     * last tile not full, every id the same */
    {"embedding_grad", GDP_F32, 0, "n[4096,64] i64[4096]<100 | num_embeddings=100"},
    {"embedding_grad", GDP_BF16, 0, "n[8,25,70] i32[8,25]<1000 | num_embeddings=1000"},
    {"embedding_grad", GDP_BF16, 0, "n[16,1024,768] i32[16,1024]<50257 | num_embeddings=50257"},
    {"embedding_grad", GDP_BF16, 0, "n[16384,768] i32[16384]<11:12 | num_embeddings=300"},
    {"embedding_grad", GDP_F32, 0, "n[5000,33] i64[5000]<3 | num_embeddings=4"},
    {"embedding_grad", GDP_F16, 0, "n[3000,24] i64[3000]<70000 | num_embeddings=70001"},
    {"embedding_grad", GDP_F32, 0, "n[2,2500,16] i32[2,2500]<9:12 | num_embeddings=12"},
    {"index_select_grad", GDP_F32, 0, "n[3,200,5] i64[200]<37 | axis=1 input_shape=[3,37,5]"},
    {"index_select_grad", GDP_F16, 0, "n[2,3000,64] i64[3000]<5 | axis=1 input_shape=[2,7,64]"},
    {"index_select_grad", GDP_F32, 0, "n[40,700] i32[700]<30 | axis=1 input_shape=[40,31]"},
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

/* Ops whose CUDA kernels promise the reference's bits (the scatter-adds keep its order and
 * precision): checked bitwise, which their tolerance, loose for f16/bf16, would not do. */
static int exact_op(const char *op)
{
    return strcmp(op, "embedding_grad") == 0 || strcmp(op, "index_select_grad") == 0;
}

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
            const int exact = !backward && exact_op(t->op);
            for (int k = 0; k < ro.n; k++) {
                size_t bytes = (size_t)gdp_numel(&ro.t[k]) * gdp_dtype_size(ro.t[k].dtype);
                int32_t odt = ro.t[k].dtype;
                int is_f = odt == GDP_F32 || odt == GDP_F16 || odt == GDP_BF16 || odt == GDP_F64;
                int nan = 0;
                double e = is_f ? gd_nmse(&ro.t[k], &bo.t[k], &nan) : 0;
                int same = memcmp(bo.t[k].data, bo2.t[k].data, bytes) == 0;
                int bits = memcmp(ro.t[k].data, bo.t[k].data, bytes) == 0;
                int ok = same && !nan && (tol == 0 || !is_f || exact ? bits : e <= tol);
                printf("%s %s %s \"%s\"%s output %d: nmse %.3g (tol %.3g)%s%s%s\n", ok ? "ok  " : "FAIL", t->op,
                       gd_dtype_name((gd_dtype)dt), t->spec, backward ? " backward" : "", k, e, tol,
                       exact ? (bits ? ", bits equal" : ", bits differ") : "",
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

/* ---- views, segments, bad data ---------------------------------------------------------- */

typedef gd_tensor *(*view_fn)(gd_tensor *const *in);

static gd_tensor *v_matmul_ta(gd_tensor *const *in) { return gd_matmul(gd_transpose(in[0], 0, 1), in[1], 0, 0); }
static gd_tensor *v_matmul_tb(gd_tensor *const *in) { return gd_matmul(in[0], gd_transpose(in[1], 1, 2), 0, 0); }
static gd_tensor *v_matmul_both(gd_tensor *const *in)
{
    return gd_matmul(gd_transpose(in[0], 0, 1), gd_transpose(in[1], 0, 1), 1, 1);
}
static gd_tensor *v_matmul_slice(gd_tensor *const *in) { return gd_matmul(gd_slice(in[0], 1, 8, 72), in[1], 0, 0); }
static gd_tensor *v_add_permuted(gd_tensor *const *in)
{
    return gd_add(gd_permute(in[0], 3, (const int64_t[]){2, 0, 1}), in[1]);
}
static gd_tensor *v_gelu_slice(gd_tensor *const *in) { return gd_gelu(gd_slice(in[0], 1, 3, 40), 0); }
static gd_tensor *v_mul_expand(gd_tensor *const *in)
{
    return gd_mul(gd_expand(in[0], 3, (const int64_t[]){5, 33, 17}), in[1]);
}
static gd_tensor *v_copy_permute(gd_tensor *const *in)
{
    return gd_contiguous(gd_permute(in[0], 4, (const int64_t[]){0, 2, 1, 3}));
}
static gd_tensor *v_softmax_transposed(gd_tensor *const *in) { return gd_softmax(gd_transpose(in[0], 0, 1), -1); }
/* the graph pass: a bias that is a graph input (no producing node) fused with the product */
static gd_tensor *v_linear_bias_input(gd_tensor *const *in)
{
    return gd_gelu(gd_add(in[1], gd_matmul(in[0], in[2], 0, 0)), 1);
}

/* a transformer's residual stream: the add and the norm after it fused */
static gd_tensor *v_add_rms_norm(gd_tensor *const *in) { return gd_rms_norm(gd_add(in[0], in[1]), in[2], 1e-6); }
static gd_tensor *v_add_layer_norm(gd_tensor *const *in)
{
    /* the sum is read again after the norm, as the next residual add reads it */
    gd_tensor *s = gd_add(in[0], in[1]);
    return gd_add(gd_layer_norm(s, in[2], in[3], 1e-5), s);
}
/* decode-step products (2 rows) of a computed x: SwiGLU's pair, and q, k, v */
static gd_tensor *v_swiglu(gd_tensor *const *in)
{
    gd_tensor *h = gd_rms_norm(in[0], NULL, 1e-6);
    return gd_mul(gd_silu(gd_linear(h, in[1], NULL)), gd_linear(h, in[2], NULL));
}
static gd_tensor *v_qkv(gd_tensor *const *in)
{
    gd_tensor *h = gd_rms_norm(in[0], NULL, 1e-6);
    gd_tensor *q = gd_linear(h, in[1], NULL), *k = gd_linear(h, in[2], NULL), *v = gd_linear(h, in[3], NULL);
    return gd_concat(gd_tensor_graph(h), 3, (gd_tensor *[]){q, k, v}, 1);
}

/* decode-step residual adds: the product's epilogue adds a graph input (operand 0 of the
 * add); and a norm with a weight folded into the SwiGLU pair's products */
static gd_tensor *v_linear_add(gd_tensor *const *in) { return gd_add(in[2], gd_linear(in[0], in[1], NULL)); }
static gd_tensor *v_norm_swiglu(gd_tensor *const *in)
{
    gd_tensor *h = gd_rms_norm(in[0], in[3], 1e-5);
    return gd_mul(gd_silu(gd_linear(h, in[1], NULL)), gd_linear(h, in[2], NULL));
}

typedef struct view_case {
    const char *name;
    view_fn fn;
    int n_in;
    int ndim[4];
    int64_t shape[4][4];
    int copies; /* contiguous copies the planner should insert */
    int fused;  /* nodes of fused ops (linear_act, add_*_norm, ...) the graph pass should make */
    int nodes;  /* nodes the program should have in all (0: not checked) */
} view_case;

static const view_case view_cases[] = {
    {"matmul of a transposed view", v_matmul_ta, 2, {2, 2}, {{96, 40}, {96, 24}}, 0, 0, 0},
    {"batched matmul, b transposed", v_matmul_tb, 2, {3, 3}, {{4, 33, 65}, {4, 17, 65}}, 0, 0, 0},
    {"matmul, both transposed twice", v_matmul_both, 2, {2, 2}, {{48, 20}, {20, 30}}, 0, 0, 0},
    {"matmul of a column slice", v_matmul_slice, 2, {2, 2}, {{50, 80}, {64, 12}}, 0, 0, 0},
    {"add of a permuted view", v_add_permuted, 2, {3, 3}, {{7, 9, 11}, {11, 7, 9}}, 0, 0, 0},
    {"gelu of a slice", v_gelu_slice, 1, {2}, {{30, 50}}, 0, 0, 0},
    {"mul of an expanded view", v_mul_expand, 2, {3, 3}, {{1, 33, 1}, {5, 33, 17}}, 0, 0, 0},
    {"contiguous copy of a permute", v_copy_permute, 1, {4}, {{2, 30, 40, 3}}, 1, 0, 0},
    {"softmax of a transpose", v_softmax_transposed, 1, {2}, {{300, 20}}, 1, 0, 0},
    {"bias input + matmul + gelu fused", v_linear_bias_input, 3, {2, 1, 2}, {{40, 48}, {32}, {48, 32}}, 0, 1, 0},
    {"add + rms_norm fused", v_add_rms_norm, 3, {2, 2, 1}, {{6, 96}, {6, 96}, {96}}, 0, 1, 0},
    {"add + layer_norm fused, the sum read again", v_add_layer_norm, 4, {3, 3, 1, 1},
     {{2, 3, 64}, {2, 3, 64}, {64}, {64}}, 0, 1, 0},
    {"silu(x Wg) * (x Wu) fused, 2 rows", v_swiglu, 3, {2, 2, 2}, {{2, 64}, {40, 64}, {40, 64}}, 0, 1, 0},
    {"q, k, v products fused, 2 rows", v_qkv, 4, {2, 2, 2, 2}, {{2, 64}, {32, 64}, {16, 64}, {16, 64}}, 0, 1, 0},
    {"input + linear fused, 2 rows", v_linear_add, 3, {2, 2, 2}, {{2, 64}, {48, 64}, {2, 48}}, 0, 1, 1},
    {"rms_norm(x, g) and SwiGLU's products fused, 3 rows", v_norm_swiglu, 4, {2, 2, 2, 1},
     {{3, 96}, {40, 96}, {40, 96}, {96}}, 0, 1, 1},
};

typedef struct prog_lines {
    int copies, segments, nodes, fused;
} prog_lines;

static void count_line(void *user, const char *s)
{
    prog_lines *c = (prog_lines *)user;
    if (strncmp(s, "node", 4) != 0) return;
    c->nodes++;
    c->copies += strstr(s, " copy(") != NULL;
    static const char *const fused_ops[] = {" linear_act(", " add_rms_norm(", " add_layer_norm(", " linear_swiglu(",
                                            " linear_qkv(", " rope_cache_write(", " linear_add(",
                                            " linear_qkv_rope("};
    for (size_t k = 0; k < sizeof fused_ops / sizeof fused_ops[0]; k++) c->fused += strstr(s, fused_ops[k]) != NULL;
    c->segments += strstr(s, "[segment]") != NULL;
}

static int graphs_expected(void)
{
    const char *a = getenv("GRADUS_CUDA_GRAPHS"), *b = getenv("GRADUS_EXECUTOR");
    return !(a != NULL && strcmp(a, "0") == 0) && !(b != NULL && strcmp(b, "0") == 0);
}

/* The end of every program these checks run: compiles the targets t[0..nt) of g (unless st
 * says building failed, or a target is missing), runs them and reads them into *out, f32,
 * one after another (*n floats in all); gives the plan's lines to line(user) when line is
 * not NULL; frees g and puts ctx back on the reference, not strict. */
static gd_status compile_run_read(gd_ctx *ctx, gd_graph *g, gd_status st, int nt, gd_tensor *const *t, float **out,
                                  int64_t *n, void (*line)(void *, const char *), void *user)
{
    for (int i = 0; i < nt && st == GD_OK; i++)
        if (t[i] == NULL) st = ctx->status != GD_OK ? ctx->status : GD_ERR_INVALID;
    gd_program *p = st == GD_OK ? gd_compile(g, nt, t, 0) : NULL;
    if (p == NULL && st == GD_OK) st = ctx->status != GD_OK ? ctx->status : GD_ERR_INVALID;
    if (st == GD_OK) st = gd_program_run(p);
    *n = 0;
    for (int i = 0; st == GD_OK && i < nt; i++) *n += gd_tensor_numel(t[i]);
    *out = st == GD_OK ? malloc(sizeof(float) * (size_t)(*n > 0 ? *n : 1)) : NULL;
    for (int64_t i = 0, at = 0; st == GD_OK && i < nt; i++) {
        const int64_t k = gd_tensor_numel(t[i]);
        st = gd_tensor_read(t[i], *out + at, sizeof(float) * (size_t)k);
        at += k;
    }
    if (st == GD_OK && line != NULL) gd_program_describe(p, line, user);
    if (p != NULL) gd_program_free(p);
    gd_graph_free(g);
    ctx->preferred = 0;
    ctx->strict = 0;
    return st;
}

/* Runs fn on backend bi with fixed inputs; out gets the result (f32). */
static gd_status run_view(gd_ctx *ctx, int bi, const view_case *v, float **out, int64_t *n_out, prog_lines *lines)
{
    ctx->preferred = bi;
    ctx->strict = bi != 0;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *in[4];
    gd_status st = GD_OK;
    uint64_t r = 0x1234567u;
    for (int k = 0; k < v->n_in && st == GD_OK; k++) {
        char name[8];
        snprintf(name, sizeof name, "in%d", k);
        in[k] = gd_input(g, name, GD_F32, v->ndim[k], v->shape[k]);
        int64_t n = 1;
        for (int d = 0; d < v->ndim[k]; d++) n *= v->shape[k][d];
        float *h = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            h[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        }
        st = in[k] != NULL ? gd_tensor_write(in[k], h, sizeof(float) * (size_t)n) : GD_ERR_INVALID;
        free(h);
    }
    gd_tensor *y = st == GD_OK ? v->fn(in) : NULL;
    return compile_run_read(ctx, g, st, 1, &y, out, n_out, lines != NULL ? count_line : NULL, lines);
}

static int run_views(gd_ctx *ctx, int bi)
{
    int fails = 0;
    for (size_t i = 0; i < sizeof view_cases / sizeof view_cases[0]; i++) {
        const view_case *v = &view_cases[i];
        float *ref = NULL, *got = NULL;
        int64_t n_ref = 0, n_got = 0;
        prog_lines lines = {0, 0, 0, 0};
        gd_status st = run_view(ctx, 0, v, &ref, &n_ref, NULL);
        if (st == GD_OK) st = run_view(ctx, bi, v, &got, &n_got, &lines);
        if (st != GD_OK || n_ref != n_got) {
            printf("FAIL view \"%s\": %s\n", v->name, gd_ctx_error(ctx));
            fails++;
        } else {
            double num = 0, den = 1e-30;
            for (int64_t k = 0; k < n_ref; k++) {
                double d = (double)got[k] - ref[k];
                num += d * d, den += (double)ref[k] * ref[k];
            }
            double e = num / den;
            int ok = e <= 1e-12 && lines.copies == v->copies && lines.fused == v->fused &&
                     (v->nodes == 0 || lines.nodes == v->nodes) && (!graphs_expected() || lines.segments > 0);
            printf("%s view \"%s\": nmse %.3g, %d copies (want %d), %d fused (want %d), %d of %d nodes in captured "
                   "segments\n", ok ? "ok  " : "FAIL", v->name, e, lines.copies, v->copies, lines.fused, v->fused,
                   lines.segments, lines.nodes);
            fails += !ok;
        }
        free(ref);
        free(got);
        gd_ctx_clear_error(ctx);
    }
    return fails;
}

/* ---- a language model's decode step: the fused plan --------------------------------------- */

/* Nodes of a compiled program by op, and how many inputs each fused product has (a norm
 * in front adds one). */
typedef struct plan_ops {
    int nodes, fallback, qkv, qkv_norm, swiglu, swiglu_norm, linear_add, rms_norm, add_rms_norm, add_layer_norm,
        rope_cache_write, attention, add, qkv_rope;
} plan_ops;

static int n_operands(const char *s)
{
    int n = 0;
    for (const char *p = strchr(s, '('); p != NULL && *p != '\0' && *p != ')'; p++) n += *p == '[';
    return n;
}

static void plan_line(void *user, const char *s)
{
    plan_ops *c = (plan_ops *)user;
    if (strncmp(s, "node", 4) != 0) return;
    c->nodes++;
    c->fallback += strstr(s, "[fallback]") != NULL;
    const int n = n_operands(s);
    if (strstr(s, " linear_qkv(") != NULL) n == 5 ? c->qkv_norm++ : c->qkv++;
    if (strstr(s, " linear_swiglu(") != NULL) n == 4 ? c->swiglu_norm++ : c->swiglu++;
    c->linear_add += strstr(s, " linear_add(") != NULL;
    c->rms_norm += strstr(s, " rms_norm(") != NULL;
    c->add_rms_norm += strstr(s, " add_rms_norm(") != NULL;
    c->add_layer_norm += strstr(s, " add_layer_norm(") != NULL;
    c->rope_cache_write += strstr(s, " rope_cache_write(") != NULL;
    c->attention += strstr(s, " attention(") != NULL;
    c->add += strstr(s, " add(") != NULL;
    c->qkv_rope += strstr(s, " linear_qkv_rope(") != NULL && n == 8; /* with the norm in front */
}

/* The logits of a forward pass of cfg over B sequences of T tokens from positions 3 + b
 * (a KV cache of 32), on backend bi (strict unless it is the reference), as f32. */
static gd_status run_lm(gd_ctx *ctx, int bi, const gd_lm_config *cfg, gd_dtype dt, int64_t B, int64_t T, float **out,
                        int64_t *n, plan_ops *ops)
{
    ctx->preferred = bi;
    ctx->strict = bi != 0;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *ids = gd_input(g, "ids", GD_I32, 2, (const int64_t[]){B, T});
    gd_tensor *pos = gd_input(g, "pos", GD_I32, 1, (const int64_t[]){B});
    gd_tensor *len = gd_input(g, "kv_len", GD_I32, 1, (const int64_t[]){B});
    gd_tensor *y = gd_lm_forward_cached(g, cfg, ids, pos, len, 32, dt);
    if (y != NULL && dt != GD_F32) y = gd_cast(y, GD_F32);
    gd_status st = y != NULL ? gd_graph_init_params(g, 5) : GD_ERR_INVALID;
    int32_t idv[16], posv[4], lenv[4];
    for (int64_t i = 0; i < B * T; i++) idv[i] = (int32_t)((i * 37 + 5) % cfg->vocab_size);
    for (int64_t b = 0; b < B; b++) posv[b] = 3 + (int32_t)b, lenv[b] = 3 + (int32_t)(b + T);
    if (st == GD_OK) st = gd_tensor_write(ids, idv, sizeof(int32_t) * (size_t)(B * T));
    if (st == GD_OK) st = gd_tensor_write(pos, posv, sizeof(int32_t) * (size_t)B);
    if (st == GD_OK) st = gd_tensor_write(len, lenv, sizeof(int32_t) * (size_t)B);
    return compile_run_read(ctx, g, st, 1, &y, out, n, ops != NULL ? plan_line : NULL, ops);
}

typedef struct lm_case {
    const char *name;
    int arch_gpt2, qk_norm;
    gd_dtype dt;
    int64_t B, T;
    plan_ops want; /* the counts checked: every field but nodes and add (-1: not checked) */
    int64_t dim;   /* 0: 128 */
} lm_case;

/* Two layers each. A Llama decode step (at most 8 rows) is five nodes a layer:
 * linear_qkv_rope with the input norm in front, attention, linear_add, linear_swiglu with
 * the post-attention norm in front, linear_add; the final norm stays before the head.
 * Qwen3's per-head q and k norms go into rope_cache_write, which then stays apart from
 * linear_qkv: six nodes a layer. Nine rows (a prefill) keep the residual
 * adds fused with the norms after them (add_rms_norm) and the products apart. GPT-2's
 * LayerNorm and its Conv1D projections (linear_act) meet none of the decode rules. */
static const lm_case lm_cases[] = {
    {"llama decode", 0, 0, GD_F32, 2, 1, {0, 0, 0, 0, 0, 2, 4, 1, 0, 0, 0, 2, 0, 2}, 0},
    {"llama decode", 0, 0, GD_BF16, 1, 1, {0, 0, 0, 0, 0, 2, 4, 1, 0, 0, 0, 2, 0, 2}, 0},
    {"qwen3 decode", 0, 1, GD_BF16, 2, 1, {0, 0, 0, 2, 0, 2, 4, 1, 0, 0, 2, 2, 0, 0}, 0},
    {"llama prefill, 9 rows", 0, 0, GD_F32, 3, 3, {0, 0, 0, 0, 0, 0, 0, 1, 4, 0, 2, 2, 0, 0}, 0},
    {"gpt2 decode", 1, 0, GD_F32, 2, 1, {0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 2, -1, 0}, 0},
    /* rows of W of 4 KiB (1024 f32): gemv.cu splits the plain products among warps and its
     * fused kernels do not, so the norms, SwiGLU's pair and rope stay apart (q, k, v still
     * one linear_qkv, the residual adds still in the products) */
    {"llama decode, 4 KiB rows", 0, 0, GD_F32, 2, 1, {0, 0, 2, 0, 0, 0, 4, 5, 0, 0, 2, 2, -1, 0}, 1024},
};

static int run_lm_plans(gd_ctx *ctx, int bi)
{
    int fails = 0;
    for (size_t i = 0; i < sizeof lm_cases / sizeof lm_cases[0]; i++) {
        const lm_case *c = &lm_cases[i];
        const int64_t dim = c->dim > 0 ? c->dim : 128;
        gd_lm_config cfg = {.arch = c->arch_gpt2 ? GD_LM_GPT2 : GD_LM_LLAMA, .dim = dim, .n_layers = 2, .n_heads = 4,
                            .n_kv_heads = c->arch_gpt2 ? 4 : 2, .hidden_dim = c->arch_gpt2 ? 4 * dim : 3 * dim,
                            .vocab_size = 512, .max_seq = 64, .rope_theta = 1e4, .norm_eps = 1e-5,
                            .qk_norm = c->qk_norm};
        float *ref = NULL, *got = NULL;
        int64_t n_ref = 0, n_got = 0;
        plan_ops ops;
        memset(&ops, 0, sizeof ops);
        gd_status st = gd_lm_config_check(ctx, &cfg);
        if (st == GD_OK) st = run_lm(ctx, 0, &cfg, c->dt, c->B, c->T, &ref, &n_ref, NULL);
        if (st == GD_OK) st = run_lm(ctx, bi, &cfg, c->dt, c->B, c->T, &got, &n_got, &ops);
        if (st != GD_OK || n_ref != n_got) {
            printf("FAIL %s %s: %s\n", c->name, gd_dtype_name(c->dt), gd_ctx_error(ctx));
            fails++;
        } else {
            double num = 0, den = 1e-30;
            for (int64_t k = 0; k < n_ref; k++) {
                double d = (double)got[k] - ref[k];
                num += d * d, den += (double)ref[k] * ref[k];
            }
            const double e = num / den, tol = c->dt == GD_F32 ? 1e-7 : 1e-3;
            const plan_ops *w = &c->want;
            int ok = e <= tol && ops.fallback == 0 && ops.qkv == w->qkv && ops.qkv_norm == w->qkv_norm &&
                     ops.swiglu == w->swiglu && ops.swiglu_norm == w->swiglu_norm && ops.linear_add == w->linear_add &&
                     ops.rms_norm == w->rms_norm && ops.add_rms_norm == w->add_rms_norm &&
                     ops.add_layer_norm == w->add_layer_norm && ops.rope_cache_write == w->rope_cache_write &&
                     ops.attention == w->attention && ops.qkv_rope == w->qkv_rope && (w->add < 0 || ops.add == w->add);
            printf("%s %s %s B %lld T %lld: nmse %.3g (tol %.3g), %d nodes: linear_qkv %d+%d normed (want %d+%d), "
                   "linear_swiglu %d+%d normed (want %d+%d), linear_add %d (want %d), rms_norm %d (want %d), "
                   "add_rms_norm %d (want %d), add_layer_norm %d (want %d), rope_cache_write %d (want %d), "
                   "attention %d (want %d), linear_qkv_rope %d normed (want %d), add %d, %d fallback\n",
                   ok ? "ok  " : "FAIL", c->name, gd_dtype_name(c->dt), (long long)c->B, (long long)c->T, e, tol,
                   ops.nodes, ops.qkv, ops.qkv_norm, w->qkv, w->qkv_norm, ops.swiglu, ops.swiglu_norm, w->swiglu,
                   w->swiglu_norm, ops.linear_add, w->linear_add, ops.rms_norm, w->rms_norm, ops.add_rms_norm,
                   w->add_rms_norm, ops.add_layer_norm, w->add_layer_norm, ops.rope_cache_write, w->rope_cache_write,
                   ops.attention, w->attention, ops.qkv_rope, w->qkv_rope, ops.add, ops.fallback);
            fails += !ok;
        }
        free(ref);
        free(got);
        gd_ctx_clear_error(ctx);
    }
    return fails;
}

/* Attention and GELU nodes of a compiled program. */
typedef struct attn_ops {
    int nodes, fallback, attention, attention_grad, attention_lse, attention_grad_lse, y_bthd;
    int gelu, gelu_grad, keep, act_grad;
    int copy_bthd; /* copies of (B, T, H, D) views: dq, dk, dv transposed back, when not written so */
    int norm_grad, norm_grad_add; /* norm backward ops, plain and with the residual's gradient added */
    int ce, ce_grad, ce_with_grad; /* the loss, its gradient, and the two in one node */
    int acc, add; /* products with an addend (sums of gradients), and plain adds */
} attn_ops;

static void attn_line(void *user, const char *s)
{
    attn_ops *c = (attn_ops *)user;
    if (strncmp(s, "node", 4) != 0) return;
    c->nodes++;
    c->fallback += strstr(s, "[fallback]") != NULL;
    c->attention += strstr(s, " attention(") != NULL;
    c->attention_grad += strstr(s, " attention_grad(") != NULL;
    c->attention_lse += strstr(s, " attention_lse(") != NULL;
    c->attention_grad_lse += strstr(s, " attention_grad_lse(") != NULL;
    /* y read back in the layout the output projection takes, (B, T, H, D) = (2, 80, 2, 64) */
    c->y_bthd += strstr(s, " attention_grad_lse(") != NULL && strstr(s, "[2, 80, 2, 64]") != NULL;
    c->gelu += strstr(s, " gelu(") != NULL;
    c->gelu_grad += strstr(s, " gelu_grad(") != NULL;
    c->keep += strstr(s, " linear_act_keep(") != NULL;
    c->act_grad += strstr(s, " matmul_act_grad(") != NULL;
    c->copy_bthd += strstr(s, " copy(") != NULL && strstr(s, "[2, 80, 2, 64]") != NULL;
    c->norm_grad += strstr(s, " layer_norm_grad(") != NULL || strstr(s, " rms_norm_grad(") != NULL;
    c->norm_grad_add += strstr(s, " layer_norm_grad_add(") != NULL || strstr(s, " rms_norm_grad_add(") != NULL;
    c->ce += strstr(s, " cross_entropy(") != NULL;
    c->ce_grad += strstr(s, " cross_entropy_grad(") != NULL;
    c->ce_with_grad += strstr(s, " cross_entropy_with_grad(") != NULL;
    c->acc += strstr(s, " matmul_acc(") != NULL;
    c->add += strstr(s, " add(") != NULL;
}

/* The loss and every parameter's gradient of a training step of cfg (B sequences of T
 * tokens) on backend bi, as f32, one after another in *out. */
static gd_status run_lm_grads(gd_ctx *ctx, int bi, const gd_lm_config *cfg, gd_dtype dt, int64_t B, int64_t T,
                              float **out, int64_t *n, attn_ops *ops)
{
    ctx->preferred = bi;
    ctx->strict = bi != 0;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *ids = gd_input(g, "ids", GD_I32, 2, (const int64_t[]){B, T});
    gd_tensor *tg = gd_input(g, "targets", GD_I32, 2, (const int64_t[]){B, T});
    gd_tensor *loss = gd_lm_forward_loss(g, cfg, ids, tg, dt, GD_LM_FLOAT);
    gd_status st = loss != NULL ? gd_graph_init_params(g, 7) : GD_ERR_INVALID;
    if (st == GD_OK) st = gd_backward(g, loss);
    gd_tensor *t[64];
    int nt = 0;
    t[nt++] = loss;
    for (int i = 0; st == GD_OK && i < gd_graph_param_count(g) && nt < 64; i++) {
        gd_tensor *gr = gd_grad(g, gd_graph_param(g, i));
        if (gr != NULL) t[nt++] = gd_tensor_dtype(gr) == GD_F32 ? gr : gd_cast(gr, GD_F32);
    }
    int32_t idv[512], tv[512];
    for (int64_t i = 0; i < B * T && i < 512; i++) {
        idv[i] = (int32_t)((i * 37 + 5) % cfg->vocab_size);
        tv[i] = (int32_t)((i * 11 + 3) % cfg->vocab_size);
    }
    if (st == GD_OK) st = gd_tensor_write(ids, idv, sizeof(int32_t) * (size_t)(B * T));
    if (st == GD_OK) st = gd_tensor_write(tg, tv, sizeof(int32_t) * (size_t)(B * T));
    return compile_run_read(ctx, g, st, nt, t, out, n, ops != NULL ? attn_line : NULL, ops);
}

/* A Llama training step with grouped heads of 64 over 80 tokens (two of the tensor-core
 * kernels' tiles in bf16; the CUDA-core kernels in f32): each layer's attention and its
 * backward become attention_lse and attention_grad_lse, y written in the layout of its
 * transpose, and the loss and the gradients match the reference's. Then a GPT-2 step in
 * bf16, whose GELU and its gradient go into the products around them (linear_act_keep,
 * matmul_act_grad: no gelu or gelu_grad node left). In all three the backward writes dq, dk
 * and dv as the projections take them back (grad_bthd): no copy of a transposed view; and
 * the two norms' backward of each layer add the residual stream's gradient as they write dx
 * (*_norm_grad_add: 4), the final norm's alone has no add after it; and the loss comes out of
 * its gradient's pass over the logits (cross_entropy_with_grad). The sums of gradients are
 * products with an addend (matmul_acc): Llama's dx of q, k, v and of gate and up, three a
 * layer; GPT-2 has none (one product makes q, k, v; its tied embedding's two gradients are
 * summed in f32, the head's cast from bf16). */
static int run_lm_train_plans(gd_ctx *ctx, int bi)
{
    const gd_dtype dts[3] = {GD_F32, GD_BF16, GD_BF16};
    int fails = 0;
    for (int i = 0; i < 3; i++) {
        const int gpt2 = i == 2;
        gd_lm_config cfg = {.arch = gpt2 ? GD_LM_GPT2 : GD_LM_LLAMA, .dim = 128, .n_layers = 2, .n_heads = 2,
                            .n_kv_heads = gpt2 ? 2 : 1, .hidden_dim = gpt2 ? 512 : 256, .vocab_size = 256,
                            .max_seq = 128, .rope_theta = 1e4, .norm_eps = 1e-5, .tied_embeddings = gpt2};
        float *ref = NULL, *got = NULL;
        int64_t n_ref = 0, n_got = 0;
        attn_ops ops;
        memset(&ops, 0, sizeof ops);
        gd_status st = gd_lm_config_check(ctx, &cfg);
        if (st == GD_OK) st = run_lm_grads(ctx, 0, &cfg, dts[i], 2, 80, &ref, &n_ref, NULL);
        if (st == GD_OK) st = run_lm_grads(ctx, bi, &cfg, dts[i], 2, 80, &got, &n_got, &ops);
        if (st != GD_OK || n_ref != n_got) {
            printf("FAIL training plan %s: %s\n", gd_dtype_name(dts[i]), gd_ctx_error(ctx));
            fails++;
        } else {
            double num = 0, den = 1e-30;
            for (int64_t k = 0; k < n_ref; k++) {
                double d = (double)got[k] - ref[k];
                num += d * d, den += (double)ref[k] * ref[k];
            }
            const double e = num / den, tol = dts[i] == GD_F32 ? 1e-7 : 1e-3;
            const int want_keep = gpt2 ? 2 : 0, want_acc = gpt2 ? 0 : 6;
            const int ok = e <= tol && ops.fallback == 0 && ops.attention_lse == 2 && ops.attention_grad_lse == 2 &&
                           ops.attention == 0 && ops.attention_grad == 0 && ops.y_bthd == 2 && ops.gelu == 0 &&
                           ops.gelu_grad == 0 && ops.keep == want_keep && ops.act_grad == want_keep &&
                           ops.copy_bthd == 0 && ops.norm_grad_add == 4 && ops.norm_grad == 1 && ops.ce == 0 &&
                           ops.ce_grad == 0 && ops.ce_with_grad == 1 && ops.acc == want_acc;
            printf("%s training plan %s %s: loss and %lld gradient values nmse %.3g (tol %.3g), %d nodes: "
                   "attention_lse %d, attention_grad_lse %d (want 2, 2), of them with y (B, T, H, D) %d (want 2), "
                   "attention %d, attention_grad %d (want 0, 0), linear_act_keep %d, matmul_act_grad %d (want %d, %d), "
                   "gelu %d, gelu_grad %d (want 0, 0), copies of (B, T, H, D) views %d (want 0), norm backward with "
                   "the residual added %d, without %d (want 4, 1), cross_entropy %d, cross_entropy_grad %d, "
                   "cross_entropy_with_grad %d (want 0, 0, 1), matmul_acc %d (want %d), add %d, %d fallback\n",
                   ok ? "ok  " : "FAIL", gpt2 ? "gpt2" : "llama", gd_dtype_name(dts[i]), (long long)n_ref, e, tol,
                   ops.nodes, ops.attention_lse, ops.attention_grad_lse, ops.y_bthd, ops.attention, ops.attention_grad,
                   ops.keep, ops.act_grad, want_keep, want_keep, ops.gelu, ops.gelu_grad, ops.copy_bthd,
                   ops.norm_grad_add, ops.norm_grad, ops.ce, ops.ce_grad, ops.ce_with_grad, ops.acc, want_acc, ops.add,
                   ops.fallback);
            fails += !ok;
        }
        free(ref);
        free(got);
        gd_ctx_clear_error(ctx);
    }
    return fails;
}

/* An embedding id past the table, found by the kernel on the device: the run or the read
 * after it fails with the node's label, the position and the value; good ids then run. */
static int run_bad_ids(gd_ctx *ctx, int bi)
{
    ctx->preferred = bi;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *table = gd_input(g, "table", GD_F32, 2, (const int64_t[]){4, 3});
    gd_tensor *ids = gd_input(g, "ids", GD_I32, 2, (const int64_t[]){2, 2});
    gd_tensor *y = gd_scale(gd_label(gd_embedding(table, ids), "tok.lookup"), 2.0, 0.0);
    gd_program *p = y != NULL ? gd_compile(g, 1, &y, 0) : NULL;
    float tv[12], yv[12];
    for (int i = 0; i < 12; i++) tv[i] = (float)i;
    int32_t good[4] = {3, 0, 2, 1}, bad[4] = {0, 1, 2, 7};
    int fails = 0;
    if (p == NULL || gd_tensor_write(table, tv, sizeof tv) != GD_OK) {
        printf("FAIL bad ids: building: %s\n", gd_ctx_error(ctx));
        fails++;
    } else {
        gd_status st = gd_tensor_write(ids, good, sizeof good);
        if (st == GD_OK) st = gd_program_run(p);
        if (st == GD_OK) st = gd_tensor_read(y, yv, sizeof yv);
        int right = st == GD_OK && yv[0] == 18.0f && yv[3] == 0.0f && yv[11] == 10.0f;
        printf("%s good ids: %s\n", right ? "ok  " : "FAIL", st == GD_OK ? "embedding * 2 as expected" : gd_ctx_error(ctx));
        fails += !right;
        gd_ctx_clear_error(ctx);
        st = gd_tensor_write(ids, bad, sizeof bad);
        if (st == GD_OK) st = gd_program_run(p);
        if (st == GD_OK) st = gd_tensor_read(y, yv, sizeof yv);
        const char *msg = gd_ctx_error(ctx);
        int named = st == GD_ERR_INVALID && strstr(msg, "node ") != NULL && strstr(msg, "tok.lookup") != NULL &&
                    strstr(msg, "ids[1, 1] = 7") != NULL;
        printf("%s bad id reported: %s\n", named ? "ok  " : "FAIL", st != GD_OK ? msg : "no error");
        fails += !named;
        gd_ctx_clear_error(ctx);
        st = gd_tensor_write(ids, good, sizeof good);
        if (st == GD_OK) st = gd_program_run(p);
        if (st == GD_OK) st = gd_tensor_read(y, yv, sizeof yv);
        printf("%s good ids after the report: %s\n", st == GD_OK ? "ok  " : "FAIL", st == GD_OK ? "ran" : gd_ctx_error(ctx));
        fails += st != GD_OK;
        gd_ctx_clear_error(ctx);
    }
    if (p != NULL) gd_program_free(p);
    gd_graph_free(g);
    ctx->preferred = 0;
    return fails;
}

/* The same for embedding_grad, whose kernels sort the ids first: an id past the table or
 * negative fails the run or the read, naming the node, the position and the value; with
 * the ids fixed the program runs again, each row the sum of its dy rows. */
static int run_bad_grad_ids(gd_ctx *ctx, int bi)
{
    ctx->preferred = bi;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *dy = gd_input(g, "dy", GD_F32, 3, (const int64_t[]){2, 2, 3});
    gd_tensor *ids = gd_input(g, "ids", GD_I32, 2, (const int64_t[]){2, 2});
    gd_tensor *dt = gd_label(gd_op(g, "embedding_grad", 2, (gd_tensor *[]){dy, ids}, 1,
                                   (gd_attr[]){gd_attr_i("num_embeddings", 4)}),
                             "tok.grad");
    gd_program *p = dt != NULL ? gd_compile(g, 1, &dt, 0) : NULL;
    float dyv[12], tv[12];
    for (int i = 0; i < 12; i++) dyv[i] = (float)(i + 1);
    const int32_t good[4] = {3, 0, 3, 1}, past[4] = {0, 1, 2, 7}, neg[4] = {0, -3, 2, 1};
    const struct {
        const int32_t *ids;
        const char *want; /* NULL: runs */
    } runs[] = {{good, NULL}, {past, "ids[1, 1] = 7"}, {neg, "ids[0, 1] = -3"}, {good, NULL}};
    int fails = 0;
    if (p == NULL || gd_tensor_write(dy, dyv, sizeof dyv) != GD_OK) {
        printf("FAIL bad grad ids: building: %s\n", gd_ctx_error(ctx));
        fails++;
    } else {
        for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
            gd_status st = gd_tensor_write(ids, runs[r].ids, 4 * sizeof(int32_t));
            if (st == GD_OK) st = gd_program_run(p);
            if (st == GD_OK) st = gd_tensor_read(dt, tv, sizeof tv);
            const char *msg = gd_ctx_error(ctx);
            int ok;
            if (runs[r].want == NULL) /* row 3 = dy rows 0 and 2, row 0 = dy row 1, row 1 = dy row 3, row 2 = 0 */
                ok = st == GD_OK && tv[9] == 1.0f + 7.0f && tv[11] == 3.0f + 9.0f && tv[0] == 4.0f && tv[5] == 12.0f &&
                     tv[6] == 0.0f && tv[8] == 0.0f;
            else
                ok = st == GD_ERR_INVALID && strstr(msg, "node ") != NULL && strstr(msg, "tok.grad") != NULL &&
                     strstr(msg, runs[r].want) != NULL;
            printf("%s embedding_grad ids %zu: %s\n", ok ? "ok  " : "FAIL", r,
                   st != GD_OK ? msg : runs[r].want == NULL ? "the sums" : "no error");
            fails += !ok;
            gd_ctx_clear_error(ctx);
        }
    }
    if (p != NULL) gd_program_free(p);
    gd_graph_free(g);
    ctx->preferred = 0;
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
    ctx->guard = 0;
    int vf = run_views(ctx, bi), bf = run_bad_ids(ctx, bi) + run_bad_grad_ids(ctx, bi), lf = run_lm_plans(ctx, bi);
    int tf = run_lm_train_plans(ctx, bi);
    printf("views: %d failed; bad data: %d failed; decode plans: %d failed; training plans: %d failed\n", vf, bf, lf,
           tf);
    gd_ctx_free(ctx);
    return fails + vf + bf + lf + tf != 0;
}
