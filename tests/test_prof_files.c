/* The files around profiling, read and written: traces read back (and refused when
 * missing or malformed, naming the file and line), their summary computed by hand on a
 * small trace, metrics logs (refused when malformed or without a loss column), and the
 * plot: a well-formed SVG (checked by tests/xmlcheck.h) with its panels, axes and legends,
 * whatever the column names, and small however long the log. Also the ops' cost functions
 * the summary's rates come from. */
#include "testutil.h"

#include "core.h"

#include "prof/trace.h"
#include "xmlcheck.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

static char dir[256];

/* ---- traces -------------------------------------------------------------------------------- */

/* Parsing `text` must fail with `st` and a message holding each of the parts. */
static void trace_refused(const char *what, const char *text, gd_status st, const char *const *parts)
{
    char err[600];
    gd_trace *t = NULL;
    gd_status got = gd_trace_parse(text, strlen(text), "t.json", &t, err, sizeof err);
    CHECK(got == st && t == NULL, "%s: status %d (want %d), trace %p", what, got, st, (void *)t);
    for (int i = 0; parts[i] != NULL; i++) CHECK(strstr(err, parts[i]) != NULL, "%s: '%s' lacks '%s'", what, err, parts[i]);
    gd_trace_free(t);
}

static void trace_errors(void)
{
    char err[600], path[512];
    gd_trace *t = NULL;
    snprintf(path, sizeof path, "%s/missing.json", dir);
    CHECK(gd_trace_load(path, &t, err, sizeof err) == GD_ERR_IO && strstr(err, path) != NULL, "missing trace: '%s'", err);
    trace_refused("empty", "", GD_ERR_FORMAT, (const char *[]){"t.json:1:", "empty", NULL});
    trace_refused("not JSON", "hello", GD_ERR_FORMAT, (const char *[]){"t.json:1:", "not a trace", NULL});
    trace_refused("no events", "{\"otherData\": {}}", GD_ERR_FORMAT, (const char *[]){"t.json:1:", "traceEvents", NULL});
    trace_refused("truncated", "{\"traceEvents\":[\n{\"name\":\"a\",\"ph\":\"X\",\"ts\":1,\"dur\":2,\"pid\":1},\n{\"name\":\"b\",",
                  GD_ERR_FORMAT, (const char *[]){"t.json:3:", NULL});
    trace_refused("unclosed array", "{\"traceEvents\":[\n{\"name\":\"a\",\"ph\":\"X\",\"ts\":1,\"dur\":2,\"pid\":1}\n",
                  GD_ERR_FORMAT, (const char *[]){"t.json:", "not closed", NULL});
    trace_refused("bad JSON inside an event", "{\"traceEvents\":[\n\n{\"name\":\"a\",\"ph\":\"X\",\"ts\":1.e,\"pid\":1}]}",
                  GD_ERR_FORMAT, (const char *[]){"t.json:3:", "malformed JSON", NULL});
    trace_refused("event not an object", "{\"traceEvents\":[1]}", GD_ERR_FORMAT, (const char *[]){"event 0", "not an object", NULL});
    trace_refused("no ph", "{\"traceEvents\":[{\"name\":\"a\"}]}", GD_ERR_FORMAT, (const char *[]){"\"ph\"", NULL});
    trace_refused("span without ts", "{\"traceEvents\":[\n{\"name\":\"a\",\"ph\":\"X\",\"dur\":1}]}", GD_ERR_FORMAT,
                  (const char *[]){"t.json:2:", "\"ts\"", "missing", NULL});
    trace_refused("negative duration", "{\"traceEvents\":[{\"name\":\"a\",\"ph\":\"X\",\"ts\":5,\"dur\":-1}]}", GD_ERR_FORMAT,
                  (const char *[]){"negative duration", NULL});
    trace_refused("text after", "{\"traceEvents\":[]}\n\nx", GD_ERR_FORMAT, (const char *[]){"t.json:3:", "after the end", NULL});
    trace_refused("mismatched brackets", "{\"traceEvents\":[{\"name\":\"a\"]}]}", GD_ERR_FORMAT, (const char *[]){"does not close", NULL});
    trace_refused("string not ended", "{\"traceEvents\":[{\"name\":\"a}]}", GD_ERR_FORMAT, (const char *[]){"does not end", NULL});
    /* the array form, and events a summary does not read, are fine */
    const char *ok = "[{\"name\":\"a\",\"ph\":\"B\",\"ts\":1,\"pid\":1},{\"name\":\"a\",\"ph\":\"E\",\"ts\":2,\"pid\":1},"
                     "{\"name\":\"s\",\"ph\":\"X\",\"ts\":1.5,\"dur\":0.25,\"pid\":7,\"tid\":2}]";
    gd_status st = gd_trace_parse(ok, strlen(ok), "t.json", &t, err, sizeof err);
    CHECK(st == GD_OK && t != NULL && t->n_spans == 1 && !t->has_other, "array form: %s", err);
    if (t != NULL) CHECK(t->spans[0].ts == 1500 && t->spans[0].dur == 250 && t->spans[0].tid == 2, "array form: span read wrong");
    gd_trace_free(t);
}

/* A small trace in gradus's form: the summary's numbers by hand. Program 1 ran twice
 * (10 + 12 us); node 5 (conv2d, 1e6 bytes, 4e6 flops per call on backend "dev" whose f32
 * peak is 1e12 FLOP/s, 1e11 B/s) took 2 + 4 us; node 6 (relu) 1 + 1 us; a segment timed
 * whole 3 us; and device work no launch accounts for. */
static const char *small_trace =
    "{\"traceEvents\":[\n"
    "{\"name\":\"run program 1\",\"cat\":\"run\",\"ph\":\"X\",\"ts\":0,\"dur\":10,\"pid\":1,\"tid\":0,\"args\":{\"program\":1,\"run\":1}},\n"
    "{\"name\":\"conv\",\"cat\":\"node\",\"ph\":\"X\",\"ts\":1,\"dur\":2,\"pid\":2,\"tid\":0,\"args\":{\"program\":1,\"run\":1,\"node\":5,"
    "\"label\":\"conv\",\"op\":\"conv2d\",\"backend\":\"dev\",\"dtype\":\"f32\",\"bytes\":1000000,\"flops\":4000000}},\n"
    "{\"name\":\"relu#6\",\"cat\":\"node\",\"ph\":\"X\",\"ts\":3,\"dur\":1,\"pid\":2,\"tid\":0,\"args\":{\"program\":1,\"run\":1,\"node\":6,"
    "\"label\":\"relu#6\",\"op\":\"relu\",\"backend\":\"dev\",\"dtype\":\"f32\"}},\n"
    "{\"name\":\"run program 1\",\"cat\":\"run\",\"ph\":\"X\",\"ts\":20,\"dur\":12,\"pid\":1,\"tid\":0,\"args\":{\"program\":1,\"run\":2}},\n"
    "{\"name\":\"conv\",\"cat\":\"node\",\"ph\":\"X\",\"ts\":21,\"dur\":4,\"pid\":2,\"tid\":0,\"args\":{\"program\":1,\"run\":2,\"node\":5,"
    "\"label\":\"conv\",\"op\":\"conv2d\",\"backend\":\"dev\",\"dtype\":\"f32\",\"bytes\":1000000,\"flops\":4000000}},\n"
    "{\"name\":\"relu#6\",\"cat\":\"node\",\"ph\":\"X\",\"ts\":26,\"dur\":1,\"pid\":2,\"tid\":0,\"args\":{\"program\":1,\"run\":2,\"node\":6,"
    "\"label\":\"relu#6\",\"op\":\"relu\",\"backend\":\"dev\",\"dtype\":\"f32\"}},\n"
    "{\"name\":\"graph\",\"cat\":\"device_segment\",\"ph\":\"X\",\"ts\":28,\"dur\":3,\"pid\":2,\"tid\":0,\"args\":{\"program\":1,\"run\":2,"
    "\"segment\":0,\"backend\":\"dev\",\"nodes\":[\"a\",\"b\"],\"node_ids\":[7,8]}},\n"
    "{\"name\":\"mystery\",\"cat\":\"device\",\"ph\":\"X\",\"ts\":40,\"dur\":0.5,\"pid\":2,\"tid\":0,\"args\":{}},\n"
    "{\"name\":\"memory in use (bytes)\",\"cat\":\"counter\",\"ph\":\"C\",\"ts\":0,\"pid\":2,\"args\":{\"value\":1024}}\n"
    "],\"displayTimeUnit\":\"ns\",\"otherData\":{\"dropped_events\":0,\"unmatched_device_spans\":1,"
    "\"backends\":[{\"name\":\"dev\",\"pid\":2,\"peak\":{\"f32\":{\"flop_per_s\":1e12,\"bytes_per_s\":1e11}}}],"
    "\"programs\":[{\"program\":1,\"description\":\"program 1: the test\",\"nodes\":4,\"runs\":2}]}}\n";

static const gd_sum_row *row(const gd_sum_row *rows, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].name, name) == 0) return &rows[i];
    return NULL;
}

typedef struct lines {
    char text[8192];
    size_t len;
} lines;
static void collect(void *user, const char *s)
{
    lines *l = user;
    l->len += (size_t)snprintf(l->text + l->len, sizeof l->text - l->len, "%s\n", s);
    if (l->len >= sizeof l->text) l->len = sizeof l->text - 1;
}

/* A trace whose runs have no node spans (cut short by the event limit, say) summarizes to
 * programs with no rows: once, qsort was handed their NULL row arrays (found by
 * fuzz_trace, whose sanitizers call that undefined even for zero elements). */
static void empty_summary(void)
{
    char err[600];
    gd_trace *t = NULL;
    gd_summary *s = NULL;
    const char *text = "{\"traceEvents\":[{\"name\":\"run program 1\",\"cat\":\"run\",\"ph\":\"X\",\"ts\":0,"
                       "\"dur\":10,\"pid\":1,\"tid\":0,\"args\":{\"program\":1,\"run\":1}}]}";
    gd_status st = gd_trace_parse(text, strlen(text), "cut.json", &t, err, sizeof err);
    CHECK(st == GD_OK, "trace without node spans: %s", err);
    if (st == GD_OK) st = gd_trace_summarize(t, &s, err, sizeof err);
    CHECK(st == GD_OK && s != NULL && s->spans == 0, "summary of a trace without node spans: %s", err);
    CHECK(s == NULL || (s->n_programs == 1 && s->programs[0].n_ops == 0 && s->programs[0].runs == 1),
          "its one program: %d programs", s != NULL ? s->n_programs : -1);
    gd_summary_free(s);
    gd_trace_free(t);
}

/* Leaving out each program's first run (warm-up): only run 2 and its nodes' spans count;
 * device work outside any run stays; the summary says what it left out. */
static void summary_skip(void)
{
    char err[600];
    gd_trace *t = NULL;
    gd_summary *s = NULL;
    gd_status st = gd_trace_parse(small_trace, strlen(small_trace), "small.json", &t, err, sizeof err);
    if (st == GD_OK) st = gd_trace_summarize_from(t, 1, &s, err, sizeof err);
    CHECK(st == GD_OK && s != NULL, "summary from run 2: %s", err);
    if (s == NULL) {
        gd_trace_free(t);
        return;
    }
    const gd_sum_program *p = s->n_programs > 0 ? &s->programs[0] : NULL;
    CHECK(p != NULL && p->program == 1 && p->runs == 1 && p->run_ns == 12000 && p->device_ns == 4000 + 1000 + 3000,
          "program 1 from run 2: %lld runs %lld ns, work %lld ns", p != NULL ? (long long)p->runs : -1,
          p != NULL ? (long long)p->run_ns : -1, p != NULL ? (long long)p->device_ns : -1);
    const gd_sum_row *conv = p != NULL ? row(p->nodes, p->n_nodes, "conv") : NULL;
    CHECK(conv != NULL && conv->calls == 1 && conv->total_ns == 4000, "the conv row from run 2");
    CHECK(s->spans == 4, "spans from run 2 and outside runs: %lld", (long long)s->spans);
    lines l = {.len = 0};
    gd_summary_lines(s, 0, 0, 0, collect, &l);
    CHECK(strstr(l.text, "the first 1 run of each program left out (warm-up)") != NULL, "no word of the skipped run:\n%s",
          l.text);
    gd_summary_free(s);
    gd_trace_free(t);
}

static void summary(void)
{
    char err[600];
    gd_trace *t = NULL;
    gd_summary *s = NULL;
    gd_status st = gd_trace_parse(small_trace, strlen(small_trace), "small.json", &t, err, sizeof err);
    CHECK(st == GD_OK, "small trace: %s", err);
    if (st != GD_OK) return;
    CHECK(t->n_spans == 8 && t->n_counters == 1 && t->n_backends == 1 && t->n_programs == 1, "small trace: %zu spans, "
          "%zu counters, %d backends, %d programs", t->n_spans, t->n_counters, t->n_backends, t->n_programs);
    CHECK(t->n_backends == 1 && t->backends[0].peak_flops[GD_F32] == 1e12 && t->backends[0].peak_bw[GD_F32] == 1e11,
          "peaks not read");
    st = gd_trace_summarize(t, &s, err, sizeof err);
    CHECK(st == GD_OK && s != NULL, "summary: %s", err);
    if (s == NULL) {
        gd_trace_free(t);
        return;
    }
    CHECK(s->n_programs == 2 && s->programs[0].program == 1 && s->programs[1].program == -1,
          "programs: %d, first %d", s->n_programs, s->n_programs > 0 ? s->programs[0].program : 0);
    CHECK(s->spans == 6 && s->device_ns == 2000 + 1000 + 4000 + 1000 + 3000 + 500, "totals: %lld spans, %lld ns",
          (long long)s->spans, (long long)s->device_ns);
    const gd_sum_program *p = &s->programs[0];
    CHECK(p->runs == 2 && p->run_ns == 22000 && p->device_ns == 11000 && p->spans == 5, "program 1: %lld runs %lld ns, "
          "work %lld ns in %lld spans", (long long)p->runs, (long long)p->run_ns, (long long)p->device_ns, (long long)p->spans);
    CHECK(p->description != NULL && strcmp(p->description, "program 1: the test") == 0, "program 1's description");
    const gd_sum_row *conv = row(p->nodes, p->n_nodes, "conv"), *op = row(p->ops, p->n_ops, "conv2d");
    CHECK(conv != NULL && conv->calls == 2 && conv->total_ns == 6000 && conv->node == 5 && conv->bytes == 1e6 &&
              conv->flops == 4e6 && conv->peak_flops == 1e12 && conv->peak_bw == 1e11,
          "the conv row");
    CHECK(op != NULL && op->calls == 2 && op->total_ns == 6000, "the conv2d op row");
    CHECK(p->n_nodes == 3 && p->nodes[0].total_ns == 6000 && p->nodes[1].total_ns == 3000, "node rows not by time");
    const gd_sum_row *seg = row(p->nodes, p->n_nodes, "graph");
    CHECK(seg != NULL && seg->segment == 0 && seg->calls == 1, "the segment timed whole is not a row");
    lines l = {.len = 0};
    gd_summary_lines(s, 0, 0, 0, collect, &l);
    /* conv: 2 calls of 1e6 bytes and 4e6 FLOPs in 6 us, on a backend of 100 GB/s and 1000 GFLOP/s */
    CHECK(strstr(l.text, "333.33 (333.3% of 100)") != NULL, "GB/s beside the peak: %s", l.text);
    CHECK(strstr(l.text, "1333.33 (133.3% of 1000)") != NULL, "GFLOP/s beside the peak: %s", l.text);
    CHECK(strstr(l.text, "27.3%") != NULL, "conv's share of the runs (6 of 22 us): %s", l.text);
    CHECK(strstr(l.text, "no launch") != NULL && strstr(l.text, "mystery") != NULL, "unattributed work: %s", l.text);
    /* runs not waited on: the device's queue held more work (11 us) than the runs took to
     * launch (3 us), so the rows' shares are of the node work */
    ((gd_sum_program *)p)->run_ns = 3000;
    l.len = 0;
    gd_summary_lines(s, 0, 0, 0, collect, &l);
    CHECK(strstr(l.text, "(366.7% of the runs' time)") != NULL, "node work beyond the runs' time: %s", l.text);
    CHECK(strstr(l.text, "54.5%") != NULL, "conv's share of the node work (6 of 11 us): %s", l.text);
    gd_summary_free(s);
    gd_trace_free(t);
}

/* ---- metrics ------------------------------------------------------------------------------- */

static void metrics_refused(const char *what, const char *text, const char *const *parts)
{
    char err[600];
    gd_metrics *m = NULL;
    gd_status st = gd_metrics_parse(text, strlen(text), "m.jsonl", &m, err, sizeof err);
    CHECK(st == GD_ERR_FORMAT && m == NULL, "%s: status %d", what, st);
    for (int i = 0; parts[i] != NULL; i++) CHECK(strstr(err, parts[i]) != NULL, "%s: '%s' lacks '%s'", what, err, parts[i]);
    gd_metrics_free(m);
}

static void metrics(void)
{
    char err[600], path[512];
    gd_metrics *m = NULL;
    snprintf(path, sizeof path, "%s/missing.jsonl", dir);
    CHECK(gd_metrics_load(path, &m, err, sizeof err) == GD_ERR_IO && strstr(err, path) != NULL, "missing log: '%s'", err);
    metrics_refused("empty", "\n\n", (const char *[]){"m.jsonl", "no metrics", NULL});
    metrics_refused("malformed line", "{\"step\": 1, \"loss\": 2}\n{\"step\": 2, \"loss\": 1.9}\n{\"step\": 3, \"loss\": }\n",
                    (const char *[]){"m.jsonl:3:", NULL});
    metrics_refused("not an object", "{\"step\": 1, \"loss\": 2}\n[1, 2]\n", (const char *[]){"m.jsonl:2:", "object", NULL});
    metrics_refused("no loss column", "{\"step\": 1, \"lr\": 0.1}\n{\"step\": 2, \"lr\": 0.2}\n",
                    (const char *[]){"m.jsonl", "no \"loss\" column", "step, lr", NULL});
    metrics_refused("loss never a number", "{\"step\": 1, \"loss\": null}\n", (const char *[]){"no finite value", NULL});
    /* lines of several kinds: training, validation, notes; CRLF; a NaN loss written as null */
    const char *log = "{\"step\": 1, \"loss\": 2.5, \"lr\": 0.001, \"tokens_per_s\": 1000, \"phase\": \"train\"}\r\n"
                      "{\"step\": 2, \"loss\": null, \"lr\": 0.002}\n"
                      "\n"
                      "{\"step\": 2, \"val_loss\": 2.7}\n"
                      "{\"step\": 3, \"loss\": 2.0, \"lr\": 0.003, \"grad_norm\": 1.5}\n";
    gd_status st = gd_metrics_parse(log, strlen(log), "m.jsonl", &m, err, sizeof err);
    CHECK(st == GD_OK, "a good log: %s", err);
    if (m == NULL) return;
    int loss = gd_metrics_col(m, "loss"), val = gd_metrics_col(m, "val_loss"), gn = gd_metrics_col(m, "grad_norm");
    CHECK(m->n_rows == 4 && loss >= 0 && val >= 0 && gn >= 0 && gd_metrics_col(m, "phase") < 0, "rows %d, columns %d",
          m->n_rows, m->n_cols);
    CHECK(gd_metrics_at(m, 0, loss) == 2.5 && isnan(gd_metrics_at(m, 1, loss)) && gd_metrics_at(m, 2, val) == 2.7 &&
              isnan(gd_metrics_at(m, 2, loss)) && gd_metrics_step(m, 3) == 3,
          "values read wrong");
    gd_metrics_free(m);
}

/* ---- the plot ------------------------------------------------------------------------------ */

static char *plot(const char *log, const char *title, size_t *len)
{
    char err[600];
    gd_metrics *m = NULL;
    char *svg = NULL;
    gd_status st = gd_metrics_parse(log, strlen(log), "m.jsonl", &m, err, sizeof err);
    if (st == GD_OK) st = gd_metrics_plot(m, title, &svg, len, err, sizeof err);
    CHECK(st == GD_OK, "plot: %s", err);
    gd_metrics_free(m);
    return svg;
}

static int occurrences(const char *s, const char *sub)
{
    int n = 0;
    for (const char *p = strstr(s, sub); p != NULL; p = strstr(p + 1, sub)) n++;
    return n;
}

static void plots(void)
{
    /* an LM-style log of 400 steps, validation every 50 */
    size_t cap = 1 << 20, used = 0;
    char *log = malloc(cap);
    for (int s = 1; s <= 400; s++) {
        double lr = s < 40 ? 3e-4 * s / 40 : 3e-4 * 0.5 * (1 + cos(3.14159 * (s - 40) / 360.0));
        used += (size_t)snprintf(log + used, cap - used,
                                 "{\"step\": %d, \"loss\": %.4f, \"lr\": %.6g, \"grad_norm\": %.3f, \"tokens_per_s\": %.1f, "
                                 "\"elapsed_s\": %.2f}\n",
                                 s, 4.0 * exp(-s / 150.0) + 1.5 + 0.05 * sin(s), lr, 1 + 0.3 * cos(s / 7.0), 52000 + 900 * sin(s / 11.0),
                                 0.1 * s);
        if (s % 50 == 0) used += (size_t)snprintf(log + used, cap - used, "{\"step\": %d, \"val_loss\": %.4f}\n", s, 4.0 * exp(-s / 150.0) + 1.6);
    }
    size_t len = 0;
    char *svg = plot(log, "tiny <llama> & \"friends\"", &len);
    if (svg != NULL) {
        char err[300];
        CHECK(xml_check(svg, len, err, sizeof err), "the SVG is not well-formed XML: %s", err);
        CHECK(strncmp(svg, "<?xml", 5) == 0 && strstr(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\"") != NULL, "not an SVG document");
        /* panels: loss (2 curves), learning rate, throughput, gradient norm; elapsed_s is not one */
        CHECK(occurrences(svg, "<rect x=") == 4, "%d panel frames, 4 panels", occurrences(svg, "<rect x="));
        CHECK(occurrences(svg, "stroke-width=\"2.5\"") == 5, "%d legend entries, 5 series", occurrences(svg, "stroke-width=\"2.5\""));
        CHECK(strstr(svg, "learning rate (\xc3\x97 1e-4)") != NULL, "the learning rate axis does not say its unit");
        CHECK(strstr(svg, ">training loss<") && strstr(svg, ">validation loss<") && strstr(svg, ">learning rate<") &&
                  strstr(svg, ">tokens/s<") && strstr(svg, ">grad_norm<") && strstr(svg, ">step<") != NULL,
              "a panel or legend is missing");
        CHECK(strstr(svg, ">elapsed_s<") == NULL, "elapsed_s has a panel");
        CHECK(strstr(svg, "tiny &lt;llama&gt; &amp; &quot;friends&quot;") != NULL, "the title is not escaped");
        CHECK(strstr(svg, "nan") == NULL && strstr(svg, "inf") == NULL, "a coordinate is not a number");
        CHECK(occurrences(svg, "<polyline") >= 5, "%d curves", occurrences(svg, "<polyline"));
        /* ticks: the step axis runs 0..400 by 100 (or 50), labelled */
        CHECK(strstr(svg, ">400</text>") != NULL && strstr(svg, ">0</text>") != NULL, "step ticks are not labelled");
        char path[512];
        snprintf(path, sizeof path, "%s/curves.svg", dir);
        FILE *f = fopen(path, "wb");
        if (f != NULL) {
            fwrite(svg, 1, len, f);
            fclose(f);
        }
        free(svg);
    }
    /* a long log is thinned: 200000 steps make a plot of bounded size */
    used = 0;
    cap = 32 << 20;
    log = realloc(log, cap);
    for (int s = 1; s <= 200000 && used + 200 < cap; s++)
        used += (size_t)snprintf(log + used, cap - used, "{\"step\": %d, \"loss\": %.5f}\n", s, 3.0 / (1 + s * 1e-3) + 0.1 * sin(s));
    svg = plot(log, NULL, &len);
    if (svg != NULL) {
        char err[300];
        CHECK(xml_check(svg, len, err, sizeof err), "the long log's SVG: %s", err);
        CHECK(len < 400000, "a 200000-step log plots into %zu bytes", len);
        free(svg);
    }
    /* names that are not XML-safe or not UTF-8, a single point, a constant, huge values */
    const char *odd = "{\"step\": 5, \"loss\": 1e308, \"a<b&c\\\"\": 3, \"\\u0001ctl\": 1, \"x\\u00e9\": -2}\n"
                      "{\"step\": 5, \"loss\": 2, \"weird\\ud800\\udc00\": 7}\n";
    svg = plot(odd, "\xff\xfe bad utf-8 \x01", &len);
    if (svg != NULL) {
        char err[300];
        CHECK(xml_check(svg, len, err, sizeof err), "odd names: %s\n%s", err, svg);
        CHECK(strstr(svg, "nan") == NULL && strstr(svg, "inf") == NULL, "odd values: a coordinate is not a number");
        free(svg);
    }
    free(log);
    /* the checker itself refuses what is not well-formed */
    static const char *const bad[] = {"<a><b></a></b>", "<a x=1/>", "<a>&nbsp;</a>", "<a></a><b/>", "<a x='1' x='2'/>",
                                      "<a>\x01</a>", "<a>\xc3</a>", "text", "<a><!-- a -- b --></a>", "<a>]]></a>"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[200];
        CHECK(!xml_check(bad[i], strlen(bad[i]), err, sizeof err), "xmlcheck accepted %s", bad[i]);
    }
    static const char *const good[] = {"<?xml version=\"1.0\"?>\n<a x=\"1\" y='&lt;'>t&amp;<b/><![CDATA[<]]>&#233;&#x1F600;</a>\n",
                                       "<!-- c --><a/><?pi x?>"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char err[200];
        CHECK(xml_check(good[i], strlen(good[i]), err, sizeof err), "xmlcheck refused %s: %s", good[i], err);
    }
}

/* ---- ops' costs ------------------------------------------------------------------------------ */

typedef struct fake {
    gdp_tensor t[6];
    const gdp_tensor *in[4], *out[2];
    gdp_attr attrs[2];
    gdp_node n;
} fake;

/* A node of `n_in` inputs and `n_out` outputs with the given shapes (f32). */
static const gdp_node *node(fake *f, int n_in, int n_out, const int64_t (*shapes)[5], int n_attr, const gdp_attr *attrs)
{
    memset(f, 0, sizeof *f);
    for (int k = 0; k < n_in + n_out; k++) {
        gdp_tensor *t = &f->t[k];
        t->size = sizeof *t;
        t->dtype = GDP_F32;
        t->ndim = (int32_t)shapes[k][0];
        for (int d = 0; d < t->ndim; d++) t->shape[d] = shapes[k][1 + d];
        gdp_set_contiguous(t);
        if (k < n_in) f->in[k] = t;
        else f->out[k - n_in] = t;
    }
    for (int a = 0; a < n_attr; a++) f->attrs[a] = attrs[a];
    f->n = (gdp_node){.size = sizeof f->n, .n_in = n_in, .n_out = n_out, .in = f->in, .out = f->out,
                      .attrs = {n_attr, f->attrs}};
    return &f->n;
}

static void cost_is(const char *op, const gdp_node *n, double bytes, double flops)
{
    const gd_op_def *d = gd_registry_find(ctx->reg, op);
    CHECK(d != NULL && d->cost != NULL, "%s declares no cost", op);
    if (d == NULL || d->cost == NULL) return;
    double b = -1, f = -1;
    d->cost(n, &b, &f);
    CHECK(b == bytes && f == flops, "%s: %g bytes and %g FLOPs, want %g and %g", op, b, f, bytes, flops);
}

static void costs(void)
{
    fake f;
    const gdp_attr ta = {.name = "transpose_a", .kind = GDP_ATTR_INT, .i = 1};
    const gdp_attr causal = {.name = "causal", .kind = GDP_ATTR_INT, .i = 1};
    const gdp_attr relu = {.name = "act", .kind = GDP_ATTR_INT, .i = 1};
    /* (2, 3, 4) @ (2, 4, 5): 2 * 2*3*5 * 4 */
    cost_is("matmul", node(&f, 2, 1, (const int64_t[][5]){{3, 2, 3, 4}, {3, 2, 4, 5}, {3, 2, 3, 5}}, 0, NULL),
            (24 + 40 + 30) * 4, 2.0 * 30 * 4);
    /* a given transposed: K is its second-last dim */
    cost_is("matmul", node(&f, 2, 1, (const int64_t[][5]){{2, 6, 3}, {2, 6, 5}, {2, 3, 5}}, 1, &ta), (18 + 30 + 15) * 4,
            2.0 * 15 * 6);
    /* x (8, 16) W (4, 16) b (4): 2*8*4*16 + 8*4 (bias) + 8*4 (relu) */
    cost_is("linear_act", node(&f, 3, 1, (const int64_t[][5]){{2, 8, 16}, {2, 4, 16}, {1, 4}, {2, 8, 4}}, 1, &relu),
            (128 + 64 + 4 + 32) * 4, 2.0 * 32 * 16 + 32 + 32);
    /* conv2d x (2, 3, 8, 8) w (4, 3, 3, 3) b (4) -> (2, 4, 6, 6): 2 * 288 * 27 + 288 */
    cost_is("conv2d", node(&f, 3, 1, (const int64_t[][5]){{4, 2, 3, 8, 8}, {4, 4, 3, 3, 3}, {1, 4}, {4, 2, 4, 6, 6}}, 0, NULL),
            (384 + 108 + 4 + 288) * 4, 2.0 * 288 * 27 + 288);
    cost_is("conv2d_grad_weight",
            node(&f, 2, 1, (const int64_t[][5]){{4, 2, 4, 6, 6}, {4, 2, 3, 8, 8}, {4, 4, 3, 3, 3}}, 0, NULL),
            (288 + 384 + 108) * 4, 2.0 * 288 * 27);
    cost_is("conv2d_grad_input",
            node(&f, 2, 1, (const int64_t[][5]){{4, 2, 4, 6, 6}, {4, 4, 3, 3, 3}, {4, 2, 3, 8, 8}}, 0, NULL),
            (288 + 108 + 384) * 4, 2.0 * 288 * 27);
    /* attention q (1, 2, 5, 8), k v (1, 2, 7, 8): 2 products of 2*8 per pair, 2*5*7 pairs; causal half */
    const int64_t att[][5] = {{4, 1, 2, 5, 8}, {4, 1, 2, 7, 8}, {4, 1, 2, 7, 8}, {4, 1, 2, 5, 8}};
    cost_is("attention", node(&f, 3, 1, att, 0, NULL), (80 + 112 + 112 + 80) * 4, 2 * 2.0 * 70 * 8);
    cost_is("attention", node(&f, 3, 1, att, 1, &causal), (80 + 112 + 112 + 80) * 4, 2 * 2.0 * 70 * 8 / 2);
    cost_is("layer_norm", node(&f, 1, 1, (const int64_t[][5]){{2, 4, 10}, {2, 4, 10}}, 0, NULL), 80 * 4, 8.0 * 40);
    cost_is("rms_norm_grad", node(&f, 2, 2, (const int64_t[][5]){{2, 4, 10}, {2, 4, 10}, {2, 4, 10}, {1, 10}}, 0, NULL),
            (40 + 40 + 40 + 10) * 4, 8.0 * 40);
    /* elementwise: one per output element; a broadcast input counts its own bytes */
    cost_is("add", node(&f, 2, 1, (const int64_t[][5]){{2, 3, 4}, {1, 4}, {2, 3, 4}}, 0, NULL), (12 + 4 + 12) * 4, 12);
    cost_is("relu", node(&f, 1, 1, (const int64_t[][5]){{1, 7}, {1, 7}}, 0, NULL), 14 * 4, 7);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/test_prof_files.XXXXXX", GD_BUILD_DIR);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "FAIL: mkdtemp %s\n", dir);
        return 1;
    }
    if (!tu_open_ctx()) return 1;
    costs();
    trace_errors();
    summary();
    summary_skip();
    empty_summary();
    metrics();
    plots();
    char path[600];
    snprintf(path, sizeof path, "%s/curves.svg", dir);
    remove(path);
    rmdir(dir);
    return tu_finish("prof_files");
}
