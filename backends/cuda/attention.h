/* attention.h — what the two attention implementations share: the problem's dimensions
 * and which keys a query sees (attention.cu: any float dtype and head size, on CUDA
 * cores; attention_tc.cu: f16/bf16 with heads of 64 or 128, on tensor cores), and the
 * tensor-core entry points attention.cu dispatches to. */
#ifndef GD_CUDA_ATTENTION_H
#define GD_CUDA_ATTENTION_H

#include "cuda_internal.h"

typedef struct att_dims {
    int64_t B, H, T, D, Hkv, S;
    int64_t L;          /* valid keys of the batch row at hand: set by each kernel from kvlen */
    const void *kvlen;  /* kv_len on the device (a scalar or one per batch row), or NULL (L = S) */
    int64_t kvstep;     /* elements between batch rows' kv_len: 0 for a scalar (or a broadcast) */
    int kvlen64;
    int causal;
    int y_bthd;         /* y laid out (B, T, H, D) (attention_lse), else (B, H, T, D) */
    int grad_bthd;      /* dq, dk, dv laid out (B, T, H, D) (attention_grad_lse), else (B, H, T, D) */
    float scale;
} att_dims;

/* Offset of row (b, h, t) of a contiguous y in the layout a says. */
static __host__ __device__ __forceinline__ int64_t att_y_row(const att_dims &a, int64_t b, int64_t h, int64_t t)
{
    return (a.y_bthd ? (b * a.T + t) * a.H + h : (b * a.H + h) * a.T + t) * a.D;
}

/* Offsets of row (b, h, t) of dq and of row (b, kv head hk, s) of dk and dv, contiguous,
 * in the layout a says. */
static __host__ __device__ __forceinline__ int64_t att_dq_row(const att_dims &a, int64_t b, int64_t h, int64_t t)
{
    return (a.grad_bthd ? (b * a.T + t) * a.H + h : (b * a.H + h) * a.T + t) * a.D;
}
static __host__ __device__ __forceinline__ int64_t att_dkv_row(const att_dims &a, int64_t b, int64_t hk, int64_t s)
{
    return (a.grad_bthd ? (b * a.S + s) * a.Hkv + hk : (b * a.Hkv + hk) * a.S + s) * a.D;
}

/* Batch row b's kv_len as given (S when there is none). */
static __device__ __forceinline__ int64_t att_len_raw(const att_dims &a, int64_t b)
{
    return a.kvlen != NULL ? cu_ld_index(a.kvlen, a.kvlen64, b * a.kvstep) : a.S;
}

/* Batch row b's valid keys, clamped into [0, S]. */
static __device__ __forceinline__ int64_t att_len(const att_dims &a, int64_t b)
{
    int64_t L = att_len_raw(a, b);
    return L < 0 ? 0 : L > a.S ? a.S : L;
}

/* Block 0 reports the first kv_len outside [0, S] as bad data (the kernels go on with it
 * clamped); `pos` is the batch row. */
static __device__ __forceinline__ void att_check_len(const att_dims &a, const cu_bad &bad)
{
    if (blockIdx.x != 0 || a.kvlen == NULL) return;
    const int64_t rows = a.kvstep != 0 ? a.B : 1;
    for (int64_t b = threadIdx.x; b < rows; b += blockDim.x) {
        const int64_t raw = att_len_raw(a, b);
        if (raw < 0 || raw > a.S) cu_report(bad, raw, b);
    }
}

/* How many keys query t sees (a prefix of the L valid keys). */
static __device__ __forceinline__ int64_t att_visible(const att_dims &a, int64_t t)
{
    if (!a.causal) return a.L;
    int64_t n = t + a.L - a.T + 1;
    return n < 0 ? 0 : n > a.L ? a.L : n;
}

/* ---- attention_tc.cu ---- */

/* Where the rows of a (B, H, rows, D) view lie: element (b, h, t, d) is at
 * b * b + h * h + t * t + d (strides in elements; the D elements of a row contiguous). */
typedef struct att_strides {
    int64_t b, h, t;
    int vec; /* every row 16-byte aligned */
} att_strides;
typedef struct att_views {
    att_strides q, k, v, dy;
} att_views;

/* The strides of a 4-d tensor as att_strides. */
static inline att_strides att_strides_of(const gdp_tensor *t)
{
    /* a dim of size 1 is only ever indexed at 0: its stride says nothing (a transposed
     * decode step's q is such a view) and must not spoil the alignment test */
    att_strides s = {t->shape[0] > 1 ? t->stride[0] : 0, t->shape[1] > 1 ? t->stride[1] : 0,
                     t->shape[2] > 1 ? t->stride[2] : 0, 0};
    int64_t es = (int64_t)gdp_dtype_size(t->dtype);
    s.vec = ((uintptr_t)t->data & 15) == 0 && (s.b * es) % 16 == 0 && (s.h * es) % 16 == 0 && (s.t * es) % 16 == 0;
    return s;
}

/* ---- attention_decode.cu ---- */

#define DEC_MAXT 4 /* query rows the decode kernel takes */

/* Whether the decode kernel takes the forward: at most DEC_MAXT query rows, q, k and v any
 * views whose rows are contiguous, its shared memory granted. */
int cu_attn_decode_ok(const cu_backend *be, const att_dims &a, const gdp_tensor *const *in);
/* The workspace it needs (the splits' partial results), in bytes. */
size_t cu_attn_decode_workspace(const cu_backend *be, const att_dims &a);
gdp_status cu_attn_decode(cu_backend *be, cudaStream_t s, const gdp_node *node, const att_dims &a,
                          const att_views &w, cu_bad bad, gdp_err *err);
/* Opts the decode kernels into the shared memory they need (at open). */
void cu_attn_decode_open(cu_backend *be);

/* Whether the tensor-core kernels take this problem: dtype f16/bf16, D 64 or 128, at
 * least 16 query rows, the inputs `in` (q, k, v and, for the backward, dy) any views whose
 * rows are contiguous, and the shared memory the kernels need granted. */
int cu_attn_tc_ok(const cu_backend *be, int32_t dtype, const att_dims &a, int backward, const gdp_tensor *const *in,
                  int n_in);
/* Forward: y = attention(q, k, v), y contiguous, and with lse != NULL the log-sum-exp of
 * each query row's scaled scores (attention_lse); or, with dy != NULL and y NULL, the
 * backward's statistics per query row: lse and delta = dy . o. */
void cu_attn_tc_fwd(const cu_backend *be, cudaStream_t s, int32_t dtype, const void *q, const void *k,
                    const void *v, void *y, const void *dy, float *lse, float *delta, const att_dims &a,
                    const att_views &w, cu_bad bad);
/* Backward from those statistics: dq, dk and dv (contiguous). With ds (cu_attn_tc_ds_bytes of
 * scratch) the dk/dv pass stores dS, from which dq is one product; with ds NULL dq recomputes
 * it. */
void cu_attn_tc_bwd(const cu_backend *be, cudaStream_t s, int32_t dtype, const void *dy, const void *q,
                    const void *k, const void *v, const float *lse, const float *delta, void *dq, void *dk,
                    void *dv, void *ds, const att_dims &a, const att_views &w);
/* The most scratch a backward's stored dS may take; longer problems recompute it. */
#define CU_ATTN_DS_MAX ((size_t)1 << 30)
/* Bytes of the stored dS of a backward of this problem, 0 when over CU_ATTN_DS_MAX. */
size_t cu_attn_tc_ds_bytes(int32_t dtype, const att_dims &a);
/* Opts the kernels into the shared memory they need (once, at open). */
void cu_attention_tc_open(cu_backend *be);

/* ---- attention_wg.cu ---- */

/* Whether the warpgroup (wgmma) forward takes a problem cu_attn_tc_ok took: a device of
 * compute capability 9.0 running sm_90a code, rows 16-byte aligned, its shared memory granted. */
int cu_attn_wg_ok(const cu_backend *be, const att_dims &a, const att_views &w, int backward);
/* y = attention(q, k, v) and, with lse != NULL, the rows' log-sum-exp, as cu_attn_tc_fwd. */
void cu_attn_wg_fwd(cudaStream_t s, int32_t dtype, const void *q, const void *k, const void *v, void *y, float *lse,
                    const att_dims &a, const att_views &w, cu_bad bad);
/* The backward's dk/dv pass (and the stored dS for dq), as attention_tc.cu's. */
void cu_attn_wg_dkdv(cudaStream_t s, int32_t dtype, const void *dy, const void *q, const void *k, const void *v,
                     const float *lse, const float *delta, void *dk, void *dv, void *ds, int64_t tp, const att_dims &a,
                     const att_views &w);
void cu_attention_wg_open(cu_backend *be);

/* ---- attention.cu ---- */

/* Whether attention_lse and attention_grad_lse run here for q, k, v of these shapes and
 * dtype (fuse.cu asks before it makes them). */
int cu_attn_lse_fits(const cu_backend *be, const gdp_tensor *q, const gdp_tensor *k, const gdp_tensor *v);

#endif
