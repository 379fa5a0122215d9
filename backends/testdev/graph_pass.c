/* graph_pass.c — the test device's graph pass, the worked example of docs/plugin-abi.md
 * section 11: linear (with bias) followed by relu becomes linear_act, one node in the
 * relu's place; and, when GRADUS_TESTDEV_ATTN_LSE is set, a training program's attention
 * and its attention_grad become attention_lse and attention_grad_lse, the forward making a
 * new value (its lse, ABI 2.5's new outputs) that the backward reads, and writing y in
 * the layout of the transpose that alone reads it. The test device has kernels for none
 * of those ops: they run on the CPU, which is what the tests of the rewriting want. */
#include "gradus_plugin.h"
#include "testdev_internal.h"

#include <stdio.h>
#include <string.h>

static int op_is(gdp_graph_view *g, int32_t id, const char *name)
{
    const char *op = id >= 0 ? g->node_op(g->graph, id) : NULL;
    return op != NULL && strcmp(op, name) == 0;
}

static int fuse_linear_relu(gdp_graph_view *g, int32_t id, gdp_err *err, gdp_status *st)
{
    if (!op_is(g, id, "relu")) return 0;
    int32_t out_index = 0, lin = g->node_input(g->graph, id, 0, &out_index);
    if (!op_is(g, lin, "linear") || g->node_n_inputs(g->graph, lin) != 3) return 0;
    if (g->node_users(g->graph, lin, 0) != 1) return 0; /* its output is needed elsewhere */
    gdp_tensor x;
    if (g->node_input_desc(g->graph, lin, 0, &x) != GDP_OK || x.ndim != 2 || x.dtype != GDP_F32) return 0;
    const int32_t in_nodes[3] = {-1, -1, -1}, in_outs[3] = {0, 1, 2}; /* linear's inputs */
    const gdp_attr act = {.name = "act", .kind = GDP_ATTR_INT, .i = 1};
    *st = g->replace_chain(g->graph, lin, id, "linear_act", 3, in_nodes, in_outs, &act, 1, 0, NULL, NULL, err);
    return *st == GDP_OK;
}

/* The permute (0, 2, 1, 3) that alone reads node att's output, or -1. */
static int32_t sole_transpose(gdp_graph_view *g, int32_t att)
{
    if (g->node_users(g->graph, att, 0) != 1) return -1;
    for (int32_t id = att + 1; id < g->node_count(g->graph); id++) {
        int32_t o = -1;
        if (!op_is(g, id, "permute") || g->node_input(g->graph, id, 0, &o) != att || o != 0) continue;
        int64_t perm[4] = {-1, -1, -1, -1};
        int n = gdp_attr_ints(g->node_attrs(g->graph, id), "perm", perm, 4);
        return n == 4 && perm[0] == 0 && perm[1] == 2 && perm[2] == 1 && perm[3] == 3 ? id : -1;
    }
    return -1;
}

static int fuse_attention_lse(gdp_graph_view *g, int32_t grad, gdp_err *err, gdp_status *st)
{
    if (!op_is(g, grad, "attention_grad") || g->node_n_inputs(g->graph, grad) != 4) return 0;
    if (!GDP_HAS_FIELD(g, gdp_graph_view, new_outputs) || !g->new_outputs || g->same_input == NULL) return 0;
    const gdp_attrs *ga = g->node_attrs(g->graph, grad);
    const int64_t causal = gdp_attr_int(ga, "causal", 0);
    const double scale = gdp_attr_float(ga, "scale", 0.0);
    for (int32_t fwd = grad - 1; fwd >= 0; fwd--) {
        if (!op_is(g, fwd, "attention") || g->node_n_inputs(g->graph, fwd) != 3) continue;
        int same = 1;
        for (int k = 0; k < 3; k++) same &= g->same_input(g->graph, fwd, k, grad, k + 1) != 0;
        const gdp_attrs *fa = g->node_attrs(g->graph, fwd);
        if (!same || gdp_attr_int(fa, "causal", 0) != causal || gdp_attr_float(fa, "scale", 0.0) != scale) continue;
        const int32_t tr = sole_transpose(g, fwd), last = tr >= 0 ? tr : fwd;
        const gdp_attr at[3] = {{.name = "causal", .kind = GDP_ATTR_INT, .i = causal},
                                {.name = "scale", .kind = GDP_ATTR_FLOAT, .f = scale},
                                {.name = "y_bthd", .kind = GDP_ATTR_INT, .i = tr >= 0}};
        const int32_t f_in[3] = {-1, -1, -1}, f_in_outs[3] = {0, 1, 2}, f_out[2] = {last, -1}, f_out_outs[2] = {0, 0};
        *st = g->replace_chain(g->graph, fwd, last, "attention_lse", 3, f_in, f_in_outs, at, 3, 2, f_out, f_out_outs, err);
        if (*st != GDP_OK) return 0;
        const int32_t b_in[6] = {-1, -1, -1, -1, last, last}, b_in_outs[6] = {0, 1, 2, 3, 0, 1};
        const int32_t b_out[3] = {grad, grad, grad}, b_out_outs[3] = {0, 1, 2};
        *st = g->replace_chain(g->graph, grad, grad, "attention_grad_lse", 6, b_in, b_in_outs, at, 3, 3, b_out,
                               b_out_outs, err);
        return *st == GDP_OK;
    }
    return 0;
}

static gdp_status td_pass(void *be, gdp_graph_view *g, gdp_err *err)
{
    const gdp_host *host = td_host(be);
    const int lse = host->getenv(host->host, "GRADUS_TESTDEV_ATTN_LSE") != NULL;
    int fused = 0, pairs = 0;
    gdp_status st = GDP_OK;
    for (int32_t id = 0; id < g->node_count(g->graph) && st == GDP_OK; id++) {
        fused += fuse_linear_relu(g, id, err, &st);
        if (lse && st == GDP_OK) pairs += fuse_attention_lse(g, id, err, &st);
    }
    /* Through the host pointer kept since init: the ABI promises it outlives the plugin's
     * use (the sanitizer build checks this call, with two contexts alive and one freed). */
    if (st == GDP_OK && fused + pairs > 0 && host->getenv(host->host, "GRADUS_TESTDEV_VERBOSE") != NULL) {
        char line[96];
        snprintf(line, sizeof line, "fused %d linear+relu chains, %d attention pairs", fused, pairs);
        host->log(host->host, line);
    }
    return st;
}

const gdp_graph_pass td_graph_pass = {.size = sizeof(gdp_graph_pass), .name = "fuse linear+relu", .run = td_pass};
