/* init.c — filling parameters from their initializers. The values come from the random
 * ops (counter-based), run on the reference, so one seed gives the same model on every
 * backend. */
#include "core.h"


gd_status gd_param_set_init(gd_tensor *param, gd_init kind, double std)
{
    if (param == NULL) return GD_ERR_INVALID;
    gd_ctx *ctx = param->g->ctx;
    if (param->kind != GD_V_PARAM)
        return gd_fail(ctx, GD_ERR_INVALID, "init '%s': only parameters have initializers", gd_tensor_name(param));
    if ((int)kind < GD_INIT_NONE || (int)kind > GD_INIT_NORMAL)
        return gd_fail(ctx, GD_ERR_INVALID, "init '%s': unknown initializer %d", gd_tensor_name(param), (int)kind);
    if (kind == GD_INIT_NORMAL && !(std >= 0 && std < 1e30))
        return gd_fail(ctx, GD_ERR_INVALID, "init '%s': std = %g", gd_tensor_name(param), std);
    param->init_kind = kind;
    param->init_std = std;
    return GD_OK;
}

gd_status gd_graph_init_params(gd_graph *g, uint64_t seed)
{
    if (g == NULL) return GD_ERR_INVALID;
    gd_ctx *ctx = g->ctx;
    const gd_core_hooks *hooks = &ctx->reg->hooks;
    if (hooks->initializer == NULL) return gd_fail(ctx, GD_ERR_UNSUPPORTED, "init: no initializers are registered");
    /* all the parameters (and states) need, checked before the first is stored */
    gd_status st = gd_leaves_reserve(g, "init", NULL);
    if (st != GD_OK) return st;
    int pref = ctx->preferred;
    ctx->preferred = 0; /* build the values on the reference */
    for (int i = 0; i < g->n_params && st == GD_OK; i++) {
        gd_tensor *p = g->params[i];
        if (p->init_kind == GD_INIT_NONE) continue;
        gd_graph *tmp = gd_graph_new(ctx);
        if (tmp == NULL) {
            st = GD_ERR_NOMEM;
            break;
        }
        ctx->preferred = 0; /* the values are made on the reference */
        /* each parameter gets its own stream of numbers: seed mixed with its index */
        uint64_t s = seed * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xBF58476D1CE4E5B9ull + 1;
        gd_tensor *v = hooks->initializer(tmp, p->init_kind, p->init_std, (gd_dtype)p->dtype, p->ndim, p->shape, s);
        gd_program *prog = v != NULL ? gd_compile(tmp, 1, &v, 0) : NULL;
        size_t bytes = gd_value_bytes(p);
        void *host = gd_malloc(bytes ? bytes : 1);
        if (host == NULL) st = gd_fail(ctx, GD_ERR_NOMEM, "init '%s': out of memory", gd_tensor_name(p));
        else if (prog == NULL) st = ctx->status ? ctx->status : GD_ERR_INVALID;
        if (st == GD_OK) st = gd_program_run(prog);
        if (st == GD_OK) st = gd_tensor_read(v, host, bytes);
        ctx->preferred = pref;
        if (st == GD_OK) st = gd_tensor_write(p, host, bytes);
        ctx->preferred = 0;
        gd_free(host);
        gd_program_free(prog);
        gd_graph_free(tmp);
    }
    ctx->preferred = pref;
    return st;
}
