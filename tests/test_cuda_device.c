/* test_cuda_device.c — loads the CUDA plugin the way gradus does (dlopen, one symbol) and
 * checks its device module, a few kernels against plain C on the host, the executor (a
 * segment captured into a CUDA graph and replayed), bad data found on the device and
 * reported by synchronize / poll_error, and the profiler's spans on the host clock.
 *
 * Without a GPU (CI) the plugin declines and this test prints SKIP and returns 77.
 * The plugin's path: argv[1], else $GRADUS_CUDA_PLUGIN, else libgradus_cuda.so in
 * $GRADUS_PLUGIN_PATH (ctest sets it), else in the build's plugins/ folder (GD_BUILD_DIR,
 * defined by the top-level CMakeLists.txt), else in plugins/ under the current folder.
 * Uses only gradus_plugin.h: it is the ABI's own test, not gradus's.
 */
#include "gradus_plugin.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SKIP 77

static int failures;
#define CHECK(cond, ...)                                             \
    do {                                                             \
        if (!(cond)) {                                               \
            failures++;                                              \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);     \
            fprintf(stderr, __VA_ARGS__);                            \
            fprintf(stderr, "\n");                                   \
        }                                                            \
    } while (0)

/* ---- a minimal host ------------------------------------------------------------------- */

#define MAX_KERNELS 512
static gdp_kernel kernels[MAX_KERNELS];
static int n_kernels;

/* A kernel's key: (op, dtype), or (op, signature) for a mixed-precision form. */
static int same_key(const gdp_kernel *a, const gdp_kernel *b)
{
    if (strcmp(a->op, b->op) != 0 || (a->signature == NULL) != (b->signature == NULL)) return 0;
    return a->signature != NULL ? strcmp(a->signature, b->signature) == 0 : a->dtype == b->dtype;
}

static gdp_status reg(void *host, const gdp_kernel *k, gdp_err *err)
{
    (void)host;
    for (int i = 0; i < n_kernels; i++)
        if (same_key(&kernels[i], k)) return gdp_fail(err, GDP_ERR_INVALID, "duplicate kernel %s/%d", k->op, (int)k->dtype);
    if (n_kernels == MAX_KERNELS) return gdp_fail(err, GDP_ERR_NOMEM, "too many kernels");
    kernels[n_kernels++] = *k;
    return GDP_OK;
}

static void host_log(void *host, const char *line)
{
    (void)host;
    fprintf(stderr, "[plugin] %s\n", line);
}

static const char *host_getenv(void *host, const char *name)
{
    (void)host;
    return getenv(name);
}

static uint64_t host_now(void *host)
{
    (void)host;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static const gdp_kernel *find_kernel(const char *op, int32_t dt)
{
    for (int i = 0; i < n_kernels; i++)
        if (strcmp(kernels[i].op, op) == 0 && kernels[i].signature == NULL && kernels[i].dtype == dt) return &kernels[i];
    return NULL;
}

/* The kernel of a mixed-precision form, e.g. ("matmul", "bf16,bf16->f32"). */
static const gdp_kernel *find_sig(const char *op, const char *sig)
{
    for (int i = 0; i < n_kernels; i++)
        if (strcmp(kernels[i].op, op) == 0 && kernels[i].signature != NULL && strcmp(kernels[i].signature, sig) == 0)
            return &kernels[i];
    return NULL;
}

/* ---- helpers ----------------------------------------------------------------------------- */

static gdp_plugin P;
static const gdp_device *D;
static gdp_err E;

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) /* in [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void *dev_upload(const void *src, size_t bytes)
{
    void *p = NULL;
    gdp_status s = D->alloc(P.backend, bytes, &p, &E);
    CHECK(s == GDP_OK, "alloc %zu: %s", bytes, E.msg);
    if (s == GDP_OK && src != NULL) CHECK(D->copy_h2d(P.backend, p, src, bytes, NULL, &E) == GDP_OK, "h2d: %s", E.msg);
    return p;
}

static gdp_tensor tensor(void *data, int32_t dt, int ndim, const int64_t *shape)
{
    gdp_tensor t;
    memset(&t, 0, sizeof t);
    t.size = sizeof t, t.data = data, t.dtype = dt, t.ndim = ndim;
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    gdp_set_contiguous(&t);
    return t;
}

/* A node as the host would describe it, with the workspace its kernel declares. */
typedef struct test_node {
    gdp_node n;
    const gdp_tensor *in[GDP_MAX_INPUTS], *out[GDP_MAX_OUTPUTS];
    const gdp_kernel *k;
} test_node;

/* The node for kernel k (or op's kernel of dtype dt when k is NULL). */
static int make_node_k(test_node *t, const gdp_kernel *k, const char *op, int32_t dt, int n_in, const gdp_tensor *in,
                       int n_out, const gdp_tensor *out, int n_attr, const gdp_attr *attrs, int32_t id, const char *label)
{
    memset(t, 0, sizeof *t);
    t->k = k != NULL ? k : find_kernel(op, dt);
    CHECK(t->k != NULL, "no kernel %s/%d", op, (int)dt);
    if (t->k == NULL) return 0;
    for (int i = 0; i < n_in && i < GDP_MAX_INPUTS; i++) t->in[i] = &in[i];
    for (int i = 0; i < n_out && i < GDP_MAX_OUTPUTS; i++) t->out[i] = &out[i];
    gdp_node *n = &t->n;
    n->size = sizeof *n, n->op = op, n->n_in = n_in, n->n_out = n_out, n->in = t->in, n->out = t->out;
    n->attrs.n = n_attr, n->attrs.items = attrs;
    n->id = id, n->label = label;
    int ok = t->k->supports == NULL || t->k->supports(P.backend, n);
    CHECK(ok, "%s/%d: supports() declined", op, (int)dt);
    if (!ok) return 0;
    size_t ws = t->k->workspace != NULL ? t->k->workspace(P.backend, n) : 0;
    if (ws > 0) {
        CHECK(D->alloc(P.backend, ws, &n->workspace, &E) == GDP_OK, "workspace of %zu bytes: %s", ws, E.msg);
        n->workspace_bytes = ws;
    }
    return 1;
}

static int make_node(test_node *t, const char *op, int32_t dt, int n_in, const gdp_tensor *in, int n_out,
                     const gdp_tensor *out, int n_attr, const gdp_attr *attrs, int32_t id, const char *label)
{
    return make_node_k(t, NULL, op, dt, n_in, in, n_out, out, n_attr, attrs, id, label);
}

/* Frees the workspace once the work before it is done (frees are ordered on the NULL stream). */
static void drop_node(test_node *t)
{
    if (t->n.workspace != NULL) D->free(P.backend, t->n.workspace, &E);
    t->n.workspace = NULL;
}

/* Runs a mixed-precision form's kernel; returns 0 if it was not run. */
static int launch_sig(const char *op, const char *sig, int n_in, const gdp_tensor *in, int n_out, const gdp_tensor *out,
                      int n_attr, const gdp_attr *attrs)
{
    const gdp_kernel *k = find_sig(op, sig);
    CHECK(k != NULL, "no kernel %s/%s", op, sig);
    test_node t;
    if (k == NULL || !make_node_k(&t, k, op, -1, n_in, in, n_out, out, n_attr, attrs, 0, sig)) return 0;
    gdp_status s = t.k->launch(P.backend, &t.n, NULL, &E);
    CHECK(s == GDP_OK, "%s/%s: launch: %s", op, sig, E.msg);
    drop_node(&t);
    return s == GDP_OK;
}

/* Runs op through the plugin's kernel; returns 0 if it was not run. */
static int launch_multi(const char *op, int32_t dt, int n_in, const gdp_tensor *in, int n_out, const gdp_tensor *out,
                        int n_attr, const gdp_attr *attrs, int32_t id, const char *label)
{
    test_node t;
    if (!make_node(&t, op, dt, n_in, in, n_out, out, n_attr, attrs, id, label)) return 0;
    gdp_status s = t.k->launch(P.backend, &t.n, NULL, &E);
    CHECK(s == GDP_OK, "%s: launch: %s", op, E.msg);
    drop_node(&t);
    return s == GDP_OK;
}

static int launch(const char *op, int32_t dt, int n_in, const gdp_tensor *in, const gdp_tensor *out, int n_attr,
                  const gdp_attr *attrs)
{
    return launch_multi(op, dt, n_in, in, 1, out, n_attr, attrs, 0, op);
}

static double max_rel_err(const float *got, const double *want, int64_t n)
{
    double num = 0, den = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        num += d * d, den += want[i] * want[i];
    }
    return sqrt(num / den);
}

/* ---- device module -------------------------------------------------------------------------- */

static void test_memory(void)
{
    /* Sizes around the plugin's 4 MiB staging slots, so chunked copies are exercised. */
    const size_t sizes[] = {1, 4096 + 3, ((size_t)4 << 20) + 1, ((size_t)10 << 20) + 7};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        unsigned char *a = malloc(n), *b = malloc(n);
        for (size_t i = 0; i < n; i++) a[i] = (unsigned char)(i * 7 + k);
        void *d1 = dev_upload(a, n), *d2 = dev_upload(NULL, n);
        /* a may be reused at once: scribble over it before reading back */
        memset(a, 0xEE, n);
        CHECK(D->copy_d2d(P.backend, d2, d1, n, NULL, &E) == GDP_OK, "d2d: %s", E.msg);
        CHECK(D->copy_d2h(P.backend, b, d2, n, NULL, &E) == GDP_OK, "d2h: %s", E.msg);
        int same = 1;
        for (size_t i = 0; i < n; i++) same &= b[i] == (unsigned char)(i * 7 + k);
        CHECK(same, "round trip of %zu bytes differs", n);
        CHECK(D->memset_zero(P.backend, d2, n, NULL, &E) == GDP_OK, "memset_zero: %s", E.msg);
        CHECK(D->copy_d2h(P.backend, b, d2, n, NULL, &E) == GDP_OK, "d2h: %s", E.msg);
        int zero = 1;
        for (size_t i = 0; i < n; i++) zero &= b[i] == 0;
        CHECK(zero, "memset_zero of %zu bytes left non-zero bytes", n);
        CHECK(D->free(P.backend, d1, &E) == GDP_OK, "free: %s", E.msg);
        CHECK(D->free(P.backend, d2, &E) == GDP_OK, "free: %s", E.msg);
        free(a);
        free(b);
    }
    size_t fr = 0, tot = 0;
    CHECK(D->memory_info(P.backend, &fr, &tot, &E) == GDP_OK, "memory_info: %s", E.msg);
    CHECK(tot > 0 && fr <= tot, "memory_info: free %zu total %zu", fr, tot);
    printf("memory: %.1f of %.1f GiB free\n", fr / 1073741824.0, tot / 1073741824.0);

    /* A petabyte must fail cleanly, naming the size and the free memory... */
    void *huge = NULL;
    gdp_status s = D->alloc(P.backend, (size_t)1 << 50, &huge, &E);
    CHECK(s == GDP_ERR_NOMEM, "1 PiB alloc returned %d", s);
    CHECK(huge == NULL, "failed alloc left a pointer");
    CHECK(strstr(E.msg, "1125899906842624") != NULL && strstr(E.msg, "free") != NULL, "OOM message: %s", E.msg);
    printf("oom: %s\n", E.msg);
    /* ...and leave the device usable. */
    void *after = dev_upload(NULL, 1024);
    if (after != NULL) CHECK(D->free(P.backend, after, &E) == GDP_OK, "free after OOM: %s", E.msg);
}

static void test_streams_events(void)
{
    void *s1 = NULL, *ev = NULL;
    CHECK(D->stream_create(P.backend, &s1, &E) == GDP_OK && s1 != NULL, "stream_create: %s", E.msg);
    CHECK(D->event_create(P.backend, &ev, &E) == GDP_OK && ev != NULL, "event_create: %s", E.msg);
    /* upload on s1, make the default stream wait for it, read back on the default stream */
    float h[256], g[256];
    for (int i = 0; i < 256; i++) h[i] = (float)i;
    void *d = dev_upload(NULL, sizeof h);
    CHECK(D->copy_h2d(P.backend, d, h, sizeof h, s1, &E) == GDP_OK, "h2d on s1: %s", E.msg);
    CHECK(D->event_record(P.backend, ev, s1, &E) == GDP_OK, "event_record: %s", E.msg);
    CHECK(D->stream_wait_event(P.backend, NULL, ev, &E) == GDP_OK, "stream_wait_event: %s", E.msg);
    CHECK(D->copy_d2h(P.backend, g, d, sizeof g, NULL, &E) == GDP_OK, "d2h: %s", E.msg);
    CHECK(memcmp(h, g, sizeof h) == 0, "data ordered by an event differs");
    CHECK(D->synchronize(P.backend, s1, &E) == GDP_OK, "synchronize: %s", E.msg);
    CHECK(D->free(P.backend, d, &E) == GDP_OK, "free: %s", E.msg);
    CHECK(D->event_destroy(P.backend, ev, &E) == GDP_OK, "event_destroy: %s", E.msg);
    CHECK(D->stream_destroy(P.backend, s1, &E) == GDP_OK, "stream_destroy: %s", E.msg);
}

/* ---- kernels -------------------------------------------------------------------------------------- */

/* a (B?, M, K) @ b (K, N) [transposed as asked], f32, against a double computation. */
static void test_matmul(int64_t batch, int64_t M, int64_t K, int64_t N, int ta, int tb)
{
    int64_t na = batch * M * K, nb = K * N, nc = batch * M * N;
    float *a = malloc(sizeof(float) * na), *b = malloc(sizeof(float) * nb), *c = malloc(sizeof(float) * nc);
    double *want = calloc((size_t)nc, sizeof(double));
    for (int64_t i = 0; i < na; i++) a[i] = frand();
    for (int64_t i = 0; i < nb; i++) b[i] = frand();
    for (int64_t z = 0; z < batch; z++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++) {
                    double av = ta ? a[z * M * K + k * M + i] : a[z * M * K + i * K + k];
                    double bv = tb ? b[j * K + k] : b[k * N + j];
                    acc += av * bv;
                }
                want[(z * M + i) * N + j] = acc;
            }
    int64_t sa[3] = {batch, ta ? K : M, ta ? M : K}, sb[2] = {tb ? N : K, tb ? K : N}, sc[3] = {batch, M, N};
    gdp_tensor in[2] = {tensor(dev_upload(a, sizeof(float) * na), GDP_F32, 3, sa),
                        tensor(dev_upload(b, sizeof(float) * nb), GDP_F32, 2, sb)};
    gdp_tensor out = tensor(dev_upload(NULL, sizeof(float) * nc), GDP_F32, 3, sc);
    gdp_attr at[2] = {{"transpose_a", GDP_ATTR_INT, 0, ta, 0, NULL, NULL}, {"transpose_b", GDP_ATTR_INT, 0, tb, 0, NULL, NULL}};
    if (launch("matmul", GDP_F32, 2, in, &out, 2, at)) {
        CHECK(D->copy_d2h(P.backend, c, out.data, sizeof(float) * nc, NULL, &E) == GDP_OK, "d2h: %s", E.msg);
        double e = max_rel_err(c, want, nc);
        printf("matmul [%lld,%lld,%lld]x[%lld,%lld] ta=%d tb=%d: rel err %.2e\n", (long long)batch, (long long)M,
               (long long)K, (long long)K, (long long)N, ta, tb, e);
        CHECK(e < 1e-6, "matmul error %.3e (TF32 would give ~1e-4)", e);
    }
    D->free(P.backend, in[0].data, &E), D->free(P.backend, in[1].data, &E), D->free(P.backend, out.data, &E);
    free(a), free(b), free(c), free(want);
}

/* softmax over the last axis and sum over axis 0 of the same (R, C) matrix. */
static void test_softmax_sum(int64_t R, int64_t C)
{
    int64_t n = R * C, shape[2] = {R, C}, sshape[1] = {C};
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *s = malloc(sizeof(float) * C);
    double *want = malloc(sizeof(double) * n), *wsum = calloc((size_t)C, sizeof(double));
    for (int64_t i = 0; i < n; i++) x[i] = 4 * frand();
    for (int64_t r = 0; r < R; r++) {
        double m = -INFINITY, t = 0;
        for (int64_t k = 0; k < C; k++) m = fmax(m, x[r * C + k]);
        for (int64_t k = 0; k < C; k++) t += exp(x[r * C + k] - m);
        for (int64_t k = 0; k < C; k++) want[r * C + k] = exp(x[r * C + k] - m) / t, wsum[k] += x[r * C + k];
    }
    gdp_tensor in = tensor(dev_upload(x, sizeof(float) * n), GDP_F32, 2, shape);
    gdp_tensor out = tensor(dev_upload(NULL, sizeof(float) * n), GDP_F32, 2, shape);
    gdp_tensor sum = tensor(dev_upload(NULL, sizeof(float) * C), GDP_F32, 1, sshape);
    gdp_attr axis = {"axis", GDP_ATTR_INT, 0, -1, 0, NULL, NULL};
    int64_t ax0 = 0;
    gdp_attr axes = {"axes", GDP_ATTR_INTS, 1, 0, 0, &ax0, NULL};
    if (launch("softmax", GDP_F32, 1, &in, &out, 1, &axis)) {
        D->copy_d2h(P.backend, y, out.data, sizeof(float) * n, NULL, &E);
        double e = max_rel_err(y, want, n);
        printf("softmax [%lld,%lld]: rel err %.2e\n", (long long)R, (long long)C, e);
        CHECK(e < 1e-6, "softmax error %.3e", e);
    }
    if (launch("sum", GDP_F32, 1, &in, &sum, 1, &axes)) {
        D->copy_d2h(P.backend, s, sum.data, sizeof(float) * C, NULL, &E);
        double e = max_rel_err(s, wsum, C);
        printf("sum over axis 0 of [%lld,%lld]: rel err %.2e\n", (long long)R, (long long)C, e);
        CHECK(e < 1e-6, "sum error %.3e", e);
    }
    /* every axis at once: one output from many elements, the two-pass path */
    gdp_tensor all = tensor(dev_upload(NULL, sizeof(float)), GDP_F32, 0, NULL);
    if (launch("sum", GDP_F32, 1, &in, &all, 0, NULL)) {
        float got = 0;
        double w = 0;
        for (int64_t k = 0; k < C; k++) w += wsum[k];
        D->copy_d2h(P.backend, &got, all.data, sizeof got, NULL, &E);
        double e = max_rel_err(&got, &w, 1);
        printf("sum of all [%lld,%lld]: rel err %.2e\n", (long long)R, (long long)C, e);
        CHECK(e < 1e-6, "sum error %.3e", e);
    }
    D->free(P.backend, all.data, &E);
    D->free(P.backend, in.data, &E), D->free(P.backend, out.data, &E), D->free(P.backend, sum.data, &E);
    free(x), free(y), free(s), free(want), free(wsum);
}

/* layer_norm with weight and bias, then cross_entropy (one target ignored) of its output. */
static void test_norm_ce(int64_t R, int64_t C)
{
    int64_t n = R * C, shape[2] = {R, C}, vshape[1] = {C}, tshape[1] = {R};
    float *x = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * C), *b = malloc(sizeof(float) * C);
    float *y = malloc(sizeof(float) * n), loss = 0;
    int32_t *t = malloc(sizeof(int32_t) * R);
    double *want = malloc(sizeof(double) * n), wloss = 0;
    for (int64_t i = 0; i < n; i++) x[i] = 3 * frand();
    for (int64_t k = 0; k < C; k++) w[k] = frand(), b[k] = frand();
    int kept = 0;
    for (int64_t r = 0; r < R; r++) {
        t[r] = r == 1 ? -100 : (int32_t)((r * 7919) % C);
        double m = 0, v = 0;
        for (int64_t k = 0; k < C; k++) m += x[r * C + k];
        m /= C;
        for (int64_t k = 0; k < C; k++) v += (x[r * C + k] - m) * (x[r * C + k] - m);
        double rstd = 1 / sqrt(v / C + 1e-5);
        for (int64_t k = 0; k < C; k++) want[r * C + k] = (x[r * C + k] - m) * rstd * w[k] + b[k];
        if (t[r] == -100) continue;
        double mx = -INFINITY, s = 0;
        for (int64_t k = 0; k < C; k++) mx = fmax(mx, (float)want[r * C + k]);
        for (int64_t k = 0; k < C; k++) s += exp((float)want[r * C + k] - mx);
        wloss += mx + log(s) - (float)want[r * C + t[r]];
        kept++;
    }
    wloss /= kept;
    gdp_tensor in[3] = {tensor(dev_upload(x, sizeof(float) * n), GDP_F32, 2, shape),
                        tensor(dev_upload(w, sizeof(float) * C), GDP_F32, 1, vshape),
                        tensor(dev_upload(b, sizeof(float) * C), GDP_F32, 1, vshape)};
    gdp_tensor out = tensor(dev_upload(NULL, sizeof(float) * n), GDP_F32, 2, shape);
    gdp_attr eps = {"eps", GDP_ATTR_FLOAT, 0, 0, 1e-5, NULL, NULL};
    if (launch("layer_norm", GDP_F32, 3, in, &out, 1, &eps)) {
        D->copy_d2h(P.backend, y, out.data, sizeof(float) * n, NULL, &E);
        double e = max_rel_err(y, want, n);
        printf("layer_norm [%lld,%lld]: rel err %.2e\n", (long long)R, (long long)C, e);
        CHECK(e < 1e-6, "layer_norm error %.3e", e);
    }
    gdp_tensor ce_in[2] = {out, tensor(dev_upload(t, sizeof(int32_t) * R), GDP_I32, 1, tshape)};
    gdp_tensor ce_out = tensor(dev_upload(NULL, sizeof(float)), GDP_F32, 0, NULL);
    gdp_attr ign = {"ignore_index", GDP_ATTR_INT, 0, -100, 0, NULL, NULL};
    if (launch("cross_entropy", GDP_F32, 2, ce_in, &ce_out, 1, &ign)) {
        D->copy_d2h(P.backend, &loss, ce_out.data, sizeof loss, NULL, &E);
        double e = max_rel_err(&loss, &wloss, 1);
        printf("cross_entropy [%lld,%lld]: %.6f vs %.6f, rel err %.2e\n", (long long)R, (long long)C, loss, wloss, e);
        CHECK(e < 1e-6, "cross_entropy error %.3e", e);
    }
    for (int k = 0; k < 3; k++) D->free(P.backend, in[k].data, &E);
    D->free(P.backend, out.data, &E), D->free(P.backend, ce_in[1].data, &E), D->free(P.backend, ce_out.data, &E);
    free(x), free(w), free(b), free(y), free(t), free(want);
}

static void test_profiler(void)
{
    const gdp_profiler *pr = P.profiler;
    CHECK(pr != NULL && pr->start && pr->stop && pr->collect, "no profiler module");
    if (pr == NULL) return;
    int64_t shape[2] = {64, 300};
    float *x = malloc(sizeof(float) * 64 * 300);
    for (int i = 0; i < 64 * 300; i++) x[i] = frand();
    gdp_tensor in = tensor(dev_upload(x, sizeof(float) * 64 * 300), GDP_F32, 2, shape);
    gdp_tensor out = tensor(dev_upload(NULL, sizeof(float) * 64 * 300), GDP_F32, 2, shape);
    gdp_attr axis = {"axis", GDP_ATTR_INT, 0, -1, 0, NULL, NULL};
    uint64_t t0 = host_now(NULL);
    CHECK(pr->start(P.backend, &E) == GDP_OK, "profiler start: %s", E.msg);
    launch_multi("softmax", GDP_F32, 1, &in, 1, &out, 1, &axis, 42, "prof.softmax");
    test_matmul(2, 64, 32, 48, 0, 0);
    CHECK(pr->stop(P.backend, &E) == GDP_OK, "profiler stop: %s", E.msg);
    gdp_span spans[16];
    int32_t n = 0;
    CHECK(pr->collect(P.backend, spans, 16, &n, &E) == GDP_OK, "collect: %s", E.msg);
    uint64_t t1 = host_now(NULL);
    CHECK(n >= 2, "%d spans collected", n);
    int found = 0;
    for (int i = 0; i < n; i++) {
        printf("span %s (node %d): %llu..%llu ns on the host clock\n", spans[i].name, spans[i].node_id,
               (unsigned long long)spans[i].start_ns, (unsigned long long)spans[i].end_ns);
        CHECK(spans[i].end_ns >= spans[i].start_ns, "span ends before it starts");
        /* the host clock: after the profile started, before collect returned (1 ms slack
         * for the base event's estimate) */
        CHECK(spans[i].start_ns + 1000000 >= t0 && spans[i].end_ns <= t1 + 1000000,
              "span %s at %llu..%llu is not within the host's %llu..%llu", spans[i].name,
              (unsigned long long)spans[i].start_ns, (unsigned long long)spans[i].end_ns, (unsigned long long)t0,
              (unsigned long long)t1);
        if (spans[i].node_id == 42) {
            found = 1;
            CHECK(strcmp(spans[i].name, "prof.softmax") == 0, "span of node 42 is named %s", spans[i].name);
        }
    }
    CHECK(found, "no span carries node id 42");
    D->free(P.backend, in.data, &E), D->free(P.backend, out.data, &E);
    free(x);
    /* the peaks profile summaries compare with: every GPU here does > 1 TFLOP/s in f32 and
     * > 100 GB/s */
    double flops = 0, bw = 0;
    CHECK(GDP_HAS_FIELD(pr, gdp_profiler, peak) && pr->peak != NULL, "no peak()");
    if (pr->peak != NULL) {
        CHECK(pr->peak(P.backend, GDP_F32, &flops, &bw, &E) == GDP_OK, "peak: %s", E.msg);
        printf("peak f32: %.1f TFLOP/s, %.0f GB/s\n", flops / 1e12, bw / 1e9);
        CHECK(flops > 1e12 && flops < 1e15 && bw > 1e11 && bw < 1e14, "f32 peak %g FLOP/s, %g B/s", flops, bw);
    }
}

/* Waits (polling, never blocking in the plugin) until poll_error reports; 0 if it never did. */
static int poll_until_error(void)
{
    for (int i = 0; i < 4000; i++) {
        if (D->poll_error(P.backend, &E) != GDP_OK) return 1;
        struct timespec ts = {0, 500000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* A status GDP_ERR_INVALID whose message holds every one of the strings. */
static void check_bad(gdp_status s, const char *what, const char *const *needles)
{
    CHECK(s == GDP_ERR_INVALID, "%s: status %d (%s), want GDP_ERR_INVALID", what, s, E.msg);
    for (int i = 0; needles[i] != NULL; i++)
        CHECK(strstr(E.msg, needles[i]) != NULL, "%s: message \"%s\" lacks \"%s\"", what, E.msg, needles[i]);
    printf("%s: %s\n", what, E.msg);
}

/* embedding then matmul, captured as one segment and replayed with other ids; bad ids are
 * reported by synchronize and by poll_error, naming the node. */
static void test_executor(void)
{
    const gdp_executor *ex = P.executor;
    CHECK(ex != NULL && ex->prepare && ex->run && ex->release, "no executor module");
    if (ex == NULL) return;
    enum { V = 10, DM = 16, L = 6, NO = 8 };
    float table[V * DM], w[DM * NO], out[L * NO];
    for (int i = 0; i < V * DM; i++) table[i] = frand();
    for (int i = 0; i < DM * NO; i++) w[i] = frand();
    int64_t ts[2] = {V, DM}, is[1] = {L}, es[2] = {L, DM}, ws[2] = {DM, NO}, os[2] = {L, NO};
    gdp_tensor emb_in[2] = {tensor(dev_upload(table, sizeof table), GDP_F32, 2, ts),
                            tensor(dev_upload(NULL, sizeof(int32_t) * L), GDP_I32, 1, is)};
    gdp_tensor e = tensor(dev_upload(NULL, sizeof(float) * L * DM), GDP_F32, 2, es);
    gdp_tensor mm_in[2] = {e, tensor(dev_upload(w, sizeof w), GDP_F32, 2, ws)};
    gdp_tensor y = tensor(dev_upload(NULL, sizeof out), GDP_F32, 2, os);
    test_node n0, n1;
    if (!make_node(&n0, "embedding", GDP_F32, 2, emb_in, 1, &e, 0, NULL, 3, "ex.embed") ||
        !make_node(&n1, "matmul", GDP_F32, 2, mm_in, 1, &y, 0, NULL, 4, "ex.proj"))
        return;
    const gdp_node *nodes[2] = {&n0.n, &n1.n};
    gdp_launch_fn fns[2] = {n0.k->launch, n1.k->launch};
    gdp_segment seg;
    memset(&seg, 0, sizeof seg);
    seg.size = sizeof seg, seg.n_nodes = 2, seg.nodes = nodes, seg.launch = fns, seg.stream = NULL;
    void *h = NULL;
    gdp_status s = ex->prepare(P.backend, &seg, &h, &E);
    const char *graphs = getenv("GRADUS_CUDA_GRAPHS");
    if (graphs != NULL && strcmp(graphs, "0") == 0) {
        CHECK(s == GDP_ERR_UNSUPPORTED && h == NULL, "GRADUS_CUDA_GRAPHS=0: prepare returned %d", s);
        return;
    }
    CHECK(s == GDP_OK && h != NULL, "prepare: %d %s", s, E.msg);
    if (h == NULL) return;
    for (int round = 0; round < 3; round++) {
        int32_t ids[L];
        for (int j = 0; j < L; j++) ids[j] = (int32_t)((j * 3 + round * 7) % V);
        CHECK(D->copy_h2d(P.backend, emb_in[1].data, ids, sizeof ids, NULL, &E) == GDP_OK, "h2d: %s", E.msg);
        CHECK(ex->run(P.backend, h, NULL, &E) == GDP_OK, "run: %s", E.msg);
        CHECK(D->copy_d2h(P.backend, out, y.data, sizeof out, NULL, &E) == GDP_OK, "d2h: %s", E.msg);
        double want[L * NO];
        for (int j = 0; j < L; j++)
            for (int c = 0; c < NO; c++) {
                double acc = 0;
                for (int k = 0; k < DM; k++) acc += (double)table[ids[j] * DM + k] * w[k * NO + c];
                want[j * NO + c] = acc;
            }
        double err = max_rel_err(out, want, L * NO);
        printf("executor replay %d: rel err %.2e\n", round, err);
        CHECK(err < 1e-6, "replay %d of the captured segment: rel err %.3e", round, err);
    }
    /* the profiler times a replayed segment as a whole */
    const gdp_profiler *pr = P.profiler;
    if (pr != NULL && pr->start(P.backend, &E) == GDP_OK) {
        CHECK(ex->run(P.backend, h, NULL, &E) == GDP_OK, "run: %s", E.msg);
        pr->stop(P.backend, &E);
        gdp_span sp[4];
        int32_t n = 0;
        CHECK(pr->collect(P.backend, sp, 4, &n, &E) == GDP_OK, "collect: %s", E.msg);
        CHECK(n == 1 && sp[0].node_id == -1 && strstr(sp[0].name, "graph of 2") != NULL,
              "replay span: %d spans, first %s node %d", n, n > 0 ? sp[0].name : "-", n > 0 ? sp[0].node_id : 0);
    }
    /* an id past the table: found on the device, reported when the host waits */
    int32_t bad[L] = {0, 1, 2, 3, 12, 5};
    D->copy_h2d(P.backend, emb_in[1].data, bad, sizeof bad, NULL, &E);
    CHECK(ex->run(P.backend, h, NULL, &E) == GDP_OK, "run: %s", E.msg);
    check_bad(D->synchronize(P.backend, NULL, &E), "bad id in a replayed graph",
              (const char *[]){"node 3", "ex.embed", "ids[4] = 12", "10 rows", NULL});
    CHECK(D->synchronize(P.backend, NULL, &E) == GDP_OK, "the report was taken, yet: %s", E.msg);
    /* and without waiting: poll_error sees it once the kernel is done */
    bad[1] = -99;
    bad[4] = 4;
    D->copy_h2d(P.backend, emb_in[1].data, bad, sizeof bad, NULL, &E);
    CHECK(ex->run(P.backend, h, NULL, &E) == GDP_OK, "run: %s", E.msg);
    int polled = poll_until_error();
    CHECK(polled, "poll_error never reported the bad id");
    if (polled) check_bad(GDP_ERR_INVALID, "bad id seen by poll_error", (const char *[]){"ex.embed", "ids[1] = -99", NULL});
    CHECK(D->synchronize(P.backend, NULL, &E) == GDP_OK, "after poll: %s", E.msg);
    ex->release(P.backend, h);
    drop_node(&n0);
    drop_node(&n1);
    D->free(P.backend, emb_in[0].data, &E), D->free(P.backend, emb_in[1].data, &E), D->free(P.backend, e.data, &E);
    D->free(P.backend, mm_in[1].data, &E), D->free(P.backend, y.data, &E);
}

/* An optimizer step over many parameters, captured by the executor (which launches like
 * updates together) and launched node by node: the parameters and states must agree bit
 * for bit, over two steps. Forty SGD updates (more than one batch) of sizes from 1 to
 * 70000, one of them updating the same parameter as an earlier one (which must not share
 * its launch); then the same for AdamW with bf16 gradients and a bf16 copy. */
enum { UPD_N = 40, UPD_REPEAT = 5, UPD_AGAIN = 3 };

typedef struct upd_set {
    gdp_tensor t[UPD_N][7];   /* a node's inputs */
    gdp_tensor o[UPD_N][4];   /* its outputs, over its inputs */
    test_node node[UPD_N];
} upd_set;

/* Node UPD_REPEAT updates the parameter of node UPD_AGAIN, so has its size. */
static int64_t upd_size(int j)
{
    if (j == UPD_REPEAT) j = UPD_AGAIN;
    return j == 7 ? 70000 : 1 + (j * 37) % 300;
}

/* The tensors of both sets, filled alike; node UPD_REPEAT updates node UPD_AGAIN's parameter. */
static int upd_build(upd_set *set, int adam, const gdp_tensor *scalars, const gdp_attr *attrs, int n_attr)
{
    int32_t dts[7] = {GDP_F32, adam ? GDP_BF16 : GDP_F32, GDP_F32, GDP_F32, GDP_F32, GDP_F32, GDP_BF16};
    int n_in = adam ? 7 : 4, n_out = adam ? 4 : 2;
    int out_of[4] = {0, 2, adam ? 3 : -1, 6};
    for (int j = 0; j < UPD_N; j++) {
        int64_t n = upd_size(j);
        for (int k = 0; k < n_in; k++) {
            int scalar = adam ? (k == 4 || k == 5) : k == 3;
            if (scalar) {
                set[0].t[j][k] = scalars[adam ? k - 4 : 0];
                set[1].t[j][k] = scalars[adam ? k - 4 : 0];
                continue;
            }
            size_t es = dts[k] == GDP_BF16 ? 2 : 4, bytes = (size_t)n * es;
            unsigned char *h = malloc(bytes);
            for (int64_t i = 0; i < n; i++) {
                float f = k == 3 ? 0.01f + 0.5f * fabsf(frand()) : frand(); // v > 0
                if (es == 4) memcpy(h + i * 4, &f, 4);
                else {
                    uint32_t u;
                    memcpy(&u, &f, 4);
                    uint16_t b = (uint16_t)(u >> 16);
                    memcpy(h + i * 2, &b, 2);
                }
            }
            for (int c = 0; c < 2; c++) {
                if (j == UPD_REPEAT && k != 1) {
                    set[c].t[j][k] = set[c].t[UPD_AGAIN][k];
                    continue;
                }
                set[c].t[j][k] = tensor(dev_upload(h, bytes), dts[k], 1, &n);
            }
            free(h);
        }
        for (int c = 0; c < 2; c++) {
            for (int k = 0; k < n_out; k++) set[c].o[j][k] = set[c].t[j][out_of[k]];
            const gdp_kernel *kk = adam ? find_sig("adamw_update", "f32,bf16,f32,f32,f32,f32,bf16->f32,f32,f32,bf16") : NULL;
            if (!make_node_k(&set[c].node[j], kk, adam ? "adamw_update" : "sgd_update", GDP_F32, n_in, set[c].t[j], n_out,
                             set[c].o[j], n_attr, attrs, 100 + j, "upd"))
                return 0;
        }
    }
    return 1;
}

static void upd_free(upd_set *set, int adam)
{
    int n_in = adam ? 7 : 4;
    for (int c = 0; c < 2; c++)
        for (int j = 0; j < UPD_N; j++)
            for (int k = 0; k < n_in; k++) {
                int scalar = adam ? (k == 4 || k == 5) : k == 3;
                if (scalar || (j == UPD_REPEAT && k != 1)) continue;
                D->free(P.backend, set[c].t[j][k].data, &E);
            }
}

/* A training step's casts of its master weights, captured by the executor (which
 * launches a run of like casts together) and launched node by node: the outputs must
 * agree bit for bit. Forty f32 -> bf16 casts of sizes from 1 to 70000; one to f16 in the
 * middle (another launch), and one that writes over an earlier one's output (which must
 * not share its launch: its value is the one left). */
enum { CAST_N = 40, CAST_F16 = 20, CAST_OVER = 30, CAST_UNDER = 25 };

static int64_t cast_size(int j) { return j == CAST_OVER ? cast_size(CAST_UNDER) : j == 7 ? 70000 : 1 + (j * 37) % 300; }

static void test_batched_casts(void)
{
    const gdp_executor *ex = P.executor;
    const char *graphs = getenv("GRADUS_CUDA_GRAPHS");
    if (ex == NULL || (graphs != NULL && strcmp(graphs, "0") == 0)) return;
    gdp_tensor x[2][CAST_N], y[2][CAST_N];
    test_node node[2][CAST_N];
    for (int j = 0; j < CAST_N; j++) {
        int64_t n = cast_size(j);
        int32_t ydt = j == CAST_F16 ? GDP_F16 : GDP_BF16;
        float *h = malloc(sizeof *h * (size_t)n);
        for (int64_t i = 0; i < n; i++) h[i] = frand() * (i % 3 == 0 ? 3e4f : 1.0f);
        for (int c = 0; c < 2; c++) {
            x[c][j] = tensor(dev_upload(h, sizeof *h * (size_t)n), GDP_F32, 1, &n);
            y[c][j] = j == CAST_OVER ? y[c][CAST_UNDER] : tensor(dev_upload(NULL, 2 * (size_t)n), ydt, 1, &n);
            gdp_attr a = {.name = "dtype", .kind = GDP_ATTR_INT, .i = ydt};
            if (!make_node(&node[c][j], "cast", GDP_F32, 1, &x[c][j], 1, &y[c][j], 1, &a, 200 + j, "cast")) return;
        }
        free(h);
    }
    const gdp_node *nodes[CAST_N];
    gdp_launch_fn fns[CAST_N];
    for (int j = 0; j < CAST_N; j++) nodes[j] = &node[0][j].n, fns[j] = node[0][j].k->launch;
    gdp_segment seg;
    memset(&seg, 0, sizeof seg);
    seg.size = sizeof seg, seg.n_nodes = CAST_N, seg.nodes = nodes, seg.launch = fns;
    void *h = NULL;
    CHECK(ex->prepare(P.backend, &seg, &h, &E) == GDP_OK && h != NULL, "prepare %d casts: %s", CAST_N, E.msg);
    if (h != NULL) {
        CHECK(ex->run(P.backend, h, NULL, &E) == GDP_OK, "replay: %s", E.msg);
        ex->release(P.backend, h);
    }
    for (int j = 0; j < CAST_N; j++)
        CHECK(node[1][j].k->launch(P.backend, &node[1][j].n, NULL, &E) == GDP_OK, "launch: %s", E.msg);
    int differ = 0;
    for (int j = 0; j < CAST_N; j++) {
        size_t bytes = 2 * (size_t)cast_size(j);
        unsigned char *a = malloc(bytes), *b = malloc(bytes);
        D->copy_d2h(P.backend, a, y[0][j].data, bytes, NULL, &E);
        D->copy_d2h(P.backend, b, y[1][j].data, bytes, NULL, &E);
        differ += memcmp(a, b, bytes) != 0;
        free(a), free(b);
    }
    printf("cast: %d casts captured (batched) vs launched one by one: %d outputs differ\n", CAST_N, differ);
    CHECK(differ == 0, "cast: %d outputs differ between the batched replay and single launches", differ);
    for (int c = 0; c < 2; c++)
        for (int j = 0; j < CAST_N; j++) {
            drop_node(&node[c][j]);
            D->free(P.backend, x[c][j].data, &E);
            if (j != CAST_OVER) D->free(P.backend, y[c][j].data, &E);
        }
}

static void test_batched_updates(int adam)
{
    const gdp_executor *ex = P.executor;
    if (ex == NULL) return;
    const char *graphs = getenv("GRADUS_CUDA_GRAPHS");
    if (graphs != NULL && strcmp(graphs, "0") == 0) return; // no capture, nothing batched
    static upd_set set[2];
    memset(set, 0, sizeof set);
    float step = 3, lr = 0.05f;
    int64_t none[1] = {1};
    gdp_tensor sc[2] = {tensor(dev_upload(adam ? &step : &lr, 4), GDP_F32, 0, none),
                        tensor(dev_upload(&lr, 4), GDP_F32, 0, none)};
    gdp_attr sgd_a[3] = {{.name = "momentum", .kind = GDP_ATTR_FLOAT, .f = 0.9},
                         {.name = "weight_decay", .kind = GDP_ATTR_FLOAT, .f = 0.01},
                         {.name = "nesterov", .kind = GDP_ATTR_INT, .i = 1}};
    gdp_attr adam_a[4] = {{.name = "beta1", .kind = GDP_ATTR_FLOAT, .f = 0.9},
                          {.name = "beta2", .kind = GDP_ATTR_FLOAT, .f = 0.95},
                          {.name = "eps", .kind = GDP_ATTR_FLOAT, .f = 1e-8},
                          {.name = "weight_decay", .kind = GDP_ATTR_FLOAT, .f = 0.1}};
    if (!upd_build(set, adam, sc, adam ? adam_a : sgd_a, adam ? 4 : 3)) return;
    const gdp_node *nodes[UPD_N];
    gdp_launch_fn fns[UPD_N];
    for (int j = 0; j < UPD_N; j++) nodes[j] = &set[0].node[j].n, fns[j] = set[0].node[j].k->launch;
    gdp_segment seg;
    memset(&seg, 0, sizeof seg);
    seg.size = sizeof seg, seg.n_nodes = UPD_N, seg.nodes = nodes, seg.launch = fns;
    void *h = NULL;
    gdp_status s = ex->prepare(P.backend, &seg, &h, &E);
    CHECK(s == GDP_OK && h != NULL, "prepare %d updates: %s", UPD_N, E.msg);
    for (int round = 0; round < 2 && h != NULL; round++) {
        CHECK(ex->run(P.backend, h, NULL, &E) == GDP_OK, "replay: %s", E.msg);
        for (int j = 0; j < UPD_N; j++)
            CHECK(set[1].node[j].k->launch(P.backend, &set[1].node[j].n, NULL, &E) == GDP_OK, "launch: %s", E.msg);
    }
    if (h != NULL) ex->release(P.backend, h);
    int n_out = adam ? 4 : 2, differ = 0;
    for (int j = 0; j < UPD_N; j++)
        for (int k = 0; k < n_out; k++) {
            size_t bytes = (size_t)gdp_numel(&set[0].o[j][k]) * (set[0].o[j][k].dtype == GDP_BF16 ? 2 : 4);
            unsigned char *a = malloc(bytes), *b = malloc(bytes);
            D->copy_d2h(P.backend, a, set[0].o[j][k].data, bytes, NULL, &E);
            D->copy_d2h(P.backend, b, set[1].o[j][k].data, bytes, NULL, &E);
            if (memcmp(a, b, bytes) != 0) differ++;
            free(a), free(b);
        }
    printf("%s: %d updates captured (batched) vs launched one by one: %d of %d outputs differ\n",
           adam ? "adamw_update" : "sgd_update", UPD_N, differ, UPD_N * n_out);
    CHECK(differ == 0, "%s: %d outputs differ between the batched replay and single launches", adam ? "adamw" : "sgd",
          differ);
    for (int c = 0; c < 2; c++)
        for (int j = 0; j < UPD_N; j++) drop_node(&set[c].node[j]);
    upd_free(set, adam);
    D->free(P.backend, sc[0].data, &E), D->free(P.backend, sc[1].data, &E);
}

/* cross_entropy targets, cache_write positions, attention lengths: good values computed
 * right, bad ones reported by synchronize with the node's id, label and the value. */
static void test_bad_data(void)
{
    /* cross_entropy: a target past the classes */
    float logits[4 * 5];
    for (int i = 0; i < 20; i++) logits[i] = frand();
    int64_t targets[4] = {1, 7, -100, 2}, ls[2] = {4, 5}, tsh[1] = {4};
    gdp_tensor ce_in[2] = {tensor(dev_upload(logits, sizeof logits), GDP_F32, 2, ls),
                           tensor(dev_upload(targets, sizeof targets), GDP_I64, 1, tsh)};
    gdp_tensor loss = tensor(dev_upload(NULL, sizeof(float)), GDP_F32, 0, NULL);
    gdp_attr ign = {"ignore_index", GDP_ATTR_INT, 0, -100, 0, NULL, NULL};
    if (launch_multi("cross_entropy", GDP_F32, 2, ce_in, 1, &loss, 1, &ign, 11, "head.loss"))
        check_bad(D->synchronize(P.backend, NULL, &E), "bad target",
                  (const char *[]){"node 11", "head.loss", "cross_entropy", "targets[1] = 7", "[0, 5)", NULL});

    /* cache_write: rows [3, 5) of a 6-step cache, then a pos that does not fit */
    enum { S = 6, T = 2, DH = 4 };
    float cache[2 * S * DH], x[2 * T * DH], got[2 * S * DH];
    for (int i = 0; i < 2 * S * DH; i++) cache[i] = (float)i;
    for (int i = 0; i < 2 * T * DH; i++) x[i] = -1.0f - (float)i;
    int64_t cs[4] = {1, 2, S, DH}, xs[4] = {1, 2, T, DH};
    int32_t pos = 3;
    gdp_tensor cw_in[3] = {tensor(dev_upload(cache, sizeof cache), GDP_F32, 4, cs),
                           tensor(dev_upload(x, sizeof x), GDP_F32, 4, xs),
                           tensor(dev_upload(&pos, sizeof pos), GDP_I32, 0, NULL)};
    if (launch_multi("cache_write", GDP_F32, 3, cw_in, 1, &cw_in[0], 0, NULL, 12, "kv.write")) {
        CHECK(D->copy_d2h(P.backend, got, cw_in[0].data, sizeof got, NULL, &E) == GDP_OK, "d2h: %s", E.msg);
        int same = 1;
        for (int h = 0; h < 2; h++)
            for (int t = 0; t < S; t++)
                for (int d = 0; d < DH; d++) {
                    float want = t >= pos && t < pos + T ? x[(h * T + t - pos) * DH + d] : cache[(h * S + t) * DH + d];
                    same &= got[(h * S + t) * DH + d] == want;
                }
        CHECK(same, "cache_write at pos 3 wrote the wrong rows");
    }
    pos = 5;
    D->copy_h2d(P.backend, cw_in[2].data, &pos, sizeof pos, NULL, &E);
    if (launch_multi("cache_write", GDP_F32, 3, cw_in, 1, &cw_in[0], 0, NULL, 12, "kv.write"))
        check_bad(D->synchronize(P.backend, NULL, &E), "bad pos",
                  (const char *[]){"node 12", "kv.write", "pos = 5", "[5, 7)", "6", NULL});

    /* attention with kv_len = 2 of S = 3 keys, causal: query t sees keys s <= t + 2 - 2 */
    enum { TQ = 2, SK = 3, HD = 4 };
    float q[TQ * HD], k[SK * HD], v[SK * HD], y[TQ * HD];
    for (int i = 0; i < TQ * HD; i++) q[i] = frand();
    for (int i = 0; i < SK * HD; i++) k[i] = frand(), v[i] = frand();
    int64_t qs[4] = {1, 1, TQ, HD}, kvs[4] = {1, 1, SK, HD};
    int32_t kv_len = 2;
    gdp_tensor at_in[4] = {tensor(dev_upload(q, sizeof q), GDP_F32, 4, qs), tensor(dev_upload(k, sizeof k), GDP_F32, 4, kvs),
                           tensor(dev_upload(v, sizeof v), GDP_F32, 4, kvs),
                           tensor(dev_upload(&kv_len, sizeof kv_len), GDP_I32, 0, NULL)};
    gdp_tensor at_out = tensor(dev_upload(NULL, sizeof y), GDP_F32, 4, qs);
    gdp_attr causal = {"causal", GDP_ATTR_INT, 0, 1, 0, NULL, NULL};
    if (launch_multi("attention", GDP_F32, 4, at_in, 1, &at_out, 1, &causal, 13, "attn")) {
        CHECK(D->copy_d2h(P.backend, y, at_out.data, sizeof y, NULL, &E) == GDP_OK, "d2h: %s", E.msg);
        double want[TQ * HD];
        for (int t = 0; t < TQ; t++) {
            int n = t + 1; /* keys 0..t */
            double sc[SK], m = -INFINITY, sum = 0;
            for (int s2 = 0; s2 < n; s2++) {
                double d = 0;
                for (int i = 0; i < HD; i++) d += (double)q[t * HD + i] * k[s2 * HD + i];
                sc[s2] = d / sqrt((double)HD);
                m = fmax(m, sc[s2]);
            }
            for (int s2 = 0; s2 < n; s2++) sum += exp(sc[s2] - m);
            for (int i = 0; i < HD; i++) {
                double acc = 0;
                for (int s2 = 0; s2 < n; s2++) acc += exp(sc[s2] - m) / sum * v[s2 * HD + i];
                want[t * HD + i] = acc;
            }
        }
        double err = max_rel_err(y, want, TQ * HD);
        printf("attention with kv_len 2 of 3 keys: rel err %.2e\n", err);
        CHECK(err < 1e-5, "attention with kv_len: rel err %.3e", err);
    }
    kv_len = 4;
    D->copy_h2d(P.backend, at_in[3].data, &kv_len, sizeof kv_len, NULL, &E);
    if (launch_multi("attention", GDP_F32, 4, at_in, 1, &at_out, 1, &causal, 13, "attn"))
        check_bad(D->synchronize(P.backend, NULL, &E), "bad kv_len",
                  (const char *[]){"node 13", "'attn'", "kv_len = 4", "[0, 3]", NULL});

    /* index_select: a negative index */
    int64_t idx[3] = {0, -1, 2}, ish[1] = {3}, xsh[2] = {3, 4}, ysh[2] = {3, 4};
    float xm[12];
    for (int i = 0; i < 12; i++) xm[i] = (float)i;
    gdp_tensor is_in[2] = {tensor(dev_upload(xm, sizeof xm), GDP_F32, 2, xsh), tensor(dev_upload(idx, sizeof idx), GDP_I64, 1, ish)};
    gdp_tensor is_out = tensor(dev_upload(NULL, sizeof xm), GDP_F32, 2, ysh);
    gdp_attr ax = {"axis", GDP_ATTR_INT, 0, 0, 0, NULL, NULL};
    if (launch_multi("index_select", GDP_F32, 2, is_in, 1, &is_out, 1, &ax, 14, "pick"))
        check_bad(D->synchronize(P.backend, NULL, &E), "bad index",
                  (const char *[]){"node 14", "pick", "idx[1] = -1", "size 3", NULL});
    CHECK(D->poll_error(P.backend, &E) == GDP_OK, "nothing left to report: %s", E.msg);

    for (int i = 0; i < 2; i++) D->free(P.backend, ce_in[i].data, &E);
    for (int i = 0; i < 3; i++) D->free(P.backend, cw_in[i].data, &E);
    for (int i = 0; i < 4; i++) D->free(P.backend, at_in[i].data, &E);
    for (int i = 0; i < 2; i++) D->free(P.backend, is_in[i].data, &E);
    D->free(P.backend, loss.data, &E), D->free(P.backend, at_out.data, &E), D->free(P.backend, is_out.data, &E);
}

/* ---- mixed precision ----------------------------------------------------------------------- */

/* n values rounded to bf16 (half = 0) or f16 (half = 1): the bits, and their values as float. */
static uint16_t *narrow(int64_t n, int half, float scale, float *wide)
{
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        float f = scale * frand();
        h[i] = half ? gdp_f32_to_f16(f) : gdp_f32_to_bf16(f);
        wide[i] = half ? gdp_f16_to_f32(h[i]) : gdp_bf16_to_f32(h[i]);
    }
    return h;
}

/* matmul of bf16 / f16 operands into f32, sum and mean of them into f32, AdamW keeping an
 * f32 master beside a low-precision copy: against double sums of the same rounded values. */
static void test_mixed(void)
{
    for (int half = 0; half < 2; half++) {
        const int64_t M = 33, K = 70, N = 17;
        int32_t hd = half ? GDP_F16 : GDP_BF16;
        float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N), *c = malloc(sizeof(float) * M * N);
        double *want = calloc((size_t)(M * N), sizeof(double));
        uint16_t *ah = narrow(M * K, half, 1.0f, a), *bh = narrow(K * N, half, 1.0f, b);
        /* f16: b given as (N, K) with transpose_b, so the flag is honoured on this path too */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                for (int64_t k = 0; k < K; k++)
                    want[i * N + j] += (double)a[i * K + k] * (half ? b[j * K + k] : b[k * N + j]);
        int64_t sa[2] = {M, K}, sb[2] = {half ? N : K, half ? K : N}, sc[2] = {M, N};
        gdp_tensor in[2] = {tensor(dev_upload(ah, sizeof(uint16_t) * M * K), hd, 2, sa),
                            tensor(dev_upload(bh, sizeof(uint16_t) * K * N), hd, 2, sb)};
        gdp_tensor out = tensor(dev_upload(NULL, sizeof(float) * M * N), GDP_F32, 2, sc);
        gdp_attr tb = {"transpose_b", GDP_ATTR_INT, 0, half, 0, NULL, NULL};
        const char *sig = half ? "f16,f16->f32" : "bf16,bf16->f32";
        if (launch_sig("matmul", sig, 2, in, 1, &out, 1, &tb)) {
            D->copy_d2h(P.backend, c, out.data, sizeof(float) * M * N, NULL, &E);
            double e = max_rel_err(c, want, M * N);
            printf("matmul %s: rel err %.2e\n", sig, e);
            CHECK(e < 2e-6, "matmul %s: rel err %.3e", sig, e);
        }
        D->free(P.backend, in[0].data, &E), D->free(P.backend, in[1].data, &E), D->free(P.backend, out.data, &E);
        free(a), free(b), free(c), free(want), free(ah), free(bh);

        /* sum over axis 1 (rows), mean over everything (the two-pass path) */
        const int64_t R = 37, C = 3000;
        float *x = malloc(sizeof(float) * R * C), s[37], m = 0;
        uint16_t *xh = narrow(R * C, half, 2.0f, x);
        double ws[37], wm = 0;
        for (int64_t r = 0; r < R; r++) {
            ws[r] = 0;
            for (int64_t k = 0; k < C; k++) ws[r] += x[r * C + k];
            wm += ws[r];
        }
        wm /= (double)(R * C);
        int64_t xs[2] = {R, C}, rs[1] = {R};
        gdp_tensor xin = tensor(dev_upload(xh, sizeof(uint16_t) * R * C), hd, 2, xs);
        gdp_tensor ys = tensor(dev_upload(NULL, sizeof(float) * R), GDP_F32, 1, rs);
        gdp_tensor ym = tensor(dev_upload(NULL, sizeof(float)), GDP_F32, 0, NULL);
        int64_t ax1 = 1;
        gdp_attr axes = {"axes", GDP_ATTR_INTS, 1, 0, 0, &ax1, NULL};
        const char *rsig = half ? "f16->f32" : "bf16->f32";
        if (launch_sig("sum", rsig, 1, &xin, 1, &ys, 1, &axes)) {
            D->copy_d2h(P.backend, s, ys.data, sizeof s, NULL, &E);
            double e = max_rel_err(s, ws, R);
            printf("sum %s over rows: rel err %.2e\n", rsig, e);
            CHECK(e < 1e-7, "sum %s: rel err %.3e", rsig, e);
        }
        if (launch_sig("mean", rsig, 1, &xin, 1, &ym, 0, NULL)) {
            D->copy_d2h(P.backend, &m, ym.data, sizeof m, NULL, &E);
            double e = max_rel_err(&m, &wm, 1);
            printf("mean %s of all: %.8g vs %.8g, rel err %.2e\n", rsig, m, wm, e);
            CHECK(e < 1e-7, "mean %s: rel err %.3e", rsig, e);
        }
        D->free(P.backend, xin.data, &E), D->free(P.backend, ys.data, &E), D->free(P.backend, ym.data, &E);
        free(x), free(xh);

        /* AdamW: f32 master p, m, v; the gradient in the narrow type (or f32), a narrow copy */
        for (int gnarrow = 0; gnarrow < 2; gnarrow++) {
            enum { NP = 1000 };
            float p[NP], g[NP], mo[NP], v[NP], step = 3.0f, lr = 0.01f, po[NP], mout[NP], vout[NP];
            uint16_t *gh = narrow(NP, half, 0.5f, g), copy[NP];
            for (int i = 0; i < NP; i++) p[i] = frand(), mo[i] = 0.1f * frand(), v[i] = 0.01f * (1.0f + frand());
            int64_t ps[1] = {NP};
            gdp_tensor ain[7] = {tensor(dev_upload(p, sizeof p), GDP_F32, 1, ps),
                                 gnarrow ? tensor(dev_upload(gh, sizeof(uint16_t) * NP), hd, 1, ps)
                                         : tensor(dev_upload(g, sizeof g), GDP_F32, 1, ps),
                                 tensor(dev_upload(mo, sizeof mo), GDP_F32, 1, ps),
                                 tensor(dev_upload(v, sizeof v), GDP_F32, 1, ps),
                                 tensor(dev_upload(&step, sizeof step), GDP_F32, 0, NULL),
                                 tensor(dev_upload(&lr, sizeof lr), GDP_F32, 0, NULL),
                                 tensor(dev_upload(NULL, sizeof(uint16_t) * NP), hd, 1, ps)};
            gdp_tensor aout[4] = {tensor(dev_upload(NULL, sizeof p), GDP_F32, 1, ps),
                                  tensor(dev_upload(NULL, sizeof p), GDP_F32, 1, ps),
                                  tensor(dev_upload(NULL, sizeof p), GDP_F32, 1, ps), ain[6]};
            gdp_attr wd = {"weight_decay", GDP_ATTR_FLOAT, 0, 0, 0.01, NULL, NULL};
            char asig[64];
            const char *nm = half ? "f16" : "bf16";
            snprintf(asig, sizeof asig, "f32,%s,f32,f32,f32,f32,%s->f32,f32,f32,%s", gnarrow ? nm : "f32", nm, nm);
            if (launch_sig("adamw_update", asig, 7, ain, 4, aout, 1, &wd)) {
                D->copy_d2h(P.backend, po, aout[0].data, sizeof po, NULL, &E);
                D->copy_d2h(P.backend, mout, aout[1].data, sizeof mout, NULL, &E);
                D->copy_d2h(P.backend, vout, aout[2].data, sizeof vout, NULL, &E);
                D->copy_d2h(P.backend, copy, aout[3].data, sizeof copy, NULL, &E);
                double wp[NP], wmo[NP], wv[NP];
                double bc1 = 1 - pow(0.9, 3.0), bc2 = 1 - pow(0.999, 3.0);
                int copies_ok = 1;
                for (int i = 0; i < NP; i++) {
                    double pp = p[i], gg = g[i], mm = mo[i], vv = v[i];
                    pp -= (double)lr * 0.01 * pp;
                    mm = 0.9 * mm + 0.1 * gg;
                    vv = 0.999 * vv + 0.001 * gg * gg;
                    pp -= (double)lr * (mm / bc1) / (sqrt(vv / bc2) + 1e-8);
                    wp[i] = pp, wmo[i] = mm, wv[i] = vv;
                    uint16_t want_c = half ? gdp_f32_to_f16(po[i]) : gdp_f32_to_bf16(po[i]);
                    copies_ok &= copy[i] == want_c;
                }
                double e = max_rel_err(po, wp, NP), em = max_rel_err(mout, wmo, NP), ev = max_rel_err(vout, wv, NP);
                printf("adamw_update %s: rel err p %.2e m %.2e v %.2e, copy %s\n", asig, e, em, ev,
                       copies_ok ? "= p' rounded" : "WRONG");
                CHECK(e < 1e-7 && em < 1e-7 && ev < 1e-7, "adamw %s: rel err %.3e %.3e %.3e", asig, e, em, ev);
                CHECK(copies_ok, "adamw %s: the copy is not p' rounded to %s", asig, nm);
            }
            for (int i = 0; i < 7; i++) D->free(P.backend, ain[i].data, &E);
            for (int i = 0; i < 3; i++) D->free(P.backend, aout[i].data, &E);
            free(gh);
        }
    }
}

/* ---- main ---------------------------------------------------------------------------------------------- */

#ifndef GD_BUILD_DIR
#define GD_BUILD_DIR "."
#endif

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : getenv("GRADUS_CUDA_PLUGIN");
    const char *dir = getenv("GRADUS_PLUGIN_PATH");
    char buf[1024];
    if (path == NULL && dir != NULL && dir[0] != '\0' && strchr(dir, ':') == NULL) {
        snprintf(buf, sizeof buf, "%s/libgradus_cuda.so", dir);
        path = buf;
    }
    if (path == NULL) {
        snprintf(buf, sizeof buf, "%s/plugins/libgradus_cuda.so", GD_BUILD_DIR);
        path = buf;
    }
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        printf("SKIP: no CUDA device (plugin not loadable: %s)\n", dlerror());
        return SKIP;
    }
    gdp_init_fn init;
    *(void **)&init = dlsym(dl, GDP_INIT_SYMBOL);
    if (init == NULL) {
        fprintf(stderr, "FAIL: %s does not export %s\n", path, GDP_INIT_SYMBOL);
        return 1;
    }
    gdp_host host;
    memset(&host, 0, sizeof host);
    host.size = sizeof host, host.abi_major = GDP_ABI_MAJOR, host.abi_minor = GDP_ABI_MINOR;
    host.register_kernel = reg, host.log = host_log, host.getenv = host_getenv, host.now_ns = host_now;
    memset(&P, 0, sizeof P);
    P.size = sizeof P;
    memset(&E, 0, sizeof E);
    E.size = sizeof E;

    /* A host of another major version is refused before anything else happens. */
    gdp_host wrong = host;
    wrong.abi_major = GDP_ABI_MAJOR + 1;
    gdp_plugin scratch;
    memset(&scratch, 0, sizeof scratch);
    scratch.size = sizeof scratch;
    CHECK(init(&wrong, &scratch, &E) == GDP_ERR_VERSION, "wrong ABI major accepted");
    CHECK(scratch.abi_major == GDP_ABI_MAJOR, "plugin did not report its ABI");

    gdp_status s = init(&host, &P, &E);
    if (s == GDP_ERR_NODEVICE) {
        printf("SKIP: no CUDA device (%s)\n", E.msg);
        return failures ? 1 : SKIP;
    }
    CHECK(s == GDP_OK, "init: %d %s", s, E.msg);
    if (s != GDP_OK) return 1;
    D = P.device;
    CHECK(D != NULL && D->alloc && D->free && D->copy_h2d && D->copy_d2h, "device module incomplete");
    if (D == NULL) return 1;
    printf("device: %s (host_visible %d)\n", D->name, D->host_visible);
    CHECK(P.register_kernels != NULL && P.register_kernels(P.backend, &host, &E) == GDP_OK, "register_kernels: %s",
          E.msg);
    printf("kernels registered: %d\n", n_kernels);

    test_memory();
    test_streams_events();
    test_matmul(1, 17, 33, 9, 0, 0);
    test_matmul(1, 64, 128, 96, 1, 0);
    test_matmul(3, 40, 24, 56, 0, 1);
    test_matmul(2, 33, 65, 17, 1, 1);
    test_softmax_sum(37, 1000);
    test_softmax_sum(3, 70000);
    test_norm_ce(50, 300);
    test_profiler();
    test_executor();
    test_batched_updates(0);
    test_batched_updates(1);
    test_batched_casts();
    test_bad_data();
    test_mixed();

    CHECK(D->synchronize(P.backend, NULL, &E) == GDP_OK, "final synchronize: %s", E.msg);
    if (P.shutdown) P.shutdown(P.backend);
    dlclose(dl);
    printf("%s\n", failures ? "FAILED" : "OK");
    return failures ? 1 : 0;
}
