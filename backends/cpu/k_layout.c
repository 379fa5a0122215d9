/* k_layout.c — reshape, copy and assign: byte copies, split over threads in fixed-size
 * pieces. Registered for every float dtype the ops are defined for (a copy does not care
 * what the bytes mean). memmove, because a host may hand a copy the same buffer twice.
 */
#include "kernels.h"

#include <string.h>

typedef struct copy_job {
    const char *src;
    char *dst;
    size_t bytes;
} copy_job;

#define PIECE ((int64_t)1 << 16) /* bytes per item */

static void copy_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const copy_job *j = ctx;
    size_t b = (size_t)(begin * PIECE), e = (size_t)(end * PIECE);
    if (e > j->bytes) e = j->bytes;
    if (e > b && j->dst + b != j->src + b) memmove(j->dst + b, j->src + b, e - b);
}

/* in[src_index] into out[0] */
static gdp_status copy_node(const gdp_node *n, int src_index)
{
    const gdp_tensor *x = &n->in[src_index];
    copy_job j = {.src = x->data, .dst = n->out[0].data, .bytes = (size_t)gdp_numel(x) * gdp_dtype_size(x->dtype)};
    if (j.bytes == 0) return GDP_OK;
    int64_t pieces = ((int64_t)j.bytes + PIECE - 1) / PIECE;
    gcpu_parallel_for_grain(pieces, 16, copy_task, &j); /* a thread per 1 MiB at least */
    return GDP_OK;
}

static gdp_status k_copy(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    return copy_node(n, 0);
}

/* assign(dst, src) -> dst': src's bytes into dst */
static gdp_status k_assign(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    return copy_node(n, 1);
}

gdp_status gcpu_register_layout(const gdp_host *host, gdp_err *err)
{
    static const int32_t dts[] = {GDP_F32, GDP_F16, GDP_BF16};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        gdp_status s = gcpu_reg(host, "reshape", dts[d], k_copy, NULL, NULL, err);
        if (s == GDP_OK) s = gcpu_reg(host, "copy", dts[d], k_copy, NULL, NULL, err);
        if (s == GDP_OK) s = gcpu_reg(host, "assign", dts[d], k_assign, NULL, NULL, err);
        if (s != GDP_OK) return s;
    }
    return GDP_OK;
}
