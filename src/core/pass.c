/* pass.c — backends' graph passes (e.g. fusing a bias and an activation into a matmul),
 * run over a program's node list through the gdp_graph_view callbacks of the ABI. A pass
 * rewrites the program, never the user's graph: nodes it makes belong to the program,
 * and another program of the same graph starts again from the graph. Node ids in the
 * view are positions in the program's list. */
#include "program.h"

#include <stdio.h>
#include <string.h>

static gd_program *P(void *g) { return (gd_program *)g; }
static gd_pnode *pnode_at(void *g, int32_t id)
{
    return id >= 0 && id < P(g)->n_pn && !P(g)->pn[id].dead ? &P(g)->pn[id] : NULL;
}
static gd_node *node_at(void *g, int32_t id)
{
    gd_pnode *x = pnode_at(g, id);
    return x != NULL ? x->node : NULL;
}

/* The position in the program of the node producing value t, or -1 (a leaf, or made
 * outside the program). */
static int32_t producer(gd_program *p, const gd_tensor *t)
{
    for (int32_t i = 0; i < p->n_pn; i++) {
        if (p->pn[i].dead) continue;
        const gd_node *n = p->pn[i].node;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] == t) return i;
    }
    return -1;
}

static int32_t v_count(void *g) { return P(g)->n_pn; }
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
static int32_t v_n_outputs(void *g, int32_t id)
{
    gd_node *n = node_at(g, id);
    return n != NULL ? n->n_out : 0;
}
static int32_t v_input(void *g, int32_t id, int32_t k, int32_t *out_index)
{
    gd_node *n = node_at(g, id);
    if (n == NULL || k < 0 || k >= n->n_in) return -1;
    const gd_tensor *t = n->in[k];
    int32_t pr = producer(P(g), t);
    if (out_index != NULL) {
        *out_index = 0;
        if (pr >= 0) {
            const gd_node *m = P(g)->pn[pr].node;
            for (int j = 0; j < m->n_out; j++)
                if (m->out[j] == t) *out_index = j;
        }
    }
    return pr;
}
static gdp_status v_in_desc(void *g, int32_t id, int32_t k, gdp_tensor *d)
{
    gd_node *n = node_at(g, id);
    if (n == NULL || k < 0 || k >= n->n_in || d == NULL) return GDP_ERR_INVALID;
    *d = gd_value_desc(n->in[k], NULL);
    return GDP_OK;
}
static gdp_status v_out_desc(void *g, int32_t id, int32_t k, gdp_tensor *d)
{
    gd_node *n = node_at(g, id);
    if (n == NULL || k < 0 || k >= n->n_out || d == NULL) return GDP_ERR_INVALID;
    *d = gd_value_desc(n->out[k], NULL);
    return GDP_OK;
}
static const gdp_attrs *v_attrs(void *g, int32_t id)
{
    gd_node *n = node_at(g, id);
    if (n == NULL) return NULL;
    P(g)->pass_attrs = gd_node_attrs(n); /* valid until the next call, as documented */
    return &P(g)->pass_attrs;
}

/* Readers of t among live nodes, plus one when the program exposes it: a target, or an
 * update's output (kept whatever reads it). */
static int32_t users_of(gd_program *p, const gd_tensor *t)
{
    int32_t users = 0;
    for (int i = 0; i < p->n_targets; i++) users += p->targets[i] == t;
    for (int i = 0; i < p->n_pn; i++) {
        if (p->pn[i].dead) continue;
        const gd_node *m = p->pn[i].node;
        for (int j = 0; j < m->n_in; j++) users += m->in[j] == t;
        if (m->is_update)
            for (int k = 0; k < m->n_out; k++) users += m->out[k] == t && m->op->inplace[k] >= 0;
    }
    return users;
}
static int32_t v_users(void *g, int32_t id, int32_t k)
{
    gd_node *n = node_at(g, id);
    if (n == NULL || k < 0 || k >= n->n_out) return 0;
    return users_of(P(g), n->out[k]);
}

/* The new outputs (NULL in out) of a replacement node of `op` over `in`: values of the
 * program, shaped by the op's shape rule (which node_make then checks again). */
static gdp_status new_values(gd_program *p, const gd_op_def *op, int n_in, gd_tensor *const *in, int n_attrs,
                             const gdp_attr *attrs, int no, gd_tensor **out, gdp_err *err)
{
    gd_shape shapes[GDP_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) shapes[i] = gd_value_shape(in[i]);
    const gdp_attrs av = {n_attrs, attrs};
    gd_infer ic = {.op = op->name, .n_in = n_in, .in = shapes, .attrs = &av, .n_out = op->n_out};
    if (op->infer(&ic) != 0) return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: %s: %s", op->name, ic.msg);
    if (ic.n_out != no) return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: %s makes %d outputs here", op->name, ic.n_out);
    for (int j = 0; j < no; j++) {
        if (out[j] != NULL) continue;
        gd_tensor *t = gd_calloc(1, sizeof *t);
        if (t == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "replace_chain: out of memory");
        *t = (gd_tensor){.g = p->g, .kind = GD_V_NODE, .dtype = ic.out[j].dtype, .ndim = ic.out[j].ndim};
        memcpy(t->shape, ic.out[j].dim, sizeof ic.out[j].dim[0] * (size_t)ic.out[j].ndim);
        int id = gd_prog_add_value(p, t); /* the program frees it (gd_program_free) */
        if (id < 0) {
            gd_free(t);
            return gdp_fail(err, GDP_ERR_NOMEM, "replace_chain: out of memory");
        }
        t->id = id;
        out[j] = t;
    }
    return GDP_OK;
}

static gdp_status v_replace(void *gv, int32_t first, int32_t last, const char *opname, int32_t n_in,
                            const int32_t *in_nodes, const int32_t *in_outputs, const gdp_attr *attrs, int32_t n_attrs,
                            int32_t n_out, const int32_t *out_nodes, const int32_t *out_outputs, gdp_err *err)
{
    gd_program *p = P(gv);
    gd_graph *g = p->g;
    gd_node *nf = node_at(gv, first), *nl = node_at(gv, last);
    if (nf == NULL || nl == NULL || first > last) return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: bad node ids");
    if (opname == NULL) return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: no op name");
    const gd_op_def *op = gd_registry_find(g->ctx->reg, opname);
    if (op == NULL) return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: gradus has no op '%s'", opname);
    if (n_in < 0 || n_in > GDP_MAX_INPUTS || n_attrs < 0 || n_attrs > 16 || n_out < 0 || n_out > GDP_MAX_OUTPUTS ||
        (n_in > 0 && (in_nodes == NULL || in_outputs == NULL)) || (n_attrs > 0 && attrs == NULL) ||
        (n_out > 0 && (out_nodes == NULL || out_outputs == NULL)))
        return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: bad counts or NULL arrays");
    gd_tensor *in[GDP_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) {
        if (in_nodes[i] < 0) {
            /* -1: input k of `first`; -2 - j: input k of node j (a leaf a pass cannot name) */
            gd_node *m = in_nodes[i] == -1 ? nf : node_at(gv, -2 - in_nodes[i]);
            if (m == NULL || in_outputs[i] < 0 || in_outputs[i] >= m->n_in)
                return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: bad input %d", i);
            in[i] = m->in[in_outputs[i]];
        } else {
            gd_node *m = node_at(gv, in_nodes[i]);
            if (m == NULL || in_outputs[i] < 0 || in_outputs[i] >= m->n_out)
                return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: bad input %d", i);
            in[i] = m->out[in_outputs[i]];
        }
    }
    /* the values the new node's outputs take the place of, NULL for a new one */
    gd_tensor *out[GDP_MAX_OUTPUTS];
    int no = n_out > 0 ? n_out : 1, fresh = 0;
    if (no != op->n_out) return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: %s has %d outputs, %d given", opname, op->n_out, no);
    for (int j = 0; j < no; j++) {
        int32_t on = n_out > 0 ? out_nodes[j] : last, oi = n_out > 0 ? out_outputs[j] : 0;
        out[j] = NULL;
        if (on == -1) {
            fresh++;
            continue;
        }
        gd_node *m = node_at(gv, on);
        if (m == NULL || on < first || on > last || oi < 0 || oi >= m->n_out)
            return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: output %d must replace an output of the chain", j);
        out[j] = m->out[oi];
    }
    if (fresh == no) return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: no output replaces one of the chain");
    gd_attr a[16];
    for (int k = 0; k < n_attrs; k++) {
        memset(&a[k], 0, sizeof a[k]);
        a[k].name = attrs[k].name;
        a[k].kind = (gd_attr_kind)attrs[k].kind;
        a[k].i = attrs[k].i;
        a[k].f = attrs[k].f;
        a[k].s = attrs[k].s;
        a[k].n = attrs[k].n;
        for (int j = 0; j < a[k].n && j < GD_MAX_DIMS; j++) a[k].ints[j] = attrs[k].ints[j];
    }
    if (fresh > 0 && new_values(p, op, n_in, in, n_attrs, attrs, no, out, err) != GDP_OK) return GDP_ERR_INVALID;
    gd_node *nn = gd_node_make(g, op, n_in, in, n_attrs, a, no, out);
    if (nn == NULL) return gdp_fail(err, GDP_ERR_INVALID, "replace_chain: %s", g->ctx->err);
    /* Which chain nodes go: `last`, and going back every node in [first, last) that fed a
     * removed node and whose outputs nobody reads any more. Nodes in that range that are
     * not part of the chain stay. The new node takes `last`'s place. */
    gd_pnode *xl = &p->pn[last];
    if (xl->owned) gd_node_free(xl->node);
    xl->node = nn;
    xl->owned = 1;
    for (int32_t id = last - 1; id >= first; id--) {
        gd_pnode *m = pnode_at(gv, id);
        if (m == NULL) continue;
        int used = 0, replaced = 0;
        for (int k = 0; k < m->node->n_out; k++) {
            for (int j = 0; j < no; j++) replaced |= out[j] == m->node->out[k];
            used += users_of(p, m->node->out[k]);
        }
        if (replaced) {
            /* its output now comes from the new node: it must go, or two nodes make it */
            m->dead = 1;
            continue;
        }
        if (used == 0) m->dead = 1;
    }
    return GDP_OK;
}

static int32_t v_same_input(void *g, int32_t a, int32_t ka, int32_t b, int32_t kb)
{
    gd_node *na = node_at(g, a), *nb = node_at(g, b);
    if (na == NULL || nb == NULL || ka < 0 || ka >= na->n_in || kb < 0 || kb >= nb->n_in) return 0;
    return na->in[ka] == nb->in[kb];
}

/* The preferred backend's pass only: a pass rewrites the program into ops its own backend
 * runs fast, which another backend may not have at all — a CUDA pass run for a program
 * placed on the CPU would leave the CPU fused nodes to fall back on. */
gd_status gd_prog_passes(gd_program *p)
{
    gd_ctx *ctx = p->g->ctx;
    for (int i = 0; i < ctx->n_backends; i++) {
        gd_backend *b = ctx->backends[i];
        const gdp_graph_pass *pass = b->plugin.graph_pass;
        if (pass == NULL || pass->run == NULL || b != p->dev) continue;
        gdp_graph_view view = {.size = sizeof view, .graph = p, .node_count = v_count, .node_op = v_op,
                               .node_n_inputs = v_n_inputs, .node_n_outputs = v_n_outputs, .node_input = v_input,
                               .node_input_desc = v_in_desc, .node_output_desc = v_out_desc, .node_attrs = v_attrs,
                               .node_users = v_users, .replace_chain = v_replace,
                               .same_input = v_same_input, .new_outputs = 1};
        gdp_err e = {.size = sizeof e};
        gdp_status s = pass->run(b->plugin.backend, &view, &e);
        if (s != GDP_OK)
            return gd_fail(ctx, gd_status_from_plugin(s), "%s graph pass '%s': %s", b->name, pass->name ? pass->name : "?",
                           e.msg);
    }
    return GD_OK;
}
