/* harness.c — see harness.h. */
#include "harness.h"
#include "program.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


void gd_case_prog_free(gd_case_prog *cp)
{
    gd_program_free(cp->prog);
    gd_graph_free(cp->g);
    for (int i = 0; i < GDP_MAX_INPUTS; i++) free(cp->in_host[i]);
    for (int i = 0; i < GDP_MAX_OUTPUTS; i++) free(cp->r_host[i]);
    memset(cp, 0, sizeof *cp);
}

void gd_case_out_free(gd_case_out *o)
{
    for (int i = 0; i < o->n; i++) free(o->t[i].data);
    memset(o, 0, sizeof *o);
}

gd_status gd_case_build(gd_ctx *ctx, const gd_op_def *op, const gd_case *c, int backend, int backward,
                        uint64_t seed, gd_case_prog *cp)
{
    memset(cp, 0, sizeof *cp);
    cp->ctx = ctx;
    int pref = ctx->preferred, no_views = ctx->no_views;
    ctx->preferred = backend;
    /* the oracle runs view ops through their reference kernels, not the view machinery */
    ctx->no_views = ctx->backends[backend]->is_ref;
    gd_status st = GD_OK;
    cp->g = gd_graph_new(ctx);
    if (cp->g == NULL) {
        ctx->preferred = pref;
        return GD_ERR_NOMEM;
    }
    cp->n_in = c->n_in;
    for (int k = 0; k < c->n_in && st == GD_OK; k++) {
        char name[16];
        snprintf(name, sizeof name, "in%d", k);
        const gd_case_input *ci = &c->in[k];
        cp->in[k] = gd_input(cp->g, name, (gd_dtype)ci->dtype, ci->ndim, ci->shape);
        size_t bytes = (size_t)gd_case_numel(ci) * gdp_dtype_size(ci->dtype);
        cp->in_host[k] = malloc(bytes ? bytes : 1);
        if (cp->in[k] == NULL || cp->in_host[k] == NULL) st = GD_ERR_NOMEM;
        else gd_case_fill(ci, cp->in_host[k], seed * 1000003u + (uint64_t)k);
    }
    if (st == GD_OK) st = gd_op_multi(cp->g, op->name, c->n_in, cp->in, c->n_attr, c->attrs, op->n_out, cp->fwd);
    cp->n_fwd = op->n_out;
    if (st == GD_OK && !backward) {
        cp->n_targets = op->n_out;
        for (int k = 0; k < op->n_out; k++) cp->targets[k] = cp->fwd[k];
    }
    if (st == GD_OK && backward) {
        gd_tensor *loss = NULL;
        for (int k = 0; k < op->n_out && st == GD_OK; k++) {
            gd_tensor *o = cp->fwd[k];
            if (!gdp_is_float(o->dtype)) continue;
            char name[16];
            snprintf(name, sizeof name, "r%d", k);
            cp->r[k] = gd_input(cp->g, name, (gd_dtype)o->dtype, o->ndim, o->shape);
            gd_case_input ri = {.dtype = o->dtype, .ndim = o->ndim, .kind = 'f', .lo = -1, .hi = 1};
            memcpy(ri.shape, o->shape, sizeof ri.shape);
            size_t bytes = gd_value_bytes(o);
            cp->r_host[k] = malloc(bytes ? bytes : 1);
            if (cp->r[k] == NULL || cp->r_host[k] == NULL) {
                st = GD_ERR_NOMEM;
                break;
            }
            gd_case_fill(&ri, cp->r_host[k], seed * 7919u + 100u + (uint64_t)k);
            gd_tensor *term = gd_sum(gd_mul(o, cp->r[k]), 0, NULL, 0);
            loss = loss == NULL ? term : gd_add(loss, term);
            if (loss == NULL) st = GD_ERR_SHAPE;
        }
        if (st == GD_OK && loss == NULL) st = gd_fail(ctx, GD_ERR_INVALID, "%s: no floating output to differentiate", op->name);
        if (st == GD_OK) st = gd_backward(cp->g, loss);
        for (int k = 0; k < c->n_in && st == GD_OK; k++) {
            gd_tensor *gk = gd_grad(cp->g, cp->in[k]);
            if (gk == NULL) continue;
            cp->target_input[cp->n_targets] = k;
            cp->targets[cp->n_targets++] = gk;
        }
    }
    if (st == GD_OK) {
        cp->prog = gd_compile(cp->g, cp->n_targets, cp->targets, GD_COMPILE_UPDATES);
        if (cp->prog == NULL) st = ctx->status != GD_OK ? ctx->status : GD_ERR_INVALID;
    }
    if (st == GD_OK) cp->fallbacks = gd_program_fallbacks(cp->prog);
    ctx->preferred = pref;
    ctx->no_views = no_views;
    return st;
}

gd_status gd_case_exec(gd_case_prog *cp, gd_case_out *out)
{
    memset(out, 0, sizeof *out);
    gd_status st = GD_OK;
    for (int k = 0; k < cp->n_in && st == GD_OK; k++)
        st = gd_tensor_write(cp->in[k], cp->in_host[k], gd_value_bytes(cp->in[k]));
    for (int k = 0; k < cp->n_fwd && st == GD_OK; k++)
        if (cp->r[k] != NULL) st = gd_tensor_write(cp->r[k], cp->r_host[k], gd_value_bytes(cp->r[k]));
    if (st == GD_OK) st = gd_program_run(cp->prog);
    if (st == GD_OK && cp->ctx->guard) st = gd_program_check_guards(cp->prog);
    for (int k = 0; k < cp->n_targets && st == GD_OK; k++) {
        gd_tensor *t = cp->targets[k];
        size_t bytes = gd_value_bytes(t);
        out->t[k] = gd_value_desc(t, malloc(bytes ? bytes : 1));
        if (out->t[k].data == NULL) {
            st = GD_ERR_NOMEM;
            break;
        }
        out->n = k + 1;
        st = gd_tensor_read(t, out->t[k].data, bytes);
    }
    return st;
}

double gd_nmse(const gdp_tensor *ref, const gdp_tensor *got, int *nan_mismatch)
{
    int64_t n = gdp_numel(ref);
    double num = 0, den = 0;
    *nan_mismatch = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = gd_ref_load(ref, i), b = gd_ref_load(got, i);
        int fa = isfinite(a), fb = isfinite(b);
        if (!fa || !fb) {
            if (fa != fb || (isnan(a) != isnan(b)) || (!isnan(a) && a != b)) *nan_mismatch = 1;
            continue;
        }
        num += (a - b) * (a - b);
        den += a * a;
    }
    return num / (den > 1e-30 ? den : (n > 0 ? (double)n * 1e-30 : 1e-30));
}
