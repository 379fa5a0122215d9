/* harness.h — running one op on one backend with fixed-seed inputs: the engine of the
 * sweep and of the generic op tests (every case on the reference, gradient checks).
 *
 * A case runs with its inputs laid out as declared (contiguous) or as one of the strided
 * variants: the same op fed views of its inputs — transposed, sliced or broadcast — so
 * that a kernel taking strides (GDP_KERNEL_STRIDED, or the reference's ref_strided) is
 * checked on them, and a backend without one shows where the planner's copy falls back. */
#ifndef GD_HARNESS_H
#define GD_HARNESS_H

#include "cases.h"

/* How a case's inputs are laid out. Inputs an op updates in place are never viewed. */
enum gd_case_variant {
    GD_VAR_CONTIGUOUS = 0, /* as the case declares them */
    GD_VAR_TRANSPOSED,     /* inputs of 2+ dims: the transpose (last two dims) of a buffer */
    GD_VAR_SLICED,         /* inputs of 1+ dims: a slice along the last dim of a wider buffer
                              (rows strided, data at an offset; the rest of it is NaN or -1) */
    GD_VAR_BROADCAST,      /* inputs whose dim 0 is > 1: a size-1 leading dim expanded (stride
                              0), so the case's rows along dim 0 are all equal */
    GD_VAR_SHARED,         /* ops with `reuse`: that input made by a copy kernel in front, so
                              that the output takes its bytes (contiguous data, not a view) */
    GD_VAR_COUNT
};
const char *gd_case_variant_name(int variant);
/* 1 when the variant applies to the case: it views at least one input, or (GD_VAR_SHARED)
 * the op may write its output over an input. */
int gd_case_variant_applies(const gd_op_def *op, const gd_case *c, int variant);
/* 1 for the variants that feed views (strided inputs); GD_VAR_SHARED's data is contiguous. */
int gd_case_variant_strided(int variant);

typedef struct gd_case_opts {
    int backend;        /* index of the backend the op is placed on */
    int backward;       /* 0: the op; 1: op + loss + backward, targets the gradients of what
                           the op reads (arg) */
    uint64_t seed;
    int variant;        /* enum gd_case_variant */
    int oracle;         /* view ops run their reference kernels (ctx->no_views): the sweep's
                           oracle of what a view must read */
} gd_case_opts;

typedef struct gd_case_prog {
    gd_ctx *ctx;
    gd_graph *g;
    gd_program *prog;
    int n_in;
    gd_tensor *in[GDP_MAX_INPUTS];     /* the graph inputs (buffers; viewed for variants) */
    gd_tensor *arg[GDP_MAX_INPUTS];    /* what the op reads: in[k] or a view of it */
    void *in_host[GDP_MAX_INPUTS];     /* the inputs' data, written before every exec */
    int n_fwd;
    gd_tensor *fwd[GDP_MAX_OUTPUTS];   /* the op's outputs (those its node has) */
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

/* Builds the case as `o` says. The context's strict/guard flags apply. */
gd_status gd_case_build_ex(gd_ctx *ctx, const gd_op_def *op, const gd_case *c, const gd_case_opts *o,
                           gd_case_prog *cp);
/* The contiguous case on backend `backend` (index); the reference runs as the oracle. */
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
