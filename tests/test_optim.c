/* test_optim.c — optimizer steps against values worked out by hand from the PyTorch
 * update rules, clipping by global norm, the learning-rate state, assign and clip_coef,
 * error paths, and a small linear regression trained to convergence. */
#include "gradus.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* A graph whose loss is sum(p * c): the gradient of p is the input c, whatever p is. */
typedef struct fixed_grad {
    gd_graph *g;
    gd_tensor *p, *c, *loss;
    gd_program *step;
} fixed_grad;

static int fixed_grad_build(fixed_grad *f, int n)
{
    f->g = gd_graph_new(ctx);
    f->p = gd_param(f->g, "w", GD_F32, 1, (int64_t[]){n});
    f->c = gd_input(f->g, "c", GD_F32, 1, (int64_t[]){n});
    f->loss = gd_sum(gd_mul(f->p, f->c), 0, NULL, 0);
    f->step = NULL;
    if (f->loss == NULL || gd_backward(f->g, f->loss) != GD_OK) {
        CHECK(0, "building sum(p*c): %s", gd_ctx_error(ctx));
        return 0;
    }
    return 1;
}

static int fixed_grad_compile(fixed_grad *f, const float *p0, const float *c)
{
    f->step = gd_compile(f->g, 1, &f->loss, GD_COMPILE_UPDATES);
    CHECK(f->step != NULL, "compile: %s", gd_ctx_error(ctx));
    if (f->step == NULL) return 0;
    size_t bytes = (size_t)gd_tensor_numel(f->p) * sizeof(float);
    CHECK(gd_tensor_write(f->p, p0, bytes) == GD_OK && gd_tensor_write(f->c, c, bytes) == GD_OK, "write: %s",
          gd_ctx_error(ctx));
    return 1;
}

static int fixed_grad_run(fixed_grad *f, float *p_out)
{
    gd_status s = gd_program_run(f->step);
    CHECK(s == GD_OK, "run: %s", gd_ctx_error(ctx));
    if (s == GD_OK) s = gd_tensor_read(f->p, p_out, (size_t)gd_tensor_numel(f->p) * sizeof(float));
    CHECK(s == GD_OK, "read p: %s", gd_ctx_error(ctx));
    return s == GD_OK;
}

static void fixed_grad_free(fixed_grad *f)
{
    gd_program_free(f->step);
    gd_graph_free(f->g);
}

/* AdamW, lr 0.1, wd 0.01, two steps with a constant gradient g. With constant g the bias
 * corrections make mhat = g and vhat = g^2 at every step, so each step is
 *   p <- p*(1 - lr*wd) - lr * g / (|g| + eps),
 * and a step count stuck at 1 would give 1.9/sqrt(1.999) times that on step 2. */
static void test_adamw_steps(void)
{
    fixed_grad f;
    if (!fixed_grad_build(&f, 4)) return;
    CHECK(gd_optimizer_adamw(f.g, &(gd_adamw_config){.lr = 0.1, .weight_decay = 0.01}) == GD_OK, "adamw: %s",
          gd_ctx_error(ctx));
    const float p0[4] = {1, -2, 0.5f, 3}, c[4] = {0.1f, -0.2f, 0.3f, 0};
    float p[4];
    if (fixed_grad_compile(&f, p0, c) && fixed_grad_run(&f, p)) {
        // 0.999 - 0.1*0.1/(0.1 + 1e-8) etc.; a zero gradient only decays
        const double want1[4] = {0.89900001, -1.898000005, 0.39950000333, 2.997};
        expect_close("adamw step 1", p, want1, 4, 2e-7);
        if (fixed_grad_run(&f, p)) {
            const double want2[4] = {0.79810102, -1.79610201, 0.29910050666, 2.994003};
            expect_close("adamw step 2", p, want2, 4, 2e-7);
        }
        // the moments after two steps: m = 0.19 g, v = 0.001999 g^2
        gd_tensor *m = gd_graph_find(f.g, "w.adam_m"), *v = gd_graph_find(f.g, "w.adam_v");
        float mv[4];
        CHECK(m != NULL && v != NULL, "moments not named w.adam_m / w.adam_v");
        if (m != NULL && gd_tensor_read(m, mv, sizeof mv) == GD_OK)
            expect_close("adam_m", mv, (const double[]){0.019, -0.038, 0.057, 0}, 4, 1e-7);
        if (v != NULL && gd_tensor_read(v, mv, sizeof mv) == GD_OK)
            expect_close("adam_v", mv, (const double[]){1.999e-5, 7.996e-5, 1.7991e-4, 0}, 4, 1e-10);
    }
    fixed_grad_free(&f);
}

/* AdamW with clip_norm 0.1 over g = c = (0.1, -0.2, 0.3, 0), |g| = sqrt(0.14): the factor
 * k = 0.1 / (|g| + 1e-6) reaches the update as its gradient scale, so after a step
 * m = 0.1 k g and v = 0.001 k^2 g^2 — the norm computed by the optimizer, or given to it
 * (grad_norm); a grad_norm that is no f32 scalar is refused. */
static void refused(gd_status st, const char *what, const char *want);

static void test_adamw_clip(void)
{
    for (int given = 0; given < 2; given++) {
        fixed_grad f;
        if (!fixed_grad_build(&f, 4)) return;
        gd_tensor *gr = gd_grad(f.g, f.p);
        gd_tensor *norm = given ? gd_global_norm(f.g, 1, &gr) : NULL;
        if (given) {
            gd_status bad = gd_optimizer_adamw(f.g, &(gd_adamw_config){.lr = 0.1, .clip_norm = 0.1, .grad_norm = gr});
            refused(bad, "a vector grad_norm", "grad_norm");
            gd_ctx_clear_error(ctx);
        }
        CHECK(gd_optimizer_adamw(f.g, &(gd_adamw_config){.lr = 0.1, .clip_norm = 0.1, .grad_norm = norm}) == GD_OK,
              "adamw: %s", gd_ctx_error(ctx));
        const float p0[4] = {1, -2, 0.5f, 3}, c[4] = {0.1f, -0.2f, 0.3f, 0};
        float p[4], mv[4];
        if (fixed_grad_compile(&f, p0, c) && fixed_grad_run(&f, p)) {
            const double k = 0.1 / (sqrt(0.14) + 1e-6);
            gd_tensor *m = gd_graph_find(f.g, "w.adam_m"), *v = gd_graph_find(f.g, "w.adam_v");
            if (m != NULL && gd_tensor_read(m, mv, sizeof mv) == GD_OK)
                expect_close(given ? "clipped adam_m (norm given)" : "clipped adam_m", mv,
                             (const double[]){0.01 * k, -0.02 * k, 0.03 * k, 0}, 4, 1e-7);
            if (v != NULL && gd_tensor_read(v, mv, sizeof mv) == GD_OK)
                expect_close("clipped adam_v", mv,
                             (const double[]){1e-5 * k * k, 4e-5 * k * k, 9e-5 * k * k, 0}, 4, 1e-10);
        }
        fixed_grad_free(&f);
    }
}

/* Counts a program's nodes whose description holds `what` (an op with its first input). */
typedef struct node_count {
    const char *what;
    int n;
} node_count;

static void count_line(void *user, const char *s)
{
    node_count *c = user;
    c->n += strncmp(s, "node", 4) == 0 && strstr(s, c->what) != NULL;
}

/* Mixed precision: f32 parameters used through a cast to bf16 (as the language models'
 * trainer does). The update and the clipping norm read the bf16 gradient as it is
 * (gd_grad_narrow): no cast back to f32 is left in the step, and the parameters after
 * three steps are bit for bit those of an update over the f32 gradient — widening is exact.
 * The norm of several dtypes at once comes out as gd_global_norm's parts would. */
static void test_adamw_half_grads(void)
{
    enum { N = 37 };
    float p0[N], c[N], got[2][N];
    for (int i = 0; i < N; i++) {
        p0[i] = 0.05f * (float)(i - 18);
        c[i] = 0.3f * (float)((i * 7) % 11) - 1.5f;
    }
    for (int wide = 0; wide < 2; wide++) {
        gd_graph *g = gd_graph_new(ctx);
        gd_tensor *p = gd_param(g, "w", GD_F32, 1, (int64_t[]){N});
        gd_tensor *ci = gd_input(g, "c", GD_BF16, 1, (int64_t[]){N});
        gd_tensor *x = gd_cast(p, GD_BF16);
        gd_tensor *loss = gd_sum_as(gd_mul(gd_mul(x, x), ci), 0, NULL, 0, GD_F32);
        gd_status st = loss != NULL ? gd_backward(g, loss) : GD_ERR_INVALID;
        gd_tensor *d = st == GD_OK ? gd_grad(g, p) : NULL;
        CHECK(d != NULL && gd_tensor_dtype(d) == GD_F32 && gd_grad_narrow(g, p) != d &&
                  gd_tensor_dtype(gd_grad_narrow(g, p)) == GD_BF16,
              "the gradient of an f32 parameter used in bf16: f32, and bf16 before the cast back (%s)", gd_ctx_error(ctx));
        /* the reference form: the f32 gradient through an exact scale by 1, which is no cast */
        if (wide && d != NULL) st = gd_set_grad(g, p, gd_scale(d, 1.0, 0.0));
        if (st == GD_OK)
            st = gd_optimizer_adamw(g, &(gd_adamw_config){.lr = 0.05, .weight_decay = 0.1, .clip_norm = 0.5});
        gd_program *prog = st == GD_OK ? gd_compile(g, 1, &loss, GD_COMPILE_UPDATES) : NULL;
        CHECK(prog != NULL, "compiling the mixed-precision step: %s", gd_ctx_error(ctx));
        if (prog != NULL) {
            node_count casts = {.what = " cast(bf16[37])"}, updates = {.what = " adamw_update(f32[37], bf16[37]"};
            gd_program_describe(prog, count_line, &casts);
            gd_program_describe(prog, count_line, &updates);
            CHECK(casts.n == wide && updates.n == !wide, "%s: %d casts of the gradient to f32 (want %d), %d updates over "
                  "the bf16 gradient (want %d)", wide ? "f32 gradient" : "bf16 gradient", casts.n, wide, updates.n, !wide);
            st = gd_tensor_write(p, p0, sizeof p0);
            if (st == GD_OK) st = gd_tensor_write_as(ci, GD_F32, c, sizeof c);
            for (int k = 0; k < 3 && st == GD_OK; k++) st = gd_program_run(prog);
            if (st == GD_OK) st = gd_tensor_read(p, got[wide], sizeof got[wide]);
            CHECK(st == GD_OK, "running the mixed-precision step: %s", gd_ctx_error(ctx));
        }
        gd_program_free(prog);
        gd_graph_free(g);
    }
    CHECK(memcmp(got[0], got[1], sizeof got[0]) == 0, "AdamW over the bf16 gradient differs from over its f32 copy");
    CHECK(got[0][0] != p0[0], "the parameters did not move");

    /* a norm over f32 and bf16 tensors: the two dtypes' norms, then theirs */
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *a = gd_input(g, "a", GD_F32, 1, (int64_t[]){3}), *b = gd_input(g, "b", GD_BF16, 1, (int64_t[]){2});
    gd_tensor *xs[2] = {a, b}, *nrm = gd_global_norm_as(g, 2, xs, GD_F32);
    CHECK(nrm != NULL && gd_tensor_dtype(nrm) == GD_F32, "norm of f32 and bf16 tensors: %s", gd_ctx_error(ctx));
    gd_program *prog = nrm != NULL ? gd_compile(g, 1, &nrm, 0) : NULL;
    const float av[3] = {1, 2, 2};
    const float bv[2] = {4, -8};
    float r = 0;
    if (prog != NULL && gd_tensor_write(a, av, sizeof av) == GD_OK && gd_tensor_write_as(b, GD_F32, bv, sizeof bv) == GD_OK &&
        gd_program_run(prog) == GD_OK && gd_tensor_read(nrm, &r, sizeof r) == GD_OK)
        CHECK(fabsf(r - 9.433981f) < 1e-5f, "norm of (1, 2, 2) and (4, -8): %.7g (want sqrt(89) = 9.433981)", r);
    else
        CHECK(0, "the mixed norm did not run: %s", gd_ctx_error(ctx));
    CHECK(gd_global_norm_as(g, 2, xs, GD_I32) == NULL, "a norm into i32 was accepted");
    gd_ctx_clear_error(ctx);
    gd_program_free(prog);
    gd_graph_free(g);
}

/* The program's node lines in order: the first `cap` ops' names. */
typedef struct node_order {
    char op[8][24];
    int n;
} node_order;

static void order_line(void *user, const char *s)
{
    node_order *o = user;
    if (strncmp(s, "node", 4) != 0 || o->n == 8) return;
    const char *p = s + 4;
    while (*p == ' ' || (*p >= '0' && *p <= '9')) p++;
    while (*p != ' ' && *p != '\0') p++; /* the backend */
    while (*p == ' ') p++;
    size_t k = strcspn(p, "(");
    snprintf(o->op[o->n++], sizeof o->op[0], "%.*s", (int)(k < 23 ? k : 23), p);
}

/* A training step makes its parameters' bf16 copies first, together (where a backend runs
 * them as one launch); a program without the updates keeps graph order, each cast where
 * it is used. */
static void test_param_copies_first(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *w1 = gd_param(g, "w1", GD_F32, 1, (int64_t[]){8}), *w2 = gd_param(g, "w2", GD_F32, 1, (int64_t[]){8});
    gd_tensor *x = gd_input(g, "x", GD_BF16, 1, (int64_t[]){8});
    gd_tensor *h = gd_mul(x, gd_cast(w1, GD_BF16));
    gd_tensor *loss = gd_sum_as(gd_mul(gd_mul(h, h), gd_cast(w2, GD_BF16)), 0, NULL, 0, GD_F32);
    gd_status st = loss != NULL ? gd_backward(g, loss) : GD_ERR_INVALID;
    if (st == GD_OK) st = gd_optimizer_adamw(g, &(gd_adamw_config){.lr = 0.05});
    gd_program *step = st == GD_OK ? gd_compile(g, 1, &loss, GD_COMPILE_UPDATES) : NULL;
    gd_program *fwd = st == GD_OK ? gd_compile(g, 1, &loss, 0) : NULL;
    CHECK(step != NULL && fwd != NULL, "compiling: %s", gd_ctx_error(ctx));
    if (step != NULL && fwd != NULL) {
        node_order a = {0}, b = {0};
        gd_program_describe(step, order_line, &a);
        gd_program_describe(fwd, order_line, &b);
        CHECK(a.n >= 3 && strcmp(a.op[0], "cast") == 0 && strcmp(a.op[1], "cast") == 0 && strcmp(a.op[2], "mul") == 0,
              "training step: first ops %s, %s, %s (want cast, cast, mul)", a.op[0], a.op[1], a.op[2]);
        CHECK(b.n >= 3 && strcmp(b.op[0], "cast") == 0 && strcmp(b.op[1], "mul") == 0 && strcmp(b.op[2], "cast") == 0,
              "forward: first ops %s, %s, %s (want cast, mul, cast)", b.op[0], b.op[1], b.op[2]);
        const float one[8] = {1, 1, 1, 1, 1, 1, 1, 1}, xv[8] = {1, 2, 3, 4, -1, -2, -3, -4};
        float before = 0, after = 0;
        st = gd_tensor_write(w1, one, sizeof one);
        if (st == GD_OK) st = gd_tensor_write(w2, one, sizeof one);
        if (st == GD_OK) st = gd_tensor_write_as(x, GD_F32, xv, sizeof xv);
        if (st == GD_OK) st = gd_program_run(step);
        if (st == GD_OK) st = gd_tensor_read(loss, &before, sizeof before);
        if (st == GD_OK) st = gd_program_run(fwd);
        if (st == GD_OK) st = gd_tensor_read(loss, &after, sizeof after);
        /* the step read w before its update (the loss of all ones: 60); the forward after */
        CHECK(st == GD_OK && before == 60.0f && after < before, "losses %g then %g (want 60, then less): %s", before, after,
              gd_ctx_error(ctx));
    }
    gd_program_free(step);
    gd_program_free(fwd);
    gd_graph_free(g);
}

/* SGD lr 0.1, momentum 0.9, weight decay 0.1, g = (0.5, 2), p0 = (1, -1):
 *   step 1: g' = g + 0.1 p = (0.6, 1.9); buf = g'; p = (0.94, -1.19)
 *   step 2: g' = (0.594, 1.881); buf = 0.9*(0.6, 1.9) + g' = (1.134, 3.591); p = (0.8266, -1.5491)
 * Nesterov uses g' + 0.9 buf instead of buf:
 *   step 1: update (1.14, 3.61); p = (0.886, -1.361)
 *   step 2: g' = (0.5886, 1.8639); buf = (1.1286, 3.5739); update = (1.60434, 5.08041);
 *           p = (0.725566, -1.869041) */
static void test_sgd_steps(int nesterov)
{
    fixed_grad f;
    if (!fixed_grad_build(&f, 2)) return;
    gd_sgd_config cfg = {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1, .nesterov = nesterov};
    CHECK(gd_optimizer_sgd(f.g, &cfg) == GD_OK, "sgd: %s", gd_ctx_error(ctx));
    const float p0[2] = {1, -1}, c[2] = {0.5f, 2};
    float p[2];
    if (fixed_grad_compile(&f, p0, c) && fixed_grad_run(&f, p)) {
        expect_close(nesterov ? "nesterov step 1" : "sgd step 1", p,
                    nesterov ? (const double[]){0.886, -1.361} : (const double[]){0.94, -1.19}, 2, 1e-6);
        if (fixed_grad_run(&f, p))
            expect_close(nesterov ? "nesterov step 2" : "sgd step 2", p,
                        nesterov ? (const double[]){0.725566, -1.869041} : (const double[]){0.8266, -1.5491}, 2, 1e-6);
    }
    fixed_grad_free(&f);
}

/* Plain SGD, lr 1, g = (3, 4): clip_norm 1 scales g by 1/(5 + 1e-6); clip_norm 10 leaves it.
 * Then the learning rate is changed between runs. */
static void test_clip_and_lr(void)
{
    for (int k = 0; k < 2; k++) {
        fixed_grad f;
        if (!fixed_grad_build(&f, 2)) return;
        double clip = k == 0 ? 1.0 : 10.0;
        CHECK(gd_optimizer_sgd(f.g, &(gd_sgd_config){.lr = 1, .clip_norm = clip}) == GD_OK, "sgd: %s", gd_ctx_error(ctx));
        const float p0[2] = {0, 0}, c[2] = {3, 4};
        float p[2];
        if (fixed_grad_compile(&f, p0, c) && fixed_grad_run(&f, p)) {
            double s = k == 0 ? 1.0 / (5 + 1e-6) : 1.0;
            expect_close(k == 0 ? "clipped step" : "unclipped step", p, (const double[]){-3 * s, -4 * s}, 2, 1e-7);
            CHECK(gd_optimizer_set_lr(f.g, 0.5) == GD_OK, "set_lr: %s", gd_ctx_error(ctx));
            if (fixed_grad_run(&f, p))
                expect_close("step after set_lr(0.5)", p, (const double[]){-4.5 * s, -6 * s}, 2, 1e-7);
        }
        fixed_grad_free(&f);
    }
}

/* st must be a failure whose message contains want, and says "negative" only if want does. */
static void refused(gd_status st, const char *what, const char *want)
{
    const char *e = gd_ctx_error(ctx);
    CHECK(st != GD_OK, "%s accepted", what);
    CHECK(strstr(e, want) != NULL, "%s: message '%s' lacks '%s'", what, e, want);
    CHECK(strstr(want, "negative") != NULL || strstr(e, "negative") == NULL, "%s: message '%s' says negative", what, e);
    gd_ctx_clear_error(ctx);
}

static void test_errors(void)
{
    fixed_grad f;
    f.g = gd_graph_new(ctx);
    f.p = gd_param(f.g, "w", GD_F32, 1, (int64_t[]){3});
    f.loss = gd_sum(f.p, 0, NULL, 0);
    gd_ctx_clear_error(ctx);
    CHECK(gd_optimizer_adamw(f.g, &(gd_adamw_config){0}) != GD_OK, "optimizer before gd_backward accepted");
    CHECK(strstr(gd_ctx_error(ctx), "gd_backward") != NULL, "message does not say why: %s", gd_ctx_error(ctx));
    CHECK(gd_optimizer_set_lr(f.g, 0.1) != GD_OK, "set_lr without an optimizer accepted");
    CHECK(gd_backward(f.g, f.loss) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    CHECK(gd_optimizer_adamw(f.g, &(gd_adamw_config){.beta1 = 1.5}) != GD_OK, "beta1 = 1.5 accepted");
    CHECK(gd_optimizer_sgd(f.g, &(gd_sgd_config){.lr = 0.1, .nesterov = 1}) != GD_OK, "nesterov without momentum accepted");
    CHECK(gd_optimizer_sgd(f.g, &(gd_sgd_config){.lr = -1}) != GD_OK, "negative lr accepted");
    /* NaN is not "negative", and an infinite rate is refused like a negative one */
    refused(gd_optimizer_sgd(f.g, &(gd_sgd_config){.lr = NAN}), "sgd lr NaN", "lr is not a number");
    refused(gd_optimizer_sgd(f.g, &(gd_sgd_config){.lr = INFINITY}), "sgd lr inf", "lr = inf is not finite");
    refused(gd_optimizer_sgd(f.g, &(gd_sgd_config){.lr = 1, .momentum = NAN}), "sgd momentum NaN",
            "momentum is not a number");
    refused(gd_optimizer_adamw(f.g, &(gd_adamw_config){.lr = NAN}), "adamw lr NaN", "lr is not a number");
    refused(gd_optimizer_adamw(f.g, &(gd_adamw_config){.lr = INFINITY}), "adamw lr inf", "lr = inf is not finite");
    refused(gd_optimizer_adamw(f.g, &(gd_adamw_config){.eps = INFINITY}), "adamw eps inf", "eps = inf is not finite");
    CHECK(gd_optimizer_adamw(f.g, &(gd_adamw_config){0}) == GD_OK, "adamw with defaults: %s", gd_ctx_error(ctx));
    refused(gd_optimizer_set_lr(f.g, NAN), "set_lr NaN", "gd_optimizer_set_lr: lr is not a number");
    refused(gd_optimizer_set_lr(f.g, INFINITY), "set_lr inf", "lr = inf is not finite");
    refused(gd_optimizer_set_lr(f.g, -INFINITY), "set_lr -inf", "lr = -inf is not finite");
    refused(gd_optimizer_set_lr(f.g, -0.5), "set_lr -0.5", "lr = -0.5 is negative");
    CHECK(gd_optimizer_set_lr(f.g, 0.25) == GD_OK, "set_lr 0.25: %s", gd_ctx_error(ctx));
    gd_ctx_clear_error(ctx);
    CHECK(gd_optimizer_sgd(f.g, &(gd_sgd_config){.lr = 0.1}) != GD_OK, "second optimizer accepted");
    CHECK(strlen(gd_ctx_error(ctx)) > 0, "no message for a second optimizer");
    gd_ctx_clear_error(ctx);
    gd_graph_free(f.g);
}

static void test_assign_and_clip_coef(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *s = gd_state(g, "s", GD_F32, 1, (int64_t[]){3});
    gd_tensor *x = gd_input(g, "x", GD_F32, 1, (int64_t[]){3});
    gd_tensor *y = gd_scale(x, 2, 0);
    CHECK(gd_assign(s, x) != NULL, "assign: %s", gd_ctx_error(ctx));
    const float xv[3] = {1.5f, -2, 7};
    float sv[3];
    gd_tensor_write(x, xv, sizeof xv);
    // without GD_COMPILE_UPDATES the assignment does not run
    gd_program *p = gd_compile(g, 1, &y, 0);
    CHECK(p != NULL && gd_program_run(p) == GD_OK, "run: %s", gd_ctx_error(ctx));
    if (gd_tensor_read(s, sv, sizeof sv) == GD_OK)
        for (int i = 0; i < 3; i++) CHECK(sv[i] == 0, "state written by a program without updates: %g", sv[i]);
    gd_program_free(p);
    p = gd_compile(g, 1, &y, GD_COMPILE_UPDATES);
    CHECK(p != NULL && gd_program_run(p) == GD_OK, "run: %s", gd_ctx_error(ctx));
    if (gd_tensor_read(s, sv, sizeof sv) == GD_OK) CHECK(memcmp(sv, xv, sizeof xv) == 0, "assign did not copy");
    gd_program_free(p);
    gd_ctx_clear_error(ctx);
    CHECK(gd_assign(s, gd_input(g, "z", GD_F32, 1, (int64_t[]){4})) == NULL, "assign of another shape accepted");
    gd_ctx_clear_error(ctx);

    // clip_coef: min(1, max_norm / (norm + 1e-6))
    gd_tensor *norm = gd_input(g, "norm", GD_F32, 0, NULL);
    gd_attr a = gd_attr_f("max_norm", 1.0);
    gd_tensor *coef = gd_op(g, "clip_coef", 1, &norm, 1, &a);
    CHECK(coef != NULL && gd_tensor_ndim(coef) == 0, "clip_coef: %s", gd_ctx_error(ctx));
    p = gd_compile(g, 1, &coef, 0);
    CHECK(p != NULL, "compile: %s", gd_ctx_error(ctx));
    const float norms[3] = {4, 0.5f, 1};
    const double want[3] = {1 / (4 + 1e-6), 1, 1 / (1 + 1e-6)};
    for (int i = 0; p != NULL && i < 3; i++) {
        float cv = -1;
        gd_tensor_write(norm, &norms[i], sizeof(float));
        if (gd_program_run(p) == GD_OK && gd_tensor_read(coef, &cv, sizeof cv) == GD_OK)
            CHECK(fabs(cv - want[i]) < 1e-7, "clip_coef(%g) = %.9g, want %.9g", norms[i], cv, want[i]);
        else CHECK(0, "clip_coef run: %s", gd_ctx_error(ctx));
    }
    gd_program_free(p);
    gd_graph_free(g);
}

/* y = x w^T + b with w = (2, -1, 0.5), b = 0.3, fitted from zero by `adam` or SGD-momentum. */
static void test_linear_regression(int adam)
{
    enum { N = 64, D = 3 };
    static float xs[N * D], ys[N];
    const double w_true[D] = {2, -1, 0.5}, b_true = 0.3;
    for (int i = 0; i < N; i++) {
        double y = b_true;
        for (int j = 0; j < D; j++) {
            xs[i * D + j] = (float)sin(1.3 * i + 0.7 * j + 0.1 * i * j);
            y += w_true[j] * xs[i * D + j];
        }
        ys[i] = (float)y;
    }
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = gd_input(g, "x", GD_F32, 2, (int64_t[]){N, D}), *y = gd_input(g, "y", GD_F32, 2, (int64_t[]){N, 1});
    gd_tensor *w = gd_param(g, "w", GD_F32, 2, (int64_t[]){1, D}), *b = gd_param(g, "b", GD_F32, 1, (int64_t[]){1});
    gd_tensor *loss = gd_mse(gd_linear(x, w, b), y); // (N, 1) against (N, 1)
    gd_status s = loss != NULL ? gd_backward(g, loss) : GD_ERR_INVALID;
    if (s == GD_OK)
        s = adam ? gd_optimizer_adamw(g, &(gd_adamw_config){.lr = 0.05})
                 : gd_optimizer_sgd(g, &(gd_sgd_config){.lr = 0.1, .momentum = 0.9});
    gd_program *p = s == GD_OK ? gd_compile(g, 1, &loss, GD_COMPILE_UPDATES) : NULL;
    CHECK(p != NULL, "regression graph (%s): %s", adam ? "adamw" : "sgd", gd_ctx_error(ctx));
    if (p == NULL) {
        gd_graph_free(g);
        return;
    }
    gd_tensor_write(x, xs, sizeof xs);
    gd_tensor_write(y, ys, sizeof ys);
    float first = 0, last = 0;
    for (int it = 0; it < 600; it++) {
        if (it == 400) gd_optimizer_set_lr(g, adam ? 0.005 : 0.02); // a step schedule
        if (gd_program_run(p) != GD_OK || gd_tensor_read(loss, &last, sizeof last) != GD_OK) {
            CHECK(0, "step %d: %s", it, gd_ctx_error(ctx));
            break;
        }
        if (it == 0) first = last;
        if (!isfinite(last)) {
            CHECK(0, "loss is %g at step %d", last, it);
            break;
        }
    }
    CHECK(first > 1 && last < 1e-5, "%s: loss %g -> %g, want below 1e-5", adam ? "adamw" : "sgd", first, last);
    float wv[D], bv;
    if (gd_tensor_read(w, wv, sizeof wv) == GD_OK && gd_tensor_read(b, &bv, sizeof bv) == GD_OK) {
        for (int j = 0; j < D; j++) CHECK(fabs(wv[j] - w_true[j]) < 1e-2, "w[%d] = %g, want %g", j, wv[j], w_true[j]);
        CHECK(fabs(bv - b_true) < 1e-2, "b = %g, want %g", bv, b_true);
    }
    gd_program_free(p);
    gd_graph_free(g);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    test_adamw_steps();
    test_adamw_clip();
    test_adamw_half_grads();
    test_param_copies_first();
    test_sgd_steps(0);
    test_sgd_steps(1);
    test_clip_and_lr();
    test_errors();
    test_assign_and_clip_coef();
    test_linear_regression(1);
    test_linear_regression(0);
    return tu_finish("test_optim");
}
