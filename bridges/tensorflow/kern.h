/* kern.h — what the bridge's kernel files share: the table entry of a kernel, the state of
 * one kernel instance (the node's attributes, read once), and the helpers that turn
 * TensorFlow tensors into gradus views and run gradus ops on them. */
#ifndef GTF_KERN_H
#define GTF_KERN_H

#include "gtf.h"

/* kernels.h defines a const object in the header, which in C has external linkage: each
 * file that includes it names its own copy (GTF_UNIT) so that the objects do not clash. */
#define TF_InputRange_Args_STRUCT_SIZE GTF_UNIT
#include "tensorflow/c/kernels.h"
#undef TF_InputRange_Args_STRUCT_SIZE
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"

typedef struct kstate kstate;

typedef struct kdef {
    const char *tf_op;
    const char *gd_op;     /* the gradus op it forwards to (the main one, for the list) */
    int kind;              /* for the generic kernels of kernels.c */
    const char *host_input; /* an input kept in host memory (axes, sizes), or NULL */
    const char *type_attr; /* the attribute the dtype constraint is on; NULL: "T" */
    void (*compute)(const kstate *k, TF_OpKernelContext *ctx); /* NULL: the generic kernel */
    int no_bf16;           /* the op's definition does not allow bfloat16 */
} kdef;

struct kstate {
    const kdef *def;
    int ta, tb;            /* MatMul's transposes, BatchMatMul's adjoints */
    int keep_dims;
    int batch_dims;        /* GatherV2 */
    int stride[2], ksize[2], dilation[2]; /* H, W of an NHWC op */
    char padding[16];      /* "SAME", "VALID" */
    int act;               /* fused ops: 1 when fused_ops ends in Relu */
    int fused_bad;         /* fused ops: a fused_ops list the bridge does not run */
};

/* gradus's view of a TensorFlow tensor (contiguous). */
gdp_tensor kt_view(const TF_Tensor *t);
/* Fails the kernel with a message (printf with two strings). */
void kt_fail(TF_OpKernelContext *ctx, TF_Code code, const char *fmt, const char *a, const char *b);
/* Runs one gradus op on the device, on the kernel's stream. 0 on success; on failure the
 * kernel has failed with gradus's message. */
int kt_run(TF_OpKernelContext *ctx, const kstate *k, const char *op, int n_in, const gdp_tensor *const *in, int n_out,
           const gdp_tensor *const *out, int n_attr, const gd_attr *attrs);
/* Output i, or a device temporary (i < 0), of the given shape; NULL after a failure. */
TF_Tensor *kt_alloc(TF_OpKernelContext *ctx, int i, TF_DataType dt, int ndim, const int64_t *shape);
/* Input i; NULL after a failure. The caller deletes it. */
TF_Tensor *kt_input(TF_OpKernelContext *ctx, int i);
/* The ints of a host-memory integer tensor (int32 or int64) into out; count, -1 if over cap. */
int kt_host_ints(const TF_Tensor *t, int64_t *out, int cap);
/* Copies host bytes into device memory, on the kernel's stream. 0 on success. */
int kt_upload(TF_OpKernelContext *ctx, const kstate *k, void *dst, const void *src, size_t bytes);
/* Copies src into dst (same shape; any strides) on the device. */
int kt_copy(TF_OpKernelContext *ctx, const kstate *k, const gdp_tensor *src, const gdp_tensor *dst);

/* The kernels of nn.c and shape.c. */
void kt_conv2d(const kstate *k, TF_OpKernelContext *ctx);
void kt_conv2d_grad_input(const kstate *k, TF_OpKernelContext *ctx);
void kt_conv2d_grad_filter(const kstate *k, TF_OpKernelContext *ctx);
void kt_max_pool(const kstate *k, TF_OpKernelContext *ctx);
void kt_max_pool_grad(const kstate *k, TF_OpKernelContext *ctx);
void kt_avg_pool(const kstate *k, TF_OpKernelContext *ctx);
void kt_avg_pool_grad(const kstate *k, TF_OpKernelContext *ctx);
void kt_sparse_xent(const kstate *k, TF_OpKernelContext *ctx);
void kt_xent(const kstate *k, TF_OpKernelContext *ctx);
void kt_fused_matmul(const kstate *k, TF_OpKernelContext *ctx);
void kt_fused_conv2d(const kstate *k, TF_OpKernelContext *ctx);
void kt_add_n(const kstate *k, TF_OpKernelContext *ctx);
void kt_cast(const kstate *k, TF_OpKernelContext *ctx);
void kt_transpose(const kstate *k, TF_OpKernelContext *ctx);
void kt_concat(const kstate *k, TF_OpKernelContext *ctx);
void kt_gather(const kstate *k, TF_OpKernelContext *ctx);

#endif
