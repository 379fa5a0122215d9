/* Out of memory can not crash: every allocation the library makes while creating a
 * context, building a CNN training step (model, loss, backward pass, AdamW), compiling it,
 * initializing it, running it and freeing it is failed in turn, the N-th on the N-th
 * pass. Each pass must end in GD_ERR_NOMEM from the call that hit the failure (never a
 * crash, never another status), and free everything: run under ASan's leak checker in
 * CI, a pass that leaks fails the test at exit. */
#include "core.h"
#include "gradus_classifier.h"

#include <stdio.h>
#include <string.h>

enum { B = 4 };

/* The status of the step: GD_OK, or that of the first call that failed. */
static gd_status step(int *reached_run)
{
    gd_ctx *ctx = NULL;
    gd_status st = gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1});
    if (st != GD_OK) return st;
    gd_graph *g = gd_graph_new(ctx);
    gd_program *p = NULL;
    if (g == NULL) {
        st = ctx->status;
        goto done;
    }
    gd_tensor *x = gd_input(g, "x", GD_F32, 4, (int64_t[]){B, 1, 28, 28});
    gd_tensor *y = gd_input(g, "y", GD_I32, 1, (int64_t[]){B});
    gd_tensor *loss = gd_cross_entropy(gd_nn_cnn(x), y, -100);
    if (loss == NULL) {
        st = ctx->status;
        goto done;
    }
    if ((st = gd_backward(g, loss)) != GD_OK) goto done;
    if ((st = gd_optimizer_adamw(g, &(gd_adamw_config){.lr = 1e-3})) != GD_OK) goto done;
    p = gd_compile(g, 1, &loss, GD_COMPILE_UPDATES);
    if (p == NULL) {
        st = ctx->status;
        goto done;
    }
    if ((st = gd_graph_init_params(g, 3)) != GD_OK) goto done;
    float xs[B * 28 * 28];
    int32_t ys[B];
    for (int i = 0; i < B * 28 * 28; i++) xs[i] = (float)((i * 37) % 101) / 101.0f;
    for (int i = 0; i < B; i++) ys[i] = i % 10;
    if ((st = gd_tensor_write(x, xs, sizeof xs)) != GD_OK) goto done;
    if ((st = gd_tensor_write(y, ys, sizeof ys)) != GD_OK) goto done;
    *reached_run = 1;
    if ((st = gd_program_run(p)) != GD_OK) goto done;
    float l;
    st = gd_tensor_read(loss, &l, sizeof l);
done:
    if (st != GD_OK && st != GD_ERR_NOMEM) printf("  %s: %s\n", gd_status_name(st), gd_ctx_error(ctx));
    gd_program_free(p);
    gd_graph_free(g);
    gd_ctx_free(ctx);
    return st;
}

int main(void)
{
    int fails = 0, runs_reached = 0;
    int64_t n;
    for (n = 1;; n++) {
        int reached = 0;
        gd_alloc_fail_at(n);
        gd_status st = step(&reached);
        int64_t made = gd_alloc_count();
        gd_alloc_fail_at(0);
        runs_reached += reached;
        if (made < n) { /* the n-th allocation never came: every point has been failed */
            if (st != GD_OK) {
                printf("FAIL: with no allocation failed the step returned %s\n", gd_status_name(st));
                fails++;
            }
            break;
        }
        if (st != GD_ERR_NOMEM) {
            printf("FAIL: allocation %lld failed, the step returned %s (want out of memory)\n", (long long)n,
                   gd_status_name(st));
            if (++fails > 20) break;
        }
    }
    printf("allocation failure: %lld points failed in turn (%d after the step was built), %d wrong statuses\n",
           (long long)(n - 1), runs_reached, fails);
    return fails != 0;
}
