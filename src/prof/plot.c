/* plot.c — training curves from a metrics log as one self-contained SVG document.
 *
 * One panel per quantity, stacked, sharing the step axis: loss (with validation loss when
 * the log has it), learning rate, throughput, then any other column the log has (accuracy,
 * gradient norm, ...). Each panel has its axes, "nice" ticks (1, 2 or 5 times a power of
 * ten) with labels, a title and a legend. A series is drawn through the rows that have it
 * (validation every few hundred steps), with a mark at each point when it has few. Long
 * logs are thinned to the minimum and maximum of each pixel column, so a curve keeps its
 * spikes and the file stays small. Everything is written here: no scripts, no fonts, no
 * external references. */
#include "trace.h"

#include "alloc.h"
#include "text.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define W 960
#define LEFT 90
#define RIGHT 30
#define PANEL_H 230
#define PANEL_GAP 60
#define TOP 60
#define MAX_SERIES 4
#define MAX_PANELS 8

typedef struct out {
    char *buf;
    size_t len, cap;
    int failed;
} out;

static void put(out *o, const char *fmt, ...)
{
    if (o->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf != NULL ? o->buf + o->len : NULL, o->buf != NULL ? o->cap - o->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->failed = 1;
            return;
        }
        if (o->buf != NULL && (size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t c = o->cap ? o->cap * 2 : 1 << 16;
        while (c - o->len <= (size_t)n) c *= 2;
        char *b = gd_realloc(o->buf, c);
        if (b == NULL) {
            o->failed = 1;
            return;
        }
        o->buf = b;
        o->cap = c;
    }
}

/* Text for XML: escaped, UTF-8 only, no control characters ('?' for what cannot go). */
static void put_text(out *o, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n && i < 200;) {
        size_t l = gd_utf8_len(u + i, n - i);
        if (l == 0 || (l == 1 && u[i] < 0x20)) {
            put(o, "?");
            i++;
        } else if (u[i] == '&') {
            put(o, "&amp;"), i++;
        } else if (u[i] == '<') {
            put(o, "&lt;"), i++;
        } else if (u[i] == '>') {
            put(o, "&gt;"), i++;
        } else if (u[i] == '"') {
            put(o, "&quot;"), i++;
        } else if (u[i] == '\'') {
            put(o, "&#39;"), i++;
        } else {
            put(o, "%.*s", (int)l, s + i);
            i += l;
        }
    }
}

/* ---- which panels ------------------------------------------------------------------------- */

typedef struct panel {
    const char *title, *unit;
    int col[MAX_SERIES];
    const char *label[MAX_SERIES];
    int n;
} panel;

/* Values far beyond what training writes are left out, so every axis spans a finite range. */
static int plottable(double v) { return isfinite(v) && fabs(v) < 1e300; }

static int has_values(const gd_metrics *m, int col)
{
    for (int r = 0; col >= 0 && r < m->n_rows; r++)
        if (plottable(gd_metrics_at(m, r, col)) && plottable(gd_metrics_step(m, r))) return 1;
    return 0;
}

static void add_series(const gd_metrics *m, panel *p, const char *col, const char *label, unsigned char *used)
{
    int c = gd_metrics_col(m, col);
    if (c < 0 || used[c] || p->n == MAX_SERIES) return;
    used[c] = 1;
    if (!has_values(m, c)) return;
    p->col[p->n] = c;
    p->label[p->n++] = label != NULL ? label : m->cols[c];
}

static int choose_panels(const gd_metrics *m, panel *ps, unsigned char *used)
{
    int n = 0;
    if (m->step_col >= 0) used[m->step_col] = 1;
    /* not worth a panel of their own: where in the run a line is */
    const char *const skip[] = {"epoch", "elapsed_s", "time", "examples", "tokens"};
    for (size_t k = 0; k < sizeof skip / sizeof skip[0]; k++) {
        int c = gd_metrics_col(m, skip[k]);
        if (c >= 0) used[c] = 1;
    }
    panel *p = &ps[n];
    memset(p, 0, sizeof *p);
    p->title = "loss";
    add_series(m, p, "loss", "training loss", used);
    add_series(m, p, "val_loss", "validation loss", used);
    add_series(m, p, "test_loss", "test loss", used);
    n += p->n > 0;
    p = &ps[n];
    memset(p, 0, sizeof *p);
    p->title = "learning rate";
    add_series(m, p, "lr", "learning rate", used);
    n += p->n > 0;
    p = &ps[n];
    memset(p, 0, sizeof *p);
    p->title = "throughput";
    add_series(m, p, "tokens_per_s", "tokens/s", used);
    add_series(m, p, "examples_per_s", "examples/s", used);
    n += p->n > 0;
    for (int c = 0; c < m->n_cols && n < MAX_PANELS; c++) {
        if (used[c]) continue;
        p = &ps[n];
        memset(p, 0, sizeof *p);
        p->title = m->cols[c];
        add_series(m, p, m->cols[c], NULL, used);
        n += p->n > 0;
    }
    return n;
}

/* ---- axes ----------------------------------------------------------------------------------- */

/* 1, 2 or 5 times a power of ten, near span / 5: the tick step of an axis. */
static double nice_step(double span)
{
    if (!(span > 0) || !isfinite(span)) return 1;
    double raw = span / 5, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

/* The range [lo, hi] widened to whole ticks (and made non-empty). */
static void nice_range(double *lo, double *hi, double *step)
{
    if (!(*hi > *lo)) {
        double d = fabs(*lo) > 0 ? fabs(*lo) * 0.1 : 1;
        *lo -= d;
        *hi += d;
    }
    *step = nice_step(*hi - *lo);
    *lo = floor(*lo / *step) * *step;
    *hi = ceil(*hi / *step) * *step;
}

/* Ticks after the first on [lo, hi]: a handful, whatever the numbers. */
static int ticks(double lo, double hi, double step)
{
    double n = floor((hi - lo) / step + 1e-6);
    return isfinite(n) && n >= 0 ? (n < 20 ? (int)n : 20) : 0;
}

/* Axes of very small or large numbers (a learning rate, tokens per second at scale) are
 * labelled in units of a power of ten, named in the axis title: the exponent. */
static int axis_exponent(double lo, double hi)
{
    double a = fmax(fabs(lo), fabs(hi));
    if (!(a > 0) || (a >= 1e-2 && a < 1e5)) return 0;
    return (int)floor(log10(a));
}

/* v in units of 10^e, with the decimals the tick step needs. */
static void tick_label(double v, double step, int e, char *buf, size_t cap)
{
    double unit = pow(10, e);
    v /= unit;
    step /= unit;
    if (fabs(v) < step * 1e-6) v = 0;
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    snprintf(buf, cap, "%.*f", dec > 6 ? 6 : dec, v);
}

/* "learning rate (x 1e-4)" */
static void axis_title(out *o, const char *title, int e)
{
    put_text(o, title);
    if (e != 0) put(o, " (\xc3\x97 1e%d)", e); /* U+00D7, the multiplication sign */
}

static const char *const colors[MAX_SERIES] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};

static void draw_panel(out *o, const gd_metrics *m, const panel *p, int y0, double xlo, double xhi, double xstep)
{
    const int pw = W - LEFT - RIGHT, ph = PANEL_H;
    double ylo = INFINITY, yhi = -INFINITY;
    for (int s = 0; s < p->n; s++)
        for (int r = 0; r < m->n_rows; r++) {
            double v = gd_metrics_at(m, r, p->col[s]);
            if (!plottable(v) || !plottable(gd_metrics_step(m, r))) continue;
            if (v < ylo) ylo = v;
            if (v > yhi) yhi = v;
        }
    double ystep;
    nice_range(&ylo, &yhi, &ystep);
    int ye = axis_exponent(ylo, yhi), xe = axis_exponent(xlo, xhi);
    put(o, "<g>\n<text x=\"%d\" y=\"%d\" font-size=\"15\" font-weight=\"bold\">", LEFT, y0 - 12);
    put_text(o, p->title);
    put(o, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#ffffff\" stroke=\"#444444\"/>\n", LEFT, y0,
        pw, ph);
    /* grid and tick labels */
    char lb[64];
    for (int k = 0; k <= ticks(ylo, yhi, ystep); k++) {
        double v = ylo + k * ystep, y = y0 + ph - (v - ylo) / (yhi - ylo) * ph;
        tick_label(v, ystep, ye, lb, sizeof lb);
        put(o, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", LEFT, y, LEFT + pw, y);
        put(o, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%s</text>\n", LEFT - 6, y + 4, lb);
    }
    for (int k = 0; k <= ticks(xlo, xhi, xstep); k++) {
        double v = xlo + k * xstep, x = LEFT + (v - xlo) / (xhi - xlo) * pw;
        tick_label(v, xstep, xe, lb, sizeof lb);
        put(o, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e4e4e4\"/>\n", x, y0, x, y0 + ph);
        put(o, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#444444\"/>\n", x, y0 + ph, x, y0 + ph + 5);
        put(o, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n", x, y0 + ph + 18, lb);
    }
    put(o, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">", LEFT + pw / 2, y0 + ph + 36);
    axis_title(o, "step", xe);
    put(o, "</text>\n<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 %d %d)\">",
        22, y0 + ph / 2, 22, y0 + ph / 2);
    axis_title(o, p->title, ye);
    put(o, "</text>\n");
    /* the curves, through the rows that have a value (a validation loss every few hundred
     * steps still makes a line), thinned to the min and max of each pixel column; sparse
     * series get a mark at each point */
    for (int s = 0; s < p->n; s++) {
        int points = 0, col_px = -1, open = 0;
        double lo = 0, hi = 0, lo_x = 0, hi_x = 0;
        for (int r = 0; r < m->n_rows; r++) points += plottable(gd_metrics_step(m, r)) && plottable(gd_metrics_at(m, r, p->col[s]));
        put(o, "<g fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" stroke-linejoin=\"round\">\n", colors[s]);
        for (int r = 0; r <= m->n_rows; r++) {
            double xv = r < m->n_rows ? gd_metrics_step(m, r) : NAN, v = r < m->n_rows ? gd_metrics_at(m, r, p->col[s]) : NAN;
            int ok = plottable(xv) && plottable(v), last = r == m->n_rows;
            if (!ok && !last) continue;
            int px = ok ? (int)floor((xv - xlo) / (xhi - xlo) * pw) : -2;
            if (col_px >= 0 && (px != col_px || last)) { /* the pixel column is done: draw it */
                double ya = y0 + ph - (lo - ylo) / (yhi - ylo) * ph, yb = y0 + ph - (hi - ylo) / (yhi - ylo) * ph;
                double xa = LEFT + (lo_x - xlo) / (xhi - xlo) * pw, xb = LEFT + (hi_x - xlo) / (xhi - xlo) * pw;
                if (!open) put(o, "<polyline points=\"");
                open = 1;
                if (lo_x <= hi_x) put(o, "%.1f,%.1f %.1f,%.1f ", xa, ya, xb, yb);
                else put(o, "%.1f,%.1f %.1f,%.1f ", xb, yb, xa, ya);
            }
            if (last) break;
            if (px != col_px) {
                col_px = px;
                lo = hi = v;
                lo_x = hi_x = xv;
            } else {
                if (v < lo) lo = v, lo_x = xv;
                if (v > hi) hi = v, hi_x = xv;
            }
        }
        if (open) put(o, "\"/>\n");
        put(o, "</g>\n");
        if (points > 60) continue;
        for (int r = 0; r < m->n_rows; r++) {
            double xv = gd_metrics_step(m, r), v = gd_metrics_at(m, r, p->col[s]);
            if (!plottable(xv) || !plottable(v)) continue;
            put(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", LEFT + (xv - xlo) / (xhi - xlo) * pw,
                y0 + ph - (v - ylo) / (yhi - ylo) * ph, colors[s]);
        }
    }
    /* the legend, above the panel at its right, where it hides no curve: a line of each
     * series' colour and its name (widths estimated at 7 px a character) */
    int width = 0;
    for (int s = 0; s < p->n; s++) width += 44 + 7 * (int)(strlen(p->label[s]) < 40 ? strlen(p->label[s]) : 40);
    int lx = LEFT + pw - width, ly = y0 - 16;
    for (int s = 0; s < p->n; s++) {
        put(o, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2.5\"/>\n", lx, ly, lx + 24, ly,
            colors[s]);
        put(o, "<text x=\"%d\" y=\"%d\" font-size=\"12\">", lx + 30, ly + 4);
        put_text(o, p->label[s]);
        put(o, "</text>\n");
        lx += 44 + 7 * (int)(strlen(p->label[s]) < 40 ? strlen(p->label[s]) : 40);
    }
    put(o, "</g>\n");
}

gd_status gd_metrics_plot(const gd_metrics *m, const char *title, char **svg, size_t *len, char *err, size_t cap)
{
    *svg = NULL;
    *len = 0;
    unsigned char *used = gd_calloc((size_t)m->n_cols + 1, 1);
    if (used == NULL) {
        snprintf(err, cap, "out of memory drawing the plot");
        return GD_ERR_NOMEM;
    }
    panel ps[MAX_PANELS];
    int n = choose_panels(m, ps, used);
    gd_free(used);
    if (n == 0) {
        snprintf(err, cap, "nothing to plot: no column has a value at a step");
        return GD_ERR_FORMAT;
    }
    double xlo = INFINITY, xhi = -INFINITY, xstep;
    for (int r = 0; r < m->n_rows; r++) {
        double x = gd_metrics_step(m, r);
        if (!plottable(x)) continue;
        if (x < xlo) xlo = x;
        if (x > xhi) xhi = x;
    }
    nice_range(&xlo, &xhi, &xstep);
    int h = TOP + n * (PANEL_H + PANEL_GAP) + 10;
    out o = {0};
    put(&o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    put(&o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\">\n", W, h, W, h);
    put(&o, "<title>");
    put_text(&o, title != NULL ? title : "training curves");
    put(&o, "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"#fafafa\"/>\n", W, h);
    put(&o, "<text x=\"%d\" y=\"30\" font-size=\"18\" text-anchor=\"middle\">", W / 2);
    put_text(&o, title != NULL ? title : "training curves");
    put(&o, "</text>\n");
    for (int i = 0; i < n; i++) draw_panel(&o, m, &ps[i], TOP + 20 + i * (PANEL_H + PANEL_GAP), xlo, xhi, xstep);
    put(&o, "</svg>\n");
    if (o.failed) {
        gd_free(o.buf);
        snprintf(err, cap, "out of memory drawing the plot");
        return GD_ERR_NOMEM;
    }
    *svg = o.buf;
    *len = o.len;
    return GD_OK;
}
