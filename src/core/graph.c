/* graph.c — building graphs: leaves, nodes (shape-checked when added), attributes. */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gd_dtype_from_name(const char *s, size_t len);

gd_graph *gd_graph_new(gd_ctx *ctx)
{
    gd_graph *g = calloc(1, sizeof *g);
    if (g == NULL) {
        gd_fail(ctx, GD_ERR_NOMEM, "graph: out of memory");
        return NULL;
    }
    g->ctx = ctx;
    return g;
}

gd_ctx *gd_graph_ctx(const gd_graph *g) { return g->ctx; }

static void node_free(gd_node *n)
{
    for (int k = 0; k < n->n_attr; k++) {
        free((void *)n->attrs[k].name);
        free((void *)n->attrs[k].ints);
    }
    free(n->attrs);
    free(n);
}

void gd_graph_free(gd_graph *g)
{
    if (g == NULL) return;
    for (int i = 0; i < g->n_values; i++) {
        gd_tensor *t = g->values[i];
        if (t->data != NULL && t->home != NULL) gd_backend_free(t->home, t->data);
        free(t->name);
        free(t);
    }
    for (int i = 0; i < g->n_nodes; i++) node_free(g->nodes[i]);
    free(g->values);
    free(g->nodes);
    free(g->params);
    free(g);
}

static int grow(void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap) return 0;
    int c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *p = realloc(*arr, (size_t)c * elem);
    if (p == NULL) return -1;
    *arr = p;
    *cap = c;
    return 0;
}

gd_tensor *gd_value_new(gd_graph *g, int kind, const char *name, int32_t dtype, int ndim, const int64_t *shape)
{
    if (grow((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof *g->values) != 0)
        return gd_fail_null(g, GD_ERR_NOMEM, "graph: out of memory");
    gd_tensor *t = calloc(1, sizeof *t);
    if (t == NULL) return gd_fail_null(g, GD_ERR_NOMEM, "graph: out of memory");
    t->g = g;
    t->id = g->n_values;
    t->kind = kind;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    if (name != NULL) t->name = strdup(name);
    g->values[g->n_values++] = t;
    return t;
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
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0)
            return gd_fail_null(g, GD_ERR_INVALID, "%s '%s': dim %d is %lld (must be positive)", what, name, i,
                                (long long)shape[i]);
    gd_tensor *t = gd_value_new(g, kind, name, dt, ndim, shape);
    if (t == NULL) return NULL;
    if (kind == GD_V_PARAM) {
        if (grow((void **)&g->params, &g->cap_params, g->n_params + 1, sizeof *g->params) != 0)
            return gd_fail_null(g, GD_ERR_NOMEM, "graph: out of memory");
        g->params[g->n_params++] = t;
    }
    if (kind != GD_V_INPUT) {
        /* Parameters and states live on the preferred backend from birth, zeroed. */
        gd_backend *b = g->ctx->backends[g->ctx->preferred];
        size_t bytes = gd_value_bytes(t);
        if (gd_backend_alloc(g->ctx, b, bytes, &t->data) != GD_OK) return NULL;
        t->home = b;
        if (gd_backend_zero(g->ctx, b, t->data, bytes) != GD_OK) return NULL;
    }
    return t;
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
int gd_tensor_ndim(const gd_tensor *t) { return t->ndim; }
int64_t gd_tensor_dim(const gd_tensor *t, int axis)
{
    if (axis < 0) axis += t->ndim;
    return axis >= 0 && axis < t->ndim ? t->shape[axis] : 0;
}
int64_t gd_tensor_numel(const gd_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}
gd_dtype gd_tensor_dtype(const gd_tensor *t) { return (gd_dtype)t->dtype; }
const char *gd_tensor_name(const gd_tensor *t) { return t->name != NULL ? t->name : ""; }

const char *gd_tensor_describe(const gd_tensor *t, char *buf, size_t cap)
{
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
    gdp_tensor d = {.data = data, .dtype = t->dtype, .ndim = t->ndim};
    for (int i = 0; i < t->ndim; i++) d.shape[i] = t->shape[i];
    return d;
}

size_t gd_value_bytes(const gd_tensor *t) { return (size_t)gd_tensor_numel(t) * gdp_dtype_size(t->dtype); }

int gd_graph_param_count(const gd_graph *g) { return g->n_params; }
gd_tensor *gd_graph_param(const gd_graph *g, int i) { return i >= 0 && i < g->n_params ? g->params[i] : NULL; }
gd_tensor *gd_graph_find(const gd_graph *g, const char *name)
{
    for (int i = 0; i < g->n_values; i++)
        if (g->values[i]->name != NULL && strcmp(g->values[i]->name, name) == 0) return g->values[i];
    return NULL;
}

/* ---- attributes ------------------------------------------------------------------------ */

gd_attr gd_attr_i(const char *name, int64_t v) { return (gd_attr){.name = name, .kind = GD_ATTR_INT, .i = v}; }
gd_attr gd_attr_f(const char *name, double v) { return (gd_attr){.name = name, .kind = GD_ATTR_FLOAT, .f = v}; }
gd_attr gd_attr_is(const char *name, int n, const int64_t *v)
{
    gd_attr a = {.name = name, .kind = GD_ATTR_INTS, .n = n < 0 ? 0 : n > GD_MAX_DIMS ? GD_MAX_DIMS : n};
    for (int i = 0; i < a.n; i++) a.ints[i] = v[i];
    return a;
}

gdp_attrs gd_node_attrs(const gd_node *n) { return (gdp_attrs){.n = n->n_attr, .items = n->attrs}; }

/* Checks attrs against the op's schema "name:kind ..."; returns 0 or fills msg. */
static int attr_check(const gd_op_def *op, const gd_attr *a, char *msg, size_t cap)
{
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
            int want = strncmp(kind, "ints", kl) == 0 && kl == 4 ? GD_ATTR_INTS
                       : strncmp(kind, "float", kl) == 0 && kl == 5 ? GD_ATTR_FLOAT : GD_ATTR_INT;
            int ok = want == (int)a->kind || (want == GD_ATTR_FLOAT && a->kind == GD_ATTR_INT) ||
                     (want == GD_ATTR_INT && a->kind == GD_ATTR_FLOAT);
            if (!ok) {
                snprintf(msg, cap, "%s: attribute '%s' must be %.*s", op->name, a->name, (int)kl, kind);
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

/* ---- nodes ----------------------------------------------------------------------------- */

int32_t gd_node_key_dtype(const gd_node *n)
{
    for (int i = 0; i < n->n_in; i++) {
        int32_t d = n->in[i]->dtype;
        if (d == GDP_F32 || d == GDP_F16 || d == GDP_BF16 || d == GDP_F64) return d;
    }
    return n->n_out > 0 ? n->out[0]->dtype : GDP_F32;
}

gd_node *gd_node_add(gd_graph *g, const gd_op_def *op, int n_in, gd_tensor *const *in, int n_attr,
                     const gd_attr *attrs, int n_out, gd_tensor **out)
{
    gd_ctx *ctx = g->ctx;
    if (n_in < op->min_in || n_in > op->max_in) {
        if (op->min_in == op->max_in)
            gd_fail(ctx, GD_ERR_INVALID, "%s: takes %d inputs, got %d", op->name, op->min_in, n_in);
        else
            gd_fail(ctx, GD_ERR_INVALID, "%s: takes %d to %d inputs, got %d", op->name, op->min_in, op->max_in, n_in);
        return NULL;
    }
    if (n_out != op->n_out) {
        gd_fail(ctx, GD_ERR_INVALID, "%s: has %d outputs, %d requested", op->name, op->n_out, n_out);
        return NULL;
    }
    for (int i = 0; i < n_in; i++) {
        if (in[i]->g != g) {
            gd_fail(ctx, GD_ERR_INVALID, "%s: input %d belongs to another graph", op->name, i);
            return NULL;
        }
    }
    char msg[512];
    for (int k = 0; k < n_attr; k++) {
        if (attr_check(op, &attrs[k], msg, sizeof msg) != 0) {
            gd_fail(ctx, GD_ERR_INVALID, "%s", msg);
            return NULL;
        }
    }
    gd_node *n = calloc(1, sizeof *n);
    if (n == NULL) {
        gd_fail(ctx, GD_ERR_NOMEM, "graph: out of memory");
        return NULL;
    }
    n->op = op;
    n->n_in = n_in;
    n->n_out = n_out;
    for (int i = 0; i < n_in; i++) n->in[i] = in[i];
    n->attrs = calloc((size_t)(n_attr > 0 ? n_attr : 1), sizeof *n->attrs);
    if (n->attrs == NULL) {
        free(n);
        gd_fail(ctx, GD_ERR_NOMEM, "graph: out of memory");
        return NULL;
    }
    n->n_attr = n_attr;
    for (int k = 0; k < n_attr; k++) {
        gdp_attr *d = &n->attrs[k];
        d->name = strdup(attrs[k].name);
        d->kind = attrs[k].kind;
        d->i = attrs[k].i;
        d->f = attrs[k].f;
        d->n = attrs[k].n;
        if (attrs[k].kind == GD_ATTR_INTS) {
            int64_t *v = malloc(sizeof(int64_t) * (size_t)(attrs[k].n > 0 ? attrs[k].n : 1));
            if (v != NULL) memcpy(v, attrs[k].ints, sizeof(int64_t) * (size_t)attrs[k].n);
            d->ints = v;
        }
    }
    /* Shape rule. */
    gd_shape shapes[GDP_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) shapes[i] = gd_value_shape(in[i]);
    gdp_attrs av = gd_node_attrs(n);
    gd_infer ic = {.op = op->name, .n_in = n_in, .in = shapes, .attrs = &av, .n_out = n_out};
    if (op->infer(&ic) != 0) {
        gd_fail(ctx, GD_ERR_SHAPE, "%s: %s", op->name, ic.msg[0] ? ic.msg : "invalid operands");
        node_free(n);
        return NULL;
    }
    for (int k = 0; k < n_out; k++) {
        if (ic.out[k].ndim < 0 || ic.out[k].ndim > GDP_MAX_DIMS) {
            gd_fail(ctx, GD_ERR_SHAPE, "%s: output %d has %d dims", op->name, k, ic.out[k].ndim);
            node_free(n);
            return NULL;
        }
    }
    if (grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes) != 0) {
        node_free(n);
        gd_fail(ctx, GD_ERR_NOMEM, "graph: out of memory");
        return NULL;
    }
    for (int k = 0; k < n_out; k++) {
        gd_tensor *t = gd_value_new(g, GD_V_NODE, NULL, ic.out[k].dtype, ic.out[k].ndim, ic.out[k].dim);
        if (t == NULL) {
            node_free(n);
            return NULL;
        }
        t->node = n;
        t->out_index = k;
        n->out[k] = t;
        if (op->updates && op->inplace[k] >= 0 && op->inplace[k] < n_in) n->is_update = 1;
        if (out != NULL) out[k] = t;
    }
    n->id = g->n_nodes;
    g->nodes[g->n_nodes++] = n;
    return n;
}

gd_status gd_op_multi(gd_graph *g, const char *opname, int n_in, gd_tensor *const *in, int n_attr,
                      const gd_attr *attrs, int n_out, gd_tensor **out)
{
    for (int k = 0; k < n_out; k++) out[k] = NULL;
    if (g == NULL) return GD_ERR_INVALID;
    for (int i = 0; i < n_in; i++)
        if (in[i] == NULL) return GD_ERR_INVALID; /* an earlier builder failed; keep its message */
    const gd_op_def *op = gd_registry_find(g->ctx->reg, opname);
    if (op == NULL) return gd_fail(g->ctx, GD_ERR_INVALID, "no op named '%s'", opname);
    return gd_node_add(g, op, n_in, in, n_attr, attrs, n_out, out) != NULL ? GD_OK : GD_ERR_SHAPE;
}

gd_tensor *gd_op(gd_graph *g, const char *opname, int n_in, gd_tensor *const *in, int n_attr, const gd_attr *attrs)
{
    if (g == NULL) return NULL;
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
