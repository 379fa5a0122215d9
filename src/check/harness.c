/* harness.c — see harness.h. */
#include "harness.h"
#include "program.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void gd_case_prog_free(gd_case_prog *cp)
{
    gd_program_free(cp->prog);
    gd_graph_free(cp->g);
    for (int i = 0; i < GDP_MAX_INPUTS; i++) gd_free(cp->in_host[i]);
    for (int i = 0; i < GDP_MAX_OUTPUTS; i++) gd_free(cp->r_host[i]);
    memset(cp, 0, sizeof *cp);
}

void gd_case_out_free(gd_case_out *o)
{
    for (int i = 0; i < o->n; i++) gd_free(o->t[i].data);
    memset(o, 0, sizeof *o);
}

/* ---- strided variants ----------------------------------------------------------------- */

#define SLICE_PAD 3 /* a sliced input's buffer is this much wider along the last dim */
#define SLICE_OFF 1 /* and the slice starts here */

const char *gd_case_variant_name(int variant)
{
    static const char *const names[] = {"contiguous", "transposed", "sliced", "broadcast", "output over input"};
    return variant >= 0 && variant < GD_VAR_COUNT ? names[variant] : "?";
}

/* Whether input k is viewed in the variant. */
static int viewed(const gd_op_def *op, const gd_case *c, int k, int variant)
{
    if (op->updates)
        for (int j = 0; j < GDP_MAX_OUTPUTS; j++)
            if (op->inplace[j] == k) return 0; /* updated in place: must stay a whole buffer */
    const gd_case_input *ci = &c->in[k];
    switch (variant) {
    case GD_VAR_TRANSPOSED: return ci->ndim >= 2;
    case GD_VAR_SLICED: return ci->ndim >= 1;
    case GD_VAR_BROADCAST: return ci->ndim >= 1 && ci->shape[0] > 1;
    default: return 0;
    }
}

int gd_case_variant_strided(int variant) { return variant > GD_VAR_CONTIGUOUS && variant != GD_VAR_SHARED; }

int gd_case_variant_applies(const gd_op_def *op, const gd_case *c, int variant)
{
    if (variant == GD_VAR_SHARED) return op->reuse > 0 && op->reuse <= c->n_in;
    for (int k = 0; k < c->n_in; k++)
        if (viewed(op, c, k, variant)) return 1;
    return 0;
}

/* What fills the part of a sliced input's buffer outside the slice: a value that shows
 * when a kernel reads it (NaN, or an index no op accepts). */
static double filler(int32_t dtype)
{
    if (gdp_is_float(dtype)) return NAN;
    if (dtype == GDP_BOOL) return 1;
    if (dtype == GDP_U8) return 255;
    return -1;
}

/* The buffer behind input ci of a variant: its shape, and the strides and offset (in
 * elements) of the view the op reads. */
static void variant_buffer(const gd_case_input *ci, int variant, gd_case_input *buf, int64_t *vstride,
                           int64_t *voff)
{
    *buf = *ci;
    int nd = ci->ndim;
    if (variant == GD_VAR_TRANSPOSED) {
        buf->shape[nd - 2] = ci->shape[nd - 1];
        buf->shape[nd - 1] = ci->shape[nd - 2];
    } else if (variant == GD_VAR_SLICED) {
        buf->shape[nd - 1] += SLICE_PAD;
    } else if (variant == GD_VAR_BROADCAST) {
        buf->shape[0] = 1;
    }
    gd_strides(nd, buf->shape, vstride);
    *voff = 0;
    if (variant == GD_VAR_TRANSPOSED) {
        int64_t t = vstride[nd - 2];
        vstride[nd - 2] = vstride[nd - 1];
        vstride[nd - 1] = t;
    } else if (variant == GD_VAR_SLICED) {
        *voff = SLICE_OFF;
    } else if (variant == GD_VAR_BROADCAST) {
        vstride[0] = 0;
    }
}

/* Host data of input k's buffer so that the view reads the case's values: for transposed
 * and sliced inputs exactly those of the contiguous case (same seed), for broadcast ones
 * the case's first row along dim 0, repeated. NULL when out of memory. */
static void *variant_data(const gd_case_input *ci, const gd_case_input *buf, const int64_t *vstride, int64_t voff,
                          int variant, uint64_t seed)
{
    size_t es = gdp_dtype_size(ci->dtype);
    int64_t nb = gd_case_numel(buf), n = gd_case_numel(ci);
    char *data = gd_malloc((size_t)(nb > 0 ? nb : 1) * es);
    if (data == NULL || variant == GD_VAR_BROADCAST) {
        if (data != NULL) gd_case_fill(buf, data, seed);
        return data;
    }
    char *logical = gd_malloc((size_t)(n > 0 ? n : 1) * es);
    if (logical == NULL) {
        gd_free(data);
        return NULL;
    }
    gd_case_fill(ci, logical, seed);
    gdp_tensor b = {.size = sizeof b, .data = data, .dtype = ci->dtype, .ndim = buf->ndim};
    for (int64_t i = 0; i < nb; i++) gd_ref_store_at(&b, i, filler(ci->dtype));
    int64_t idx[GDP_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t off = voff;
        for (int d = 0; d < ci->ndim; d++) off += idx[d] * vstride[d];
        memcpy(data + (size_t)off * es, logical + (size_t)i * es, es);
        for (int d = ci->ndim - 1; d >= 0; d--) {
            if (++idx[d] < ci->shape[d]) break;
            idx[d] = 0;
        }
    }
    gd_free(logical);
    return data;
}

/* Input k of the case: a graph input holding its data, and what the op reads of it. */
static gd_status make_input(gd_case_prog *cp, const gd_op_def *op, const gd_case *c, int k, int variant,
                            uint64_t seed)
{
    char name[16];
    snprintf(name, sizeof name, "in%d", k);
    const gd_case_input *ci = &c->in[k];
    int v = viewed(op, c, k, variant) ? variant : GD_VAR_CONTIGUOUS;
    gd_case_input buf;
    int64_t vstride[GDP_MAX_DIMS], voff;
    variant_buffer(ci, v, &buf, vstride, &voff);
    cp->in[k] = gd_input(cp->g, name, (gd_dtype)ci->dtype, buf.ndim, buf.shape);
    if (cp->in[k] == NULL) return cp->ctx->status != GD_OK ? cp->ctx->status : GD_ERR_NOMEM;
    cp->in_host[k] = variant_data(ci, &buf, vstride, voff, v, seed);
    if (cp->in_host[k] == NULL) return gd_fail(cp->ctx, GD_ERR_NOMEM, "case: out of memory for input %d", k);
    int nd = ci->ndim;
    switch (v) {
    case GD_VAR_TRANSPOSED: cp->arg[k] = gd_transpose(cp->in[k], nd - 2, nd - 1); break;
    case GD_VAR_SLICED: cp->arg[k] = gd_slice(cp->in[k], nd - 1, SLICE_OFF, SLICE_OFF + ci->shape[nd - 1]); break;
    case GD_VAR_BROADCAST: cp->arg[k] = gd_expand(cp->in[k], nd, ci->shape); break;
    default: cp->arg[k] = cp->in[k]; break;
    }
    /* a kernel's output, read by nothing after the op: the planner puts the op's output
     * over it */
    if (variant == GD_VAR_SHARED && k == op->reuse - 1) cp->arg[k] = gd_contiguous(cp->in[k]);
    return cp->arg[k] != NULL ? GD_OK : cp->ctx->status != GD_OK ? cp->ctx->status : GD_ERR_SHAPE;
}

gd_status gd_case_build(gd_ctx *ctx, const gd_op_def *op, const gd_case *c, int backend, int backward,
                        uint64_t seed, gd_case_prog *cp)
{
    gd_case_opts o = {.backend = backend, .backward = backward, .seed = seed, .variant = GD_VAR_CONTIGUOUS,
                      .oracle = ctx->backends[backend]->is_ref};
    return gd_case_build_ex(ctx, op, c, &o, cp);
}

gd_status gd_case_build_ex(gd_ctx *ctx, const gd_op_def *op, const gd_case *c, const gd_case_opts *o,
                           gd_case_prog *cp)
{
    memset(cp, 0, sizeof *cp);
    cp->ctx = ctx;
    int pref = ctx->preferred, no_views = ctx->no_views;
    ctx->preferred = o->backend;
    ctx->no_views = o->oracle;
    gd_status st = GD_OK;
    cp->g = gd_graph_new(ctx);
    if (cp->g == NULL) {
        ctx->preferred = pref;
        ctx->no_views = no_views;
        return GD_ERR_NOMEM;
    }
    cp->n_in = c->n_in;
    for (int k = 0; k < c->n_in && st == GD_OK; k++) st = make_input(cp, op, c, k, o->variant, o->seed * 1000003u + (uint64_t)k);
    if (st == GD_OK) st = gd_op_multi(cp->g, op->name, c->n_in, cp->arg, c->n_attr, c->attrs, op->n_out, cp->fwd);
    /* an op may make fewer outputs than it declares (an optional input with its own) */
    if (st == GD_OK) cp->n_fwd = cp->fwd[0]->node->n_out;
    if (st == GD_OK && !o->backward) {
        cp->n_targets = cp->n_fwd;
        for (int k = 0; k < cp->n_fwd; k++) cp->targets[k] = cp->fwd[k];
    }
    if (st == GD_OK && o->backward) {
        gd_tensor *loss = NULL;
        for (int k = 0; k < cp->n_fwd && st == GD_OK; k++) {
            gd_tensor *out = cp->fwd[k];
            if (!gdp_is_float(out->dtype)) continue;
            char name[16];
            snprintf(name, sizeof name, "r%d", k);
            cp->r[k] = gd_input(cp->g, name, (gd_dtype)out->dtype, out->ndim, out->shape);
            gd_case_input ri = {.dtype = out->dtype, .ndim = out->ndim, .kind = 'f', .lo = -1, .hi = 1};
            memcpy(ri.shape, out->shape, sizeof ri.shape);
            size_t bytes = gd_value_bytes(out);
            cp->r_host[k] = gd_malloc(bytes ? bytes : 1);
            if (cp->r[k] == NULL || cp->r_host[k] == NULL) {
                st = GD_ERR_NOMEM;
                break;
            }
            gd_case_fill(&ri, cp->r_host[k], o->seed * 7919u + 100u + (uint64_t)k);
            gd_tensor *term = gd_sum(gd_mul(out, cp->r[k]), 0, NULL, 0);
            loss = loss == NULL ? term : gd_add(loss, term);
            if (loss == NULL) st = GD_ERR_SHAPE;
        }
        if (st == GD_OK && loss == NULL) st = gd_fail(ctx, GD_ERR_INVALID, "%s: no floating output to differentiate", op->name);
        if (st == GD_OK) st = gd_backward(cp->g, loss);
        /* the gradients of what the op read: of a view, not of the buffer behind it, so
         * that a broadcast input's gradient is not a sum that cancels to rounding noise */
        for (int k = 0; k < c->n_in && st == GD_OK; k++) {
            gd_tensor *gk = gd_grad(cp->g, cp->arg[k]);
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
        out->t[k] = gd_value_desc(t, gd_malloc(bytes ? bytes : 1));
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
