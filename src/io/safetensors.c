/* safetensors.c — the safetensors checkpoint format, read and written.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON, then the data:
 *
 *     {"__metadata__": {"format": "pt"},
 *      "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
 *
 * Offsets count from the start of the data. The reader trusts nothing in the file until
 * it is checked: the header length against the file and a fixed bound, then every tensor
 * against the data; it accepts what the reference implementation (the Rust crate behind
 * the `safetensors` Python package) accepts, including its rule that the tensors' ranges
 * tile the data exactly. Messages name the file and the tensor or field.
 */
#include "atomic_file.h"
#include "gradus_lm.h"
#include "io/json.h"

#include "alloc.h"
#include "checked.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation refuses longer headers (its MAX_HEADER_SIZE); a header
 * that size already describes millions of tensors. */
#define ST_MAX_HEADER 100000000u

/* Little-endian data written and read as host bytes: a big-endian host would need a swap
 * per element, which nothing here does. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define ST_HOST_OK 0
#else
#define ST_HOST_OK 1
#endif

typedef struct st_tensor {
    const char *name; /* in the JSON document's arena */
    gd_dtype dtype;
    int ndim;
    int64_t shape[GD_MAX_DIMS];
    uint64_t begin, end; /* within the data */
} st_tensor;

enum { ST_BORROWED = 0, ST_MAPPED = 1, ST_OWNED = 2 };

struct gd_st_file {
    char *name;
    int storage; /* how base is held */
    const uint8_t *base;
    size_t size;
    const uint8_t *data;
    uint64_t data_size;
    gd_json_doc *doc;
    st_tensor *t;
    int n;
    int *by_name; /* indices of t sorted by name, for lookups */
    const char **meta_k, **meta_v;
    int n_meta;
};

/* ---- dtypes -------------------------------------------------------------------------- */

static const struct {
    const char *name;
    gd_dtype dt;
} st_dtypes[] = {
    {"F32", GD_F32}, {"F16", GD_F16}, {"BF16", GD_BF16}, {"F64", GD_F64}, {"I64", GD_I64},
    {"I32", GD_I32}, {"U8", GD_U8},   {"I8", GD_I8},     {"BOOL", GD_BOOL},
};
/* Dtypes of the format that gradus has no type for: refused by name, not as unknown. */
static const char *const st_foreign[] = {"F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",
                                         "I16",     "U16",     "U32",     "U64",     "C64"};

#define N_ST_DTYPES (int)(sizeof st_dtypes / sizeof st_dtypes[0])

static const char *st_dtype_name(gd_dtype dt)
{
    for (int i = 0; i < N_ST_DTYPES; i++)
        if (st_dtypes[i].dt == dt) return st_dtypes[i].name;
    return NULL;
}

/* ---- small helpers ------------------------------------------------------------------- */

/* 1 when s[0..n) is valid UTF-8 without NUL bytes, else 0. */
static int utf8_ok(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        unsigned cp, min;
        if (c == 0) return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xE0) == 0xC0) len = 2, min = 0x80, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0) len = 3, min = 0x800, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0) len = 4, min = 0x10000, cp = c & 0x07;
        else return 0;
        if (n - i < len) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3Fu);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += len;
    }
    return 1;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int cmp_cstr_ptr(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The first name that appears twice in names[0..n), or NULL. */
static gd_status find_duplicate(gd_ctx *ctx, const char *path, const char *const *names, int n, const char **dup)
{
    *dup = NULL;
    if (n < 2) return GD_OK;
    const char **s = gd_malloc((size_t)n * sizeof *s);
    if (s == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", path);
    memcpy(s, names, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_cstr_ptr);
    for (int i = 1; i < n && *dup == NULL; i++)
        if (strcmp(s[i - 1], s[i]) == 0) *dup = s[i];
    gd_free(s);
    return GD_OK;
}

/* ---- reading ------------------------------------------------------------------------- */

void gd_st_close(gd_st_file *f)
{
    if (f == NULL) return;
    if (f->storage == ST_MAPPED && f->base != NULL) munmap((void *)f->base, f->size);
    if (f->storage == ST_OWNED) gd_free((void *)f->base);
    gd_json_free(f->doc);
    gd_free(f->t);
    gd_free(f->by_name);
    gd_free(f->meta_k);
    gd_free(f->meta_v);
    gd_free(f->name);
    gd_free(f);
}

/* A failure while parsing: the message, prefixed with the file's name. */
static gd_status st_fail(gd_ctx *ctx, const gd_st_file *f, gd_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static gd_status st_fail(gd_ctx *ctx, const gd_st_file *f, gd_status s, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gd_ctx_fail(ctx, s, "%s: %s", f->name, msg);
}

/* Sorts indices of t by cmp (a merge sort: qsort has no context argument, and a global
 * one would make two threads opening files at once interfere). */
static void sort_idx(int *idx, int *tmp, int n, const st_tensor *t, int (*cmp)(const st_tensor *, const st_tensor *))
{
    if (n < 2) return;
    int h = n / 2;
    sort_idx(idx, tmp, h, t, cmp);
    sort_idx(idx + h, tmp, n - h, t, cmp);
    int i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = cmp(&t[idx[j]], &t[idx[i]]) < 0 ? idx[j++] : idx[i++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, (size_t)n * sizeof *idx);
}
static int name_order(const st_tensor *a, const st_tensor *b) { return strcmp(a->name, b->name); }
static int offset_order(const st_tensor *a, const st_tensor *b)
{
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end) return a->end < b->end ? -1 : 1;
    return 0;
}

/* A non-negative integer of the JSON (shape dims, offsets); 0 if it is not one. */
static int json_u64(const gd_json *v, uint64_t *out)
{
    if (v == NULL || v->kind != GD_JSON_NUMBER || !v->is_int || v->i < 0) return 0;
    *out = (uint64_t)v->i;
    return 1;
}

static gd_status parse_metadata(gd_ctx *ctx, gd_st_file *f, const gd_json *m)
{
    if (m->kind != GD_JSON_OBJECT)
        return st_fail(ctx, f, GD_ERR_FORMAT, "__metadata__ is not an object of strings");
    if (m->len > 0) {
        f->meta_k = gd_calloc(m->len, sizeof *f->meta_k);
        f->meta_v = gd_calloc(m->len, sizeof *f->meta_v);
        if (f->meta_k == NULL || f->meta_v == NULL) return st_fail(ctx, f, GD_ERR_NOMEM, "out of memory for the metadata");
    }
    for (size_t i = 0; i < m->len; i++) {
        const gd_json *v = m->items[i];
        if (strlen(m->keys[i]) != m->key_lens[i])
            return st_fail(ctx, f, GD_ERR_FORMAT, "__metadata__ has a key with a NUL byte");
        if (v->kind != GD_JSON_STRING)
            return st_fail(ctx, f, GD_ERR_FORMAT, "__metadata__ entry '%s' is not a string", m->keys[i]);
        if (strlen(v->str) != v->len)
            return st_fail(ctx, f, GD_ERR_FORMAT, "__metadata__ entry '%s' has a NUL byte", m->keys[i]);
        f->meta_k[i] = m->keys[i];
        f->meta_v[i] = v->str;
    }
    if (m->len > (size_t)INT32_MAX) return st_fail(ctx, f, GD_ERR_FORMAT, "__metadata__ has too many entries");
    f->n_meta = (int)m->len;
    const char *dup;
    gd_status st = find_duplicate(ctx, f->name, f->meta_k, f->n_meta, &dup);
    if (st == GD_OK && dup != NULL) st = st_fail(ctx, f, GD_ERR_FORMAT, "__metadata__ entry '%s' appears twice", dup);
    return st;
}

static gd_status parse_tensor(gd_ctx *ctx, gd_st_file *f, const char *name, const gd_json *info, st_tensor *t)
{
    t->name = name;
    if (info->kind != GD_JSON_OBJECT)
        return st_fail(ctx, f, GD_ERR_FORMAT, "tensor '%s': not an object with dtype, shape and data_offsets", name);
    /* a field given twice would be read differently by different readers */
    static const char *const fields[] = {"dtype", "shape", "data_offsets"};
    for (int k = 0; k < 3; k++) {
        int count = 0;
        for (size_t i = 0; i < info->len; i++) count += strcmp(info->keys[i], fields[k]) == 0;
        if (count > 1) return st_fail(ctx, f, GD_ERR_FORMAT, "tensor '%s': %s appears twice", name, fields[k]);
    }
    const gd_json *dt = gd_json_get(info, "dtype"), *shape = gd_json_get(info, "shape"),
                  *off = gd_json_get(info, "data_offsets");
    if (dt == NULL || dt->kind != GD_JSON_STRING)
        return st_fail(ctx, f, GD_ERR_FORMAT, "tensor '%s': dtype is %s", name, dt == NULL ? "missing" : "not a string");
    int found = 0;
    for (int i = 0; i < N_ST_DTYPES && !found; i++)
        if (strcmp(dt->str, st_dtypes[i].name) == 0) t->dtype = st_dtypes[i].dt, found = 1;
    if (!found) {
        for (size_t i = 0; i < sizeof st_foreign / sizeof st_foreign[0]; i++)
            if (strcmp(dt->str, st_foreign[i]) == 0)
                return st_fail(ctx, f, GD_ERR_UNSUPPORTED,
                               "tensor '%s': dtype %s is not supported (gradus reads F32, F16, BF16, F64, I64, I32, "
                               "U8, I8 and BOOL)",
                               name, dt->str);
        return st_fail(ctx, f, GD_ERR_FORMAT, "tensor '%s': unknown dtype '%.64s'", name, dt->str);
    }
    if (shape == NULL || shape->kind != GD_JSON_ARRAY)
        return st_fail(ctx, f, GD_ERR_FORMAT, "tensor '%s': shape is %s", name,
                       shape == NULL ? "missing" : "not an array");
    if (shape->len > GD_MAX_DIMS)
        return st_fail(ctx, f, GD_ERR_UNSUPPORTED, "tensor '%s': %zu dims, gradus tensors have at most %d", name,
                       shape->len, GD_MAX_DIMS);
    t->ndim = (int)shape->len;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t v;
        if (!json_u64(shape->items[d], &v))
            return st_fail(ctx, f, GD_ERR_FORMAT, "tensor '%s': shape[%d] is not a non-negative integer", name, d);
        t->shape[d] = (int64_t)v;
    }
    if (off == NULL || off->kind != GD_JSON_ARRAY || off->len != 2 || !json_u64(off->items[0], &t->begin) ||
        !json_u64(off->items[1], &t->end))
        return st_fail(ctx, f, GD_ERR_FORMAT, "tensor '%s': data_offsets is %s", name,
                       off == NULL ? "missing" : "not two non-negative integers [begin, end]");
    if (t->begin > t->end)
        return st_fail(ctx, f, GD_ERR_FORMAT, "tensor '%s': data_offsets [%llu, %llu] end before they begin", name,
                       (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > f->data_size)
        return st_fail(ctx, f, GD_ERR_FORMAT,
                       "tensor '%s': data_offsets [%llu, %llu] run past the end of the data (%llu bytes; the file "
                       "is truncated or the offsets are wrong)",
                       name, (unsigned long long)t->begin, (unsigned long long)t->end,
                       (unsigned long long)f->data_size);
    size_t bytes;
    if (gd_numel_bytes(t->ndim, t->shape, gd_dtype_size(t->dtype), &bytes) != 0)
        return st_fail(ctx, f, GD_ERR_FORMAT, "tensor '%s': the shape's byte count overflows", name);
    if ((uint64_t)bytes != t->end - t->begin)
        return st_fail(ctx, f, GD_ERR_FORMAT,
                       "tensor '%s': %s of this shape take %zu bytes but data_offsets [%llu, %llu] hold %llu", name,
                       dt->str, bytes, (unsigned long long)t->begin, (unsigned long long)t->end,
                       (unsigned long long)(t->end - t->begin));
    return GD_OK;
}

/* Validates the header and the tensors of f (base and size set). */
static gd_status st_parse(gd_ctx *ctx, gd_st_file *f)
{
    if (f->size < 8)
        return st_fail(ctx, f, GD_ERR_FORMAT, "%zu bytes: too short for a safetensors file (the header length alone "
                                              "is 8 bytes)",
                       f->size);
    uint64_t hlen = le64(f->base);
    if (hlen > f->size - 8)
        return st_fail(ctx, f, GD_ERR_FORMAT,
                       "the header length %llu runs past the end of the file (%zu bytes): truncated, or not a "
                       "safetensors file",
                       (unsigned long long)hlen, f->size);
    if (hlen > ST_MAX_HEADER)
        return st_fail(ctx, f, GD_ERR_FORMAT, "the header length %llu is over the format's limit of %u bytes",
                       (unsigned long long)hlen, ST_MAX_HEADER);
    const char *h = (const char *)f->base + 8;
    if (hlen == 0 || h[0] != '{')
        return st_fail(ctx, f, GD_ERR_FORMAT, "the header does not start with '{': not a safetensors file");
    f->data = f->base + 8 + hlen;
    f->data_size = (uint64_t)f->size - 8 - hlen;

    char err[160];
    /* the header is one object of objects (of arrays): no deeper nesting is needed */
    f->doc = gd_json_parse(h, (size_t)hlen, 4, err, sizeof err);
    if (f->doc == NULL)
        return st_fail(ctx, f, strstr(err, "out of memory") ? GD_ERR_NOMEM : GD_ERR_FORMAT,
                       "the header is not valid JSON: %s", err);
    const gd_json *root = gd_json_root(f->doc);
    if (root->kind != GD_JSON_OBJECT) return st_fail(ctx, f, GD_ERR_FORMAT, "the header is not a JSON object");

    size_t n = 0;
    for (size_t i = 0; i < root->len; i++) n += strcmp(root->keys[i], "__metadata__") != 0;
    if (n > (size_t)INT32_MAX) return st_fail(ctx, f, GD_ERR_FORMAT, "%zu tensors: too many", n);
    if (n > 0) {
        f->t = gd_calloc(n, sizeof *f->t);
        f->by_name = gd_calloc(n, sizeof *f->by_name);
        if (f->t == NULL || f->by_name == NULL)
            return st_fail(ctx, f, GD_ERR_NOMEM, "out of memory for %zu tensors", n);
    }
    int seen_meta = 0;
    for (size_t i = 0; i < root->len; i++) {
        const char *key = root->keys[i];
        gd_status st;
        if (strlen(key) != root->key_lens[i])
            return st_fail(ctx, f, GD_ERR_FORMAT, "a tensor name has a NUL byte ('%s...')", key);
        if (strcmp(key, "__metadata__") == 0) {
            if (seen_meta++) return st_fail(ctx, f, GD_ERR_FORMAT, "__metadata__ appears twice");
            st = parse_metadata(ctx, f, root->items[i]);
        } else {
            st = parse_tensor(ctx, f, key, root->items[i], &f->t[f->n]);
            f->n += st == GD_OK;
        }
        if (st != GD_OK) return st;
    }

    int *tmp = n > 0 ? gd_malloc(n * sizeof *tmp) : NULL;
    int *order = n > 0 ? gd_malloc(n * sizeof *order) : NULL;
    if (n > 0 && (tmp == NULL || order == NULL)) {
        gd_free(tmp);
        gd_free(order);
        return st_fail(ctx, f, GD_ERR_NOMEM, "out of memory for %zu tensors", n);
    }
    gd_status st = GD_OK;
    for (int i = 0; i < f->n; i++) f->by_name[i] = order[i] = i;
    sort_idx(f->by_name, tmp, f->n, f->t, name_order);
    for (int i = 1; i < f->n && st == GD_OK; i++)
        if (strcmp(f->t[f->by_name[i - 1]].name, f->t[f->by_name[i]].name) == 0)
            st = st_fail(ctx, f, GD_ERR_FORMAT, "tensor '%s' appears twice in the header", f->t[f->by_name[i]].name);
    /* The ranges, in offset order, must follow each other with neither overlap nor gap,
     * and end where the data does. */
    sort_idx(order, tmp, f->n, f->t, offset_order);
    uint64_t at = 0;
    const char *prev = NULL;
    for (int i = 0; i < f->n && st == GD_OK; i++) {
        const st_tensor *t = &f->t[order[i]];
        if (t->begin < at)
            st = st_fail(ctx, f, GD_ERR_FORMAT, "tensor '%s' [%llu, %llu) overlaps tensor '%s', which ends at %llu",
                         t->name, (unsigned long long)t->begin, (unsigned long long)t->end, prev,
                         (unsigned long long)at);
        else if (t->begin > at)
            st = st_fail(ctx, f, GD_ERR_FORMAT, "bytes [%llu, %llu) of the data, before tensor '%s', belong to no tensor",
                         (unsigned long long)at, (unsigned long long)t->begin, t->name);
        at = t->end;
        prev = t->name;
    }
    if (st == GD_OK && at != f->data_size)
        st = st_fail(ctx, f, GD_ERR_FORMAT, "the data has %llu bytes but the tensors end at byte %llu%s%s%s",
                     (unsigned long long)f->data_size, (unsigned long long)at, prev ? " (tensor '" : "",
                     prev ? prev : "", prev ? "')" : "");
    gd_free(tmp);
    gd_free(order);
    return st;
}

static gd_status st_new(gd_ctx *ctx, const char *name, gd_st_file **out)
{
    gd_st_file *f = gd_calloc(1, sizeof *f);
    if (f != NULL) f->name = gd_strdup(name);
    if (f == NULL || f->name == NULL) {
        gd_free(f);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", name);
    }
    *out = f;
    return GD_OK;
}

gd_status gd_st_open_mem(gd_ctx *ctx, const char *name, const void *data, size_t n, gd_st_file **out)
{
    if (out == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_st_open_mem: out is NULL");
    *out = NULL;
    if (name == NULL) name = "(memory)";
    if (data == NULL && n > 0) return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: data is NULL", name);
    if (!ST_HOST_OK) return gd_ctx_fail(ctx, GD_ERR_UNSUPPORTED, "%s: safetensors on a big-endian host", name);
    gd_st_file *f = NULL;
    gd_status st = st_new(ctx, name, &f);
    if (st != GD_OK) return st;
    f->storage = ST_BORROWED;
    f->base = data;
    f->size = n;
    st = st_parse(ctx, f);
    if (st != GD_OK) {
        gd_st_close(f);
        return st;
    }
    *out = f;
    return GD_OK;
}

/* Reads a file that cannot be mapped (a pipe, or a filesystem without mmap). A regular
 * file must yield exactly its size; other files are read to their end. */
static gd_status read_all(gd_ctx *ctx, gd_st_file *f, int fd, int regular, size_t expect)
{
    size_t cap = regular ? (expect > 0 ? expect : 1) : 1 << 16, len = 0;
    uint8_t *buf = gd_malloc(cap);
    for (;;) {
        if (buf == NULL) return st_fail(ctx, f, GD_ERR_NOMEM, "out of memory reading %zu bytes", cap);
        if (len == cap) {
            size_t c2;
            if (regular || gd_mul_size(cap, 2, &c2) != 0) break;
            uint8_t *b2 = gd_realloc(buf, c2);
            if (b2 == NULL) gd_free(buf);
            buf = b2;
            cap = c2;
            continue;
        }
        ssize_t r = read(fd, buf + len, cap - len < ((size_t)1 << 30) ? cap - len : ((size_t)1 << 30));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            gd_free(buf);
            return st_fail(ctx, f, GD_ERR_IO, "read error: %s", strerror(e));
        }
        if (r == 0) break;
        len += (size_t)r;
    }
    if (regular && len != expect) {
        gd_free(buf);
        return st_fail(ctx, f, GD_ERR_IO, "read %zu bytes of %zu: the file changed while it was read", len, expect);
    }
    f->storage = ST_OWNED;
    f->base = buf;
    f->size = len;
    return GD_OK;
}

gd_status gd_st_open(gd_ctx *ctx, const char *path, gd_st_file **out)
{
    if (out == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_st_open: out is NULL");
    *out = NULL;
    if (path == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_st_open: path is NULL");
    if (!ST_HOST_OK) return gd_ctx_fail(ctx, GD_ERR_UNSUPPORTED, "%s: safetensors on a big-endian host", path);
    gd_st_file *f = NULL;
    gd_status st = st_new(ctx, path, &f);
    if (st != GD_OK) return st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0) {
        st = st_fail(ctx, f, GD_ERR_IO, "cannot open: %s", strerror(errno));
    } else if (fstat(fd, &sb) != 0) {
        st = st_fail(ctx, f, GD_ERR_IO, "cannot stat: %s", strerror(errno));
    } else if (S_ISDIR(sb.st_mode)) {
        st = st_fail(ctx, f, GD_ERR_IO, "is a directory, not a safetensors file");
    } else if (S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > (uint64_t)PTRDIFF_MAX) {
        st = st_fail(ctx, f, GD_ERR_IO, "too large to read (%llu bytes)", (unsigned long long)sb.st_size);
    } else {
        int regular = S_ISREG(sb.st_mode);
        size_t size = regular ? (size_t)sb.st_size : 0;
        void *m = regular && size > 0 ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
        if (m != MAP_FAILED) {
            f->storage = ST_MAPPED;
            f->base = m;
            f->size = size;
        } else {
            st = read_all(ctx, f, fd, regular, size);
        }
    }
    if (fd >= 0) close(fd);
    if (st == GD_OK) st = st_parse(ctx, f);
    if (st != GD_OK) {
        gd_st_close(f);
        return st;
    }
    *out = f;
    return GD_OK;
}

int gd_st_count(const gd_st_file *f) { return f != NULL ? f->n : 0; }

const char *gd_st_name(const gd_st_file *f, int i) { return f != NULL && i >= 0 && i < f->n ? f->t[i].name : NULL; }

int gd_st_find(const gd_st_file *f, const char *name, gd_dtype *dt, int *ndim, int64_t *shape, const void **data,
               size_t *bytes)
{
    if (f == NULL || name == NULL) return 0;
    int lo = 0, hi = f->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(f->t[f->by_name[mid]].name, name);
        if (c == 0) {
            const st_tensor *t = &f->t[f->by_name[mid]];
            if (dt != NULL) *dt = t->dtype;
            if (ndim != NULL) *ndim = t->ndim;
            if (shape != NULL)
                for (int d = 0; d < t->ndim; d++) shape[d] = t->shape[d];
            if (data != NULL) *data = f->data + t->begin;
            if (bytes != NULL) *bytes = (size_t)(t->end - t->begin);
            return 1;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

const char *gd_st_metadata(const gd_st_file *f, const char *key)
{
    if (f == NULL || key == NULL) return NULL;
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_k[i], key) == 0) return f->meta_v[i];
    return NULL;
}

/* ---- writing ------------------------------------------------------------------------- */

/* Checks the arguments of gd_st_write and works out each tensor's byte count. */
static gd_status check_entries(gd_ctx *ctx, const char *path, const gd_st_entry *e, int n, const char *const *mk,
                               const char *const *mv, int n_meta, size_t *bytes)
{
    for (int i = 0; i < n; i++) {
        const char *name = e[i].name;
        if (name == NULL || name[0] == '\0')
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: tensor %d has no name", path, i);
        if (!utf8_ok((const unsigned char *)name, strlen(name)))
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: tensor %d: the name is not valid UTF-8", path, i);
        if (strcmp(name, "__metadata__") == 0)
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: tensor %d: '__metadata__' is reserved for the metadata", path, i);
        if (st_dtype_name(e[i].dtype) == NULL)
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: tensor '%s': unknown dtype %d", path, name, (int)e[i].dtype);
        if (e[i].ndim < 0 || e[i].ndim > GD_MAX_DIMS)
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: tensor '%s': ndim %d is outside 0..%d", path, name, e[i].ndim,
                               GD_MAX_DIMS);
        for (int d = 0; d < e[i].ndim; d++)
            if (e[i].shape[d] < 0)
                return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: tensor '%s': dim %d is %lld", path, name, d,
                                   (long long)e[i].shape[d]);
        if (gd_numel_bytes(e[i].ndim, e[i].shape, gd_dtype_size(e[i].dtype), &bytes[i]) != 0)
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: tensor '%s': the byte count of its shape overflows", path, name);
        if (e[i].data == NULL && bytes[i] > 0)
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: tensor '%s': data is NULL", path, name);
    }
    for (int i = 0; i < n_meta; i++) {
        if (mk[i] == NULL || mv[i] == NULL)
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: metadata entry %d has a NULL key or value", path, i);
        if (!utf8_ok((const unsigned char *)mk[i], strlen(mk[i])) || !utf8_ok((const unsigned char *)mv[i], strlen(mv[i])))
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: metadata entry '%s' is not valid UTF-8", path, mk[i]);
    }
    const char *dup;
    const char **names = n > 0 ? gd_malloc((size_t)n * sizeof *names) : NULL;
    if (n > 0 && names == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < n; i++) names[i] = e[i].name;
    gd_status st = find_duplicate(ctx, path, names, n, &dup);
    gd_free(names);
    if (st != GD_OK) return st;
    if (dup != NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: tensor '%s' is given twice", path, dup);
    st = find_duplicate(ctx, path, mk, n_meta, &dup);
    if (st != GD_OK) return st;
    if (dup != NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: metadata key '%s' is given twice", path, dup);
    return GD_OK;
}

/* The header JSON, padded with spaces to a multiple of 8 bytes (so that the data starts
 * 8-aligned in the file), in o. */
static gd_status build_header(gd_ctx *ctx, const char *path, const gd_st_entry *e, int n, const size_t *bytes,
                              const char *const *mk, const char *const *mv, int n_meta, gd_json_out *o)
{
    gd_json_begin_object(o);
    if (n_meta > 0) {
        gd_json_key(o, "__metadata__");
        gd_json_begin_object(o);
        for (int i = 0; i < n_meta; i++) {
            gd_json_key(o, mk[i]);
            gd_json_cstring(o, mv[i]);
        }
        gd_json_end_object(o);
    }
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        gd_json_key(o, e[i].name);
        gd_json_begin_object(o);
        gd_json_key(o, "dtype");
        gd_json_cstring(o, st_dtype_name(e[i].dtype));
        gd_json_key(o, "shape");
        gd_json_begin_array(o);
        for (int d = 0; d < e[i].ndim; d++) gd_json_int(o, e[i].shape[d]);
        gd_json_end_array(o);
        gd_json_key(o, "data_offsets");
        gd_json_begin_array(o);
        gd_json_int(o, (int64_t)at);
        uint64_t end;
        if (__builtin_add_overflow(at, (uint64_t)bytes[i], &end) || end > (uint64_t)INT64_MAX)
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: tensor '%s': the file would be over 2^63 bytes", path,
                               e[i].name);
        at = end;
        gd_json_int(o, (int64_t)at);
        gd_json_end_array(o);
        gd_json_end_object(o);
    }
    gd_json_end_object(o);
    /* padding after the closing brace: JSON allows trailing whitespace, and the format
     * names spaces as the padding */
    while (!o->failed && o->len % 8 != 0) gd_json_raw(o, " ", 1);
    if (o->failed) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory for the header", path);
    if (o->len > ST_MAX_HEADER)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: the header would be %zu bytes, over the format's limit of %u", path,
                           o->len, ST_MAX_HEADER);
    return GD_OK;
}

gd_status gd_st_write(gd_ctx *ctx, const char *path, const gd_st_entry *entries, int n, const char *const *meta_keys,
                      const char *const *meta_values, int n_meta)
{
    if (path == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_st_write: path is NULL");
    if (n < 0 || (n > 0 && entries == NULL))
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: %d tensors given%s", path, n, n > 0 ? " with NULL entries" : "");
    if (n_meta < 0 || (n_meta > 0 && (meta_keys == NULL || meta_values == NULL)))
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: %d metadata entries given%s", path, n_meta,
                           n_meta > 0 ? " with NULL keys or values" : "");
    if (!ST_HOST_OK) return gd_ctx_fail(ctx, GD_ERR_UNSUPPORTED, "%s: safetensors on a big-endian host", path);
    size_t *bytes = n > 0 ? gd_malloc((size_t)n * sizeof *bytes) : NULL;
    if (n > 0 && bytes == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", path);
    gd_json_out o = {0};
    gd_status st = check_entries(ctx, path, entries, n, meta_keys, meta_values, n_meta, bytes);
    if (st == GD_OK) st = build_header(ctx, path, entries, n, bytes, meta_keys, meta_values, n_meta, &o);
    gd_atomic_file af = {.fd = -1};
    if (st == GD_OK) st = gd_atomic_open(ctx, path, &af);
    if (st == GD_OK) {
        uint8_t len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)o.len >> (8 * i));
        st = gd_atomic_write(ctx, &af, len8, 8, "the header");
        if (st == GD_OK) st = gd_atomic_write(ctx, &af, o.buf, o.len, "the header");
        for (int i = 0; i < n && st == GD_OK; i++) {
            char what[300];
            snprintf(what, sizeof what, "tensor '%s'", entries[i].name);
            st = gd_atomic_write(ctx, &af, entries[i].data, bytes[i], what);
        }
        if (st == GD_OK) st = gd_atomic_commit(ctx, &af);
        else gd_atomic_abort(&af);
    }
    gd_json_out_free(&o);
    gd_free(bytes);
    return st;
}
