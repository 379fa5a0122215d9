/* cuda_internal.h — what the CUDA plugin's files share: the backend state, error and
 * launch helpers, workspaces, bad-data reports, dtype load/store helpers for kernels, and
 * the kernel tables each family exports. Built only against gradus_plugin.h (and the
 * semantics header it includes); nothing here knows gradus internals.
 */
#ifndef GRADUS_CUDA_INTERNAL_H
#define GRADUS_CUDA_INTERNAL_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>

#include "gradus_plugin.h"

/* ---- backend state ------------------------------------------------------------------- */

#define CU_NSTAGE 4                      /* pinned staging slots for host copies */
#define CU_STAGE_BYTES ((size_t)4 << 20) /* 4 MiB each: large enough to reach DMA speed */
#define CU_MAX_STREAMS 16                /* streams the host may create */
#define CU_MAX_SITES 4096                /* nodes whose kernels check their data (baddata.cu) */
#define CU_NAME 96                       /* bytes kept of a node's label */

typedef struct cu_stage {
    void *buf;         /* pinned host memory, CU_STAGE_BYTES */
    cudaEvent_t done;  /* recorded after the DMA that last used buf */
    int used;          /* done has been recorded at least once */
} cu_stage;

typedef struct cu_span_rec {
    char name[CU_NAME];
    cudaEvent_t start, end;
    int32_t stream_id;
    int32_t node_id;
} cu_span_rec;

typedef struct cu_prof {
    int on;
    cudaEvent_t base;        /* recorded at start(): device time zero */
    uint64_t base_ns;        /* the host clock (gdp_host.now_ns) when base happened */
    cu_span_rec *recs;       /* spans recorded but not yet collected */
    int n, cap;
    cudaEvent_t *spare;      /* events of collected spans, reused */
    int n_spare, cap_spare;
    char (*names)[CU_NAME];  /* names handed out by the last collect */
    int cap_names;
} cu_prof;

/* A node whose kernel checks indices, positions or lengths on the device: what the
 * message about bad data found there says (baddata.cu). */
typedef struct cu_site {
    int32_t id;              /* the gdp_node id */
    int32_t kind;            /* CU_BAD_* */
    char op[32];
    char label[CU_NAME];
    int64_t bound;           /* rows, axis size, classes, cache steps, keys */
    int64_t extra;           /* index_select: axis; cross_entropy: ignore_index; cache_write: T */
    int32_t ndim;            /* shape of the checked tensor, for positions like ids[1, 2] */
    int64_t shape[GDP_MAX_DIMS];
} cu_site;

/* Written by the device into mapped pinned memory, read by the host without waiting.
 * A kernel claims a report by moving the device-side claim word from `epoch` to
 * epoch + 1; the host bumps `epoch` when it has taken the report, which opens the next. */
typedef struct cu_bad_host {
    int32_t ready;  /* 1: site, value and pos are complete */
    int32_t epoch;  /* reports the host has taken */
    int32_t site;   /* index into the site table, -1: unknown */
    int32_t node_id;
    int64_t value;  /* the bad index / position / length */
    int64_t pos;    /* where it was found (flat position in the checked tensor) */
} cu_bad_host;

/* What a checking kernel gets, by value (stable for the backend's lifetime, so a captured
 * graph keeps working). */
typedef struct cu_bad {
    volatile cu_bad_host *host; /* device address of the mapped record */
    int32_t *claim;             /* device memory */
    int32_t site;
    int32_t node_id;
} cu_bad;

typedef struct cu_mm_cache cu_mm_cache; /* matmul.cu: cached cuBLASLt plans */

typedef struct cu_backend {
    const gdp_host *host;
    gdp_device dev;          /* the device module, with this device's name filled in */
    int device;
    char name[256];
    int sm_count;
    size_t smem_optin;       /* largest dynamic shared memory a block may opt into */
    int managed;             /* GRADUS_CUDA_MANAGED=1: managed memory, host visible */
    int sync_each;           /* GRADUS_SYNC=1: synchronize after every kernel */
    int graphs;              /* the executor captures segments (GRADUS_CUDA_GRAPHS != 0) */
    int capturing;           /* a segment is being captured: no profiling, no waiting */
    int tc_attention;        /* f16/bf16 attention on tensor cores (GRADUS_CUDA_TC_ATTENTION=0: off) */
    int wgmma;               /* attention's forward on wgmma (sm_90a code on a 9.0 device; GRADUS_CUDA_WGMMA=0: off) */
    int tc_attn_wide;        /* heads of 128 on attention_tc.cu's wide tiles (GRADUS_CUDA_ATTN_WIDE=0: narrow) */
    int attn_lse;            /* the graph pass keeps attention's lse for its backward (GRADUS_CUDA_ATTN_LSE=0: off) */
    int attn_ds;             /* the tensor-core backward stores dS for dq (GRADUS_CUDA_ATTN_DS=0: off) */
    int norm_fuse;           /* decode products take the RMS norm in front (GRADUS_CUDA_NORM_FUSE=0: off) */
    int capture_logged;      /* said once that a segment could not be captured */
    int sm90;                /* the code the driver loaded is sm_90's (probe kernel) */
    int pdl;                 /* cu_launch may start a kernel early (GRADUS_CUDA_PDL=0: off) */
    int clusters;            /* kernels may combine across a thread-block cluster
                                (GRADUS_CUDA_CLUSTERS=0: off) */
    /* Kernels and copies given a NULL stream run here. The host normally makes a stream
     * of its own (stream_create) and passes it everywhere. */
    cudaStream_t compute;
    cudaMemPool_t pool;      /* our own pool, so other libraries' frees do not mix */
    pthread_mutex_t mu;      /* guards streams, staging, profiler, sites and plan caches */
    cudaStream_t user[CU_MAX_STREAMS]; /* streams the host created, for alloc/free fencing */
    cudaEvent_t user_ev[CU_MAX_STREAMS];
    int n_user;
    cudaEvent_t fence;       /* scratch event for compute -> user stream ordering */
    cu_stage stage[CU_NSTAGE];
    int next_stage;
    size_t live_bytes;       /* bytes handed out and not freed (managed mode) */
    void *lt;                /* cublasLtHandle_t, kept opaque here */
    cu_mm_cache *mm;
    cu_prof prof;
    cu_bad_host *bad_host;   /* mapped pinned memory (host address) */
    cu_bad_host *bad_dev;    /* the same, as the device addresses it */
    int32_t *bad_claim;      /* device memory */
    cu_site *sites;          /* CU_MAX_SITES, allocated at open */
    int n_sites;
} cu_backend;

/* ---- errors ---------------------------------------------------------------------------- */

/* Turns a CUDA error into a status naming the call. Non-sticky errors are also cleared
 * from the runtime's "last error", so that the next launch check does not report them
 * again. */
gdp_status cu_check(cudaError_t e, const char *call, gdp_err *err);

#define CU_TRY(call)                                                   \
    do {                                                               \
        gdp_status cu_s_ = cu_check((call), #call, err);               \
        if (cu_s_ != GDP_OK) return cu_s_;                             \
    } while (0)

/* A stream handle from the host: NULL means the compute stream. */
static inline cudaStream_t cu_stream(const cu_backend *be, void *stream)
{
    return stream != NULL ? (cudaStream_t)stream : be->compute;
}

void cu_log(const cu_backend *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- kernels: the launch wrapper ------------------------------------------------------ */

typedef gdp_status (*cu_run_fn)(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err);

/* Runs fn for a node: profiler events around it, the launch-error check, and the
 * GRADUS_SYNC synchronization, in one place for every kernel (the last two skipped while
 * a segment is captured into a CUDA graph: nothing runs then). */
gdp_status cu_run(void *backend, const gdp_node *node, void *stream, gdp_err *err, cu_run_fn fn);

/* Defines `name_launch` (a gdp_launch_fn) running `name` through cu_run. */
#define CU_LAUNCHER(name)                                                                  \
    static gdp_status name##_launch(void *b, const gdp_node *n, void *s, gdp_err *e)      \
    {                                                                                      \
        return cu_run(b, n, s, e, name);                                                   \
    }

/* Grid size for a grid-stride loop over n items: enough blocks to fill the machine a
 * few times over, never more than needed, never zero. */
static inline unsigned cu_blocks(const cu_backend *be, int64_t n, int threads)
{
    int64_t want = (n + threads - 1) / threads;
    int64_t cap = (int64_t)(be->sm_count > 0 ? be->sm_count : 80) * 16;
    if (want > cap) want = cap;
    if (want < 1) want = 1;
    return (unsigned)want;
}

/* Rows of x that gemv.cu's products take (a decode step: a few sequences), and so the most
 * the graph pass fuses into linear_qkv and linear_swiglu. */
#define CU_GEMV_MAX_ROWS 8

/* ---- programmatic dependent launch -------------------------------------------------------- */

/* A decode step is a chain of small kernels, and most of each one's time is the gap while
 * the next is launched. On sm_90 a kernel launched by cu_launch may start while the kernel
 * in front of it on the stream is still running (captured graphs keep that as a
 * programmatic edge): its blocks are scheduled early and wait in cu_pdl_wait until the
 * earlier grid has finished and its writes are visible. So a kernel launched by cu_launch
 * MUST call cu_pdl_wait() before it reads or writes any memory another kernel touches —
 * first thing, in every kernel cu_launch starts. Launched the usual way, or on an older
 * device, cu_pdl_wait costs nothing and the order is the stream's. */
#if defined(__CUDACC__)
static __device__ __forceinline__ void cu_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* let the next kernel's launch start now, then wait for the one before */
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Asks L2 for the 128-byte lines of [p, p + bytes) that part `part` of `parts` takes (each
 * caller of a group one line in turn: lane + 32 part, in steps of 32 parts, for the lanes of
 * `parts` warps), without waiting for them. Allowed before cu_pdl_wait, where a load is not:
 * a prefetch reads no value into the kernel, and L2 is where every kernel's writes meet, so a
 * line it brings in early is never stale. A decode step's kernel uses it for its weights
 * while the kernel in front still runs: their read from memory, the longest latency of its
 * path, then passes in the other kernel's time. */
static __device__ __forceinline__ void cu_prefetch_l2(const void *p, int64_t bytes, int lane, int part, int parts)
{
    if (bytes <= 0) return;
    const uintptr_t a0 = (uintptr_t)p & ~(uintptr_t)127, a1 = (uintptr_t)p + (uintptr_t)bytes;
    const int64_t lines = (int64_t)((a1 - a0 + 127) / 128);
    for (int64_t i = lane + 32 * (int64_t)part; i < lines; i += 32 * (int64_t)parts)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(a0 + (uintptr_t)i * 128));
}

/* A kernel that only waits: open_backend reads which code the driver loaded for it (a
 * ptxVersion of 90 or more has the wait) before it lets kernels start early. */
__global__ void cu_pdl_probe(void);

/* cu_launch below in clusters of `cluster` blocks along x (be->clusters must be on, grid.x
 * a multiple of cluster; 1: no cluster). */
template <typename... P, typename... A>
static inline void cu_launch_clustered(const cu_backend *be, unsigned cluster, void (*kernel)(P...), dim3 grid,
                                       dim3 block, size_t smem, cudaStream_t s, A... args)
{
    cudaLaunchAttribute at[2];
    unsigned n = 0;
    if (be->pdl) {
        at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[n].val.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    if (cluster > 1) {
        at[n].id = cudaLaunchAttributeClusterDimension;
        at[n].val.clusterDim.x = cluster, at[n].val.clusterDim.y = 1, at[n].val.clusterDim.z = 1;
        n++;
    }
    cudaLaunchConfig_t c = {};
    c.gridDim = grid, c.blockDim = block, c.dynamicSmemBytes = smem, c.stream = s;
    c.attrs = at, c.numAttrs = n;
    (void)cudaLaunchKernelEx(&c, kernel, ((P)args)...);
}

/* kernel<<<grid, block, smem, s>>>(args...), allowed to overlap the kernel in front of it
 * when be->pdl. A launch error is left for cu_run's check, as with <<<>>>. */
template <typename... P, typename... A>
static inline void cu_launch(const cu_backend *be, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t s, A... args)
{
    cu_launch_clustered(be, 1, kernel, grid, block, smem, s, args...);
}
#endif

/* ---- shared memory beyond 48 KiB ---------------------------------------------------------- */

/* A kernel that may use more than the default 48 KiB of dynamic shared memory must opt in.
 * That is done once at open for every instantiation, at the most it can ask for (capped at
 * what the device gives a block), never at launch: a launch must do nothing but launch, so
 * that it can be captured. The kernels' supports() decline what was not granted. */
static inline void cu_smem_opt_in(const cu_backend *be, const void *kernel, size_t bytes)
{
    const size_t cap = be->smem_optin > 0 ? be->smem_optin : (size_t)48 * 1024;
    if (bytes <= (size_t)48 * 1024) return;
    if (bytes > cap) bytes = cap;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) != cudaSuccess)
        (void)cudaGetLastError();
}

/* ---- workspaces -------------------------------------------------------------------------- */

/* Scratch a kernel needs is declared through gdp_kernel.workspace and planned by the host
 * (node->workspace): nothing is allocated while a program runs, and a captured graph keeps
 * pointing at the same memory. The host aligns slots less strictly in its guarded (sweep)
 * mode, so a declaration asks for CU_WS_ALIGN more and cu_ws aligns the base. Parts of a
 * workspace are carved at multiples of CU_WS_ALIGN too (cuBLAS wants 256 bytes). */
#define CU_WS_ALIGN ((size_t)256)

static inline size_t cu_ws_round(size_t b) { return (b + CU_WS_ALIGN - 1) & ~(CU_WS_ALIGN - 1); }
/* What a kernel declares for `bytes` of aligned scratch. */
static inline size_t cu_ws_declare(size_t bytes) { return bytes > 0 ? cu_ws_round(bytes) + CU_WS_ALIGN : 0; }
/* The aligned base of node's workspace, or a failure when it is smaller than `bytes`. */
gdp_status cu_ws(const gdp_node *node, size_t bytes, char **base, gdp_err *err);

/* ---- bad data found on the device (baddata.cu) ------------------------------------------ */

enum {
    CU_BAD_ROW = 1,    /* an embedding id outside [0, bound) */
    CU_BAD_INDEX = 2,  /* an index_select index outside [0, bound) along axis `extra` */
    CU_BAD_TARGET = 3, /* a cross_entropy target outside [0, bound), not ignore_index `extra` */
    CU_BAD_POS = 4,    /* a cache_write pos with [pos, pos + extra) not inside [0, bound) */
    CU_BAD_LEN = 5     /* an attention kv_len outside [0, bound] */
};

/* The report handle for a checking kernel of node: names the node in the message (the
 * site table is filled at launch and at capture, without allocating). `shape` is the
 * tensor whose positions the message names (or NULL). */
cu_bad cu_bad_for(cu_backend *be, const gdp_node *node, int kind, int64_t bound, int64_t extra,
                  const gdp_tensor *shape);
/* GDP_ERR_INVALID with the message when a kernel reported bad data since the last call;
 * GDP_OK otherwise. Never waits. */
gdp_status cu_bad_take(cu_backend *be, gdp_err *err);
gdp_status cu_bad_open(cu_backend *be, gdp_err *err);
void cu_bad_close(cu_backend *be);

#if defined(__CUDACC__)
/* Records the first bad value of this report epoch; later ones (until the host took it)
 * are dropped. Called by a few threads at most: one per bad position. */
static __device__ __forceinline__ void cu_report(const cu_bad &b, int64_t value, int64_t pos)
{
    if (b.host == NULL) return;
    int32_t e = b.host->epoch;
    if (atomicCAS(b.claim, e, e + 1) != e) return;
    b.host->site = b.site;
    b.host->node_id = b.node_id;
    b.host->value = value;
    b.host->pos = pos;
    __threadfence_system(); /* the fields reach the host before the flag */
    b.host->ready = 1;
}

/* An i32 or i64 scalar (positions, lengths) read on the device. */
static __device__ __forceinline__ int64_t cu_ld_index(const void *p, int is64, int64_t i)
{
    return is64 ? ((const int64_t *)p)[i] : (int64_t)((const int32_t *)p)[i];
}
#endif

/* ---- kernels: dtype helpers ----------------------------------------------------------- */

/* The float dtypes the GPU kernels compute in (f64 only where a kernel says so). */
static inline int cu_gpu_float(int32_t dt) { return dt == GDP_F32 || gdp_is_half(dt); }

/* Floating tensors are loaded as float and stored with round-to-nearest-even, exactly
 * what the reference does for f16/bf16 (it computes through f32). */
#if defined(__CUDACC__)
static __device__ __forceinline__ float cu_ld(const float *p, int64_t i) { return p[i]; }
static __device__ __forceinline__ float cu_ld(const __half *p, int64_t i) { return __half2float(p[i]); }
static __device__ __forceinline__ float cu_ld(const __nv_bfloat16 *p, int64_t i) { return __bfloat162float(p[i]); }
static __device__ __forceinline__ void cu_st(float *p, int64_t i, float v) { p[i] = v; }
static __device__ __forceinline__ void cu_st(__half *p, int64_t i, float v) { p[i] = __float2half_rn(v); }
static __device__ __forceinline__ void cu_st(__nv_bfloat16 *p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
/* Stores a double the way the reference does: rounded to f32 first, then (for f16/bf16,
 * which the core runs through an f32 reference) to the narrow type. Elementwise kernels
 * compute in double like the reference, so most results match it bit for bit. */
static __device__ __forceinline__ void cu_std(float *p, int64_t i, double v) { p[i] = (float)v; }
static __device__ __forceinline__ void cu_std(__half *p, int64_t i, double v) { p[i] = __float2half_rn((float)v); }
static __device__ __forceinline__ void cu_std(__nv_bfloat16 *p, int64_t i, double v)
{
    p[i] = __float2bfloat16_rn((float)v);
}
#endif

/* Dispatches a templated launcher on a float dtype: CU_FLOAT_SWITCH(dt, T, stmt). */
#define CU_FLOAT_SWITCH(dt, T, ...)                                                \
    switch (dt) {                                                                  \
    case GDP_F32: { typedef float T; __VA_ARGS__; } break;                         \
    case GDP_F16: { typedef __half T; __VA_ARGS__; } break;                        \
    case GDP_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break;                \
    default: return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda %s: dtype %d", node->op, (int)(dt)); \
    }

/* A runtime position or length input: an integer scalar, or one per batch row (rows of
 * them); the elements between batch rows' values, 0 for a scalar. */
static inline int index_per_row(const gdp_tensor *t, int64_t rows)
{
    return gdp_is_index(t->dtype) && (gdp_numel(t) == 1 || (t->ndim == 1 && t->shape[0] == rows));
}
static inline int64_t index_step(const gdp_tensor *t) { return gdp_numel(t) == 1 ? 0 : t->stride[0]; }

/* Row-major shape helpers. */
static inline int64_t cu_prod(const int64_t *shape, int from, int to)
{
    int64_t n = 1;
    for (int i = from; i < to; i++) n *= shape[i];
    return n;
}
static inline int cu_same_shape(const gdp_tensor *a, const gdp_tensor *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}
/* Normalizes a possibly negative axis; -1 when out of range. */
static inline int cu_axis(int64_t axis, int ndim)
{
    if (axis < 0) axis += ndim;
    return axis >= 0 && axis < ndim ? (int)axis : -1;
}

/* ---- modules and families -------------------------------------------------------------- */

extern const gdp_device cu_device_module;
extern const gdp_profiler cu_profiler_module;
extern const gdp_executor cu_executor_module;
#ifdef GRADUS_HAVE_NCCL
/* collective.cu: NCCL, opened at run time; the module is offered only when it loaded */
extern "C" const gdp_collective cu_collective_module;
extern "C" int cu_nccl_available(const gdp_host *host);
#endif

gdp_status cu_device_open(cu_backend *be, gdp_err *err);
void cu_device_close(cu_backend *be);

/* optim.cu: launches the updates from node i of a captured segment on that are alike
 * (one optimizer step over many parameters) as one kernel; answers how many nodes it
 * launched, 0 when node i is to be launched alone. *st is the launch's status. */
int cu_updates_batch(cu_backend *be, const gdp_segment *seg, int i, cudaStream_t s, gdp_status *st, gdp_err *err);
/* layout.cu: the same for a run of float-to-float casts (a training step's master
 * weights to the compute dtype). */
int cu_casts_batch(cu_backend *be, const gdp_segment *seg, int i, cudaStream_t s, gdp_status *st, gdp_err *err);

/* Whether two tensors' buffers share a byte. */
static inline int cu_overlaps(const gdp_tensor *a, const gdp_tensor *b)
{
    const char *pa = (const char *)a->data, *pb = (const char *)b->data;
    size_t na = (size_t)gdp_numel(a) * gdp_dtype_size(a->dtype), nb = (size_t)gdp_numel(b) * gdp_dtype_size(b->dtype);
    return na > 0 && nb > 0 && pa < pb + nb && pb < pa + na;
}

/* Profiler hooks used by cu_run and the executor. */
void cu_prof_begin(cu_backend *be, cudaStream_t s, cudaEvent_t *start);
void cu_prof_end(cu_backend *be, cudaStream_t s, const char *name, int32_t node_id, cudaEvent_t start);
void cu_prof_close(cu_backend *be);

gdp_status cu_matmul_open(cu_backend *be, gdp_err *err);
void cu_matmul_close(cu_backend *be);
void cu_attention_open(cu_backend *be);

/* Each family exports its kernels as a table. */
typedef struct cu_family {
    const char *name;
    const gdp_kernel *kernels;
    int count;
} cu_family;

/* `extern` because a namespace-scope const has internal linkage in C++. */
#define CU_FAMILY(name, table) \
    extern const cu_family cu_family_##name = {#name, table, (int)(sizeof table / sizeof table[0])}

/* A kernel keyed by (op, dtype); with flags and a workspace function; for a mixed form. */
#define CU_K(op, dt, sup, fn, attrs) {sizeof(gdp_kernel), op, dt, 0, sup, fn, attrs, NULL, NULL}
#define CU_KX(op, dt, flags, sup, fn, attrs, ws) {sizeof(gdp_kernel), op, dt, flags, sup, fn, attrs, NULL, ws}
#define CU_KSIG(op, sig, sup, fn, attrs, ws) {sizeof(gdp_kernel), op, -1, 0, sup, fn, attrs, sig, ws}
#define CU_KSIGX(op, sig, flags, sup, fn, attrs, ws) {sizeof(gdp_kernel), op, -1, flags, sup, fn, attrs, sig, ws}

#endif
