/* trace.h — reading a trace file back (what `gradus profile FILE` and the tests read), the
 * per-op and per-node summary of one, and the training-metrics log with its plot.
 *
 * The trace reader takes the Chrome trace-event JSON that gradus writes (and the plain
 * array form other tools write): the whole grammar is checked, one event at a time, so a
 * large trace never becomes one large tree. A malformed file is refused with a message
 * naming the file and the line. Events gradus does not use (instant events, flows,
 * begin/end pairs) are skipped, not refused. */
#ifndef GD_PROF_TRACE_H
#define GD_PROF_TRACE_H

#include "gradus.h"
#include "gradus_plugin.h"

#include <stddef.h>
#include <stdint.h>

typedef struct gd_trace_span {
    const char *name, *cat;   /* cat "" when absent */
    int64_t ts, dur;          /* nanoseconds */
    int32_t pid, tid;
    int32_t program, run, node, segment; /* from args; -1 when absent */
    const char *op, *label, *backend, *shapes, *dtype; /* from args; NULL when absent */
    double bytes, flops;      /* from args; -1 when absent */
    int32_t n_nodes;          /* a segment timed whole: how many nodes args lists; -1 */
} gd_trace_span;

typedef struct gd_trace_counter {
    const char *name;
    int64_t ts;
    int32_t pid;
    double value;
} gd_trace_counter;

typedef struct gd_trace_backend {
    const char *name;
    int32_t pid;
    const char *spans;        /* where its node spans came from */
    double peak_flops[GDP_DTYPE_COUNT], peak_bw[GDP_DTYPE_COUNT]; /* 0: not reported */
} gd_trace_backend;

typedef struct gd_trace_program {
    int32_t program;
    const char *description;
    int32_t nodes, runs;
} gd_trace_program;

typedef struct gd_trace {
    gd_trace_span *spans;
    size_t n_spans;
    gd_trace_counter *counters;
    size_t n_counters;
    gd_trace_backend *backends;
    int n_backends;
    gd_trace_program *programs;
    int n_programs;
    int has_other;            /* the file had gradus's "otherData" */
    double dropped, unmatched, clamped;
    struct gd_trace_arena *arena; /* the strings above */
} gd_trace;

/* Parses text[0..n) as a trace; `file` names it in messages. GD_OK, GD_ERR_FORMAT (err
 * says "file:line: what"), or GD_ERR_NOMEM. */
gd_status gd_trace_parse(const char *text, size_t n, const char *file, gd_trace **out, char *err, size_t cap);
/* Reads and parses a file: GD_ERR_IO when it cannot be read. */
gd_status gd_trace_load(const char *path, gd_trace **out, char *err, size_t cap);
void gd_trace_free(gd_trace *t);

/* ---- the summary ------------------------------------------------------------------------- */

/* One row of a table: an op, or a node (or a segment its backend timed as a whole). */
typedef struct gd_sum_row {
    const char *name;         /* op name, or node label */
    const char *op, *backend, *shapes, *dtype; /* node rows (NULL when unknown) */
    int32_t node;             /* node id, -1 for op rows and segments */
    int32_t segment;          /* a segment timed whole, else -1 */
    int64_t calls, total_ns;
    double bytes, flops;      /* per call, -1 unknown */
    double peak_flops, peak_bw; /* of its backend for its dtype, 0 unknown */
} gd_sum_row;

typedef struct gd_sum_program {
    int32_t program;          /* -1: device work no program accounts for */
    const char *description;
    int64_t runs, run_ns;     /* run spans: the steps */
    int64_t spans, device_ns; /* node and segment spans: the work */
    gd_sum_row *ops, *nodes;  /* by total time, largest first */
    int n_ops, n_nodes;
} gd_sum_program;

typedef struct gd_summary {
    gd_sum_program *programs; /* by device time, largest first */
    int n_programs;
    int64_t spans, device_ns; /* over every program */
    double dropped, unmatched;
    int32_t skipped_runs;     /* the first runs of each program left out (warm-up) */
} gd_summary;

gd_status gd_trace_summarize(const gd_trace *t, gd_summary **out, char *err, size_t cap);
/* The same, leaving out each program's first `skip_runs` runs and their nodes' spans: a
 * program's first run pays one-time costs (a device loading its kernels, libraries
 * choosing algorithms) that a mean over a few runs would spread over the steady ones. */
gd_status gd_trace_summarize_from(const gd_trace *t, int32_t skip_runs, gd_summary **out, char *err, size_t cap);
void gd_summary_free(gd_summary *s);
/* The summary as text, one line at a time through line(): `top` rows per table (0: all);
 * program 0 means every program: the first `max_programs` of them in full (0: those with
 * at least 1% of the work) and the others on one line. */
void gd_summary_lines(const gd_summary *s, int top, int program, int max_programs,
                      void (*line)(void *user, const char *text), void *user);

/* ---- metrics logs -------------------------------------------------------------------------- */

/* A metrics log: one JSON object per line ({"step": 10, "loss": 2.3, ...}), as training
 * writes it. Every numeric member is a column; a row without one has NaN there. */
typedef struct gd_metrics {
    int n_rows, n_cols;
    char **cols;              /* names */
    double *values;           /* n_rows x n_cols, row-major, NaN where missing */
    int step_col;             /* index of "step", -1 (then rows count from 1) */
} gd_metrics;

/* Parses a log; `file` names it in messages ("file:line: what"). A log must have a
 * "loss" column with at least one value. GD_ERR_FORMAT or GD_ERR_NOMEM otherwise. */
gd_status gd_metrics_parse(const char *text, size_t n, const char *file, gd_metrics **out, char *err, size_t cap);
gd_status gd_metrics_load(const char *path, gd_metrics **out, char *err, size_t cap);
void gd_metrics_free(gd_metrics *m);
int gd_metrics_col(const gd_metrics *m, const char *name); /* -1 when absent */
double gd_metrics_at(const gd_metrics *m, int row, int col);
double gd_metrics_step(const gd_metrics *m, int row);

/* The training curves as a self-contained SVG document: loss and validation loss, the
 * learning rate, throughput (and the other columns a log has) against step, one panel
 * each, with axes, ticks, labels and legends. *svg is allocated (gd_free). */
gd_status gd_metrics_plot(const gd_metrics *m, const char *title, char **svg, size_t *len, char *err, size_t cap);

/* Reads a whole file into memory (NUL-terminated); GD_ERR_IO naming it when it cannot. */
gd_status gd_read_file(const char *path, char **text, size_t *n, char *err, size_t cap);

#endif
