/* trace_read.c — a trace file back into memory (see trace.h).
 *
 * The file is walked at the top level by a small scanner that finds where each value
 * ends (strings with their escapes, brackets matched); each event, and each member of
 * the top-level object, is then checked and read by the JSON parser of src/io/json.h.
 * So memory stays proportional to one event, and every byte of the file is still held to
 * the JSON grammar. */
#include "trace.h"

#include "alloc.h"
#include "checked.h"
#include "io/json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- strings the trace keeps ------------------------------------------------------------ */

typedef struct gd_trace_arena {
    struct gd_trace_arena *next;
    size_t used, cap;
    char data[];
} arena;

static const char *keep(gd_trace *t, const char *s)
{
    size_t n = strlen(s) + 1;
    arena *a = t->arena;
    if (a == NULL || a->cap - a->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        arena *b = gd_malloc(sizeof *b + cap);
        if (b == NULL) return NULL;
        b->next = a;
        b->used = 0;
        b->cap = cap;
        t->arena = a = b;
    }
    char *p = a->data + a->used;
    memcpy(p, s, n);
    a->used += n;
    return p;
}

void gd_trace_free(gd_trace *t)
{
    if (t == NULL) return;
    for (arena *a = t->arena, *next; a != NULL; a = next) {
        next = a->next;
        gd_free(a);
    }
    gd_free(t->spans);
    gd_free(t->counters);
    gd_free(t->backends);
    gd_free(t->programs);
    gd_free(t);
}

/* ---- the reader's state ------------------------------------------------------------------ */

typedef struct reader {
    const char *s;
    size_t n, at;
    const char *file;
    char *err;
    size_t cap;
    gd_status st;
    gd_trace *t;
    size_t cap_spans, cap_counters;
    int64_t events; /* elements of traceEvents seen */
} reader;

static size_t line_of(const char *s, size_t off)
{
    size_t line = 1;
    for (size_t i = 0; i < off; i++) line += s[i] == '\n';
    return line;
}

/* Records the first failure, at byte `off` of the file. */
static int fail_at(reader *r, size_t off, gd_status st, const char *fmt, ...)
{
    if (r->st != GD_OK) return -1;
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->cap, "%s:%zu: %s", r->file, line_of(r->s, off < r->n ? off : r->n), what);
    r->st = st;
    return -1;
}

static int oom(reader *r) { return fail_at(r, r->at, GD_ERR_NOMEM, "out of memory reading the trace"); }

static void skip_ws(reader *r)
{
    while (r->at < r->n && (r->s[r->at] == ' ' || r->s[r->at] == '\t' || r->s[r->at] == '\n' || r->s[r->at] == '\r'))
        r->at++;
}

/* Where the JSON value starting at r->at ends (one past it); 0 with a failure recorded
 * when the brackets or strings do not close. The parser checks the rest. */
static size_t value_end(reader *r)
{
    enum { MAX_DEPTH = 256 };
    char closers[MAX_DEPTH];
    int depth = 0;
    size_t i = r->at;
    if (i >= r->n) {
        fail_at(r, i, GD_ERR_FORMAT, "a value was expected, the file ended");
        return 0;
    }
    do {
        char c = r->s[i];
        if (c == '"') {
            for (i++; i < r->n && r->s[i] != '"'; i++)
                if (r->s[i] == '\\') i++;
            if (i >= r->n) {
        fail_at(r, r->at, GD_ERR_FORMAT, "a string does not end");
        return 0;
    }
            i++;
        } else if (c == '{' || c == '[') {
            if (depth == MAX_DEPTH) {
        fail_at(r, i, GD_ERR_FORMAT, "nested deeper than %d", MAX_DEPTH);
        return 0;
    }
            closers[depth++] = c == '{' ? '}' : ']';
            i++;
        } else if (c == '}' || c == ']') {
            if (depth == 0 || closers[depth - 1] != c)
                {
        fail_at(r, i, GD_ERR_FORMAT, "'%c' does not close what is open", c);
        return 0;
    }
            depth--;
            i++;
        } else if (depth == 0) {
            /* a number or a literal: up to the next delimiter */
            while (i < r->n && !strchr(",]}: \t\r\n", r->s[i])) i++;
            if (i == r->at) {
        fail_at(r, i, GD_ERR_FORMAT, "a value was expected, found '%c'", c);
        return 0;
    }
        } else {
            i++;
        }
    } while (depth > 0 && i < r->n);
    if (depth > 0) {
        fail_at(r, r->at, GD_ERR_FORMAT, "'%c' is never closed", closers[0] == '}' ? '{' : '[');
        return 0;
    }
    return i;
}

/* Parses the value at [r->at, end) with the full JSON parser; NULL with a failure
 * recorded (at the right line) when it is not JSON. */
static gd_json_doc *parse_value(reader *r, size_t end)
{
    char msg[300];
    gd_json_doc *d = gd_json_parse(r->s + r->at, end - r->at, 64, msg, sizeof msg);
    if (d != NULL) return d;
    size_t b = 0;
    int k = 0;
    if (strstr(msg, "out of memory") != NULL) {
        oom(r);
    } else if (sscanf(msg, "at byte %zu: %n", &b, &k) == 1 && k > 0) {
        fail_at(r, r->at + b, GD_ERR_FORMAT, "malformed JSON (%s)", msg + k);
    } else {
        fail_at(r, r->at, GD_ERR_FORMAT, "malformed JSON (%s)", msg);
    }
    return NULL;
}

/* ---- events ------------------------------------------------------------------------------- */

static int get_i32(const gd_json *o, const char *key, int32_t def)
{
    int64_t v;
    return gd_json_get_int(o, key, &v) && v >= INT32_MIN && v <= INT32_MAX ? (int32_t)v : def;
}

static double get_num(const gd_json *o, const char *key, double def)
{
    double v;
    return gd_json_get_num(o, key, &v) && isfinite(v) ? v : def;
}

/* A time in microseconds as nanoseconds (0 when absent and not required); -1 with a
 * failure when it is not one. */
static int to_ns(reader *r, const gd_json *ev, const char *key, int required, int64_t *ns, size_t at)
{
    const gd_json *v = gd_json_get(ev, key);
    *ns = 0;
    if (v == NULL && !required) return 0;
    if (v == NULL || v->kind != GD_JSON_NUMBER || !isfinite(v->num) || fabs(v->num) > 9e12)
        return fail_at(r, at, GD_ERR_FORMAT, "event %lld: \"%s\" %s", (long long)r->events, key,
                       v == NULL ? "is missing" : "is not a time in microseconds");
    *ns = llround(v->num * 1000.0);
    return 0;
}

static const char *keep_str(reader *r, const gd_json *o, const char *key)
{
    const char *s = gd_json_get_str(o, key);
    if (s == NULL) return NULL;
    const char *k = keep(r->t, s);
    if (k == NULL) oom(r);
    return k;
}

static int add_span(reader *r, const gd_json *ev, size_t at)
{
    gd_trace *t = r->t;
    const char *name = gd_json_get_str(ev, "name");
    if (name == NULL)
        return fail_at(r, at, GD_ERR_FORMAT, "event %lld: a complete event (\"ph\": \"X\") without a \"name\" string",
                       (long long)r->events);
    gd_trace_span s = {.program = -1, .run = -1, .node = -1, .segment = -1, .bytes = -1, .flops = -1, .n_nodes = -1};
    if (to_ns(r, ev, "ts", 1, &s.ts, at) != 0 || to_ns(r, ev, "dur", 0, &s.dur, at) != 0) return -1;
    if (s.dur < 0) return fail_at(r, at, GD_ERR_FORMAT, "event %lld ('%s'): negative duration", (long long)r->events, name);
    s.pid = get_i32(ev, "pid", 0);
    s.tid = get_i32(ev, "tid", 0);
    if ((s.name = keep(t, name)) == NULL) return oom(r);
    const char *cat = gd_json_get_str(ev, "cat");
    if ((s.cat = keep(t, cat != NULL ? cat : "")) == NULL) return oom(r);
    const gd_json *a = gd_json_get(ev, "args");
    if (a != NULL && a->kind == GD_JSON_OBJECT) {
        s.program = get_i32(a, "program", -1);
        s.run = get_i32(a, "run", -1);
        s.node = get_i32(a, "node", -1);
        s.segment = get_i32(a, "segment", -1);
        s.op = keep_str(r, a, "op");
        s.label = keep_str(r, a, "label");
        s.backend = keep_str(r, a, "backend");
        s.shapes = keep_str(r, a, "shapes");
        s.dtype = keep_str(r, a, "dtype");
        s.bytes = get_num(a, "bytes", -1);
        s.flops = get_num(a, "flops", -1);
        const gd_json *nodes = gd_json_get(a, "nodes");
        if (nodes != NULL && nodes->kind == GD_JSON_ARRAY) s.n_nodes = nodes->len > INT32_MAX ? INT32_MAX : (int32_t)nodes->len;
        if (r->st != GD_OK) return -1;
    }
    if (t->n_spans == r->cap_spans) {
        size_t c = r->cap_spans ? r->cap_spans * 2 : 1024, bytes;
        gd_trace_span *x = gd_mul_size(c, sizeof *x, &bytes) == 0 ? gd_realloc(t->spans, bytes) : NULL;
        if (x == NULL) return oom(r);
        t->spans = x;
        r->cap_spans = c;
    }
    t->spans[t->n_spans++] = s;
    return 0;
}

static int add_counter(reader *r, const gd_json *ev, size_t at)
{
    gd_trace *t = r->t;
    const char *name = gd_json_get_str(ev, "name");
    if (name == NULL)
        return fail_at(r, at, GD_ERR_FORMAT, "event %lld: a counter (\"ph\": \"C\") without a \"name\" string",
                       (long long)r->events);
    gd_trace_counter c = {.pid = get_i32(ev, "pid", 0), .value = NAN};
    if (to_ns(r, ev, "ts", 1, &c.ts, at) != 0) return -1;
    const gd_json *a = gd_json_get(ev, "args");
    for (size_t k = 0; a != NULL && a->kind == GD_JSON_OBJECT && k < a->len; k++)
        if (a->items[k]->kind == GD_JSON_NUMBER) {
            c.value = a->items[k]->num;
            break;
        }
    if ((c.name = keep(t, name)) == NULL) return oom(r);
    if (t->n_counters == r->cap_counters) {
        size_t n = r->cap_counters ? r->cap_counters * 2 : 256, bytes;
        gd_trace_counter *x = gd_mul_size(n, sizeof *x, &bytes) == 0 ? gd_realloc(t->counters, bytes) : NULL;
        if (x == NULL) return oom(r);
        t->counters = x;
        r->cap_counters = n;
    }
    t->counters[t->n_counters++] = c;
    return 0;
}

/* The event at r->at (one element of the traceEvents array). */
static int read_event(reader *r)
{
    size_t at = r->at, end = value_end(r);
    if (end == 0) return -1;
    if (r->s[at] != '{') return fail_at(r, at, GD_ERR_FORMAT, "event %lld is not an object", (long long)r->events);
    gd_json_doc *d = parse_value(r, end);
    if (d == NULL) return -1;
    const gd_json *ev = gd_json_root(d);
    const char *ph = gd_json_get_str(ev, "ph");
    int rc = 0;
    if (ph == NULL) rc = fail_at(r, at, GD_ERR_FORMAT, "event %lld has no \"ph\" (phase) string", (long long)r->events);
    else if (strcmp(ph, "X") == 0) rc = add_span(r, ev, at);
    else if (strcmp(ph, "C") == 0) rc = add_counter(r, ev, at);
    /* metadata, instants, flows, begin/end pairs: not what a summary reads */
    gd_json_free(d);
    r->at = end;
    r->events++;
    return rc;
}

/* The array at r->at: each element through read_event. */
static int read_events(reader *r)
{
    if (r->at >= r->n || r->s[r->at] != '[')
        return fail_at(r, r->at, GD_ERR_FORMAT, "\"traceEvents\" is not an array");
    r->at++;
    skip_ws(r);
    if (r->at < r->n && r->s[r->at] == ']') {
        r->at++;
        return 0;
    }
    for (;;) {
        skip_ws(r);
        if (read_event(r) != 0) return -1;
        skip_ws(r);
        if (r->at >= r->n) return fail_at(r, r->at, GD_ERR_FORMAT, "the event array is not closed (a truncated file?)");
        char c = r->s[r->at++];
        if (c == ']') return 0;
        if (c != ',') return fail_at(r, r->at - 1, GD_ERR_FORMAT, "',' or ']' expected after an event, found '%c'", c);
    }
}

/* gradus's "otherData": backends with their peaks, programs, what was dropped. */
static int read_other(reader *r, const gd_json *o)
{
    gd_trace *t = r->t;
    if (o->kind != GD_JSON_OBJECT) return 0; /* another tool's: not ours to read */
    t->has_other = 1;
    t->dropped = get_num(o, "dropped_events", 0);
    t->unmatched = get_num(o, "unmatched_device_spans", 0);
    t->clamped = get_num(o, "clamped_device_spans", 0);
    const gd_json *bs = gd_json_get(o, "backends");
    if (bs != NULL && bs->kind == GD_JSON_ARRAY && bs->len > 0 && bs->len < 4096) {
        t->backends = gd_calloc(bs->len, sizeof *t->backends);
        if (t->backends == NULL) return oom(r);
        for (size_t i = 0; i < bs->len; i++) {
            const gd_json *b = bs->items[i];
            gd_trace_backend *x = &t->backends[t->n_backends];
            if (b->kind != GD_JSON_OBJECT || gd_json_get_str(b, "name") == NULL) continue;
            x->name = keep_str(r, b, "name");
            x->spans = keep_str(r, b, "spans");
            x->pid = get_i32(b, "pid", -1);
            const gd_json *pk = gd_json_get(b, "peak");
            for (int dt = 0; pk != NULL && pk->kind == GD_JSON_OBJECT && dt < GDP_DTYPE_COUNT; dt++) {
                const gd_json *p = gd_json_get(pk, gd_dtype_name((gd_dtype)dt));
                if (p == NULL || p->kind != GD_JSON_OBJECT) continue;
                x->peak_flops[dt] = fmax(get_num(p, "flop_per_s", 0), 0);
                x->peak_bw[dt] = fmax(get_num(p, "bytes_per_s", 0), 0);
            }
            if (r->st != GD_OK) return -1;
            t->n_backends++;
        }
    }
    const gd_json *ps = gd_json_get(o, "programs");
    if (ps != NULL && ps->kind == GD_JSON_ARRAY && ps->len > 0 && ps->len < (1u << 20)) {
        t->programs = gd_calloc(ps->len, sizeof *t->programs);
        if (t->programs == NULL) return oom(r);
        for (size_t i = 0; i < ps->len; i++) {
            const gd_json *p = ps->items[i];
            if (p->kind != GD_JSON_OBJECT) continue;
            gd_trace_program *x = &t->programs[t->n_programs];
            x->program = get_i32(p, "program", -1);
            x->description = keep_str(r, p, "description");
            x->nodes = get_i32(p, "nodes", -1);
            x->runs = get_i32(p, "runs", -1);
            if (r->st != GD_OK) return -1;
            t->n_programs++;
        }
    }
    return 0;
}

/* The top-level object: its members one by one. */
static int read_object(reader *r)
{
    int saw_events = 0;
    r->at++; /* '{' */
    skip_ws(r);
    if (r->at < r->n && r->s[r->at] == '}') {
        r->at++;
        return fail_at(r, r->at - 1, GD_ERR_FORMAT, "no \"traceEvents\": not a trace");
    }
    for (;;) {
        skip_ws(r);
        if (r->at >= r->n || r->s[r->at] != '"')
            return fail_at(r, r->at, GD_ERR_FORMAT, "a member name (a string) was expected");
        size_t kend = value_end(r);
        if (kend == 0) return -1;
        gd_json_doc *kd = parse_value(r, kend);
        if (kd == NULL) return -1;
        char key[64];
        snprintf(key, sizeof key, "%s", gd_json_root(kd)->str);
        gd_json_free(kd);
        r->at = kend;
        skip_ws(r);
        if (r->at >= r->n || r->s[r->at] != ':') return fail_at(r, r->at, GD_ERR_FORMAT, "':' expected after \"%s\"", key);
        r->at++;
        skip_ws(r);
        if (strcmp(key, "traceEvents") == 0) {
            if (read_events(r) != 0) return -1;
            saw_events = 1;
        } else {
            size_t end = value_end(r);
            if (end == 0) return -1;
            gd_json_doc *d = parse_value(r, end);
            if (d == NULL) return -1;
            int rc = strcmp(key, "otherData") == 0 ? read_other(r, gd_json_root(d)) : 0;
            gd_json_free(d);
            if (rc != 0) return -1;
            r->at = end;
        }
        skip_ws(r);
        if (r->at >= r->n) return fail_at(r, r->at, GD_ERR_FORMAT, "the top-level object is not closed (a truncated file?)");
        char c = r->s[r->at++];
        if (c == '}') break;
        if (c != ',') return fail_at(r, r->at - 1, GD_ERR_FORMAT, "',' or '}' expected, found '%c'", c);
    }
    if (!saw_events) return fail_at(r, 0, GD_ERR_FORMAT, "no \"traceEvents\": not a trace");
    return 0;
}

gd_status gd_trace_parse(const char *text, size_t n, const char *file, gd_trace **out, char *err, size_t cap)
{
    *out = NULL;
    reader r = {.s = text, .n = n, .file = file != NULL ? file : "trace", .err = err, .cap = cap, .st = GD_OK};
    if (cap > 0) err[0] = '\0';
    r.t = gd_calloc(1, sizeof *r.t);
    if (r.t == NULL) {
        snprintf(err, cap, "%s: out of memory reading the trace", r.file);
        return GD_ERR_NOMEM;
    }
    if (n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) r.at = 3; /* a byte-order mark */
    skip_ws(&r);
    if (r.at >= n) fail_at(&r, r.at, GD_ERR_FORMAT, "empty file: not a trace");
    else if (text[r.at] == '{') read_object(&r);
    else if (text[r.at] == '[') read_events(&r);
    else fail_at(&r, r.at, GD_ERR_FORMAT, "not a trace: a JSON object or array was expected, found '%c'", text[r.at]);
    if (r.st == GD_OK) {
        skip_ws(&r);
        if (r.at < n) fail_at(&r, r.at, GD_ERR_FORMAT, "text after the end of the trace");
    }
    if (r.st != GD_OK) {
        gd_trace_free(r.t);
        return r.st;
    }
    *out = r.t;
    return GD_OK;
}

gd_status gd_read_file(const char *path, char **text, size_t *n, char *err, size_t cap)
{
    *text = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, cap, "%s: cannot open: %s", path, strerror(errno));
        return GD_ERR_IO;
    }
    size_t len = 0, c = 1 << 16;
    char *buf = gd_malloc(c);
    gd_status st = buf != NULL ? GD_OK : GD_ERR_NOMEM;
    while (st == GD_OK) {
        if (c - len < 2) {
            char *b = c < SIZE_MAX / 2 ? gd_realloc(buf, c * 2) : NULL;
            if (b == NULL) {
                st = GD_ERR_NOMEM;
                break;
            }
            buf = b;
            c *= 2;
        }
        size_t got = fread(buf + len, 1, c - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    int saved = errno;
    fclose(f);
    if (st == GD_OK && bad) {
        snprintf(err, cap, "%s: cannot read: %s", path, strerror(saved ? saved : EIO));
        st = GD_ERR_IO;
    } else if (st == GD_ERR_NOMEM) {
        snprintf(err, cap, "%s: out of memory reading it", path);
    }
    if (st != GD_OK) {
        gd_free(buf);
        return st;
    }
    buf[len] = '\0';
    *text = buf;
    *n = len;
    return GD_OK;
}

gd_status gd_trace_load(const char *path, gd_trace **out, char *err, size_t cap)
{
    *out = NULL;
    char *text;
    size_t n;
    gd_status st = gd_read_file(path, &text, &n, err, cap);
    if (st != GD_OK) return st;
    st = gd_trace_parse(text, n, path, out, err, cap);
    gd_free(text);
    return st;
}
