/* The modules of plugin ABI 2.0, each through the test device, each shown from the host's
 * side (what the planner made) and the device's (what its counters saw):
 *  - views: a kernel registered GDP_KERNEL_STRIDED gets transposed, sliced and broadcast
 *    inputs as they are, with no copy; one that is not gets a copy (itself placed on the
 *    device's strided copy kernel);
 *  - workspaces: a kernel that declares one finds it planned, on its device, at
 *    node->workspace;
 *  - the executor: segments prepared once and run every step; released and prepared
 *    again after another program of the graph moved the arena; off with
 *    GRADUS_EXECUTOR=0;
 *  - events: a host kernel reading a host-visible device's memory in place waits on the
 *    event of the work that wrote it, not on a full synchronize;
 *  - poll_error: bad data a device kernel found is an INVALID run naming the node. */
#include "testdev_util.h"

#include <math.h>
#include <stdlib.h>

/* ---- views -------------------------------------------------------------------------- */

static void test_views(void)
{
    gd_graph *g = fresh();
    float xs[12], ys[12], bs[3];
    for (int i = 0; i < 12; i++) xs[i] = (float)i - 5.5f, ys[i] = 0.25f * (float)i;
    for (int i = 0; i < 3; i++) bs[i] = 100.0f * (float)(i + 1);
    gd_tensor *x = in_f32(g, "x", 2, (int64_t[]){3, 4}, xs);
    gd_tensor *y = in_f32(g, "y", 2, (int64_t[]){4, 3}, ys);
    gd_tensor *b = in_f32(g, "b", 1, (int64_t[]){3}, bs);
    gd_tensor *xt = gd_transpose(x, 0, 1);                                     // (4, 3), strides (1, 4)
    gd_tensor *t[4] = {
        gd_add(xt, y),                                                         // transposed
        gd_add(y, gd_expand(b, 2, (int64_t[]){4, 3})),                         // broadcast: stride 0
        gd_add(gd_slice(xt, 1, 1, 3), gd_slice(y, 1, 0, 2)),                     // sliced views of both: (4, 2)
        gd_relu(xt),                                                           // relu takes contiguous only
    };
    const testdev_stats *st = td_stats(ctx);
    int64_t strided0 = st->strided_launches;
    gd_program *p = compile_run(g, 4, t);
    if (p == NULL) return;
    CHECK(td_count_nodes(p, "add", "testdev") == 3, "the three adds are not all on testdev");
    CHECK(td_count_views(p, "permute") == 1 && td_count_views(p, "expand") == 1 && td_count_views(p, "slice") == 2,
          "transpose, expand and slice are not all views");
    /* one copy in the whole program: in front of relu, on the device's strided copy */
    CHECK(td_count_nodes(p, "copy", NULL) == 1 && td_count_nodes(p, "copy", "testdev") == 1,
          "copies: %d, on testdev %d (want exactly the one in front of relu, on testdev)", td_count_nodes(p, "copy", NULL),
          td_count_nodes(p, "copy", "testdev"));
    int ra = td_action_of(p, "relu", 0), ca = td_action_of(p, "copy", 0);
    CHECK(ra >= 0 && ca >= 0 && ca < ra && p->pn[p->acts[ra].pnode].node->in[0] == p->pn[p->acts[ca].pnode].node->out[0],
          "relu does not read the inserted copy");
    CHECK(ra >= 0 && gdp_is_contiguous(td_desc(p, ra)->in[0]), "relu was given a strided input");
    CHECK(td_count_transfers(p) == 0, "%d copies between backends, none needed", td_count_transfers(p));
    /* the adds see the views themselves: strides in the descriptors, data at the offsets */
    int a0 = td_action_of(p, "add", 0), a1 = td_action_of(p, "add", 1), a2 = td_action_of(p, "add", 2);
    if (a0 >= 0 && a1 >= 0 && a2 >= 0) {
        const gdp_tensor *v0 = td_desc(p, a0)->in[0], *v1 = td_desc(p, a1)->in[1], *v2 = td_desc(p, a2)->in[0];
        CHECK(v0->stride[0] == 1 && v0->stride[1] == 4, "transposed input strides (%lld, %lld), want (1, 4)",
              (long long)v0->stride[0], (long long)v0->stride[1]);
        CHECK(v1->stride[0] == 0 && v1->stride[1] == 1, "expanded input strides (%lld, %lld), want (0, 1)",
              (long long)v1->stride[0], (long long)v1->stride[1]);
        CHECK((char *)v2->data - (char *)v0->data == 4 * (ptrdiff_t)sizeof(float) && v2->stride[0] == 1 && v2->stride[1] == 4,
              "the sliced view does not start 4 elements into x with strides (1, 4)");
    }
    CHECK(st->strided_launches - strided0 == 4, "%lld launches saw strided inputs, want 4 (3 adds and the copy)",
          (long long)(st->strided_launches - strided0));
    double w[4][12];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            double xv = xs[j * 4 + i], yv = ys[i * 3 + j]; // xt[i][j] = x[j][i]
            w[0][i * 3 + j] = xv + yv;
            w[1][i * 3 + j] = yv + bs[j];
            w[3][i * 3 + j] = xv > 0 ? xv : 0;
        }
    for (int i = 0; i < 4; i++) // s3[i][j] = xt[i][1 + j] + y[i][j]
        for (int j = 0; j < 2; j++) w[2][i * 2 + j] = (double)xs[(1 + j) * 4 + i] + ys[i * 3 + j];
    expect_tensor("transposed add", t[0], w[0], 12, 0);
    expect_tensor("broadcast add", t[1], w[1], 12, 0);
    expect_tensor("sliced add", t[2], w[2], 8, 0);
    expect_tensor("relu of a transpose", t[3], w[3], 12, 0);
    gd_program_free(p);
    gd_graph_free(g);
}

/* ---- workspaces ----------------------------------------------------------------------- */

static void test_workspace(void)
{
    gd_graph *g = fresh();
    float as[12], bs[20];
    for (int i = 0; i < 12; i++) as[i] = 0.5f * (float)i - 2.0f;
    for (int i = 0; i < 20; i++) bs[i] = (float)((i * 7) % 5) - 1.0f;
    gd_tensor *a = in_f32(g, "a", 2, (int64_t[]){3, 4}, as);  // (M, K)
    gd_tensor *bt = in_f32(g, "b", 2, (int64_t[]){5, 4}, bs); // (N, K)
    gd_tensor *t[2] = {gd_matmul(a, bt, 0, 1), gd_matmul(a, a, 0, 1)}; // (3, 5), (3, 3)
    const testdev_stats *st = td_stats(ctx);
    int64_t ws0 = st->workspace_launches;
    gd_program *p = compile_run(g, 2, t);
    if (p == NULL) return;
    for (int k = 0; k < 2; k++) {
        int act = td_action_of(p, "matmul", k);
        CHECK(act >= 0 && strcmp(p->pn[p->acts[act].pnode].be->name, "testdev") == 0, "matmul %d not on testdev", k);
        if (act < 0) continue;
        int ws = p->acts[act].ws;
        size_t want = (size_t)(k == 0 ? 4 * 5 : 4 * 3) * sizeof(float); // b^T (K, N) packed
        CHECK(ws >= 0 && p->slots[ws].bytes == want && strcmp(p->slots[ws].be->name, "testdev") == 0,
              "matmul %d: workspace slot %d of %zu bytes on %s, want %zu on testdev", k, ws,
              ws >= 0 ? p->slots[ws].bytes : 0, ws >= 0 ? p->slots[ws].be->name : "-", want);
        const gdp_node *d = td_desc(p, act);
        CHECK(d->workspace != NULL && d->workspace_bytes == want, "matmul %d descriptor: workspace %p, %zu bytes", k,
              d->workspace, d->workspace_bytes);
        CHECK(ws < 0 || (char *)d->workspace == (char *)gd_slot_ptr(p, ws), "the descriptor's workspace is not its slot");
    }
    CHECK(st->workspace_launches - ws0 == 2, "%lld launches used a workspace, want 2",
          (long long)(st->workspace_launches - ws0));
    CHECK(gd_program_planned_bytes(p, "testdev") >= 3 * 5 * sizeof(float) + 4 * 5 * sizeof(float),
          "planned %zu bytes on testdev: less than an output and its workspace", gd_program_planned_bytes(p, "testdev"));
    double w0[15], w1[9];
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 5; j++) {
            double s = 0;
            for (int k = 0; k < 4; k++) s += (double)as[i * 4 + k] * bs[j * 4 + k];
            w0[i * 5 + j] = s;
        }
        for (int j = 0; j < 3; j++) {
            double s = 0;
            for (int k = 0; k < 4; k++) s += (double)as[i * 4 + k] * as[j * 4 + k];
            w1[i * 3 + j] = s;
        }
    }
    expect_tensor("a @ b^T", t[0], w0, 15, 1e-6);
    expect_tensor("a @ a^T", t[1], w1, 9, 1e-6);
    gd_program_free(p);

    /* without a transpose the kernel declares none, and none is planned */
    gd_tensor *c = gd_matmul(a, gd_transpose(bt, 0, 1), 0, 0); // b^T as a view: copied, then plain
    p = compile_run(g, 1, &c);
    if (p != NULL) {
        int act = td_action_of(p, "matmul", 0);
        CHECK(act >= 0 && p->acts[act].ws < 0 && td_desc(p, act)->workspace == NULL, "a plain matmul got a workspace");
        CHECK(td_count_nodes(p, "copy", "testdev") == 1, "no copy of the transposed view in front of matmul");
        expect_tensor("a @ (b^T view)", c, w0, 15, 1e-6);
        gd_program_free(p);
    }
    gd_graph_free(g);
}

/* ---- the executor ------------------------------------------------------------------- */

/* relu(x + y) on testdev, exp on the reference, + y on testdev: two segments. */
static gd_tensor *two_segments(gd_graph *g, const float *xs, const float *ys)
{
    gd_tensor *x = in_f32(g, "x", 1, (int64_t[]){8}, xs), *y = in_f32(g, "y", 1, (int64_t[]){8}, ys);
    return gd_add(gd_exp(gd_relu(gd_add(x, y))), y);
}

static void expect_two_segments(gd_tensor *z, const float *xs, const float *ys)
{
    double w[8];
    for (int i = 0; i < 8; i++) {
        double s = (float)(xs[i] + ys[i]);
        w[i] = (float)exp(s > 0 ? s : 0) + ys[i];
    }
    expect_tensor("relu/exp/add", z, w, 8, 1e-6);
}

static void test_executor(void)
{
    gd_graph *g = fresh();
    float xs[8], ys[8];
    for (int i = 0; i < 8; i++) xs[i] = 0.3f * (float)i - 1.0f, ys[i] = 0.1f * (float)(i % 3);
    gd_tensor *z = two_segments(g, xs, ys);
    const testdev_stats *st = td_stats(ctx);
    testdev_stats s0 = *st;
    uint64_t compiles = ctx->compiles;
    gd_program *p = gd_compile(g, 1, &z, 0);
    CHECK(p != NULL, "compile: %s", gd_ctx_error(ctx));
    if (p == NULL) return;
    /* (a) prepared once, at compile time; run every step */
    CHECK(p->n_segs == 2, "%d segments, want 2 (the reference's exp splits them)", p->n_segs);
    CHECK(st->prepares - s0.prepares == 2 && st->segment_nodes - s0.segment_nodes == 3,
          "compile prepared %lld segments of %lld nodes, want 2 of 3", (long long)(st->prepares - s0.prepares),
          (long long)(st->segment_nodes - s0.segment_nodes));
    for (int step = 0; step < 5; step++) {
        xs[step] += 1.0f;
        gd_tensor_write(gd_graph_find(g, "x"), xs, sizeof xs);
        CHECK(gd_program_run(p) == GD_OK, "run %d: %s", step, gd_ctx_error(ctx));
        expect_two_segments(z, xs, ys);
    }
    CHECK(st->prepares - s0.prepares == 2, "runs prepared again: %lld prepares", (long long)(st->prepares - s0.prepares));
    CHECK(st->runs - s0.runs == 10 && st->launches - s0.launches == 15, "5 runs: %lld segment runs, %lld launches; want 10, 15",
          (long long)(st->runs - s0.runs), (long long)(st->launches - s0.launches));
    CHECK(ctx->compiles == compiles + 1, "running compiled again");

    /* (b) another program of the graph grows the arena: released, prepared at the next run */
    gd_backend *td = td_backend(ctx, "testdev");
    uint64_t gen = g->arena[td->index].gen;
    float big[64 * 64];
    for (int i = 0; i < 64 * 64; i++) big[i] = (float)(i % 13) * 0.01f;
    gd_tensor *m = in_f32(g, "m", 2, (int64_t[]){64, 64}, big);
    gd_tensor *mm = gd_matmul(gd_relu(m), m, 0, 0);
    gd_program *q = gd_compile(g, 1, &mm, 0);
    CHECK(q != NULL && gd_program_run(q) == GD_OK, "the bigger program: %s", gd_ctx_error(ctx));
    CHECK(g->arena[td->index].gen > gen, "the arena on testdev did not move (it should have grown)");
    testdev_stats s1 = *st;
    xs[7] = -3.0f;
    gd_tensor_write(gd_graph_find(g, "x"), xs, sizeof xs);
    CHECK(gd_program_run(p) == GD_OK, "run after the arena moved: %s", gd_ctx_error(ctx));
    expect_two_segments(z, xs, ys);
    CHECK(st->releases - s1.releases == 2 && st->prepares - s1.prepares == 2,
          "after the arena moved: %lld released, %lld prepared; want 2 and 2", (long long)(st->releases - s1.releases),
          (long long)(st->prepares - s1.prepares));
    CHECK(gd_program_run(p) == GD_OK && st->prepares - s1.prepares == 2, "prepared again on the run after that");
    gd_program_free(q);
    int64_t rel = st->releases;
    gd_program_free(p);
    CHECK(st->releases - rel == 2, "freeing the program released %lld segments, want 2", (long long)(st->releases - rel));

    /* (c) GRADUS_EXECUTOR=0: launched node by node */
    setenv("GRADUS_EXECUTOR", "0", 1);
    testdev_stats s2 = *st;
    p = gd_compile(g, 1, &z, 0);
    unsetenv("GRADUS_EXECUTOR");
    CHECK(p != NULL && p->n_segs == 0, "GRADUS_EXECUTOR=0: %d segments", p != NULL ? p->n_segs : -1);
    CHECK(p != NULL && gd_program_run(p) == GD_OK, "run without executor: %s", gd_ctx_error(ctx));
    expect_two_segments(z, xs, ys);
    CHECK(st->prepares == s2.prepares && st->runs == s2.runs && st->launches - s2.launches == 3,
          "GRADUS_EXECUTOR=0: %lld prepares, %lld segment runs, %lld launches; want 0, 0, 3",
          (long long)(st->prepares - s2.prepares), (long long)(st->runs - s2.runs), (long long)(st->launches - s2.launches));
    gd_program_free(p);
    gd_graph_free(g);
}

/* ---- events, through the host-visible variant ---------------------------------------- */

static void test_events(void)
{
    gd_ctx *keep = ctx;
    ctx = td_new_ctx("testdev_hostvis", 0);
    if (ctx == NULL) {
        ctx = keep;
        return;
    }
    const testdev_stats *st = td_stats(ctx);
    CHECK(st->host_visible == 1, "the host-visible variant says it is not");
    gd_graph *g = gd_graph_new(ctx);
    float xs[6] = {-1, 2, -3, 4, 0.5f, -0.25f};
    gd_tensor *x = in_f32(g, "x", 1, (int64_t[]){6}, xs);
    gd_tensor *z = gd_exp(gd_relu(x)); // relu on the device, exp on the host reading relu's output in place
    gd_program *p = gd_compile(g, 1, &z, 0);
    CHECK(p != NULL, "compile: %s", gd_ctx_error(ctx));
    if (p != NULL) {
        int ra = td_action_of(p, "relu", 0), ea = td_action_of(p, "exp", 0);
        CHECK(td_count_transfers(p) == 0, "the host reads host-visible memory through %d copies", td_count_transfers(p));
        CHECK(ra >= 0 && ea >= 0 && p->acts[ea].wait_before == ra && p->acts[ra].record_after && p->events[ra] != NULL,
              "exp does not wait on relu's event");
        testdev_stats s0 = *st;
        for (int run = 0; run < 3; run++) {
            for (int i = 0; i < 6; i++) xs[i] = -xs[i] * (float)(run + 1);
            gd_tensor_write(x, xs, sizeof xs);
            CHECK(gd_program_run(p) == GD_OK, "run: %s", gd_ctx_error(ctx));
            double w[6];
            for (int i = 0; i < 6; i++) w[i] = exp(xs[i] > 0 ? xs[i] : 0);
            /* the device ran relu only when the host waited for it: a host that did not wait
             * would have read the previous run's values */
            expect_tensor("exp(relu(x)) read in place", z, w, 6, 1e-6);
        }
        CHECK(st->event_records - s0.event_records == 3 && st->event_syncs - s0.event_syncs == 3,
              "3 runs: %lld events recorded, %lld waited on; want 3 and 3", (long long)(st->event_records - s0.event_records),
              (long long)(st->event_syncs - s0.event_syncs));
        CHECK(st->syncs == s0.syncs, "the runs synchronized the whole device %lld times", (long long)(st->syncs - s0.syncs));
        gd_program_free(p);
    }
    gd_graph_free(g);

    /* A host kernel reading a state the device updated in place during the previous run:
     * no device work of this run comes before it, so no event of this run marks that
     * update, and the host synchronizes the device instead. */
    g = gd_graph_new(ctx);
    float s0[4] = {0.5f, -1, 2, 0}, ones[4] = {1, 1, 1, 1};
    gd_tensor *s = gd_state(g, "s", GD_F32, 1, (int64_t[]){4}), *c = gd_state(g, "c", GD_F32, 1, (int64_t[]){4});
    gd_tensor_write(s, s0, sizeof s0);
    gd_tensor_write(c, ones, sizeof ones);
    z = gd_exp(s);                     // first in the program: reads s in place on the host
    gd_assign(s, gd_add(s, c));        // then s += 1, in place on the device
    p = gd_compile(g, 1, &z, GD_COMPILE_UPDATES);
    CHECK(p != NULL && td_count_nodes(p, "assign", "testdev") == 1, "assign not on testdev: %s", gd_ctx_error(ctx));
    for (int run = 0; run < 3 && p != NULL; run++) {
        int64_t syncs = st->syncs;
        CHECK(gd_program_run(p) == GD_OK, "run: %s", gd_ctx_error(ctx));
        CHECK(st->syncs == syncs + 1, "the run synchronized the device %lld times before reading s, want once",
              (long long)(st->syncs - syncs));
        double w[4];
        for (int i = 0; i < 4; i++) w[i] = exp(s0[i] + run);
        expect_tensor("exp of a state updated on the device by the run before", z, w, 4, 1e-6);
    }
    gd_program_free(p);
    gd_graph_free(g);
    gd_ctx_free(ctx);
    ctx = keep;
}

/* ---- bad data found on the device ------------------------------------------------------ */

static void test_poll_error(void)
{
    gd_graph *g = fresh();
    float table[15];
    for (int i = 0; i < 15; i++) table[i] = (float)i;
    gd_tensor *tab = in_f32(g, "table", 2, (int64_t[]){5, 3}, table);
    gd_tensor *ids = gd_input(g, "ids", GD_I64, 1, (int64_t[]){4});
    gd_tensor *e = gd_label(gd_embedding(tab, ids), "tok_emb");
    gd_tensor *t = gd_add(e, e);
    gd_program *p = gd_compile(g, 1, &t, 0);
    CHECK(p != NULL && td_count_nodes(p, "embedding", "testdev") == 1, "embedding not on testdev: %s", gd_ctx_error(ctx));
    if (p == NULL) return;
    const testdev_stats *st = td_stats(ctx);
    int64_t polls = st->polls, bad[4] = {1, 4, 7, 0}, good[4] = {4, 0, 2, 2};
    gd_tensor_write(ids, bad, sizeof bad);
    gd_status s = gd_program_run(p);
    CHECK(s == GD_ERR_INVALID, "an id out of range: status %d, want INVALID: %s", s, gd_ctx_error(ctx));
    check_error("id out of range", (const char *[]){"tok_emb", "node ", "is 7", "out of range", NULL});
    CHECK(st->polls > polls, "the host did not poll the device at the end of the run");
    gd_tensor_write(ids, good, sizeof good);
    s = gd_program_run(p);
    CHECK(s == GD_OK, "a good run after a bad one: %s", gd_ctx_error(ctx));
    double w[12];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++) w[r * 3 + c] = 2.0 * table[good[r] * 3 + c];
    expect_tensor("embedding", t, w, 12, 0);
    gd_program_free(p);
    gd_graph_free(g);
}

int main(void)
{
    /* the defaults are what is tested: no debugging switches from the environment */
    unsetenv("GRADUS_EXECUTOR");
    unsetenv("GRADUS_SYNC");
    ctx = td_new_ctx("testdev", 0);
    if (ctx == NULL) return 1;
    test_views();
    test_workspace();
    test_executor();
    test_events();
    test_poll_error();
    return tu_finish("abi modules");
}
