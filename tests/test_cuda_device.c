/* test_cuda_device.c — loads the CUDA plugin the way gradus does and checks its device
 * module, a few kernels against plain C on the host, the executor (a segment captured into a
 * CUDA graph and replayed), bad data found on the device and reported by synchronize /
 * poll_error, and the profiler's spans on the host clock. test_cuda_mixed.c has the
 * optimizer's batched launches and the mixed-precision forms; cuda_plugin_host.h what both
 * share (the plugin's path, and the SKIP without a GPU).
 */
#include "cuda_plugin_host.h"

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

int main(int argc, char **argv)
{
    void *dl = NULL;
    gdp_host host;
    int st = cuda_plugin_open(argc, argv, &dl, &host);
    if (st != 0) return st;

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
    test_bad_data();
    return cuda_plugin_close(dl);
}
