/* rope_cache.cu — the decoder's position ops of the attention family (src/ops/attention.c):
 * rope, cache_write, and both together for a decode step (rope_cache_write). Positions (a
 * scalar, or one per batch row) are read on the device, never by the host, so a captured
 * decode step replays with new ones.
 *
 * rope computes each angle's cosine and sine in double with the reference's expressions:
 * for a decode step (at most ROPE_INLINE_T positions) in one launch, a thread per rotated
 * pair; for longer runs once per (position, pair index) into a table every head then reads,
 * since transcendentals in double are too dear to redo per head. cache_write is one launch:
 * x's rows into the cache in place, or (not in place) every element of the output from x or
 * the cache; a row whose position does not fit is reported as bad data and left as it was.
 */
#include "cu_rope.h"
#include "cu_vec.h"

/* ---- rope ------------------------------------------------------------------------------------- */

/* Pair i of the row at x (D elements) rotated by c into the row at y. */
template <typename T>
static __device__ __forceinline__ void rope_rot(const T *x, T *y, int64_t i, int64_t D, int interleaved, double2 c)
{
    const int64_t i0 = rope_j0(i, interleaved), i1 = rope_j1(i, D, interleaved);
    rope_store(cu_ld(x, i0), cu_ld(x, i1), c, y, i0, i1);
}

/* x (B, T, H, D) -> y: pair i of row `row` = (b * T + t) * H + h rotated by c. */
template <typename T>
static __device__ __forceinline__ void rope_pair(const T *x, T *y, int64_t row, int64_t i, int64_t D, int interleaved,
                                                 double2 c)
{
    rope_rot(x + row * D, y + row * D, i, D, interleaved, c);
}

// A decode step (T <= ROPE_INLINE_T): one launch, a thread per pair computing its own angle.
// pos (a scalar, or one per batch row pos_step elements apart) is read on the device.
template <typename T>
__global__ void rope_kernel(const T *x, T *y, const void *pos, int pos64, int64_t pos_step, int64_t pairs, int64_t T_,
                            int64_t H, int64_t D, int interleaved, double theta, double sign)
{
    cu_pdl_wait();
    const int64_t half = D / 2;
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < pairs; p += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = p % half, row = p / half, bt = row / H;
        const int64_t offset = pos != NULL ? cu_ld_index(pos, pos64, (bt / T_) * pos_step) : 0;
        rope_pair(x, y, row, i, D, interleaved, rope_cs(bt % T_, offset, i, D, theta, sign));
    }
}

// Longer runs (prefill, training): the (cos, sin) of each (t, i) computed once into a table
// shared by every head — or of each (b, t, i) when the positions are per row — then read by
// the rotating kernel. Transcendentals in double cost too much to redo for each head.
__global__ void rope_table_kernel(double2 *cs, int64_t rows, int64_t T_, int64_t half, int64_t D, const void *pos,
                                  int pos64, int64_t pos_step, double theta, double sign)
{
    cu_pdl_wait();
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < rows * half; k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t bt = k / half, i = k % half;
        const int64_t offset = pos != NULL ? cu_ld_index(pos, pos64, (bt / T_) * pos_step) : 0;
        cs[k] = rope_cs(bt % T_, offset, i, D, theta, sign);
    }
}

template <typename T>
__global__ void rope_table_apply_kernel(const T *x, T *y, const double2 *cs, int per_row, int64_t pairs, int64_t T_,
                                        int64_t H, int64_t D, int interleaved)
{
    cu_pdl_wait();
    const int64_t half = D / 2;
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < pairs; p += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = p % half, row = p / half, bt = row / H;
        rope_pair(x, y, row, i, D, interleaved, cs[(per_row ? bt : bt % T_) * half + i]);
    }
}

/* As rope_table_apply_kernel, a thread per 16-byte piece of HG rows that share a table row
 * (HG heads of one (b, t)): N / 2 adjacent pairs (IL: interleaved, pair i at 2i, 2i + 1),
 * or N pairs i .. i + N - 1 whose halves are the pieces at i and i + D / 2; the table's
 * N / 2 or N entries for them are adjacent too, and are read once for the HG heads. Rows
 * must be whole pieces (D * size a multiple of 16 for IL, of 32 otherwise), x and y
 * 16-byte aligned. The same products, in the same order, as rope_store. The index type I
 * is 32-bit whenever the pieces fit: a 64-bit division by a runtime value is some eighty
 * instructions, three of them a piece had cost more than the piece's arithmetic. */
template <typename T, int IL, int HG, typename I>
__global__ void rope_table_apply_vec_kernel(const T *x, T *y, const double2 *cs, int per_row, I items, I T_, I H,
                                            I D)
{
    cu_pdl_wait();
    constexpr int N = cu_vec<T>::N, P = IL ? N / 2 : N; /* pairs a piece */
    const I half = D / 2, per = half / P;                 /* pieces a row (IL), or a half-row */
    const I groups = H / HG;
    for (I g = blockIdx.x * (I)blockDim.x + threadIdx.x; g < items; g += (I)gridDim.x * blockDim.x) {
        const I q = g / per, i0 = (g - q * per) * P, bt = q / groups, h0 = (q - bt * groups) * HG;
        const double2 *cp = cs + (int64_t)(per_row ? bt : bt % T_) * half + i0;
        double2 c[P];
#pragma unroll
        for (int k = 0; k < P; k++) c[k] = cp[k];
        const int64_t r0 = ((int64_t)bt * H + h0) * D;
        if (IL) {
            float v[HG][N];
#pragma unroll
            for (int j = 0; j < HG; j++) cu_ld16(x + r0 + (int64_t)j * D, 2 * i0, v[j]);
#pragma unroll
            for (int j = 0; j < HG; j++) {
                double o[N];
#pragma unroll
                for (int k = 0; k < P; k++) {
                    const double x0 = v[j][2 * k], x1 = v[j][2 * k + 1];
                    o[2 * k] = __dsub_rn(__dmul_rn(x0, c[k].x), __dmul_rn(x1, c[k].y));
                    o[2 * k + 1] = __dadd_rn(__dmul_rn(x0, c[k].y), __dmul_rn(x1, c[k].x));
                }
                cu_std16(y + r0 + (int64_t)j * D, 2 * i0, o);
            }
        } else {
            float a[HG][N], b[HG][N];
#pragma unroll
            for (int j = 0; j < HG; j++) {
                cu_ld16(x + r0 + (int64_t)j * D, i0, a[j]);
                cu_ld16(x + r0 + (int64_t)j * D, i0 + half, b[j]);
            }
#pragma unroll
            for (int j = 0; j < HG; j++) {
                double oa[N], ob[N];
#pragma unroll
                for (int k = 0; k < N; k++) {
                    const double x0 = a[j][k], x1 = b[j][k];
                    oa[k] = __dsub_rn(__dmul_rn(x0, c[k].x), __dmul_rn(x1, c[k].y));
                    ob[k] = __dadd_rn(__dmul_rn(x0, c[k].y), __dmul_rn(x1, c[k].x));
                }
                cu_std16(y + r0 + (int64_t)j * D, i0, oa);
                cu_std16(y + r0 + (int64_t)j * D, i0 + half, ob);
            }
        }
    }
}

/* Whether rope_table_apply_vec_kernel takes x and y: whole pieces a row (or half-row). */
static int rope_vec_ok(const gdp_tensor *x, const gdp_tensor *y, int interleaved)
{
    const int64_t D = x->shape[3], es = (int64_t)gdp_dtype_size(x->dtype);
    return cu_aligned16(x->data) && cu_aligned16(y->data) && gdp_is_contiguous(x) && gdp_is_contiguous(y) &&
           (D * es) % (interleaved ? 16 : 32) == 0;
}

template <typename E, int IL, int HG, typename I>
static void rope_vec_launch_i(cu_backend *be, cudaStream_t s, const gdp_tensor *x, const gdp_tensor *y,
                              const double2 *cs, int per_row, int64_t items)
{
    cu_launch(be, rope_table_apply_vec_kernel<E, IL, HG, I>, cu_blocks(be, items, 256), 256, 0, s, (const E *)x->data,
              (E *)y->data, cs, per_row, (I)items, (I)x->shape[1], (I)x->shape[2], (I)x->shape[3]);
}

template <typename E, int HG>
static void rope_vec_launch_hg(cu_backend *be, cudaStream_t s, const gdp_tensor *x, const gdp_tensor *y,
                               const double2 *cs, int per_row, int64_t items, int interleaved)
{
    /* g + the grid's stride must not wrap either */
    const int small = items + (int64_t)cu_blocks(be, items, 256) * 256 < ((int64_t)1 << 32);
    if (interleaved && small) rope_vec_launch_i<E, 1, HG, uint32_t>(be, s, x, y, cs, per_row, items);
    else if (interleaved) rope_vec_launch_i<E, 1, HG, int64_t>(be, s, x, y, cs, per_row, items);
    else if (small) rope_vec_launch_i<E, 0, HG, uint32_t>(be, s, x, y, cs, per_row, items);
    else rope_vec_launch_i<E, 0, HG, int64_t>(be, s, x, y, cs, per_row, items);
}

/* The vector kernel over `pieces` pieces, four heads a thread where the heads go by fours
 * (each table entry is then read once for four rows, not once a row), with 32-bit indices
 * when every index fits. */
template <typename E>
static gdp_status rope_vec_launch(cu_backend *be, cudaStream_t s, const gdp_tensor *x, const gdp_tensor *y,
                                  const double2 *cs, int per_row, int64_t pieces, int interleaved)
{
    if (x->shape[2] % 4 == 0) rope_vec_launch_hg<E, 4>(be, s, x, y, cs, per_row, pieces / 4, interleaved);
    else rope_vec_launch_hg<E, 1>(be, s, x, y, cs, per_row, pieces, interleaved);
    return GDP_OK;
}

#define ROPE_INLINE_T 4

static int rope_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in < 1 || n->n_in > 2 || n->n_out != 1) return 0;
    const gdp_tensor *x = n->in[0];
    if (x->ndim != 4 || (n->n_in == 2 && !index_per_row(n->in[1], x->shape[0]))) return 0;
    return cu_gpu_float(x->dtype) && x->shape[3] % 2 == 0 && n->out[0]->dtype == x->dtype &&
           cu_same_shape(n->out[0], x) && gdp_attr_float(&n->attrs, "theta", 10000.0) > 0;
}

/* The table's rows: T, or B * T with a position per row; none for a decode step. */
static int64_t rope_table_rows(const gdp_node *n)
{
    const gdp_tensor *x = n->in[0];
    if (x->ndim != 4 || x->shape[1] <= ROPE_INLINE_T) return 0;
    int per_row = n->n_in > 1 && index_step(n->in[1]) != 0;
    return per_row ? x->shape[0] * x->shape[1] : x->shape[1];
}

static size_t rope_workspace(void *b, const gdp_node *n)
{
    (void)b;
    return cu_ws_declare((size_t)rope_table_rows(n) * (size_t)(n->in[0]->shape[3] / 2) * sizeof(double2));
}

// x (B, T, H, D) [, pos] -> y
static gdp_status rope_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *y = node->out[0];
    const int64_t T = x->shape[1], H = x->shape[2], D = x->shape[3], half = D / 2, pairs = gdp_numel(x) / 2;
    if (pairs == 0) return GDP_OK;
    const double theta = gdp_attr_float(&node->attrs, "theta", 10000.0);
    const int interleaved = gdp_attr_int(&node->attrs, "interleaved", 1) != 0;
    const double sign = gdp_attr_int(&node->attrs, "inverse", 0) ? -1.0 : 1.0;
    const gdp_tensor *pos = node->n_in > 1 ? node->in[1] : NULL;
    const void *pd = pos != NULL ? pos->data : NULL;
    const int pos64 = pos != NULL && pos->dtype == GDP_I64;
    const int64_t step = pos != NULL ? index_step(pos) : 0;
    const int64_t rows = rope_table_rows(node);
    if (rows == 0) {
        CU_FLOAT_SWITCH(x->dtype, E,
                        cu_launch(be, rope_kernel<E>, cu_blocks(be, pairs, 256), 256, 0, s, (const E *)x->data,
                                  (E *)y->data, pd, pos64, step, pairs, T, H, D, interleaved, theta, sign));
        return GDP_OK;
    }
    char *ws = NULL;
    gdp_status st = cu_ws(node, (size_t)(rows * half) * sizeof(double2), &ws, err);
    if (st != GDP_OK) return st;
    double2 *cs = (double2 *)ws;
    cu_launch(be, rope_table_kernel, cu_blocks(be, rows * half, 256), 256, 0, s, cs, rows, T, half, D, pd, pos64, step,
              theta, sign);
    const int per_row = step != 0;
    if (rope_vec_ok(x, y, interleaved)) {
        const int64_t pieces = gdp_numel(x) * (int64_t)gdp_dtype_size(x->dtype) / 16 / (interleaved ? 1 : 2);
        CU_FLOAT_SWITCH(x->dtype, E, return rope_vec_launch<E>(be, s, x, y, cs, per_row, pieces, interleaved));
        return GDP_OK;
    }
    CU_FLOAT_SWITCH(x->dtype, E,
                    cu_launch(be, rope_table_apply_kernel<E>, cu_blocks(be, pairs, 256), 256, 0, s, (const E *)x->data,
                              (E *)y->data, cs, per_row, pairs, T, H, D, interleaved));
    return GDP_OK;
}
CU_LAUNCHER(rope_run)

/* ---- cache_write ------------------------------------------------------------------------------ */

// cache (outer, S, D) -> y: rows [p, p + T) of each (S, D) slice replaced by x (outer, T, D),
// p the slice's batch row's pos (outer = n0 * inner, batch row o / inner; a scalar pos has
// step 0). A pos that does not fit is reported and its batch row left as it was. With c
// NULL, y is the cache itself (in place) and only x's rows are written; otherwise every
// element of y is written, from x or from the cache c: one pass, one launch.
template <typename E>
__global__ void cache_write_kernel(const E *c, const E *x, E *y, const void *pos, int pos64, int64_t step, int64_t n0,
                                   int64_t outer, int64_t inner, int64_t S, int64_t T, int64_t D, cu_bad bad)
{
    cu_pdl_wait();
    if (blockIdx.x == 0) rope_check_pos(pos, pos64, step, n0, S, T, bad);
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (c == NULL) {
        const int64_t row = T * D, n = outer * row;
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
            const int64_t o = i / row, r = i % row;
            const int64_t p = cu_ld_index(pos, pos64, (o / inner) * step);
            if (p < 0 || p > S - T) continue;
            y[(o * S + p) * D + r] = x[i];
        }
        return;
    }
    const int64_t slice = S * D, n = outer * slice;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t o = i / slice, sd = i % slice, st = sd / D, d = sd % D;
        const int64_t p = cu_ld_index(pos, pos64, (o / inner) * step);
        const bool from_x = p >= 0 && p <= S - T && st >= p && st < p + T;
        y[i] = from_x ? x[(o * T + st - p) * D + d] : c[i];
    }
}

static int cache_write_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 3 || n->n_out != 1) return 0;
    const gdp_tensor *c = n->in[0], *x = n->in[1], *y = n->out[0];
    int nd = c->ndim;
    if (nd < 2 || x->ndim != nd || x->dtype != c->dtype || y->dtype != c->dtype || !cu_same_shape(y, c)) return 0;
    if (gdp_dtype_size(c->dtype) != 2 && gdp_dtype_size(c->dtype) != 4) return 0;
    for (int d = 0; d < nd; d++)
        if (d != nd - 2 && x->shape[d] != c->shape[d]) return 0;
    /* a position per batch row needs a batch dim before the (S, D) of each slice */
    const gdp_tensor *pos = n->in[2];
    if (!(gdp_is_index(pos->dtype) && gdp_numel(pos) == 1) && (nd < 3 || !index_per_row(pos, c->shape[0]))) return 0;
    return x->shape[nd - 2] <= c->shape[nd - 2];
}

// cache (..., S, D), x (..., T, D), pos -> cache'
static gdp_status cache_write_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *c = node->in[0], *x = node->in[1], *pos = node->in[2], *y = node->out[0];
    (void)err;
    const int nd = y->ndim;
    const int64_t S = y->shape[nd - 2], T = x->shape[nd - 2], D = y->shape[nd - 1];
    const int64_t outer = cu_prod(y->shape, 0, nd - 2), step = index_step(pos);
    /* with a position per batch row nd >= 3 (supports): dim 0 is the batch */
    const int64_t n0 = step != 0 ? y->shape[0] : 1, inner = step != 0 ? cu_prod(y->shape, 1, nd - 2) : 1;
    const size_t es = gdp_dtype_size(y->dtype);
    const int in_place = y->data == c->data;
    cu_bad bad = cu_bad_for(be, node, CU_BAD_POS, S, T, NULL);
    const int p64 = pos->dtype == GDP_I64;
    const unsigned g = cu_blocks(be, in_place ? outer * T * D : outer * S * D, 256);
    if (es == 4)
        cu_launch(be, cache_write_kernel<uint32_t>, g, 256, 0, s, in_place ? NULL : (const uint32_t *)c->data,
                  (const uint32_t *)x->data, (uint32_t *)y->data, pos->data, p64, step, n0, outer,
                  inner > 0 ? inner : 1, S, T, D, bad);
    else
        cu_launch(be, cache_write_kernel<uint16_t>, g, 256, 0, s, in_place ? NULL : (const uint16_t *)c->data,
                  (const uint16_t *)x->data, (uint16_t *)y->data, pos->data, p64, step, n0, outer,
                  inner > 0 ? inner : 1, S, T, D, bad);
    return GDP_OK;
}
CU_LAUNCHER(cache_write_run)

/* ---- rope_cache_write ----------------------------------------------------------------------- */

// A decode step's rope(q), rope(k) and the cache writes of rope(k) and v, in one launch: q
// (B, T, H, D) -> qo, k and v (B, T, Hkv, D) into the caches (B, Hkv, S, D) at steps pos + t.
// A thread per pair of a q, k or v head; each computes its angle (T <= ROPE_INLINE_T). A batch
// row whose position does not fit is reported, and its caches are left as they were.
template <typename T>
__global__ void rope_cache_kernel(const T *q, const T *k, const T *v, T *qo, T *kc, T *vc, const void *pos, int pos64,
                                  int64_t step, int64_t B, int64_t T_, int64_t H, int64_t Hkv, int64_t S, int64_t D,
                                  int interleaved, double theta, cu_bad bad)
{
    /* the first pair's frequency before the wait: it reads no memory (cu_rope.h) */
    const int64_t half = D / 2, heads = H + 2 * Hkv, pairs = B * T_ * heads * half;
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    const double first_freq = rope_freq(first % half, D, theta);
    cu_pdl_wait();
    if (blockIdx.x == 0) rope_check_pos(pos, pos64, step, B, S, T_, bad);
    for (int64_t p = first; p < pairs; p += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = p % half, r = p / half, hh = r % heads, bt = r / heads, b = bt / T_, t = bt % T_;
        const int64_t offset = cu_ld_index(pos, pos64, b * step);
        const double f = p == first ? first_freq : rope_freq(i, D, theta);
        if (hh < H) {
            rope_pair(q, qo, bt * H + hh, i, D, interleaved, rope_cs_f(t, offset, f, 1.0));
            continue;
        }
        if (offset < 0 || offset > S - T_) continue;
        const int64_t h = (hh - H) % Hkv, src = (bt * Hkv + h) * D, dst = ((b * Hkv + h) * S + offset + t) * D;
        if (hh < H + Hkv) {
            rope_rot(k + src, kc + dst, i, D, interleaved, rope_cs_f(t, offset, f, 1.0));
        } else {
            const int64_t j0 = rope_j0(i, interleaved), j1 = rope_j1(i, D, interleaved);
            vc[dst + j0] = v[src + j0];
            vc[dst + j1] = v[src + j1];
        }
    }
}

#define ROPE_NORM_PAIRS 4 /* pairs a lane of the norm kernel takes: heads of up to 256 */

// rope_cache_write with the q and k norms (Qwen3's QK-norm): a warp per head row of q, k or
// v. A q or k row's lanes sum its squares in double (each lane its pairs' elements, then the
// butterfly), normalize with the weight, round to T as rms_norm stores, then rotate; a v row
// is copied into its cache. The pair frequencies (no memory read) before the wait; after it,
// the norm weight's elements asked for with the row's (from memory: a step's weights pass
// through L2 between two tokens; read after the sums, their latency followed the row's), and
// the angles computed while those loads are in flight.
template <typename T>
__global__ void rope_cache_norm_kernel(const T *q, const T *k, const T *v, const T *qn, const T *kn, T *qo, T *kc, T *vc,
                                       const void *pos, int pos64, int64_t step, int64_t B, int64_t T_, int64_t H,
                                       int64_t Hkv, int64_t S, int64_t D, int interleaved, double theta, double eps,
                                       cu_bad bad)
{
    const int lane = threadIdx.x & 31;
    const int64_t half = D / 2, heads = H + 2 * Hkv, rows = B * T_ * heads;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    const int64_t hh = row % heads, bt = row / heads, b = bt / T_, t = bt % T_;
    const T *g = hh < H ? qn : kn;
    double f[ROPE_NORM_PAIRS];
#pragma unroll
    for (int u = 0; u < ROPE_NORM_PAIRS; u++) f[u] = rope_freq(lane + 32 * u, D, theta);
    cu_pdl_wait();
    float g0[ROPE_NORM_PAIRS], g1[ROPE_NORM_PAIRS];
#pragma unroll
    for (int u = 0; u < ROPE_NORM_PAIRS; u++) {
        const int64_t i = lane + 32 * u;
        g0[u] = g1[u] = 0.0f;
        if (row < rows && hh < H + Hkv && i < half)
            g0[u] = cu_ld(g, rope_j0(i, interleaved)), g1[u] = cu_ld(g, rope_j1(i, D, interleaved));
    }
    if (blockIdx.x == 0) rope_check_pos(pos, pos64, step, B, S, T_, bad);
    if (row >= rows) return;
    const int64_t h = hh < H ? hh : (hh - H) % Hkv;
    const bool is_v = hh >= H + Hkv;
    /* a q or k row's elements asked for before the position, which they do not depend on:
     * the two latencies pass together */
    const T *x = hh < H ? q + (bt * H + h) * D : k + (bt * Hkv + h) * D;
    double x0[ROPE_NORM_PAIRS], x1[ROPE_NORM_PAIRS];
#pragma unroll
    for (int u = 0; u < ROPE_NORM_PAIRS; u++) {
        const int64_t i = lane + 32 * u;
        x0[u] = x1[u] = 0.0;
        if (is_v || i >= half) continue;
        x0[u] = (double)cu_ld(x, rope_j0(i, interleaved)), x1[u] = (double)cu_ld(x, rope_j1(i, D, interleaved));
    }
    const int64_t offset = cu_ld_index(pos, pos64, b * step);
    const int64_t dst = ((b * Hkv + h) * S + offset + t) * D;
    const bool fits = offset >= 0 && offset <= S - T_;
    if (is_v) { /* v: into its cache */
        if (fits)
            for (int64_t j = lane; j < D; j += 32) vc[dst + j] = v[(bt * Hkv + h) * D + j];
        return;
    }
    double2 cs[ROPE_NORM_PAIRS];
#pragma unroll
    for (int u = 0; u < ROPE_NORM_PAIRS; u++)
        cs[u] = lane + 32 * u < half ? rope_cs_f(t, offset, f[u], 1.0) : make_double2(1.0, 0.0);
    double ss = 0.0;
#pragma unroll
    for (int u = 0; u < ROPE_NORM_PAIRS; u++) {
        ss += x0[u] * x0[u];
        ss += x1[u] * x1[u];
    }
    const double rstd = 1.0 / sqrt(cu_warp_sum_d(ss) / (double)D + eps);
    if (hh >= H && !fits) return;
    T *y = hh < H ? qo + (bt * H + h) * D : kc + dst;
#pragma unroll
    for (int u = 0; u < ROPE_NORM_PAIRS; u++) {
        const int64_t i = lane + 32 * u;
        if (i >= half) continue;
        const int64_t j0 = rope_j0(i, interleaved), j1 = rope_j1(i, D, interleaved);
        T n0, n1; /* the normalized pair as rms_norm stores it */
        cu_std(&n0, 0, x0[u] * rstd * (double)g0[u]);
        cu_std(&n1, 0, x1[u] * rstd * (double)g1[u]);
        rope_store((double)cu_ld(&n0, 0), (double)cu_ld(&n1, 0), cs[u], y, j0, j1);
    }
}

/* q (B, T, H, D), k, v (B, T, Hkv, D), k_cache, v_cache (B, Hkv, S, D), pos [, qn, kn (D)];
 * T a decode step's; with the norms, heads of up to 32 ROPE_NORM_PAIRS pairs. */
static int rope_cache_supports(void *b, const gdp_node *n)
{
    (void)b;
    if ((n->n_in != 6 && n->n_in != 8) || n->n_out != 3) return 0;
    const gdp_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2], *kc = n->in[3], *vc = n->in[4];
    if (q->ndim != 4 || k->ndim != 4 || kc->ndim != 4 || !cu_gpu_float(q->dtype) || q->shape[3] % 2 != 0) return 0;
    const int64_t B = q->shape[0], T = q->shape[1], D = q->shape[3], Hkv = k->shape[2];
    if (T > ROPE_INLINE_T || k->shape[0] != B || k->shape[1] != T || k->shape[3] != D || !cu_same_shape(v, k)) return 0;
    if (kc->shape[0] != B || kc->shape[1] != Hkv || kc->shape[2] < T || kc->shape[3] != D || !cu_same_shape(vc, kc))
        return 0;
    const gdp_tensor *t[7] = {k, v, kc, vc, n->out[0], n->out[1], n->out[2]};
    for (int j = 0; j < 7; j++)
        if (t[j]->dtype != q->dtype) return 0;
    for (int j = 6; j < n->n_in; j++)
        if (n->in[j]->dtype != q->dtype || n->in[j]->ndim != 1 || n->in[j]->shape[0] != D) return 0;
    if (n->n_in == 8 && D / 2 > 32 * ROPE_NORM_PAIRS) return 0;
    return cu_same_shape(n->out[0], q) && cu_same_shape(n->out[1], kc) && cu_same_shape(n->out[2], vc) &&
           index_per_row(n->in[5], B) && gdp_attr_float(&n->attrs, "theta", 10000.0) > 0;
}

static gdp_status rope_cache_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *q = node->in[0], *k = node->in[1], *pos = node->in[5];
    const int64_t B = q->shape[0], T = q->shape[1], H = q->shape[2], D = q->shape[3], Hkv = k->shape[2];
    const int64_t S = node->in[3]->shape[2];
    /* the caches are updated in place; out of place (a sweep's run), they are copied first */
    for (int j = 0; j < 2; j++) {
        const gdp_tensor *c = node->in[3 + j], *y = node->out[1 + j];
        if (y->data != c->data)
            CU_TRY(cudaMemcpyAsync(y->data, c->data, (size_t)gdp_numel(c) * gdp_dtype_size(c->dtype),
                                   cudaMemcpyDeviceToDevice, s));
    }
    const int64_t pairs = B * T * (H + 2 * Hkv) * (D / 2);
    if (pairs == 0) return GDP_OK;
    const double theta = gdp_attr_float(&node->attrs, "theta", 10000.0);
    const int interleaved = gdp_attr_int(&node->attrs, "interleaved", 1) != 0;
    cu_bad bad = cu_bad_for(be, node, CU_BAD_POS, S, T, NULL);
    if (node->n_in == 8) {
        const int64_t rows = B * T * (H + 2 * Hkv);
        const double eps = gdp_attr_float(&node->attrs, "eps", 1e-6);
        CU_FLOAT_SWITCH(q->dtype, E,
                        cu_launch(be, rope_cache_norm_kernel<E>, dim3((unsigned)((rows + 7) / 8)), 256, 0, s,
                                  (const E *)q->data, (const E *)k->data, (const E *)node->in[2]->data,
                                  (const E *)node->in[6]->data, (const E *)node->in[7]->data, (E *)node->out[0]->data,
                                  (E *)node->out[1]->data, (E *)node->out[2]->data, (const void *)pos->data,
                                  (int)(pos->dtype == GDP_I64), index_step(pos), B, T, H, Hkv, S, D, interleaved, theta,
                                  eps, bad));
        return GDP_OK;
    }
    CU_FLOAT_SWITCH(q->dtype, E,
                    cu_launch(be, rope_cache_kernel<E>, cu_blocks(be, pairs, 256), 256, 0, s, (const E *)q->data,
                              (const E *)k->data, (const E *)node->in[2]->data, (E *)node->out[0]->data,
                              (E *)node->out[1]->data, (E *)node->out[2]->data, (const void *)pos->data,
                              (int)(pos->dtype == GDP_I64), index_step(pos), B, T, H, Hkv, S, D, interleaved, theta,
                              bad));
    return GDP_OK;
}
CU_LAUNCHER(rope_cache_run)

static const char *const rope_attrs[] = {"theta", NULL};

#define FLOATS3(op, sup, fn, attrs, ws) \
    CU_KX(op, GDP_F32, 0, sup, fn, attrs, ws), CU_KX(op, GDP_F16, 0, sup, fn, attrs, ws), \
        CU_KX(op, GDP_BF16, 0, sup, fn, attrs, ws)

static const gdp_kernel kernels[] = {
    FLOATS3("rope", rope_supports, rope_run_launch, rope_attrs, rope_workspace),
    FLOATS3("cache_write", cache_write_supports, cache_write_run_launch, NULL, NULL),
    /* i32 too: a decoder's record of the tokens it sampled (the kernel moves 4-byte words) */
    CU_K("cache_write", GDP_I32, cache_write_supports, cache_write_run_launch, NULL),
    FLOATS3("rope_cache_write", rope_cache_supports, rope_cache_run_launch, rope_attrs, NULL),
};
CU_FAMILY(rope_cache, kernels);
