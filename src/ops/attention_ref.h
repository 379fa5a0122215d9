/* attention_ref.h — what the reference kernels of the attention ops share
 * (attention.c: attention and attention_grad; attention_lse.c: the forms that keep the
 * softmax's log-sum-exp for the backward): the operand checks, the problem's dimensions,
 * the keys a query sees and their probabilities. */
#ifndef GD_OPS_ATTENTION_REF_H
#define GD_OPS_ATTENTION_REF_H

#include "refwalk.h"

typedef struct gd_attn_dims {
    int64_t B, H, T, D, Hkv, S;
    int64_t L; /* valid keys: the first L of the S */
    int causal;
    double scale;
} gd_attn_dims;

/* Carves n doubles off the front of *ws (the node's workspace, sized by the op's
 * ref_workspace from the same counts). */
static inline double *gd_attn_take(char **ws, int64_t n)
{
    double *p = (double *)*ws;
    *ws += rw_doubles(n);
    return p;
}

/* Fails c unless input k is an integer scalar or a vector of one per batch row (B of
 * them): a decoder's batch whose sequences stand at different positions. */
int gd_index_per_row(gd_infer *c, int k, const char *name, int64_t B);
/* Input k's value for batch row b: the scalar, or element b. */
int64_t gd_row_value(const gdp_node *node, int k, int64_t b);
/* Checks q (B, H, T, D), k and v (B, Hkv, S, D) with H a multiple of Hkv, all of one
 * float dtype. */
int gd_attention_check(gd_infer *c, const gd_shape *q, const gd_shape *k, const gd_shape *v);
/* a->L for batch row b: kv_len (input len_at) when the node has it, which must lie in
 * [0, S]; else S. */
gdp_status gd_attn_len_of(const gdp_node *node, int len_at, int64_t b, gd_attn_dims *a, gdp_err *err);
/* The dims of q and k, scale and causal from the node's attributes, row 0's L. */
gdp_status gd_attn_dims_of(const gdp_node *node, const gdp_tensor *q, const gdp_tensor *k, int len_at,
                           gd_attn_dims *a, gdp_err *err);
/* How many keys query row t sees (a prefix of the L valid ones). */
int64_t gd_attn_visible(const gd_attn_dims *a, int64_t t);
/* Softmax of the scaled scores of query row qt against keys kh (S, D) into p; returns how
 * many keys the query sees. With lse != NULL also the log-sum-exp of those scores (0 for
 * a row that sees none). */
int64_t gd_attn_probs(const gd_attn_dims *a, int64_t t, const double *qt, const double *kh, double *p, double *lse);

/* One query row's part of attention's backward, from the probabilities p and dP = dy . v
 * of its n visible keys and delta = sum_s P dP: dq's row into g (D), and dk, dv of the
 * row's kv head (kh's) accumulated into dkh, dvh, keys in ascending order. */
void gd_attn_row_grads(const gd_attn_dims *a, int64_t n, const double *qt, const double *dyt, const double *kh,
                       const double *p, const double *dp, double delta, double *g, double *dkh, double *dvh);

/* What an attention node costs (cost.h's conventions): bytes moved, and 2 D operations per
 * visible (query, key) pair and product, two forward (q, k, v first), five backward (dy,
 * q, k, v first). */
void gd_cost_attention(const gdp_node *n, double *bytes, double *flops);
void gd_cost_attention_grad(const gdp_node *n, double *bytes, double *flops);

#endif
