/* The llama and GPT-2 families built from awkward configs (odd head counts, grouped-query
 * heads, head_dim not a multiple of 8, QK-norm, tied and untied embeddings, a padded
 * vocabulary): the parameters carry the Hugging Face names and shapes, the logits agree
 * between the reference and the CPU backend, the causal mask holds (changing a later
 * token leaves earlier logits alone), and a few AdamW steps overfit one batch; GPT-2's
 * training step sums the gradients of q, k and v (one projection, split) as one concat.
 * gd_lm_forward_loss (the loss on the padded head, its padding left out by cross_entropy's
 * classes) gives gd_lm_loss's loss and gradients on the sliced logits. */
#include "gradus_lm.h"
#include "testutil.h"

#include "program.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static gd_lm_config llama_cfg(int qk_norm, int tied)
{
    /* 3 heads over 1 kv head, head_dim 6 (not a multiple of 8), vocab 37 */
    gd_lm_config c = {.arch = GD_LM_LLAMA, .dim = 18, .n_layers = 2, .n_heads = 3, .n_kv_heads = 1, .head_dim = 6,
                      .hidden_dim = 20, .vocab_size = 37, .vocab_padded = 37, .max_seq = 16, .rope_theta = 10000,
                      .norm_eps = 1e-5, .qk_norm = qk_norm, .tied_embeddings = tied};
    return c;
}

static gd_lm_config gpt2_cfg(void)
{
    gd_lm_config c = {.arch = GD_LM_GPT2, .dim = 15, .n_layers = 2, .n_heads = 3, .n_kv_heads = 3, .head_dim = 5,
                      .hidden_dim = 60, .vocab_size = 29, .vocab_padded = 32, .max_seq = 12, .norm_eps = 1e-5,
                      .tied_embeddings = 1};
    return c;
}

enum { B = 2, T = 7 };

static void fill_ids(int32_t *ids, int n, int vocab, int seed)
{
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 7 + seed * 13 + (i * i) % 5) % vocab);
}

/* logits of one config on backend `be`, parameters from seed 11 */
static int logits_on(const gd_lm_config *cfg, const char *be, const int32_t *ids, float *out)
{
    if (gd_ctx_use_backend(ctx, be) != GD_OK) return 0;
    gd_graph *g = fresh();
    gd_tensor *x = gd_input(g, "ids", GD_I32, 2, (int64_t[]){B, T});
    gd_tensor *logits = gd_lm_forward(g, cfg, x, NULL, GD_F32);
    CHECK(logits != NULL, "forward on %s: %s", be, gd_ctx_error(ctx));
    int ok = logits != NULL && gd_graph_init_params(g, 11) == GD_OK &&
             gd_tensor_write(x, ids, sizeof(int32_t) * B * T) == GD_OK;
    gd_program *p = ok ? gd_compile(g, 1, &logits, 0) : NULL;
    ok = ok && p != NULL && gd_program_run(p) == GD_OK &&
         gd_tensor_read(logits, out, sizeof(float) * B * T * (size_t)cfg->vocab_size) == GD_OK;
    CHECK(ok, "logits on %s: %s", be, gd_ctx_error(ctx));
    gd_program_free(p);
    gd_graph_free(g);
    return ok;
}

static void names_and_shapes(void)
{
    gd_lm_config c = llama_cfg(1, 0);
    gd_graph *g = fresh();
    gd_tensor *x = gd_input(g, "ids", GD_I32, 2, (int64_t[]){B, T});
    CHECK(gd_lm_forward(g, &c, x, NULL, GD_F32) != NULL, "llama: %s", gd_ctx_error(ctx));
    static const struct {
        const char *name;
        int64_t d0, d1;
    } want[] = {{"model.embed_tokens.weight", 37, 18}, {"model.layers.1.self_attn.q_proj.weight", 18, 18},
                {"model.layers.0.self_attn.k_proj.weight", 6, 18}, {"model.layers.0.self_attn.q_norm.weight", 6, 0},
                {"model.layers.1.mlp.down_proj.weight", 18, 20}, {"model.norm.weight", 18, 0},
                {"lm_head.weight", 37, 18}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        gd_tensor *p = gd_graph_find(g, want[i].name);
        CHECK(p != NULL && gd_tensor_dim(p, 0) == want[i].d0 && (want[i].d1 == 0 || gd_tensor_dim(p, 1) == want[i].d1),
              "llama parameter %s", want[i].name);
    }
    /* embeddings; per layer 2 norms, 4 projections, 2 QK norms, 3 MLP projections; final norm, head */
    CHECK(gd_graph_param_count(g) == 1 + 2 * 11 + 2, "llama has %d parameters", gd_graph_param_count(g));
    gd_graph_free(g);

    gd_lm_config c2 = gpt2_cfg();
    g = fresh();
    x = gd_input(g, "ids", GD_I32, 2, (int64_t[]){B, T});
    gd_tensor *logits = gd_lm_forward(g, &c2, x, NULL, GD_F32);
    CHECK(logits != NULL && gd_tensor_dim(logits, 2) == 29, "gpt2 logits cut to the vocabulary: %s", gd_ctx_error(ctx));
    gd_tensor *attn = gd_graph_find(g, "transformer.h.0.attn.c_attn.weight");
    CHECK(attn != NULL && gd_tensor_dim(attn, 0) == 15 && gd_tensor_dim(attn, 1) == 45, "Conv1D layout (in, out)");
    CHECK(gd_graph_find(g, "transformer.wte.weight") != NULL && gd_tensor_dim(gd_graph_find(g, "transformer.wte.weight"), 0) == 32,
          "padded embedding rows");
    CHECK(gd_graph_find(g, "lm_head.weight") == NULL, "gpt2 ties its output to wte");
    gd_graph_free(g);

    gd_lm_config bad = llama_cfg(0, 1);
    bad.head_dim = 0;
    g = fresh();
    x = gd_input(g, "ids", GD_I32, 2, (int64_t[]){B, T});
    CHECK(gd_lm_forward(g, &bad, x, NULL, GD_F32) == NULL && strstr(gd_ctx_error(ctx), "checked") != NULL,
          "an unchecked config is refused: %s", gd_ctx_error(ctx));
    gd_graph_free(g);
}

static void backends_agree(void)
{
    gd_lm_config cfgs[3] = {llama_cfg(1, 0), llama_cfg(0, 1), gpt2_cfg()};
    for (int i = 0; i < 3; i++) {
        int32_t ids[B * T];
        fill_ids(ids, B * T, (int)cfgs[i].vocab_size, i);
        size_t n = (size_t)B * T * (size_t)cfgs[i].vocab_size;
        float *r = malloc(sizeof(float) * n * 3), *c = r + n, *r2 = c + n;
        if (logits_on(&cfgs[i], "ref", ids, r) && logits_on(&cfgs[i], "cpu", ids, c)) {
            double num = 0, den = 0;
            for (size_t k = 0; k < n; k++) num += (r[k] - c[k]) * (r[k] - c[k]), den += r[k] * r[k];
            CHECK(num <= 1e-8 * den, "config %d: cpu logits differ from the reference, nmse %g", i, num / den);
            /* causal: a change in the last token of each row leaves the earlier positions alone */
            ids[T - 1] = (ids[T - 1] + 1) % (int32_t)cfgs[i].vocab_size;
            ids[2 * T - 1] = (ids[2 * T - 1] + 3) % (int32_t)cfgs[i].vocab_size;
            if (logits_on(&cfgs[i], "ref", ids, r2)) {
                int64_t V = cfgs[i].vocab_size, same = 1, changed = 0;
                for (int b = 0; b < B; b++)
                    for (int t = 0; t < T; t++)
                        for (int64_t v = 0; v < V; v++) {
                            size_t k = ((size_t)b * T + (size_t)t) * (size_t)V + (size_t)v;
                            if (t < T - 1) same &= r[k] == r2[k];
                            else changed |= r[k] != r2[k];
                        }
                CHECK(same && changed, "config %d: causal mask (earlier positions same %d, last changed %d)", i,
                      (int)same, (int)changed);
            }
        }
        free(r);
    }
    gd_ctx_use_backend(ctx, "ref");
}

static void overfits(void)
{
    gd_lm_config cfgs[2] = {llama_cfg(1, 1), gpt2_cfg()};
    for (int i = 0; i < 2; i++) {
        gd_ctx_use_backend(ctx, "cpu");
        gd_graph *g = fresh();
        gd_tensor *x = gd_input(g, "ids", GD_I32, 2, (int64_t[]){B, T});
        gd_tensor *y = gd_input(g, "targets", GD_I32, 2, (int64_t[]){B, T});
        gd_tensor *loss = gd_lm_forward_loss(g, &cfgs[i], x, y, GD_F32, GD_LM_FLOAT);
        gd_status st = loss != NULL ? gd_backward(g, loss) : GD_ERR_INVALID;
        if (st == GD_OK) st = gd_optimizer_adamw(g, &(gd_adamw_config){.lr = 1e-2});
        gd_program *p = st == GD_OK ? gd_compile(g, 1, &loss, GD_COMPILE_UPDATES) : NULL;
        CHECK(p != NULL, "config %d training step: %s", i, gd_ctx_error(ctx));
        if (p == NULL) {
            gd_graph_free(g);
            continue;
        }
        // no slice_grad: the padded vocabulary is left out by the loss, not sliced off; GPT-2's
        // q, k and v, split from one projection, get one concat per layer
        int slice_grads = 0, concats = 0;
        for (int k = 0; k < p->n_pn; k++) {
            slice_grads += !p->pn[k].dead && strcmp(p->pn[k].node->op->name, "slice_grad") == 0;
            concats += !p->pn[k].dead && strcmp(p->pn[k].node->op->name, "concat") == 0;
        }
        CHECK(slice_grads == 0, "config %d training step: %d slice_grad nodes, want none", i, slice_grads);
        if (cfgs[i].arch == GD_LM_GPT2)
            CHECK(concats == cfgs[i].n_layers, "GPT-2 training step: %d concat nodes, want one per layer (%d)",
                  concats, (int)cfgs[i].n_layers);
        int32_t ids[B * T], tg[B * T];
        fill_ids(ids, B * T, (int)cfgs[i].vocab_size, 5);
        for (int k = 0; k < B * T; k++) tg[k] = (ids[k] * 3 + 1) % (int32_t)cfgs[i].vocab_size;
        gd_graph_init_params(g, 3);
        gd_tensor_write(x, ids, sizeof ids);
        gd_tensor_write(y, tg, sizeof tg);
        float first = 0, last = 0;
        for (int s = 0; s < 60; s++) {
            float l;
            if (gd_program_run(p) != GD_OK || gd_tensor_read(loss, &l, sizeof l) != GD_OK) {
                CHECK(0, "step %d: %s", s, gd_ctx_error(ctx));
                break;
            }
            if (s == 0) first = l;
            last = l;
        }
        CHECK(first > 3.0f && last < 0.25f * first, "config %d: loss %g -> %g after 60 steps", i, first, last);
        gd_program_free(p);
        gd_graph_free(g);
    }
    gd_ctx_use_backend(ctx, "ref");
}

/* Loss and every parameter's gradient of one batch on backend `be`, through the sliced
 * logits (gd_lm_loss) or the padded ones (gd_lm_forward_loss); out holds 1 + the
 * parameters' sizes floats. Returns the count written, 0 on failure. */
static size_t loss_and_grads(const gd_lm_config *cfg, const char *be, int padded, const int32_t *ids,
                             const int32_t *tg, float *out, size_t cap)
{
    if (gd_ctx_use_backend(ctx, be) != GD_OK) return 0;
    gd_graph *g = fresh();
    gd_tensor *x = gd_input(g, "ids", GD_I32, 2, (int64_t[]){B, T});
    gd_tensor *y = gd_input(g, "targets", GD_I32, 2, (int64_t[]){B, T});
    gd_tensor *loss = padded ? gd_lm_forward_loss(g, cfg, x, y, GD_F32, GD_LM_FLOAT)
                             : gd_lm_loss(gd_lm_forward(g, cfg, x, NULL, GD_F32), y);
    int ok = loss != NULL && gd_backward(g, loss) == GD_OK && gd_graph_init_params(g, 7) == GD_OK &&
             gd_tensor_write(x, ids, sizeof(int32_t) * B * T) == GD_OK &&
             gd_tensor_write(y, tg, sizeof(int32_t) * B * T) == GD_OK;
    int np = ok ? gd_graph_param_count(g) : 0;
    gd_tensor *want[64] = {loss};
    for (int i = 0; ok && i < np && i + 1 < 64; i++) ok = (want[i + 1] = gd_grad(g, gd_graph_param(g, i))) != NULL;
    ok = ok && np + 1 < 64;
    gd_program *p = ok ? gd_compile(g, np + 1, want, 0) : NULL;
    ok = p != NULL && gd_program_run(p) == GD_OK;
    size_t n = 0;
    for (int i = 0; ok && i <= np; i++) {
        size_t k = (size_t)gd_tensor_numel(want[i]);
        ok = n + k <= cap && gd_tensor_read(want[i], out + n, sizeof(float) * k) == GD_OK;
        n += k;
    }
    CHECK(ok, "%s loss and gradients on %s: %s", padded ? "padded" : "sliced", be, gd_ctx_error(ctx));
    gd_program_free(p);
    gd_graph_free(g);
    return ok ? n : 0;
}

/* A GPT-2 training step's loss and gradients do not depend on whether the loss reads the
 * sliced or the padded logits. */
static void padded_loss(void)
{
    gd_lm_config c = gpt2_cfg();
    int32_t ids[B * T], tg[B * T];
    fill_ids(ids, B * T, (int)c.vocab_size, 2);
    for (int k = 0; k < B * T; k++) tg[k] = (ids[k] * 5 + 3) % (int32_t)c.vocab_size;
    tg[4] = -1; /* ignored, as gd_lm_loss ignores -1 */
    tg[9] = (int32_t)c.vocab_size - 1; /* the last class, beside the padding */
    enum { CAP = 1 << 16 };
    float *a = malloc(sizeof(float) * CAP * 2), *b = a + CAP;
    const char *bes[2] = {"ref", "cpu"};
    for (int i = 0; i < 2 && a != NULL; i++) {
        size_t na = loss_and_grads(&c, bes[i], 0, ids, tg, a, CAP), nb = loss_and_grads(&c, bes[i], 1, ids, tg, b, CAP);
        CHECK(na > 1 && na == nb, "%s: %zu values sliced, %zu padded", bes[i], na, nb);
        if (na <= 1 || na != nb) continue;
        CHECK(a[0] > 3.0f && fabsf(a[0] - b[0]) <= 1e-6f * a[0], "%s: loss %.9g sliced, %.9g padded", bes[i], a[0], b[0]);
        double num = 0, den = 0;
        for (size_t k = 1; k < na; k++) num += (a[k] - b[k]) * (double)(a[k] - b[k]), den += a[k] * (double)a[k];
        CHECK(den > 0 && num <= 1e-12 * den, "%s: gradients differ, nmse %g", bes[i], num / den);
        printf("%s: loss %.9g sliced, %.9g padded; gradients nmse %g over %zu values\n", bes[i], a[0], b[0],
               den > 0 ? num / den : -1.0, na - 1);
    }
    free(a);
    gd_ctx_use_backend(ctx, "ref");
}

int main(void)
{
    gd_status s = gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .plugin_path = ""});
    if (s != GD_OK) return 1;
    gd_ctx_use_backend(ctx, "ref");
    names_and_shapes();
    backends_agree();
    overfits();
    padded_loss();
    return tu_finish("test_lm_model");
}
