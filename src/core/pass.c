/* pass.c — backends' graph passes (e.g. fusing a bias and an activation into a matmul),
 * seen through the gdp_graph_view callbacks of the ABI. Each backend's pass runs once per
 * graph, before the first placement. */
#include "core.h"

#include <stdlib.h>
#include <string.h>

static gd_graph *G(void *g) { return (gd_graph *)g; }
static gd_node *node_at(void *g, int32_t id)
{
    return id >= 0 && id < G(g)->n_nodes && !G(g)->nodes[id]->dead ? G(g)->nodes[id] : NULL;
}

static int32_t v_count(void *g) { return G(g)->n_nodes; }
static const char *v_op(void *g, int32_t id)
{
    gd_node *n = node_at(g, id);
    return n != NULL ? n->op->name : NULL;
}
static int32_t v_n_inputs(void *g, int32_t id)
{
    gd_node *n = node_at(g, id);
    return n != NULL ? n->n_in : 0;
}
static int32_t v_input(void *g, int32_t id, int32_t k, int32_t *out_index)
{
    gd_node *n = node_at(g, id);
    if (n == NULL || k < 0 || k >= n->n_in) return -1;
    gd_tensor *t = n->in[k];
    if (out_index != NULL) *out_index = t->out_index;
    return t->node != NULL ? t->node->id : -1;
}
static gdp_status v_in_desc(void *g, int32_t id, int32_t k, gdp_tensor *d)
{
    gd_node *n = node_at(g, id);
    if (n == NULL || k < 0 || k >= n->n_in) return GDP_ERR_INVALID;
    *d = gd_value_desc(n->in[k], NULL);
    return GDP_OK;
}
static gdp_status v_out_desc(void *g, int32_t id, int32_t k, gdp_tensor *d)
{
    gd_node *n = node_at(g, id);
    if (n == NULL || k < 0 || k >= n->n_out) return GDP_ERR_INVALID;
    *d = gd_value_desc(n->out[k], NULL);
    return GDP_OK;
}
static const gdp_attrs *v_attrs(void *g, int32_t id)
{
    static gdp_attrs a; /* valid until the next call, as documented for passes */
    gd_node *n = node_at(g, id);
    if (n == NULL) return NULL;
    a = gd_node_attrs(n);
    return &a;
}
/* Users of an output: nodes reading it, plus one when it is exposed outside the nodes (a
 * target of a compiled program) — a fusion must not swallow it. */
static int32_t v_users(void *g, int32_t id, int32_t k)
{
    gd_node *n = node_at(g, id);
    if (n == NULL || k < 0 || k >= n->n_out) return 0;
    gd_tensor *t = n->out[k];
    int32_t users = t->exposed;
    for (int i = 0; i < G(g)->n_nodes; i++) {
        gd_node *m = G(g)->nodes[i];
        if (m->dead) continue;
        for (int j = 0; j < m->n_in; j++) users += m->in[j] == t;
    }
    return users;
}

static gdp_status v_replace(void *gv, int32_t first, int32_t last, const char *opname, int32_t n_in,
                            const int32_t *in_nodes, const int32_t *in_outputs, const gdp_attr *attrs, int32_t n_attrs,
                            gdp_err *err)
{
    gd_graph *g = G(gv);
    gd_node *nf = node_at(gv, first), *nl = node_at(gv, last);
    if (nf == NULL || nl == NULL || first > last) return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: bad node ids");
    const gd_op_def *op = gd_registry_find(g->ctx->reg, opname);
    if (op == NULL) return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: gradus has no op '%s'", opname);
    if (n_in > GDP_MAX_INPUTS || n_attrs > 16) return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: too many inputs");
    gd_tensor *in[GDP_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) {
        if (in_nodes[i] < 0) {
            if (in_outputs[i] < 0 || in_outputs[i] >= nf->n_in) return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: bad input");
            in[i] = nf->in[in_outputs[i]];
        } else {
            gd_node *p = node_at(gv, in_nodes[i]);
            if (p == NULL || in_outputs[i] < 0 || in_outputs[i] >= p->n_out)
                return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: bad input");
            in[i] = p->out[in_outputs[i]];
        }
    }
    gd_attr a[16];
    for (int k = 0; k < n_attrs; k++) {
        memset(&a[k], 0, sizeof a[k]);
        a[k].name = attrs[k].name;
        a[k].kind = (gd_attr_kind)attrs[k].kind;
        a[k].i = attrs[k].i;
        a[k].f = attrs[k].f;
        a[k].n = attrs[k].n > GD_MAX_DIMS ? GD_MAX_DIMS : attrs[k].n;
        for (int j = 0; j < a[k].n; j++) a[k].ints[j] = attrs[k].ints[j];
    }
    gd_tensor *out[GDP_MAX_OUTPUTS];
    gd_node *nn = gd_node_add(g, op, n_in, in, n_attrs, a, op->n_out, out);
    if (nn == NULL) return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: %s", g->ctx->err);
    gd_tensor *old = nl->out[0];
    if (out[0]->ndim != old->ndim || out[0]->dtype != old->dtype ||
        memcmp(out[0]->shape, old->shape, sizeof(int64_t) * (size_t)old->ndim) != 0) {
        nn->dead = 1;
        return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: %s's output does not match the chain's", opname);
    }
    /* The new node takes the old output's identity (so targets, gradients and readers keep
     * working) and the old chain's position in graph order (so updates stay ordered after it). */
    out[0]->node = NULL;
    old->node = nn;
    old->out_index = 0;
    nn->out[0] = old;
    /* Remove the chain: `last`, then, going back, every node in [first, last) that fed a
     * removed node and has no other use. Nodes in that range outside the chain stay. */
    nl->dead = 1;
    for (int32_t id = last - 1; id >= first; id--) {
        gd_node *m = node_at(gv, id);
        if (m == NULL) continue;
        int feeds_chain = 0, used = 0;
        for (int32_t j = id + 1; j <= last; j++) {
            gd_node *c = g->nodes[j];
            if (!c->dead) continue;
            for (int i = 0; i < c->n_in; i++)
                for (int k = 0; k < m->n_out; k++) feeds_chain |= c->in[i] == m->out[k];
        }
        for (int k = 0; k < m->n_out; k++) used += v_users(gv, id, k);
        if (feeds_chain && used == 0) m->dead = 1;
    }
    /* move the new node from the end of the list to the chain's last position */
    g->nodes[g->n_nodes - 1] = nl;
    g->nodes[last] = nn;
    nl->id = g->n_nodes - 1;
    nn->id = last;
    return GDP_OK;
}

gd_status gd_graph_run_passes(gd_graph *g)
{
    gd_ctx *ctx = g->ctx;
    for (int i = 0; i < ctx->n_backends; i++) {
        gd_backend *b = ctx->backends[i];
        const gdp_graph_pass *pass = b->plugin.graph_pass;
        if (pass == NULL || pass->run == NULL || (g->passes_done & (1 << i))) continue;
        g->passes_done |= 1 << i;
        gdp_graph_view view = {.size = sizeof view, .graph = g, .node_count = v_count, .node_op = v_op,
                               .node_n_inputs = v_n_inputs, .node_input = v_input, .node_input_desc = v_in_desc,
                               .node_output_desc = v_out_desc, .node_attrs = v_attrs, .node_users = v_users,
                               .replace_chain = v_replace};
        gdp_err e = {.size = sizeof e};
        if (pass->run(b->plugin.backend, &view, &e) != GDP_OK)
            return gd_fail(ctx, GD_ERR_DEVICE, "%s graph pass '%s': %s", b->name, pass->name ? pass->name : "?", e.msg);
    }
    return GD_OK;
}
