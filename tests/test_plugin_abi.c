/* Loading plugins and their failure paths, through the test backend and its misbehaving
 * variants: a plugin of another major version is refused with a message (a 1.x one is
 * pointed at the porting section of docs/plugin-abi.md, which must exist); one whose init
 * fails or finds no device leaves the CPU working; the planner places the device's ops on
 * it and copies everything else across; the graph pass fuses linear+relu, and makes a new
 * value when asked (attention's lse); strict mode names
 * the op that would fall back; a kernel error reaches the caller naming the node, and the
 * process goes on; broken registrations are refused and reported by the sweep.
 * (The ABI's modules have their own test: test_abi_modules.c.) */
#include "program.h"
#include "sweep.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
#define CHECK(c, ...)                                                  \
    do {                                                               \
        if (!(c)) {                                                    \
            printf("FAIL line %d: ", __LINE__);                        \
            printf(__VA_ARGS__);                                       \
            printf("\n");                                              \
            fails++;                                                   \
        }                                                              \
    } while (0)

static const char *plugin(const char *name)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/plugins-test/libgradus_%s.so", GD_BUILD_DIR, name);
    return path;
}

/* 1 when the markdown file has a heading line ending in `title`. */
static int doc_has_heading(const char *path, const char *title)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    char line[512];
    int found = 0;
    size_t tl = strlen(title);
    while (!found && fgets(line, sizeof line, f) != NULL) {
        size_t n = strcspn(line, "\r\n");
        line[n] = '\0';
        found = line[0] == '#' && n >= tl && strcmp(line + n - tl, title) == 0;
    }
    fclose(f);
    return found;
}

/* Log lines the context printed, captured instead of going to stderr. */
typedef struct captured {
    int n;
    char last[1024];
} captured;

static void capture(void *user, const char *line)
{
    captured *c = user;
    c->n++;
    snprintf(c->last, sizeof c->last, "%s", line);
}

/* A causal attention with grouped heads (q 2 x 2 heads x 8 x 8, k and v one head), read as
 * y.transpose(1, 2).reshape(2, 8, 16) into a weighted sum: the gradients of q, k and v
 * (3 x 256 floats after q's 256: gq[0..768)) on `backend`. */
static gd_status attention_grads(gd_ctx *ctx, const char *backend, float *gq, char *placement, size_t cap)
{
    if (gd_ctx_use_backend(ctx, backend) != GD_OK) return GD_ERR_INVALID;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *q = gd_param(g, "q", GD_F32, 4, (int64_t[]){2, 2, 8, 8});
    gd_tensor *k = gd_param(g, "k", GD_F32, 4, (int64_t[]){2, 1, 8, 8});
    gd_tensor *v = gd_param(g, "v", GD_F32, 4, (int64_t[]){2, 1, 8, 8});
    gd_tensor *c = gd_input(g, "c", GD_F32, 3, (int64_t[]){2, 8, 16});
    gd_tensor *y = gd_reshape(gd_transpose(gd_attention(q, k, v, 1, 0.0, NULL), 1, 2), 3, (int64_t[]){2, 8, 16});
    gd_tensor *l = gd_sum(gd_mul(y, c), 0, NULL, 0);
    gd_status st = gd_backward(g, l);
    gd_tensor *t[4] = {gd_grad(g, q), gd_grad(g, k), gd_grad(g, v), l}; /* the loss: the forward runs too */
    gd_program *p = st == GD_OK ? gd_compile(g, 4, t, 0) : NULL;
    if (p == NULL) {
        gd_graph_free(g);
        return st != GD_OK ? st : GD_ERR_INVALID;
    }
    placement[0] = '\0';
    for (int i = 0; i < p->n_pn; i++) {
        if (p->pn[i].view || p->pn[i].dead) continue;
        size_t used = strlen(placement);
        snprintf(placement + used, cap - used, "%s@%s ", p->pn[i].node->op->name, p->pn[i].be->name);
    }
    float cs[2 * 8 * 16];
    for (int i = 0; i < 2 * 8 * 16; i++) cs[i] = cosf((float)i * 0.61f);
    st = gd_graph_init_params(g, 9);
    if (st == GD_OK) st = gd_tensor_write(c, cs, sizeof cs);
    if (st == GD_OK) st = gd_program_run(p);
    if (st == GD_OK) st = gd_tensor_read(t[0], gq, 256 * sizeof(float));
    if (st == GD_OK) st = gd_tensor_read(t[1], gq + 256, 128 * sizeof(float));
    if (st == GD_OK) st = gd_tensor_read(t[2], gq + 384, 128 * sizeof(float));
    gd_program_free(p);
    gd_graph_free(g);
    return st;
}

static gd_ctx *bare_ctx(void)
{
    gd_ctx *ctx = NULL;
    gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1});
    return ctx;
}

/* A two-layer MLP step: linear+relu (fusable), linear, cross-entropy. Returns the loss
 * and writes the gradient of the first weight into gw1 (64*32 floats). */
static gd_status mlp(gd_ctx *ctx, const char *backend, int strict, float *loss, float *gw1, char *placement, size_t cap)
{
    if (backend != NULL && gd_ctx_use_backend(ctx, backend) != GD_OK) return GD_ERR_INVALID;
    ctx->strict = strict;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = gd_input(g, "x", GD_F32, 2, (int64_t[]){16, 32});
    gd_tensor *y = gd_input(g, "y", GD_I64, 1, (int64_t[]){16});
    gd_tensor *h = gd_relu(gd_nn_linear(x, "l1", 64, 1));
    gd_tensor *logits = gd_nn_linear(h, "l2", 10, 1);
    gd_tensor *l = gd_cross_entropy(logits, y, -100);
    gd_status st = gd_backward(g, l);
    if (st != GD_OK) {
        gd_graph_free(g);
        return st;
    }
    gd_tensor *w1 = gd_graph_find(g, "l1.weight");
    gd_tensor *targets[2] = {l, gd_grad(g, w1)};
    gd_program *p = gd_compile(g, 2, targets, 0);
    if (p == NULL) {
        gd_graph_free(g);
        return GD_ERR_STRICT;
    }
    placement[0] = '\0';
    for (int i = 0; i < p->n_pn; i++) {
        if (p->pn[i].view) continue;
        size_t used = strlen(placement);
        snprintf(placement + used, cap - used, "%s@%s ", p->pn[i].node->op->name, p->pn[i].be->name);
    }
    float xs[16 * 32];
    int64_t ys[16];
    for (int i = 0; i < 16 * 32; i++) xs[i] = sinf((float)i * 0.37f);
    for (int i = 0; i < 16; i++) ys[i] = (i * 7) % 10;
    st = gd_graph_init_params(g, 5);
    if (st == GD_OK) st = gd_tensor_write(x, xs, sizeof xs);
    if (st == GD_OK) st = gd_tensor_write(y, ys, sizeof ys);
    if (st == GD_OK) st = gd_program_run(p);
    if (st == GD_OK) st = gd_tensor_read(l, loss, sizeof *loss);
    if (st == GD_OK) st = gd_tensor_read(targets[1], gw1, 64 * 32 * sizeof(float));
    gd_program_free(p);
    gd_graph_free(g);
    return st;
}

int main(void)
{
    /* 1. version mismatch: refused, with a message that says what to do */
    gd_ctx *ctx = bare_ctx();
    gd_status st = gd_plugin_load_file(ctx, plugin("testdev_badabi"));
    CHECK(st == GD_ERR_VERSION, "bad ABI: status %d", st);
    CHECK(strstr(gd_ctx_error(ctx), "ABI") != NULL, "bad ABI message: %s", gd_ctx_error(ctx));
    CHECK(gd_backend_count(ctx) == 1, "bad ABI plugin was added");
    /* a 1.x plugin: refused, and told where the porting guide is */
    st = gd_plugin_load_file(ctx, plugin("testdev_abi1"));
    CHECK(st == GD_ERR_VERSION && strstr(gd_ctx_error(ctx), "ABI 1.2") != NULL &&
          strstr(gd_ctx_error(ctx), "docs/plugin-abi.md") != NULL && strstr(gd_ctx_error(ctx), "Porting a 1.x plugin") != NULL,
          "1.x plugin: %d %s", st, gd_ctx_error(ctx));
    CHECK(gd_backend_count(ctx) == 1, "a 1.x plugin was added");
    CHECK(doc_has_heading(GD_SOURCE_DIR "/docs/plugin-abi.md", "Porting a 1.x plugin"),
          "docs/plugin-abi.md has no heading \"Porting a 1.x plugin\", which the refusal points at");
    /* 2. init failure and 3. no device: declined, CPU unaffected */
    st = gd_plugin_load_file(ctx, plugin("testdev_initfail"));
    CHECK(st == GD_ERR_DEVICE && strstr(gd_ctx_error(ctx), "simulated initialization failure") != NULL,
          "init failure: %d %s", st, gd_ctx_error(ctx));
    st = gd_plugin_load_file(ctx, plugin("testdev_nodevice"));
    CHECK(st == GD_ERR_NODEVICE, "no device: %d", st);
    CHECK(gd_backend_count(ctx) == 1, "a declining plugin was added");
    st = gd_plugin_load_file(ctx, "/nonexistent/libgradus_x.so");
    CHECK(st == GD_ERR_DEVICE && strstr(gd_ctx_error(ctx), "/nonexistent") != NULL, "missing file: %s", gd_ctx_error(ctx));
    float ref_loss, ref_g[64 * 32];
    char where[8192];
    st = mlp(ctx, "ref", 0, &ref_loss, ref_g, where, sizeof where);
    CHECK(st == GD_OK && isfinite(ref_loss), "CPU after failed plugins: %s", gd_ctx_error(ctx));
    gd_ctx_free(ctx);

    /* 4. the test device: placement, copies, fusion, same numbers as the reference */
    ctx = bare_ctx();
    st = gd_plugin_load_file(ctx, plugin("testdev"));
    CHECK(st == GD_OK && gd_backend_count(ctx) == 2, "testdev load: %s", gd_ctx_error(ctx));
    float loss, g1[64 * 32];
    st = mlp(ctx, "testdev", 0, &loss, g1, where, sizeof where);
    CHECK(st == GD_OK, "testdev run: %s", gd_ctx_error(ctx));
    CHECK(strstr(where, "linear_act@testdev") != NULL, "linear+relu not fused onto testdev: %s", where);
    /* a program placed elsewhere is not rewritten by the test device's pass */
    st = mlp(ctx, "ref", 0, &loss, g1, where, sizeof where);
    CHECK(st == GD_OK && strstr(where, "linear_act") == NULL && strstr(where, "relu@ref") != NULL,
          "testdev's pass rewrote a program placed on ref: %s", where);
    st = mlp(ctx, "testdev", 0, &loss, g1, where, sizeof where);
    CHECK(strstr(where, "cross_entropy@ref") != NULL, "cross_entropy did not fall back: %s", where);
    CHECK(fabsf(loss - ref_loss) <= 1e-5f * fabsf(ref_loss), "loss %g vs reference %g", loss, ref_loss);
    double num = 0, den = 0;
    for (int i = 0; i < 64 * 32; i++) num += (g1[i] - ref_g[i]) * (g1[i] - ref_g[i]), den += ref_g[i] * ref_g[i];
    CHECK(num <= 1e-10 * den, "gradient differs from the reference: nmse %g", num / den);
    /* ... and a pass that makes a new value (ABI 2.5): the test device's attention rule
     * gives the forward an lse the backward reads, and y in its transpose's layout; the
     * gradients are the reference's (within f32 rounding: the backward reads y as stored) */
    setenv("GRADUS_TESTDEV_ATTN_LSE", "1", 1);
    float ga[512], gr[512];
    st = attention_grads(ctx, "testdev", ga, where, sizeof where);
    unsetenv("GRADUS_TESTDEV_ATTN_LSE");
    CHECK(st == GD_OK && strstr(where, "attention_lse@") != NULL && strstr(where, "attention_grad_lse@") != NULL &&
              strstr(where, " attention@") == NULL && strstr(where, "copy") == NULL,
          "attention pair not rewritten: %s %s", gd_ctx_error(ctx), where);
    st = attention_grads(ctx, "ref", gr, where, sizeof where);
    CHECK(st == GD_OK && strstr(where, "attention_lse") == NULL, "reference attention: %s %s", gd_ctx_error(ctx), where);
    double an = 0, ad = 0;
    for (int i = 0; i < 512; i++) an += (ga[i] - gr[i]) * (ga[i] - gr[i]), ad += gr[i] * gr[i];
    CHECK(ad > 0 && an <= 1e-10 * ad, "attention_lse gradients differ from the reference: nmse %g", an / ad);
    /* 5. strict mode: the fallback becomes an error naming the op, dtype and shapes */
    st = mlp(ctx, "testdev", 1, &loss, g1, where, sizeof where);
    CHECK(st == GD_ERR_STRICT && strstr(gd_ctx_error(ctx), "strict") != NULL && strstr(gd_ctx_error(ctx), "f32[") != NULL,
          "strict: %d %s", st, gd_ctx_error(ctx));
    gd_ctx_free(ctx);

    /* 6. a kernel failing mid-run: the error reaches the caller naming the node, whether
     * it ran alone (the host names it) or inside an executor segment (the plugin does),
     * and the context lives on */
    for (int executor = 1; executor >= 0; executor--) {
        ctx = bare_ctx();
        st = gd_plugin_load_file(ctx, plugin("testdev_kfail"));
        CHECK(st == GD_OK, "kfail load: %s", gd_ctx_error(ctx));
        gd_graph *g = gd_graph_new(ctx);
        gd_ctx_use_backend(ctx, "testdev");
        gd_tensor *a = gd_input(g, "a", GD_F32, 1, (int64_t[]){8});
        gd_tensor *s = gd_add(gd_add(gd_add(a, a), a), a); /* the third add fails */
        if (!executor) setenv("GRADUS_EXECUTOR", "0", 1);
        gd_program *p = gd_compile(g, 1, &s, 0);
        unsetenv("GRADUS_EXECUTOR");
        CHECK(p != NULL && p->n_segs == executor, "kfail: %d segments", p != NULL ? p->n_segs : -1);
        float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        gd_tensor_write(a, v, sizeof v);
        st = gd_program_run(p);
        CHECK(st == GD_ERR_DEVICE && strstr(gd_ctx_error(ctx), "simulated failure") != NULL &&
              strstr(gd_ctx_error(ctx), "'add#") != NULL, "kernel failure: %d %s", st, gd_ctx_error(ctx));
        st = gd_program_run(p); /* the fourth launch succeeds again */
        float out[8];
        CHECK(st == GD_OK && gd_tensor_read(s, out, sizeof out) == GD_OK && out[7] == 32.0f, "run after failure: %s",
              gd_ctx_error(ctx));
        gd_program_free(p);
        gd_graph_free(g);
        gd_ctx_free(ctx);
    }

    /* 7. broken registrations: refused at load, reported by the sweep as failing */
    ctx = bare_ctx();
    st = gd_plugin_load_file(ctx, plugin("testdev_badreg"));
    CHECK(st == GD_OK, "badreg load: %s", gd_ctx_error(ctx));
    gd_backend *b = ctx->backends[1];
    CHECK(b->duplicate_kernels == 1 && strstr(b->bad_registrations, "duplicate add/f32") != NULL &&
          strstr(b->bad_registrations, "transpose_a") != NULL, "registrations: %s", b->bad_registrations);
    gd_sweep sw;
    st = gd_sweep_run(ctx, "relu", NULL, &sw, NULL, NULL);
    CHECK(st == GD_OK && sw.count[1][GD_V_FAILING] >= 1, "sweep did not flag broken registrations");
    gd_sweep_free(&sw);
    gd_ctx_free(ctx);

    /* 8. a plugin failing before it sets its ABI version: its own message, not "ABI 0.0" */
    ctx = bare_ctx();
    captured log = {0};
    gd_ctx_set_log(ctx, capture, &log);
    st = gd_plugin_load_file(ctx, plugin("testdev_earlyfail"));
    CHECK(st == GD_ERR_DEVICE && strstr(gd_ctx_error(ctx), "simulated failure before the ABI version is set") != NULL &&
              strstr(gd_ctx_error(ctx), "ABI 0.0") == NULL,
          "early failure: %d %s", st, gd_ctx_error(ctx));
    CHECK(ctx->n_notes == 1 && strcmp(ctx->notes[0].state, "failed") == 0, "early failure noted as %s",
          ctx->n_notes ? ctx->notes[0].state : "nothing");
    /* 9. a real failure is logged; declining for lack of a device is not (only noted, for
     * `gradus devices`), yet the caller that asked for the plugin gets the reason */
    CHECK(log.n == 1, "early failure: %d log lines", log.n);
    log.n = 0;
    st = gd_plugin_load_file(ctx, plugin("testdev_nodevice"));
    CHECK(st == GD_ERR_NODEVICE && strstr(gd_ctx_error(ctx), "testdev_nodevice declined") != NULL &&
              strstr(gd_ctx_error(ctx), "no device present") != NULL,
          "no device: %d '%s'", st, gd_ctx_error(ctx));
    CHECK(log.n == 0, "declining plugin logged: %s", log.last);
    gd_ctx_free(ctx);
    /* ... except under the trace switch */
    ctx = NULL;
    gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1, .trace = 1});
    log.n = 0;
    gd_ctx_set_log(ctx, capture, &log);
    st = gd_plugin_load_file(ctx, plugin("testdev_nodevice"));
    CHECK(st == GD_ERR_NODEVICE && log.n == 1 && strstr(log.last, "declined") != NULL, "traced decline: %d lines: %s",
          log.n, log.last);
    gd_ctx_free(ctx);

    printf("plugin ABI: %d failures\n", fails);
    return fails != 0;
}
