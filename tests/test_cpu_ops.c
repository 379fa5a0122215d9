/* test_cpu_ops.c — the fast CPU backend's kernels at sizes the sweep's small cases do not
 * reach: long rows and their vector tails, many rows split over threads, several rows
 * per thread, reductions over every kind of axis layout, transposes big enough to be
 * tiled, half-precision through the f32 kernels. Each case runs on the reference and on
 * "cpu" (strict: no fallback) with the same inputs and is compared like the sweep does
 * (normalized MSE within the op's tolerance, or bit for bit for exact ops); then it runs
 * again with a different thread count and must give the same bits.
 *
 * Also: kernels fed strided views (a transpose, a slice, an expand) that they read as they
 * are, with no copy in front; runtime positions and lengths (rope, attention, cache_write)
 * at sizes past the sweep's; bad data (indices, targets, lengths, positions out of range)
 * reported as GDP_ERR_INVALID naming the value; and the mixed-precision kernels, called
 * directly through a host of this test's own (the ops that declare those forms are not
 * part of every build). */
#include "sweep.h"

#include "kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gdp_status gradus_cpu_plugin_init(const gdp_host *host, gdp_plugin *plugin, gdp_err *err);

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

/* ---- strided inputs ------------------------------------------------------------------ */

typedef gd_tensor *(*build_fn)(gd_tensor *const *in);

static gd_tensor *b_add_t(gd_tensor *const *in) { return gd_add(gd_transpose(in[0], 0, 1), in[1]); }
static gd_tensor *b_mul_slice(gd_tensor *const *in) { return gd_mul(gd_slice(in[0], 1, 10, 250), in[1]); }
static gd_tensor *b_sub_expand(gd_tensor *const *in)
{
    return gd_sub(in[1], gd_expand(in[0], 2, (int64_t[]){200, 300}));
}
static gd_tensor *b_max_t3(gd_tensor *const *in)
{
    return gd_maximum(gd_permute(in[0], 3, (int64_t[]){2, 0, 1}), gd_permute(in[1], 3, (int64_t[]){1, 2, 0}));
}
static gd_tensor *b_relu_p(gd_tensor *const *in) { return gd_relu(gd_permute(in[0], 3, (int64_t[]){2, 0, 1})); }
static gd_tensor *b_gelu_s(gd_tensor *const *in) { return gd_gelu(gd_slice(in[0], 0, 3, 60), 0); }
static gd_tensor *b_exp_t(gd_tensor *const *in) { return gd_exp(gd_transpose(in[0], 0, 1)); }
static gd_tensor *b_clamp_t(gd_tensor *const *in) { return gd_clamp(gd_transpose(in[0], 0, 1), -0.4, 0.6); }
static gd_tensor *b_neg_t(gd_tensor *const *in) { return gd_neg(gd_transpose(in[0], 0, 1)); }
static gd_tensor *b_relu_grad_t(gd_tensor *const *in)
{
    gd_tensor *x[2] = {gd_transpose(in[0], 0, 1), gd_transpose(in[1], 0, 1)};
    return gd_op(gd_tensor_graph(in[0]), "relu_grad", 2, x, 0, NULL);
}
static gd_tensor *b_mm_bt(gd_tensor *const *in) { return gd_matmul(in[0], gd_transpose(in[1], 0, 1), 0, 0); }
static gd_tensor *b_mm_at(gd_tensor *const *in) { return gd_matmul(gd_transpose(in[0], 0, 1), in[1], 0, 0); }
static gd_tensor *b_mm_at_flag(gd_tensor *const *in) { return gd_matmul(gd_transpose(in[0], 0, 1), in[1], 1, 0); }
static gd_tensor *b_mm_qk(gd_tensor *const *in) { return gd_matmul(in[0], gd_transpose(in[1], 2, 3), 0, 0); }
static gd_tensor *b_mm_slice(gd_tensor *const *in) { return gd_matmul(gd_slice(in[0], 1, 20, 68), in[1], 0, 0); }
static gd_tensor *b_linear_wt(gd_tensor *const *in) { return gd_linear(in[0], gd_transpose(in[1], 0, 1), in[2]); }
static gd_tensor *b_linear_xt(gd_tensor *const *in) { return gd_linear(gd_transpose(in[0], 0, 1), in[1], NULL); }

typedef struct view_case {
    const char *name, *op; /* the op whose kernel reads the view (its tolerance applies) */
    int32_t dtype;
    int n_in;
    int ndim[3];
    int64_t shape[3][4];
    build_fn build;
} view_case;

/* Counts the program's nodes that are copies ("node <id> <backend> copy(...)"). */
static void count_copies(void *user, const char *line)
{
    if (strncmp(line, "node", 4) == 0 && strstr(line, " copy(") != NULL) (*(int *)user)++;
}

/* Runs the case's graph on backend `name` (strict on cpu), its output into *out (malloc'd
 * bytes); *copies counts the contiguous copies the planner put in front of kernels. */
static gd_status run_view(gd_ctx *ctx, const view_case *c, const char *name, gdp_tensor *out, int *copies)
{
    gd_status st = gd_ctx_use_backend(ctx, name);
    ctx->strict = strcmp(name, "ref") != 0;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *in[3] = {NULL, NULL, NULL};
    for (int k = 0; k < c->n_in && st == GD_OK; k++) {
        char nm[8];
        snprintf(nm, sizeof nm, "in%d", k);
        gd_case_input ci = {.dtype = k == 1 && c->dtype == GDP_I64 ? GDP_I64 : c->dtype, .ndim = c->ndim[k],
                            .kind = gdp_is_int(c->dtype) ? 'i' : 'n', .lo = -50, .hi = 50};
        memcpy(ci.shape, c->shape[k], sizeof c->shape[k]);
        in[k] = gd_input(g, nm, (gd_dtype)ci.dtype, ci.ndim, ci.shape);
        size_t bytes = (size_t)gd_case_numel(&ci) * gdp_dtype_size(ci.dtype);
        void *h = malloc(bytes);
        gd_case_fill(&ci, h, 1234 + (uint64_t)k);
        if (in[k] == NULL || gd_tensor_write(in[k], h, bytes) != GD_OK) st = GD_ERR_INVALID;
        free(h);
    }
    gd_tensor *y = st == GD_OK ? c->build(in) : NULL;
    gd_program *p = y != NULL ? gd_compile(g, 1, &y, 0) : NULL;
    if (p == NULL) st = GD_ERR_INVALID;
    if (st == GD_OK) st = gd_program_run(p);
    *copies = 0;
    if (st == GD_OK) {
        gd_program_describe(p, count_copies, copies);
        *out = gd_value_desc(y, malloc(gd_value_bytes(y)));
        st = gd_tensor_read(y, out->data, gd_value_bytes(y));
    }
    gd_program_free(p);
    gd_graph_free(g);
    ctx->strict = 0;
    return st;
}

static void check_view(gd_ctx *ctx, const view_case *c)
{
    gdp_tensor ref = {0}, got = {0};
    int copies_ref, copies;
    gd_status st = run_view(ctx, c, "ref", &ref, &copies_ref);
    if (st == GD_OK) st = run_view(ctx, c, "cpu", &got, &copies);
    if (st != GD_OK) {
        printf("FAIL view %s %s: %s\n", c->name, gd_dtype_name((gd_dtype)c->dtype), gd_ctx_error(ctx));
        failures++;
    } else if (copies != 0) {
        printf("FAIL view %s %s: %d copies in front of the cpu kernel (it should read the view)\n", c->name,
               gd_dtype_name((gd_dtype)c->dtype), copies);
        failures++;
    } else {
        double tol = gd_sweep_tol(gd_registry_find(ctx->reg, c->op), c->dtype, 0);
        int nan = 0;
        double e = gdp_is_float(ref.dtype) ? gd_nmse(&ref, &got, &nan) : 0.0;
        int same = memcmp(ref.data, got.data, (size_t)gdp_numel(&ref) * gdp_dtype_size(ref.dtype)) == 0;
        if (tol == 0 || !gdp_is_float(ref.dtype) ? !same : nan || !(e <= tol)) {
            printf("FAIL view %s %s: NMSE %.3g against the reference (tolerance %.3g)\n", c->name,
                   gd_dtype_name((gd_dtype)c->dtype), e, tol);
            failures++;
        }
    }
    free(ref.data);
    free(got.data);
    gd_ctx_use_backend(ctx, "cpu");
    gd_ctx_clear_error(ctx);
}

static void strided_cases(gd_ctx *ctx)
{
    static const view_case cases[] = {
        {"add(transpose, x)", "add", GDP_F32, 2, {2, 2}, {{300, 257}, {257, 300}}, b_add_t},
        {"mul(slice, row)", "mul", GDP_F32, 2, {2, 1}, {{100, 300}, {240}}, b_mul_slice},
        {"sub(x, expand)", "sub", GDP_F32, 2, {2, 2}, {{1, 300}, {200, 300}}, b_sub_expand},
        {"maximum(permute, permute)", "maximum", GDP_F32, 2, {3, 3}, {{40, 50, 30}, {50, 30, 40}}, b_max_t3},
        {"relu(permute)", "relu", GDP_F32, 1, {3}, {{40, 50, 33}}, b_relu_p},
        {"gelu(slice)", "gelu", GDP_F32, 1, {2}, {{64, 1001}}, b_gelu_s},
        {"exp(transpose)", "exp", GDP_F32, 1, {2}, {{513, 300}}, b_exp_t},
        {"clamp(transpose)", "clamp", GDP_F32, 1, {2}, {{130, 77}}, b_clamp_t},
        {"relu_grad(transposes)", "relu_grad", GDP_F32, 2, {2, 2}, {{200, 130}, {200, 130}}, b_relu_grad_t},
        {"neg(transpose) i64", "neg", GDP_I64, 1, {2}, {{70, 90}}, b_neg_t},
        {"add(transpose, x) i32", "add", GDP_I32, 2, {2, 2}, {{64, 70}, {70, 64}}, b_add_t},
        {"matmul(a, b^T view)", "matmul", GDP_F32, 2, {2, 2}, {{64, 48}, {96, 48}}, b_mm_bt},
        {"matmul(a^T view, b)", "matmul", GDP_F32, 2, {2, 2}, {{48, 64}, {48, 96}}, b_mm_at},
        {"matmul(a^T view, b, transpose_a)", "matmul", GDP_F32, 2, {2, 2}, {{48, 64}, {64, 96}}, b_mm_at_flag},
        {"matmul(q, k^T view)", "matmul", GDP_F32, 2, {4, 4}, {{2, 3, 16, 8}, {2, 3, 20, 8}}, b_mm_qk},
        {"matmul(slice, b)", "matmul", GDP_F32, 2, {2, 2}, {{64, 100}, {48, 32}}, b_mm_slice},
        {"linear(x, w^T view, b)", "linear", GDP_F32, 3, {2, 2, 1}, {{32, 40}, {40, 24}, {24}}, b_linear_wt},
        {"linear(x^T view, w)", "linear", GDP_F32, 2, {2, 2}, {{40, 32}, {24, 40}}, b_linear_xt},
        {"add(transpose, x) f16", "add", GDP_F16, 2, {2, 2}, {{300, 257}, {257, 300}}, b_add_t},
        {"gelu(slice) bf16", "gelu", GDP_BF16, 1, {2}, {{64, 1001}}, b_gelu_s},
        {"matmul(q, k^T view) bf16", "matmul", GDP_BF16, 2, {4, 4}, {{2, 3, 16, 8}, {2, 3, 20, 8}}, b_mm_qk},
        {"linear(x, w^T view, b) f16", "linear", GDP_F16, 3, {2, 2, 1}, {{32, 40}, {40, 24}, {24}}, b_linear_wt},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_view(ctx, &cases[i]);
}

/* ---- bad data ------------------------------------------------------------------------- */

/* The case must fail on cpu with GD_ERR_INVALID and a message containing `names`. */
static void check_bad(gd_ctx *ctx, int cpu, const char *name, const char *spec, int32_t dtype, const char *names)
{
    const gd_op_def *op = gd_registry_find(ctx->reg, name);
    gd_case cs;
    char msg[256];
    if (op == NULL || gd_case_parse(spec, dtype, &cs, msg, sizeof msg) != 0) {
        printf("FAIL %s \"%s\": %s\n", name, spec, op == NULL ? "no such op" : msg);
        failures++;
        return;
    }
    gd_case_out got = {0};
    gd_ctx_clear_error(ctx);
    gd_status st = run_on(ctx, op, &cs, cpu, &got);
    const char *e = gd_ctx_error(ctx);
    if (st != GD_ERR_INVALID || strstr(e, names) == NULL || strstr(e, " on cpu") == NULL) {
        printf("FAIL %s \"%s\" %s: status %s, message '%s' (want invalid argument naming '%s', on cpu)\n", name, spec,
               gd_dtype_name((gd_dtype)dtype), gd_status_name(st), e, names);
        failures++;
    }
    gd_case_out_free(&got);
    gd_ctx_clear_error(ctx);
}

static void bad_data_cases(gd_ctx *ctx, int cpu)
{
    static const struct { const char *op, *spec, *names; } cases[] = {
        {"embedding", "n[5,3] i32[4]<5:6", "= 5"},
        {"embedding", "n[5,3] i64[2,2]<-2:-1", "= -2"},
        {"embedding_grad", "n[4,3] i32[4]<7:8 | num_embeddings=5", "= 7"},
        {"embedding_grad", "n[4,3] i64[4]<-1:0 | num_embeddings=5", "= -1"},
        {"index_select", "n[2,5,3] i64[3]<5:6 | axis=1", "= 5"},
        {"index_select", "n[5,3] i32[2]<-4:-3 | axis=0", "= -4"},
        {"index_select_grad", "n[4,3] i64[4]<9:10 | axis=0 input_shape=[5,3]", "= 9"},
        {"index_select_grad", "n[2,3,2] i32[2]<-1:0 | axis=-1 input_shape=[2,3,4]", "= -1"},
        {"cross_entropy", "n[4,5] i64[4]<5:6", "= 5"},
        {"cross_entropy", "n[4,5] i32[4]<-7:-6", "= -7"},
        {"cross_entropy_grad", "f[] n[4,5] i32[4]<6:7", "= 6"},
        {"cross_entropy_grad", "f[] n[4,5] i64[4]<-2:-1", "= -2"},
        {"cross_entropy", "n[4,8] i64[4]<5:6 | classes=5", "= 5"}, /* a padding column */
        {"cross_entropy_grad", "f[] n[4,8] i32[4]<7:8 | classes=5", "= 7"},
        {"attention", "n[1,2,3,4] n[1,1,5,4] n[1,1,5,4] i32[]<6:7 | causal=1", "kv_len = 6"},
        {"attention", "n[1,2,3,4] n[1,1,5,4] n[1,1,5,4] i64[]<-1:0", "kv_len = -1"},
        {"attention_grad", "n[1,2,3,4] n[1,2,3,4] n[1,1,5,4] n[1,1,5,4] i32[]<9:10", "kv_len = 9"},
        {"cache_write", "n[1,2,6,4] n[1,2,2,4] i32[]<5:6", "pos = 5"},
        {"cache_write", "n[1,2,6,4] n[1,2,2,4] i64[]<-1:0", "pos = -1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_bad(ctx, cpu, cases[i].op, cases[i].spec, GDP_F32, cases[i].names);
        check_bad(ctx, cpu, cases[i].op, cases[i].spec, GDP_BF16, cases[i].names);
    }
}

/* ---- mixed precision, through the kernels ------------------------------------------------ */

typedef struct fake_host {
    gdp_kernel k[512];
    int n;
} fake_host;

static gdp_status fake_register(void *h, const gdp_kernel *k, gdp_err *err)
{
    fake_host *f = h;
    if (f->n == 512) return gdp_fail(err, GDP_ERR_NOMEM, "too many kernels");
    f->k[f->n++] = *k;
    return GDP_OK;
}

static const gdp_kernel *find_sig(const fake_host *f, const char *op, const char *sig)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->k[i].op, op) == 0 && f->k[i].signature != NULL && strcmp(f->k[i].signature, sig) == 0)
            return &f->k[i];
    return NULL;
}

static gdp_tensor tensor(int32_t dt, int nd, const int64_t *shape, void *data)
{
    gdp_tensor t = {.size = sizeof t, .data = data, .dtype = dt, .ndim = nd};
    for (int d = 0; d < nd; d++) t.shape[d] = shape[d];
    gdp_set_contiguous(&t);
    return t;
}

static uint16_t to_half(int32_t dt, float v) { return dt == GDP_BF16 ? gdp_f32_to_bf16(v) : gdp_f32_to_f16(v); }
static float from_half(int32_t dt, uint16_t h) { return dt == GDP_BF16 ? gdp_bf16_to_f32(h) : gdp_f16_to_f32(h); }

static float rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Supports, workspace and launch of kernel k on node n; GDP_OK when all went well. */
static gdp_status launch_k(void *be, const gdp_kernel *k, gdp_node *n, const char *what)
{
    if (k == NULL) {
        printf("FAIL mixed %s: not registered\n", what);
        failures++;
        return GDP_ERR_UNSUPPORTED;
    }
    if (k->supports != NULL && !k->supports(be, n)) {
        printf("FAIL mixed %s: supports() declines\n", what);
        failures++;
        return GDP_ERR_UNSUPPORTED;
    }
    size_t ws = k->workspace != NULL ? k->workspace(be, n) : 0;
    n->workspace = ws > 0 ? malloc(ws) : NULL;
    n->workspace_bytes = ws;
    gdp_err e = {.size = sizeof e};
    gdp_status st = k->launch(be, n, NULL, &e);
    free(n->workspace);
    n->workspace = NULL;
    if (st != GDP_OK) {
        printf("FAIL mixed %s: %s\n", what, e.msg);
        failures++;
    }
    return st;
}

/* matmul (M, K) @ (K, N), half operands, f32 output, against a double product. */
static void mixed_matmul(void *be, const fake_host *f, int32_t dt, const char *sig)
{
    enum { M = 37, K = 70, N = 45 };
    uint16_t a[M * K], b[K * N];
    float c[M * N];
    uint64_t s = 5;
    for (int i = 0; i < M * K; i++) a[i] = to_half(dt, rnd(&s));
    for (int i = 0; i < K * N; i++) b[i] = to_half(dt, rnd(&s));
    gdp_tensor ta = tensor(dt, 2, (int64_t[]){M, K}, a), tb = tensor(dt, 2, (int64_t[]){K, N}, b);
    gdp_tensor tc = tensor(GDP_F32, 2, (int64_t[]){M, N}, c);
    const gdp_tensor *in[2] = {&ta, &tb}, *out[1] = {&tc};
    gdp_node n = {.size = sizeof n, .op = "matmul", .n_in = 2, .n_out = 1, .in = in, .out = out, .label = "mm"};
    if (launch_k(be, find_sig(f, "matmul", sig), &n, sig) != GDP_OK) return;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double want = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)from_half(dt, a[i * K + k]) * from_half(dt, b[k * N + j]);
                want += p;
                mag += fabs(p);
            }
            if (fabs(c[i * N + j] - want) > 1e-6 * (mag + 1e-30)) {
                printf("FAIL mixed matmul %s: c[%d][%d] = %.9g, want %.9g\n", sig, i, j, c[i * N + j], want);
                failures++;
                return;
            }
        }
}

/* sum or mean over axis 1 of (R, C) half into f32: the double sum of the widened values,
 * rounded once. */
static void mixed_reduce(void *be, const fake_host *f, const char *op, int32_t dt, const char *sig)
{
    enum { R = 9, C = 3001 };
    static uint16_t x[R * C];
    float y[R];
    uint64_t s = 9;
    for (int i = 0; i < R * C; i++) x[i] = to_half(dt, rnd(&s));
    gdp_tensor tx = tensor(dt, 2, (int64_t[]){R, C}, x), ty = tensor(GDP_F32, 1, (int64_t[]){R}, y);
    const gdp_tensor *in[1] = {&tx}, *out[1] = {&ty};
    static const int64_t axes[1] = {1};
    gdp_attr at[2] = {{.name = "axes", .kind = GDP_ATTR_INTS, .n = 1, .ints = axes},
                      {.name = "dtype", .kind = GDP_ATTR_STRING, .s = "f32"}};
    gdp_node n = {.size = sizeof n, .op = op, .n_in = 1, .n_out = 1, .in = in, .out = out, .attrs = {2, at},
                  .label = op};
    if (launch_k(be, find_sig(f, op, sig), &n, sig) != GDP_OK) return;
    for (int r = 0; r < R; r++) {
        double want = 0;
        for (int c = 0; c < C; c++) want += from_half(dt, x[r * C + c]);
        if (strcmp(op, "mean") == 0) want /= C;
        if (fabs(y[r] - want) > 1e-6 * (fabs(want) + 1e-3)) {
            printf("FAIL mixed %s %s: y[%d] = %.9g, want %.9g\n", op, sig, r, y[r], want);
            failures++;
            return;
        }
    }
}

/* adamw_update with a half copy of the weights, in place; the gradient f32 or half. */
static void mixed_adamw(void *be, const fake_host *f, int32_t dt, int half_grad, const char *sig)
{
    enum { E = 1000 };
    float p[E], m[E], v[E], g32[E], p0[E], m0[E], v0[E], step = 3, lr = 0.01f;
    uint16_t g16[E], copy[E];
    uint64_t s = 13;
    for (int i = 0; i < E; i++) {
        p[i] = p0[i] = rnd(&s);
        m[i] = m0[i] = 0.1f * rnd(&s);
        v[i] = v0[i] = 0.01f * (1.0f + rnd(&s));
        g32[i] = rnd(&s);
        g16[i] = to_half(dt, g32[i]);
        copy[i] = to_half(dt, 7.0f); /* overwritten */
    }
    int64_t e = E;
    gdp_tensor tp = tensor(GDP_F32, 1, &e, p), tm = tensor(GDP_F32, 1, &e, m), tv = tensor(GDP_F32, 1, &e, v);
    gdp_tensor tg = half_grad ? tensor(dt, 1, &e, g16) : tensor(GDP_F32, 1, &e, g32);
    gdp_tensor ts = tensor(GDP_F32, 0, NULL, &step), tl = tensor(GDP_F32, 0, NULL, &lr), tc = tensor(dt, 1, &e, copy);
    const gdp_tensor *in[7] = {&tp, &tg, &tm, &tv, &ts, &tl, &tc}, *out[4] = {&tp, &tm, &tv, &tc};
    gdp_attr at[1] = {{.name = "weight_decay", .kind = GDP_ATTR_FLOAT, .f = 0.01}};
    gdp_node n = {.size = sizeof n, .op = "adamw_update", .n_in = 7, .n_out = 4, .in = in, .out = out,
                  .attrs = {1, at}, .label = "adamw"};
    const gdp_kernel *k = find_sig(f, "adamw_update", sig);
    /* a copy of another shape is not this form */
    gdp_tensor short_copy = tensor(dt, 1, (int64_t[]){E - 1}, copy);
    in[6] = &short_copy;
    if (k != NULL && k->supports != NULL && k->supports(be, &n)) {
        printf("FAIL mixed adamw %s: supports() takes a copy of another size\n", sig);
        failures++;
    }
    in[6] = &tc;
    if (launch_k(be, k, &n, sig) != GDP_OK) return;
    double b1 = 0.9, b2 = 0.999, bc1 = 1 - pow(b1, 3), bc2 = 1 - pow(b2, 3);
    for (int i = 0; i < E; i++) {
        double gi = half_grad ? from_half(dt, g16[i]) : g32[i], pi = p0[i], mi = m0[i], vi = v0[i];
        pi -= (double)lr * 0.01 * pi;
        mi = b1 * mi + (1.0 - b1) * gi;
        vi = b2 * vi + (1.0 - b2) * gi * gi;
        pi -= (double)lr * (mi / bc1) / (sqrt(vi / bc2) + 1e-8);
        float pf = (float)pi;
        if (p[i] != pf || m[i] != (float)mi || v[i] != (float)vi || copy[i] != to_half(dt, pf)) {
            printf("FAIL mixed adamw %s: element %d: p' %.9g m' %.9g v' %.9g copy' %.9g, want %.9g %.9g %.9g %.9g\n",
                   sig, i, p[i], m[i], v[i], from_half(dt, copy[i]), pf, (float)mi, (float)vi,
                   from_half(dt, to_half(dt, pf)));
            failures++;
            return;
        }
    }
}

static void mixed_cases(void)
{
    fake_host *f = calloc(1, sizeof *f);
    gdp_host host = {.size = sizeof host, .abi_major = GDP_ABI_MAJOR, .abi_minor = GDP_ABI_MINOR, .host = f,
                     .register_kernel = fake_register};
    gdp_plugin pl = {.size = sizeof pl};
    gdp_err e = {.size = sizeof e};
    if (gradus_cpu_plugin_init(&host, &pl, &e) != GDP_OK || gcpu_register_kernels(pl.backend, &host, 0, &e) != GDP_OK) {
        printf("FAIL mixed: init: %s\n", e.msg);
        failures++;
        free(f);
        return;
    }
    int without = 0;
    for (int i = 0; i < f->n; i++) without += f->k[i].signature != NULL;
    f->n = 0;
    if (gcpu_register_kernels(pl.backend, &host, 1, &e) != GDP_OK) {
        printf("FAIL mixed: registering: %s\n", e.msg);
        failures++;
    }
    int with = 0;
    for (int i = 0; i < f->n; i++) with += f->k[i].signature != NULL;
    /* 8 of the 32 are the int8 linear layers' (2 ops x 4 half forms), 8 cross-entropy's (its
     * loss and gradient x f16/bf16 logits x i32/i64 targets), 10 adamw_update's (4 with a
     * half copy, 2 with the copy and a gradient scale, 4 with a half gradient and no copy) */
    if (without != 0 || with != 32) {
        printf("FAIL mixed: %d signature kernels without the mixed forms, %d with (want 0, 32)\n", without, with);
        failures++;
    }
    /* another thread count for the instance, as the core's gd_ctx_set_threads sets it */
    if (pl.configure == NULL || pl.configure(pl.backend, "threads", 3, &e) != GDP_OK ||
        pl.configure(pl.backend, "no such setting", 1, &e) != GDP_OK) {
        printf("FAIL mixed: configure\n");
        failures++;
    }
    mixed_matmul(pl.backend, f, GDP_BF16, "bf16,bf16->f32");
    mixed_matmul(pl.backend, f, GDP_F16, "f16,f16->f32");
    mixed_reduce(pl.backend, f, "sum", GDP_BF16, "bf16->f32");
    mixed_reduce(pl.backend, f, "mean", GDP_BF16, "bf16->f32");
    mixed_reduce(pl.backend, f, "sum", GDP_F16, "f16->f32");
    mixed_reduce(pl.backend, f, "mean", GDP_F16, "f16->f32");
    mixed_adamw(pl.backend, f, GDP_BF16, 1, "f32,bf16,f32,f32,f32,f32,bf16->f32,f32,f32,bf16");
    mixed_adamw(pl.backend, f, GDP_BF16, 0, "f32,f32,f32,f32,f32,f32,bf16->f32,f32,f32,bf16");
    mixed_adamw(pl.backend, f, GDP_F16, 1, "f32,f16,f32,f32,f32,f32,f16->f32,f32,f32,f16");
    mixed_adamw(pl.backend, f, GDP_F16, 0, "f32,f32,f32,f32,f32,f32,f16->f32,f32,f32,f16");
    pl.shutdown(pl.backend);
    free(f);
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
        /* runtime positions and lengths, past the sweep's sizes */
        {"rope", "n[2,40,4,64] i32[]<100:101 | interleaved=0"}, {"rope", "n[1,33,2,16] i64[]<-7:-6 | inverse=1"},
        {"attention", "n[2,4,33,32] n[2,2,80,32] n[2,2,80,32] i32[]<57:58 | causal=1"},
        {"attention", "n[1,8,1,64] n[1,2,300,64] n[1,2,300,64] i64[]<211:212 | causal=1"},
        {"attention", "n[2,2,70,16] n[2,2,70,16] n[2,2,70,16] i32[]<0:1"},
        {"attention_grad", "n[2,4,33,32] n[2,4,33,32] n[2,2,80,32] n[2,2,80,32] i32[]<57:58 | causal=1"},
        {"attention_grad", "n[1,2,70,16] n[1,2,70,16] n[1,1,150,16] n[1,1,150,16] i64[]<100:101"},
        {"cache_write", "n[2,4,64,32] n[2,4,7,32] i64[]<50:51"},
        {"cross_entropy", "n[64,10] i32[64]<-100:-99"}, /* every target ignore_index */
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
        /* a padded vocabulary: the columns past `classes` take no part */
        {"cross_entropy", "n[256,1024] i64[256]<1000 | classes=1000"},
        {"cross_entropy_grad", "f[] n[256,1024] i32[256]<-1:1000 | ignore_index=-1 classes=1000"},
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
        {"cross_entropy_grad", "f[] n[64,112] i32[64]<100 | classes=100"},
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
    static const struct { const char *op, *spec; } scalar_half_cases[] = {
        {"rope", "n[2,40,4,64] i32[]<100:101 | interleaved=0"},
        {"attention", "n[2,4,33,32] n[2,2,80,32] n[2,2,80,32] i32[]<57:58 | causal=1"},
        {"attention_grad", "n[2,4,33,32] n[2,4,33,32] n[2,2,80,32] n[2,2,80,32] i32[]<57:58 | causal=1"},
        {"cache_write", "n[2,4,64,32] n[2,4,7,32] i64[]<50:51"},
    };
    for (size_t i = 0; i < sizeof scalar_half_cases / sizeof scalar_half_cases[0]; i++) {
        check(ctx, cpu, scalar_half_cases[i].op, scalar_half_cases[i].spec, GDP_F16);
        check(ctx, cpu, scalar_half_cases[i].op, scalar_half_cases[i].spec, GDP_BF16);
    }
    strided_cases(ctx);
    bad_data_cases(ctx, cpu);
    mixed_cases();
    gd_ctx_free(ctx);
    if (failures == 0) printf("ok\n");
    return failures != 0;
}
