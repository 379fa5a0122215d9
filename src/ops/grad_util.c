/* grad_util.c — shared pieces of gradient rules. */
#include "core.h"

/* Sums `grad` over the axes along which `like` was broadcast to produce it, then gives it
 * like's shape: the adjoint of NumPy broadcasting. */
gd_tensor *gd_sum_to(gd_tensor *grad, const gd_tensor *like)
{
    if (grad == NULL || like == NULL) return NULL;
    if (grad->ndim == like->ndim) {
        int same = 1;
        for (int i = 0; i < like->ndim; i++) same &= grad->shape[i] == like->shape[i];
        if (same) return grad;
    }
    int64_t axes[GDP_MAX_DIMS];
    int n = 0, lead = grad->ndim - like->ndim;
    for (int i = 0; i < grad->ndim; i++) {
        int j = i - lead;
        if (j < 0 || (like->shape[j] == 1 && grad->shape[i] != 1)) axes[n++] = i;
    }
    gd_tensor *s = n > 0 ? gd_sum(grad, n, axes, 1) : grad;
    return gd_reshape(s, like->ndim, like->shape);
}
