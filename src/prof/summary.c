/* summary.c — where a trace's time went: for each program, its runs (the steps) and the
 * work of its nodes on their backends, by op and by node, with achieved bandwidth and
 * arithmetic rate beside the backend's peak where the op declares its cost.
 *
 * Device time is the sum of node spans (and of segments a backend timed as a whole); a
 * node's share is its time over the time of its program's runs, so the shares of a host
 * backend, whose work happens inside the runs, add up to at most 100%. A device queue can
 * hold more work than the runs took to launch (a program whose runs are not waited on); then
 * shares are of the node work, so that they still add up to 100%. */
#include "trace.h"

#include "alloc.h"
#include "checked.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a map from (program, key) to a row ------------------------------------------------------- */

typedef struct slot {
    char *key;        /* "<program>/<kind><name>", owned */
    int prog, row;    /* row index within its program's ops or nodes */
} slot;

typedef struct builder {
    gd_summary *s;
    slot *slots;
    size_t cap, used;
    int *cap_ops, *cap_nodes; /* per program */
    const gd_trace *t;
    int32_t skip;  /* runs 1..skip of every program are left out */
    int failed;
} builder;

static uint32_t hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static int grow_map(builder *b)
{
    size_t cap = b->cap ? b->cap * 2 : 1024, bytes;
    if (gd_mul_size(cap, sizeof(slot), &bytes) != 0) return -1;
    slot *n = gd_calloc(cap, sizeof *n);
    if (n == NULL) return -1;
    for (size_t i = 0; i < b->cap; i++) {
        if (b->slots[i].key == NULL) continue;
        size_t k = hash(b->slots[i].key) & (cap - 1);
        while (n[k].key != NULL) k = (k + 1) & (cap - 1);
        n[k] = b->slots[i];
    }
    gd_free(b->slots);
    b->slots = n;
    b->cap = cap;
    return 0;
}

/* The program entry for id (made when new); -1 when out of memory. */
static int program_of(builder *b, int32_t id)
{
    gd_summary *s = b->s;
    for (int i = 0; i < s->n_programs; i++)
        if (s->programs[i].program == id) return i;
    gd_sum_program *p = gd_realloc(s->programs, sizeof *p * ((size_t)s->n_programs + 1));
    int *co = gd_realloc(b->cap_ops, sizeof *co * ((size_t)s->n_programs + 1));
    if (co != NULL) b->cap_ops = co;
    int *cn = gd_realloc(b->cap_nodes, sizeof *cn * ((size_t)s->n_programs + 1));
    if (cn != NULL) b->cap_nodes = cn;
    if (p == NULL || co == NULL || cn == NULL) {
        if (p != NULL) s->programs = p;
        return -1;
    }
    s->programs = p;
    gd_sum_program *x = &p[s->n_programs];
    memset(x, 0, sizeof *x);
    x->program = id;
    for (int i = 0; i < b->t->n_programs; i++)
        if (b->t->programs[i].program == id) x->description = b->t->programs[i].description;
    b->cap_ops[s->n_programs] = b->cap_nodes[s->n_programs] = 0;
    return s->n_programs++;
}

static void peaks(const gd_trace *t, gd_sum_row *r)
{
    if (r->backend == NULL || r->dtype == NULL) return;
    for (int i = 0; i < t->n_backends; i++) {
        if (t->backends[i].name == NULL || strcmp(t->backends[i].name, r->backend) != 0) continue;
        for (int dt = 0; dt < GDP_DTYPE_COUNT; dt++) {
            if (strcmp(gd_dtype_name((gd_dtype)dt), r->dtype) != 0) continue;
            r->peak_flops = t->backends[i].peak_flops[dt];
            r->peak_bw = t->backends[i].peak_bw[dt];
        }
    }
}

/* The row of `key` in program pi's ops (is_op) or nodes, made from span sp when new. An op
 * row keeps `key` as its name: an op name of the trace's, or a literal. */
static gd_sum_row *row_of(builder *b, int pi, int is_op, const char *key, const gd_trace_span *sp)
{
    char full[600];
    snprintf(full, sizeof full, "%d/%c%s", pi, is_op ? 'o' : 'n', key);
    if ((b->used + 1) * 2 > b->cap && grow_map(b) != 0) return NULL;
    size_t k = hash(full) & (b->cap - 1);
    gd_sum_program *p = &b->s->programs[pi];
    for (; b->slots[k].key != NULL; k = (k + 1) & (b->cap - 1))
        if (strcmp(b->slots[k].key, full) == 0) return is_op ? &p->ops[b->slots[k].row] : &p->nodes[b->slots[k].row];
    gd_sum_row **rows = is_op ? &p->ops : &p->nodes;
    int *n = is_op ? &p->n_ops : &p->n_nodes, *cap = is_op ? &b->cap_ops[pi] : &b->cap_nodes[pi];
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 32;
        gd_sum_row *x = gd_realloc(*rows, sizeof *x * (size_t)c);
        if (x == NULL) return NULL;
        *rows = x;
        *cap = c;
    }
    char *own = gd_strdup(full);
    if (own == NULL) return NULL;
    b->slots[k] = (slot){own, pi, *n};
    b->used++;
    gd_sum_row *r = &(*rows)[(*n)++];
    memset(r, 0, sizeof *r);
    r->node = -1;
    r->segment = -1;
    r->bytes = r->flops = -1;
    if (is_op) {
        r->name = key;
        return r;
    }
    r->name = sp->label != NULL ? sp->label : sp->name;
    r->op = sp->op;
    r->backend = sp->backend;
    r->shapes = sp->shapes;
    r->dtype = sp->dtype;
    r->node = sp->node;
    r->segment = strcmp(sp->cat, "device_segment") == 0 ? sp->segment : -1;
    r->bytes = sp->bytes;
    r->flops = sp->flops;
    peaks(b->t, r);
    return r;
}

static int by_time(const void *a, const void *b)
{
    const gd_sum_row *x = a, *y = b;
    if (x->total_ns != y->total_ns) return x->total_ns > y->total_ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int by_device_time(const void *a, const void *b)
{
    const gd_sum_program *x = a, *y = b;
    if ((x->program < 0) != (y->program < 0)) return x->program < 0 ? 1 : -1; /* unattributed work last */
    if (x->device_ns != y->device_ns) return x->device_ns > y->device_ns ? -1 : 1;
    return x->program - y->program;
}

void gd_summary_free(gd_summary *s)
{
    if (s == NULL) return;
    for (int i = 0; i < s->n_programs; i++) {
        gd_free(s->programs[i].ops);
        gd_free(s->programs[i].nodes);
    }
    gd_free(s->programs);
    gd_free(s);
}

/* One span into the summary; -1 when out of memory. */
static int add(builder *b, const gd_trace_span *sp)
{
    int is_run = strcmp(sp->cat, "run") == 0, is_node = strcmp(sp->cat, "node") == 0;
    int is_seg = strcmp(sp->cat, "device_segment") == 0, is_dev = strcmp(sp->cat, "device") == 0;
    if (!is_run && !is_node && !is_seg && !is_dev) return 0;
    if (sp->run >= 1 && sp->run <= b->skip) return 0; /* a warm-up run, or its work */
    int pi = program_of(b, is_dev ? -1 : sp->program);
    if (pi < 0) return -1;
    gd_sum_program *p = &b->s->programs[pi];
    if (is_run) {
        p->runs++;
        p->run_ns += sp->dur;
        return 0;
    }
    char key[300];
    const char *op;
    if (is_node) {
        if (sp->node >= 0) snprintf(key, sizeof key, "#%d", sp->node);
        else snprintf(key, sizeof key, "%s", sp->label != NULL ? sp->label : sp->name);
        op = sp->op != NULL ? sp->op : "?";
    } else if (is_seg) {
        snprintf(key, sizeof key, "segment %d", sp->segment);
        op = "(segment, timed whole)";
    } else {
        snprintf(key, sizeof key, "%s", sp->name);
        op = "(device work, no node)";
    }
    gd_sum_row *n = row_of(b, pi, 0, key, sp);
    if (n == NULL) return -1;
    n->calls++;
    n->total_ns += sp->dur;
    gd_sum_row *o = row_of(b, pi, 1, op, sp);
    if (o == NULL) return -1;
    o->calls++;
    o->total_ns += sp->dur;
    p->spans++;
    p->device_ns += sp->dur;
    b->s->spans++;
    b->s->device_ns += sp->dur;
    return 0;
}

gd_status gd_trace_summarize(const gd_trace *t, gd_summary **out, char *err, size_t cap)
{
    return gd_trace_summarize_from(t, 0, out, err, cap);
}

gd_status gd_trace_summarize_from(const gd_trace *t, int32_t skip_runs, gd_summary **out, char *err, size_t cap)
{
    *out = NULL;
    builder b = {.t = t, .skip = skip_runs > 0 ? skip_runs : 0};
    b.s = gd_calloc(1, sizeof *b.s);
    int rc = b.s == NULL ? -1 : 0;
    if (b.s != NULL) b.s->skipped_runs = b.skip;
    for (size_t i = 0; rc == 0 && i < t->n_spans; i++) rc = add(&b, &t->spans[i]);
    if (rc == 0) {
        for (int i = 0; i < b.s->n_programs; i++) {
            gd_sum_program *p = &b.s->programs[i];
            if (p->n_ops > 1) qsort(p->ops, (size_t)p->n_ops, sizeof *p->ops, by_time);
            if (p->n_nodes > 1) qsort(p->nodes, (size_t)p->n_nodes, sizeof *p->nodes, by_time);
        }
        if (b.s->n_programs > 1) /* qsort of no array is undefined even for zero elements */
            qsort(b.s->programs, (size_t)b.s->n_programs, sizeof *b.s->programs, by_device_time);
        b.s->dropped = t->dropped;
        b.s->unmatched = t->unmatched;
    }
    for (size_t i = 0; i < b.cap; i++) gd_free(b.slots[i].key);
    gd_free(b.slots);
    gd_free(b.cap_ops);
    gd_free(b.cap_nodes);
    if (rc != 0) {
        gd_summary_free(b.s);
        snprintf(err, cap, "out of memory summarizing %zu spans", t->n_spans);
        return GD_ERR_NOMEM;
    }
    *out = b.s;
    return GD_OK;
}

/* ---- as text ------------------------------------------------------------------------------------ */

typedef struct printer {
    void (*line)(void *, const char *);
    void *user;
} printer;

static void say(printer *p, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    p->line(p->user, buf);
}

/* s cut to w columns ("..." at the end when cut). */
static const char *fit(const char *s, int w, char *buf, size_t cap)
{
    if (s == NULL) s = "?";
    if ((int)strlen(s) <= w) return s;
    snprintf(buf, cap, "%.*s...", w > 3 ? w - 3 : 0, s);
    return buf;
}

/* "12.3 (4.6% of 268)": an achieved rate per second in units of 1e9, beside the peak. */
static const char *rate(double per_call, const gd_sum_row *r, double peak, char *buf, size_t cap)
{
    if (per_call < 0 || r->total_ns <= 0) return "-";
    double v = per_call * (double)r->calls / (double)r->total_ns; /* per ns = 1e9 per s */
    if (peak > 0) snprintf(buf, cap, "%.2f (%.1f%% of %.0f)", v, 100.0 * v * 1e9 / peak, peak / 1e9);
    else snprintf(buf, cap, "%.2f", v);
    return buf;
}

static double share_of(int64_t part, int64_t whole)
{
    return whole > 0 ? 100.0 * (double)part / (double)whole : 0;
}

/* a row's share: of the runs' time, or of the node work when that is longer */
static double share(int64_t part, const gd_sum_program *p)
{
    return share_of(part, p->run_ns > p->device_ns ? p->run_ns : p->device_ns);
}

static void program_lines(printer *pr, const gd_sum_program *p, int top)
{
    char a[128], b[128], c[128];
    if (p->program < 0) say(pr, "device work no launch of the trace accounts for");
    else if (p->description != NULL) say(pr, "%s", p->description);
    else say(pr, "program %d", p->program);
    if (p->runs > 0)
        say(pr, "  %lld run%s, %.3f ms (%.3f ms per run); node work %.3f ms in %lld span%s (%.1f%% of the runs' time)",
            (long long)p->runs, p->runs == 1 ? "" : "s", (double)p->run_ns / 1e6,
            (double)p->run_ns / 1e6 / (double)p->runs, (double)p->device_ns / 1e6, (long long)p->spans,
            p->spans == 1 ? "" : "s", share_of(p->device_ns, p->run_ns));
    else
        say(pr, "  node work %.3f ms in %lld spans", (double)p->device_ns / 1e6, (long long)p->spans);
    if (p->n_ops == 0) return;
    say(pr, "  %-32s %8s %12s %12s %7s", "by op", "calls", "total ms", "mean us", "share");
    int n = top > 0 && top < p->n_ops ? top : p->n_ops;
    for (int i = 0; i < n; i++) {
        const gd_sum_row *r = &p->ops[i];
        say(pr, "  %-32s %8lld %12.3f %12.3f %6.1f%%", fit(r->name, 32, a, sizeof a), (long long)r->calls,
            (double)r->total_ns / 1e6, (double)r->total_ns / 1e3 / (double)r->calls, share(r->total_ns, p));
    }
    if (n < p->n_ops) say(pr, "  (%d more op%s)", p->n_ops - n, p->n_ops - n == 1 ? "" : "s");
    say(pr, "  %-32s %-20s %-8s %6s %11s %11s %7s  %-24s %s", "by node", "op", "backend", "calls", "total ms",
        "mean us", "share", "GB/s", "GFLOP/s");
    n = top > 0 && top < p->n_nodes ? top : p->n_nodes;
    for (int i = 0; i < n; i++) {
        const gd_sum_row *r = &p->nodes[i];
        char name[160], rb[96], rf[96];
        /* the id, unless the label is the default "<op>#<id>" that already says it */
        char id[24];
        snprintf(id, sizeof id, "#%d", r->node);
        size_t nl = strlen(r->name), il = strlen(id);
        if (r->node >= 0 && !(nl > il && strcmp(r->name + nl - il, id) == 0))
            snprintf(name, sizeof name, "%s [%s]", r->name, id);
        else snprintf(name, sizeof name, "%s", r->name);
        say(pr, "  %-32s %-20s %-8s %6lld %11.3f %11.3f %6.1f%%  %-24s %s", fit(name, 32, a, sizeof a),
            fit(r->op != NULL ? r->op : "-", 20, b, sizeof b), fit(r->backend != NULL ? r->backend : "-", 8, c, sizeof c),
            (long long)r->calls, (double)r->total_ns / 1e6, (double)r->total_ns / 1e3 / (double)r->calls,
            share(r->total_ns, p), rate(r->bytes, r, r->peak_bw, rb, sizeof rb), rate(r->flops, r, r->peak_flops, rf, sizeof rf));
    }
    if (n < p->n_nodes) say(pr, "  (%d more node%s)", p->n_nodes - n, p->n_nodes - n == 1 ? "" : "s");
}

void gd_summary_lines(const gd_summary *s, int top, int program, int max_programs, void (*line)(void *, const char *),
                      void *user)
{
    printer pr = {line, user};
    say(&pr, "%lld spans of node work, %.3f ms in all", (long long)s->spans, (double)s->device_ns / 1e6);
    if (s->skipped_runs > 0)
        say(&pr, "the first %d run%s of each program left out (warm-up)", (int)s->skipped_runs,
            s->skipped_runs == 1 ? "" : "s");
    if (s->dropped > 0)
        say(&pr, "%.0f events were dropped while recording (GRADUS_PROFILE_MAX_EVENTS): the figures cover what was kept",
            s->dropped);
    if (s->unmatched > 0) say(&pr, "%.0f device spans matched no launch", s->unmatched);
    int shown = 0, rest = 0;
    int64_t rest_ns = 0;
    char rest_ids[200] = "";
    for (int i = 0; i < s->n_programs; i++) {
        const gd_sum_program *p = &s->programs[i];
        if (program != 0 && p->program != program) continue;
        if (p->spans == 0 && program == 0) continue; /* programs that ran no node (views only) */
        /* the busiest in full; with no number given, those with 1% of the work or more */
        int small = max_programs > 0 ? shown >= max_programs : p->device_ns * 100 < s->device_ns;
        if (program == 0 && small) {
            size_t l = strlen(rest_ids);
            if (l < sizeof rest_ids - 16) snprintf(rest_ids + l, sizeof rest_ids - l, "%s%d", rest ? ", " : "", p->program);
            rest++;
            rest_ns += p->device_ns;
            continue;
        }
        say(&pr, "%s", "");
        program_lines(&pr, p, top);
        shown++;
    }
    if (rest > 0)
        say(&pr, "\n%d more program%s with %.3f ms of node work (program%s %s): gradus profile --program N shows one",
            rest, rest == 1 ? "" : "s", (double)rest_ns / 1e6, rest == 1 ? "" : "s", rest_ids);
    if (shown == 0) say(&pr, program != 0 ? "no node work of program %d in the trace" : "no node work in the trace", program);
}
