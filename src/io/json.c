/* json.c — see json.h. */
#include "json.h"

#include "alloc.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the arena: every node and string of a document, freed at once ------------------ */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} chunk;

struct gd_json_doc {
    chunk *chunks;
    gd_json *root;
};

static void *arena_alloc(gd_json_doc *d, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    chunk *c = d->chunks;
    if (c == NULL || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        c = gd_malloc(sizeof *c + cap);
        if (c == NULL) return NULL;
        c->next = d->chunks;
        c->used = 0;
        c->cap = cap;
        d->chunks = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

void gd_json_free(gd_json_doc *d)
{
    if (d == NULL) return;
    for (chunk *c = d->chunks, *next; c != NULL; c = next) {
        next = c->next;
        gd_free(c);
    }
    gd_free(d);
}

const gd_json *gd_json_root(const gd_json_doc *d) { return d != NULL ? d->root : NULL; }

/* ---- the parser ------------------------------------------------------------------------ */

typedef struct parser {
    const char *s;
    size_t n, at;
    int depth, max_depth;
    gd_json_doc *doc;
    char *err;
    size_t cap;
    int failed;
} parser;

static gd_json *fail(parser *p, const char *what)
{
    if (!p->failed) {
        snprintf(p->err, p->cap, "at byte %zu: %s", p->at, what);
        p->failed = 1;
    }
    return NULL;
}

static void skip_ws(parser *p)
{
    while (p->at < p->n && (p->s[p->at] == ' ' || p->s[p->at] == '\t' || p->s[p->at] == '\n' || p->s[p->at] == '\r'))
        p->at++;
}

static gd_json *node(parser *p, gd_json_kind kind)
{
    gd_json *j = arena_alloc(p->doc, sizeof *j);
    if (j == NULL) return fail(p, "out of memory");
    memset(j, 0, sizeof *j);
    j->kind = kind;
    return j;
}

static int hex4(parser *p, unsigned *out)
{
    if (p->n - p->at < 4) return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->at + (size_t)k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    p->at += 4;
    *out = v;
    return 0;
}

static size_t put_utf8(unsigned char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of a valid UTF-8 sequence starting at s (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) len = 2, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, min = 0x10000;
    else return 0;
    if (len > n) return 0;
    unsigned cp = c & (0x7F >> len);
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

/* A string at p->at (which is at the opening quote); the decoded bytes go in the arena.
 * Decoded text is never longer than its source, so the source length bounds it. */
static const char *string(parser *p, size_t *len)
{
    size_t start = ++p->at, end = start;
    while (end < p->n && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->n) {
        fail(p, "an unterminated string");
        return NULL;
    }
    unsigned char *o = arena_alloc(p->doc, end - start + 1);
    if (o == NULL) {
        fail(p, "out of memory");
        return NULL;
    }
    size_t k = 0;
    while (p->at < end) {
        unsigned char c = (unsigned char)p->s[p->at];
        if (c < 0x20) {
            fail(p, "a control character in a string (escape it)");
            return NULL;
        }
        if (c != '\\') {
            size_t l = utf8_len((const unsigned char *)p->s + p->at, end - p->at);
            if (l == 0) {
                fail(p, "invalid UTF-8 in a string");
                return NULL;
            }
            memcpy(o + k, p->s + p->at, l);
            k += l;
            p->at += l;
            continue;
        }
        p->at++;
        char e = p->s[p->at++];
        unsigned cp;
        switch (e) {
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case '/': o[k++] = '/'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'u':
            if (hex4(p, &cp) != 0) {
                fail(p, "a \\u escape needs 4 hex digits");
                return NULL;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate: its low half must follow */
                unsigned lo;
                if (p->at + 2 > end || p->s[p->at] != '\\' || p->s[p->at + 1] != 'u' || (p->at += 2, hex4(p, &lo)) != 0 ||
                    lo < 0xDC00 || lo > 0xDFFF) {
                    fail(p, "a high surrogate \\u escape without its low half");
                    return NULL;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                fail(p, "a lone low surrogate \\u escape");
                return NULL;
            }
            k += put_utf8(o + k, cp);
            break;
        default: fail(p, "an unknown escape in a string"); return NULL;
        }
    }
    p->at = end + 1;
    o[k] = '\0';
    *len = k;
    return (const char *)o;
}

static gd_json *number(parser *p)
{
    size_t start = p->at;
    int integral = 1;
    if (p->s[p->at] == '-') p->at++;
    if (p->at >= p->n || p->s[p->at] < '0' || p->s[p->at] > '9') return fail(p, "a digit");
    if (p->s[p->at] == '0') p->at++;
    else
        while (p->at < p->n && p->s[p->at] >= '0' && p->s[p->at] <= '9') p->at++;
    if (p->at < p->n && p->s[p->at] == '.') {
        integral = 0;
        p->at++;
        if (p->at >= p->n || p->s[p->at] < '0' || p->s[p->at] > '9') return fail(p, "a digit after the decimal point");
        while (p->at < p->n && p->s[p->at] >= '0' && p->s[p->at] <= '9') p->at++;
    }
    if (p->at < p->n && (p->s[p->at] == 'e' || p->s[p->at] == 'E')) {
        integral = 0;
        p->at++;
        if (p->at < p->n && (p->s[p->at] == '+' || p->s[p->at] == '-')) p->at++;
        if (p->at >= p->n || p->s[p->at] < '0' || p->s[p->at] > '9') return fail(p, "a digit in the exponent");
        while (p->at < p->n && p->s[p->at] >= '0' && p->s[p->at] <= '9') p->at++;
    }
    char buf[64];
    size_t len = p->at - start;
    gd_json *j = node(p, GD_JSON_NUMBER);
    if (j == NULL) return NULL;
    if (len >= sizeof buf) { /* a long literal: strtod on a NUL-terminated copy in the arena */
        char *c = arena_alloc(p->doc, len + 1);
        if (c == NULL) return fail(p, "out of memory");
        memcpy(c, p->s + start, len);
        c[len] = '\0';
        j->num = strtod(c, NULL);
    } else {
        memcpy(buf, p->s + start, len);
        buf[len] = '\0';
        j->num = strtod(buf, NULL);
        if (integral) {
            char *end;
            long long v = strtoll(buf, &end, 10);
            if (*end == '\0' && !(v == LLONG_MAX || v == LLONG_MIN)) {
                j->is_int = 1;
                j->i = v;
            }
        }
    }
    return j;
}

static gd_json *value(parser *p);

/* Items of an array or object: collected in a temporary list, then copied to the arena. */
typedef struct list {
    gd_json **v;
    const char **k;
    size_t *kl;
    size_t n, cap;
} list;

static int list_push(list *l, gd_json *v, const char *k, size_t kl)
{
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 8;
        gd_json **nv = gd_realloc(l->v, c * sizeof *nv);
        if (nv == NULL) return -1;
        l->v = nv;
        const char **nk = gd_realloc(l->k, c * sizeof *nk);
        if (nk == NULL) return -1;
        l->k = nk;
        size_t *nkl = gd_realloc(l->kl, c * sizeof *nkl);
        if (nkl == NULL) return -1;
        l->kl = nkl;
        l->cap = c;
    }
    l->v[l->n] = v;
    l->k[l->n] = k;
    l->kl[l->n] = kl;
    l->n++;
    return 0;
}

static void list_free(list *l)
{
    gd_free(l->v);
    gd_free(l->k);
    gd_free(l->kl);
}

static gd_json *container(parser *p, int object)
{
    if (++p->depth > p->max_depth) return fail(p, "nesting deeper than allowed");
    p->at++; /* [ or { */
    list l = {0};
    gd_json *j = node(p, object ? GD_JSON_OBJECT : GD_JSON_ARRAY);
    char close = object ? '}' : ']';
    skip_ws(p);
    if (j != NULL && p->at < p->n && p->s[p->at] == close) {
        p->at++;
    } else {
        while (j != NULL) {
            const char *key = NULL;
            size_t kl = 0;
            skip_ws(p);
            if (object) {
                if (p->at >= p->n || p->s[p->at] != '"') {
                    j = fail(p, "a member name in quotes");
                    break;
                }
                if ((key = string(p, &kl)) == NULL) {
                    j = NULL;
                    break;
                }
                skip_ws(p);
                if (p->at >= p->n || p->s[p->at] != ':') {
                    j = fail(p, "':' after a member name");
                    break;
                }
                p->at++;
            }
            gd_json *v = value(p);
            if (v == NULL || list_push(&l, v, key, kl) != 0) {
                j = v == NULL ? NULL : fail(p, "out of memory");
                break;
            }
            skip_ws(p);
            if (p->at < p->n && p->s[p->at] == ',') {
                p->at++;
                continue;
            }
            if (p->at < p->n && p->s[p->at] == close) {
                p->at++;
                break;
            }
            j = fail(p, object ? "',' or '}'" : "',' or ']'");
        }
    }
    if (j != NULL && l.n > 0) {
        j->len = l.n;
        j->items = arena_alloc(p->doc, l.n * sizeof *j->items);
        if (object) {
            j->keys = arena_alloc(p->doc, l.n * sizeof *j->keys);
            j->key_lens = arena_alloc(p->doc, l.n * sizeof *j->key_lens);
        }
        if (j->items == NULL || (object && (j->keys == NULL || j->key_lens == NULL))) {
            j = fail(p, "out of memory");
        } else {
            memcpy(j->items, l.v, l.n * sizeof *j->items);
            if (object) {
                memcpy(j->keys, l.k, l.n * sizeof *j->keys);
                memcpy(j->key_lens, l.kl, l.n * sizeof *j->key_lens);
            }
        }
    }
    list_free(&l);
    p->depth--;
    return j;
}

static int literal(parser *p, const char *word)
{
    size_t n = strlen(word);
    if (p->n - p->at < n || memcmp(p->s + p->at, word, n) != 0) return 0;
    p->at += n;
    return 1;
}

static gd_json *value(parser *p)
{
    skip_ws(p);
    if (p->at >= p->n) return fail(p, "a value, found the end of the text");
    char c = p->s[p->at];
    if (c == '{') return container(p, 1);
    if (c == '[') return container(p, 0);
    if (c == '"') {
        gd_json *j = node(p, GD_JSON_STRING);
        if (j != NULL && (j->str = string(p, &j->len)) == NULL) return NULL;
        return j;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number(p);
    if (literal(p, "true")) return node(p, GD_JSON_TRUE);
    if (literal(p, "false")) return node(p, GD_JSON_FALSE);
    if (literal(p, "null")) return node(p, GD_JSON_NULL);
    return fail(p, "a value (object, array, string, number, true, false or null)");
}

gd_json_doc *gd_json_parse(const char *text, size_t n, int max_depth, char *err, size_t cap)
{
    char dummy[8];
    if (err == NULL || cap == 0) err = dummy, cap = sizeof dummy;
    err[0] = '\0';
    if (text == NULL && n > 0) {
        snprintf(err, cap, "no text");
        return NULL;
    }
    gd_json_doc *d = gd_calloc(1, sizeof *d);
    if (d == NULL) {
        snprintf(err, cap, "out of memory");
        return NULL;
    }
    parser p = {.s = text, .n = n, .max_depth = max_depth > 0 ? max_depth : 256, .doc = d, .err = err, .cap = cap};
    /* a UTF-8 byte order mark is tolerated, as editors write one */
    if (n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) p.at = 3;
    d->root = value(&p);
    if (d->root != NULL) {
        skip_ws(&p);
        if (p.at != p.n) d->root = fail(&p, "the end of the text after the value");
    }
    if (d->root == NULL) {
        gd_json_free(d);
        return NULL;
    }
    return d;
}

/* ---- lookups ------------------------------------------------------------------------- */

const gd_json *gd_json_get(const gd_json *obj, const char *key)
{
    if (obj == NULL || obj->kind != GD_JSON_OBJECT || key == NULL) return NULL;
    size_t kl = strlen(key);
    for (size_t i = obj->len; i-- > 0;) /* the last of duplicate members wins, as in most readers */
        if (obj->key_lens[i] == kl && memcmp(obj->keys[i], key, kl) == 0) return obj->items[i];
    return NULL;
}

int gd_json_get_int(const gd_json *obj, const char *key, int64_t *out)
{
    const gd_json *v = gd_json_get(obj, key);
    if (v == NULL || v->kind != GD_JSON_NUMBER) return 0;
    if (v->is_int) *out = v->i;
    else if (v->num == floor(v->num) && fabs(v->num) < 9e15) *out = (int64_t)v->num; /* 1e3, 2.0 */
    else return 0;
    return 1;
}

int gd_json_get_num(const gd_json *obj, const char *key, double *out)
{
    const gd_json *v = gd_json_get(obj, key);
    if (v == NULL || v->kind != GD_JSON_NUMBER) return 0;
    *out = v->num;
    return 1;
}

int gd_json_get_bool(const gd_json *obj, const char *key, int *out)
{
    const gd_json *v = gd_json_get(obj, key);
    if (v == NULL || (v->kind != GD_JSON_TRUE && v->kind != GD_JSON_FALSE)) return 0;
    *out = v->kind == GD_JSON_TRUE;
    return 1;
}

const char *gd_json_get_str(const gd_json *obj, const char *key)
{
    const gd_json *v = gd_json_get(obj, key);
    return v != NULL && v->kind == GD_JSON_STRING ? v->str : NULL;
}

/* ---- the writer ------------------------------------------------------------------------ */

static void put(gd_json_out *o, const char *s, size_t n)
{
    if (o->failed) return;
    if (o->cap - o->len <= n) {
        size_t c = o->cap ? o->cap : 256;
        while (c - o->len <= n) {
            if (c > SIZE_MAX / 2) {
                o->failed = 1;
                return;
            }
            c *= 2;
        }
        char *b = gd_realloc(o->buf, c);
        if (b == NULL) {
            o->failed = 1;
            return;
        }
        o->buf = b;
        o->cap = c;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    o->buf[o->len] = '\0';
}

/* Before a value: the comma that separates it from the previous one at this level. */
static void before_value(gd_json_out *o)
{
    if (o->after_key) {
        o->after_key = 0;
        return;
    }
    if (o->depth > 0 && o->has_items[o->depth - 1]) put(o, ",", 1);
    if (o->depth > 0) o->has_items[o->depth - 1] = 1;
}

void gd_json_out_free(gd_json_out *o)
{
    gd_free(o->buf);
    memset(o, 0, sizeof *o);
}

static void open_level(gd_json_out *o, const char *c)
{
    before_value(o);
    put(o, c, 1);
    if (o->depth >= GD_JSON_OUT_DEPTH) {
        o->failed = 1;
        return;
    }
    o->has_items[o->depth++] = 0;
}

static void close_level(gd_json_out *o, const char *c)
{
    if (o->depth > 0) o->depth--;
    put(o, c, 1);
}

void gd_json_begin_object(gd_json_out *o) { open_level(o, "{"); }
void gd_json_end_object(gd_json_out *o) { close_level(o, "}"); }
void gd_json_begin_array(gd_json_out *o) { open_level(o, "["); }
void gd_json_end_array(gd_json_out *o) { close_level(o, "]"); }

static void quoted(gd_json_out *o, const char *s, size_t n)
{
    put(o, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            esc = u;
        }
        if (esc == NULL) continue;
        put(o, s + run, i - run);
        put(o, esc, strlen(esc));
        run = i + 1;
    }
    put(o, s + run, n - run);
    put(o, "\"", 1);
}

void gd_json_key(gd_json_out *o, const char *key)
{
    before_value(o);
    quoted(o, key, strlen(key));
    put(o, ":", 1);
    o->after_key = 1;
}

void gd_json_string(gd_json_out *o, const char *s, size_t n)
{
    before_value(o);
    quoted(o, s, n);
}
void gd_json_cstring(gd_json_out *o, const char *s) { gd_json_string(o, s, strlen(s)); }

void gd_json_int(gd_json_out *o, int64_t v)
{
    char b[32];
    before_value(o);
    put(o, b, (size_t)snprintf(b, sizeof b, "%lld", (long long)v));
}

void gd_json_number(gd_json_out *o, double v)
{
    before_value(o);
    if (!isfinite(v)) {
        put(o, "null", 4);
        return;
    }
    char b[40];
    for (int prec = 6; prec <= 17; prec++) { /* the shortest that reads back exactly */
        snprintf(b, sizeof b, "%.*g", prec, v);
        if (strtod(b, NULL) == v) break;
    }
    put(o, b, strlen(b));
}

void gd_json_bool(gd_json_out *o, int v)
{
    before_value(o);
    put(o, v ? "true" : "false", v ? 4 : 5);
}

void gd_json_null(gd_json_out *o)
{
    before_value(o);
    put(o, "null", 4);
}

void gd_json_raw(gd_json_out *o, const char *s, size_t n)
{
    before_value(o);
    put(o, s, n);
}
