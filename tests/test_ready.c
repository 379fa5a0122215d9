/* gd_program_on_ready: a callback per target, called during the run as soon as the
 * target's value is final — once per run, in the order of the actions that finish the
 * targets (not the order they were given or added in), with the value readable and equal
 * to what the run leaves; a failing callback fails the run with its message; what is not a
 * target is refused. The graph: a = x W1, b = tanh(a), c = b W2, loss = sum(c), and the
 * backward, whose W2 gradient is finished before W1's.
 *
 * On a backend with an executor (the test device), a callback ends the segment there: it
 * fires after the segments before it ran, not after the whole run; a callback on a set of
 * targets fires once, after the last of them. */
#include "gradus.h"
#include "testdev_util.h"

#include <stdlib.h>

enum { T_A, T_B, T_C, T_LOSS, T_G2, T_G1, NT };

typedef struct seen {
    gd_tensor *t[NT];
    int order[4 * NT], n;    /* targets in the order their callbacks ran */
    float val[NT][64];       /* each target's value as read in its callback */
    size_t numel[NT];
    int fail_on;             /* a target whose callback fails, or -1 */
} seen;

typedef struct hook_arg {
    seen *s;
    int which;
} hook_arg;

static gd_status on_ready(void *user, gd_tensor *t)
{
    hook_arg *h = user;
    seen *s = h->s;
    CHECK(t == s->t[h->which], "callback %d got another tensor", h->which);
    if (s->n < 4 * NT) s->order[s->n++] = h->which;
    if (h->which == s->fail_on) return gd_ctx_fail(ctx, GD_ERR_INVALID, "callback %d says no", h->which);
    gd_status st = gd_tensor_read(t, s->val[h->which], s->numel[h->which] * sizeof(float));
    CHECK(st == GD_OK, "target %d unreadable in its callback: %s", h->which, gd_ctx_error(ctx));
    return GD_OK;
}

static void fill(float *v, size_t n, float a, float b)
{
    for (size_t i = 0; i < n; i++) v[i] = a + b * (float)((i * 7) % 11) / 11.0f;
}

/* ---- the test device: segments end where callbacks fire ---------------------------------- */

typedef struct seg_seen {
    gd_ctx *c;
    int64_t runs[4]; /* the executor's segment runs when each callback fired */
    gd_tensor *got[4];
    int n;
} seg_seen;

static gd_status on_seg(void *user, gd_tensor *t)
{
    seg_seen *s = user;
    if (s->n < 4) {
        s->runs[s->n] = td_stats(s->c)->runs;
        s->got[s->n++] = t;
    }
    return GD_OK;
}

static void executor_segments(void)
{
    gd_ctx *c = td_new_ctx("testdev", 0);
    if (c == NULL) return;
    gd_graph *g = gd_graph_new(c);
    int64_t s4[2] = {4, 4};
    float w[16];
    fill(w, 16, -0.4f, 0.8f);
    gd_tensor *X = gd_input(g, "x", GD_F32, 2, s4), *W = gd_param(g, "w", GD_F32, 2, s4);
    CHECK(gd_tensor_write(X, w, sizeof w) == GD_OK && gd_tensor_write(W, w, sizeof w) == GD_OK, "write: %s",
          gd_ctx_error(c));
    /* three products in a row: all on the test device, one segment without callbacks */
    gd_tensor *a = gd_matmul(X, W, 0, 0), *b = gd_matmul(a, W, 0, 0), *d = gd_matmul(b, W, 0, 0);
    gd_program *p = gd_compile(g, 3, (gd_tensor *[]){a, b, d}, 0);
    CHECK(p != NULL, "compile: %s", gd_ctx_error(c));
    if (p == NULL) goto out;
    CHECK(p->n_segs == 1, "%d segments before any callback, want 1", p->n_segs);
    seg_seen s = {.c = c};
    CHECK(gd_program_on_ready(p, a, on_seg, &s) == GD_OK, "on_ready: %s", gd_ctx_error(c));
    CHECK(gd_program_on_ready_all(p, 2, (gd_tensor *[]){d, a}, on_seg, &s) == GD_OK, "on_ready_all: %s",
          gd_ctx_error(c));
    CHECK(p->n_segs == 2, "%d segments with a callback after the first product, want 2", p->n_segs);
    for (int run = 0; run < 2; run++) {
        s.n = 0;
        int64_t r0 = td_stats(c)->runs;
        CHECK(gd_program_run(p) == GD_OK, "run: %s", gd_ctx_error(c));
        CHECK(s.n == 2, "run %d: %d callbacks, want 2", run, s.n);
        CHECK(s.runs[0] == r0 + 1, "run %d: a's callback after %lld segment runs, want 1 (the segment ends there)",
              run, (long long)(s.runs[0] - r0));
        CHECK(s.runs[1] == r0 + 2, "run %d: the set's callback after %lld segment runs, want 2", run,
              (long long)(s.runs[1] - r0));
        CHECK(s.got[0] == a && s.got[1] == d, "run %d: the callbacks got the wrong tensors", run);
    }
    gd_program_free(p);
    /* an update's result (a state written in place, as a data-parallel job's gradient sums
     * are) fires after the action that writes it, not at the end of the run */
    {
        gd_tensor *S = gd_state(g, "acc", GD_F32, 2, s4);
        gd_tensor *acc = gd_assign(S, gd_add(S, a));
        gd_tensor *late = gd_matmul(gd_matmul(gd_relu(a), W, 0, 0), W, 0, 0);
        gd_program *q = gd_compile(g, 2, (gd_tensor *[]){acc, late}, 0);
        CHECK(q != NULL, "compile: %s", gd_ctx_error(c));
        seg_seen u = {.c = c};
        if (q != NULL) {
            CHECK(gd_program_on_ready(q, acc, on_seg, &u) == GD_OK, "on_ready: %s", gd_ctx_error(c));
            int64_t r0 = td_stats(c)->runs;
            CHECK(gd_program_run(q) == GD_OK, "run: %s", gd_ctx_error(c));
            int64_t total = td_stats(c)->runs - r0;
            CHECK(u.n == 1 && u.runs[0] - r0 < total, "the update's callback after %lld of %lld segment runs",
                  (long long)(u.n ? u.runs[0] - r0 : -1), (long long)total);
            gd_program_free(q);
        }
    }
    p = gd_compile(g, 3, (gd_tensor *[]){a, b, d}, 0);
    if (p == NULL) goto out;
    /* a set with a stranger in it is refused whole */
    CHECK(gd_program_on_ready_all(p, 2, (gd_tensor *[]){a, X}, on_seg, &s) == GD_ERR_INVALID,
          "a set with a non-target was accepted");
    CHECK(gd_program_on_ready_all(p, 0, NULL, on_seg, &s) == GD_ERR_INVALID, "an empty set was accepted");
    gd_program_free(p);
out:
    gd_graph_free(g);
    gd_ctx_free(c);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    gd_graph *g = fresh();
    int64_t xs[2] = {3, 4}, w1s[2] = {4, 5}, w2s[2] = {5, 2};
    float x[12], w1[20], w2[10];
    fill(x, 12, -0.5f, 1.0f);
    fill(w1, 20, -0.3f, 0.6f);
    fill(w2, 10, 0.2f, -0.7f);
    gd_tensor *X = in_f32(g, "x", 2, xs, x);
    gd_tensor *W1 = gd_param(g, "w1", GD_F32, 2, w1s), *W2 = gd_param(g, "w2", GD_F32, 2, w2s);
    CHECK(gd_tensor_write(W1, w1, sizeof w1) == GD_OK && gd_tensor_write(W2, w2, sizeof w2) == GD_OK, "params: %s",
          gd_ctx_error(ctx));
    seen s = {.fail_on = -1};
    s.t[T_A] = gd_matmul(X, W1, 0, 0);
    s.t[T_B] = gd_tanh(s.t[T_A]);
    s.t[T_C] = gd_matmul(s.t[T_B], W2, 0, 0);
    s.t[T_LOSS] = gd_sum(s.t[T_C], 0, NULL, 0);
    CHECK(gd_backward(g, s.t[T_LOSS]) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    s.t[T_G2] = gd_grad(g, W2);
    s.t[T_G1] = gd_grad(g, W1);
    for (int i = 0; i < NT; i++) {
        CHECK(s.t[i] != NULL, "target %d not built: %s", i, gd_ctx_error(ctx));
        if (s.t[i] == NULL) return tu_finish("test_ready");
        s.numel[i] = (size_t)gd_tensor_numel(s.t[i]);
    }
    /* given (and hooked) in an order unlike the actions' */
    int given[NT] = {T_G1, T_C, T_LOSS, T_A, T_G2, T_B};
    gd_tensor *targets[NT];
    for (int i = 0; i < NT; i++) targets[i] = s.t[given[i]];
    gd_program *p = gd_compile(g, NT, targets, 0);
    CHECK(p != NULL, "compile: %s", gd_ctx_error(ctx));
    if (p == NULL) return tu_finish("test_ready");
    hook_arg args[NT];
    for (int i = 0; i < NT; i++) {
        args[given[i]] = (hook_arg){&s, given[i]};
        CHECK(gd_program_on_ready(p, s.t[given[i]], on_ready, &args[given[i]]) == GD_OK, "on_ready: %s",
              gd_ctx_error(ctx));
    }
    /* not a target, no callback */
    CHECK(gd_program_on_ready(p, X, on_ready, &args[0]) == GD_ERR_INVALID, "a non-target was accepted");
    CHECK(strstr(gd_ctx_error(ctx), "not a target") != NULL, "message: %s", gd_ctx_error(ctx));
    CHECK(gd_program_on_ready(p, s.t[T_A], NULL, NULL) == GD_ERR_INVALID, "a NULL callback was accepted");

    for (int run = 0; run < 2; run++) {
        if (run == 1) { /* new data: the callbacks see this run's values, not the last */
            fill(x, 12, 0.4f, -1.3f);
            CHECK(gd_tensor_write(X, x, sizeof x) == GD_OK, "write: %s", gd_ctx_error(ctx));
        }
        s.n = 0;
        memset(s.val, 0, sizeof s.val);
        CHECK(gd_program_run(p) == GD_OK, "run %d: %s", run, gd_ctx_error(ctx));
        CHECK(s.n == NT, "run %d: %d callbacks, want %d (one per target)", run, s.n, NT);
        /* the forward in order, then the loss, then W2's gradient before W1's */
        static const int want[NT] = {T_A, T_B, T_C, T_LOSS, T_G2, T_G1};
        for (int i = 0; i < NT && i < s.n; i++)
            CHECK(s.order[i] == want[i], "run %d: callback %d was for target %d, want %d", run, i, s.order[i], want[i]);
        for (int k = 0; k < NT; k++) {
            float after[64];
            CHECK(gd_tensor_read(s.t[k], after, s.numel[k] * sizeof(float)) == GD_OK, "read: %s", gd_ctx_error(ctx));
            CHECK(memcmp(after, s.val[k], s.numel[k] * sizeof(float)) == 0,
                  "run %d: target %d read in its callback differs from its value after the run", run, k);
        }
        /* a value that could be the last run's: x changed, so a changed */
        if (run == 1) CHECK(fabsf(s.val[T_A][0] - (x[0] * w1[0] + x[1] * w1[5] + x[2] * w1[10] + x[3] * w1[15])) < 1e-5f,
                            "a[0] = %g in its callback", s.val[T_A][0]);
    }

    /* a callback that fails fails the run with its message, and the later ones do not run */
    s.n = 0;
    s.fail_on = T_C;
    CHECK(gd_program_run(p) == GD_ERR_INVALID, "a failing callback did not fail the run");
    CHECK(strstr(gd_ctx_error(ctx), "callback 2 says no") != NULL, "message: %s", gd_ctx_error(ctx));
    CHECK(s.n == 3, "%d callbacks ran up to the failing one, want 3", s.n);
    s.fail_on = -1;
    s.n = 0;
    CHECK(gd_program_run(p) == GD_OK && s.n == NT, "after a failure: %s, %d callbacks", gd_ctx_error(ctx), s.n);

    gd_program_free(p);
    gd_graph_free(g);
    executor_segments();
    return tu_finish("test_ready");
}
