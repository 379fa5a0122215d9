/* test_lm_engine.c — the inference engine (KV cache) against recomputing the window:
 * for a llama-family model with grouped kv heads and a GPT-2 model, both randomly
 * initialized and saved as checkpoints,
 *   - the logits after a prompt prefilled in chunks (two whole chunks and a tail of single
 *     steps) and after ten decode steps match those of a full forward pass over the same
 *     tokens;
 *   - greedy generation gives the same tokens with and without the cache, and the same on
 *     the reference, the fast CPU backend and the test device (host memory behind copies);
 *   - sampling with a seed gives the same tokens with and without the cache;
 *   - decoding with the steps chained on the backend gives the tokens of step-by-step
 *     decoding, in a batch, greedy and sampled, also when a stop cuts it short (and on
 *     CUDA where there is a device);
 *   - misuse is refused with a message: a step before any prompt, a prompt longer than the
 *     cache, a token outside the vocabulary.
 */
#include "gradus_lm.h"
#include "testdev_util.h"

#include <stdlib.h>
#include <unistd.h>

#define CHUNK 16
#define PROMPT 37 /* two chunks of 16 and 5 single steps */

static char dirs[2][256];

/* A model of `cfg` with parameters drawn from `seed`, saved under dir. */
static int save_model(gd_lm_config *cfg, const char *dir, uint64_t seed)
{
    gd_graph *g = fresh();
    gd_tensor *ids = gd_input(g, "ids", GD_I32, 2, (int64_t[]){1, 4});
    gd_tensor *logits = gd_lm_forward(g, cfg, ids, NULL, GD_F32);
    gd_lm_state st = {.step = 1, .seed = seed};
    int ok = logits != NULL && gd_graph_init_params(g, seed) == GD_OK &&
             gd_lm_checkpoint_save(ctx, g, cfg, NULL, &st, dir, NULL, 0) == GD_OK;
    CHECK(ok, "saving a model: %s", gd_ctx_error(ctx));
    gd_graph_free(g);
    return ok;
}

/* The logits at every position of ids (n of them), recomputed by one forward pass. */
static float *full_logits(gd_ctx *c, const char *dir, const gd_lm_config *cfg, const int32_t *ids, int64_t n)
{
    gd_graph *g = gd_graph_new(c);
    gd_tensor *x = gd_input(g, "ids", GD_I32, 2, (int64_t[]){1, n});
    gd_tensor *logits = gd_lm_forward(g, cfg, x, NULL, GD_F32);
    float *out = malloc(sizeof(float) * (size_t)(n * cfg->vocab_size));
    gd_program *p = NULL;
    int ok = logits != NULL && out != NULL && gd_lm_checkpoint_load(c, g, cfg, dir, 0, NULL) == GD_OK &&
             (p = gd_compile(g, 1, &logits, 0)) != NULL && gd_tensor_write(x, ids, sizeof *ids * (size_t)n) == GD_OK &&
             gd_program_run(p) == GD_OK &&
             gd_tensor_read(logits, out, sizeof(float) * (size_t)(n * cfg->vocab_size)) == GD_OK;
    CHECK(ok, "full forward pass: %s", gd_ctx_error(c));
    gd_program_free(p);
    gd_graph_free(g);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

static double nmse(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d, den += (double)b[i] * b[i];
    }
    return num / den;
}

static void prompt_of(int32_t *ids, int64_t n, int64_t vocab, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((seed * 2654435761u + (uint64_t)i * 40503u) % (uint64_t)vocab);
}

/* Engine logits after the prompt and after 10 greedy steps against full forward passes. */
static void check_logits(gd_ctx *c, const char *dir, const char *what)
{
    gd_lm_engine *e = NULL;
    gd_lm_engine_config ec = {.chunk = CHUNK};
    CHECK(gd_lm_engine_open(c, dir, &ec, &e) == GD_OK, "%s: engine: %s", what, gd_ctx_error(c));
    if (e == NULL) return;
    const gd_lm_config *cfg = gd_lm_engine_model(e);
    int64_t V = cfg->vocab_size;
    int32_t ids[PROMPT + 10];
    prompt_of(ids, PROMPT, V, 7);
    const float *lg = NULL;
    CHECK(gd_lm_engine_prefill(e, ids, PROMPT, &lg) == GD_OK, "%s: prefill: %s", what, gd_ctx_error(c));
    float *after_prompt = malloc(sizeof(float) * (size_t)V);
    if (lg != NULL) memcpy(after_prompt, lg, sizeof(float) * (size_t)V);
    int64_t n = PROMPT;
    for (int i = 0; lg != NULL && i < 10; i++) {
        int32_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (lg[v] > lg[best]) best = (int32_t)v;
        ids[n++] = best;
        CHECK(gd_lm_engine_step(e, best, &lg) == GD_OK, "%s: step %d: %s", what, i, gd_ctx_error(c));
    }
    CHECK(gd_lm_engine_length(e) == PROMPT + 10, "%s: length %lld", what, (long long)gd_lm_engine_length(e));
    float *full = full_logits(c, dir, cfg, ids, n);
    if (full != NULL && lg != NULL) {
        double a = nmse(after_prompt, full + (PROMPT - 1) * V, V), b = nmse(lg, full + (n - 1) * V, V);
        printf("%s: logits after the prompt NMSE %.2e, after 10 steps %.2e (against a full forward pass)\n", what, a, b);
        CHECK(a < 1e-10 && b < 1e-10, "%s: cached logits differ from the full pass: NMSE %.3g, %.3g", what, a, b);
    }
    /* a second sequence on the same engine starts afresh */
    CHECK(gd_lm_engine_prefill(e, ids, PROMPT, &lg) == GD_OK && lg != NULL &&
              nmse(lg, after_prompt, V) < 1e-12,
          "%s: a second prefill of the same prompt gives other logits", what);
    free(full);
    free(after_prompt);
    gd_lm_engine_free(e);
}

/* The tokens gd_lm_generate makes, with or without the cache, with quantized weights or not. */
static int32_t *generate_q(gd_ctx *c, const char *dir, int recompute, double temperature, gd_lm_quant q, int64_t *n)
{
    int32_t prompt[PROMPT];
    prompt_of(prompt, PROMPT, 300, 3);
    gd_lm_generate_config gc = {.max_tokens = 24, .sample = {.temperature = temperature, .top_k = 20, .seed = 5},
                                .recompute = recompute, .quantize = q};
    int32_t *out = NULL;
    CHECK(gd_lm_generate(c, dir, prompt, PROMPT, &gc, &out, n) == GD_OK, "generate (recompute %d): %s", recompute,
          gd_ctx_error(c));
    return out;
}

static int32_t *generate(gd_ctx *c, const char *dir, int recompute, double temperature, int64_t *n)
{
    return generate_q(c, dir, recompute, temperature, GD_LM_FLOAT, n);
}

static int same_tokens(const int32_t *a, int64_t na, const int32_t *b, int64_t nb)
{
    return a != NULL && b != NULL && na == nb && memcmp(a, b, sizeof *a * (size_t)na) == 0;
}

/* A batch of three sequences with prompts of different lengths, decoded together (one of
 * them idle for a while): each sequence's logits and sampled tokens equal those of the
 * same sequence decoded alone, on backend c. */
/* The batch tests' three prompts, of different lengths, drawn from `seed`. */
enum { NB = 3 };
static const int64_t plen[NB] = {5, 12, 9};
static void batch_prompts(int32_t prompt[NB][12], const int32_t *pp[NB], uint64_t seed)
{
    for (int b = 0; b < NB; b++) prompt_of(prompt[b], plen[b], 300, seed + (uint64_t)b), pp[b] = prompt[b];
}

static void check_batch(gd_ctx *c, const char *dir, const char *what)
{
    enum { STEPS = 8 };
    int32_t prompt[NB][12];
    const int32_t *pp[NB];
    batch_prompts(prompt, pp, 20);
    gd_lm_engine *eb = NULL, *e1 = NULL;
    gd_lm_engine_config cb = {.batch = NB, .max_len = 40};
    gd_lm_engine_config c1 = {.max_len = 40};
    CHECK(gd_lm_engine_open(c, dir, &cb, &eb) == GD_OK && gd_lm_engine_open(c, dir, &c1, &e1) == GD_OK,
          "%s: batch engine: %s", what, gd_ctx_error(c));
    if (eb == NULL || e1 == NULL) {
        gd_lm_engine_free(eb), gd_lm_engine_free(e1);
        return;
    }
    const float *lb = NULL;
    CHECK(gd_lm_engine_prefill_batch(eb, pp, plen, &lb) == GD_OK, "%s: batch prefill: %s", what, gd_ctx_error(c));
    /* greedy tokens, sequence 1 idle at steps 2..4 */
    int32_t toks[STEPS][NB];
    double worst = 0;
    int64_t V = 300;
    float *rows = malloc(sizeof(float) * (size_t)(NB * V * (STEPS + 1)));
    for (int i = 0; lb != NULL && rows != NULL && i <= STEPS; i++) {
        memcpy(rows + (size_t)i * NB * V, lb, sizeof(float) * (size_t)(NB * V));
        if (i == STEPS) break;
        for (int b = 0; b < NB; b++) {
            int64_t best = 0;
            for (int64_t v = 1; v < V; v++)
                if (lb[b * V + v] > lb[b * V + best]) best = v;
            toks[i][b] = b == 1 && i >= 2 && i <= 4 ? -1 : (int32_t)best;
        }
        if (gd_lm_engine_step_batch(eb, toks[i], &lb) != GD_OK) {
            CHECK(0, "%s: batch step %d: %s", what, i, gd_ctx_error(c));
            lb = NULL;
        }
    }
    for (int b = 0; lb != NULL && b < NB; b++) {
        const float *l1 = NULL;
        CHECK(gd_lm_engine_prefill(e1, prompt[b], plen[b], &l1) == GD_OK, "%s: prefill %d: %s", what, b, gd_ctx_error(c));
        for (int i = 0; l1 != NULL && i <= STEPS; i++) {
            const float *want = l1, *got = rows + ((size_t)i * NB + (size_t)b) * (size_t)V;
            double err = nmse(want, got, V);
            if (err > worst) worst = err;
            if (i == STEPS) break;
            if (toks[i][b] >= 0 && gd_lm_engine_step(e1, toks[i][b], &l1) != GD_OK) l1 = NULL;
        }
    }
    CHECK(gd_lm_engine_length_of(eb, 1) == 12 + STEPS - 3 && gd_lm_engine_length_of(eb, 0) == 5 + STEPS,
          "%s: batch lengths %lld, %lld", what, (long long)gd_lm_engine_length_of(eb, 0),
          (long long)gd_lm_engine_length_of(eb, 1));
    printf("%s: a batch of 3 (prompts of 5, 12 and 9 tokens, one idle for 3 steps) against each alone: "
           "worst logits NMSE %.2e over %d steps\n", what, worst, STEPS);
    CHECK(worst <= 1e-10, "%s: batched logits differ from single-sequence ones: NMSE %.2e", what, worst);
    /* sampled on the backend: the tokens the host sampler picks from the batch's logits,
     * sequence b drawing from its own stream (b * 2^40 on); sequence 0 as one alone */
    gd_sample_config sc = {.temperature = 0.9, .top_k = 30, .seed = 4};
    int32_t next[NB], cur[NB], want[NB], one[STEPS], all[STEPS][NB];
    void *scratch = malloc(gd_lm_sample_scratch(V));
    gd_lm_engine *eh = NULL;
    const float *lh = NULL;
    int same = scratch != NULL && gd_lm_engine_open(c, dir, &cb, &eh) == GD_OK &&
               gd_lm_engine_prefill_batch(eb, pp, plen, &lb) == GD_OK &&
               gd_lm_engine_prefill_batch(eh, pp, plen, &lh) == GD_OK;
    for (int b = 0; same && b < NB; b++) cur[b] = gd_lm_sample(lb + b * V, V, &sc, (uint64_t)plen[b], scratch);
    for (int i = 0; same && i < STEPS; i++) {
        same = gd_lm_engine_next_batch(eb, cur, &sc, next) == GD_OK && gd_lm_engine_step_batch(eh, cur, &lh) == GD_OK;
        for (int b = 0; same && b < NB; b++) {
            uint64_t draw = (uint64_t)gd_lm_engine_length_of(eh, b) + ((uint64_t)b << 40);
            want[b] = gd_lm_sample(lh + b * V, V, &sc, draw, scratch);
            same = want[b] == next[b];
        }
        memcpy(all[i], next, sizeof next);
        memcpy(cur, next, sizeof next);
    }
    CHECK(same, "%s: tokens sampled in a batch differ from the host sampler's on its logits: %s", what,
          gd_ctx_error(c));
    const float *l1 = NULL;
    if (same && gd_lm_engine_prefill(e1, prompt[0], plen[0], &l1) == GD_OK) {
        int32_t t = gd_lm_sample(l1, V, &sc, (uint64_t)plen[0], scratch);
        for (int i = 0; i < STEPS && gd_lm_engine_next(e1, t, &sc, &t) == GD_OK; i++) one[i] = t;
        for (int i = 0; i < STEPS; i++) same &= one[i] == all[i][0];
        CHECK(same, "%s: sequence 0 of a batch samples other tokens than alone", what);
    }
    free(scratch);
    gd_lm_engine_free(eh);
    int32_t bad[NB] = {1, 2, 300};
    CHECK(gd_lm_engine_step_batch(eb, bad, &lb) != GD_OK && strstr(gd_ctx_error(c), "id 300") != NULL,
          "%s: a bad id in a batch: %s", what, gd_ctx_error(c));
    CHECK(gd_lm_engine_step(eb, 1, &lb) != GD_OK && strstr(gd_ctx_error(c), "gd_lm_engine_step_batch") != NULL,
          "%s: the single-sequence call on a batch: %s", what, gd_ctx_error(c));
    free(rows);
    gd_lm_engine_free(eb);
    gd_lm_engine_free(e1);
}

/* gd_lm_engine_decode, the steps chained on the backend: the tokens of a batch equal those of
 * gd_lm_engine_next_batch step by step (greedy and sampled, across the bursts in which the
 * steps are queued); a stop from the callback counts only the steps handed out, and
 * decoding on from there gives the uninterrupted run's tokens. */
typedef struct collect {
    int32_t (*toks)[NB];
    int n, stop_at;
} collect;

static int collect_step(void *user, const int32_t *next)
{
    collect *k = user;
    memcpy(k->toks[k->n], next, sizeof k->toks[0]);
    return ++k->n == k->stop_at;
}

static void check_decode(gd_ctx *c, const char *dir, const char *what)
{
    enum { STEPS = 30 };
    int32_t prompt[NB][12];
    const int32_t *pp[NB];
    batch_prompts(prompt, pp, 40);
    gd_lm_engine *e = NULL;
    gd_lm_engine_config cb = {.batch = NB, .max_len = 48};
    CHECK(gd_lm_engine_open(c, dir, &cb, &e) == GD_OK, "%s: decode engine: %s", what, gd_ctx_error(c));
    if (e == NULL) return;
    const gd_sample_config settings[2] = {{.temperature = 0}, {.temperature = 0.9, .top_k = 30, .seed = 4}};
    void *scratch = malloc(gd_lm_sample_scratch(300));
    for (int s = 0; s < 2 && scratch != NULL; s++) {
        const gd_sample_config *sc = &settings[s];
        int32_t first[NB], cur[NB], want[STEPS][NB], got[STEPS][NB];
        const float *lg = NULL;
        int ok = gd_lm_engine_prefill_batch(e, pp, plen, &lg) == GD_OK;
        for (int b = 0; ok && b < NB; b++)
            first[b] = gd_lm_sample(lg + b * 300, 300, sc, (uint64_t)plen[b] + ((uint64_t)b << 40), scratch);
        memcpy(cur, first, sizeof cur);
        for (int i = 0; ok && i < STEPS; i++) {
            ok = gd_lm_engine_next_batch(e, cur, sc, want[i]) == GD_OK;
            memcpy(cur, want[i], sizeof cur);
        }
        /* uninterrupted */
        collect k = {.toks = got, .stop_at = -1};
        ok = ok && gd_lm_engine_prefill_batch(e, pp, plen, &lg) == GD_OK &&
             gd_lm_engine_decode(e, first, sc, STEPS, collect_step, &k) == GD_OK;
        CHECK(ok && k.n == STEPS && memcmp(got, want, sizeof want) == 0,
              "%s: decode (temperature %g): %d steps, tokens %s those of step by step: %s", what, sc->temperature, k.n,
              ok && memcmp(got, want, sizeof want) == 0 ? "equal to" : "differ from", gd_ctx_error(c));
        CHECK(gd_lm_engine_length_of(e, 0) == 5 + STEPS && gd_lm_engine_length_of(e, 1) == 12 + STEPS,
              "%s: lengths after decoding %lld, %lld", what, (long long)gd_lm_engine_length_of(e, 0),
              (long long)gd_lm_engine_length_of(e, 1));
        /* stopped inside the second burst, then on from there */
        memset(got, 0, sizeof got);
        k = (collect){.toks = got, .stop_at = 6};
        ok = ok && gd_lm_engine_prefill_batch(e, pp, plen, &lg) == GD_OK &&
             gd_lm_engine_decode(e, first, sc, STEPS, collect_step, &k) == GD_OK;
        CHECK(ok && k.n == 6 && gd_lm_engine_length_of(e, 2) == 9 + 6, "%s: a stop after 6 steps: %d steps, length %lld",
              what, k.n, (long long)gd_lm_engine_length_of(e, 2));
        collect rest = {.toks = got + 6, .stop_at = -1};
        ok = ok && gd_lm_engine_decode(e, got[5], sc, STEPS - 6, collect_step, &rest) == GD_OK;
        CHECK(ok && rest.n == STEPS - 6 && memcmp(got, want, sizeof want) == 0,
              "%s: decoding on after a stop (temperature %g) gives other tokens: %s", what, sc->temperature,
              gd_ctx_error(c));
        if (s == 1 && ok) printf("%s: %d decode steps chained on the backend, a batch of 3, greedy and sampled: the "
                                 "tokens of step-by-step decoding, also across a stop\n", what, STEPS);
    }
    free(scratch);
    int32_t ids[NB] = {1, 2, 3};
    CHECK(gd_lm_engine_decode(e, ids, &settings[0], 48, collect_step, &(collect){0}) != GD_OK &&
              strstr(gd_ctx_error(c), "do not fit") != NULL,
          "%s: decoding past the cache: %s", what, gd_ctx_error(c));
    CHECK(gd_lm_engine_decode(e, NULL, &settings[0], 1, collect_step, NULL) == GD_ERR_INVALID &&
              gd_lm_engine_decode(e, ids, &settings[0], 1, NULL, NULL) == GD_ERR_INVALID &&
              gd_lm_engine_decode(NULL, ids, &settings[0], 1, collect_step, NULL) == GD_ERR_INVALID &&
              gd_decode_advance(NULL, NULL, NULL, NULL, NULL, NULL) == GD_ERR_INVALID,
          "%s: NULL arguments to the chained decode", what);
    gd_lm_engine_free(e);
}

/* A context on the CUDA backend where this machine has one; NULL otherwise. */
static gd_ctx *cuda_ctx(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/plugins/libgradus_cuda.so", GD_BUILD_DIR);
    gd_ctx *c = NULL;
    if (access(path, R_OK) != 0 || gd_ctx_create(&c, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .plugin_path = ""}) != GD_OK)
        return NULL;
    if (gd_plugin_load_file(c, path) != GD_OK || gd_ctx_use_backend(c, "cuda") != GD_OK) {
        gd_ctx_free(c);
        return NULL;
    }
    return c;
}

/* int8 weights and W8A8: the engine's tokens equal recomputation's (the cache is exact
 * for quantized projections too) on the reference, the CPU backend and the test device;
 * the quantized logits stay near the float ones. GPT-2's Conv1D weights, stored (in, out),
 * are quantized per output channel too. */
static void check_quantized(const char *dir, const char *what)
{
    static const char *const qname[3] = {"", "int8", "w8a8"};
    gd_ctx *cpu = NULL, *td = td_new_ctx("testdev", 0);
    CHECK(gd_ctx_create(&cpu, NULL) == GD_OK && gd_ctx_use_backend(cpu, "cpu") == GD_OK, "cpu context");
    gd_ctx *on[3] = {ctx, cpu, td};
    for (int q = GD_LM_INT8; q <= GD_LM_W8A8; q++) {
        int64_t na = 0, nb = 0;
        int32_t *a = generate_q(ctx, dir, 0, 0, (gd_lm_quant)q, &na), *b = generate_q(ctx, dir, 1, 0, (gd_lm_quant)q, &nb);
        CHECK(same_tokens(a, na, b, nb), "%s %s: greedy tokens differ with and without the KV cache", what, qname[q]);
        for (int o = 1; o < 3; o++) {
            if (on[o] == NULL) continue;
            int64_t nc = 0;
            int32_t *cc = generate_q(on[o], dir, 0, 0, (gd_lm_quant)q, &nc);
            CHECK(same_tokens(a, na, cc, nc), "%s: greedy tokens on %s differ from the reference's", qname[q],
                  o == 1 ? "cpu" : "testdev");
            gd_free_mem(cc);
        }
        gd_free_mem(b);
        b = generate_q(ctx, dir, 0, 0.9, (gd_lm_quant)q, &nb);
        gd_free_mem(a);
        a = generate_q(ctx, dir, 1, 0.9, (gd_lm_quant)q, &na);
        CHECK(same_tokens(a, na, b, nb), "%s: sampled tokens differ with and without the KV cache", qname[q]);
        gd_free_mem(a);
        gd_free_mem(b);
        /* logits after a prompt, quantized against float */
        int32_t ids[PROMPT];
        prompt_of(ids, PROMPT, 300, 3);
        gd_lm_engine *ef = NULL, *eq = NULL;
        gd_lm_engine_config cq = {.quantize = (gd_lm_quant)q};
        const float *lf = NULL, *lq = NULL;
        CHECK(gd_lm_engine_open(ctx, dir, NULL, &ef) == GD_OK && gd_lm_engine_open(ctx, dir, &cq, &eq) == GD_OK,
              "%s engine: %s", qname[q], gd_ctx_error(ctx));
        if (ef != NULL && eq != NULL && gd_lm_engine_prefill(ef, ids, PROMPT, &lf) == GD_OK &&
            gd_lm_engine_prefill(eq, ids, PROMPT, &lq) == GD_OK) {
            double e = nmse(lf, lq, 300);
            printf("%s, %s: logits after the prompt within NMSE %.2e of the float weights'\n", what, qname[q], e);
            CHECK(e > 0 && e < 1e-2, "%s: logits NMSE %.2e against float", qname[q], e);
        }
        gd_lm_engine_free(ef);
        gd_lm_engine_free(eq);
    }
    gd_ctx_free(cpu);
    gd_ctx_free(td);
}

/* gd_lm_evaluate against the loss worked out from full forward passes: windows of 16 + 1
 * tokens, 2 a run; 51 tokens make 3 windows, of which one whole batch (2) is evaluated. */
static void check_evaluate(const char *dir, const char *what)
{
    int32_t seq[51];
    prompt_of(seq, 51, 300, 9);
    gd_lm_eval_config ec = {.seq = 16, .batch = 2};
    gd_lm_eval_result r;
    gd_lm_config cfg;
    CHECK(gd_lm_evaluate(ctx, dir, seq, 51, &ec, &r) == GD_OK && r.tokens == 32, "%s: evaluate: %s (%lld tokens)", what,
          gd_ctx_error(ctx), (long long)r.tokens);
    if (gd_lm_model_config(ctx, dir, &cfg) != GD_OK) return;
    double sum = 0;
    for (int w = 0; w < 2; w++) {
        float *lg = full_logits(ctx, dir, &cfg, seq + w * 17, 16);
        if (lg == NULL) return;
        for (int t = 0; t < 16; t++) {
            const float *row = lg + t * cfg.vocab_size;
            double mx = row[0], s = 0;
            for (int64_t v = 1; v < cfg.vocab_size; v++) mx = row[v] > mx ? row[v] : mx;
            for (int64_t v = 0; v < cfg.vocab_size; v++) s += exp(row[v] - mx);
            sum += mx + log(s) - row[seq[w * 17 + t + 1]];
        }
        free(lg);
    }
    double want = sum / 32;
    printf("%s: evaluated loss %.6f nats/token (perplexity %.3f), from the logits %.6f\n", what, r.nll, r.perplexity,
           want);
    CHECK(fabs(r.nll - want) < 1e-5 && fabs(r.perplexity - exp(want)) < 1e-3 * exp(want),
          "%s: evaluate %.7f, the logits give %.7f", what, r.nll, want);
}

/* Llama 3's RoPE scaling (computed from tables with ordinary ops, not the fused rope op):
 * with factor 1 every frequency stays as it is, so the logits must be those of plain RoPE
 * on the same weights; with factor 8 and an original context of 16 the long wavelengths
 * change, so the logits must differ; and the engine must still match a full pass. */
static void check_llama3_rope(const char *plain_dir)
{
    char ckpt[1100], dir[2][300], cmd[2600], path[400];
    if (gd_lm_checkpoint_resolve(ctx, plain_dir, ckpt, sizeof ckpt) != GD_OK) return;
    gd_lm_config cfg;
    if (gd_lm_model_config(ctx, ckpt, &cfg) != GD_OK) return;
    const double factor[2] = {1, 8};
    float *lg[2] = {NULL, NULL};
    for (int v = 0; v < 2; v++) {
        snprintf(dir[v], sizeof dir[v], "%s-rope%d", plain_dir, (int)factor[v]);
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir[v], ckpt, dir[v]);
        if (system(cmd) != 0) return;
        gd_lm_config c = cfg;
        c.rope_factor = factor[v], c.rope_low_freq_factor = 1, c.rope_high_freq_factor = 4;
        c.rope_original_max = v == 0 ? cfg.max_seq : 16;
        snprintf(path, sizeof path, "%s/config.json", dir[v]);
        CHECK(gd_lm_config_write(ctx, &c, path) == GD_OK, "writing %s: %s", path, gd_ctx_error(ctx));
        gd_lm_engine *e = NULL;
        int32_t ids[PROMPT];
        prompt_of(ids, PROMPT, 300, 7);
        const float *out = NULL;
        if (gd_lm_engine_open(ctx, dir[v], &(gd_lm_engine_config){.chunk = CHUNK}, &e) == GD_OK &&
            gd_lm_engine_prefill(e, ids, PROMPT, &out) == GD_OK && (lg[v] = malloc(sizeof(float) * 300)) != NULL)
            memcpy(lg[v], out, sizeof(float) * 300);
        CHECK(lg[v] != NULL, "llama3 rope, factor %g: %s", factor[v], gd_ctx_error(ctx));
        gd_lm_engine_free(e);
    }
    gd_lm_engine *e = NULL;
    int32_t ids[PROMPT];
    prompt_of(ids, PROMPT, 300, 7);
    const float *plain = NULL;
    if (lg[0] != NULL && lg[1] != NULL && gd_lm_engine_open(ctx, plain_dir, &(gd_lm_engine_config){.chunk = CHUNK}, &e) == GD_OK &&
        gd_lm_engine_prefill(e, ids, PROMPT, &plain) == GD_OK) {
        double same = nmse(lg[0], plain, 300), apart = nmse(lg[1], plain, 300);
        printf("llama3 RoPE scaling: factor 1 against plain RoPE NMSE %.2e; factor 8 against plain %.2e\n", same, apart);
        CHECK(same < 1e-10, "llama3 rope with factor 1 differs from plain rope: NMSE %.3g", same);
        CHECK(apart > 1e-6, "llama3 rope with factor 8 is plain rope: NMSE %.3g", apart);
    }
    gd_lm_engine_free(e);
    check_logits(ctx, dir[1], "llama3 RoPE scaling, factor 8");
    free(lg[0]);
    free(lg[1]);
}

static void check_misuse(const char *dir)
{
    gd_lm_engine *e = NULL;
    gd_lm_engine_config ec = {.max_len = 20, .chunk = 8};
    CHECK(gd_lm_engine_open(ctx, dir, &ec, &e) == GD_OK, "engine: %s", gd_ctx_error(ctx));
    if (e == NULL) return;
    const float *lg;
    CHECK(gd_lm_engine_step(e, 1, &lg) == GD_ERR_INVALID && strstr(gd_ctx_error(ctx), "prefill first") != NULL,
          "a step before a prompt: %s", gd_ctx_error(ctx));
    int32_t ids[21] = {0};
    CHECK(gd_lm_engine_prefill(e, ids, 21, &lg) == GD_ERR_INVALID && strstr(gd_ctx_error(ctx), "holds 20") != NULL,
          "a prompt longer than the cache: %s", gd_ctx_error(ctx));
    ids[3] = 300;
    CHECK(gd_lm_engine_prefill(e, ids, 5, &lg) == GD_ERR_INVALID && strstr(gd_ctx_error(ctx), "id 300") != NULL,
          "a token outside the vocabulary: %s", gd_ctx_error(ctx));
    ids[3] = 1;
    CHECK(gd_lm_engine_prefill(e, ids, 20, &lg) == GD_OK, "a prompt filling the cache: %s", gd_ctx_error(ctx));
    CHECK(gd_lm_engine_step(e, 2, &lg) == GD_ERR_INVALID, "a step past the cache was taken");
    gd_lm_engine_free(e);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    char tmpl[] = "/tmp/gradus-engine-XXXXXX";
    if (mkdtemp(tmpl) == NULL) return 1;
    gd_lm_config cfg[2];
    memset(cfg, 0, sizeof cfg);
    cfg[0] = (gd_lm_config){.arch = GD_LM_LLAMA, .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                            .hidden_dim = 128, .vocab_size = 300, .max_seq = 96, .rope_theta = 1e4, .norm_eps = 1e-5,
                            .qk_norm = 1};
    cfg[1] = (gd_lm_config){.arch = GD_LM_GPT2, .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 4,
                            .hidden_dim = 256, .vocab_size = 300, .max_seq = 96, .norm_eps = 1e-5, .tied_embeddings = 1};
    const char *names[2] = {"llama (GQA, QK-norm)", "gpt2"};
    for (int m = 0; m < 2; m++) {
        snprintf(dirs[m], sizeof dirs[m], "%s/m%d", tmpl, m);
        CHECK(gd_lm_config_check(ctx, &cfg[m]) == GD_OK, "config %d: %s", m, gd_ctx_error(ctx));
        if (!save_model(&cfg[m], dirs[m], 11 + (uint64_t)m)) continue;
        check_logits(ctx, dirs[m], names[m]);
        check_evaluate(dirs[m], names[m]);

        int64_t na = 0, nb = 0;
        int32_t *a = generate(ctx, dirs[m], 0, 0, &na), *b = generate(ctx, dirs[m], 1, 0, &nb);
        CHECK(same_tokens(a, na, b, nb), "%s: greedy tokens differ with and without the KV cache", names[m]);
        int64_t distinct = 0;
        for (int64_t i = PROMPT; a != NULL && i < na; i++) distinct += i == PROMPT || a[i] != a[i - 1];
        printf("%s: %lld greedy tokens identical with and without the cache (%lld changes of token)\n", names[m],
               (long long)(na - PROMPT), (long long)distinct);
        /* the same tokens on the fast CPU backend and on the test device */
        gd_ctx *cpu = NULL, *td = td_new_ctx("testdev", 0);
        CHECK(gd_ctx_create(&cpu, NULL) == GD_OK && gd_ctx_use_backend(cpu, "cpu") == GD_OK, "cpu context");
        gd_ctx *others[2] = {cpu, td};
        const char *oname[2] = {"cpu", "testdev"};
        for (int o = 0; o < 2; o++) {
            if (others[o] == NULL) continue;
            int64_t nc = 0;
            int32_t *cc = generate(others[o], dirs[m], 0, 0, &nc);
            CHECK(same_tokens(a, na, cc, nc), "%s: greedy tokens on %s differ from the reference's", names[m], oname[o]);
            gd_free_mem(cc);
        }
        if (cpu != NULL) check_logits(cpu, dirs[m], "cpu");
        if (td != NULL) check_logits(td, dirs[m], "testdev");
        check_batch(ctx, dirs[m], names[m]);
        if (cpu != NULL) check_batch(cpu, dirs[m], "cpu");
        if (td != NULL) check_batch(td, dirs[m], "testdev");
        check_decode(ctx, dirs[m], names[m]);
        if (cpu != NULL) check_decode(cpu, dirs[m], "cpu");
        if (td != NULL) check_decode(td, dirs[m], "testdev");
        gd_ctx *cu = cuda_ctx(); /* the steps chained inside a captured CUDA graph */
        if (cu != NULL) check_decode(cu, dirs[m], "cuda");
        else printf("cuda: skipped (no CUDA device here)\n");
        gd_ctx_free(cu);
        gd_ctx_free(cpu);
        gd_ctx_free(td);
        gd_free_mem(a);
        gd_free_mem(b);
        /* sampling: the draw for position i is the same on both paths */
        a = generate(ctx, dirs[m], 0, 0.9, &na), b = generate(ctx, dirs[m], 1, 0.9, &nb);
        CHECK(same_tokens(a, na, b, nb), "%s: sampled tokens differ with and without the KV cache", names[m]);
        gd_free_mem(a);
        gd_free_mem(b);
    }
    check_misuse(dirs[0]);
    check_llama3_rope(dirs[0]);
    check_quantized(dirs[0], names[0]);
    check_quantized(dirs[1], names[1]);
    /* a tied llama: its quantized head is loaded from the embedding */
    gd_lm_config tied = cfg[0];
    tied.tied_embeddings = 1;
    char tdir[300];
    snprintf(tdir, sizeof tdir, "%s/tied", tmpl);
    if (gd_lm_config_check(ctx, &tied) == GD_OK && save_model(&tied, tdir, 29)) check_quantized(tdir, "llama, tied");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpl);
    return tu_finish("test_lm_engine");
}
