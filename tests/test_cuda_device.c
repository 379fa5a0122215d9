/* test_cuda_device.c — loads the CUDA plugin the way gradus does (dlopen, one symbol) and
 * checks its device module and a few kernels against plain C on the host.
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

static gdp_status reg(void *host, const gdp_kernel *k, gdp_err *err)
{
    (void)host;
    for (int i = 0; i < n_kernels; i++)
        if (strcmp(kernels[i].op, k->op) == 0 && kernels[i].dtype == k->dtype)
            return gdp_fail(err, GDP_ERR_INVALID, "duplicate kernel %s/%d", k->op, (int)k->dtype);
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

static const gdp_kernel *find_kernel(const char *op, int32_t dt)
{
    for (int i = 0; i < n_kernels; i++)
        if (strcmp(kernels[i].op, op) == 0 && kernels[i].dtype == dt) return &kernels[i];
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

/* Runs op through the plugin's kernel; returns 0 if it was not run. */
static int launch(const char *op, int32_t dt, int n_in, const gdp_tensor *in, const gdp_tensor *out, int n_attr,
                  const gdp_attr *attrs)
{
    const gdp_kernel *k = find_kernel(op, dt);
    CHECK(k != NULL, "no kernel %s/%d", op, (int)dt);
    if (k == NULL) return 0;
    const gdp_tensor *inp[GDP_MAX_INPUTS], *outp[1] = {out};
    for (int i = 0; i < n_in && i < GDP_MAX_INPUTS; i++) inp[i] = &in[i];
    gdp_node n;
    memset(&n, 0, sizeof n);
    n.size = sizeof n, n.op = op, n.n_in = n_in, n.n_out = 1, n.in = inp, n.out = outp;
    n.attrs.n = n_attr, n.attrs.items = attrs;
    int ok = k->supports == NULL || k->supports(P.backend, &n);
    CHECK(ok, "%s/%d: supports() declined", op, (int)dt);
    if (!ok) return 0;
    gdp_status s = k->launch(P.backend, &n, NULL, &E);
    CHECK(s == GDP_OK, "%s: launch: %s", op, E.msg);
    return s == GDP_OK;
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
    CHECK(pr->start(P.backend, &E) == GDP_OK, "profiler start: %s", E.msg);
    test_matmul(2, 64, 32, 48, 0, 0);
    CHECK(pr->stop(P.backend, &E) == GDP_OK, "profiler stop: %s", E.msg);
    gdp_span spans[16];
    int32_t n = 0;
    CHECK(pr->collect(P.backend, spans, 16, &n, &E) == GDP_OK, "collect: %s", E.msg);
    CHECK(n >= 1, "no spans collected");
    for (int i = 0; i < n; i++) {
        printf("span %s: %llu..%llu ns\n", spans[i].name, (unsigned long long)spans[i].start_ns,
               (unsigned long long)spans[i].end_ns);
        CHECK(spans[i].end_ns >= spans[i].start_ns, "span ends before it starts");
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
    host.register_kernel = reg, host.log = host_log, host.getenv = host_getenv;
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

    CHECK(D->synchronize(P.backend, NULL, &E) == GDP_OK, "final synchronize: %s", E.msg);
    if (P.shutdown) P.shutdown(P.backend);
    dlclose(dl);
    printf("%s\n", failures ? "FAILED" : "OK");
    return failures ? 1 : 0;
}
