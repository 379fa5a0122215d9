/* test_cuda_mixed.c — the CUDA plugin's optimizer updates and master-weight casts, captured
 * by the executor as batched launches and launched node by node (the same bits), and its
 * mixed-precision forms (half operands with f32 products, states and master weights)
 * against plain C on the host. Loads the plugin as test_cuda_device.c does
 * (cuda_plugin_host.h); SKIP without a GPU.
 */
#include "cuda_plugin_host.h"

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

int main(int argc, char **argv)
{
    void *dl = NULL;
    gdp_host host;
    int st = cuda_plugin_open(argc, argv, &dl, &host);
    if (st != 0) return st;

    test_batched_updates(0);
    test_batched_updates(1);
    test_batched_casts();
    test_mixed();
    return cuda_plugin_close(dl);
}
