/* conv_direct.c — see conv_direct.h. */
#include "conv_direct.h"
#include "kernels.h"

#include <stdatomic.h>
#include <string.h>

#if defined(__AVX512F__) && !defined(GCPU_FORCE_GENERIC)
#include <immintrin.h>

#define DMR 12  /* forward: output channels per tile (24 accumulators) */
#define DWM 4   /* grad_weight: output channels per tile */
#define DWN 6   /* grad_weight: taps per tile (4 x 6 = 24 accumulators) */
#define SEG 16  /* output positions per vector */

#define ALWAYS_INLINE static inline __attribute__((always_inline))

static inline __mmask16 lanes(int64_t n)
{
    return n >= SEG ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* planes of H x W at src into planes of (H + 2 ph) x (W + 2 pw) at dst, zeros around */
static void pad_planes(const float *src, int64_t planes, int64_t H, int64_t W, int64_t ph, int64_t pw, float *dst)
{
    int64_t Wp = W + 2 * pw;
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *s = src + pl * H * W;
        float *d = dst + pl * (H + 2 * ph) * Wp;
        memset(d, 0, sizeof(float) * (size_t)(ph * Wp + pw));
        d += ph * Wp + pw;
        for (int64_t h = 0; h < H; h++, d += Wp, s += W) {
            memcpy(d, s, sizeof(float) * (size_t)W);
            if (h + 1 < H) memset(d + W, 0, sizeof(float) * (size_t)(2 * pw));
        }
        memset(d - 2 * pw, 0, sizeof(float) * (size_t)(ph * Wp + pw)); /* last right pad, bottom rows */
    }
}

/* ---- forward-shaped convolutions (conv2d, and conv2d_grad_input as one) ------------------ */

/* One stride-1 convolution of padded input planes: out (M, Ho, Wo) = A (M, K) . taps, where
 * tap k of output position q reads in + koff[k] + q's offset in the padded plane. */
typedef struct fwd_plan {
    int64_t N, groups;
    int64_t Cin, H, W, ph, pw, Hp, Wp; /* input planes per group and their padding */
    int64_t M, K, Ho, Wo;              /* output channels per group, taps, output plane */
    int64_t in_sample, out_sample;     /* floats per sample of input and output (all groups) */
    const float *in;
    float *out;
    const float *bias;                 /* (groups * M) or NULL */
    const float *apk;                  /* per group: M x K, in panels (see PACK_ROWS) */
    const int32_t *koff;
    int64_t npan;                      /* row panels: panel p is rows [M p / npan, M (p+1) / npan) */
    int64_t nseg_row, ntile;           /* vectors per output row; tiles (2 vectors) per plane */
    int64_t split;                     /* work items per (sample, group) */
    atomic_int nomem;
} fwd_plan;

/* 2 vectors of output positions x mr output channels; a is the panel, mr values per tap. */
ALWAYS_INLINE void fwd_tile(const int mr, int64_t K, const float *restrict a, const int32_t *restrict koff,
                            const float *p0, __mmask16 m0, const float *p1, __mmask16 m1, float *y0, float *y1,
                            int64_t ldy, const float *bias)
{
    __m512 c0[DMR], c1[DMR];
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) c0[i] = c1[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        __m512 b0 = _mm512_maskz_loadu_ps(m0, p0 + koff[k]);
        __m512 b1 = _mm512_maskz_loadu_ps(m1, p1 + koff[k]);
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            __m512 ai = _mm512_set1_ps(a[i]);
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
        }
        a += mr;
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        if (bias != NULL) {
            __m512 bi = _mm512_set1_ps(bias[i]);
            c0[i] = _mm512_add_ps(c0[i], bi);
            c1[i] = _mm512_add_ps(c1[i], bi);
        }
        _mm512_mask_storeu_ps(y0 + i * ldy, m0, c0[i]);
        _mm512_mask_storeu_ps(y1 + i * ldy, m1, c1[i]);
    }
}

typedef void (*fwd_tile_fn)(int64_t, const float *, const int32_t *, const float *, __mmask16, const float *,
                            __mmask16, float *, float *, int64_t, const float *);
#define FWD_TILE(R)                                                                                          \
    static void fwd_tile_##R(int64_t K, const float *a, const int32_t *koff, const float *p0, __mmask16 m0,  \
                             const float *p1, __mmask16 m1, float *y0, float *y1, int64_t ldy, const float *b) \
    {                                                                                                        \
        fwd_tile(R, K, a, koff, p0, m0, p1, m1, y0, y1, ldy, b);                                             \
    }
FWD_TILE(1) FWD_TILE(2) FWD_TILE(3) FWD_TILE(4) FWD_TILE(5) FWD_TILE(6)
FWD_TILE(7) FWD_TILE(8) FWD_TILE(9) FWD_TILE(10) FWD_TILE(11) FWD_TILE(12)
#undef FWD_TILE
static const fwd_tile_fn fwd_tiles[DMR + 1] = {NULL, fwd_tile_1, fwd_tile_2, fwd_tile_3, fwd_tile_4,
                                               fwd_tile_5, fwd_tile_6, fwd_tile_7, fwd_tile_8, fwd_tile_9,
                                               fwd_tile_10, fwd_tile_11, fwd_tile_12};

/* Vector v of an output plane: row v / nseg_row, columns from (v % nseg_row) * SEG. */
static void seg_at(const fwd_plan *p, int64_t v, int64_t *in_off, int64_t *out_off, __mmask16 *m)
{
    if (v >= p->Ho * p->nseg_row) { /* past the last: an empty vector at a valid address */
        *in_off = *out_off = 0;
        *m = 0;
        return;
    }
    int64_t oh = v / p->nseg_row, ow = (v % p->nseg_row) * SEG;
    *in_off = oh * p->Wp + ow;
    *out_off = oh * p->Wo + ow;
    *m = lanes(p->Wo - ow);
}

static void fwd_items(void *ctx, int64_t begin, int64_t end, int tid)
{
    fwd_plan *p = ctx;
    int64_t plane = p->Cin * p->Hp * p->Wp;
    int padded = p->ph > 0 || p->pw > 0;
    float *xp = padded ? gcpu_scratch(tid, GCPU_SLOT_KERNEL, sizeof(float) * (size_t)plane) : NULL;
    if (padded && xp == NULL) {
        atomic_store(&p->nomem, 1);
        return;
    }
    for (int64_t it = begin; it < end; it++) {
        int64_t sg = it / p->split, part = it % p->split;
        int64_t n = sg / p->groups, gr = sg % p->groups;
        const float *src = p->in + n * p->in_sample + gr * p->Cin * p->H * p->W;
        if (padded) pad_planes(src, p->Cin, p->H, p->W, p->ph, p->pw, xp);
        const float *x = padded ? xp : src;
        float *y = p->out + n * p->out_sample + gr * p->M * p->Ho * p->Wo;
        int64_t t0 = p->ntile * part / p->split, t1 = p->ntile * (part + 1) / p->split;
        /* tiles outer: the input a tile reads (every channel near its rows) is fetched
         * once and stays in L1/L2 for all panels; the packed weights stay in L2 */
        for (int64_t t = t0; t < t1; t++) {
            int64_t i0, i1, o0, o1;
            __mmask16 m0, m1;
            seg_at(p, 2 * t, &i0, &o0, &m0);
            seg_at(p, 2 * t + 1, &i1, &o1, &m1);
            for (int64_t pn = 0; pn < p->npan; pn++) {
                int64_t r0 = p->M * pn / p->npan, r1 = p->M * (pn + 1) / p->npan;
                const float *a = p->apk + gr * p->M * p->K + r0 * p->K;
                const float *bias = p->bias != NULL ? p->bias + gr * p->M + r0 : NULL;
                fwd_tiles[r1 - r0](p->K, a, p->koff, x + i0, m0, x + i1, m1, y + r0 * p->Ho * p->Wo + o0,
                                   y + r0 * p->Ho * p->Wo + o1, p->Ho * p->Wo, bias);
            }
        }
    }
}

/* Bytes of the shared buffers of one call: float_count floats (packed weights or padded
 * planes), then int_count tap offsets. */
static size_t call_bytes(size_t float_count, size_t int_count)
{
    return ((sizeof(float) * float_count + 63) & ~(size_t)63) + sizeof(int32_t) * int_count + 64;
}

/* Those buffers in the caller's workspace; NULL when it is too small. */
static void *call_buffers(void *ws, size_t ws_bytes, size_t float_count, size_t int_count, int32_t **ints)
{
    if (ws == NULL || ws_bytes < call_bytes(float_count, int_count)) return NULL;
    *ints = (int32_t *)(void *)((char *)ws + ((sizeof(float) * float_count + 63) & ~(size_t)63));
    return ws;
}

static void plan_offsets(int32_t *koff, int64_t Cin, int64_t Hp, int64_t Wp, int64_t kh, int64_t kw, int64_t dil)
{
    for (int64_t c = 0, k = 0; c < Cin; c++)
        for (int64_t i = 0; i < kh; i++)
            for (int64_t j = 0; j < kw; j++) koff[k++] = (int32_t)(c * Hp * Wp + i * dil * Wp + j * dil);
}

static int fwd_run(fwd_plan *p)
{
    p->nseg_row = (p->Wo + SEG - 1) / SEG;
    p->ntile = (p->Ho * p->nseg_row + 1) / 2;
    p->npan = (p->M + DMR - 1) / DMR;
    int64_t items = p->N * p->groups, T = gcpu_pool_threads();
    p->split = items >= T || p->ntile <= 1 ? 1 : (T + items - 1) / items;
    if (p->split > p->ntile) p->split = p->ntile;
    atomic_init(&p->nomem, 0);
    gcpu_parallel_for(items * p->split, fwd_items, p);
    return atomic_load(&p->nomem) ? GDP_ERR_NOMEM : GDP_OK;
}

/* Rows of a (M, K) matrix into the panels fwd_items reads: panel [r0, r1) stored from
 * r0 * K, tap by tap, r1 - r0 values each. get(i, k) is element (i, k). */
#define PACK_ROWS(dst, M, K, npan, GET)                                                  \
    for (int64_t pn_ = 0; pn_ < (npan); pn_++) {                                         \
        int64_t r0_ = (M) * pn_ / (npan), r1_ = (M) * (pn_ + 1) / (npan);                \
        float *d_ = (dst) + r0_ * (K);                                                   \
        for (int64_t k = 0; k < (K); k++)                                                \
            for (int64_t i = r0_; i < r1_; i++) *d_++ = (GET);                           \
    }

static int shape_ok(const gcpu_conv_shape *s)
{
    if (s->stride != 1 || gcpu_in_parallel()) return 0;
    if (s->kh == 1 && s->kw == 1 && s->pad == 0) return 0; /* a plain GEMM: k_conv.c's direct path */
    if (s->N <= 0 || s->Co <= 0 || s->Cg <= 0 || s->Ho <= 0 || s->Wo <= 0) return 0;
    return 1;
}

/* Whether output rows `width` wide, with K taps per output, are worth this path: the
 * vectors cover a row with masked lanes at its end, so narrow rows (7, 9, 10 of 16 lanes)
 * waste more than im2col and the packed GEMM cost, except where K is small and the GEMM's
 * packing dominates. Measured (bench: stride-1 3x3 convolutions, 1 and 2 threads): 14,
 * 28, 56 and 224 wide rows win 1.1-2.5x; 7, 8 and 9 wide ones with 256 channels lose by
 * 1.3-1.4x. */
static int worth(int64_t width, int64_t K)
{
    int64_t vectors = (width + SEG - 1) / SEG;
    return 10 * width >= 7 * SEG * vectors || K <= 128;
}

static int fwd_takes(const gcpu_conv_shape *s)
{
    return shape_ok(s) && worth(s->Wo, s->Cg * s->kh * s->kw);
}

/* fewer than 4 input channels: tiles of so few rows are bound by their loads, which
 * matters where there are many taps (3 channels, 576 taps: 1.6x slower than im2col) */
static int dx_takes(const gcpu_conv_shape *s)
{
    int64_t taps = s->Co / s->groups * s->kh * s->kw;
    return shape_ok(s) && worth(s->W, taps) && !(s->Cg < 4 && taps > 128) && s->dil * (s->kh - 1) - s->pad >= 0 &&
           s->dil * (s->kw - 1) - s->pad >= 0;
}

static int dw_takes(const gcpu_conv_shape *s)
{
    return shape_ok(s) && worth(s->Wo, s->Cg * s->kh * s->kw);
}

size_t gcpu_dconv_workspace(gcpu_dconv_op op, const gcpu_conv_shape *s)
{
    int64_t khw = s->kh * s->kw;
    switch (op) {
    case GCPU_DCONV_FORWARD:
        return fwd_takes(s) ? call_bytes((size_t)(s->Co * s->Cg * khw), (size_t)(s->Cg * khw)) : 0;
    case GCPU_DCONV_GRAD_INPUT:
        return dx_takes(s) ? call_bytes((size_t)(s->Co * s->Cg * khw), (size_t)(s->Co / s->groups * khw)) : 0;
    default: {
        if (!dw_takes(s)) return 0;
        int64_t plane = s->Cg * (s->H + 2 * s->pad) * (s->W + 2 * s->pad);
        return call_bytes(s->pad > 0 ? (size_t)(s->groups * s->N * plane) : 0, (size_t)(s->Cg * khw));
    }
    }
}

int gcpu_dconv_forward(const gcpu_conv_shape *s, const float *x, const float *w, const float *b, float *y, void *ws,
                       size_t ws_bytes)
{
    if (!fwd_takes(s)) return GDP_ERR_UNSUPPORTED;
    fwd_plan p = {.N = s->N, .groups = s->groups, .Cin = s->Cg, .H = s->H, .W = s->W, .ph = s->pad,
                  .pw = s->pad, .M = s->Co / s->groups, .Ho = s->Ho, .Wo = s->Wo, .in = x, .out = y, .bias = b};
    p.Hp = s->H + 2 * s->pad;
    p.Wp = s->W + 2 * s->pad;
    p.K = s->Cg * s->kh * s->kw;
    p.in_sample = s->C * s->H * s->W;
    p.out_sample = s->Co * s->Ho * s->Wo;
    if (p.Cin * p.Hp * p.Wp >= INT32_MAX) return GDP_ERR_UNSUPPORTED;
    int32_t *koff;
    float *apk = call_buffers(ws, ws_bytes, (size_t)(s->Co * p.K), (size_t)p.K, &koff);
    if (apk == NULL) return GDP_ERR_INVALID;
    int64_t npan = (p.M + DMR - 1) / DMR, K = p.K;
    for (int64_t gr = 0; gr < s->groups; gr++) {
        const float *wg = w + gr * p.M * K;
        PACK_ROWS(apk + gr * p.M * K, p.M, K, npan, wg[i * K + k])
    }
    plan_offsets(koff, p.Cin, p.Hp, p.Wp, s->kh, s->kw, s->dil);
    p.apk = apk;
    p.koff = koff;
    return fwd_run(&p);
}

/* dx = the stride-1 convolution of dy padded by dil (k - 1) - padding with
 * w'[c][o][i][j] = w[o][c][kh-1-i][kw-1-j]: dx[c][h][w] sums w[o][c][i][j] dy[o][h+pad-i dil]
 * [w+pad-j dil], which is that convolution's output at (h, w). */
int gcpu_dconv_grad_input(const gcpu_conv_shape *s, const float *dy, const float *w, float *dx, void *ws,
                          size_t ws_bytes)
{
    if (!dx_takes(s)) return GDP_ERR_UNSUPPORTED;
    int64_t ph = s->dil * (s->kh - 1) - s->pad, pw = s->dil * (s->kw - 1) - s->pad;
    int64_t Cog = s->Co / s->groups;
    fwd_plan p = {.N = s->N, .groups = s->groups, .Cin = Cog, .H = s->Ho, .W = s->Wo, .ph = ph, .pw = pw,
                  .M = s->Cg, .Ho = s->H, .Wo = s->W, .in = dy, .out = dx, .bias = NULL};
    p.Hp = s->Ho + 2 * ph;
    p.Wp = s->Wo + 2 * pw;
    p.K = Cog * s->kh * s->kw;
    p.in_sample = s->Co * s->Ho * s->Wo;
    p.out_sample = s->C * s->H * s->W;
    if (p.Cin * p.Hp * p.Wp >= INT32_MAX || p.Hp - s->dil * (s->kh - 1) != s->H || p.Wp - s->dil * (s->kw - 1) != s->W)
        return GDP_ERR_UNSUPPORTED;
    int32_t *koff;
    float *apk = call_buffers(ws, ws_bytes, (size_t)(s->groups * p.M * p.K), (size_t)p.K, &koff);
    if (apk == NULL) return GDP_ERR_INVALID;
    int64_t npan = (p.M + DMR - 1) / DMR, K = p.K, khw = s->kh * s->kw, kh = s->kh, kw = s->kw;
    for (int64_t gr = 0; gr < s->groups; gr++) {
        const float *wg = w + gr * Cog * s->Cg * khw; /* (Cog, Cg, kh, kw) */
        /* row i = input channel c, tap k = (o, ti, tj) */
        PACK_ROWS(apk + gr * p.M * K, p.M, K, npan,
                  wg[((k / khw) * s->Cg + i) * khw + (kh - 1 - (k % khw) / kw) * kw + (kw - 1 - (k % khw) % kw)])
    }
    plan_offsets(koff, p.Cin, p.Hp, p.Wp, s->kh, s->kw, s->dil);
    p.apk = apk;
    p.koff = koff;
    return fwd_run(&p);
}

/* ---- conv2d_grad_weight --------------------------------------------------------------------- */

typedef struct dw_plan {
    const gcpu_conv_shape *s;
    const float *dy, *x;
    float *dw;
    int64_t Cog, K, Hp, Wp;
    int64_t mt, nt, tiles_g;        /* tiles per group: mt (of DWM channels) x nt (of DWN taps) */
    const float *xin;               /* input planes read by the taps: padded copy or x itself */
    int64_t xs_group, xs_sample;    /* their strides in floats, per group and per sample */
    float *xpad;                    /* the padded copy: group, sample, (Cg, Hp, Wp) */
    const int32_t *koff;
    int64_t rows, block;            /* output rows of all samples (N Ho), rows per block */
} dw_plan;

/* dw (row stride K) for output channels o0 .. o0+mt and taps k0 .. k0+nt of group gr: the
 * products of dy and the taps over output rows [r0, r1) of all samples (row r is row
 * r % Ho of sample r / Ho), summed in vector accumulators (lane l takes columns l, l+16, ...
 * of the rows, in order), then across lanes in the fixed order of the reduction's
 * instructions; stored for the first block of rows, added for the others. */
ALWAYS_INLINE void dw_tile(const int mt, const int nt, const dw_plan *p, int64_t gr, int64_t o0, int64_t k0,
                           int64_t r0, int64_t r1)
{
    const gcpu_conv_shape *s = p->s;
    const int64_t P = s->Ho * s->Wo, Wo = s->Wo, Wp = p->Wp;
    const int32_t *koff = p->koff + k0;
    __m512 c[DWM][DWN];
#pragma GCC unroll 4
    for (int i = 0; i < mt; i++)
#pragma GCC unroll 6
        for (int j = 0; j < nt; j++) c[i][j] = _mm512_setzero_ps();
    /* columns outer, rows inner: the mask is fixed along the inner loop, and the pointers
     * step by a row */
    for (int64_t ow = 0; ow < Wo; ow += SEG) {
        const __mmask16 m = lanes(Wo - ow);
        for (int64_t n = r0 / s->Ho; n * s->Ho < r1; n++) {
            int64_t ha = n * s->Ho < r0 ? r0 - n * s->Ho : 0, hb = (n + 1) * s->Ho > r1 ? r1 - n * s->Ho : s->Ho;
            const float *ar = p->dy + (n * s->Co + gr * p->Cog + o0) * P + ha * Wo + ow;
            const float *br = p->xin + gr * p->xs_group + n * p->xs_sample + ha * Wp + ow;
            for (int64_t oh = ha; oh < hb; oh++, ar += Wo, br += Wp) {
                __m512 a[DWM];
#pragma GCC unroll 4
                for (int i = 0; i < mt; i++) a[i] = _mm512_maskz_loadu_ps(m, ar + i * P);
                /* one tap vector at a time: 24 accumulators + 4 + 1 fit the 32 registers */
#pragma GCC unroll 6
                for (int j = 0; j < nt; j++) {
                    __m512 b = _mm512_maskz_loadu_ps(m, br + koff[j]);
#pragma GCC unroll 4
                    for (int i = 0; i < mt; i++) c[i][j] = _mm512_fmadd_ps(a[i], b, c[i][j]);
                }
            }
        }
    }
    float *d = p->dw + (gr * p->Cog + o0) * p->K + k0;
    /* (unrolled like the loops above, so that c stays in registers) */
#pragma GCC unroll 4
    for (int i = 0; i < mt; i++)
#pragma GCC unroll 6
        for (int j = 0; j < nt; j++) {
            float v = _mm512_reduce_add_ps(c[i][j]);
            d[i * p->K + j] = r0 == 0 ? v : d[i * p->K + j] + v;
        }
}

typedef void (*dw_tile_fn)(const dw_plan *, int64_t, int64_t, int64_t, int64_t, int64_t);
#define DW_TILE(I, J)                                                                                    \
    static void dw_tile_##I##_##J(const dw_plan *p, int64_t gr, int64_t o0, int64_t k0, int64_t r0, int64_t r1) \
    {                                                                                                    \
        dw_tile(I, J, p, gr, o0, k0, r0, r1);                                                            \
    }
#define DW_ROW(I) DW_TILE(I, 1) DW_TILE(I, 2) DW_TILE(I, 3) DW_TILE(I, 4) DW_TILE(I, 5) DW_TILE(I, 6)
DW_ROW(1) DW_ROW(2) DW_ROW(3) DW_ROW(4)
#undef DW_ROW
#undef DW_TILE
#define DW_ROW(I) {NULL, dw_tile_##I##_1, dw_tile_##I##_2, dw_tile_##I##_3, dw_tile_##I##_4, dw_tile_##I##_5, dw_tile_##I##_6}
static const dw_tile_fn dw_tiles[DWM + 1][DWN + 1] = {{NULL}, DW_ROW(1), DW_ROW(2), DW_ROW(3), DW_ROW(4)};
#undef DW_ROW

/* Padded copies of (sample, group) items [begin, end), item = gr * N + n. */
static void dw_pad(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const dw_plan *p = ctx;
    const gcpu_conv_shape *s = p->s;
    for (int64_t it = begin; it < end; it++) {
        int64_t gr = it / s->N, n = it % s->N;
        pad_planes(p->x + (n * s->C + gr * s->Cg) * s->H * s->W, s->Cg, s->H, s->W, s->pad, s->pad,
                   p->xpad + it * s->Cg * p->Hp * p->Wp);
    }
}

/* Tiles [begin, end): tile t is group t / tiles_g, then channel block, then tap block, so
 * that neighbouring tiles share the rows of dy they read. Blocks of output rows outer: the
 * rows a block's tiles read stay in L2 while they go by. */
static void dw_items(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const dw_plan *p = ctx;
    for (int64_t r0 = 0; r0 < p->rows; r0 += p->block) {
        int64_t r1 = r0 + p->block < p->rows ? r0 + p->block : p->rows;
        for (int64_t u = begin; u < end; u++) {
            int64_t gr = u / p->tiles_g, r = u % p->tiles_g, o0 = r / p->nt * DWM, k0 = r % p->nt * DWN;
            int64_t mt = p->Cog - o0 < DWM ? p->Cog - o0 : DWM, nt = p->K - k0 < DWN ? p->K - k0 : DWN;
            dw_tiles[mt][nt](p, gr, o0, k0, r0, r1);
        }
    }
}

int gcpu_dconv_grad_weight(const gcpu_conv_shape *s, const float *dy, const float *x, float *dw, void *ws,
                           size_t ws_bytes)
{
    if (!dw_takes(s)) return GDP_ERR_UNSUPPORTED;
    dw_plan p = {.s = s, .dy = dy, .x = x, .dw = dw};
    p.Cog = s->Co / s->groups;
    p.K = s->Cg * s->kh * s->kw;
    p.Hp = s->H + 2 * s->pad;
    p.Wp = s->W + 2 * s->pad;
    int64_t plane = s->Cg * p.Hp * p.Wp;
    if (plane >= INT32_MAX) return GDP_ERR_UNSUPPORTED;
    p.mt = (p.Cog + DWM - 1) / DWM;
    p.nt = (p.K + DWN - 1) / DWN;
    p.tiles_g = p.mt * p.nt;
    /* rows per block: what one tile reads of them (4 rows of dy, taps in about 2 input
     * channels) about 128 KB; the shape decides, not the threads */
    p.rows = s->N * s->Ho;
    p.block = (int64_t)(128 * 1024 / sizeof(float)) / (DWM * s->Wo + 2 * p.Wp);
    if (p.block < 1) p.block = 1;
    int32_t *koff;
    /* every sample padded once, before the tiles (each of which runs over all samples) */
    size_t padded = s->pad > 0 ? (size_t)(s->groups * s->N * plane) : 0;
    p.xpad = call_buffers(ws, ws_bytes, padded, (size_t)p.K, &koff);
    if (p.xpad == NULL) return GDP_ERR_INVALID;
    plan_offsets(koff, s->Cg, p.Hp, p.Wp, s->kh, s->kw, s->dil);
    p.koff = koff;
    if (s->pad > 0) {
        p.xin = p.xpad;
        p.xs_group = s->N * plane;
        p.xs_sample = plane;
        gcpu_parallel_for_grain(s->groups * s->N, GCPU_GRAIN_ELEMS / plane + 1, dw_pad, &p);
    } else {
        p.xin = x;
        p.xs_group = plane;
        p.xs_sample = s->C * s->H * s->W;
    }
    gcpu_parallel_for(s->groups * p.tiles_g, dw_items, &p);
    return GDP_OK;
}

#else /* no AVX-512: k_conv.c's im2col path does everything */

size_t gcpu_dconv_workspace(gcpu_dconv_op op, const gcpu_conv_shape *s)
{
    (void)op; (void)s;
    return 0;
}

int gcpu_dconv_forward(const gcpu_conv_shape *s, const float *x, const float *w, const float *b, float *y, void *ws,
                       size_t ws_bytes)
{
    (void)s; (void)x; (void)w; (void)b; (void)y; (void)ws; (void)ws_bytes;
    return GDP_ERR_UNSUPPORTED;
}

int gcpu_dconv_grad_input(const gcpu_conv_shape *s, const float *dy, const float *w, float *dx, void *ws,
                          size_t ws_bytes)
{
    (void)s; (void)dy; (void)w; (void)dx; (void)ws; (void)ws_bytes;
    return GDP_ERR_UNSUPPORTED;
}

int gcpu_dconv_grad_weight(const gcpu_conv_shape *s, const float *dy, const float *x, float *dw, void *ws,
                           size_t ws_bytes)
{
    (void)s; (void)dy; (void)x; (void)dw; (void)ws; (void)ws_bytes;
    return GDP_ERR_UNSUPPORTED;
}

#endif
