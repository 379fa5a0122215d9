/* cuda_internal.h — what the CUDA plugin's files share: the backend state, error and
 * launch helpers, dtype load/store helpers for kernels, and the kernel tables each family
 * exports. Built only against gradus_plugin.h; nothing here knows gradus internals.
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
#define CU_LT_WORKSPACE ((size_t)32 << 20)

typedef struct cu_stage {
    void *buf;         /* pinned host memory, CU_STAGE_BYTES */
    cudaEvent_t done;  /* recorded after the DMA that last used buf */
    int used;          /* done has been recorded at least once */
} cu_stage;

typedef struct cu_span_rec {
    char name[32];
    cudaEvent_t start, end;
    int32_t stream_id;
} cu_span_rec;

typedef struct cu_prof {
    int on;
    cudaEvent_t base;        /* recorded at start(): time zero of every span */
    cu_span_rec *recs;       /* spans recorded but not yet collected */
    int n, cap;
    cudaEvent_t *spare;      /* events of collected spans, reused */
    int n_spare, cap_spare;
    char (*names)[32];       /* names handed out by the last collect */
    int cap_names;
} cu_prof;

typedef struct cu_mm_cache cu_mm_cache; /* matmul.cu: cached cuBLASLt plans */

typedef struct cu_backend {
    const gdp_host *host;
    gdp_device dev;          /* the device module, with this device's name filled in */
    int device;
    char name[256];
    int sm_count;
    int managed;             /* GRADUS_CUDA_MANAGED=1: managed memory, host visible */
    int sync_each;           /* GRADUS_SYNC=1: synchronize after every kernel */
    /* Kernels and copies given a NULL stream run here. There is no private copy stream:
     * the ABI orders every copy on the caller's stream, so a copy stream only helps when
     * the host makes one (stream_create) and orders it with events, e.g. to upload the
     * next batch while a step runs. */
    cudaStream_t compute;
    cudaMemPool_t pool;      /* our own pool, so other libraries' frees do not mix */
    pthread_mutex_t mu;      /* guards streams, staging, profiler and plan cache */
    cudaStream_t user[CU_MAX_STREAMS]; /* streams the host created, for alloc/free fencing */
    cudaEvent_t user_ev[CU_MAX_STREAMS];
    int n_user;
    cudaEvent_t fence;       /* scratch event for compute -> user stream ordering */
    cu_stage stage[CU_NSTAGE];
    int next_stage;
    size_t live_bytes;       /* bytes handed out and not freed (managed mode) */
    void *lt;                /* cublasLtHandle_t, kept opaque here */
    void *lt_ws;             /* cuBLASLt workspace, used only on the compute stream */
    cu_mm_cache *mm;
    cu_prof prof;
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

/* ---- kernels: the launch wrapper ------------------------------------------------------ */

typedef gdp_status (*cu_run_fn)(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err);

/* Runs fn for a node: profiler events around it, the launch-error check, and the
 * GRADUS_SYNC synchronization, in one place for every kernel. */
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

/* ---- kernels: dtype helpers ----------------------------------------------------------- */

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

static inline int cu_is_float(int32_t dt) { return dt == GDP_F32 || dt == GDP_F16 || dt == GDP_BF16; }
static inline int cu_is_index(int32_t dt) { return dt == GDP_I32 || dt == GDP_I64; }

/* Dispatches a templated launcher on a float dtype: CU_FLOAT_SWITCH(dt, T, stmt). */
#define CU_FLOAT_SWITCH(dt, T, ...)                                                \
    switch (dt) {                                                                  \
    case GDP_F32: { typedef float T; __VA_ARGS__; } break;                         \
    case GDP_F16: { typedef __half T; __VA_ARGS__; } break;                        \
    case GDP_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break;                \
    default: return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda %s: dtype %d", node->op, (int)(dt)); \
    }

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

gdp_status cu_device_open(cu_backend *be, gdp_err *err);
void cu_device_close(cu_backend *be);
/* Allocation used by kernels for scratch space (ordered on the compute stream). */
gdp_status cu_scratch_alloc(cu_backend *be, size_t bytes, void **ptr, gdp_err *err);
void cu_scratch_free(cu_backend *be, void *ptr);

/* Profiler hooks used by cu_run. */
void cu_prof_begin(cu_backend *be, cudaStream_t s, cudaEvent_t *start);
void cu_prof_end(cu_backend *be, cudaStream_t s, const char *name, cudaEvent_t start);
void cu_prof_close(cu_backend *be);

gdp_status cu_matmul_open(cu_backend *be, gdp_err *err);
void cu_matmul_close(cu_backend *be);

/* Each family exports its kernels as a table (op, dtype, supports, launch). */
typedef struct cu_family {
    const char *name;
    const gdp_kernel *kernels;
    int count;
} cu_family;

/* `extern` because a namespace-scope const has internal linkage in C++. */
#define CU_FAMILY(name, table) \
    extern const cu_family cu_family_##name = {#name, table, (int)(sizeof table / sizeof table[0])}

#define CU_K(op, dt, sup, fn, attrs) {sizeof(gdp_kernel), op, dt, 0, sup, fn, attrs, NULL, NULL}

#endif
