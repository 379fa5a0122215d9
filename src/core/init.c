/* init.c — filling parameters from their initializers. The values come from the random
 * ops (counter-based), run on the reference, so one seed gives the same model on every
 * backend. */
#include "core.h"

#include <stdlib.h>

gd_status gd_graph_init_params(gd_graph *g, uint64_t seed)
{
    if (g == NULL) return GD_ERR_INVALID;
    gd_ctx *ctx = g->ctx;
    int pref = ctx->preferred;
    ctx->preferred = 0; /* build the values on the reference */
    gd_status st = GD_OK;
    for (int i = 0; i < g->n_params && st == GD_OK; i++) {
        gd_tensor *p = g->params[i];
        if (p->init_kind == GD_INIT_NONE) continue;
        gd_graph *tmp = gd_graph_new(ctx);
        if (tmp == NULL) {
            st = GD_ERR_NOMEM;
            break;
        }
        /* each parameter gets its own stream of numbers: seed mixed with its index */
        uint64_t s = seed * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xBF58476D1CE4E5B9ull + 1;
        gd_tensor *v = NULL;
        gd_dtype dt = (gd_dtype)p->dtype;
        switch (p->init_kind) {
        case GD_INIT_ZEROS: v = gd_zeros(tmp, dt, p->ndim, p->shape); break;
        case GD_INIT_ONES: v = gd_ones(tmp, dt, p->ndim, p->shape); break;
        case GD_INIT_KAIMING: v = gd_init_kaiming(tmp, dt, p->ndim, p->shape, s); break;
        case GD_INIT_XAVIER: v = gd_init_xavier(tmp, dt, p->ndim, p->shape, s); break;
        case GD_INIT_NORMAL: v = gd_rand_normal(tmp, dt, p->ndim, p->shape, 0.0, p->init_std, s); break;
        default: break;
        }
        gd_program *prog = gd_compile(tmp, 1, &v, 0);
        size_t bytes = gd_value_bytes(p);
        void *host = malloc(bytes ? bytes : 1);
        if (prog == NULL || host == NULL) st = host == NULL ? gd_fail(ctx, GD_ERR_NOMEM, "init: out of memory") : GD_ERR_INVALID;
        if (st == GD_OK) st = gd_program_run(prog);
        if (st == GD_OK) st = gd_tensor_read(v, host, bytes);
        ctx->preferred = pref;
        if (st == GD_OK) st = gd_tensor_write(p, host, bytes);
        ctx->preferred = 0;
        free(host);
        gd_program_free(prog);
        gd_graph_free(tmp);
    }
    ctx->preferred = pref;
    return st;
}
