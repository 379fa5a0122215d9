/* fuse.cu — the CUDA plugin's graph pass. First a bias and an activation fused into the
 * matrix product in front of them, as the op linear_act (src/ops/matmul.c), which matmul.cu
 * runs as one cuBLASLt call with a bias (and relu) epilogue plus, for gelu and silu, one
 * elementwise pass — instead of a GEMM, a bias pass and an activation pass:
 *
 *   act(linear(x, W [, b]))                 -> linear_act(x, W [, b]; act)
 *   act(add(matmul(x, W), b)), either order -> linear_act(x, W, b; act, weight_in_out)
 *
 * Then the fusions that cut a transformer's launches, which is what a decode step's time
 * is made of (a few rows: each product is a read of its weights and a launch):
 *
 *   add(linear(x, W [, b]), r), either order    -> linear_add(x, W [, b], r)       (<= 8 rows)
 *   norm(add(x, r) [, w [, b]])                -> add_rms_norm / add_layer_norm (x, r [, w [, b]])
 *                                                 (any rows: training graphs too)
 *   swiglu(linear(x, Wg), linear(x, Wu)),
 *   mul(linear_act(x, Wg; silu), linear(x, Wu)) -> linear_swiglu(x, Wg, Wu)       (<= 8 rows)
 *   linear(x, W1), linear(x, W2), linear(x, W3) -> linear_qkv(x, W1, W2, W3)      (<= 8 rows)
 *   linear_qkv / linear_swiglu (rms_norm(x, g), W...)
 *                                              -> the same op (x, W..., g; eps)   (<= 8 rows)
 *   rope(q, pos), rope(k, pos) and the cache writes of rope(k) and v that an attention
 *   reads                                      -> rope_cache_write(q, k, v, kc, vc, pos)  (T <= 4)
 *   rope_cache_write of linear_qkv's three products seen as heads
 *                                              -> linear_qkv_rope(x, W..., kc, vc, pos [, g])
 *   attention(q, k, v) and its attention_grad  -> attention_lse (y and a new lse) and
 *                                                 attention_grad_lse(dy, q, k, v, y, lse)
 *                                                 (training: the backward reuses lse; y
 *                                                 written as y.transpose(1, 2) where only
 *                                                 that reads it)
 *   gelu(linear_act(x, W [, b])) with z also read (training; gelu tanh, f16/bf16)
 *                                              -> linear_act_keep(x, W [, b]) (y and z)
 *   gelu_grad(matmul(a, b) [reshaped], z)      -> matmul_act_grad(a, b, z)   (the same)
 *   add(layer_norm_grad / rms_norm_grad (dy, x, w) dx, r)
 *                                              -> layer_norm_grad_add / rms_norm_grad_add
 *                                                 (dy, x, w, r) (training: the residual
 *                                                 stream's gradient)
 *   cross_entropy(x, t) and cross_entropy_grad(dl, x, t)
 *                                              -> cross_entropy_with_grad(dl, x, t) (the
 *                                                 gradient and the loss, one kernel)
 *   add(matmul(a, b) [reshaped], r)            -> matmul_acc(a, b, r) (training: sums of
 *                                                 gradients, r the GEMM's addend)
 *
 * With them a Llama layer's decode step is five nodes: linear_qkv_rope with the input norm
 * in front, attention, linear_add (the output projection and the residual),
 * linear_swiglu with the post-attention norm in front, linear_add (the down projection and
 * the residual). The residual sum is linear_add's output, which the next norm-and-product
 * and the next residual add both read. The residual rule comes first (it is anchored at the
 * add, which precedes the norm), so add_rms_norm takes only the adds it leaves: those over
 * more rows (a prefill, a training batch) and those whose operands are no plain linear. A norm is
 * folded into a product only when gemv.cu's kernels take it (cu_gemv_norm_fits: the rows
 * fit in shared memory), a weightless norm or a layer_norm (GPT-2) never. Rows of W of 4 KiB
 * or more, whose plain products gemv.cu splits among warps (cu_gemv_splits), get no norm in
 * front, no linear_swiglu and no linear_qkv_rope: those kernels do not split, and a fused
 * node must sum as the nodes it replaces.
 *
 * A fused node takes the place of its chain's last node, so a rule declines when a node
 * between the chain's ends reads a value the fused node now makes.
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
#include "attention.h"

#include <string.h>

/* gemv.cu: whether its products take the RMS norm of R rows of K elements of dtype dt in
 * front of them */
int cu_gemv_norm_fits(const cu_backend *be, int64_t R, int64_t K, int32_t dt);
/* gemv.cu: whether its plain products over rows of K elements of dt split K among warps,
 * which its fused forms do not: those fusions then decline, so a fused node sums in the
 * order of the products it replaces */
int cu_gemv_splits(int64_t K, int32_t dt);

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

/* ---- the decode-step and residual fusions -------------------------------------------------- */

/* Rows of a product's x (numel over the last dim), or -1 when x is not a float matrix. */
static int64_t rows_of(const gdp_tensor *x)
{
    if (!cu_gpu_float(x->dtype) || x->ndim < 1 || x->shape[x->ndim - 1] < 1) return -1;
    return gdp_numel(x) / x->shape[x->ndim - 1];
}

/* Whether a node strictly between `from` and `to` reads output k of node p: the fused node
 * takes `to`'s place, so an earlier reader would read the value before it exists. */
static int read_between(gdp_graph_view *g, int32_t p, int32_t k, int32_t from, int32_t to)
{
    for (int32_t id = from + 1; id < to; id++) {
        if (g->node_op(g->graph, id) == NULL) continue;
        int32_t n = g->node_n_inputs(g->graph, id);
        for (int32_t j = 0; j < n; j++) {
            int32_t o = -1;
            if (g->node_input(g->graph, id, j, &o) == p && o == k) return 1;
        }
    }
    return 0;
}

/* The same value feeds input ka of node a and input kb of node b. A host older than ABI
 * 2.3 cannot say so for leaves (graph inputs, parameters): then only computed values match. */
static int same_input(gdp_graph_view *g, int32_t a, int32_t ka, int32_t b, int32_t kb)
{
    if (GDP_HAS_FIELD(g, gdp_graph_view, same_input) && g->same_input != NULL)
        return g->same_input(g->graph, a, ka, b, kb) != 0;
    int32_t oa = -1, ob = -1, pa = g->node_input(g->graph, a, ka, &oa), pb = g->node_input(g->graph, b, kb, &ob);
    return pa >= 0 && pa == pb && oa == ob;
}

/* add(x, r) read by rms_norm / layer_norm -> add_rms_norm / add_layer_norm (x, r, w, b) with
 * the sum as output 0 and the norm as output 1: the residual stream of a transformer. The
 * sum may have other readers (the next residual add, a gradient), as long as none sits
 * between the two nodes. */
static gdp_status fuse_add_norm(gdp_graph_view *g, int32_t norm, gdp_err *err)
{
    const int rms = op_is(g, norm, "rms_norm");
    if (!rms && !op_is(g, norm, "layer_norm")) return GDP_OK;
    int32_t out = -1, add = g->node_input(g->graph, norm, 0, &out);
    if (add < 0 || out != 0 || !op_is(g, add, "add") || g->node_n_inputs(g->graph, add) != 2) return GDP_OK;
    gdp_tensor x, r, sum, y;
    if (g->node_input_desc(g->graph, add, 0, &x) != GDP_OK || g->node_input_desc(g->graph, add, 1, &r) != GDP_OK ||
        g->node_output_desc(g->graph, add, 0, &sum) != GDP_OK || g->node_output_desc(g->graph, norm, 0, &y) != GDP_OK)
        return GDP_OK;
    /* no broadcast: both operands are the sum's shape and dtype */
    if (rows_of(&x) < 0 || !same_dims(&x, &sum) || !same_dims(&r, &sum) || r.dtype != x.dtype || sum.dtype != x.dtype ||
        y.dtype != x.dtype)
        return GDP_OK;
    if (read_between(g, add, 0, add, norm)) return GDP_OK;
    const int32_t n_norm = g->node_n_inputs(g->graph, norm);
    for (int32_t k = 1; k < n_norm; k++) {
        int32_t o = -1;
        if (g->node_input(g->graph, norm, k, &o) == add) return GDP_OK; /* the sum as its own weight */
    }
    int32_t in_nodes[4] = {-1, -1, -2 - norm, -2 - norm}, in_outs[4] = {0, 1, 1, 2};
    const int32_t out_nodes[2] = {add, norm}, out_outs[2] = {0, 0};
    const gdp_attrs *na = g->node_attrs(g->graph, norm);
    gdp_attr at[1];
    memset(at, 0, sizeof at);
    at[0].name = "eps", at[0].kind = GDP_ATTR_FLOAT, at[0].f = gdp_attr_float(na, "eps", rms ? 1e-6 : 1e-5);
    return g->replace_chain(g->graph, add, norm, rms ? "add_rms_norm" : "add_layer_norm", 1 + n_norm, in_nodes, in_outs,
                            at, 1, 2, out_nodes, out_outs, err);
}

/* swiglu(linear(x, Wg), linear(x, Wu)), or mul(linear_act(x, Wg; silu), linear(x, Wu)),
 * over a few rows -> linear_swiglu(x, Wg, Wu). */
static gdp_status fuse_swiglu(gdp_graph_view *g, int32_t mul, gdp_err *err)
{
    const int op_swiglu = op_is(g, mul, "swiglu");
    if ((!op_swiglu && !op_is(g, mul, "mul")) || g->node_n_inputs(g->graph, mul) != 2) return GDP_OK;
    for (int32_t side = 0; side < 2 - op_swiglu; side++) { /* swiglu's gate is its input 0 */
        int32_t gate = sole_producer(g, mul, side), up = sole_producer(g, mul, 1 - side);
        if (gate < 0 || up < 0 || !op_is(g, gate, op_swiglu ? "linear" : "linear_act") || !op_is(g, up, "linear"))
            continue;
        const gdp_attrs *ga = g->node_attrs(g->graph, gate);
        if (!op_swiglu && gdp_attr_int(ga, "act", 0) != GDP_ACT_SILU) continue;
        if (gdp_attr_int(ga, "weight_in_out", 0) != 0) continue;
        if (g->node_n_inputs(g->graph, gate) != 2 || g->node_n_inputs(g->graph, up) != 2 || !same_input(g, gate, 0, up, 0))
            continue;
        gdp_tensor x, wg, wu, y;
        if (g->node_input_desc(g->graph, gate, 0, &x) != GDP_OK || g->node_input_desc(g->graph, gate, 1, &wg) != GDP_OK ||
            g->node_input_desc(g->graph, up, 1, &wu) != GDP_OK || g->node_output_desc(g->graph, mul, 0, &y) != GDP_OK)
            continue;
        int64_t R = rows_of(&x);
        if (R < 1 || R > CU_GEMV_MAX_ROWS || !same_dims(&wg, &wu) || wg.dtype != x.dtype || wu.dtype != x.dtype ||
            y.dtype != x.dtype || cu_gemv_splits(x.shape[x.ndim - 1], x.dtype))
            continue;
        const int32_t first = gate < up ? gate : up;
        const int32_t in_nodes[3] = {-1, -2 - gate, -2 - up}, in_outs[3] = {0, 1, 1};
        return g->replace_chain(g->graph, first, mul, "linear_swiglu", 3, in_nodes, in_outs, NULL, 0, 0, NULL, NULL, err);
    }
    return GDP_OK;
}

/* Three bias-free linears of one x over a few rows -> linear_qkv(x, W1, W2, W3), in program
 * order; nothing between them may read the first two products. */
static gdp_status fuse_qkv(gdp_graph_view *g, int32_t first, gdp_err *err)
{
    if (!op_is(g, first, "linear") || g->node_n_inputs(g->graph, first) != 2) return GDP_OK;
    gdp_tensor x;
    if (g->node_input_desc(g->graph, first, 0, &x) != GDP_OK) return GDP_OK;
    int64_t R = rows_of(&x);
    if (R < 1 || R > CU_GEMV_MAX_ROWS) return GDP_OK;
    int32_t lin[3] = {first, -1, -1}, found = 1;
    const int32_t n = g->node_count(g->graph);
    for (int32_t id = first + 1; id < n && found < 3; id++)
        if (op_is(g, id, "linear") && g->node_n_inputs(g->graph, id) == 2 && same_input(g, first, 0, id, 0))
            lin[found++] = id;
    if (found < 3) return GDP_OK;
    for (int k = 0; k < 3; k++) {
        gdp_tensor w, y;
        if (g->node_input_desc(g->graph, lin[k], 1, &w) != GDP_OK || g->node_output_desc(g->graph, lin[k], 0, &y) != GDP_OK)
            return GDP_OK;
        if (w.dtype != x.dtype || y.dtype != x.dtype || w.ndim != 2) return GDP_OK;
    }
    if (read_between(g, lin[0], 0, lin[0], lin[2]) || read_between(g, lin[1], 0, lin[1], lin[2])) return GDP_OK;
    for (int j = 1; j < 3; j++) {
        int32_t o = -1, w = g->node_input(g->graph, lin[j], 1, &o);
        if (w == lin[0] || w == lin[1]) return GDP_OK; /* a product of the chain as a weight */
    }
    const int32_t in_nodes[4] = {-1, -2 - lin[0], -2 - lin[1], -2 - lin[2]}, in_outs[4] = {0, 1, 1, 1};
    const int32_t out_outs[3] = {0, 0, 0};
    return g->replace_chain(g->graph, lin[0], lin[2], "linear_qkv", 4, in_nodes, in_outs, NULL, 0, 3, lin, out_outs, err);
}

/* add(linear(x, W [, b]), r) in either order over a few rows, the product read by the add
 * alone -> linear_add(x, W [, b], r): the residual add in the epilogue of an attention
 * block's output projection and of an MLP's down projection. No broadcast: r and the
 * product are the sum's shape and dtype. The fused node makes only the sum, in the add's
 * place, so nothing between the two can read what it makes. */
static gdp_status fuse_linear_add(gdp_graph_view *g, int32_t add, gdp_err *err)
{
    if (!op_is(g, add, "add") || g->node_n_inputs(g->graph, add) != 2) return GDP_OK;
    for (int32_t side = 0; side < 2; side++) {
        const int32_t lin = sole_producer(g, add, side);
        if (lin < 0 || !op_is(g, lin, "linear")) continue;
        const int32_t n_in = g->node_n_inputs(g->graph, lin);
        if (n_in < 2 || n_in > 3) continue;
        gdp_tensor x, w, b, p, r, y;
        if (g->node_input_desc(g->graph, lin, 0, &x) != GDP_OK || g->node_input_desc(g->graph, lin, 1, &w) != GDP_OK ||
            (n_in == 3 && g->node_input_desc(g->graph, lin, 2, &b) != GDP_OK) ||
            g->node_output_desc(g->graph, lin, 0, &p) != GDP_OK ||
            g->node_input_desc(g->graph, add, 1 - side, &r) != GDP_OK ||
            g->node_output_desc(g->graph, add, 0, &y) != GDP_OK)
            continue;
        const int64_t R = rows_of(&x);
        if (R < 1 || R > CU_GEMV_MAX_ROWS || w.ndim != 2 || w.dtype != x.dtype || w.shape[1] != x.shape[x.ndim - 1])
            continue;
        if (n_in == 3 && (b.dtype != x.dtype || b.ndim != 1 || b.shape[0] != w.shape[0])) continue;
        if (p.dtype != x.dtype || y.dtype != x.dtype || r.dtype != x.dtype || !same_dims(&p, &y) || !same_dims(&r, &y))
            continue;
        /* the linear's own inputs, then the add's other operand (named through the add:
         * it may be a graph input) */
        int32_t in_nodes[4] = {-1, -1, -1, -1}, in_outs[4] = {0, 1, 2, 0};
        in_nodes[n_in] = -2 - add, in_outs[n_in] = 1 - side;
        return g->replace_chain(g->graph, lin, add, "linear_add", n_in + 1, in_nodes, in_outs, NULL, 0, 0, NULL, NULL,
                                err);
    }
    return GDP_OK;
}

/* linear_qkv / linear_swiglu of x = rms_norm(x0, g), the norm read by nothing else -> the
 * same op with the norm in front: (x0, its matrices, g; eps). gemv.cu normalizes x0 in each
 * block exactly as the rms_norm node would have (its sums, in its order), so the fused node
 * computes what the pair did. Only what those kernels take: a norm with a weight, over rows
 * that fit their shared memory. */
static gdp_status fuse_norm_product(void *backend, gdp_graph_view *g, int32_t prod, gdp_err *err)
{
    const int swiglu = op_is(g, prod, "linear_swiglu");
    if (!swiglu && !op_is(g, prod, "linear_qkv")) return GDP_OK;
    const int32_t nw = swiglu ? 2 : 3;
    if (g->node_n_inputs(g->graph, prod) != 1 + nw) return GDP_OK; /* a norm in front already */
    const int32_t norm = sole_producer(g, prod, 0);
    if (norm < 0 || !op_is(g, norm, "rms_norm") || g->node_n_inputs(g->graph, norm) != 2) return GDP_OK;
    gdp_tensor x, gw, h;
    if (g->node_input_desc(g->graph, norm, 0, &x) != GDP_OK || g->node_input_desc(g->graph, norm, 1, &gw) != GDP_OK ||
        g->node_output_desc(g->graph, norm, 0, &h) != GDP_OK)
        return GDP_OK;
    const int64_t R = rows_of(&x);
    if (R < 1 || R > CU_GEMV_MAX_ROWS || !same_dims(&x, &h) || h.dtype != x.dtype || gw.dtype != x.dtype ||
        gw.ndim != 1 || gw.shape[0] != x.shape[x.ndim - 1])
        return GDP_OK;
    if (!cu_gemv_norm_fits((const cu_backend *)backend, R, x.shape[x.ndim - 1], x.dtype) ||
        cu_gemv_splits(x.shape[x.ndim - 1], x.dtype))
        return GDP_OK;
    /* x and g are the norm's inputs (the chain's first node), the matrices the product's */
    int32_t in_nodes[5] = {-1, -2 - prod, -2 - prod, -2 - prod, -2 - prod}, in_outs[5] = {0, 1, 2, 3, 0};
    in_nodes[1 + nw] = -1, in_outs[1 + nw] = 1;
    const int32_t out_nodes[3] = {prod, prod, prod}, out_outs[3] = {0, 1, 2};
    gdp_attr at[1];
    memset(at, 0, sizeof at);
    at[0].name = "eps", at[0].kind = GDP_ATTR_FLOAT, at[0].f = gdp_attr_float(g->node_attrs(g->graph, norm), "eps", 1e-6);
    return g->replace_chain(g->graph, norm, prod, swiglu ? "linear_swiglu" : "linear_qkv", 2 + nw, in_nodes, in_outs,
                            at, 1, swiglu ? 0 : 3, out_nodes, out_outs, err);
}

/* The node making input k of node id, when it is op `op` and that value is its output 0. */
static int32_t input_op(gdp_graph_view *g, int32_t id, int32_t k, const char *op)
{
    int32_t out = -1, p = g->node_input(g->graph, id, k, &out);
    return p >= 0 && out == 0 && op_is(g, p, op) ? p : -1;
}

/* A permute swapping dims 1 and 2 of a 4-D value (gd_transpose(x, 1, 2)). */
static int swaps_1_2(gdp_graph_view *g, int32_t id)
{
    int64_t perm[8];
    return g->node_n_inputs(g->graph, id) == 1 && gdp_attr_ints(g->node_attrs(g->graph, id), "perm", perm, 8) == 4 &&
           perm[0] == 0 && perm[1] == 2 && perm[2] == 1 && perm[3] == 3;
}

/* A decode step's attention block, anchored at its attention node:
 *   attention(transpose(rope(q, pos)), cache_write(kc, transpose(rope(k, pos)), pos),
 *             cache_write(vc, transpose(v), pos) ...)
 * -> rope_cache_write(q, k, v, kc, vc, pos; theta, interleaved), which stands for the rope of
 * q and both cache writes (the rope of k and both transposes then have no reader and go).
 * Only for a few steps (T <= 4: the kernel computes each angle itself). When q and k are
 * rms_norm(q0, qn) and rms_norm(k0, kn) read by nothing else, with one eps (Qwen3's
 * QK-norm, over heads of at most 256), the norms go in too: (q0, k0, v, kc, vc, pos, qn, kn;
 * eps). */
static gdp_status fuse_rope_cache(gdp_graph_view *g, int32_t att, gdp_err *err)
{
    if (!op_is(g, att, "attention")) return GDP_OK;
    const int32_t cwk = input_op(g, att, 1, "cache_write"), cwv = input_op(g, att, 2, "cache_write");
    const int32_t pq = input_op(g, att, 0, "permute");
    if (cwk < 0 || cwv < 0 || pq < 0 || cwk == cwv) return GDP_OK;
    const int32_t pk = input_op(g, cwk, 1, "permute"), pv = input_op(g, cwv, 1, "permute");
    const int32_t rq = input_op(g, pq, 0, "rope"), rk = pk >= 0 ? input_op(g, pk, 0, "rope") : -1;
    if (pk < 0 || pv < 0 || rq < 0 || rk < 0 || rq == rk || !swaps_1_2(g, pq) || !swaps_1_2(g, pk) || !swaps_1_2(g, pv))
        return GDP_OK;
    if (g->node_n_inputs(g->graph, rq) != 2 || g->node_n_inputs(g->graph, rk) != 2) return GDP_OK;
    const gdp_attrs *aq = g->node_attrs(g->graph, rq);
    const double theta = gdp_attr_float(aq, "theta", 10000.0);
    const int64_t inter = gdp_attr_int(aq, "interleaved", 1), inv = gdp_attr_int(aq, "inverse", 0);
    const gdp_attrs *ak = g->node_attrs(g->graph, rk);
    if (inv != 0 || gdp_attr_int(ak, "inverse", 0) != 0 || gdp_attr_float(ak, "theta", 10000.0) != theta ||
        gdp_attr_int(ak, "interleaved", 1) != inter)
        return GDP_OK;
    /* one position for all four */
    if (!same_input(g, rq, 1, rk, 1) || !same_input(g, rq, 1, cwk, 2) || !same_input(g, rq, 1, cwv, 2)) return GDP_OK;
    /* rope(k) and the transposes feed nothing else */
    if (g->node_users(g->graph, rk, 0) != 1 || g->node_users(g->graph, pk, 0) != 1 || g->node_users(g->graph, pv, 0) != 1)
        return GDP_OK;
    gdp_tensor q;
    if (g->node_input_desc(g->graph, rq, 0, &q) != GDP_OK || !cu_gpu_float(q.dtype) || q.ndim != 4 || q.shape[1] > 4)
        return GDP_OK;
    /* the QK-norm in front, both or neither */
    int32_t nq = input_op(g, rq, 0, "rms_norm"), nk = input_op(g, rk, 0, "rms_norm");
    double eps = 0.0;
    if (nq >= 0 && nk >= 0 && nq != nk && g->node_n_inputs(g->graph, nq) == 2 && g->node_n_inputs(g->graph, nk) == 2 &&
        g->node_users(g->graph, nq, 0) == 1 && g->node_users(g->graph, nk, 0) == 1 && q.shape[3] <= 256) {
        eps = gdp_attr_float(g->node_attrs(g->graph, nq), "eps", 1e-6);
        if (gdp_attr_float(g->node_attrs(g->graph, nk), "eps", 1e-6) != eps) nq = nk = -1;
    } else {
        nq = nk = -1;
    }
    const int norms = nq >= 0;
    int32_t first = rq, last = cwk;
    const int32_t chain[6] = {rq, rk, cwk, cwv, norms ? nq : rq, norms ? nk : rq};
    for (int j = 0; j < 6; j++) {
        first = chain[j] < first ? chain[j] : first;
        last = chain[j] > last ? chain[j] : last;
    }
    if (read_between(g, rq, 0, first, last) || read_between(g, cwk, 0, first, last) ||
        read_between(g, cwv, 0, first, last))
        return GDP_OK;
    const int32_t in_nodes[8] = {-2 - (norms ? nq : rq), -2 - (norms ? nk : rk), -2 - pv, -2 - cwk, -2 - cwv, -2 - rq,
                                 -2 - nq, -2 - nk};
    const int32_t in_outs[8] = {0, 0, 0, 0, 0, 1, 1, 1};
    const int32_t out_nodes[3] = {rq, cwk, cwv}, out_outs[3] = {0, 0, 0};
    gdp_attr at[3];
    memset(at, 0, sizeof at);
    at[0].name = "theta", at[0].kind = GDP_ATTR_FLOAT, at[0].f = theta;
    at[1].name = "interleaved", at[1].kind = GDP_ATTR_INT, at[1].i = inter;
    at[2].name = "eps", at[2].kind = GDP_ATTR_FLOAT, at[2].f = eps;
    return g->replace_chain(g->graph, first, last, "rope_cache_write", norms ? 8 : 6, in_nodes, in_outs, at, norms ? 3 : 2,
                            3, out_nodes, out_outs, err);
}

/* A decode step's rope_cache_write (anchored at the attention that reads it) whose q, k
 * and v are linear_qkv's three products, each only reshaped to (B, T, heads, D) and read by
 * nothing else -> linear_qkv_rope(x, Wq, Wk, Wv, kc, vc, pos [, g]; eps, theta,
 * interleaved): the products' epilogue rotates them and writes k and v into the caches
 * (gemv.cu), one launch for the two. Not with the QK-norm (Qwen3), which rope_cache_write
 * then holds: those stay two nodes. */
static gdp_status fuse_qkv_rope(gdp_graph_view *g, int32_t att, gdp_err *err)
{
    if (!op_is(g, att, "attention")) return GDP_OK;
    int32_t o = -1;
    const int32_t rc = g->node_input(g->graph, att, 1, &o);
    if (rc < 0 || o != 1 || !op_is(g, rc, "rope_cache_write") || g->node_n_inputs(g->graph, rc) != 6) return GDP_OK;
    int32_t qkv = -1, view[3];
    for (int j = 0; j < 3; j++) {
        view[j] = input_op(g, rc, j, "reshape");
        if (view[j] < 0 || g->node_users(g->graph, view[j], 0) != 1) return GDP_OK;
        const int32_t p = g->node_input(g->graph, view[j], 0, &o);
        if (p < 0 || o != j || !op_is(g, p, "linear_qkv") || (qkv >= 0 && p != qkv) || g->node_users(g->graph, p, j) != 1)
            return GDP_OK;
        qkv = p;
    }
    const int32_t n_in = g->node_n_inputs(g->graph, qkv);
    gdp_tensor x, kc, y;
    if (g->node_input_desc(g->graph, qkv, 0, &x) != GDP_OK || g->node_input_desc(g->graph, rc, 3, &kc) != GDP_OK)
        return GDP_OK;
    if (x.ndim != 3 || kc.ndim != 4 || x.shape[0] * x.shape[1] > CU_GEMV_MAX_ROWS || cu_gemv_splits(x.shape[2], x.dtype))
        return GDP_OK;
    for (int j = 0; j < 3; j++) /* (B, T, heads * D) seen as (B, T, heads, D) */
        if (g->node_output_desc(g->graph, view[j], 0, &y) != GDP_OK || y.ndim != 4 || y.shape[0] != x.shape[0] ||
            y.shape[1] != x.shape[1] || y.shape[3] != kc.shape[3])
            return GDP_OK;
    /* x, the matrices and the norm weight from linear_qkv; the caches and pos from
     * rope_cache_write */
    int32_t in_nodes[8], in_outs[8] = {0, 1, 2, 3, 3, 4, 5, 4};
    for (int k = 0; k < 8; k++) in_nodes[k] = -2 - (k >= 4 && k < 7 ? rc : qkv);
    const int32_t out_nodes[3] = {rc, rc, rc}, out_outs[3] = {0, 1, 2};
    const gdp_attrs *ra = g->node_attrs(g->graph, rc);
    const double theta = gdp_attr_float(ra, "theta", 10000.0);
    const int64_t inter = gdp_attr_int(ra, "interleaved", 1);
    const double eps = gdp_attr_float(g->node_attrs(g->graph, qkv), "eps", 1e-6);
    gdp_attr at[3];
    memset(at, 0, sizeof at);
    at[0].name = "theta", at[0].kind = GDP_ATTR_FLOAT, at[0].f = theta;
    at[1].name = "interleaved", at[1].kind = GDP_ATTR_INT, at[1].i = inter;
    at[2].name = "eps", at[2].kind = GDP_ATTR_FLOAT, at[2].f = eps;
    return g->replace_chain(g->graph, qkv, rc, "linear_qkv_rope", n_in == 5 ? 8 : 7, in_nodes, in_outs, at,
                            n_in == 5 ? 3 : 2, 3, out_nodes, out_outs, err);
}

/* The node that is the only reader of output k of node `att`, when it is its
 * transpose(1, 2) (a permute (0, 2, 1, 3)); -1 otherwise. */
static int32_t out_transposed(gdp_graph_view *g, int32_t att, int32_t k)
{
    if (g->node_users(g->graph, att, k) != 1) return -1;
    const int32_t n = g->node_count(g->graph);
    for (int32_t id = att + 1; id < n; id++) {
        if (!op_is(g, id, "permute") || g->node_n_inputs(g->graph, id) != 1) continue;
        int32_t o = -1;
        if (g->node_input(g->graph, id, 0, &o) != att || o != k) continue;
        const gdp_attr *perm = gdp_attr_find(g->node_attrs(g->graph, id), "perm");
        const int64_t want[4] = {0, 2, 1, 3};
        if (perm == NULL || perm->kind != GDP_ATTR_INTS || perm->n != 4) return -1;
        for (int j = 0; j < 4; j++)
            if (perm->ints[j] != want[j]) return -1;
        return read_between(g, att, k, att, id) ? -1 : id;
    }
    return -1;
}

/* The same for attention's y. */
static int32_t y_transposed(gdp_graph_view *g, int32_t att) { return out_transposed(g, att, 0); }

/* An attention_grad and the attention whose backward it is (same q, k, v and attributes,
 * no kv_len: a training program) -> attention_lse, which also writes each query row's
 * log-sum-exp as a new value, and attention_grad_lse, which reads it and the forward's y
 * back: the backward no longer runs the forward again for its statistics (attention.cu,
 * attention_tc.cu). The y it reads is the one the output projection keeps for its weight
 * gradient when the forward writes it in its transpose's layout. */
static gdp_status fuse_attention_lse(void *backend, gdp_graph_view *g, int32_t grad, gdp_err *err)
{
    const cu_backend *be = (const cu_backend *)backend;
    if (!be->attn_lse || !op_is(g, grad, "attention_grad") || g->node_n_inputs(g->graph, grad) != 4) return GDP_OK;
    if (!GDP_HAS_FIELD(g, gdp_graph_view, new_outputs) || !g->new_outputs) return GDP_OK; /* a host before 2.5 */
    const gdp_attrs *ga = g->node_attrs(g->graph, grad);
    const int64_t causal = gdp_attr_int(ga, "causal", 0);
    const double scale = gdp_attr_float(ga, "scale", 0.0);
    for (int32_t fwd = grad - 1; fwd >= 0; fwd--) {
        if (!op_is(g, fwd, "attention") || g->node_n_inputs(g->graph, fwd) != 3) continue;
        if (!same_input(g, fwd, 0, grad, 1) || !same_input(g, fwd, 1, grad, 2) || !same_input(g, fwd, 2, grad, 3))
            continue;
        const gdp_attrs *fa = g->node_attrs(g->graph, fwd);
        if (gdp_attr_int(fa, "causal", 0) != causal || gdp_attr_float(fa, "scale", 0.0) != scale) continue;
        gdp_tensor q, k, v;
        if (g->node_input_desc(g->graph, fwd, 0, &q) != GDP_OK || g->node_input_desc(g->graph, fwd, 1, &k) != GDP_OK ||
            g->node_input_desc(g->graph, fwd, 2, &v) != GDP_OK || !cu_attn_lse_fits(be, &q, &k, &v))
            return GDP_OK;
        /* y read only as y.transpose(1, 2) (a transformer's way to the output projection):
         * the forward writes that layout itself, in the transpose's place */
        const int32_t tr = y_transposed(g, fwd);
        const int32_t last = tr >= 0 ? tr : fwd;
        gdp_attr at[3];
        memset(at, 0, sizeof at);
        at[0].name = "causal", at[0].kind = GDP_ATTR_INT, at[0].i = causal;
        at[1].name = "scale", at[1].kind = GDP_ATTR_FLOAT, at[1].f = scale;
        at[2].name = "y_bthd", at[2].kind = GDP_ATTR_INT, at[2].i = tr >= 0;
        const int32_t f_in[3] = {-1, -1, -1}, f_in_outs[3] = {0, 1, 2};
        const int32_t f_out[2] = {last, -1}, f_out_outs[2] = {0, 0}; /* y in place of y (or of its transpose); lse new */
        gdp_status st = g->replace_chain(g->graph, fwd, last, "attention_lse", 3, f_in, f_in_outs, at, 3, 2, f_out,
                                         f_out_outs, err);
        if (st != GDP_OK) return st;
        /* dy, q, k, v of the grad; y and lse of the new node */
        const int32_t b_in[6] = {-1, -1, -1, -1, last, last}, b_in_outs[6] = {0, 1, 2, 3, 0, 1};
        int32_t b_out[3] = {grad, grad, grad}, b_out_outs[3] = {0, 1, 2};
        /* dq, dk, dv read only as their transpose(1, 2) (back to the projections' (B, T,
         * heads, D)), with nothing reading those before the last of them: the backward
         * writes that layout in their place, and no copy makes it (grad_bthd) */
        int32_t tp[3], grad_last = grad;
        for (int j = 0; j < 3; j++) {
            tp[j] = out_transposed(g, grad, j);
            if (tp[j] > grad_last) grad_last = tp[j];
        }
        int bthd = tp[0] >= 0 && tp[1] >= 0 && tp[2] >= 0;
        for (int j = 0; bthd && j < 3; j++) bthd = !read_between(g, tp[j], 0, tp[j], grad_last);
        if (bthd)
            for (int j = 0; j < 3; j++) b_out[j] = tp[j], b_out_outs[j] = 0;
        gdp_attr bt[4];
        memcpy(bt, at, sizeof at);
        memset(&bt[3], 0, sizeof bt[3]);
        bt[3].name = "grad_bthd", bt[3].kind = GDP_ATTR_INT, bt[3].i = bthd;
        return g->replace_chain(g->graph, grad, bthd ? grad_last : grad, "attention_grad_lse", 6, b_in, b_in_outs, bt,
                                4, 3, b_out, b_out_outs, err);
    }
    return GDP_OK;
}

/* Training's GELU in its tanh form (GPT-2's), into the products around it, for f16 and bf16
 * (matmul.cu's cuBLASLt epilogues):
 *   gelu(linear_act(x, W [, b]; act 0))  -> linear_act_keep(x, W [, b]): y in gelu's place and
 *                                           z in linear_act's, which gelu_grad goes on reading
 *                                           (only where something besides gelu reads z)
 *   gelu_grad(matmul(a, b) [reshaped], z) -> matmul_act_grad(a, b, z)
 * (Where nothing else reads z, an inference graph, the pair stays as it is.) */
static gdp_status fuse_gelu_keep(gdp_graph_view *g, int32_t act_id, gdp_err *err)
{
    if (act_of(g, act_id) != GDP_ACT_GELU_TANH) return GDP_OK;
    int32_t o = -1, lin = g->node_input(g->graph, act_id, 0, &o);
    if (lin < 0 || o != 0 || !op_is(g, lin, "linear_act")) return GDP_OK;
    const gdp_attrs *la = g->node_attrs(g->graph, lin);
    if (gdp_attr_int(la, "act", 0) != GDP_ACT_NONE) return GDP_OK;
    const int wio = gdp_attr_int(la, "weight_in_out", 0) != 0;
    const int32_t n_in = g->node_n_inputs(g->graph, lin);
    gdp_tensor x, w, b, y;
    if (n_in < 2 || n_in > 3 || g->node_input_desc(g->graph, lin, 0, &x) != GDP_OK ||
        g->node_input_desc(g->graph, lin, 1, &w) != GDP_OK || (n_in == 3 && g->node_input_desc(g->graph, lin, 2, &b) != GDP_OK) ||
        g->node_output_desc(g->graph, act_id, 0, &y) != GDP_OK)
        return GDP_OK;
    /* z read by gelu alone (an inference graph) is not worth writing: the product keeps
     * its own path there (a decode step's few rows go to gemv.cu) */
    if (g->node_users(g->graph, lin, 0) < 2 || !gdp_is_half(x.dtype) ||
        !linear_act_ok(&x, &w, n_in == 3 ? &b : NULL, &y, wio) || y.shape[y.ndim - 1] % 8 != 0 ||
        read_between(g, lin, 0, lin, act_id))
        return GDP_OK;
    const int32_t in_nodes[3] = {-1, -1, -1}, in_outs[3] = {0, 1, 2};
    const int32_t out_nodes[2] = {act_id, lin}, out_outs[2] = {0, 0};
    gdp_attr at[2];
    memset(at, 0, sizeof at);
    at[0].name = "act", at[0].kind = GDP_ATTR_INT, at[0].i = GDP_ACT_GELU_TANH;
    at[1].name = "weight_in_out", at[1].kind = GDP_ATTR_INT, at[1].i = wio;
    return g->replace_chain(g->graph, lin, act_id, "linear_act_keep", n_in, in_nodes, in_outs, at, 2, 2, out_nodes,
                            out_outs, err);
}

static gdp_status fuse_gelu_grad(gdp_graph_view *g, int32_t gg, gdp_err *err)
{
    if (!op_is(g, gg, "gelu_grad") || g->node_n_inputs(g->graph, gg) != 2 ||
        gdp_attr_int(g->node_attrs(g->graph, gg), "approximate", 0) == 0)
        return GDP_OK;
    int32_t mm = sole_producer(g, gg, 0);
    if (mm >= 0 && op_is(g, mm, "reshape")) mm = sole_producer(g, mm, 0);
    if (mm < 0 || !op_is(g, mm, "matmul") || g->node_n_inputs(g->graph, mm) != 2) return GDP_OK;
    const gdp_attrs *ma = g->node_attrs(g->graph, mm);
    const int64_t ta = gdp_attr_int(ma, "transpose_a", 0) != 0, tb = gdp_attr_int(ma, "transpose_b", 0) != 0;
    gdp_tensor a, b, z, p;
    if (g->node_input_desc(g->graph, mm, 0, &a) != GDP_OK || g->node_input_desc(g->graph, mm, 1, &b) != GDP_OK ||
        g->node_output_desc(g->graph, mm, 0, &p) != GDP_OK || g->node_input_desc(g->graph, gg, 1, &z) != GDP_OK)
        return GDP_OK;
    if (!gdp_is_half(a.dtype) || b.dtype != a.dtype || z.dtype != a.dtype || p.dtype != a.dtype || a.ndim != 2 ||
        b.ndim != 2 || z.ndim < 1 || gdp_numel(&z) != gdp_numel(&p) || z.shape[z.ndim - 1] != p.shape[1] ||
        p.shape[1] % 8 != 0)
        return GDP_OK;
    const int32_t in_nodes[3] = {-1, -1, -2 - gg}, in_outs[3] = {0, 1, 1}; /* a, b of the matmul; z of gelu_grad */
    gdp_attr at[3];
    memset(at, 0, sizeof at);
    at[0].name = "transpose_a", at[0].kind = GDP_ATTR_INT, at[0].i = ta;
    at[1].name = "transpose_b", at[1].kind = GDP_ATTR_INT, at[1].i = tb;
    at[2].name = "act", at[2].kind = GDP_ATTR_INT, at[2].i = GDP_ACT_GELU_TANH;
    return g->replace_chain(g->graph, mm, gg, "matmul_act_grad", 3, in_nodes, in_outs, at, 3, 0, NULL, NULL, err);
}

/* add(layer_norm_grad / rms_norm_grad (dy, x, w) dx, r), either order, dx read by the add
 * alone -> layer_norm_grad_add / rms_norm_grad_add (dy, x, w, r): the residual stream's
 * gradient is the sum of the norm's dx and the gradient that came down the residual path;
 * norm.cu adds it as it writes dx, which saves the add's pass over three tensors. The
 * fused node takes the add's place, so nothing between the two may read dweight or dbias. */
static gdp_status fuse_norm_grad_add(gdp_graph_view *g, int32_t add, gdp_err *err)
{
    if (!op_is(g, add, "add") || g->node_n_inputs(g->graph, add) != 2) return GDP_OK;
    for (int32_t side = 0; side < 2; side++) {
        const int32_t ng = sole_producer(g, add, side);
        const int rms = op_is(g, ng, "rms_norm_grad");
        if (ng < 0 || (!rms && !op_is(g, ng, "layer_norm_grad")) || g->node_n_inputs(g->graph, ng) != 3) continue;
        int32_t ro = -1;
        if (g->node_input(g->graph, add, 1 - side, &ro) == ng) continue; /* r made by the norm (1-D x: dweight) */
        gdp_tensor dx, r, y;
        if (g->node_output_desc(g->graph, ng, 0, &dx) != GDP_OK || g->node_input_desc(g->graph, add, 1 - side, &r) != GDP_OK ||
            g->node_output_desc(g->graph, add, 0, &y) != GDP_OK)
            continue;
        if (rows_of(&dx) < 0 || r.dtype != dx.dtype || y.dtype != dx.dtype || !same_dims(&r, &dx) || !same_dims(&y, &dx))
            continue;
        if (read_between(g, ng, 1, ng, add) || (!rms && read_between(g, ng, 2, ng, add))) continue;
        const int32_t in_nodes[4] = {-1, -1, -1, -2 - add}, in_outs[4] = {0, 1, 2, 1 - side};
        const int32_t out_nodes[3] = {add, ng, ng}, out_outs[3] = {0, 1, 2};
        const gdp_attrs *na = g->node_attrs(g->graph, ng);
        gdp_attr at[1];
        memset(at, 0, sizeof at);
        at[0].name = "eps", at[0].kind = GDP_ATTR_FLOAT, at[0].f = gdp_attr_float(na, "eps", rms ? 1e-6 : 1e-5);
        return g->replace_chain(g->graph, ng, add, rms ? "rms_norm_grad_add" : "layer_norm_grad_add", 4, in_nodes,
                                in_outs, at, 1, rms ? 2 : 3, out_nodes, out_outs, err);
    }
    return GDP_OK;
}

/* add(matmul(a, b) [reshaped], r), either order, the product read by the add alone ->
 * matmul_acc(a, b, r): the backward's sums of gradients (dx of the q, k, v projections, of
 * the gate and up ones; a tied embedding's two) as GEMMs with an addend, in the add's
 * place, instead of a product and an add's pass over three tensors. Uniform dtypes, 2-D
 * operands; r and the add's output shaped alike (no broadcast). */
static gdp_status fuse_grad_acc(gdp_graph_view *g, int32_t add, gdp_err *err)
{
    if (!op_is(g, add, "add") || g->node_n_inputs(g->graph, add) != 2) return GDP_OK;
    for (int32_t side = 0; side < 2; side++) {
        int32_t mm = sole_producer(g, add, side);
        if (mm >= 0 && op_is(g, mm, "reshape")) mm = sole_producer(g, mm, 0);
        if (mm < 0 || !op_is(g, mm, "matmul") || g->node_n_inputs(g->graph, mm) != 2) continue;
        const gdp_attrs *ma = g->node_attrs(g->graph, mm);
        gdp_tensor a, b, p, r, y;
        if (g->node_input_desc(g->graph, mm, 0, &a) != GDP_OK || g->node_input_desc(g->graph, mm, 1, &b) != GDP_OK ||
            g->node_output_desc(g->graph, mm, 0, &p) != GDP_OK || g->node_input_desc(g->graph, add, 1 - side, &r) != GDP_OK ||
            g->node_output_desc(g->graph, add, 0, &y) != GDP_OK)
            continue;
        if (!cu_gpu_float(a.dtype) || b.dtype != a.dtype || p.dtype != a.dtype || r.dtype != a.dtype ||
            y.dtype != a.dtype || a.ndim != 2 || b.ndim != 2 || p.ndim != 2 || !same_dims(&r, &y) ||
            gdp_numel(&r) != gdp_numel(&p) || r.shape[r.ndim - 1] != p.shape[1])
            continue;
        const int32_t in_nodes[3] = {-1, -1, -2 - add}, in_outs[3] = {0, 1, 1 - side};
        gdp_attr at[2];
        memset(at, 0, sizeof at);
        at[0].name = "transpose_a", at[0].kind = GDP_ATTR_INT, at[0].i = gdp_attr_int(ma, "transpose_a", 0) != 0;
        at[1].name = "transpose_b", at[1].kind = GDP_ATTR_INT, at[1].i = gdp_attr_int(ma, "transpose_b", 0) != 0;
        return g->replace_chain(g->graph, mm, add, "matmul_acc", 3, in_nodes, in_outs, at, 2, 0, NULL, NULL, err);
    }
    return GDP_OK;
}

/* cross_entropy(logits, targets) and cross_entropy_grad(dloss, logits, targets) of the same
 * logits, targets and attributes, the loss read by nothing between the two ->
 * cross_entropy_with_grad(dloss, logits, targets) (the gradient and the loss) in the
 * gradient's place: softmax.cu's gradient kernel computes each row's log-sum-exp anyway,
 * so the forward's own pass over the logits (a vocabulary's worth a token) goes. */
static gdp_status fuse_cross_entropy(gdp_graph_view *g, int32_t gg, gdp_err *err)
{
    if (!op_is(g, gg, "cross_entropy_grad") || g->node_n_inputs(g->graph, gg) != 3) return GDP_OK;
    const gdp_attrs *ga = g->node_attrs(g->graph, gg);
    const int64_t ignore = gdp_attr_int(ga, "ignore_index", -100), classes = gdp_attr_int(ga, "classes", -1);
    gdp_tensor dl;
    int32_t dlo = -1;
    const int32_t dlp = g->node_input(g->graph, gg, 0, &dlo);
    if (g->node_input_desc(g->graph, gg, 0, &dl) != GDP_OK) return GDP_OK;
    for (int32_t ce = gg - 1; ce >= 0; ce--) {
        if (!op_is(g, ce, "cross_entropy") || !same_input(g, ce, 0, gg, 1) || !same_input(g, ce, 1, gg, 2)) continue;
        if (dlp == ce) return GDP_OK; /* dloss is the loss itself: the fused node would read its own output */
        const gdp_attrs *ca = g->node_attrs(g->graph, ce);
        gdp_tensor loss;
        if (gdp_attr_int(ca, "ignore_index", -100) != ignore || gdp_attr_int(ca, "classes", -1) != classes ||
            g->node_output_desc(g->graph, ce, 0, &loss) != GDP_OK || loss.dtype != dl.dtype || read_between(g, ce, 0, ce, gg))
            return GDP_OK;
        const int32_t in_nodes[3] = {-2 - gg, -1, -1}, in_outs[3] = {0, 0, 1};
        const int32_t out_nodes[2] = {gg, ce}, out_outs[2] = {0, 0};
        gdp_attr at[2];
        int na = 0;
        memset(at, 0, sizeof at);
        at[na].name = "ignore_index", at[na].kind = GDP_ATTR_INT, at[na++].i = ignore;
        if (classes >= 0) at[na].name = "classes", at[na].kind = GDP_ATTR_INT, at[na++].i = classes;
        return g->replace_chain(g->graph, ce, gg, "cross_entropy_with_grad", 3, in_nodes, in_outs, at, na, 2, out_nodes,
                                out_outs, err);
    }
    return GDP_OK;
}

static gdp_status fuse_run(void *backend, gdp_graph_view *g, gdp_err *err)
{
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
    /* then the chains that start from linear_act (SwiGLU) and the others; each rule
     * leaves a node it does not match as it was. The residual rule sees an add before
     * add_norm sees the norm after it; a norm goes into a product once the product is
     * linear_swiglu (made in this id's place) or linear_qkv (made in a later id's place). */
    for (int32_t id = 0; id < n; id++) {
        gdp_status s = fuse_linear_add(g, id, err);
        if (s == GDP_OK) s = fuse_add_norm(g, id, err);
        if (s == GDP_OK) s = fuse_swiglu(g, id, err);
        if (s == GDP_OK) s = fuse_qkv(g, id, err);
        if (s == GDP_OK) s = fuse_norm_product(backend, g, id, err);
        if (s == GDP_OK) s = fuse_rope_cache(g, id, err);
        if (s == GDP_OK) s = fuse_qkv_rope(g, id, err);
        if (s == GDP_OK) s = fuse_attention_lse(backend, g, id, err);
        if (s == GDP_OK) s = fuse_gelu_keep(g, id, err);
        if (s == GDP_OK) s = fuse_gelu_grad(g, id, err);
        if (s == GDP_OK) s = fuse_norm_grad_add(g, id, err);
        if (s == GDP_OK) s = fuse_cross_entropy(g, id, err);
        if (s == GDP_OK) s = fuse_grad_acc(g, id, err);
        if (s != GDP_OK) return s;
    }
    return GDP_OK;
}

extern const gdp_graph_pass cu_fuse_pass = {
    sizeof(gdp_graph_pass), "fuse linear_act, linear_add, add_*_norm, linear_swiglu, linear_qkv (norms in front), rope_cache_write, "
    "linear_qkv_rope, attention_lse + attention_grad_lse, linear_act_keep, matmul_act_grad, *_norm_grad_add, "
    "cross_entropy_with_grad, matmul_acc",
    fuse_run};
