/* Error messages say each thing once: a shape with its dtype ("f32[4, 3]", not
 * "f32f32[4, 3]"), the op name of a failing reference kernel (the core adds it, the kernel
 * does not), and what is wrong with a bad hyperparameter (NaN is "not a number", not
 * "negative"; an infinite one is refused). */
#include "gradus.h"

#include "testutil.h"

/* Counts the occurrences of needle in s. */
static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(s, needle); p != NULL; p = strstr(p + 1, needle)) n++;
    return n;
}

/* Builds, compiles and runs target; the run must fail with a message that contains
 * `want` exactly once. */
static void run_fails_once(gd_graph *g, gd_tensor *t, const char *what, const char *want)
{
    CHECK(t != NULL, "%s: not built: %s", what, gd_ctx_error(ctx));
    if (t == NULL) return;
    gd_program *p = gd_compile(g, 1, &t, 0);
    CHECK(p != NULL, "%s: compile: %s", what, gd_ctx_error(ctx));
    if (p == NULL) return;
    gd_status s = gd_program_run(p);
    const char *e = gd_ctx_error(ctx);
    CHECK(s != GD_OK, "%s: ran", what);
    CHECK(count(e, want) == 1, "%s: '%s' appears %d times in '%s'", what, want, count(e, want), e);
    gd_program_free(p);
    gd_ctx_clear_error(ctx);
}

static void test_shapes_once(void)
{
    gd_graph *g = fresh();
    gd_tensor *x = gd_input(g, "x", GD_F32, 2, (int64_t[]){4, 3});
    gd_tensor *step = gd_input(g, "step", GD_F32, 2, (int64_t[]){4, 3});
    expect_error(gd_dropout(x, 0.5, 1, step), "dropout with an f32 step", 1,
                 (const char *const[]){"step must be an i64 scalar, got f32[4, 3]"});
    gd_tensor *xi = gd_input(g, "xi", GD_I32, 1, (int64_t[]){5});
    expect_error(gd_dropout(xi, 0.5, 1, NULL), "dropout of i32", 1, (const char *const[]){"x i32[5] is not floating"});

    gd_tensor *p = gd_input(g, "p", GD_F32, 1, (int64_t[]){3});
    gd_tensor *gr = gd_input(g, "g", GD_F32, 1, (int64_t[]){3});
    gd_tensor *buf = gd_input(g, "buf", GD_F32, 1, (int64_t[]){3});
    gd_tensor *lr2 = gd_input(g, "lr2", GD_F32, 1, (int64_t[]){2});
    gd_tensor *lr = gd_input(g, "lr", GD_F32, 0, NULL);
    gd_tensor *gbad = gd_input(g, "gbad", GD_F32, 1, (int64_t[]){4});
    gd_tensor *out[2];
    gd_attr ok[2] = {gd_attr_f("momentum", 0.9), gd_attr_f("weight_decay", 0)};
    CHECK(gd_op_multi(g, "sgd_update", 4, (gd_tensor *[]){p, gr, buf, lr2}, 2, ok, 2, out) != GD_OK, "lr f32[2] accepted");
    check_error("sgd_update lr", (const char *const[]){"lr must be an f32 scalar, got f32[2]", NULL});
    CHECK(count(gd_ctx_error(ctx), "f32f32") == 0, "dtype twice: %s", gd_ctx_error(ctx));
    gd_ctx_clear_error(ctx);
    CHECK(gd_op_multi(g, "sgd_update", 4, (gd_tensor *[]){p, gbad, buf, lr}, 2, ok, 2, out) != GD_OK, "g f32[4] accepted");
    check_error("sgd_update g", (const char *const[]){"g f32[4] does not match p f32[3]", NULL});
    gd_ctx_clear_error(ctx);
    /* attributes: NaN is not a number, not negative; infinity is not finite */
    gd_attr nan_m[2] = {gd_attr_f("momentum", NAN), gd_attr_f("weight_decay", 0)};
    CHECK(gd_op_multi(g, "sgd_update", 4, (gd_tensor *[]){p, gr, buf, lr}, 2, nan_m, 2, out) != GD_OK, "NaN momentum");
    check_error("NaN momentum", (const char *const[]){"momentum is not a number", NULL});
    CHECK(strstr(gd_ctx_error(ctx), "negative") == NULL, "NaN called negative: %s", gd_ctx_error(ctx));
    gd_ctx_clear_error(ctx);
    gd_attr inf_wd[2] = {gd_attr_f("momentum", 0.9), gd_attr_f("weight_decay", INFINITY)};
    CHECK(gd_op_multi(g, "sgd_update", 4, (gd_tensor *[]){p, gr, buf, lr}, 2, inf_wd, 2, out) != GD_OK, "inf decay");
    check_error("inf weight_decay", (const char *const[]){"weight_decay = inf is not finite", NULL});
    gd_ctx_clear_error(ctx);
    gd_graph_free(g);
}

static void test_reference_names_op_once(void)
{
    /* a target that names no class: cross_entropy's reference fails at run time */
    gd_graph *g = fresh();
    gd_tensor *logits = in_f32(g, "logits", 2, (int64_t[]){2, 3}, (const float[]){1, 2, 3, 4, 5, 6});
    gd_tensor *y = gd_input(g, "y", GD_I64, 1, (int64_t[]){2});
    gd_tensor_write(y, (const int64_t[]){1, 7}, 2 * sizeof(int64_t));
    run_fails_once(g, gd_cross_entropy(logits, y, -100), "cross_entropy", "cross_entropy:");
    gd_graph_free(g);

    /* an id past the table: embedding's reference fails */
    g = fresh();
    gd_tensor *table = in_f32(g, "table", 2, (int64_t[]){2, 2}, (const float[]){1, 2, 3, 4});
    gd_tensor *ids = gd_input(g, "ids", GD_I64, 1, (int64_t[]){2});
    gd_tensor_write(ids, (const int64_t[]){0, 5}, 2 * sizeof(int64_t));
    run_fails_once(g, gd_embedding(table, ids), "embedding", "embedding:");
    gd_graph_free(g);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    test_shapes_once();
    test_reference_names_op_once();
    return tu_finish("test_messages");
}
