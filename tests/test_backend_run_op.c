/* gd_backend_run_op and gd_backend_device, the entry points of framework bridges: one op
 * on buffers the caller allocated in a backend's memory. On the test device (whose
 * pointers fault if the host touches them) an op it has a kernel for runs there; one it
 * lacks runs on the reference across copies, in place for updates; strict mode refuses
 * that fallback; bad operands are refused before anything runs. */
#include "testdev_util.h"

#include "gradus_plugin.h"

static const gdp_device *dev;
static void *inst, *stream;

static gdp_tensor tensor(void *data, int32_t dt, int ndim, const int64_t *shape)
{
    gdp_tensor t = {.size = sizeof t, .data = data, .dtype = dt, .ndim = ndim};
    for (int d = 0; d < ndim; d++) t.shape[d] = shape[d];
    gdp_set_contiguous(&t);
    return t;
}

static void *upload(const float *h, size_t n)
{
    void *p = NULL;
    gdp_err e = {.size = sizeof e};
    CHECK(dev->alloc(inst, n * 4, &p, &e) == GDP_OK, "alloc: %s", e.msg);
    if (p != NULL) CHECK(dev->copy_h2d(inst, p, h, n * 4, stream, &e) == GDP_OK, "h2d: %s", e.msg);
    return p;
}

static void download(float *h, const void *p, size_t n)
{
    gdp_err e = {.size = sizeof e};
    CHECK(dev->copy_d2h(inst, h, p, n * 4, stream, &e) == GDP_OK, "d2h: %s", e.msg);
}

static void release(void *p)
{
    gdp_err e = {.size = sizeof e};
    if (p != NULL) dev->free(inst, p, &e);
}

int main(void)
{
    ctx = td_new_ctx("testdev", 0);
    if (ctx == NULL) return 1;
    CHECK(gd_backend_device(ctx, "testdev", &dev, &inst, &stream) == GD_OK, "%s", gd_ctx_error(ctx));
    CHECK(dev != NULL && dev->alloc != NULL, "the test device has a device module");
    CHECK(gd_backend_device(ctx, "nosuch", &dev, &inst, &stream) == GD_ERR_INVALID, "unknown backend refused");
    CHECK(strstr(gd_ctx_error(ctx), "nosuch") != NULL, "message names it: %s", gd_ctx_error(ctx));
    gd_backend_device(ctx, "testdev", &dev, &inst, &stream);
    const testdev_stats *st = td_stats(ctx);

    float a[6] = {1, -2, 3, -4, 5, -6}, b[6] = {0.5f, 0.25f, -1, 2, 0, 1}, r[6];
    int64_t sh[2] = {2, 3};
    void *da = upload(a, 6), *db = upload(b, 6), *dc = upload(a, 6);
    gdp_tensor ta = tensor(da, GDP_F32, 2, sh), tb = tensor(db, GDP_F32, 2, sh), tc = tensor(dc, GDP_F32, 2, sh);
    const gdp_tensor *ab[2] = {&ta, &tb}, *outc[1] = {&tc};

    /* add: the test device has the kernel */
    int on = -1;
    int64_t launches = st->launches;
    CHECK(gd_backend_run_op(ctx, "testdev", "add", 2, ab, 1, outc, 0, NULL, NULL, &on) == GD_OK, "add: %s",
          gd_ctx_error(ctx));
    CHECK(on == 1, "add ran on the test device (%d)", on);
    CHECK(st->launches == launches + 1, "one launch");
    download(r, dc, 6);
    for (int i = 0; i < 6; i++) CHECK(r[i] == a[i] + b[i], "add[%d] = %g", i, r[i]);

    /* matmul of a transposed view: the test device's matmul takes contiguous inputs, so a
     * contiguous copy is made on the device first (two launches, nothing on the host) */
    float w[6] = {1, 2, 3, 4, 5, 6}, m[4];
    int64_t sh32[2] = {3, 2}, sh22[2] = {2, 2};
    void *dw = upload(w, 6), *dm = upload(m, 4);
    gdp_tensor tw = tensor(dw, GDP_F32, 2, sh32), tm = tensor(dm, GDP_F32, 2, sh22);
    gdp_tensor twt = tw; /* w^T as a view: (2, 3) with strides (1, 2) */
    twt.shape[0] = 2, twt.shape[1] = 3, twt.stride[0] = 1, twt.stride[1] = 2;
    const gdp_tensor *mm[2] = {&twt, &tw}, *mo[1] = {&tm};
    launches = st->launches;
    CHECK(gd_backend_run_op(ctx, "testdev", "matmul", 2, mm, 1, mo, 0, NULL, NULL, &on) == GD_OK && on == 1,
          "matmul of a view: %s", gd_ctx_error(ctx));
    CHECK(st->launches == launches + 2, "a copy and the matmul on the device (%lld)", (long long)(st->launches - launches));
    download(m, dm, 4);
    CHECK(m[0] == 35 && m[1] == 44 && m[2] == 44 && m[3] == 56, "w^T w = %g %g %g %g", m[0], m[1], m[2], m[3]);
    release(dw), release(dm);

    /* exp: no kernel there, so the reference runs on copies */
    const gdp_tensor *a1[1] = {&ta};
    CHECK(gd_backend_run_op(ctx, "testdev", "exp", 1, a1, 1, outc, 0, NULL, NULL, &on) == GD_OK, "exp: %s",
          gd_ctx_error(ctx));
    CHECK(on == 0, "exp fell back (%d)", on);
    download(r, dc, 6);
    for (int i = 0; i < 6; i++) CHECK(fabsf(r[i] - expf(a[i])) <= 1e-6f * expf(a[i]), "exp[%d] = %g", i, r[i]);

    /* an in-place update on the fallback: sgd_update (p, g, buf, lr) -> (p', buf') */
    float lr = 0.5f, zero[6] = {0};
    void *dp = upload(a, 6), *dbuf = upload(zero, 6), *dlr = upload(&lr, 1);
    gdp_tensor tp = tensor(dp, GDP_F32, 2, sh), tbuf = tensor(dbuf, GDP_F32, 2, sh);
    gdp_tensor tlr = tensor(dlr, GDP_F32, 0, NULL);
    const gdp_tensor *sin[4] = {&tp, &tb, &tbuf, &tlr}, *sout[2] = {&tp, &tbuf};
    CHECK(gd_backend_run_op(ctx, "testdev", "sgd_update", 4, sin, 2, sout, 0, NULL, NULL, &on) == GD_OK,
          "sgd_update: %s", gd_ctx_error(ctx));
    download(r, dp, 6);
    for (int i = 0; i < 6; i++) CHECK(r[i] == a[i] - 0.5f * b[i], "p'[%d] = %g", i, r[i]);

    /* refused before anything runs: an output of the wrong shape, an unknown op, strict */
    int64_t sh3[2] = {3, 2};
    gdp_tensor bad = tensor(dc, GDP_F32, 2, sh3);
    const gdp_tensor *outbad[1] = {&bad};
    launches = st->launches;
    CHECK(gd_backend_run_op(ctx, "testdev", "add", 2, ab, 1, outbad, 0, NULL, NULL, &on) == GD_ERR_SHAPE,
          "wrong output shape refused");
    CHECK(strstr(gd_ctx_error(ctx), "f32[2, 3]") != NULL, "message says the shape: %s", gd_ctx_error(ctx));
    CHECK(gd_backend_run_op(ctx, "testdev", "nosuch", 1, a1, 1, outc, 0, NULL, NULL, &on) == GD_ERR_INVALID,
          "unknown op refused");
    gd_attr wrong = gd_attr_i("axis", 0);
    CHECK(gd_backend_run_op(ctx, "testdev", "exp", 1, a1, 1, outc, 1, &wrong, NULL, &on) == GD_ERR_INVALID,
          "attribute exp lacks refused");
    CHECK(st->launches == launches, "nothing launched");
    ctx->strict = 1;
    CHECK(gd_backend_run_op(ctx, "testdev", "exp", 1, a1, 1, outc, 0, NULL, NULL, &on) == GD_ERR_STRICT,
          "strict refuses the fallback");
    CHECK(strstr(gd_ctx_error(ctx), "exp") != NULL && strstr(gd_ctx_error(ctx), "testdev") != NULL, "%s",
          gd_ctx_error(ctx));
    CHECK(gd_backend_run_op(ctx, "testdev", "add", 2, ab, 1, outc, 0, NULL, NULL, &on) == GD_OK && on == 1,
          "strict still runs kernels the backend has");
    ctx->strict = 0;
    gd_ctx_clear_error(ctx);

    /* NULL where a pointer is taken: an error, with a message where there is a context */
    const gdp_device *d0;
    void *i0, *s0;
    const gdp_tensor *none[1] = {NULL};
    CHECK(gd_backend_device(NULL, "ref", &d0, &i0, &s0) == GD_ERR_INVALID, "device of a NULL context");
    CHECK(gd_backend_device(ctx, NULL, &d0, &i0, &s0) == GD_ERR_INVALID, "device of a NULL name");
    CHECK(gd_backend_device(ctx, "ref", NULL, &i0, &s0) == GD_ERR_INVALID, "device into NULL");
    CHECK(gd_backend_run_op(NULL, "ref", "exp", 1, a1, 1, outc, 0, NULL, NULL, &on) == GD_ERR_INVALID, "NULL context");
    CHECK(gd_backend_run_op(ctx, NULL, "exp", 1, a1, 1, outc, 0, NULL, NULL, &on) == GD_ERR_INVALID, "NULL backend");
    CHECK(gd_backend_run_op(ctx, "testdev", NULL, 1, a1, 1, outc, 0, NULL, NULL, &on) == GD_ERR_INVALID, "NULL op");
    CHECK(gd_backend_run_op(ctx, "testdev", "exp", 1, NULL, 1, outc, 0, NULL, NULL, &on) == GD_ERR_INVALID, "NULL inputs");
    CHECK(gd_backend_run_op(ctx, "testdev", "exp", 1, none, 1, outc, 0, NULL, NULL, &on) == GD_ERR_INVALID, "a NULL input");
    CHECK(gd_backend_run_op(ctx, "testdev", "exp", 1, a1, 1, none, 0, NULL, NULL, &on) != GD_OK, "a NULL output");
    CHECK(gd_backend_run_op(ctx, "testdev", "exp", 1, a1, 0, outc, 0, NULL, NULL, &on) == GD_ERR_INVALID, "no outputs");
    CHECK(strstr(gd_ctx_error(ctx), "exp") != NULL, "the message names the op: %s", gd_ctx_error(ctx));
    gd_ctx_clear_error(ctx);

    /* a host-memory backend: the reference runs in place */
    const gdp_device *hd = (const gdp_device *)1;
    void *hi, *hs;
    CHECK(gd_backend_device(ctx, "ref", &hd, &hi, &hs) == GD_OK && hd == NULL, "ref has no device module");
    float hc[6];
    gdp_tensor ha = tensor(a, GDP_F32, 2, sh), hb = tensor(b, GDP_F32, 2, sh), hct = tensor(hc, GDP_F32, 2, sh);
    const gdp_tensor *hab[2] = {&ha, &hb}, *hout[1] = {&hct};
    CHECK(gd_backend_run_op(ctx, "ref", "mul", 2, hab, 1, hout, 0, NULL, NULL, &on) == GD_OK, "%s", gd_ctx_error(ctx));
    for (int i = 0; i < 6; i++) CHECK(hc[i] == a[i] * b[i], "mul[%d]", i);

    release(da), release(db), release(dc), release(dp), release(dbuf), release(dlr);
    return tu_finish("test_backend_run_op");
}
