/* fuse.cu — the CUDA plugin's graph pass: a bias and an activation fused into the matrix
 * product in front of them, as the op linear_act (src/ops/matmul.c), which matmul.cu runs
 * as one cuBLASLt call with a bias (and relu) epilogue plus, for gelu and silu, one
 * elementwise pass — instead of a GEMM, a bias pass and an activation pass.
 *
 *   act(linear(x, W [, b]))                 -> linear_act(x, W [, b]; act)
 *   act(add(matmul(x, W), b)), either order -> linear_act(x, W, b; act, weight_in_out)
 *
 * act uses gdp_activation's numbering (gradus_semantics.h). A chain is fused only when
 * every value it swallows has exactly one reader (the next node of the chain): relu's
 * gradient reads relu's output, which the fused node keeps, so linear + relu fuses in
 * training graphs too; gelu and silu gradients read their input, which then has two
 * readers, so those chains fuse in inference graphs only.
 *
 * The pass sees the program's node list. The bias of add may be any value: a computed one
 * is named as (its node, its output), a parameter or graph input as "input k of the add"
 * (node -2 - add), which the view resolves to the same value.
 *
 * GRADUS_CUDA_FUSE=0 turns the pass off (plugin.cu leaves graph_pass NULL).
 */
#include "cuda_internal.h"

#include <string.h>

static int op_is(gdp_graph_view *g, int32_t id, const char *name)
{
    const char *op = id >= 0 ? g->node_op(g->graph, id) : NULL;
    return op != NULL && strcmp(op, name) == 0;
}

/* linear_act's act code for an activation node, GDP_ACT_NONE if it is none of them. */
static int act_of(gdp_graph_view *g, int32_t id)
{
    if (op_is(g, id, "relu")) return GDP_ACT_RELU;
    if (op_is(g, id, "silu")) return GDP_ACT_SILU;
    if (op_is(g, id, "gelu")) {
        const gdp_attrs *a = g->node_attrs(g->graph, id);
        return gdp_attr_int(a, "approximate", 0) != 0 ? GDP_ACT_GELU_TANH : GDP_ACT_GELU;
    }
    return GDP_ACT_NONE;
}

/* The producer of input k of node id when it is output 0 of a node read by nobody else. */
static int32_t sole_producer(gdp_graph_view *g, int32_t id, int32_t k)
{
    int32_t out = -1, p = g->node_input(g->graph, id, k, &out);
    if (p < 0 || out != 0 || g->node_users(g->graph, p, 0) != 1) return -1;
    return p;
}

static int same_dims(const gdp_tensor *a, const gdp_tensor *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

/* What matmul.cu's linear_act kernel accepts (its linear_supports): a fused node it would
 * decline would run elsewhere, which strict mode refuses. x (..., in), W 2-D, b (out). */
static int linear_act_ok(const gdp_tensor *x, const gdp_tensor *w, const gdp_tensor *b, const gdp_tensor *y, int wio)
{
    const int64_t lim = (int64_t)INT32_MAX;
    if (!cu_gpu_float(x->dtype) || w->dtype != x->dtype || y->dtype != x->dtype) return 0;
    if (x->ndim < 1 || w->ndim != 2 || y->ndim != x->ndim) return 0;
    int64_t in = wio ? w->shape[0] : w->shape[1], out = wio ? w->shape[1] : w->shape[0];
    if (in < 1 || in > lim || out > lim || x->shape[x->ndim - 1] != in || y->shape[y->ndim - 1] != out) return 0;
    for (int d = 0; d + 1 < x->ndim; d++)
        if (y->shape[d] != x->shape[d]) return 0;
    if (gdp_numel(x) / in > lim) return 0;
    return b == NULL || (b->dtype == x->dtype && b->ndim == 1 && b->shape[0] == out);
}

static gdp_status fuse_linear(gdp_graph_view *g, int32_t act_id, int act, int *fused, gdp_err *err)
{
    int32_t lin = sole_producer(g, act_id, 0);
    if (lin < 0 || !op_is(g, lin, "linear")) return GDP_OK;
    int32_t n_in = g->node_n_inputs(g->graph, lin);
    if (n_in < 2 || n_in > 3) return GDP_OK;
    gdp_tensor x, w, b, y;
    if (g->node_input_desc(g->graph, lin, 0, &x) != GDP_OK || g->node_input_desc(g->graph, lin, 1, &w) != GDP_OK ||
        (n_in == 3 && g->node_input_desc(g->graph, lin, 2, &b) != GDP_OK) ||
        g->node_output_desc(g->graph, act_id, 0, &y) != GDP_OK)
        return GDP_OK;
    if (!linear_act_ok(&x, &w, n_in == 3 ? &b : NULL, &y, 0)) return GDP_OK;
    const int32_t in_nodes[3] = {-1, -1, -1}, in_outs[3] = {0, 1, 2}; /* the linear's own inputs */
    gdp_attr at[2];
    memset(at, 0, sizeof at);
    at[0].name = "act", at[0].kind = GDP_ATTR_INT, at[0].i = act;
    at[1].name = "weight_in_out", at[1].kind = GDP_ATTR_INT, at[1].i = 0;
    gdp_status s = g->replace_chain(g->graph, lin, act_id, "linear_act", n_in, in_nodes, in_outs, at, 2, 0, NULL, NULL, err);
    if (s == GDP_OK) *fused = 1;
    return s;
}

static gdp_status fuse_matmul_add(gdp_graph_view *g, int32_t act_id, int act, int *fused, gdp_err *err)
{
    int32_t add = sole_producer(g, act_id, 0);
    if (add < 0 || !op_is(g, add, "add") || g->node_n_inputs(g->graph, add) != 2) return GDP_OK;
    for (int32_t side = 0; side < 2; side++) {
        int32_t mm = sole_producer(g, add, side);
        if (mm < 0 || !op_is(g, mm, "matmul") || g->node_n_inputs(g->graph, mm) != 2) continue;
        const gdp_attrs *a = g->node_attrs(g->graph, mm);
        if (gdp_attr_int(a, "transpose_a", 0) != 0) continue;
        int wio = gdp_attr_int(a, "transpose_b", 0) == 0; /* W (in, out) unless transposed */
        int32_t bias_out = -1, bias_node = g->node_input(g->graph, add, 1 - side, &bias_out);
        if (bias_node < 0) {
            /* a parameter or graph input: named as input (1 - side) of the add */
            bias_node = -2 - add;
            bias_out = 1 - side;
        }
        gdp_tensor x, w, b, z, mo, y;
        if (g->node_input_desc(g->graph, mm, 0, &x) != GDP_OK || g->node_input_desc(g->graph, mm, 1, &w) != GDP_OK ||
            g->node_input_desc(g->graph, add, 1 - side, &b) != GDP_OK ||
            g->node_output_desc(g->graph, mm, 0, &mo) != GDP_OK || g->node_output_desc(g->graph, add, 0, &z) != GDP_OK ||
            g->node_output_desc(g->graph, act_id, 0, &y) != GDP_OK)
            continue;
        /* matmul's x needs 2 dims (a 1-D x means something else there); the bias must
         * broadcast over rows only, leaving the product's shape as it is. */
        if (x.ndim < 2 || !same_dims(&mo, &z) || !same_dims(&z, &y)) continue;
        if (!linear_act_ok(&x, &w, &b, &y, wio)) continue;
        const int32_t in_nodes[3] = {-1, -1, bias_node}, in_outs[3] = {0, 1, bias_out};
        gdp_attr at[2];
        memset(at, 0, sizeof at);
        at[0].name = "act", at[0].kind = GDP_ATTR_INT, at[0].i = act;
        at[1].name = "weight_in_out", at[1].kind = GDP_ATTR_INT, at[1].i = wio;
        gdp_status s = g->replace_chain(g->graph, mm, act_id, "linear_act", 3, in_nodes, in_outs, at, 2, 0, NULL, NULL, err);
        if (s == GDP_OK) *fused = 1;
        return s;
    }
    return GDP_OK;
}

static gdp_status fuse_run(void *backend, gdp_graph_view *g, gdp_err *err)
{
    (void)backend;
    if (!GDP_HAS_FIELD(g, gdp_graph_view, replace_chain) || g->node_count == NULL || g->node_op == NULL ||
        g->node_n_inputs == NULL || g->node_input == NULL || g->node_input_desc == NULL ||
        g->node_output_desc == NULL || g->node_attrs == NULL || g->node_users == NULL || g->replace_chain == NULL)
        return GDP_OK; /* an older host: no fusion, nothing wrong */
    /* A replacement puts the fused node in the activation's place (an op act_of does
     * not match) and retires the others: ids stay where they are. */
    int32_t n = g->node_count(g->graph);
    for (int32_t id = 0; id < n; id++) {
        int act = act_of(g, id);
        if (act == GDP_ACT_NONE) continue;
        int fused = 0;
        gdp_status s = fuse_linear(g, id, act, &fused, err);
        if (s == GDP_OK && !fused) s = fuse_matmul_add(g, id, act, &fused, err);
        if (s != GDP_OK) return s;
    }
    return GDP_OK;
}

extern const gdp_graph_pass cu_fuse_pass = {sizeof(gdp_graph_pass), "fuse bias + activation into linear_act", fuse_run};
