/* cost.h — helpers for ops' cost functions (gd_op_def.cost): what a node must move to
 * and from memory at least, and how many floating-point operations it does, from its
 * shapes alone. Profile summaries divide them by measured time to show achieved GB/s and
 * FLOP/s beside the machine's peak, so they count the work the op defines, not what one
 * kernel happens to do (a kernel that reads an input twice is slower, not costlier).
 *
 * Conventions: every operand is read or written once (an in-place output counts as a
 * write of its own); a multiply-add is two operations; transcendental functions and
 * comparisons count one. */
#ifndef GD_OPS_COST_H
#define GD_OPS_COST_H

#include "gradus_plugin.h"

static inline double gd_cost_bytes_of(const gdp_tensor *t) { return (double)gdp_numel(t) * (double)gdp_dtype_size(t->dtype); }

/* Every input read once and every output written once. */
static inline double gd_cost_io_bytes(const gdp_node *n)
{
    double b = 0;
    for (int i = 0; i < n->n_in; i++) b += gd_cost_bytes_of(n->in[i]);
    for (int k = 0; k < n->n_out; k++) b += gd_cost_bytes_of(n->out[k]);
    return b;
}

static inline double gd_cost_out_numel(const gdp_node *n)
{
    double e = 0;
    for (int k = 0; k < n->n_out; k++) e += (double)gdp_numel(n->out[k]);
    return e;
}

/* Elementwise ops and their gradients: one operation per output element. */
static inline void gd_cost_elementwise(const gdp_node *n, double *bytes, double *flops)
{
    *bytes = gd_cost_io_bytes(n);
    *flops = gd_cost_out_numel(n);
}

#endif
