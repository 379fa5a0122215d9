/* conv_direct.h — stride-1 convolutions without im2col (AVX-512), for k_conv.c.
 *
 * The three conv ops at stride 1 run here when the build has AVX-512: each sample's input
 * planes are copied once with their zero padding around them, and the micro-kernels read
 * the taps straight from that copy, 16 output positions of one output row per vector
 * (a masked load at the end of a row). Nothing is packed but the weights, so there is no
 * im2col, no col2im and no copy of dy. The packed weights and padded planes live in the
 * node's workspace (gcpu_dconv_workspace says how much):
 *
 *   forward      y (Cog, P) = w (Cog, K) . x: a 12-row tile of output channels times two
 *                vectors of output positions, w broadcast from a packed panel;
 *   grad_input   the forward convolution of dy, padded by dil (k-1) - padding, with the
 *                weights flipped and channels swapped (stride 1 only);
 *   grad_weight  dw (Cog, K) = sum over samples and positions of dy x: dot products along
 *                output rows, a tile of 4 output channels x 6 taps of vector
 *                accumulators, reduced across lanes at the end.
 *
 * Every output element is computed by one instruction sequence that depends on the shape
 * only (which tile or thread it falls in changes nothing), so results do not depend on the
 * thread count. Each entry returns GDP_ERR_UNSUPPORTED, having done nothing, for shapes it
 * does not take: stride > 1, 1x1 without padding, a build without AVX-512, offsets beyond
 * 32 bits, and where it measured slower than im2col (output rows that fill under 70% of
 * their vectors, as 7 or 9 wide ones, unless there are at most 128 taps; grad_input to
 * fewer than 4 channels with more than 128 taps). The caller then uses its im2col path.
 */
#ifndef GCPU_CONV_DIRECT_H
#define GCPU_CONV_DIRECT_H

#include <stddef.h>
#include <stdint.h>

typedef struct gcpu_conv_shape {
    int64_t N, C, H, W;      /* x */
    int64_t Co, Cg, kh, kw;  /* w (Co, C/groups, kh, kw) */
    int64_t Ho, Wo;          /* y */
    int64_t stride, pad, dil, groups;
} gcpu_conv_shape;

typedef enum gcpu_dconv_op { GCPU_DCONV_FORWARD, GCPU_DCONV_GRAD_INPUT, GCPU_DCONV_GRAD_WEIGHT } gcpu_dconv_op;

/* Bytes of workspace the entry for op needs for shape s (packed weights or padded planes,
 * and tap offsets); 0 when it declines the shape. Each entry below takes that much at ws
 * and returns GDP_ERR_INVALID, having done nothing, when given less. */
size_t gcpu_dconv_workspace(gcpu_dconv_op op, const gcpu_conv_shape *s);

/* y (N, Co, Ho, Wo) = conv(x, w) + b (b may be NULL) */
int gcpu_dconv_forward(const gcpu_conv_shape *s, const float *x, const float *w, const float *b, float *y, void *ws,
                       size_t ws_bytes);
/* dx (N, C, H, W) from dy (N, Co, Ho, Wo) and w */
int gcpu_dconv_grad_input(const gcpu_conv_shape *s, const float *dy, const float *w, float *dx, void *ws,
                          size_t ws_bytes);
/* dw (Co, Cg, kh, kw) from dy (N, Co, Ho, Wo) and x */
int gcpu_dconv_grad_weight(const gcpu_conv_shape *s, const float *dy, const float *x, float *dw, void *ws,
                           size_t ws_bytes);

#endif
