/* The memory plan: one arena per backend per graph, shared by the graph's programs.
 *  - gd_program_planned_bytes says what a program needs on each backend, and buffers whose
 *    lifetimes do not overlap share bytes (a chain needs two buffers, not one per node);
 *  - an op's output takes the bytes of an input read for the last time where the op
 *    allows it (the logits' gradient over the logits);
 *  - a training step and an evaluation of one graph share the arena: on each backend it
 *    is as big as the larger of the two needs, and every buffer of both lies inside it;
 *  - a program is re-pointed, not recompiled, when another program of its graph grows
 *    the arena, and computes the same;
 *  - a target read after the graph ran another program, or compiled one that moved the
 *    memory it was in, is refused with a message that says why. */
#include "testdev_util.h"

#include <stdlib.h>

#define N (256 * 256)

static void test_chain_reuse(void)
{
    gd_graph *g = fresh();
    static float xs[N];
    for (int i = 0; i < N; i++) xs[i] = (float)(i % 17) - 8.0f;
    gd_tensor *x = in_f32(g, "x", 1, (int64_t[]){N}, xs);
    gd_tensor *h = x;
    for (int i = 0; i < 8; i++) h = gd_add(h, x); // 8 buffers of 256 KiB, two alive at a time
    gd_program *p = compile_run(g, 1, &h);
    if (p == NULL) return;
    size_t one = N * sizeof(float), planned = gd_program_planned_bytes(p, "testdev");
    CHECK(planned >= 2 * one && planned <= 2 * one + 512, "a chain of 8 adds planned %zu bytes, want 2 buffers (%zu)",
          planned, 2 * one);
    CHECK(gd_program_planned_bytes(p, "ref") == 0, "nothing runs on the reference, yet %zu bytes are planned there",
          gd_program_planned_bytes(p, "ref"));
    CHECK(gd_program_planned_bytes(p, "no-such-backend") == 0 && gd_program_planned_bytes(NULL, "testdev") == 0,
          "planned bytes of an unknown backend or a NULL program");
    CHECK(gd_graph_arena_bytes(g, "testdev") == planned, "arena %zu bytes, the only program needs %zu",
          gd_graph_arena_bytes(g, "testdev"), planned);
    static float out[N];
    CHECK(gd_tensor_read(h, out, sizeof out) == GD_OK, "read: %s", gd_ctx_error(ctx));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += out[i] != 9.0f * xs[i];
    CHECK(bad == 0, "%d elements of the chain are wrong", bad);
    gd_program_free(p);
    gd_graph_free(g);
}

/* The logits' gradient takes the logits' bytes when nothing reads them after it (its op's
 * `reuse`): the plan needs one such buffer fewer than when the logits are kept (a target
 * too), and the gradient is bitwise the same. */
static void test_output_over_input(void)
{
    enum { R = 64, C = 1024 };
    static float xs[R * C], d[2][R * C];
    int32_t ts[R];
    for (int i = 0; i < R * C; i++) xs[i] = sinf(0.37f * (float)i);
    for (int r = 0; r < R; r++) ts[r] = (r * 37) % C;
    size_t planned[2] = {0, 0};
    for (int keep = 0; keep < 2; keep++) {
        gd_graph *g = fresh();
        gd_tensor *x = in_f32(g, "x", 2, (int64_t[]){R, C}, xs);
        gd_tensor *t = gd_input(g, "t", GD_I32, 1, (int64_t[]){R});
        CHECK(t != NULL && gd_tensor_write(t, ts, sizeof ts) == GD_OK, "targets: %s", gd_ctx_error(ctx));
        gd_tensor *logits = gd_add(x, x);
        gd_tensor *loss = gd_cross_entropy(logits, t, -100);
        CHECK(loss != NULL && gd_backward(g, loss) == GD_OK, "backward: %s", gd_ctx_error(ctx));
        gd_tensor *tg[2] = {gd_grad(g, logits), logits};
        gd_program *p = compile_run(g, 1 + keep, tg);
        if (p != NULL) {
            planned[keep] = gd_program_planned_bytes(p, "testdev") + gd_program_planned_bytes(p, "ref");
            CHECK(gd_tensor_read(tg[0], d[keep], sizeof d[keep]) == GD_OK, "read: %s", gd_ctx_error(ctx));
            gd_program_free(p);
        }
        gd_graph_free(g);
    }
    CHECK(planned[1] >= planned[0] + sizeof xs, "the logits' gradient over the logits: %zu bytes planned, %zu when "
          "the logits are kept; want one buffer (%zu) fewer", planned[0], planned[1], sizeof xs);
    CHECK(memcmp(d[0], d[1], sizeof d[0]) == 0, "the gradient over the logits differs from the one beside them");
}

/* Every output buffer p's kernels write on a planned slot lies inside its backend's arena. */
static void expect_inside_arena(const gd_program *p, const char *what)
{
    const gd_graph *g = p->g;
    int outside = 0, seen = 0;
    for (int a = 0; a < p->n_acts; a++) {
        const gd_action *act = &p->acts[a];
        if (act->kind != GD_ACT_KERNEL) continue;
        const gdp_node *d = td_desc(p, a);
        for (int k = 0; k < d->n_out; k++) {
            const gd_slot *s = &p->slots[act->out[k]];
            if (s->kind != GD_SLOT_PLANNED) continue;
            const gd_arena *ar = &g->arena[s->be->index];
            const char *lo = ar->ptr, *at = d->out[k]->data;
            seen++;
            outside += !(at >= lo && at + s->bytes <= lo + ar->bytes);
        }
    }
    CHECK(seen > 0 && outside == 0, "%s: %d of %d output buffers lie outside the graph's arena", what, outside, seen);
}

static void test_shared_arena(void)
{
    td_model m;
    gd_status s = td_model_build(ctx, &m);
    CHECK(s == GD_OK, "model: %s", gd_ctx_error(ctx));
    if (s != GD_OK) return;
    gd_backend *td = td_backend(ctx, "testdev");
    /* the evaluation first: the training step, compiled next, needs more and grows the arena */
    gd_program *eval = gd_compile(m.g, 1, &m.logits, 0);
    CHECK(eval != NULL, "compile eval: %s", gd_ctx_error(ctx));
    float before[160], after[160], loss;
    CHECK(td_model_step(&m, eval, 0, NULL) == GD_OK && gd_tensor_read(m.logits, before, sizeof before) == GD_OK,
          "eval: %s", gd_ctx_error(ctx));
    uint64_t gen = m.g->arena[td->index].gen, compiles = ctx->compiles;
    gd_program *train = gd_compile(m.g, 1, &m.loss, GD_COMPILE_UPDATES);
    CHECK(train != NULL, "compile train: %s", gd_ctx_error(ctx));
    if (eval == NULL || train == NULL) {
        gd_program_free(eval);
        gd_program_free(train);
        gd_graph_free(m.g);
        return;
    }
    CHECK(m.g->arena[td->index].gen > gen, "compiling the training step did not grow the arena on testdev");
    /* the evaluation's logits lived in the arena that just moved: gone, and refused */
    CHECK(gd_tensor_read(m.logits, after, sizeof after) == GD_ERR_INVALID,
          "logits read after another program of the graph moved its activation memory");
    check_error("logits in a moved arena", (const char *[]){"f32[16, 10]", "moved", NULL});
    const char *names[2] = {"testdev", "ref"};
    for (int b = 0; b < 2; b++) {
        size_t pt = gd_program_planned_bytes(train, names[b]), pe = gd_program_planned_bytes(eval, names[b]);
        size_t arena = gd_graph_arena_bytes(m.g, names[b]);
        CHECK(pt > 0 && pe > 0, "%s: planned %zu (train) and %zu (eval) bytes; both run nodes there", names[b], pt, pe);
        CHECK(pt > pe, "%s: the training step plans %zu bytes, no more than the evaluation's %zu", names[b], pt, pe);
        CHECK(arena == (pt > pe ? pt : pe), "%s: the arena has %zu bytes, the programs need %zu and %zu", names[b], arena,
              pt, pe);
    }
    /* the evaluation is re-pointed at the grown arena, not recompiled, and computes the same */
    CHECK(td_model_step(&m, eval, 0, NULL) == GD_OK && gd_tensor_read(m.logits, after, sizeof after) == GD_OK,
          "eval after the arena grew: %s", gd_ctx_error(ctx));
    CHECK(memcmp(before, after, sizeof after) == 0, "the evaluation computes differently after the arena moved");
    CHECK(ctx->compiles == compiles + 1, "running compiled again");
    expect_inside_arena(eval, "evaluation");
    CHECK(td_model_step(&m, train, 0, &loss) == GD_OK, "train: %s", gd_ctx_error(ctx));
    expect_inside_arena(train, "training step");

    /* a target of one program, read after the graph ran another: refused, saying why */
    CHECK(gd_tensor_read(m.logits, after, sizeof after) == GD_ERR_INVALID, "logits read after the training step ran");
    check_error("stale logits", (const char *[]){"ran another program", "share activation memory", "f32[16, 10]", NULL});
    CHECK(gd_program_run(eval) == GD_OK && gd_tensor_read(m.logits, after, sizeof after) == GD_OK,
          "logits read after the evaluation ran again: %s", gd_ctx_error(ctx));
    CHECK(gd_tensor_read(m.loss, &loss, sizeof loss) == GD_ERR_INVALID, "the loss read after the evaluation ran");
    check_error("stale loss", (const char *[]){"ran another program", "read it before the next run", NULL});
    /* leaves are not activations: parameters read fine whatever ran last */
    float w[64 * 32];
    CHECK(gd_tensor_read(gd_graph_find(m.g, "l1.weight"), w, sizeof w) == GD_OK, "a parameter read: %s",
          gd_ctx_error(ctx));
    gd_program_free(train);
    gd_program_free(eval);
    gd_graph_free(m.g);
}

int main(void)
{
    unsetenv("GRADUS_EXECUTOR");
    unsetenv("GRADUS_SYNC");
    ctx = td_new_ctx("testdev", 0);
    if (ctx == NULL) return 1;
    test_chain_reuse();
    test_output_over_input();
    test_shared_arena();
    return tu_finish("memory plan");
}
