/* json.h — a small JSON reader and writer for the files gradus exchanges with other
 * tools: Hugging Face config.json and tokenizer.json, safetensors headers, checkpoint
 * metadata, metrics logs.
 *
 * The reader builds a tree in one arena (freed at once), checks the whole grammar of
 * RFC 8259 (strings as UTF-8 with escapes, surrogate pairs joined, numbers, nesting up to
 * a fixed depth), and on failure says at which byte and what it expected. Object members
 * keep their file order; lookups are linear (these files are small or read once).
 */
#ifndef GD_JSON_H
#define GD_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum gd_json_kind {
    GD_JSON_NULL = 0,
    GD_JSON_FALSE,
    GD_JSON_TRUE,
    GD_JSON_NUMBER,
    GD_JSON_STRING,
    GD_JSON_ARRAY,
    GD_JSON_OBJECT
} gd_json_kind;

typedef struct gd_json gd_json;
struct gd_json {
    gd_json_kind kind;
    double num;              /* NUMBER */
    int is_int;              /* NUMBER written without fraction or exponent, fits int64 */
    int64_t i;               /* NUMBER, when is_int */
    const char *str;         /* STRING: UTF-8, NUL-terminated (may contain NUL: see len) */
    size_t len;              /* STRING: bytes; ARRAY/OBJECT: items */
    gd_json **items;         /* ARRAY items, OBJECT values */
    const char **keys;       /* OBJECT keys (NUL-terminated) */
    size_t *key_lens;
};

typedef struct gd_json_doc gd_json_doc;

/* Parses `n` bytes. On failure returns NULL and writes "at byte B: what was expected"
 * into err. `max_depth` 0 means 256. */
gd_json_doc *gd_json_parse(const char *text, size_t n, int max_depth, char *err, size_t cap);
void gd_json_free(gd_json_doc *d);
const gd_json *gd_json_root(const gd_json_doc *d);

/* Member `key` of an object, or NULL (also for a non-object). */
const gd_json *gd_json_get(const gd_json *obj, const char *key);
/* Typed lookups: 1 and the value when the member exists with that type, else 0. */
int gd_json_get_int(const gd_json *obj, const char *key, int64_t *out);
int gd_json_get_num(const gd_json *obj, const char *key, double *out);
int gd_json_get_bool(const gd_json *obj, const char *key, int *out);
const char *gd_json_get_str(const gd_json *obj, const char *key); /* NULL unless a string */

/* ---- writing ---------------------------------------------------------------------------- */

/* A growing buffer; out of memory sticks in `failed` and later writes do nothing. */
#define GD_JSON_OUT_DEPTH 64
typedef struct gd_json_out {
    char *buf;        /* NUL-terminated while not failed */
    size_t len, cap;
    int failed;       /* out of memory, or nesting past GD_JSON_OUT_DEPTH */
    int depth;
    unsigned char has_items[GD_JSON_OUT_DEPTH]; /* a value was written at that level */
    int after_key;    /* the next value completes a member */
} gd_json_out;

void gd_json_out_free(gd_json_out *o);
void gd_json_begin_object(gd_json_out *o);
void gd_json_end_object(gd_json_out *o);
void gd_json_begin_array(gd_json_out *o);
void gd_json_end_array(gd_json_out *o);
void gd_json_key(gd_json_out *o, const char *key);
void gd_json_string(gd_json_out *o, const char *s, size_t n);
void gd_json_cstring(gd_json_out *o, const char *s);
void gd_json_int(gd_json_out *o, int64_t v);
/* Shortest decimal that reads back to the same double ("%.17g" trimmed); non-finite
 * values, which JSON lacks, are written as null. */
void gd_json_number(gd_json_out *o, double v);
void gd_json_bool(gd_json_out *o, int v);
void gd_json_null(gd_json_out *o);
/* Raw text (already valid JSON) appended as one value. */
void gd_json_raw(gd_json_out *o, const char *s, size_t n);

#endif
