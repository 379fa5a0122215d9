/* test_slice_grads.c — the gradient of a tensor used through several slices: where the
 * slices' ranges along one axis are disjoint, autodiff sums their gradients as one concat
 * (zeros in any gaps) instead of a zero-filled slice_grad per slice and adds; overlapping
 * slices keep the slice_grads and adds, as do slices along different axes and more parts
 * than one concat takes. Each case checks which nodes the compiled gradient program holds
 * and the gradient's values against the ones the test works out itself, one case with
 * values whose float sum shows the order of the additions. */
#include "gradus.h"
#include "testutil.h"

#include "program.h"

#include <math.h>
#include <string.h>

#define B 2
#define C 6

/* Nodes of op `op` a program runs (views included). */
static int count_op(const gd_program *p, const char *op)
{
    int n = 0;
    for (int i = 0; i < p->n_pn; i++) n += !p->pn[i].dead && strcmp(p->pn[i].node->op->name, op) == 0;
    return n;
}

/* x (B, C) is a parameter; slice k is x[:, start[k]:end[k]]. Slice 1 is squared, the
 * others are multiplied by inputs w_k, and the loss is the sum of it all, plus
 * sum(x * wx) when whole_at >= 0: a use of x that is no slice, made before slice whole_at
 * (n: after them all). So dx = w_k, or 2 x, over each slice's range (summed where ranges
 * overlap), 0 outside every range, plus wx. */
typedef struct slice_case {
    const char *name;
    int n;
    int64_t start[3], end[3];
    int whole_at;
    int concats, fills, slice_grads; /* what the gradient program should hold (fills of zeros) */
} slice_case;

static void run_case(const slice_case *sc)
{
    gd_graph *g = fresh();
    gd_tensor *x = gd_param(g, "x", GD_F32, 2, (int64_t[]){B, C});
    gd_tensor *wx = in_f32(g, "wx", 2, (int64_t[]){B, C}, NULL), *w[3] = {0}, *loss = NULL;
    for (int k = 0; k <= sc->n; k++) {
        if (k == sc->whole_at) {
            gd_tensor *term = gd_sum(gd_mul(x, wx), 0, NULL, 0);
            loss = loss == NULL ? term : gd_add(loss, term);
        }
        if (k == sc->n) break;
        gd_tensor *s = gd_slice(x, 1, sc->start[k], sc->end[k]);
        char name[8];
        snprintf(name, sizeof name, "w%d", k);
        w[k] = in_f32(g, name, 2, (int64_t[]){B, sc->end[k] - sc->start[k]}, NULL);
        gd_tensor *term = gd_sum(k == 1 ? gd_mul(s, s) : gd_mul(s, w[k]), 0, NULL, 0);
        loss = loss == NULL ? term : gd_add(loss, term);
    }
    gd_status st = loss != NULL ? gd_backward(g, loss) : GD_ERR_INVALID;
    CHECK(st == GD_OK, "%s: backward: %s", sc->name, gd_ctx_error(ctx));
    gd_tensor *dx = gd_grad(g, x);
    gd_program *p = dx != NULL ? gd_compile(g, 1, &dx, 0) : NULL;
    CHECK(p != NULL, "%s: compile: %s", sc->name, gd_ctx_error(ctx));
    if (p == NULL) {
        gd_graph_free(g);
        return;
    }
    // one fill is the seed, the loss's gradient of one
    CHECK(count_op(p, "concat") == sc->concats && count_op(p, "fill") == 1 + sc->fills &&
              count_op(p, "slice_grad") == sc->slice_grads,
          "%s: the gradient program has %d concat, %d fill and %d slice_grad nodes, want %d, %d and %d", sc->name,
          count_op(p, "concat"), count_op(p, "fill"), count_op(p, "slice_grad"), sc->concats, 1 + sc->fills,
          sc->slice_grads);

    float xv[B * C], wxv[B * C], wv[3][B * C], dxv[B * C], want[B * C];
    for (int i = 0; i < B * C; i++) {
        xv[i] = 0.25f * (float)(i - 5);
        wxv[i] = 1.0f / (float)(i + 3);
    }
    gd_tensor_write(x, xv, sizeof xv);
    gd_tensor_write(wx, wxv, sizeof wxv);
    for (int k = 0; k < sc->n; k++) {
        int64_t len = sc->end[k] - sc->start[k];
        for (int i = 0; i < B * len; i++) wv[k][i] = (float)(k + 1) * 0.5f + (float)i / 7.0f;
        if (k == 0) wv[k][0] = -0.0f; // the sign of a zero the slice passes back
        if (k != 1) gd_tensor_write(w[k], wv[k], (size_t)(B * len) * sizeof(float));
    }
    // what zero-filled scatters and adds give: each use's contribution, zero outside its
    // range, added in the order autodiff meets them (the reverse of the uses')
    for (int k = sc->n; k >= 0; k--) {
        float d[B * C] = {0};
        if (k == sc->whole_at) {
            for (int i = 0; i < B * C; i++) d[i] = wxv[i];
            for (int i = 0; i < B * C; i++) want[i] = k == sc->n ? d[i] : want[i] + d[i];
        }
        if (k == sc->n) continue;
        memset(d, 0, sizeof d);
        int64_t len = sc->end[k] - sc->start[k];
        for (int r = 0; r < B; r++)
            for (int64_t c = sc->start[k]; c < sc->end[k]; c++) {
                int i = r * C + (int)c;
                d[i] = k == 1 ? xv[i] + xv[i] : wv[k][r * len + (c - sc->start[k])];
            }
        int first = k == sc->n - 1 && sc->whole_at != sc->n;
        for (int i = 0; i < B * C; i++) want[i] = first ? d[i] : want[i] + d[i];
    }
    if (gd_program_run(p) == GD_OK && gd_tensor_read(dx, dxv, sizeof dxv) == GD_OK) {
        for (int i = 0; i < B * C; i++)
            CHECK(dxv[i] == want[i], "%s: dx[%d] = %g, want %g", sc->name, i, dxv[i], want[i]);
        // element (0, start[0]) is w0's -0.0 alone: a concat keeps its sign, where the
        // zero fills of the other slices, added, made it +0.0
        if (sc->concats == 1 && sc->whole_at < 0)
            CHECK(signbit(dxv[sc->start[0]]), "%s: dx[%d] should stay -0.0, got %g", sc->name, (int)sc->start[0],
                  dxv[sc->start[0]]);
    } else {
        CHECK(0, "%s: run: %s", sc->name, gd_ctx_error(ctx));
    }
    gd_program_free(p);
    gd_graph_free(g);
}

/* gd_split into 3 parts along the last axis of a (2, 3, 4) tensor, each used: its gradient
 * is one concat of the parts' gradients; and the result matches a chain that never
 * slices (the parts' weights concatenated by hand). */
static void test_split_last_axis(void)
{
    gd_graph *g = fresh();
    int64_t shape[3] = {2, 3, 4};
    gd_tensor *x = gd_param(g, "x", GD_F32, 3, shape), *part[3];
    gd_tensor *h = gd_mul(x, x); // x used through a node, so the split is of a non-leaf
    CHECK(gd_split(h, -1, 3, (int64_t[]){1, 2, 1}, part) == GD_OK, "split: %s", gd_ctx_error(ctx));
    gd_tensor *w = in_f32(g, "w", 3, shape, NULL), *loss = NULL, *wp[3];
    CHECK(gd_split(w, -1, 3, (int64_t[]){1, 2, 1}, wp) == GD_OK, "split w: %s", gd_ctx_error(ctx));
    for (int k = 0; k < 3; k++) {
        gd_tensor *term = gd_sum(gd_mul(part[k], wp[k]), 0, NULL, 0);
        loss = loss == NULL ? term : gd_add(loss, term);
    }
    CHECK(loss != NULL && gd_backward(g, loss) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    gd_tensor *dh = gd_grad(g, h), *dx = gd_grad(g, x);
    gd_tensor *t[2] = {dh, dx};
    gd_program *p = dh != NULL && dx != NULL ? gd_compile(g, 2, t, 0) : NULL;
    CHECK(p != NULL, "compile: %s", gd_ctx_error(ctx));
    if (p == NULL) {
        gd_graph_free(g);
        return;
    }
    CHECK(count_op(p, "concat") == 1 && count_op(p, "slice_grad") == 0 && count_op(p, "fill") == 1,
          "split of 3 parts: %d concat, %d slice_grad, %d fill nodes; want 1, 0, 1 (the seed)", count_op(p, "concat"),
          count_op(p, "slice_grad"), count_op(p, "fill"));
    float xv[24], wv[24], dhv[24], dxv[24];
    for (int i = 0; i < 24; i++) {
        xv[i] = (float)(i % 5) - 1.5f;
        wv[i] = (float)i / 3.0f - 2.0f;
    }
    gd_tensor_write(x, xv, sizeof xv);
    gd_tensor_write(w, wv, sizeof wv);
    if (gd_program_run(p) == GD_OK && gd_tensor_read(dh, dhv, sizeof dhv) == GD_OK &&
        gd_tensor_read(dx, dxv, sizeof dxv) == GD_OK) {
        // dh is w, whole; dx = dh * x + dh * x (x * x's rule, one contribution per operand)
        for (int i = 0; i < 24; i++) {
            CHECK(dhv[i] == wv[i], "dh[%d] = %g, want %g", i, dhv[i], wv[i]);
            float want = wv[i] * xv[i] + wv[i] * xv[i];
            CHECK(dxv[i] == want, "dx[%d] = %g, want %g", i, dxv[i], want);
        }
    } else {
        CHECK(0, "run: %s", gd_ctx_error(ctx));
    }
    gd_program_free(p);
    gd_graph_free(g);
}

/* x (R, C) used through slices given as (axis, start, end), each multiplied by an input
 * w_k: dx is the sum of the w_k, zero-extended, added in the order autodiff meets the uses
 * (the reverse of theirs). The fallbacks: slices along different axes, and more parts than
 * one concat takes (GDP_MAX_INPUTS), are added one by one as zero-filled slice_grads. */
#define FB_R 4
#define FB_C 20
#define FB_MAX 24
typedef struct fb_use {
    int axis;
    int64_t start, end;
} fb_use;

static void run_fallback(const char *name, int n, const fb_use *u, float (*wval)(int k, int64_t r, int64_t c),
                         int concats, int slice_grads)
{
    gd_graph *g = fresh();
    gd_tensor *x = gd_param(g, "x", GD_F32, 2, (int64_t[]){FB_R, FB_C}), *w[FB_MAX], *loss = NULL;
    int64_t rows[FB_MAX], cols[FB_MAX];
    for (int k = 0; k < n; k++) {
        gd_tensor *s = gd_slice(x, u[k].axis, u[k].start, u[k].end);
        rows[k] = u[k].axis == 0 ? u[k].end - u[k].start : FB_R;
        cols[k] = u[k].axis == 1 ? u[k].end - u[k].start : FB_C;
        char wn[8];
        snprintf(wn, sizeof wn, "w%d", k);
        w[k] = in_f32(g, wn, 2, (int64_t[]){rows[k], cols[k]}, NULL);
        gd_tensor *term = gd_sum(gd_mul(s, w[k]), 0, NULL, 0);
        loss = loss == NULL ? term : gd_add(loss, term);
    }
    CHECK(loss != NULL && gd_backward(g, loss) == GD_OK, "%s: backward: %s", name, gd_ctx_error(ctx));
    gd_tensor *dx = gd_grad(g, x);
    gd_program *p = dx != NULL ? gd_compile(g, 1, &dx, 0) : NULL;
    CHECK(p != NULL, "%s: compile: %s", name, gd_ctx_error(ctx));
    if (p == NULL) {
        gd_graph_free(g);
        return;
    }
    CHECK(count_op(p, "concat") == concats && count_op(p, "slice_grad") == slice_grads,
          "%s: the gradient program has %d concat and %d slice_grad nodes, want %d and %d", name, count_op(p, "concat"),
          count_op(p, "slice_grad"), concats, slice_grads);
    static float wv[FB_MAX][FB_R * FB_C];
    float want[FB_R * FB_C], dxv[FB_R * FB_C];
    for (int k = 0; k < n; k++) {
        for (int64_t r = 0; r < rows[k]; r++)
            for (int64_t c = 0; c < cols[k]; c++) wv[k][r * cols[k] + c] = wval(k, r, c);
        gd_tensor_write(w[k], wv[k], (size_t)(rows[k] * cols[k]) * sizeof(float));
    }
    for (int k = n - 1; k >= 0; k--) /* the last use's contribution first */
        for (int64_t r = 0; r < FB_R; r++)
            for (int64_t c = 0; c < FB_C; c++) {
                const int64_t a = u[k].axis == 0 ? r : c, lr = u[k].axis == 0 ? r - u[k].start : r,
                              lc = u[k].axis == 1 ? c - u[k].start : c;
                const float d = a >= u[k].start && a < u[k].end ? wv[k][lr * cols[k] + lc] : 0.0f;
                want[r * FB_C + c] = k == n - 1 ? d : want[r * FB_C + c] + d;
            }
    if (gd_program_run(p) == GD_OK && gd_tensor_read(dx, dxv, sizeof dxv) == GD_OK) {
        int bad = 0;
        for (int i = 0; i < FB_R * FB_C && bad < 4; i++)
            if (dxv[i] != want[i]) {
                CHECK(0, "%s: dx[%d] = %.9g, want %.9g", name, i, dxv[i], want[i]);
                bad++;
            }
    } else {
        CHECK(0, "%s: run: %s", name, gd_ctx_error(ctx));
    }
    gd_program_free(p);
    gd_graph_free(g);
}

static float w_plain(int k, int64_t r, int64_t c) { return (float)(k + 1) * 0.25f + (float)(r * 7 + c) / 9.0f; }

/* Columns 2 and 3 lie in all three slices of the order case with weights 1, 1e8 and -1e8:
 * added last use first, (-1e8 + 1e8) + 1 = 1; in any order that adds the 1 to a 1e8 first,
 * float rounding loses it and the sum is 0. */
static float w_order(int k, int64_t r, int64_t c)
{
    const int64_t x = c + k; /* the column of x: slice k starts at k */
    if (x == 2 || x == 3) return k == 0 ? 1.0f : k == 1 ? 1e8f : -1e8f;
    return w_plain(k, r, c);
}

static void test_fallbacks(void)
{
    /* overlapping slices: slice_grads added in the order autodiff meets them */
    const fb_use order[3] = {{1, 0, 4}, {1, 1, 5}, {1, 2, 6}};
    run_fallback("overlap, order of additions", 3, order, w_order, 0, 3);
    /* disjoint ranges, but along two axes: no concat */
    const fb_use axes[2] = {{1, 0, 7}, {0, 2, 4}};
    run_fallback("slices along two axes", 2, axes, w_plain, 0, 2);
    /* 20 disjoint columns tile the axis, but 20 parts are more than one concat takes */
    fb_use cols[FB_C];
    for (int k = 0; k < FB_C; k++) cols[k] = (fb_use){1, k, k + 1};
    run_fallback("20 parts", FB_C, cols, w_plain, 0, FB_C);
    /* 15 parts and a gap at the end: 16 concat inputs, the most it takes; 16 and a gap: 17 */
    run_fallback("15 parts and a gap", 15, cols, w_plain, 1, 0);
    run_fallback("16 parts and a gap", 16, cols, w_plain, 0, 16);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    static const slice_case cases[] = {
        // three slices tiling the last axis, out of order: one concat
        {"tiling", 3, {2, 0, 4}, {4, 2, 6}, -1, 1, 0, 0},
        // the same with a use of x that is no slice, first or last: the concat is added to
        // its gradient
        {"tiling, whole first", 3, {0, 3, 5}, {3, 5, 6}, 0, 1, 0, 0},
        {"tiling, whole last", 3, {0, 3, 5}, {3, 5, 6}, 3, 1, 0, 0},
        // that use between the slices: the two after it make a concat (zeros where the
        // first is), added before that use's contribution; the first is added after it
        {"tiling, whole between", 3, {0, 2, 4}, {2, 4, 6}, 1, 1, 1, 1},
        // a gap at 2: zeros there
        {"gap", 2, {0, 3}, {2, 6}, -1, 1, 1, 0},
        // gaps at both ends, an empty slice in the middle
        {"gaps at the ends", 3, {1, 3, 3}, {3, 3, 5}, -1, 1, 2, 0},
        // one slice of it all and an empty one: the slice's gradient itself
        {"whole slice", 2, {0, 4}, {6, 4}, -1, 0, 0, 0},
        // overlapping ranges: a slice_grad each, added
        {"overlap", 2, {0, 2}, {4, 6}, -1, 0, 0, 2},
        {"overlap of three", 3, {0, 1, 3}, {3, 6, 6}, -1, 0, 0, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    test_split_last_axis();
    test_fallbacks();
    return tu_finish("test_slice_grads");
}
