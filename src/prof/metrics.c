/* metrics.c — a training metrics log (one JSON object per line) as columns of numbers.
 *
 * Each line is parsed on its own, so a log being appended to while it is read (a run
 * still training) reads up to its last complete line; a malformed line is refused with
 * the file and line named. Members that are numbers become columns; null is a gap (a
 * NaN loss is written as null); strings and other kinds are notes, not plotted. */
#include "trace.h"

#include "alloc.h"
#include "checked.h"
#include "io/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct cell {
    int row, col;
    double v;
} cell;

typedef struct mreader {
    gd_metrics *m;
    cell *cells;
    size_t n_cells, cap_cells;
    int cap_cols;
    char *err;
    size_t cap;
    const char *file;
    gd_status st;
} mreader;

static int mfail(mreader *r, gd_status st, size_t line, const char *fmt, ...)
{
    if (r->st != GD_OK) return -1;
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (line > 0) snprintf(r->err, r->cap, "%s:%zu: %s", r->file, line, what);
    else snprintf(r->err, r->cap, "%s: %s", r->file, what);
    r->st = st;
    return -1;
}

void gd_metrics_free(gd_metrics *m)
{
    if (m == NULL) return;
    for (int i = 0; i < m->n_cols; i++) gd_free(m->cols[i]);
    gd_free(m->cols);
    gd_free(m->values);
    gd_free(m);
}

int gd_metrics_col(const gd_metrics *m, const char *name)
{
    for (int i = 0; m != NULL && i < m->n_cols; i++)
        if (strcmp(m->cols[i], name) == 0) return i;
    return -1;
}

double gd_metrics_at(const gd_metrics *m, int row, int col)
{
    if (m == NULL || row < 0 || row >= m->n_rows || col < 0 || col >= m->n_cols) return NAN;
    return m->values[(size_t)row * (size_t)m->n_cols + (size_t)col];
}

double gd_metrics_step(const gd_metrics *m, int row)
{
    return m->step_col >= 0 ? gd_metrics_at(m, row, m->step_col) : (double)(row + 1);
}

/* Column of `name`, added when new; -1 when out of memory. */
static int column(mreader *r, const char *name)
{
    gd_metrics *m = r->m;
    int c = gd_metrics_col(m, name);
    if (c >= 0) return c;
    if (m->n_cols == r->cap_cols) {
        int n = r->cap_cols ? r->cap_cols * 2 : 16;
        char **x = n < (1 << 20) ? gd_realloc(m->cols, sizeof *x * (size_t)n) : NULL;
        if (x == NULL) return -1;
        m->cols = x;
        r->cap_cols = n;
    }
    if ((m->cols[m->n_cols] = gd_strdup(name)) == NULL) return -1;
    return m->n_cols++;
}

static int add_cell(mreader *r, int row, int col, double v)
{
    if (r->n_cells == r->cap_cells) {
        size_t n = r->cap_cells ? r->cap_cells * 2 : 1024, bytes;
        cell *x = gd_mul_size(n, sizeof *x, &bytes) == 0 ? gd_realloc(r->cells, bytes) : NULL;
        if (x == NULL) return -1;
        r->cells = x;
        r->cap_cells = n;
    }
    r->cells[r->n_cells++] = (cell){row, col, v};
    return 0;
}

/* One line (its number in `no`): a JSON object. */
static int read_line(mreader *r, const char *s, size_t n, size_t no)
{
    char msg[300];
    gd_json_doc *d = gd_json_parse(s, n, 16, msg, sizeof msg);
    if (d == NULL) {
        if (strstr(msg, "out of memory") != NULL) return mfail(r, GD_ERR_NOMEM, no, "out of memory");
        return mfail(r, GD_ERR_FORMAT, no, "not a JSON object (%s)", msg);
    }
    const gd_json *o = gd_json_root(d);
    if (o->kind != GD_JSON_OBJECT) {
        gd_json_free(d);
        return mfail(r, GD_ERR_FORMAT, no, "a JSON object ({\"step\": ..., \"loss\": ...}) was expected");
    }
    int row = r->m->n_rows;
    for (size_t k = 0; k < o->len; k++) {
        const gd_json *v = o->items[k];
        if (v->kind != GD_JSON_NUMBER && v->kind != GD_JSON_NULL) continue;
        if (o->key_lens[k] != strlen(o->keys[k])) continue; /* a name with a NUL in it: not a column */
        int c = column(r, o->keys[k]);
        if (c < 0 || add_cell(r, row, c, v->kind == GD_JSON_NUMBER ? v->num : NAN) != 0) {
            gd_json_free(d);
            return mfail(r, GD_ERR_NOMEM, no, "out of memory");
        }
    }
    gd_json_free(d);
    if (r->m->n_rows == INT32_MAX) return mfail(r, GD_ERR_FORMAT, no, "too many lines");
    r->m->n_rows++;
    return 0;
}

gd_status gd_metrics_parse(const char *text, size_t n, const char *file, gd_metrics **out, char *err, size_t cap)
{
    *out = NULL;
    mreader r = {.err = err, .cap = cap, .file = file != NULL ? file : "metrics", .st = GD_OK};
    if (cap > 0) err[0] = '\0';
    r.m = gd_calloc(1, sizeof *r.m);
    if (r.m == NULL) {
        snprintf(err, cap, "%s: out of memory", r.file);
        return GD_ERR_NOMEM;
    }
    r.m->step_col = -1;
    size_t no = 0;
    for (size_t at = 0; at < n && r.st == GD_OK;) {
        const char *nl = memchr(text + at, '\n', n - at);
        size_t end = nl != NULL ? (size_t)(nl - text) : n, len = end - at;
        no++;
        if (len > 0 && text[at + len - 1] == '\r') len--;
        size_t k = 0;
        while (k < len && (text[at + k] == ' ' || text[at + k] == '\t')) k++;
        if (k < len) read_line(&r, text + at, len, no);
        at = end + 1;
    }
    gd_metrics *m = r.m;
    int loss = gd_metrics_col(m, "loss");
    if (r.st == GD_OK && m->n_rows == 0) mfail(&r, GD_ERR_FORMAT, 0, "no metrics (the file has no lines)");
    if (r.st == GD_OK && loss < 0) {
        char have[300] = "";
        for (int i = 0; i < m->n_cols && strlen(have) < sizeof have - 40; i++)
            snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", i ? ", " : "", m->cols[i]);
        mfail(&r, GD_ERR_FORMAT, 0, "no \"loss\" column in %d lines (columns: %s)", m->n_rows, have[0] ? have : "none");
    }
    size_t cells = 0;
    if (r.st == GD_OK && gd_mul_size((size_t)m->n_rows, (size_t)m->n_cols, &cells) != 0)
        mfail(&r, GD_ERR_NOMEM, 0, "out of memory");
    if (r.st == GD_OK && (m->values = gd_malloc(sizeof *m->values * (cells ? cells : 1))) == NULL)
        mfail(&r, GD_ERR_NOMEM, 0, "out of memory");
    if (r.st == GD_OK) {
        for (size_t i = 0; i < cells; i++) m->values[i] = NAN;
        for (size_t i = 0; i < r.n_cells; i++)
            m->values[(size_t)r.cells[i].row * (size_t)m->n_cols + (size_t)r.cells[i].col] = r.cells[i].v;
        int any = 0;
        for (int row = 0; row < m->n_rows && !any; row++) any = isfinite(gd_metrics_at(m, row, loss));
        if (!any) mfail(&r, GD_ERR_FORMAT, 0, "the \"loss\" column has no finite value in %d lines", m->n_rows);
        m->step_col = gd_metrics_col(m, "step");
    }
    gd_free(r.cells);
    if (r.st != GD_OK) {
        gd_metrics_free(m);
        return r.st;
    }
    *out = m;
    return GD_OK;
}

gd_status gd_metrics_load(const char *path, gd_metrics **out, char *err, size_t cap)
{
    *out = NULL;
    char *text;
    size_t n;
    gd_status st = gd_read_file(path, &text, &n, err, cap);
    if (st != GD_OK) return st;
    st = gd_metrics_parse(text, n, path, out, err, cap);
    gd_free(text);
    return st;
}
