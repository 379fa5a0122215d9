/* harness.h — running one op on one backend with fixed-seed inputs: the engine of the
 * sweep and of the generic op tests (every case on the reference, gradient checks). */
#ifndef GD_HARNESS_H
#define GD_HARNESS_H

#include "cases.h"

typedef struct gd_case_prog {
    gd_ctx *ctx;
    gd_graph *g;
    gd_program *prog;
    int n_in;
    gd_tensor *in[GDP_MAX_INPUTS];
    void *in_host[GDP_MAX_INPUTS];     /* the inputs' data, written before every exec */
    int n_fwd;
    gd_tensor *fwd[GDP_MAX_OUTPUTS];   /* the op's outputs */
    void *r_host[GDP_MAX_OUTPUTS];     /* backward: weights of the loss sum_k sum(out_k * r_k) */
    gd_tensor *r[GDP_MAX_OUTPUTS];
    int n_targets;
    gd_tensor *targets[GDP_MAX_INPUTS];
    int target_input[GDP_MAX_INPUTS];  /* backward: which input each gradient belongs to */
    int fallbacks;                     /* steps not on the chosen backend */
} gd_case_prog;

typedef struct gd_case_out {
    int n;
    gdp_tensor t[GDP_MAX_INPUTS];      /* host data */
} gd_case_out;

/* Builds the op (backward = 0) or op + loss + backward graph (backward = 1) on backend
 * `backend` (index), with inputs filled from seed. The context's strict/guard flags apply. */
gd_status gd_case_build(gd_ctx *ctx, const gd_op_def *op, const gd_case *c, int backend, int backward,
                        uint64_t seed, gd_case_prog *cp);
/* Writes the inputs, runs, checks guard bytes (when the context guards), reads targets. */
gd_status gd_case_exec(gd_case_prog *cp, gd_case_out *out);
void gd_case_prog_free(gd_case_prog *cp);
void gd_case_out_free(gd_case_out *o);

/* Normalized mean squared error of b against reference a: sum((a-b)^2) / max(sum(a^2), tiny).
 * Sets *nan_mismatch when NaN/Inf appear in one and not at the same place in the other. */
double gd_nmse(const gdp_tensor *ref, const gdp_tensor *got, int *nan_mismatch);

#endif
