/* graph.c — building graphs: leaves, nodes (shape-checked when added), attributes,
 * labels, and the graph's lifetime.
 *
 * Every size is checked (checked.h) before it is stored: a tensor whose element count or
 * byte count does not fit is refused with its name, never stored wrapped. Every
 * allocation is checked and a failure is GD_ERR_NOMEM with nothing half-built left in the
 * graph. */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gd_graph *gd_graph_new(gd_ctx *ctx)
{
    if (ctx == NULL) return NULL;
    gd_graph *g = gd_calloc(1, sizeof *g);
    if (g == NULL) {
        gd_fail(ctx, GD_ERR_NOMEM, "graph: out of memory");
        return NULL;
    }
    g->ctx = ctx;
    g->refs = 1;
    ctx->refs++;
    return g;
}

gd_ctx *gd_graph_ctx(const gd_graph *g) { return g != NULL ? g->ctx : NULL; }

void gd_node_free(gd_node *n)
{
    if (n == NULL) return;
    for (int k = 0; k < n->n_attr; k++) {
        gd_free((void *)n->attrs[k].name);
        gd_free((void *)n->attrs[k].ints);
        gd_free((void *)n->attrs[k].s);
    }
    gd_free(n->attrs);
    gd_free(n->label);
    gd_free(n);
}

static void graph_release(gd_graph *g)
{
    gd_ctx *ctx = g->ctx;
    for (int i = 0; i < g->n_values; i++) {
        gd_tensor *t = g->values[i];
        if (t->data != NULL && t->home != NULL) gd_backend_free(t->home, t->data, gd_value_bytes(t));
        gd_free(t->name);
        gd_free(t);
    }
    for (int i = 0; i < g->n_nodes; i++) gd_node_free(g->nodes[i]);
    for (int b = 0; b < GD_MAX_BACKENDS; b++)
        if (g->arena[b].ptr != NULL) gd_backend_free(ctx->backends[b], g->arena[b].ptr, g->arena[b].bytes);
    gd_free(g->values);
    gd_free(g->nodes);
    gd_free(g->params);
    gd_free(g);
    gd_ctx_unref(ctx);
}

void gd_graph_unref(gd_graph *g)
{
    if (g != NULL && --g->refs == 0) graph_release(g);
}

void gd_graph_free(gd_graph *g) { gd_graph_unref(g); }

static int grow(void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap) return 0;
    int c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    size_t bytes;
    if (gd_mul_size((size_t)c, elem, &bytes) != 0) return -1;
    void *p = gd_realloc(*arr, bytes);
    if (p == NULL) return -1;
    *arr = p;
    *cap = c;
    return 0;
}

gd_tensor *gd_value_new(gd_graph *g, int kind, const char *name, int32_t dtype, int ndim, const int64_t *shape)
{
    size_t bytes;
    if (gd_numel_bytes(ndim, shape, gdp_dtype_size(dtype), &bytes) != 0) {
        gd_shape s = {.dtype = dtype, .ndim = ndim};
        for (int i = 0; i < ndim; i++) s.dim[i] = shape[i];
        char b[200];
        return gd_fail_null(g, GD_ERR_INVALID, "%s%s%s: %s has more elements than fit in memory",
                            name != NULL ? "'" : "", name != NULL ? name : "value", name != NULL ? "'" : "",
                            gd_shape_str(&s, b, sizeof b));
    }
    if (grow((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof *g->values) != 0)
        return gd_fail_null(g, GD_ERR_NOMEM, "graph: out of memory");
    gd_tensor *t = gd_calloc(1, sizeof *t);
    if (t == NULL) return gd_fail_null(g, GD_ERR_NOMEM, "graph: out of memory");
    if (name != NULL && (t->name = gd_strdup(name)) == NULL) {
        gd_free(t);
        return gd_fail_null(g, GD_ERR_NOMEM, "graph: out of memory");
    }
    t->g = g;
    t->id = g->n_values;
    t->kind = kind;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    g->values[g->n_values++] = t;
    return t;
}

/* Takes the last value made back out of the graph (a leaf whose storage failed). */
static void drop_last_value(gd_graph *g, gd_tensor *t)
{
    if (g->n_values > 0 && g->values[g->n_values - 1] == t) {
        g->n_values--;
        gd_free(t->name);
        gd_free(t);
    }
}

static gd_tensor *leaf(gd_graph *g, int kind, const char *what, const char *name, gd_dtype dt, int ndim,
                       const int64_t *shape)
{
    if (g == NULL) return NULL;
    if (name == NULL || name[0] == '\0') return gd_fail_null(g, GD_ERR_INVALID, "%s: a name is required", what);
    if (gd_graph_find(g, name) != NULL)
        return gd_fail_null(g, GD_ERR_INVALID, "%s '%s': a tensor of that name already exists", what, name);
    if ((int)dt < 0 || (int)dt >= GDP_DTYPE_COUNT)
        return gd_fail_null(g, GD_ERR_INVALID, "%s '%s': unknown dtype %d", what, name, (int)dt);
    if (ndim < 0 || ndim > GDP_MAX_DIMS)
        return gd_fail_null(g, GD_ERR_INVALID, "%s '%s': %d dims (at most %d)", what, name, ndim, GDP_MAX_DIMS);
    if (ndim > 0 && shape == NULL) return gd_fail_null(g, GD_ERR_INVALID, "%s '%s': shape is NULL", what, name);
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0)
            return gd_fail_null(g, GD_ERR_INVALID, "%s '%s': dim %d is %lld (must be positive)", what, name, i,
                                (long long)shape[i]);
    gd_tensor *t = gd_value_new(g, kind, name, dt, ndim, shape);
    if (t == NULL) return NULL;
    if (kind == GD_V_PARAM && grow((void **)&g->params, &g->cap_params, g->n_params + 1, sizeof *g->params) != 0) {
        drop_last_value(g, t);
        return gd_fail_null(g, GD_ERR_NOMEM, "graph: out of memory");
    }
    /* Leaves live on the backend preferred when they are made. Their storage comes later,
     * zeroed, when first written or compiled into a program: so that what a whole model
     * needs is checked against what the backend has before any of it is allocated
     * (gd_leaves_reserve), instead of failing, or being killed, half-way. */
    t->home = g->ctx->backends[g->ctx->preferred];
    if (kind == GD_V_PARAM) g->params[g->n_params++] = t;
    return t;
}

static double gib(size_t b) { return (double)b / (1024.0 * 1024 * 1024); }

gd_status gd_leaves_reserve(gd_graph *g, const char *what, const size_t *extra)
{
    gd_ctx *ctx = g->ctx;
    size_t need[GD_MAX_BACKENDS] = {0};
    for (int i = 0; i < g->n_values; i++) {
        const gd_tensor *t = g->values[i];
        if (t->kind != GD_V_NODE && t->data == NULL) need[t->home->index] += gd_value_bytes(t);
    }
    for (int b = 0; b < ctx->n_backends; b++) {
        size_t total = need[b] + (extra != NULL ? extra[b] : 0);
        if (total == 0) continue;
        size_t avail = gd_backend_free_bytes(ctx->backends[b]);
        if (avail > 0 && total > avail) {
            char parts[160] = "";
            if (total > need[b])
                snprintf(parts, sizeof parts, " (%.2f GiB of parameters, states and inputs, %.2f GiB of activations)",
                         gib(need[b]), gib(total - need[b]));
            return gd_fail(ctx, GD_ERR_NOMEM, "%s: needs %.2f GiB on %s%s, but %.2f GiB are available there", what,
                           gib(total), ctx->backends[b]->name, parts, gib(avail));
        }
    }
    return GD_OK;
}

gd_status gd_leaf_storage(gd_tensor *t)
{
    if (t->data != NULL) return GD_OK;
    gd_ctx *ctx = t->g->ctx;
    size_t bytes = gd_value_bytes(t);
    gd_status st = gd_backend_alloc(ctx, t->home, bytes, &t->data);
    if (st == GD_OK) st = gd_backend_zero(ctx, t->home, t->data, bytes);
    if (st != GD_OK) {
        if (t->data != NULL) gd_backend_free(t->home, t->data, bytes);
        t->data = NULL;
        char m[1024];
        snprintf(m, sizeof m, "%s", ctx->err);
        return gd_fail(ctx, st, "'%s': %s", gd_tensor_name(t), m);
    }
    return GD_OK;
}

gd_tensor *gd_input(gd_graph *g, const char *name, gd_dtype dt, int ndim, const int64_t *shape)
{
    return leaf(g, GD_V_INPUT, "input", name, dt, ndim, shape);
}
gd_tensor *gd_param(gd_graph *g, const char *name, gd_dtype dt, int ndim, const int64_t *shape)
{
    return leaf(g, GD_V_PARAM, "param", name, dt, ndim, shape);
}
gd_tensor *gd_state(gd_graph *g, const char *name, gd_dtype dt, int ndim, const int64_t *shape)
{
    return leaf(g, GD_V_STATE, "state", name, dt, ndim, shape);
}

gd_graph *gd_tensor_graph(const gd_tensor *t) { return t != NULL ? t->g : NULL; }
int gd_tensor_ndim(const gd_tensor *t) { return t != NULL ? t->ndim : 0; }
int64_t gd_tensor_dim(const gd_tensor *t, int axis)
{
    if (t == NULL) return 0;
    if (axis < 0) axis += t->ndim;
    return axis >= 0 && axis < t->ndim ? t->shape[axis] : 0;
}
/* Values are checked to fit when made, so this product cannot wrap. */
int64_t gd_tensor_numel(const gd_tensor *t)
{
    if (t == NULL) return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}
gd_dtype gd_tensor_dtype(const gd_tensor *t) { return t != NULL ? (gd_dtype)t->dtype : GD_F32; }
const char *gd_tensor_name(const gd_tensor *t) { return t != NULL && t->name != NULL ? t->name : ""; }

const char *gd_tensor_describe(const gd_tensor *t, char *buf, size_t cap)
{
    if (buf == NULL || cap == 0) return "";
    if (t == NULL) {
        snprintf(buf, cap, "(null)");
        return buf;
    }
    gd_shape s = gd_value_shape(t);
    return gd_shape_str(&s, buf, cap);
}

gd_shape gd_value_shape(const gd_tensor *t)
{
    gd_shape s = {.dtype = t->dtype, .ndim = t->ndim};
    for (int i = 0; i < t->ndim; i++) s.dim[i] = t->shape[i];
    return s;
}
gd_shape gd_tensor_shape(const gd_tensor *t) { return gd_value_shape(t); }

gdp_tensor gd_value_desc(const gd_tensor *t, void *data)
{
    gdp_tensor d = {.size = sizeof d, .data = data, .dtype = t->dtype, .ndim = t->ndim};
    for (int i = 0; i < t->ndim; i++) d.shape[i] = t->shape[i];
    gdp_set_contiguous(&d);
    return d;
}

size_t gd_value_bytes(const gd_tensor *t) { return (size_t)gd_tensor_numel(t) * gdp_dtype_size(t->dtype); }

int gd_graph_param_count(const gd_graph *g) { return g != NULL ? g->n_params : 0; }
gd_tensor *gd_graph_param(const gd_graph *g, int i)
{
    return g != NULL && i >= 0 && i < g->n_params ? g->params[i] : NULL;
}
gd_tensor *gd_graph_find(const gd_graph *g, const char *name)
{
    if (g == NULL || name == NULL) return NULL;
    for (int i = 0; i < g->n_values; i++)
        if (g->values[i]->name != NULL && strcmp(g->values[i]->name, name) == 0) return g->values[i];
    return NULL;
}

/* ---- attributes ------------------------------------------------------------------------ */

gd_attr gd_attr_i(const char *name, int64_t v) { return (gd_attr){.name = name, .kind = GD_ATTR_INT, .i = v}; }
gd_attr gd_attr_f(const char *name, double v) { return (gd_attr){.name = name, .kind = GD_ATTR_FLOAT, .f = v}; }
gd_attr gd_attr_s(const char *name, const char *v) { return (gd_attr){.name = name, .kind = GD_ATTR_STRING, .s = v}; }
gd_attr gd_attr_is(const char *name, int n, const int64_t *v)
{
    /* A count past GD_MAX_DIMS is kept as given, so that the node refuses it by name. */
    gd_attr a = {.name = name, .kind = GD_ATTR_INTS, .n = n};
    for (int i = 0; i < n && i < GD_MAX_DIMS && v != NULL; i++) a.ints[i] = v[i];
    return a;
}

gdp_attrs gd_node_attrs(const gd_node *n) { return (gdp_attrs){.n = n->n_attr, .items = n->attrs}; }

static const char *kind_name(int kind)
{
    return kind == GD_ATTR_INTS ? "ints" : kind == GD_ATTR_FLOAT ? "float" : kind == GD_ATTR_STRING ? "string" : "int";
}

/* Checks an attribute against the op's schema "name:kind ..."; returns 0 or fills msg. */
static int attr_check(const gd_op_def *op, const gd_attr *a, char *msg, size_t cap)
{
    if (a->name == NULL) {
        snprintf(msg, cap, "%s: an attribute has no name", op->name);
        return 1;
    }
    if ((int)a->kind < GD_ATTR_INT || (int)a->kind > GD_ATTR_STRING) {
        snprintf(msg, cap, "%s: attribute '%s' has unknown kind %d", op->name, a->name, (int)a->kind);
        return 1;
    }
    if (a->kind == GD_ATTR_INTS && (a->n < 0 || a->n > GD_MAX_DIMS)) {
        snprintf(msg, cap, "%s: attribute '%s' has %d ints (0 to %d)", op->name, a->name, a->n, GD_MAX_DIMS);
        return 1;
    }
    if (a->kind == GD_ATTR_STRING && a->s == NULL) {
        snprintf(msg, cap, "%s: string attribute '%s' is NULL", op->name, a->name);
        return 1;
    }
    const char *s = op->attrs != NULL ? op->attrs : "";
    size_t nl = strlen(a->name);
    while (*s) {
        while (*s == ' ') s++;
        const char *colon = strchr(s, ':');
        if (colon == NULL) break;
        const char *end = colon;
        while (*end && *end != ' ') end++;
        if ((size_t)(colon - s) == nl && strncmp(s, a->name, nl) == 0) {
            const char *kind = colon + 1;
            size_t kl = (size_t)(end - kind);
            int want = kl == 4 && strncmp(kind, "ints", 4) == 0     ? GD_ATTR_INTS
                       : kl == 5 && strncmp(kind, "float", 5) == 0  ? GD_ATTR_FLOAT
                       : kl == 6 && strncmp(kind, "string", 6) == 0 ? GD_ATTR_STRING
                                                                     : GD_ATTR_INT;
            int numeric = (want == GD_ATTR_FLOAT || want == GD_ATTR_INT) &&
                          (a->kind == GD_ATTR_FLOAT || a->kind == GD_ATTR_INT);
            if (want != (int)a->kind && !numeric) {
                snprintf(msg, cap, "%s: attribute '%s' must be %s, got %s", op->name, a->name, kind_name(want),
                         kind_name(a->kind));
                return 1;
            }
            return 0;
        }
        s = end;
    }
    snprintf(msg, cap, "%s: unknown attribute '%s' (the op has: %s)", op->name, a->name,
             op->attrs != NULL && op->attrs[0] ? op->attrs : "none");
    return 1;
}

/* Deep copies of the attributes into a node; 0, or -1 when out of memory. */
static int copy_attrs(gd_node *n, int n_attr, const gd_attr *attrs)
{
    n->attrs = gd_calloc((size_t)(n_attr > 0 ? n_attr : 1), sizeof *n->attrs);
    if (n->attrs == NULL) return -1;
    for (int k = 0; k < n_attr; k++) {
        gdp_attr *d = &n->attrs[k];
        n->n_attr = k + 1; /* what is copied so far is freed with the node */
        d->kind = attrs[k].kind;
        d->i = attrs[k].i;
        d->f = attrs[k].f;
        d->n = attrs[k].kind == GD_ATTR_INTS ? attrs[k].n : 0;
        if ((d->name = gd_strdup(attrs[k].name)) == NULL) return -1;
        if (attrs[k].kind == GD_ATTR_INTS) {
            int64_t *v = gd_malloc(sizeof(int64_t) * (size_t)(d->n > 0 ? d->n : 1));
            if (v == NULL) return -1;
            memcpy(v, attrs[k].ints, sizeof(int64_t) * (size_t)d->n);
            d->ints = v;
        }
        if (attrs[k].kind == GD_ATTR_STRING && (d->s = gd_strdup(attrs[k].s)) == NULL) return -1;
    }
    return 0;
}

gd_tensor *gd_label(gd_tensor *t, const char *label)
{
    if (t == NULL) return NULL;
    if (t->node == NULL || label == NULL) return t; /* leaves are named by their name */
    char *l = gd_strdup(label);
    if (l == NULL) return gd_fail_null(t->g, GD_ERR_NOMEM, "label: out of memory");
    gd_free(t->node->label);
    t->node->label = l;
    return t;
}

const char *gd_node_label(const gd_node *n, char *buf, size_t cap)
{
    if (n->label != NULL) return n->label;
    snprintf(buf, cap, "%s#%d", n->op->name, n->id);
    return buf;
}

/* ---- nodes ----------------------------------------------------------------------------- */

int32_t gd_node_key_dtype(const gd_node *n)
{
    for (int i = 0; i < n->n_in; i++)
        if (gdp_is_float(n->in[i]->dtype)) return n->in[i]->dtype;
    return n->n_out > 0 ? n->out[0]->dtype : GDP_F32;
}

int gd_node_uniform(const gd_node *n)
{
    int32_t key = gd_node_key_dtype(n);
    for (int i = 0; i < n->n_in; i++)
        if (gdp_is_float(n->in[i]->dtype) && n->in[i]->dtype != key) return 0;
    if (!n->op->any_out_dtype)
        for (int k = 0; k < n->n_out; k++)
            if (gdp_is_float(n->out[k]->dtype) && n->out[k]->dtype != key) return 0;
    return 1;
}

const char *gd_node_signature(const gd_node *n, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n->n_in + n->n_out && len < cap; i++) {
        const gd_tensor *t = i < n->n_in ? n->in[i] : n->out[i - n->n_in];
        const char *sep = i == 0 ? "" : i == n->n_in ? "->" : ",";
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", sep, gd_dtype_name((gd_dtype)t->dtype));
    }
    return buf;
}

/* A non-uniform node must be one of its op's declared mixed-precision forms. */
static int mixed_declared(const gd_node *n)
{
    char sig[256];
    gd_node_signature(n, sig, sizeof sig);
    for (const char *const *m = n->op->mixed; m != NULL && *m != NULL; m++)
        if (strcmp(*m, sig) == 0) return 1;
    return 0;
}

/* Checks operands and attributes, runs the shape rule and makes the node with fresh
 * output values (added to the graph) or the given ones. NULL on failure, message set.
 * An op has up to op->n_out outputs; its shape rule may make fewer (an optional input
 * with an output of its own, like adamw_update's low-precision copy). `cap` is how many
 * the caller takes; with given outputs it must be exactly how many there are. */
static gd_node *node_new(gd_graph *g, const gd_op_def *op, int n_in, gd_tensor *const *in, int n_attr,
                         const gd_attr *attrs, int cap, gd_tensor *const *given_out, gd_tensor **out)
{
    gd_ctx *ctx = g->ctx;
    if (n_in < op->min_in || n_in > op->max_in) {
        if (op->min_in == op->max_in)
            gd_fail(ctx, GD_ERR_INVALID, "%s: takes %d inputs, got %d", op->name, op->min_in, n_in);
        else
            gd_fail(ctx, GD_ERR_INVALID, "%s: takes %d to %d inputs, got %d", op->name, op->min_in, op->max_in, n_in);
        return NULL;
    }
    if (cap < 1 || cap > GDP_MAX_OUTPUTS) {
        gd_fail(ctx, GD_ERR_INVALID, "%s: room for %d outputs", op->name, cap);
        return NULL;
    }
    if (n_in > 0 && in == NULL) {
        gd_fail(ctx, GD_ERR_INVALID, "%s: inputs are NULL", op->name);
        return NULL;
    }
    for (int i = 0; i < n_in; i++) {
        if (in[i] == NULL) {
            gd_fail(ctx, GD_ERR_INVALID, "%s: input %d is NULL", op->name, i);
            return NULL;
        }
        if (in[i]->g != g) {
            gd_fail(ctx, GD_ERR_INVALID, "%s: input %d belongs to another graph", op->name, i);
            return NULL;
        }
    }
    if (n_attr < 0 || (n_attr > 0 && attrs == NULL)) {
        gd_fail(ctx, GD_ERR_INVALID, "%s: %d attributes at %p", op->name, n_attr, (const void *)attrs);
        return NULL;
    }
    char msg[512];
    for (int k = 0; k < n_attr; k++) {
        if (attr_check(op, &attrs[k], msg, sizeof msg) != 0) {
            gd_fail(ctx, GD_ERR_INVALID, "%s", msg);
            return NULL;
        }
    }
    gd_node *n = gd_calloc(1, sizeof *n);
    if (n == NULL || copy_attrs(n, n_attr, attrs) != 0) {
        gd_node_free(n);
        gd_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", op->name);
        return NULL;
    }
    n->op = op;
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++) n->in[i] = in[i];
    /* Shape rule. */
    gd_shape shapes[GDP_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) shapes[i] = gd_value_shape(in[i]);
    gdp_attrs av = gd_node_attrs(n);
    gd_infer ic = {.op = op->name, .n_in = n_in, .in = shapes, .attrs = &av, .n_out = op->n_out};
    if (op->infer(&ic) != 0) {
        gd_fail(ctx, GD_ERR_SHAPE, "%s: %s", op->name, ic.msg[0] ? ic.msg : "invalid operands");
        gd_node_free(n);
        return NULL;
    }
    int n_out = ic.n_out;
    if (n_out < 1 || n_out > op->n_out || n_out > cap || (given_out != NULL && n_out != cap)) {
        gd_fail(ctx, GD_ERR_INVALID, "%s: makes %d outputs here, %d %s", op->name, n_out, cap,
                given_out != NULL ? "given" : "asked for");
        gd_node_free(n);
        return NULL;
    }
    n->n_out = n_out;
    for (int k = 0; k < n_out; k++) {
        size_t bytes;
        if (ic.out[k].ndim < 0 || ic.out[k].ndim > GDP_MAX_DIMS) {
            gd_fail(ctx, GD_ERR_SHAPE, "%s: output %d has %d dims", op->name, k, ic.out[k].ndim);
            gd_node_free(n);
            return NULL;
        }
        for (int d = 0; d < ic.out[k].ndim; d++) {
            if (ic.out[k].dim[d] < 0) {
                gd_fail(ctx, GD_ERR_SHAPE, "%s: output %d would have dim %d = %lld", op->name, k, d,
                        (long long)ic.out[k].dim[d]);
                gd_node_free(n);
                return NULL;
            }
        }
        if (gd_numel_bytes(ic.out[k].ndim, ic.out[k].dim, gdp_dtype_size(ic.out[k].dtype), &bytes) != 0) {
            char b[200];
            gd_fail(ctx, GD_ERR_SHAPE, "%s: output %d would be %s, more elements than fit in memory", op->name, k,
                    gd_shape_str(&ic.out[k], b, sizeof b));
            gd_node_free(n);
            return NULL;
        }
        if (given_out != NULL) {
            const gd_tensor *o = given_out[k];
            int same = o->dtype == ic.out[k].dtype && o->ndim == ic.out[k].ndim;
            for (int d = 0; same && d < o->ndim; d++) same = o->shape[d] == ic.out[k].dim[d];
            if (!same) {
                char a[200], b[200];
                gd_fail(ctx, GD_ERR_SHAPE, "%s: output %d is %s where %s was to be replaced", op->name, k,
                        gd_shape_str(&ic.out[k], a, sizeof a), gd_tensor_describe(o, b, sizeof b));
                gd_node_free(n);
                return NULL;
            }
        }
    }
    if (given_out != NULL) {
        for (int k = 0; k < n_out; k++) n->out[k] = given_out[k];
    } else {
        if (grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes) != 0) {
            gd_node_free(n);
            gd_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", op->name);
            return NULL;
        }
        int first_value = g->n_values;
        for (int k = 0; k < n_out; k++) {
            gd_tensor *t = gd_value_new(g, GD_V_NODE, NULL, ic.out[k].dtype, ic.out[k].ndim, ic.out[k].dim);
            if (t == NULL) {
                while (g->n_values > first_value) drop_last_value(g, g->values[g->n_values - 1]);
                gd_node_free(n);
                return NULL;
            }
            t->node = n;
            t->out_index = k;
            n->out[k] = t;
        }
    }
    for (int k = 0; k < n_out; k++)
        if (op->updates && op->inplace[k] >= 0 && op->inplace[k] < n_in) n->is_update = 1;
    if (!gd_node_uniform(n) && !mixed_declared(n)) {
        char sig[256];
        gd_fail(ctx, GD_ERR_SHAPE, "%s: operand dtypes %s are not a form the op defines", op->name,
                gd_node_signature(n, sig, sizeof sig));
        if (given_out == NULL)
            for (int k = n_out - 1; k >= 0; k--) drop_last_value(g, n->out[k]);
        gd_node_free(n);
        return NULL;
    }
    n->id = g->next_node_id++;
    if (given_out == NULL) {
        g->nodes[g->n_nodes++] = n;
        if (out != NULL)
            for (int k = 0; k < n_out; k++) out[k] = n->out[k];
    }
    return n;
}

gd_node *gd_node_add(gd_graph *g, const gd_op_def *op, int n_in, gd_tensor *const *in, int n_attr,
                     const gd_attr *attrs, int n_out, gd_tensor **out)
{
    return node_new(g, op, n_in, in, n_attr, attrs, n_out, NULL, out);
}

gd_node *gd_node_make(gd_graph *g, const gd_op_def *op, int n_in, gd_tensor *const *in, int n_attr,
                      const gd_attr *attrs, int n_out, gd_tensor *const *out)
{
    return node_new(g, op, n_in, in, n_attr, attrs, n_out, out, NULL);
}

gd_status gd_op_multi(gd_graph *g, const char *opname, int n_in, gd_tensor *const *in, int n_attr,
                      const gd_attr *attrs, int n_out, gd_tensor **out)
{
    if (out != NULL)
        for (int k = 0; k < n_out && k < GDP_MAX_OUTPUTS; k++) out[k] = NULL;
    if (g == NULL) return GD_ERR_INVALID;
    if (opname == NULL) return gd_fail(g->ctx, GD_ERR_INVALID, "op: the op name is NULL");
    if (out == NULL) return gd_fail(g->ctx, GD_ERR_INVALID, "%s: out is NULL", opname);
    if (n_in < 0 || n_in > GDP_MAX_INPUTS || (n_in > 0 && in == NULL))
        return gd_fail(g->ctx, GD_ERR_INVALID, "%s: %d inputs (0 to %d)", opname, n_in, GDP_MAX_INPUTS);
    for (int i = 0; i < n_in; i++)
        if (in[i] == NULL) return GD_ERR_INVALID; /* an earlier builder failed; keep its message */
    const gd_op_def *op = gd_registry_find(g->ctx->reg, opname);
    if (op == NULL) return gd_fail(g->ctx, GD_ERR_INVALID, "no op named '%s'", opname);
    if (gd_node_add(g, op, n_in, in, n_attr, attrs, n_out, out) != NULL) return GD_OK;
    return g->ctx->status; /* of the failure whose message is set */
}

gd_tensor *gd_op(gd_graph *g, const char *opname, int n_in, gd_tensor *const *in, int n_attr, const gd_attr *attrs)
{
    if (g == NULL) return NULL;
    if (opname == NULL) return gd_fail_null(g, GD_ERR_INVALID, "op: the op name is NULL");
    const gd_op_def *op = gd_registry_find(g->ctx->reg, opname);
    if (op == NULL) return gd_fail_null(g, GD_ERR_INVALID, "no op named '%s'", opname);
    gd_tensor *out[GDP_MAX_OUTPUTS] = {0};
    if (gd_op_multi(g, opname, n_in, in, n_attr, attrs, op->n_out, out) != GD_OK) return NULL;
    return out[0];
}

gd_tensor *gd_op1(gd_tensor *x, const char *op, int n_attr, const gd_attr *attrs)
{
    if (x == NULL) return NULL;
    return gd_op(x->g, op, 1, &x, n_attr, attrs);
}

gd_tensor *gd_op2(gd_tensor *a, gd_tensor *b, const char *op, int n_attr, const gd_attr *attrs)
{
    if (a == NULL || b == NULL) return NULL;
    gd_tensor *in[2] = {a, b};
    return gd_op(a->g, op, 2, in, n_attr, attrs);
}
