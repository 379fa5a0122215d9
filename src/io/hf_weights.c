/* hf_weights.c — reading a Hugging Face model directory's weights (see hf_weights.h).
 *
 * model.safetensors.index.json: {"metadata": {...}, "weight_map": {"tensor": "file", ...}}.
 * The shards are opened when a tensor in them is first asked for and stay open (mapped)
 * until the weights are closed. A shard name with a path separator, or "." or "..", is
 * refused: an index names files beside it, never elsewhere. */
#include "hf_weights.h"

#include "alloc.h"
#include "file_read.h"
#include "gradus_semantics.h"
#include "json.h"

#include <stdio.h>
#include <string.h>

#define INDEX_MAX_BYTES (64u << 20)

struct gd_hf_weights {
    char dir[1100];
    gd_st_file *single;  /* model.safetensors, or NULL with an index */
    gd_hf_index index;
    int n_open;
    const char **open_names; /* shard file names opened so far, and their files */
    gd_st_file **open_files;
};

void gd_hf_index_free(gd_hf_index *x)
{
    if (x == NULL) return;
    gd_json_free((gd_json_doc *)x->doc);
    gd_free(x->names);
    gd_free(x->files);
    memset(x, 0, sizeof *x);
}

gd_status gd_hf_index_parse(gd_ctx *ctx, const char *path, const char *text, size_t n, gd_hf_index *out)
{
    memset(out, 0, sizeof *out);
    char err[160];
    gd_json_doc *d = gd_json_parse(text, n, 16, err, sizeof err);
    if (d == NULL) return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: %s", path, err);
    out->doc = d;
    const gd_json *map = gd_json_get(gd_json_root(d), "weight_map");
    if (map == NULL || map->kind != GD_JSON_OBJECT) {
        gd_hf_index_free(out);
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: no 'weight_map' object", path);
    }
    size_t cap = map->len > 0 ? map->len : 1;
    out->names = gd_malloc(sizeof *out->names * cap);
    out->files = gd_malloc(sizeof *out->files * cap);
    if (out->names == NULL || out->files == NULL) {
        gd_hf_index_free(out);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", path);
    }
    for (size_t i = 0; i < map->len; i++) {
        const gd_json *f = map->items[i];
        if (f->kind != GD_JSON_STRING || f->len == 0 || strlen(f->str) != f->len || strchr(f->str, '/') != NULL ||
            strcmp(f->str, ".") == 0 || strcmp(f->str, "..") == 0 || strlen(map->keys[i]) != map->key_lens[i]) {
            gd_status s = gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: weight_map entry '%.100s' does not name a file beside the index",
                                      path, map->keys[i]);
            gd_hf_index_free(out);
            return s;
        }
        out->names[i] = map->keys[i];
        out->files[i] = f->str;
    }
    out->n = (int)map->len;
    return GD_OK;
}

void gd_hf_weights_close(gd_hf_weights *w)
{
    if (w == NULL) return;
    gd_st_close(w->single);
    for (int i = 0; i < w->n_open; i++) gd_st_close(w->open_files[i]);
    gd_free(w->open_names);
    gd_free(w->open_files);
    gd_hf_index_free(&w->index);
    gd_free(w);
}

gd_status gd_hf_weights_open(gd_ctx *ctx, const char *dir, gd_hf_weights **out)
{
    *out = NULL;
    gd_hf_weights *w = gd_calloc(1, sizeof *w);
    if (w == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    char path[1300];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "rb");
    gd_status s;
    if (f == NULL) { /* one file */
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        s = gd_st_open(ctx, path, &w->single);
    } else {
        fclose(f);
        char *text;
        size_t n;
        s = gd_read_whole_file(ctx, path, INDEX_MAX_BYTES, "a safetensors index", &text, &n);
        if (s == GD_OK) {
            s = gd_hf_index_parse(ctx, path, text, n, &w->index);
            gd_free(text);
        }
        if (s == GD_OK) {
            w->open_names = gd_calloc((size_t)w->index.n + 1, sizeof *w->open_names);
            w->open_files = gd_calloc((size_t)w->index.n + 1, sizeof *w->open_files);
            if (w->open_names == NULL || w->open_files == NULL) s = gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
        }
    }
    if (s != GD_OK) {
        gd_hf_weights_close(w);
        return s;
    }
    *out = w;
    return GD_OK;
}

/* The file holding `name` (opening its shard if need be): 1 and *f, *file; 0 if no file
 * has it; -1 on an error (in ctx). */
static int locate(gd_ctx *ctx, gd_hf_weights *w, const char *name, gd_st_file **f, char *file, size_t cap)
{
    if (w->single != NULL) {
        gd_dtype dt;
        int nd;
        int64_t shape[GD_MAX_DIMS];
        const void *data;
        size_t bytes;
        snprintf(file, cap, "%s/model.safetensors", w->dir);
        *f = w->single;
        return gd_st_find(w->single, name, &dt, &nd, shape, &data, &bytes) ? 1 : 0;
    }
    const char *shard = NULL;
    for (int i = 0; i < w->index.n && shard == NULL; i++)
        if (strcmp(w->index.names[i], name) == 0) shard = w->index.files[i];
    if (shard == NULL) return 0;
    snprintf(file, cap, "%s/%s", w->dir, shard);
    for (int i = 0; i < w->n_open; i++)
        if (strcmp(w->open_names[i], shard) == 0) {
            *f = w->open_files[i];
            return 1;
        }
    if (gd_st_open(ctx, file, f) != GD_OK) return -1;
    w->open_names[w->n_open] = shard;
    w->open_files[w->n_open++] = *f;
    return 1;
}

/* The scales of int8 weights t whose file holds them transposed, (in, out) as GPT-2's
 * Conv1D does: the state "<t's name>.q8_scale_in_out"; NULL for weights stored (out, in). */
static gd_tensor *in_out_scales(gd_tensor *t)
{
    char name[600];
    snprintf(name, sizeof name, "%s.q8_scale_in_out", gd_tensor_name(t));
    return gd_graph_find(gd_tensor_graph(t), name);
}

/* Finds tensor `name` (or, for "transformer.X", X): its file, dtype, shape and bytes. */
static gd_status find(gd_ctx *ctx, gd_hf_weights *w, const char *name, char *file, size_t cap, const char **key,
                      gd_dtype *dt, int *nd, int64_t *shape, const void **data, size_t *bytes)
{
    gd_st_file *f = NULL;
    *key = name;
    int got = locate(ctx, w, *key, &f, file, cap);
    if (got == 0 && strncmp(name, "transformer.", 12) == 0) got = locate(ctx, w, *key = name + 12, &f, file, cap);
    if (got < 0) return gd_ctx_status(ctx);
    if (got == 0) {
        if (w->single == NULL) snprintf(file, cap, "%s/model.safetensors.index.json", w->dir);
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: no tensor %s", file, name);
    }
    if (!gd_st_find(f, *key, dt, nd, shape, data, bytes))
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: no tensor %s (the index says it is there)", file, *key);
    return GD_OK;
}

gd_status gd_hf_weights_dtype(gd_ctx *ctx, gd_hf_weights *w, const char *name, gd_dtype *dt)
{
    char file[1400];
    const char *key;
    int nd;
    int64_t shape[GD_MAX_DIMS];
    const void *data;
    size_t bytes;
    return find(ctx, w, name, file, sizeof file, &key, dt, &nd, shape, &data, &bytes);
}

gd_status gd_hf_weights_load(gd_ctx *ctx, gd_hf_weights *w, const char *name, gd_tensor *t)
{
    char file[1400];
    const char *key;
    gd_dtype dt;
    int nd;
    int64_t shape[GD_MAX_DIMS];
    const void *data;
    size_t bytes;
    gd_status st = find(ctx, w, name, file, sizeof file, &key, &dt, &nd, shape, &data, &bytes);
    if (st != GD_OK) return st;
    /* floating tensors load into floating parameters of any width (the engine keeps bf16
     * weights as bf16; training widens them to f32 master weights), or into int8 ones,
     * quantized (gd_weights_write) */
    gd_dtype tdt = gd_tensor_dtype(t);
    int fl = dt == GD_F32 || dt == GD_F16 || dt == GD_BF16;
    int same = (dt == tdt || (fl && (tdt == GD_F32 || tdt == GD_F16 || tdt == GD_BF16 || tdt == GD_I8))) &&
               nd == gd_tensor_ndim(t);
    int flip = tdt == GD_I8 && in_out_scales(t) != NULL; /* stored (in, out), quantized as (out, in) */
    for (int k = 0; same && k < nd; k++) same = shape[k] == gd_tensor_dim(t, flip ? nd - 1 - k : k);
    if (!same) {
        char want[128];
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: tensor %s is %s with %d dims, the model wants %s", file, key,
                           gd_dtype_name(dt), nd, gd_tensor_describe(t, want, sizeof want));
    }
    return dt == tdt ? gd_tensor_write(t, data, bytes) : gd_weights_write(ctx, t, dt, data, bytes);
}

gd_status gd_weights_write(gd_ctx *ctx, gd_tensor *t, gd_dtype src_dtype, const void *src, size_t bytes)
{
    if (gd_tensor_dtype(t) != GD_I8) return gd_tensor_write_as(t, src_dtype, src, bytes);
    char sname[600];
    snprintf(sname, sizeof sname, "%s.q8_scale", gd_tensor_name(t));
    gd_tensor *flip = in_out_scales(t), *sc = flip != NULL ? flip : gd_graph_find(gd_tensor_graph(t), sname);
    int64_t rows = gd_tensor_dim(t, 0), cols = gd_tensor_dim(t, 1);
    size_t es = gd_dtype_size(src_dtype);
    if (gd_tensor_ndim(t) != 2 || sc == NULL || gd_tensor_numel(sc) != rows || es == 0 ||
        bytes != (size_t)(rows * cols) * es)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "int8 weights %s: want a 2-D i8 tensor beside its scales %s", gd_tensor_name(t),
                           sname);
    int8_t *q = gd_malloc((size_t)(rows * cols) + 1);
    float *scale = gd_malloc(sizeof *scale * (size_t)(rows + 1)), *row = gd_malloc(sizeof *row * (size_t)(cols + 1));
    if (q == NULL || scale == NULL || row == NULL) {
        gd_free(q), gd_free(scale), gd_free(row);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory quantizing %s", gd_tensor_name(t));
    }
    const unsigned char *p = src;
    for (int64_t r = 0; r < rows; r++) {
        float amax = 0;
        for (int64_t c = 0; c < cols; c++) {
            size_t i = flip != NULL ? (size_t)(c * rows + r) : (size_t)(r * cols + c); /* (in, out) in the file */
            uint16_t h = es == 2 ? (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)) : 0; /* little-endian */
            if (es == 4) memcpy(&row[c], p + 4 * i, 4);
            else row[c] = src_dtype == GD_BF16 ? gdp_bf16_to_f32(h) : gdp_f16_to_f32(h);
            amax = gdp_q8_amax(amax, row[c]);
        }
        scale[r] = gdp_q8_scale(amax);
        for (int64_t c = 0; c < cols; c++) q[r * cols + c] = gdp_q8(row[c], scale[r]);
    }
    gd_status st = gd_tensor_write(t, q, (size_t)(rows * cols));
    if (st == GD_OK) st = gd_tensor_write(sc, scale, sizeof *scale * (size_t)rows);
    gd_free(q), gd_free(scale), gd_free(row);
    return st;
}
