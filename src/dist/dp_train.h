/* dp_train.h — the data-parallel part of the LM trainer (src/nn/lm_train.c): gradients
 * gathered from each micro-batch, summed over the ranks, handed to the optimizer; the
 * optimizer's moments optionally sharded (ZeRO-1). */
#ifndef GD_DP_TRAIN_H
#define GD_DP_TRAIN_H

#include "gradus_dist.h"
#include "gradus_lm.h"

typedef struct gd_dp gd_dp;

/* After gd_backward(g, loss): for each parameter with a gradient, a state
 * "<param>.grad_sum" that the optimizer reads (scaled by 1 / (ranks x accum) and, when
 * `unscale` (an f32 scalar state: a loss scale's inverse) is not NULL, by it; clipped by
 * the global norm `clip` when > 0), and AdamW (oc, clip_norm ignored) over the parameters
 * this rank updates: all of them, or its share with zero1. *norm gets the global gradient
 * norm (before clipping). */
gd_status gd_dp_build(gd_graph *g, gd_dist *d, int64_t accum, double clip, const gd_adamw_config *oc, int zero1,
                      gd_tensor *unscale, gd_tensor **norm, gd_dp **out);
/* What the micro-batch program computes besides the loss, one per gradient: the gradient
 * (read after each run), or with device sums its addition into the grad_sum state. */
int gd_dp_grad_count(const gd_dp *dp);
gd_tensor *gd_dp_micro_target(const gd_dp *dp, int i);
/* The update program's targets: `norm`, AdamW's new parameters and, with device sums, the
 * sums' resets (after AdamW in graph order). Writes at most gd_dp_update_target_cap. */
int gd_dp_update_targets(const gd_dp *dp, gd_tensor *norm, gd_tensor **out);
int gd_dp_update_target_cap(const gd_dp *dp);
/* The grad_sum states (as many): after gd_dp_reduce, the step's summed gradients, the same
 * on every rank. */
gd_tensor *gd_dp_sum(const gd_dp *dp, int i);
/* After compiling the micro program: unless GRADUS_DP_OVERLAP is 0, the step's last
 * micro-batch sums its gradients with the other ranks' while its backward runs
 * (callbacks on the program; on the host, with ranks, a communication thread; with device
 * sums, the device's collective queued bucket by bucket). */
gd_status gd_dp_attach(gd_dp *dp, gd_program *micro);
/* Before a micro-batch's run: the first of the step and the last (which, overlapped,
 * starts the sums). From then until gd_dp_reduce (or gd_dp_cancel) nothing else may use
 * the gd_dist. */
void gd_dp_micro(gd_dp *dp, int64_t step, int first, int last);
/* After a micro-batch's run: adds its gradients into this rank's sum (the first of a step
 * starts it). */
gd_status gd_dp_accumulate(gd_dp *dp, int first);
/* Sums the ranks' gradients (rank order; overlapped: waits for those sums) and writes them
 * into the grad_sum states. */
gd_status gd_dp_reduce(gd_dp *dp, int64_t step);
/* After a failed micro-batch: stops summing (waits for the bucket in progress, at most the
 * timeout); later steps sum after the backward. */
void gd_dp_cancel(gd_dp *dp);
/* A step whose update did not run (loss scaling found inf or NaN): device sums are
 * zeroed for the next step. */
gd_status gd_dp_skipped(gd_dp *dp);
/* After the update program ran: with zero1, every parameter goes from the rank that
 * updated it to the others. */
gd_status gd_dp_after_update(gd_dp *dp, int64_t step);
/* With zero1, AdamW's moments that rank 0 does not keep, sent to rank 0 (a collective:
 * every rank calls it) as safetensors entries to save beside its own; *n = 0 otherwise.
 * The entries stay valid until the next call or gd_dp_free. */
gd_status gd_dp_gather_moments(gd_dp *dp, const gd_st_entry **entries, int *n);
/* Memory this rank holds: parameters, gradient buffers of its own (host and states),
 * optimizer moments. */
void gd_dp_memory(const gd_dp *dp, size_t *param_bytes, size_t *grad_bytes, size_t *optimizer_bytes);
/* Where the ranks' gradients are summed: "host" ("host, during the backward" once a bucket
 * was summed while a backward pass still ran), or the backend whose collective does it. */
const char *gd_dp_summed_on(const gd_dp *dp);
void gd_dp_free(gd_dp *dp);

#endif
