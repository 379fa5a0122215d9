/* test_ops_layout.c — reshape, permute/transpose, copy, concat, slice/split, embedding and
 * index_select through the reference: values against index formulas written here, the
 * gradients through gd_backward against the scatter the test computes itself, and the
 * messages of bad shapes and bad ids. */
#include "gradus.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

/* Compiles the targets into *pp; nonzero (message printed) when compiling fails. */
static int run1(gd_graph *g, int n, gd_tensor **targets, gd_program **pp)
{
    gd_program *p = gd_compile(g, n, targets, 0);
    CHECK(p != NULL, "compile failed: %s", gd_ctx_error(ctx));
    if (p == NULL) return 1;
    *pp = p;
    return 0;
}

static int runs(gd_program *p)
{
    gd_status s = gd_program_run(p);
    CHECK(s == GD_OK, "run failed: %s", gd_ctx_error(ctx));
    return s == GD_OK;
}

/* ---- reshape, permute, transpose, copy ---------------------------------------------- */

static void test_reshape(void)
{
    gd_graph *g = fresh();
    gd_tensor *x = in_f32(g, "x", 2, (int64_t[]){2, 3}, NULL);
    gd_tensor *y = gd_reshape(x, 3, (int64_t[]){3, -1, 1});
    CHECK(y != NULL, "reshape: %s", gd_ctx_error(ctx));
    if (y == NULL) return;
    CHECK(gd_tensor_ndim(y) == 3 && gd_tensor_dim(y, 0) == 3 && gd_tensor_dim(y, 1) == 2 && gd_tensor_dim(y, 2) == 1,
          "reshape [3, -1, 1] of [2, 3] should be [3, 2, 1]");
    gd_tensor *s = gd_reshape(gd_slice(x, 1, 1, 2), 0, NULL); // [2, 1] -> cannot be a scalar
    CHECK(s == NULL, "reshape of 2 elements into a scalar should fail");
    gd_tensor *one = gd_reshape(gd_slice(gd_slice(x, 1, 1, 2), 0, 1, 2), 0, NULL); // x[1, 1] as a scalar
    CHECK(one != NULL && gd_tensor_ndim(one) == 0, "reshape of a [1, 1] into [] should give a scalar: %s",
          gd_ctx_error(ctx));
    gd_ctx_clear_error(ctx);
    gd_program *p;
    gd_tensor *t[2] = {y, one};
    if (run1(g, 2, t, &p)) return;
    float xv[6] = {1, 2, 3, 4, 5, 6}, yv[6], ov;
    gd_tensor_write(x, xv, sizeof xv);
    if (runs(p)) {
        gd_tensor_read(y, yv, sizeof yv);
        gd_tensor_read(one, &ov, sizeof ov);
        CHECK(memcmp(xv, yv, sizeof xv) == 0, "reshape must keep the row-major order of the elements");
        CHECK(ov == 5, "x[1, 1] as a scalar: %g, want 5", ov);
    }
    gd_program_free(p);

    // bad shapes: the message names the op and both shapes
    CHECK(gd_reshape(x, 2, (int64_t[]){4, 2}) == NULL, "reshape [2, 3] -> [4, 2] should fail");
    check_error("reshape", (const char *[]){"reshape", "[2, 3]", "[4, 2]", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_reshape(x, 2, (int64_t[]){-1, -1}) == NULL, "two -1 should fail");
    check_error("reshape -1 -1", (const char *[]){"reshape", "-1", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_reshape(x, 2, (int64_t[]){4, -1}) == NULL, "6 elements do not split into rows of 4");
    check_error("reshape 4 -1", (const char *[]){"reshape", "[2, 3]", "[4, -1]", NULL});
    // NULL propagates without touching the message
    gd_ctx_clear_error(ctx);
    CHECK(gd_reshape(NULL, 1, (int64_t[]){6}) == NULL && gd_ctx_error(ctx)[0] == '\0',
          "reshape(NULL) must return NULL silently");
    gd_graph_free(g);
}

static void test_permute(void)
{
    gd_graph *g = fresh();
    gd_tensor *x = in_f32(g, "x", 3, (int64_t[]){2, 3, 4}, NULL);
    gd_tensor *y = gd_permute(x, 3, (int64_t[]){2, 0, 1}); // y[k, i, j] = x[i, j, k]
    gd_tensor *z = gd_transpose(x, 0, -1);                // z[k, j, i] = x[i, j, k]
    gd_tensor *c = gd_contiguous(x);
    CHECK(y != NULL && z != NULL && c != NULL, "permute/transpose/contiguous: %s", gd_ctx_error(ctx));
    if (y == NULL || z == NULL || c == NULL) return;
    CHECK(gd_tensor_dim(y, 0) == 4 && gd_tensor_dim(y, 1) == 2 && gd_tensor_dim(y, 2) == 3, "permute shape");
    CHECK(gd_tensor_dim(z, 0) == 4 && gd_tensor_dim(z, 1) == 3 && gd_tensor_dim(z, 2) == 2, "transpose shape");
    gd_program *p;
    gd_tensor *t[3] = {y, z, c};
    if (run1(g, 3, t, &p)) return;
    float xv[24], yv[24], zv[24], cv[24];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) xv[(i * 3 + j) * 4 + k] = (float)(100 * i + 10 * j + k);
    gd_tensor_write(x, xv, sizeof xv);
    if (runs(p)) {
        gd_tensor_read(y, yv, sizeof yv);
        gd_tensor_read(z, zv, sizeof zv);
        gd_tensor_read(c, cv, sizeof cv);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                for (int k = 0; k < 4; k++) {
                    float want = (float)(100 * i + 10 * j + k);
                    CHECK(yv[(k * 2 + i) * 3 + j] == want, "permute y[%d, %d, %d] = %g, want %g", k, i, j,
                          yv[(k * 2 + i) * 3 + j], want);
                    CHECK(zv[(k * 3 + j) * 2 + i] == want, "transpose z[%d, %d, %d] = %g, want %g", k, j, i,
                          zv[(k * 3 + j) * 2 + i], want);
                }
        CHECK(memcmp(cv, xv, sizeof xv) == 0, "contiguous must copy");
    }
    gd_program_free(p);

    CHECK(gd_permute(x, 3, (int64_t[]){0, 0, 1}) == NULL, "perm with a repeated axis should fail");
    check_error("permute", (const char *[]){"permute", "[0, 0, 1]", "[2, 3, 4]", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_permute(x, 2, (int64_t[]){1, 0}) == NULL, "perm of 2 entries for 3 dims should fail");
    check_error("permute", (const char *[]){"permute", "[1, 0]", "[2, 3, 4]", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_transpose(x, 0, 3) == NULL, "transpose dim 3 of a 3-D tensor should fail");
    check_error("transpose", (const char *[]){"transpose", "[2, 3, 4]", NULL});
    gd_graph_free(g);
}

/* Layout ops move elements whatever their dtype: i64 values beyond 2^53 and f16 bit
 * patterns must come through unchanged. */
static void test_other_dtypes(void)
{
    gd_graph *g = fresh();
    gd_tensor *a = gd_input(g, "a", GD_I64, 2, (int64_t[]){2, 3});
    gd_tensor *h = gd_input(g, "h", GD_F16, 2, (int64_t[]){3, 2});
    gd_tensor *at = gd_transpose(a, 0, 1);
    gd_tensor *hs = gd_slice(gd_reshape(h, 1, (int64_t[]){6}), 0, 2, 5);
    CHECK(at != NULL && hs != NULL, "i64 transpose / f16 slice: %s", gd_ctx_error(ctx));
    if (at == NULL || hs == NULL) return;
    gd_program *p;
    gd_tensor *t[2] = {at, hs};
    if (run1(g, 2, t, &p)) return;
    int64_t av[6], atv[6];
    uint16_t hv[6] = {0x3c00, 0x8001, 0x7bff, 0x0001, 0xfc00, 0x3555}, hsv[3];
    for (int i = 0; i < 6; i++) av[i] = ((int64_t)1 << 60) + i * 7;
    gd_tensor_write(a, av, sizeof av);
    gd_tensor_write(h, hv, sizeof hv);
    if (runs(p)) {
        gd_tensor_read(at, atv, sizeof atv);
        gd_tensor_read(hs, hsv, sizeof hsv);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                CHECK(atv[j * 2 + i] == av[i * 3 + j], "i64 transpose [%d, %d]", j, i);
        for (int i = 0; i < 3; i++)
            CHECK(hsv[i] == hv[2 + i], "f16 slice element %d: %04x want %04x", i, hsv[i], hv[2 + i]);
    }
    gd_program_free(p);
    gd_graph_free(g);
}

/* ---- concat, slice, split --------------------------------------------------------------- */

static void test_concat_slice(void)
{
    gd_graph *g = fresh();
    gd_tensor *a = in_f32(g, "a", 2, (int64_t[]){2, 2}, NULL);
    gd_tensor *b = in_f32(g, "b", 2, (int64_t[]){2, 1}, NULL);
    gd_tensor *c = gd_concat(g, 2, (gd_tensor *[]){a, b}, -1); // [[1, 2, 5], [3, 4, 6]]
    gd_tensor *r = gd_concat(g, 2, (gd_tensor *[]){a, a}, 0);  // [[1, 2], [3, 4], [1, 2], [3, 4]]
    gd_tensor *s1 = gd_slice(c, 1, -2, 100);                   // [[2, 5], [4, 6]]
    gd_tensor *s2 = gd_slice(r, 0, 1, -1);                     // [[3, 4], [1, 2]]
    gd_tensor *parts[3], *eq[3];
    gd_status st = gd_split(c, 1, 2, (int64_t[]){1, 2}, parts);
    CHECK(st == GD_OK, "split sizes {1, 2}: %s", gd_ctx_error(ctx));
    st = gd_split(gd_transpose(c, 0, 1), 0, 3, NULL, eq);
    CHECK(st == GD_OK, "split into 3 equal parts: %s", gd_ctx_error(ctx));
    if (c == NULL || r == NULL || s1 == NULL || s2 == NULL || parts[1] == NULL || eq[2] == NULL) {
        CHECK(0, "builders failed: %s", gd_ctx_error(ctx));
        return;
    }
    CHECK(gd_tensor_dim(c, 0) == 2 && gd_tensor_dim(c, 1) == 3, "concat shape");
    CHECK(gd_tensor_dim(parts[1], 1) == 2 && gd_tensor_dim(eq[2], 0) == 1, "split shapes");
    gd_program *p;
    gd_tensor *t[7] = {c, r, s1, s2, parts[0], parts[1], eq[2]};
    if (run1(g, 7, t, &p)) return;
    float av[4] = {1, 2, 3, 4}, bv[2] = {5, 6};
    gd_tensor_write(a, av, sizeof av);
    gd_tensor_write(b, bv, sizeof bv);
    if (runs(p)) {
        float cv[6], rv[8], s1v[4], s2v[4], p0[2], p1[4], e2[2];
        gd_tensor_read(c, cv, sizeof cv);
        gd_tensor_read(r, rv, sizeof rv);
        gd_tensor_read(s1, s1v, sizeof s1v);
        gd_tensor_read(s2, s2v, sizeof s2v);
        gd_tensor_read(parts[0], p0, sizeof p0);
        gd_tensor_read(parts[1], p1, sizeof p1);
        gd_tensor_read(eq[2], e2, sizeof e2);
        const float cw[6] = {1, 2, 5, 3, 4, 6}, rw[8] = {1, 2, 3, 4, 1, 2, 3, 4}, s1w[4] = {2, 5, 4, 6},
                    s2w[4] = {3, 4, 1, 2}, p0w[2] = {1, 3}, p1w[4] = {2, 5, 4, 6}, e2w[2] = {5, 6};
        CHECK(memcmp(cv, cw, sizeof cw) == 0, "concat axis -1: [%g %g %g; %g %g %g]", cv[0], cv[1], cv[2], cv[3],
              cv[4], cv[5]);
        CHECK(memcmp(rv, rw, sizeof rw) == 0, "concat axis 0");
        CHECK(memcmp(s1v, s1w, sizeof s1w) == 0, "slice [-2:100] along axis 1: [%g %g; %g %g]", s1v[0], s1v[1],
              s1v[2], s1v[3]);
        CHECK(memcmp(s2v, s2w, sizeof s2w) == 0, "slice [1:-1] along axis 0");
        CHECK(memcmp(p0, p0w, sizeof p0w) == 0 && memcmp(p1, p1w, sizeof p1w) == 0, "split {1, 2}");
        CHECK(memcmp(e2, e2w, sizeof e2w) == 0, "split into 3: last part [%g %g]", e2[0], e2[1]);
    }
    gd_program_free(p);

    gd_tensor *bad = in_f32(g, "bad", 2, (int64_t[]){3, 1}, NULL);
    CHECK(gd_concat(g, 2, (gd_tensor *[]){a, bad}, 1) == NULL, "concat [2, 2] with [3, 1] on axis 1 should fail");
    check_error("concat", (const char *[]){"concat", "x1", "[3, 1]", "[2, 2]", NULL});
    gd_ctx_clear_error(ctx);
    gd_tensor *ai = gd_input(g, "ai", GD_I32, 2, (int64_t[]){2, 2});
    CHECK(gd_concat(g, 2, (gd_tensor *[]){a, ai}, 0) == NULL, "concat f32 with i32 should fail");
    check_error("concat dtype", (const char *[]){"concat", "x1", "i32", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_slice(a, 2, 0, 1) == NULL, "slice on axis 2 of a 2-D tensor should fail");
    check_error("slice", (const char *[]){"slice", "axis", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_split(c, 1, 2, NULL, parts) != GD_OK && parts[0] == NULL, "3 columns do not split in 2 equal parts");
    check_error("split", (const char *[]){"split", "[2, 3]", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_split(c, 1, 2, (int64_t[]){1, 1}, parts) != GD_OK, "sizes {1, 1} do not add up to 3");
    check_error("split sizes", (const char *[]){"split", "3", NULL});
    gd_graph_free(g);
}

/* slice_grad directly: dy placed in zeros of input_shape. */
static void test_slice_grad(void)
{
    gd_graph *g = fresh();
    gd_tensor *dy = in_f32(g, "dy", 2, (int64_t[]){2, 2}, NULL);
    gd_attr at[4] = {gd_attr_i("axis", 1), gd_attr_i("start", -3), gd_attr_i("end", -1),
                     gd_attr_is("input_shape", 2, (int64_t[]){2, 4})};
    gd_tensor *dx = gd_op(g, "slice_grad", 1, &dy, 4, at);
    CHECK(dx != NULL, "slice_grad: %s", gd_ctx_error(ctx));
    if (dx == NULL) return;
    gd_program *p;
    if (run1(g, 1, &dx, &p)) return;
    float dyv[4] = {1, 2, 3, 4}, dxv[8];
    gd_tensor_write(dy, dyv, sizeof dyv);
    if (runs(p)) {
        gd_tensor_read(dx, dxv, sizeof dxv);
        const float want[8] = {0, 1, 2, 0, 0, 3, 4, 0};
        CHECK(memcmp(dxv, want, sizeof want) == 0, "slice_grad [1:3] of 4 columns");
    }
    gd_program_free(p);
    gd_graph_free(g);
}

/* ---- embedding, index_select --------------------------------------------------------- */

static void test_embedding(void)
{
    gd_graph *g = fresh();
    gd_tensor *table = gd_param(g, "table", GD_F32, 2, (int64_t[]){4, 3});
    gd_tensor *ids = gd_input(g, "ids", GD_I32, 2, (int64_t[]){2, 2});
    gd_tensor *w = in_f32(g, "w", 3, (int64_t[]){2, 2, 3}, NULL);
    gd_tensor *y = gd_embedding(table, ids);
    CHECK(y != NULL && gd_tensor_ndim(y) == 3 && gd_tensor_dim(y, 2) == 3, "embedding shape: %s", gd_ctx_error(ctx));
    gd_tensor *loss = gd_sum(gd_mul(y, w), 0, NULL, 0);
    CHECK(loss != NULL && gd_backward(g, loss) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    gd_tensor *dt = gd_grad(g, table);
    CHECK(dt != NULL, "no gradient for the table");
    if (y == NULL || dt == NULL) return;
    gd_program *p;
    gd_tensor *t[2] = {y, dt};
    if (run1(g, 2, t, &p)) return;
    float tv[12], wv[12], yv[12], dtv[12], want[12] = {0};
    int32_t idv[4] = {3, 0, 1, 3};
    for (int v = 0; v < 4; v++)
        for (int d = 0; d < 3; d++) tv[v * 3 + d] = (float)(10 * v + d);
    for (int i = 0; i < 12; i++) wv[i] = (float)(i + 1);
    gd_tensor_write(table, tv, sizeof tv);
    gd_tensor_write(ids, idv, sizeof idv);
    gd_tensor_write(w, wv, sizeof wv);
    if (runs(p)) {
        gd_tensor_read(y, yv, sizeof yv);
        gd_tensor_read(dt, dtv, sizeof dtv);
        for (int q = 0; q < 4; q++)
            for (int d = 0; d < 3; d++) {
                CHECK(yv[q * 3 + d] == (float)(10 * idv[q] + d), "embedding y[%d][%d] = %g", q, d, yv[q * 3 + d]);
                want[idv[q] * 3 + d] += wv[q * 3 + d]; // rows of w added at their ids
            }
        for (int i = 0; i < 12; i++)
            CHECK(dtv[i] == want[i], "d table [%d][%d] = %g, want %g", i / 3, i % 3, dtv[i], want[i]);
        CHECK(dtv[3 * 3 + 0] == 1 + 10, "row 3 is picked twice: its gradient is w[0, 0] + w[1, 1] = 11");
    }
    // an id out of range is a run-time error naming the position and the value
    int32_t bad[4] = {0, 1, 2, 7};
    gd_tensor_write(ids, bad, sizeof bad);
    gd_ctx_clear_error(ctx);
    CHECK(gd_program_run(p) != GD_OK, "id 7 in a table of 4 rows should fail");
    check_error("embedding id", (const char *[]){"embedding", "[1, 1]", "7", NULL});
    gd_program_free(p);

    gd_ctx_clear_error(ctx);
    gd_tensor *fids = in_f32(g, "fids", 1, (int64_t[]){3}, NULL);
    CHECK(gd_embedding(table, fids) == NULL, "float ids should fail");
    check_error("embedding ids dtype", (const char *[]){"embedding", "ids", "i32 or i64", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_embedding(w, ids) == NULL, "a 3-D table should fail");
    check_error("embedding table", (const char *[]){"embedding", "table", "[2, 2, 3]", NULL});
    gd_graph_free(g);
}

static void test_index_select(void)
{
    gd_graph *g = fresh();
    gd_tensor *x = gd_param(g, "x", GD_F32, 2, (int64_t[]){3, 4});
    gd_tensor *rows = gd_input(g, "rows", GD_I64, 1, (int64_t[]){3});
    gd_tensor *cols = gd_input(g, "cols", GD_I32, 1, (int64_t[]){2});
    gd_tensor *w = in_f32(g, "w", 2, (int64_t[]){3, 4}, NULL);
    gd_tensor *r = gd_index_select(x, 0, rows); // (3, 4)
    gd_tensor *c = gd_index_select(x, -1, cols); // (3, 2)
    gd_tensor *loss = gd_sum(gd_mul(r, w), 0, NULL, 0);
    CHECK(loss != NULL && gd_backward(g, loss) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    gd_tensor *dx = gd_grad(g, x);
    if (r == NULL || c == NULL || dx == NULL) {
        CHECK(0, "index_select builders: %s", gd_ctx_error(ctx));
        return;
    }
    CHECK(gd_tensor_dim(c, 0) == 3 && gd_tensor_dim(c, 1) == 2, "index_select axis -1 shape");
    gd_program *p;
    gd_tensor *t[3] = {r, c, dx};
    if (run1(g, 3, t, &p)) return;
    float xv[12], wv[12], rv[12], cv[6], dxv[12], want[12] = {0};
    int64_t rv_idx[3] = {2, 0, 2};
    int32_t cv_idx[2] = {3, 1};
    for (int i = 0; i < 12; i++) {
        xv[i] = (float)(i * i);
        wv[i] = (float)(1 + i % 5);
    }
    gd_tensor_write(x, xv, sizeof xv);
    gd_tensor_write(rows, rv_idx, sizeof rv_idx);
    gd_tensor_write(cols, cv_idx, sizeof cv_idx);
    gd_tensor_write(w, wv, sizeof wv);
    if (runs(p)) {
        gd_tensor_read(r, rv, sizeof rv);
        gd_tensor_read(c, cv, sizeof cv);
        gd_tensor_read(dx, dxv, sizeof dxv);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) {
                CHECK(rv[i * 4 + j] == xv[rv_idx[i] * 4 + j], "rows [%d][%d]", i, j);
                want[rv_idx[i] * 4 + j] += wv[i * 4 + j];
            }
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 2; j++) CHECK(cv[i * 2 + j] == xv[i * 4 + cv_idx[j]], "cols [%d][%d]", i, j);
        for (int i = 0; i < 12; i++) CHECK(dxv[i] == want[i], "dx[%d] = %g, want %g", i, dxv[i], want[i]);
        for (int j = 0; j < 4; j++) {
            CHECK(dxv[1 * 4 + j] == 0, "row 1 is never picked: its gradient is 0");
            CHECK(dxv[2 * 4 + j] == wv[j] + wv[8 + j], "row 2 is picked twice: it gets rows 0 and 2 of w");
        }
    }
    int64_t bad[3] = {0, -1, 1};
    gd_tensor_write(rows, bad, sizeof bad);
    gd_ctx_clear_error(ctx);
    CHECK(gd_program_run(p) != GD_OK, "index -1 should fail");
    check_error("index_select idx", (const char *[]){"index_select", "idx[1]", "-1", NULL});
    gd_program_free(p);

    gd_ctx_clear_error(ctx);
    gd_tensor *idx2 = gd_input(g, "idx2", GD_I64, 2, (int64_t[]){2, 2});
    CHECK(gd_index_select(x, 0, idx2) == NULL, "2-D idx should fail");
    check_error("index_select 2-D idx", (const char *[]){"index_select", "idx", "[2, 2]", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_index_select(x, 2, rows) == NULL, "axis 2 of a 2-D x should fail");
    check_error("index_select axis", (const char *[]){"index_select", "axis", NULL});
    gd_graph_free(g);
}

/* Gradients of the layout ops through gd_backward: loss = sum(f(x) * w), so dx is w
 * carried back through the inverse of the layout change. */
static void test_layout_grads(void)
{
    gd_graph *g = fresh();
    gd_tensor *x = gd_param(g, "x", GD_F32, 3, (int64_t[]){2, 3, 2});
    gd_tensor *e = gd_param(g, "e", GD_F32, 2, (int64_t[]){2, 1});
    gd_tensor *y = gd_permute(x, 3, (int64_t[]){1, 2, 0});                   // (3, 2, 2): y[j, k, i] = x[i, j, k]
    gd_tensor *z = gd_reshape(gd_slice(y, 0, 1, 3), 2, (int64_t[]){2, 4});   // rows j = 1, 2 -> (2, 4)
    gd_tensor *u = gd_concat(g, 2, (gd_tensor *[]){gd_contiguous(z), e}, 1); // (2, 5)
    gd_tensor *w = in_f32(g, "w", 2, (int64_t[]){2, 5}, NULL);
    gd_tensor *loss = gd_sum(gd_mul(u, w), 0, NULL, 0);
    CHECK(loss != NULL && gd_backward(g, loss) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    gd_tensor *dx = gd_grad(g, x), *de = gd_grad(g, e);
    if (dx == NULL || de == NULL) {
        CHECK(0, "no gradients: %s", gd_ctx_error(ctx));
        return;
    }
    gd_program *p;
    gd_tensor *t[2] = {dx, de};
    if (run1(g, 2, t, &p)) return;
    float xv[12] = {0}, ev[2] = {0}, wv[10], dxv[12], dev[2];
    for (int i = 0; i < 10; i++) wv[i] = (float)(i + 1);
    gd_tensor_write(x, xv, sizeof xv);
    gd_tensor_write(e, ev, sizeof ev);
    gd_tensor_write(w, wv, sizeof wv);
    if (runs(p)) {
        gd_tensor_read(dx, dxv, sizeof dxv);
        gd_tensor_read(de, dev, sizeof dev);
        // u[r, c] for c < 4 is y[1 + r, c / 2, c % 2] = x[c % 2, 1 + r, c / 2]; u[r, 4] = e[r]
        float want[12] = {0};
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 4; c++) want[((c % 2) * 3 + 1 + r) * 2 + c / 2] = wv[r * 5 + c];
        for (int i = 0; i < 12; i++) CHECK(dxv[i] == want[i], "dx[%d] = %g, want %g", i, dxv[i], want[i]);
        CHECK(dev[0] == wv[4] && dev[1] == wv[9], "de = [%g, %g], want [%g, %g]", dev[0], dev[1], wv[4], wv[9]);
    }
    gd_program_free(p);
    gd_graph_free(g);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    test_reshape();
    test_permute();
    test_other_dtypes();
    test_concat_slice();
    test_slice_grad();
    test_embedding();
    test_index_select();
    test_layout_grads();
    return tu_finish("test_ops_layout");
}
