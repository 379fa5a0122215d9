/* test_ops_index.c — bad data in index operands is the user's error, the right kind, on
 * the reference: a program whose ids, indices or targets hold a value out of range (a
 * negative one included: indices never count from the end) fails to run with
 * GD_ERR_INVALID and a message naming the node (its id and label), the position of the
 * offending value and the value; after fixing the data the same program runs. Covers
 * embedding, index_select, their gradient ops, cross_entropy (ignore_index excepted) and
 * its gradient, with contiguous and strided index tensors. */
#include "gradus.h"
#include "testutil.h"

/* Runs p expecting bad data: GD_ERR_INVALID and a message with every part. */
static void expect_bad_data(gd_program *p, const char *what, const char *const *parts)
{
    gd_ctx_clear_error(ctx);
    gd_status s = gd_program_run(p);
    CHECK(s == GD_ERR_INVALID, "%s: run gave %s, want GD_ERR_INVALID (%s)", what, gd_status_name(s), gd_ctx_error(ctx));
    check_error(what, parts);
    CHECK(strstr(gd_ctx_error(ctx), "node ") != NULL, "%s: message '%s' does not name the node", what,
          gd_ctx_error(ctx));
    gd_ctx_clear_error(ctx);
}

static void expect_runs(gd_program *p, const char *what)
{
    gd_ctx_clear_error(ctx);
    gd_status s = gd_program_run(p);
    CHECK(s == GD_OK, "%s: %s", what, gd_ctx_error(ctx));
}

static gd_program *compile_targets(gd_graph *g, int n, gd_tensor **t)
{
    for (int i = 0; i < n; i++)
        if (t[i] == NULL) {
            CHECK(0, "building failed: %s", gd_ctx_error(ctx));
            return NULL;
        }
    gd_program *p = gd_compile(g, n, t, 0);
    CHECK(p != NULL, "compile: %s", gd_ctx_error(ctx));
    return p;
}

static void test_embedding(void)
{
    gd_graph *g = fresh();
    float tv[12] = {0};
    gd_tensor *table = in_f32(g, "table", 2, (int64_t[]){4, 3}, tv);
    gd_tensor *ids = gd_input(g, "ids", GD_I64, 2, (int64_t[]){2, 3});
    gd_tensor *y = gd_label(gd_embedding(table, ids), "lookup");
    float dyv[18] = {0};
    gd_tensor *dy = in_f32(g, "dy", 3, (int64_t[]){2, 3, 3}, dyv);
    gd_tensor *dt = gd_label(gd_op(g, "embedding_grad", 2, (gd_tensor *[]){dy, ids}, 1,
                                   (gd_attr[]){gd_attr_i("num_embeddings", 4)}),
                             "lookup.grad");
    gd_program *pf = compile_targets(g, 1, &y), *pb = compile_targets(g, 1, &dt);
    if (pf == NULL || pb == NULL) goto done;
    int64_t good[6] = {0, 1, 2, 3, 3, 0}, big[6] = {0, 1, 2, 3, 4, 0}, neg[6] = {0, 1, 2, 3, 3, -2};
    gd_tensor_write(ids, good, sizeof good);
    expect_runs(pf, "embedding with good ids");
    expect_runs(pb, "embedding_grad with good ids");
    gd_tensor_write(ids, big, sizeof big);
    expect_bad_data(pf, "embedding id 4", (const char *[]){"'lookup'", "ids[1, 1]", "= 4", "4 rows", NULL});
    expect_bad_data(pb, "embedding_grad id 4", (const char *[]){"'lookup.grad'", "ids[1, 1]", "= 4", NULL});
    gd_tensor_write(ids, neg, sizeof neg);
    expect_bad_data(pf, "embedding id -2", (const char *[]){"'lookup'", "ids[1, 2]", "= -2", "count from the end", NULL});
    expect_bad_data(pb, "embedding_grad id -2", (const char *[]){"'lookup.grad'", "ids[1, 2]", "= -2", NULL});
    gd_tensor_write(ids, good, sizeof good);
    expect_runs(pf, "embedding after the ids were fixed");
done:
    gd_program_free(pf);
    gd_program_free(pb);
    gd_graph_free(g);
}

/* The ids are a transposed view: the position named is the one the op reads. */
static void test_embedding_strided_ids(void)
{
    gd_graph *g = fresh();
    float tv[12] = {0};
    gd_tensor *table = in_f32(g, "table", 2, (int64_t[]){4, 3}, tv);
    gd_tensor *buf = gd_input(g, "ids_t", GD_I32, 2, (int64_t[]){3, 2});
    gd_tensor *y = gd_label(gd_embedding(table, gd_transpose(buf, 0, 1)), "lookup.t"); // ids (2, 3)
    gd_program *p = compile_targets(g, 1, &y);
    if (p != NULL) {
        // buffer (3, 2) row-major; the view's element [i, j] is buffer [j, i]
        int32_t v[6] = {0, 1, 2, 3, 9, 0}; // buffer [2, 0] = 9: the view's [0, 2]
        gd_tensor_write(buf, v, sizeof v);
        expect_bad_data(p, "embedding strided id 9", (const char *[]){"'lookup.t'", "ids[0, 2]", "= 9", NULL});
        v[4] = 1;
        gd_tensor_write(buf, v, sizeof v);
        expect_runs(p, "embedding strided ids fixed");
        int32_t want[6] = {0, 2, 1, 1, 3, 0};
        float yv[18];
        for (int i = 0; i < 12; i++) tv[i] = (float)i;
        gd_tensor_write(table, tv, sizeof tv);
        if (gd_program_run(p) == GD_OK && gd_tensor_read(y, yv, sizeof yv) == GD_OK)
            for (int q = 0; q < 6; q++)
                for (int d = 0; d < 3; d++)
                    CHECK(yv[q * 3 + d] == tv[want[q] * 3 + d], "strided ids: y[%d][%d] = %g", q, d, yv[q * 3 + d]);
    }
    gd_program_free(p);
    gd_graph_free(g);
}

static void test_index_select(void)
{
    gd_graph *g = fresh();
    float xv[12] = {0}, dyv[8] = {0};
    gd_tensor *x = in_f32(g, "x", 2, (int64_t[]){3, 4}, xv);
    gd_tensor *idx = gd_input(g, "idx", GD_I32, 1, (int64_t[]){2});
    gd_tensor *y = gd_label(gd_index_select(x, 0, idx), "pick");
    gd_tensor *dy = in_f32(g, "dy", 2, (int64_t[]){2, 4}, dyv);
    gd_tensor *dx = gd_label(gd_op(g, "index_select_grad", 2, (gd_tensor *[]){dy, idx}, 2,
                                   (gd_attr[]){gd_attr_i("axis", 0), gd_attr_is("input_shape", 2, (int64_t[]){3, 4})}),
                             "pick.grad");
    gd_program *pf = compile_targets(g, 1, &y), *pb = compile_targets(g, 1, &dx);
    if (pf == NULL || pb == NULL) goto done;
    int32_t good[2] = {2, 0}, big[2] = {3, 0}, neg[2] = {2, -1};
    gd_tensor_write(idx, good, sizeof good);
    expect_runs(pf, "index_select with good indices");
    expect_runs(pb, "index_select_grad with good indices");
    gd_tensor_write(idx, big, sizeof big);
    expect_bad_data(pf, "index_select 3", (const char *[]){"'pick'", "idx[0]", "= 3", "axis 0 of size 3", NULL});
    expect_bad_data(pb, "index_select_grad 3", (const char *[]){"'pick.grad'", "idx[0]", "= 3", NULL});
    gd_tensor_write(idx, neg, sizeof neg);
    expect_bad_data(pf, "index_select -1", (const char *[]){"'pick'", "idx[1]", "= -1", "count from the end", NULL});
    expect_bad_data(pb, "index_select_grad -1", (const char *[]){"'pick.grad'", "idx[1]", "= -1", NULL});
done:
    gd_program_free(pf);
    gd_program_free(pb);
    gd_graph_free(g);
}

static void test_cross_entropy(void)
{
    gd_graph *g = fresh();
    float lv[15] = {0};
    gd_tensor *logits = in_f32(g, "logits", 2, (int64_t[]){3, 5}, lv);
    gd_tensor *targets = gd_input(g, "targets", GD_I64, 1, (int64_t[]){3});
    gd_tensor *loss = gd_label(gd_cross_entropy(logits, targets, -1), "ce");
    gd_tensor *dl = in_f32(g, "dl", 0, NULL, (float[]){1.0f});
    gd_tensor *dlogits = gd_label(gd_op(g, "cross_entropy_grad", 3, (gd_tensor *[]){dl, logits, targets}, 1,
                                        (gd_attr[]){gd_attr_i("ignore_index", -1)}),
                                  "ce.grad");
    gd_program *pf = compile_targets(g, 1, &loss), *pb = compile_targets(g, 1, &dlogits);
    if (pf == NULL || pb == NULL) goto done;
    int64_t good[3] = {4, -1, 0}, big[3] = {4, 5, 0}, neg[3] = {-3, -1, 0};
    gd_tensor_write(targets, good, sizeof good);
    expect_runs(pf, "cross_entropy with ignore_index -1 among the targets");
    expect_runs(pb, "cross_entropy_grad with ignore_index -1 among the targets");
    float l = 0;
    if (gd_tensor_read(loss, &l, sizeof l) == GD_OK)
        CHECK(fabs(l - log(5.0)) < 1e-6, "uniform logits over 2 kept rows: loss %g, want log 5", l);
    gd_tensor_write(targets, big, sizeof big);
    expect_bad_data(pf, "cross_entropy 5", (const char *[]){"'ce'", "targets[1]", "= 5", "ignore_index -1", NULL});
    expect_bad_data(pb, "cross_entropy_grad 5", (const char *[]){"'ce.grad'", "targets[1]", "= 5", NULL});
    gd_tensor_write(targets, neg, sizeof neg);
    expect_bad_data(pf, "cross_entropy -3", (const char *[]){"'ce'", "targets[0]", "= -3", NULL});
    expect_bad_data(pb, "cross_entropy_grad -3", (const char *[]){"'ce.grad'", "targets[0]", "= -3", NULL});
done:
    gd_program_free(pf);
    gd_program_free(pb);
    gd_graph_free(g);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    test_embedding();
    test_embedding_strided_ids();
    test_index_select();
    test_cross_entropy();
    return tu_finish("test_ops_index");
}
