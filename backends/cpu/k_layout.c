/* k_layout.c — ops that move bytes: copy (of any strides) and assign. reshape, permute,
 * slice and expand are views the planner aliases, so they have no kernels; the copy
 * that makes one of them contiguous, when a kernel needs it so, is this file's strided
 * copy. Registered for every dtype they are swept at (a copy does not care what the bytes
 * mean): assign also for i32 and i64, which its cases use.
 *
 * Plain copies are split over threads in fixed-size pieces, with memmove because a host
 * may hand a copy the same buffer twice.
 *
 * Strided copies walk the output in row-major order, reading the input through its
 * strides (permuted by a transpose, 0 along broadcast axes). Dims are merged where the
 * input steps across them as across one dim; then the innermost run is copied with memcpy
 * (stride 1), filled with one element (stride 0), or, for a transpose-like permute, moved
 * in 32 x 32 tiles between the output's inner dim and the dim along which the input is
 * contiguous, so that both sides are read and written a cache line at a time.
 */
#include "kernels.h"

#include <string.h>

/* ---- plain copies -------------------------------------------------------------------------- */

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
    const gdp_tensor *x = n->in[src_index];
    copy_job j = {.src = x->data, .dst = n->out[0]->data, .bytes = (size_t)gdp_numel(x) * gdp_dtype_size(x->dtype)};
    if (j.bytes == 0) return GDP_OK;
    int64_t pieces = ((int64_t)j.bytes + PIECE - 1) / PIECE;
    gcpu_parallel_for_grain(pieces, 16, copy_task, &j); /* a thread per 1 MiB at least */
    return GDP_OK;
}

static gdp_status scopy_strided(const gdp_tensor *x, const gdp_tensor *y);

static gdp_status k_copy(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    if (gdp_is_contiguous(n->in[0])) return copy_node(n, 0);
    return scopy_strided(n->in[0], n->out[0]);
}

/* assign(dst, src) -> dst': src's bytes into dst */
static gdp_status k_assign(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    return copy_node(n, 1);
}

/* ---- strided copies -------------------------------------------------------------------------- */

#define TILE 32

typedef struct scopy {
    const char *src;
    char *dst;
    size_t es;                      /* element size */
    int ndim;                       /* merged output dims, outer to inner */
    int64_t shape[GDP_MAX_DIMS];
    int64_t st[GDP_MAX_DIMS];       /* input stride per output dim, in elements */
    int64_t ost[GDP_MAX_DIMS];      /* output strides */
    int tb;                         /* tiled: the output dim along which the input is contiguous, else -1 */
    int64_t nta, ntb;               /* tiles along the inner dim and along tb */
} scopy;

/* Merges dims of y (shape, input strides st) and chooses the inner loop. */
static void scopy_plan(scopy *c, int nd, const int64_t *shape, const int64_t *st)
{
    int64_t sh[GDP_MAX_DIMS], ms[GDP_MAX_DIMS];
    int m = 0;
    for (int d = nd - 1; d >= 0; d--) { /* inner first */
        if (shape[d] == 1) continue;
        if (m > 0 && st[d] == ms[m - 1] * sh[m - 1]) {
            sh[m - 1] *= shape[d];
            continue;
        }
        sh[m] = shape[d], ms[m] = st[d], m++;
    }
    if (m == 0) sh[0] = 1, ms[0] = 0, m = 1;
    c->ndim = m;
    for (int i = 0; i < m; i++) c->shape[m - 1 - i] = sh[i], c->st[m - 1 - i] = ms[i];
    int64_t s = 1;
    for (int d = m - 1; d >= 0; d--) c->ost[d] = s, s *= c->shape[d];
    c->tb = -1;
    int in = m - 1;
    if (c->st[in] > 1) /* a permute that moves the input's inner dim outwards */
        for (int d = 0; d < in; d++)
            if (c->st[d] == 1) c->tb = d;
    if (c->tb >= 0) {
        c->nta = (c->shape[in] + TILE - 1) / TILE;
        c->ntb = (c->shape[c->tb] + TILE - 1) / TILE;
    }
}

/* element copies of size es: one loop per size, so that each is a plain typed loop */
#define FOR_SIZES(es, BODY)                                              \
    switch (es) {                                                        \
    case 1: { typedef uint8_t T; BODY; break; }                          \
    case 2: { typedef uint16_t T; BODY; break; }                         \
    case 4: { typedef uint32_t T; BODY; break; }                         \
    default: { typedef uint64_t T; BODY; break; }                        \
    }

/* Rows: items are output rows of the inner dim. */
static void rows_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const scopy *c = ctx;
    int in = c->ndim - 1;
    int64_t L = c->shape[in], s = c->st[in], idx[GDP_MAX_DIMS], off = 0, rem = begin;
    for (int d = in - 1; d >= 0; d--) {
        idx[d] = rem % c->shape[d];
        rem /= c->shape[d];
        off += idx[d] * c->st[d];
    }
    for (int64_t r = begin; r < end; r++) {
        char *dst = c->dst + (size_t)(r * L) * c->es;
        const char *src = c->src + (size_t)off * c->es;
        if (s == 1) {
            memcpy(dst, src, (size_t)L * c->es);
        } else {
            FOR_SIZES(c->es, {
                T *y = (T *)dst;
                const T *x = (const T *)src;
                for (int64_t i = 0; i < L; i++) y[i] = x[i * s];
            })
        }
        for (int d = in - 1; d >= 0; d--) { /* next row */
            off += c->st[d];
            if (++idx[d] < c->shape[d]) break;
            off -= c->st[d] * c->shape[d];
            idx[d] = 0;
        }
    }
}

/* Tiles: items are (index over the dims other than the inner one and tb, tile along tb,
 * tile along the inner dim). */
static void tiles_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const scopy *c = ctx;
    int in = c->ndim - 1, tb = c->tb;
    for (int64_t it = begin; it < end; it++) {
        int64_t ta = it % c->nta, r = it / c->nta, tbi = r % c->ntb;
        r /= c->ntb;
        int64_t ioff = 0, ooff = 0;
        for (int d = in - 1; d >= 0; d--) {
            if (d == tb) continue;
            int64_t i = r % c->shape[d];
            r /= c->shape[d];
            ioff += i * c->st[d];
            ooff += i * c->ost[d];
        }
        int64_t a0 = ta * TILE, b0 = tbi * TILE;
        int64_t na = c->shape[in] - a0 < TILE ? c->shape[in] - a0 : TILE;
        int64_t nb = c->shape[tb] - b0 < TILE ? c->shape[tb] - b0 : TILE;
        int64_t sa = c->st[in], ob = c->ost[tb];
        ioff += a0 * sa + b0;
        ooff += b0 * ob + a0;
        FOR_SIZES(c->es, {
            const T *x = (const T *)c->src + ioff;
            T *y = (T *)c->dst + ooff;
            for (int64_t b = 0; b < nb; b++)
                for (int64_t a = 0; a < na; a++) y[b * ob + a] = x[a * sa + b];
        })
    }
}

static void scopy_run(scopy *c)
{
    int in = c->ndim - 1;
    if (c->tb >= 0) {
        int64_t rest = 1;
        for (int d = 0; d < in; d++)
            if (d != c->tb) rest *= c->shape[d];
        gcpu_parallel_for_grain(rest * c->ntb * c->nta, GCPU_GRAIN_ELEMS / (TILE * TILE) + 1, tiles_task, c);
    } else {
        int64_t L = c->shape[in], rows = 1;
        for (int d = 0; d < in; d++) rows *= c->shape[d];
        gcpu_parallel_for_grain(rows, GCPU_GRAIN_ELEMS / (L + 1) + 1, rows_task, c);
    }
}

/* x of any strides into the contiguous y of its shape */
static gdp_status scopy_strided(const gdp_tensor *x, const gdp_tensor *y)
{
    if (gdp_numel(y) == 0) return GDP_OK;
    scopy c = {.src = x->data, .dst = y->data, .es = gdp_dtype_size(x->dtype)};
    scopy_plan(&c, y->ndim, y->shape, x->stride);
    scopy_run(&c);
    return GDP_OK;
}

gdp_status gcpu_register_layout(gcpu_regctx *r, gdp_err *err)
{
    static const int32_t dts[] = {GDP_F32, GDP_F16, GDP_BF16};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        gdp_status s = gcpu_reg_flags(r, "copy", dts[d], GDP_KERNEL_STRIDED, k_copy, NULL, NULL, err);
        if (s == GDP_OK) s = gcpu_reg(r, "assign", dts[d], k_assign, NULL, NULL, err);
        if (s != GDP_OK) return s;
    }
    gdp_status s = gcpu_reg(r, "assign", GDP_I32, k_assign, NULL, NULL, err);
    if (s == GDP_OK) s = gcpu_reg(r, "assign", GDP_I64, k_assign, NULL, NULL, err);
    /* strided ids, targets and masks (and f64 values, which casts read) are made contiguous here too */
    static const int32_t ints[] = {GDP_I32, GDP_I64, GDP_U8, GDP_I8, GDP_BOOL, GDP_F64};
    for (size_t d = 0; d < sizeof ints / sizeof ints[0] && s == GDP_OK; d++)
        s = gcpu_reg_flags(r, "copy", ints[d], GDP_KERNEL_STRIDED, k_copy, NULL, NULL, err);
    return s;
}
