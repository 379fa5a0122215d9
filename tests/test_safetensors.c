/* safetensors: every dtype written and read back (0-d and empty tensors, metadata), the
 * exact bytes the writer produces, a file the reference Python library wrote, files
 * refused for each kind of damage (with the file and the tensor or field named), the
 * writer's refusals and its atomic replace, the read() path for files that cannot be
 * mapped, and allocation failures. */
#include "gradus_lm.h"
#include "testutil.h"

#include "alloc.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static const char *tmp_path(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void write_bytes(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot create %s", path);
    if (f == NULL) return;
    CHECK(fwrite(b, 1, n, f) == n, "short write to %s", path);
    fclose(f);
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (f == NULL) return NULL;
    unsigned char *b = malloc(1 << 20);
    *n = fread(b, 1, 1 << 20, f);
    fclose(f);
    return b;
}

/* Files in dir whose name contains s. */
static int count_files(const char *s)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) n += strstr(e->d_name, s) != NULL;
    if (d != NULL) closedir(d);
    return n;
}

/* ---- round trip ------------------------------------------------------------------------ */

static void round_trip(void)
{
    static const float f32[6] = {1.5f, -2, 0, 3.25f, 1e-30f, -1e30f};
    static const uint16_t f16[5] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000};
    static const uint16_t bf16[3] = {0x3f80, 0xbf80, 0x7f80};
    static const double f64 = -6.02214076e23; /* 0-d */
    static const int64_t i64[2] = {INT64_MIN, INT64_MAX};
    static const int8_t i8[7] = {-128, -1, 0, 1, 2, 3, 127};
    static const uint8_t boolv[4] = {1, 0, 0, 1};
    static float dims8[2 * 1 * 1 * 1 * 1 * 1 * 1 * 3] = {1, 2, 3, 4, 5, 6};
    gd_st_entry e[] = {
        {"f32", GD_F32, 2, {2, 3}, f32},
        {"layers.0.f16", GD_F16, 1, {5}, f16},
        {"bf16", GD_BF16, 3, {1, 1, 3}, bf16},
        {"scalar.f64", GD_F64, 0, {0}, &f64},
        {"i64", GD_I64, 1, {2}, i64},
        {"empty.i32", GD_I32, 1, {0}, NULL},
        {"empty.u8", GD_U8, 3, {3, 0, 2}, NULL},
        {"i8", GD_I8, 1, {7}, i8},
        {"bool", GD_BOOL, 1, {4}, boolv},
        {"eight.dims \"quoted\" \xc3\xa9", GD_F32, 8, {2, 1, 1, 1, 1, 1, 1, 3}, dims8},
    };
    int n = (int)(sizeof e / sizeof e[0]);
    const char *mk[] = {"format", "note"}, *mv[] = {"pt", "line\nbreak \xe2\x82\xac"};
    const char *path = tmp_path("all.safetensors");
    gd_status st = gd_st_write(ctx, path, e, n, mk, mv, 2);
    CHECK(st == GD_OK, "write: %s", gd_ctx_error(ctx));

    size_t len;
    unsigned char *raw = read_bytes(path, &len);
    CHECK(raw != NULL && len > 8, "file written");
    if (raw != NULL && len > 8) {
        uint64_t h = 0;
        for (int i = 7; i >= 0; i--) h = h << 8 | raw[i];
        CHECK(h % 8 == 0 && h < len, "header length %llu is a multiple of 8 inside the file", (unsigned long long)h);
        CHECK(raw[8] == '{', "header starts with {");
        size_t close = 8 + (size_t)h;
        while (close > 8 && raw[close - 1] == ' ') close--;
        CHECK(raw[close - 1] == '}' && 8 + h - close < 8, "header padded with fewer than 8 spaces");
        size_t data_bytes = len - 8 - (size_t)h;
        CHECK(data_bytes == sizeof f32 + sizeof f16 + sizeof bf16 + 8 + sizeof i64 + sizeof i8 + 4 + sizeof dims8,
              "data section is %zu bytes", data_bytes);
        CHECK(memcmp(raw + 8 + h, f32, sizeof f32) == 0, "first tensor's bytes follow the header");
    }
    free(raw);

    gd_st_file *f = NULL;
    st = gd_st_open(ctx, path, &f);
    CHECK(st == GD_OK, "open: %s", gd_ctx_error(ctx));
    if (f == NULL) return;
    CHECK(gd_st_count(f) == n, "count %d", gd_st_count(f));
    for (int i = 0; i < n && i < gd_st_count(f); i++) {
        CHECK(strcmp(gd_st_name(f, i), e[i].name) == 0, "name %d is %s, written in order", i, gd_st_name(f, i));
        gd_dtype dt;
        int nd = -1;
        int64_t shape[GD_MAX_DIMS];
        const void *data;
        size_t bytes;
        CHECK(gd_st_find(f, e[i].name, &dt, &nd, shape, &data, &bytes), "find %s", e[i].name);
        CHECK(dt == e[i].dtype && nd == e[i].ndim, "%s: dtype %d ndim %d", e[i].name, dt, nd);
        size_t want = gd_dtype_size(e[i].dtype);
        for (int d = 0; d < nd && d < e[i].ndim; d++) {
            CHECK(shape[d] == e[i].shape[d], "%s: dim %d", e[i].name, d);
            want *= (size_t)e[i].shape[d];
        }
        CHECK(bytes == want, "%s: %zu bytes, want %zu", e[i].name, bytes, want);
        if (bytes == want && want > 0) CHECK(memcmp(data, e[i].data, want) == 0, "%s: values", e[i].name);
    }
    CHECK(gd_st_name(f, -1) == NULL && gd_st_name(f, n) == NULL, "names out of range");
    CHECK(!gd_st_find(f, "nope", NULL, NULL, NULL, NULL, NULL), "absent tensor");
    CHECK(gd_st_find(f, "i8", NULL, NULL, NULL, NULL, NULL), "found with NULL outputs");
    CHECK(gd_st_metadata(f, "format") && strcmp(gd_st_metadata(f, "format"), "pt") == 0, "metadata format");
    CHECK(gd_st_metadata(f, "note") && strcmp(gd_st_metadata(f, "note"), mv[1]) == 0, "metadata note");
    CHECK(gd_st_metadata(f, "absent") == NULL && gd_st_metadata(f, NULL) == NULL, "absent metadata");
    gd_st_close(f);

    /* no tensors, no metadata: the smallest file */
    path = tmp_path("none.safetensors");
    st = gd_st_write(ctx, path, NULL, 0, NULL, NULL, 0);
    CHECK(st == GD_OK, "empty write: %s", gd_ctx_error(ctx));
    raw = read_bytes(path, &len);
    CHECK(raw != NULL && len == 16 && memcmp(raw, "\x08\0\0\0\0\0\0\0{}      ", 16) == 0, "empty file is %zu bytes",
          len);
    free(raw);
    st = gd_st_open(ctx, path, &f);
    CHECK(st == GD_OK && gd_st_count(f) == 0, "empty file reads: %s", gd_ctx_error(ctx));
    gd_st_close(f);
}

/* The writer's bytes for one tensor, exactly as the format describes them. */
static void exact_bytes(void)
{
    const float v[2] = {1.0f, -2.0f};
    gd_st_entry e = {"w", GD_F32, 1, {2}, v};
    const char *path = tmp_path("exact.safetensors");
    CHECK(gd_st_write(ctx, path, &e, 1, NULL, NULL, 0) == GD_OK, "write: %s", gd_ctx_error(ctx));
    static const char header[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"; /* 54 bytes */
    unsigned char want[8 + 56 + 8] = {56};
    memcpy(want + 8, header, 54);
    memset(want + 8 + 54, ' ', 2);
    memcpy(want + 64, v, 8);
    size_t len;
    unsigned char *raw = read_bytes(path, &len);
    CHECK(raw != NULL && len == sizeof want && memcmp(raw, want, sizeof want) == 0, "file is %zu bytes, as specified",
          len);
    free(raw);
}

/* Bytes the `safetensors` Python package (0.8, numpy backend) wrote for
 * {"b": int32 [1, -2], "a": float16 [1, -2.5, 0.5], "s": float64 3.25 (0-d), "e": uint8 (2, 0)}
 * with metadata {"format": "np"}: it orders tensors by falling alignment, then name. */
static void reference_file(void)
{
    static const char header[] =
        "{\"__metadata__\":{\"format\":\"np\"},\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[8,16]},\"a\":{\"dtype\":\"F16\",\"shape\":[3],"
        "\"data_offsets\":[16,22]},\"e\":{\"dtype\":\"U8\",\"shape\":[2,0],\"data_offsets\":[22,22]}}       ";
    static const unsigned char data[22] = {0, 0, 0, 0, 0, 0, 0x0a, 0x40, 1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff,
                                           0x00, 0x3c, 0x00, 0xc1, 0x00, 0x38};
    unsigned char file[8 + 256 + 22] = {0x00, 0x01};
    CHECK(sizeof header - 1 == 256, "header literal is %zu bytes", sizeof header - 1);
    memcpy(file + 8, header, 256);
    memcpy(file + 264, data, 22);
    gd_st_file *f = NULL;
    gd_status st = gd_st_open_mem(ctx, "reference.safetensors", file, sizeof file, &f);
    CHECK(st == GD_OK, "reference file refused: %s", gd_ctx_error(ctx));
    if (f == NULL) return;
    CHECK(gd_st_count(f) == 4 && strcmp(gd_st_name(f, 0), "s") == 0 && strcmp(gd_st_name(f, 3), "e") == 0, "order");
    const void *p;
    size_t bytes;
    gd_dtype dt;
    int nd;
    int64_t shape[GD_MAX_DIMS];
    double s = 0;
    CHECK(gd_st_find(f, "s", &dt, &nd, shape, &p, &bytes) && dt == GD_F64 && nd == 0 && bytes == 8, "scalar");
    memcpy(&s, p, sizeof s);
    CHECK(s == 3.25, "scalar value %g", s);
    int32_t b[2] = {0};
    CHECK(gd_st_find(f, "b", &dt, &nd, shape, &p, &bytes) && dt == GD_I32 && nd == 1 && shape[0] == 2, "b");
    memcpy(b, p, sizeof b);
    CHECK(b[0] == 1 && b[1] == -2, "b values");
    uint16_t a[3] = {0};
    CHECK(gd_st_find(f, "a", &dt, &nd, shape, &p, &bytes) && dt == GD_F16 && bytes == 6, "a");
    memcpy(a, p, sizeof a);
    CHECK(a[0] == 0x3c00 && a[1] == 0xc100 && a[2] == 0x3800, "a values (f16 bits)");
    CHECK(gd_st_find(f, "e", &dt, &nd, shape, &p, &bytes) && dt == GD_U8 && nd == 2 && shape[0] == 2 && shape[1] == 0 &&
              bytes == 0,
          "empty");
    CHECK(gd_st_metadata(f, "format") != NULL && strcmp(gd_st_metadata(f, "format"), "np") == 0, "metadata");
    gd_st_close(f);
}

/* ---- damaged files ----------------------------------------------------------------------- */

/* A file of the header text (its length prefixed) and data_len bytes of data must be
 * refused with status want and a message naming the file and each needle. */
static void refuse(const char *file, const char *header, size_t data_len, gd_status want, const char *n1,
                   const char *n2)
{
    size_t hl = strlen(header), total = 8 + hl + data_len;
    unsigned char *b = calloc(1, total);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    const char *path = tmp_path(file);
    write_bytes(path, b, total);
    gd_st_file *f = (gd_st_file *)1;
    gd_ctx_clear_error(ctx);
    gd_status st = gd_st_open(ctx, path, &f);
    CHECK(st == want, "%s: status %s, want %s (%s)", file, gd_status_name(st), gd_status_name(want), gd_ctx_error(ctx));
    CHECK(f == NULL, "%s: out is NULL after a failure", file);
    check_error(file, (const char *[]){path, n1, n2, NULL});
    /* the same from memory */
    st = gd_st_open_mem(ctx, file, b, total, &f);
    CHECK(st == want && f == NULL, "%s from memory: status %s", file, gd_status_name(st));
    check_error(file, (const char *[]){file, n1, n2, NULL});
    free(b);
}

#define T(name, dt, shape, off) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" off "}"

static void damaged(void)
{
    /* shorter than the length field; length past the end */
    write_bytes(tmp_path("short.safetensors"), "\x02\0\0", 3);
    gd_st_file *f = NULL;
    CHECK(gd_st_open(ctx, tmp_path("short.safetensors"), &f) == GD_ERR_FORMAT && f == NULL, "3-byte file");
    check_error("short", (const char *[]){"short.safetensors", "too short", NULL});
    unsigned char past[20] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    write_bytes(tmp_path("past.safetensors"), past, sizeof past);
    CHECK(gd_st_open(ctx, tmp_path("past.safetensors"), &f) == GD_ERR_FORMAT, "header length past the end");
    check_error("past", (const char *[]){"past.safetensors", "header length 65535", "past the end", NULL});
    unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    CHECK(gd_st_open_mem(ctx, "huge", huge, sizeof huge, &f) == GD_ERR_FORMAT, "2^64-1 header length");
    /* a header over the 100 MB bound, inside a (lazily mapped, mostly unread) 101 MB buffer */
    size_t big = 101u << 20;
    unsigned char *m = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m != MAP_FAILED) {
        uint64_t hl = 100000001;
        for (int i = 0; i < 8; i++) m[i] = (unsigned char)(hl >> (8 * i));
        m[8] = '{';
        CHECK(gd_st_open_mem(ctx, "big", m, big, &f) == GD_ERR_FORMAT, "header over the bound");
        check_error("bound", (const char *[]){"big", "100000001", "limit", NULL});
        munmap(m, big);
    }

    refuse("json.safetensors", "{\"w\":{\"dtype\":\"F32\",", 0, GD_ERR_FORMAT, "not valid JSON", "at byte");
    refuse("brace.safetensors", "[]", 0, GD_ERR_FORMAT, "does not start with '{'", NULL);
    refuse("obj.safetensors", "{\"w\":3}", 0, GD_ERR_FORMAT, "tensor 'w'", "not an object");
    refuse("dtype.safetensors", "{" T("w", "Q7", "[1]", "[0,4]") "}", 4, GD_ERR_FORMAT, "tensor 'w'",
           "unknown dtype 'Q7'");
    refuse("u16.safetensors", "{" T("w", "U16", "[2]", "[0,4]") "}", 4, GD_ERR_UNSUPPORTED, "tensor 'w'",
           "dtype U16 is not supported");
    refuse("f8.safetensors", "{" T("w", "F8_E4M3", "[4]", "[0,4]") "}", 4, GD_ERR_UNSUPPORTED, "tensor 'w'", "F8_E4M3");
    refuse("nodtype.safetensors", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, GD_ERR_FORMAT, "tensor 'w'",
           "dtype is missing");
    refuse("noshape.safetensors", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, GD_ERR_FORMAT,
           "tensor 'w'", "shape is missing");
    refuse("negdim.safetensors", "{" T("w", "F32", "[2,-1]", "[0,4]") "}", 4, GD_ERR_FORMAT, "tensor 'w'",
           "shape[1] is not a non-negative integer");
    refuse("fracdim.safetensors", "{" T("w", "F32", "[1.5]", "[0,4]") "}", 4, GD_ERR_FORMAT, "tensor 'w'", "shape[0]");
    refuse("ninedims.safetensors", "{" T("w", "F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4, GD_ERR_UNSUPPORTED,
           "tensor 'w'", "9 dims");
    refuse("offs3.safetensors", "{" T("w", "F32", "[1]", "[0,4,8]") "}", 8, GD_ERR_FORMAT, "tensor 'w'",
           "data_offsets");
    refuse("backwards.safetensors", "{" T("w", "F32", "[1]", "[4,0]") "}", 4, GD_ERR_FORMAT, "tensor 'w'",
           "end before they begin");
    refuse("range.safetensors", "{" T("w", "F32", "[4]", "[0,16]") "}", 8, GD_ERR_FORMAT, "tensor 'w'",
           "past the end of the data");
    refuse("count.safetensors", "{" T("w", "F32", "[2,2]", "[0,12]") "}", 12, GD_ERR_FORMAT, "tensor 'w'",
           "take 16 bytes but data_offsets [0, 12] hold 12");
    refuse("overflow.safetensors", "{" T("w", "F64", "[4294967296,4294967296]", "[0,8]") "}", 8, GD_ERR_FORMAT,
           "tensor 'w'", "overflows");
    refuse("overlap.safetensors", "{" T("a", "F32", "[4]", "[0,16]") "," T("b", "F32", "[4]", "[8,24]") "}", 24,
           GD_ERR_FORMAT, "tensor 'b' [8, 24) overlaps tensor 'a'", NULL);
    refuse("gap.safetensors", "{" T("a", "F32", "[2]", "[0,8]") "," T("b", "F32", "[2]", "[16,24]") "}", 24,
           GD_ERR_FORMAT, "bytes [8, 16)", "before tensor 'b'");
    refuse("trailing.safetensors", "{" T("a", "F32", "[2]", "[0,8]") "}", 12, GD_ERR_FORMAT,
           "the data has 12 bytes but the tensors end at byte 8", "'a'");
    refuse("twice.safetensors", "{" T("a", "F32", "[1]", "[0,4]") "," T("a", "F32", "[1]", "[4,8]") "}", 8,
           GD_ERR_FORMAT, "tensor 'a' appears twice", NULL);
    refuse("field2.safetensors", "{\"w\":{\"dtype\":\"F32\",\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
           GD_ERR_FORMAT, "tensor 'w'", "dtype appears twice");
    refuse("metanum.safetensors", "{\"__metadata__\":{\"step\":3}}", 0, GD_ERR_FORMAT, "__metadata__ entry 'step'",
           "not a string");
    refuse("metaarr.safetensors", "{\"__metadata__\":[]}", 0, GD_ERR_FORMAT, "__metadata__ is not an object", NULL);
    refuse("meta2.safetensors", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, GD_ERR_FORMAT,
           "__metadata__ appears twice", NULL);
    refuse("metadup.safetensors", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, GD_ERR_FORMAT,
           "__metadata__ entry 'k' appears twice", NULL);
    refuse("nul.safetensors", "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0,
           GD_ERR_FORMAT, "NUL", NULL);

    CHECK(gd_st_open(ctx, tmp_path("missing.safetensors"), &f) == GD_ERR_IO && f == NULL, "missing file");
    check_error("missing", (const char *[]){"missing.safetensors", "cannot open", NULL});
    CHECK(gd_st_open(ctx, dir, &f) == GD_ERR_IO && f == NULL, "a directory");
}

/* ---- the writer's refusals and atomic replace ------------------------------------------- */

static void write_refusals(void)
{
    const float v[4] = {1, 2, 3, 4};
    const char *path = tmp_path("keep.safetensors");
    gd_st_entry good = {"v", GD_F32, 1, {4}, v};
    CHECK(gd_st_write(ctx, path, &good, 1, NULL, NULL, 0) == GD_OK, "write: %s", gd_ctx_error(ctx));
    size_t len0;
    unsigned char *before = read_bytes(path, &len0);

    struct {
        gd_st_entry e[2];
        int n;
        const char *needle;
    } bad[] = {
        {{{"v", GD_F32, 1, {4}, v}, {"v", GD_F32, 1, {4}, v}}, 2, "tensor 'v' is given twice"},
        {{{"__metadata__", GD_F32, 1, {4}, v}}, 1, "reserved"},
        {{{"", GD_F32, 1, {4}, v}}, 1, "tensor 0 has no name"},
        {{{NULL, GD_F32, 1, {4}, v}}, 1, "tensor 0 has no name"},
        {{{"x", GD_F32, 1, {4}, NULL}}, 1, "tensor 'x': data is NULL"},
        {{{"x", (gd_dtype)42, 1, {4}, v}}, 1, "tensor 'x': unknown dtype 42"},
        {{{"x", GD_F32, 9, {4}, v}}, 1, "tensor 'x': ndim 9"},
        {{{"x", GD_F32, 2, {4, -1}, v}}, 1, "tensor 'x': dim 1 is -1"},
        {{{"x", GD_F32, 2, {INT64_MAX, 2}, v}}, 1, "tensor 'x': the byte count of its shape overflows"},
        {{{"bad\xff", GD_F32, 1, {4}, v}}, 1, "not valid UTF-8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gd_ctx_clear_error(ctx);
        gd_status st = gd_st_write(ctx, path, bad[i].e, bad[i].n, NULL, NULL, 0);
        CHECK(st == GD_ERR_INVALID, "bad write %zu: status %s", i, gd_status_name(st));
        check_error("bad write", (const char *[]){path, bad[i].needle, NULL});
    }
    const char *mk[] = {"a", "a"}, *mv[] = {"1", "2"};
    CHECK(gd_st_write(ctx, path, &good, 1, mk, mv, 2) == GD_ERR_INVALID, "duplicate metadata");
    check_error("dup meta", (const char *[]){"metadata key 'a' is given twice", NULL});
    const char *nk[] = {NULL};
    CHECK(gd_st_write(ctx, path, &good, 1, nk, mv, 1) == GD_ERR_INVALID, "NULL metadata key");
    CHECK(gd_st_write(ctx, path, NULL, 1, NULL, NULL, 0) == GD_ERR_INVALID, "NULL entries");
    CHECK(gd_st_write(ctx, path, &good, -1, NULL, NULL, 0) == GD_ERR_INVALID, "n < 0");
    CHECK(gd_st_write(ctx, path, &good, 1, NULL, NULL, 1) == GD_ERR_INVALID, "NULL metadata arrays");
    CHECK(gd_st_write(ctx, NULL, &good, 1, NULL, NULL, 0) == GD_ERR_INVALID, "NULL path");

    size_t len1;
    unsigned char *after = read_bytes(path, &len1);
    CHECK(after != NULL && before != NULL && len0 == len1 && memcmp(before, after, len0) == 0,
          "refused writes left the file as it was");
    free(before);
    free(after);

    /* a directory that does not exist: an IO error naming the file */
    char nodir[600];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/x.safetensors", dir);
    CHECK(gd_st_write(ctx, nodir, &good, 1, NULL, NULL, 0) == GD_ERR_IO, "unwritable path");
    check_error("nodir", (const char *[]){nodir, "temporary file", NULL});

    /* replacing: the new content, and no temporary file left behind */
    const float w[2] = {9, 8};
    gd_st_entry next = {"w", GD_F32, 1, {2}, w};
    CHECK(gd_st_write(ctx, path, &next, 1, NULL, NULL, 0) == GD_OK, "overwrite: %s", gd_ctx_error(ctx));
    gd_st_file *f = NULL;
    CHECK(gd_st_open(ctx, path, &f) == GD_OK && gd_st_count(f) == 1 && strcmp(gd_st_name(f, 0), "w") == 0,
          "replaced file holds the new tensor");
    gd_st_close(f);
    CHECK(count_files(".tmp.") == 0, "no temporary files left in the directory");
}

/* A FIFO cannot be mapped: the reader falls back to read(). */
static void fifo_read(void)
{
    const float v[3] = {4, 5, 6};
    gd_st_entry e = {"v", GD_F32, 1, {3}, v};
    const char *src = tmp_path("fifo-src.safetensors");
    CHECK(gd_st_write(ctx, src, &e, 1, NULL, NULL, 0) == GD_OK, "write: %s", gd_ctx_error(ctx));
    size_t len;
    unsigned char *b = read_bytes(src, &len);
    const char *fifo = tmp_path("pipe.safetensors");
    if (b == NULL || mkfifo(fifo, 0600) != 0) {
        CHECK(0, "cannot make a FIFO");
        free(b);
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        FILE *w = fopen(fifo, "wb");
        if (w != NULL) {
            fwrite(b, 1, len, w);
            fclose(w);
        }
        _exit(0);
    }
    gd_st_file *f = NULL;
    gd_status st = gd_st_open(ctx, fifo, &f);
    CHECK(st == GD_OK, "FIFO read: %s", gd_ctx_error(ctx));
    const void *p = NULL;
    size_t bytes = 0;
    CHECK(f != NULL && gd_st_find(f, "v", NULL, NULL, NULL, &p, &bytes) && bytes == sizeof v &&
              memcmp(p, v, sizeof v) == 0,
          "FIFO data");
    gd_st_close(f);
    int status;
    waitpid(pid, &status, 0);
    free(b);
}

/* Every allocation of open and write failing in turn: NOMEM each time, nothing leaked
 * (ASan checks that), and success once the count passes them all. */
static void alloc_failures(void)
{
    const float v[4] = {1, 2, 3, 4};
    gd_st_entry e[2] = {{"a", GD_F32, 1, {4}, v}, {"b", GD_F32, 1, {2}, v}};
    const char *mk[] = {"k"}, *mv[] = {"v"};
    const char *path = tmp_path("alloc.safetensors");
    int ok = 0;
    for (int64_t k = 1; k < 200 && !ok; k++) {
        gd_alloc_fail_at(k);
        gd_status st = gd_st_write(ctx, path, e, 2, mk, mv, 1);
        gd_alloc_fail_at(0);
        CHECK(st == GD_OK || st == GD_ERR_NOMEM, "write with allocation %lld failing: %s", (long long)k,
              gd_status_name(st));
        ok = st == GD_OK;
    }
    CHECK(ok, "write never succeeded");
    ok = 0;
    for (int64_t k = 1; k < 200 && !ok; k++) {
        gd_st_file *f = NULL;
        gd_alloc_fail_at(k);
        gd_status st = gd_st_open(ctx, path, &f);
        gd_alloc_fail_at(0);
        CHECK(st == GD_OK || st == GD_ERR_NOMEM, "open with allocation %lld failing: %s", (long long)k,
              gd_status_name(st));
        CHECK((st == GD_OK) == (f != NULL), "out set only on success");
        ok = st == GD_OK;
        gd_st_close(f);
    }
    CHECK(ok, "open never succeeded");
}

static void null_args(void)
{
    gd_st_file *f = NULL;
    CHECK(gd_st_open(ctx, NULL, &f) == GD_ERR_INVALID, "NULL path");
    CHECK(gd_st_open(ctx, "x", NULL) == GD_ERR_INVALID, "NULL out");
    CHECK(gd_st_open(NULL, NULL, NULL) == GD_ERR_INVALID, "all NULL");
    CHECK(gd_st_open_mem(ctx, NULL, NULL, 4, &f) == GD_ERR_INVALID, "NULL data");
    CHECK(gd_st_open_mem(NULL, NULL, NULL, 0, &f) == GD_ERR_FORMAT && f == NULL, "empty memory, NULL ctx");
    gd_st_close(NULL);
    CHECK(gd_st_count(NULL) == 0 && gd_st_name(NULL, 0) == NULL && gd_st_metadata(NULL, "k") == NULL, "NULL file");
    CHECK(!gd_st_find(NULL, "x", NULL, NULL, NULL, NULL, NULL), "find in NULL");
    CHECK(gd_st_write(NULL, NULL, NULL, 0, NULL, NULL, 0) == GD_ERR_INVALID, "write NULL");
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    snprintf(dir, sizeof dir, "%s/gd-st-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    round_trip();
    exact_bytes();
    reference_file();
    damaged();
    write_refusals();
    fifo_read();
    alloc_failures();
    null_args();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return tu_finish("test_safetensors");
}
