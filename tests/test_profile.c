/* Traces of a few CNN training steps on the shapes, through the fast CPU backend and
 * through the test device (node by node, and timing a segment as a whole as the CUDA
 * plugin does a captured graph), held to what docs/profiling.md promises:
 *  - the file is JSON (parsed here with src/io/json.h) in the trace-event format;
 *  - every run of a program has exactly one span of work per kernel node (or its nodes
 *    named by the span of a segment timed whole);
 *  - spans on each track are ordered by start and properly nested;
 *  - a node's span starts after the host's span that launched it (clocks aligned);
 *  - the summary's totals are the sums of the spans;
 *  - counters (memory per backend, examples/s), compile phases, the application's spans;
 *  - GRADUS_PROFILE, flush, and the failures: a file that cannot be written costs the trace,
 *    never the work. */
#include "gradus_classifier.h"
#include "testdev_util.h"

#include "alloc.h"
#include "io/json.h"
#include "prof/trace.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

/* ---- the trace as JSON ------------------------------------------------------------------ */

typedef struct ev {
    const char *name, *cat, *ph;
    int64_t ts, dur; /* ns */
    int pid, tid;
    int program, run, node, segment;
    const gd_json *args;
} ev;

typedef struct trace {
    gd_json_doc *doc;
    ev *e;
    int n;
    const gd_json *other;
} trace;

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    if (buf != NULL && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf != NULL) buf[size] = '\0';
    *n = (size_t)size;
    return buf;
}

static int64_t us_to_ns(const gd_json *v) { return v != NULL && v->kind == GD_JSON_NUMBER ? llround(v->num * 1000.0) : -1; }

static int arg_int(const gd_json *args, const char *key)
{
    int64_t v;
    return args != NULL && gd_json_get_int(args, key, &v) ? (int)v : -1;
}

/* Parses the whole file with the JSON parser and checks each event's form. */
static int load_trace(const char *path, trace *t)
{
    memset(t, 0, sizeof *t);
    size_t n;
    char *text = slurp(path, &n);
    CHECK(text != NULL, "%s was not written", path);
    if (text == NULL) return 0;
    char err[200];
    t->doc = gd_json_parse(text, n, 0, err, sizeof err);
    free(text);
    CHECK(t->doc != NULL, "%s is not JSON: %s", path, err);
    if (t->doc == NULL) return 0;
    const gd_json *root = gd_json_root(t->doc), *evs = gd_json_get(root, "traceEvents");
    t->other = gd_json_get(root, "otherData");
    CHECK(evs != NULL && evs->kind == GD_JSON_ARRAY, "%s: no traceEvents array", path);
    CHECK(t->other != NULL && t->other->kind == GD_JSON_OBJECT, "%s: no otherData", path);
    if (evs == NULL || evs->kind != GD_JSON_ARRAY) return 0;
    t->e = calloc(evs->len + 1, sizeof *t->e);
    for (size_t i = 0; i < evs->len; i++) {
        const gd_json *o = evs->items[i];
        ev *x = &t->e[t->n++];
        x->name = gd_json_get_str(o, "name");
        x->cat = gd_json_get_str(o, "cat");
        x->ph = gd_json_get_str(o, "ph");
        CHECK(x->name != NULL && x->ph != NULL, "%s: event %zu lacks name or ph", path, i);
        if (x->ph == NULL) x->ph = "?";
        if (x->cat == NULL) x->cat = "";
        if (x->name == NULL) x->name = "";
        x->ts = us_to_ns(gd_json_get(o, "ts"));
        x->dur = us_to_ns(gd_json_get(o, "dur"));
        x->pid = arg_int(o, "pid");
        x->tid = arg_int(o, "tid");
        x->args = gd_json_get(o, "args");
        x->program = arg_int(x->args, "program");
        x->run = arg_int(x->args, "run");
        x->node = arg_int(x->args, "node");
        x->segment = arg_int(x->args, "segment");
        if (strcmp(x->ph, "M") == 0) continue;
        CHECK(x->ts >= 0 && x->pid >= 1, "%s: event %zu ('%s') has no ts or pid", path, i, x->name);
        if (strcmp(x->ph, "X") == 0) CHECK(x->dur >= 0, "%s: span %zu ('%s') has no duration", path, i, x->name);
    }
    return 1;
}

static void free_trace(trace *t)
{
    gd_json_free(t->doc);
    free(t->e);
    memset(t, 0, sizeof *t);
}

static int is(const ev *e, const char *ph, const char *cat) { return strcmp(e->ph, ph) == 0 && strcmp(e->cat, cat) == 0; }

/* Kernel nodes of program p, from otherData. */
static int program_nodes(const trace *t, int p)
{
    const gd_json *ps = gd_json_get(t->other, "programs");
    for (size_t i = 0; ps != NULL && i < ps->len; i++)
        if (arg_int(ps->items[i], "program") == p) return arg_int(ps->items[i], "nodes");
    return -1;
}

/* ---- the checks --------------------------------------------------------------------------- */

/* On each track (pid, tid), spans come in order of start and nest: a span that starts
 * inside another ends inside it. */
static void check_nesting(const trace *t, const char *what)
{
    int bad_order = 0, bad_nest = 0, tracks = 0;
    for (int i = 0; i < t->n; i++) {
        const ev *a = &t->e[i];
        if (strcmp(a->ph, "X") != 0) continue;
        int first = 1;
        for (int j = 0; j < i && first; j++) first = !(strcmp(t->e[j].ph, "X") == 0 && t->e[j].pid == a->pid && t->e[j].tid == a->tid);
        if (!first) continue;
        tracks++;
        int64_t last = -1, stack[256];
        int depth = 0;
        for (int j = i; j < t->n; j++) {
            const ev *b = &t->e[j];
            if (strcmp(b->ph, "X") != 0 || b->pid != a->pid || b->tid != a->tid) continue;
            if (b->ts < last && bad_order++ < 3)
                CHECK(0, "%s: track %d/%d: '%s' starts at %lld ns, before the span listed before it (%lld)", what, b->pid,
                      b->tid, b->name, (long long)b->ts, (long long)last);
            last = b->ts;
            while (depth > 0 && stack[depth - 1] <= b->ts) depth--;
            if (depth > 0 && b->ts + b->dur > stack[depth - 1] && bad_nest++ < 3)
                CHECK(0, "%s: track %d/%d: '%s' [%lld, %lld] overlaps the end of the span it starts in (%lld)", what,
                      b->pid, b->tid, b->name, (long long)b->ts, (long long)(b->ts + b->dur), (long long)stack[depth - 1]);
            if (depth < 256) stack[depth++] = b->ts + b->dur;
        }
    }
    CHECK(tracks >= 2, "%s: spans on %d tracks only", what, tracks);
}

/* Every run of every program: one node span per kernel node, each node once; segments
 * timed whole count the nodes they list. Node spans start inside their run, after the
 * host's launch of them. Returns the node spans seen. */
static int check_node_spans(const trace *t, const char *what, const char *device, int *segment_spans)
{
    int runs = 0, spans = 0, on_device = 0, late = 0;
    *segment_spans = 0;
    for (int i = 0; i < t->n; i++) {
        const ev *r = &t->e[i];
        if (!is(r, "X", "run")) continue;
        runs++;
        int want = program_nodes(t, r->program), got = 0;
        CHECK(want > 0, "%s: run of program %d, which otherData does not list", what, r->program);
        unsigned char seen[4096] = {0};
        for (int j = 0; j < t->n; j++) {
            const ev *x = &t->e[j];
            int node = is(x, "X", "node"), seg = is(x, "X", "device_segment");
            if ((!node && !seg) || x->program != r->program || x->run != r->run) continue;
            const char *be = gd_json_get_str(x->args, "backend");
            if (seg) {
                const gd_json *nodes = gd_json_get(x->args, "nodes"), *ids = gd_json_get(x->args, "node_ids");
                CHECK(nodes != NULL && nodes->kind == GD_JSON_ARRAY && nodes->len > 0 && ids != NULL && ids->len == nodes->len,
                      "%s: a segment span without its nodes", what);
                for (size_t k = 0; nodes != NULL && k < nodes->len; k++)
                    CHECK(nodes->items[k]->kind == GD_JSON_STRING && nodes->items[k]->len > 0, "%s: a segment's node %zu has no name", what, k);
                for (size_t k = 0; ids != NULL && k < ids->len; k++) {
                    int id = (int)ids->items[k]->i;
                    CHECK(id >= 0 && id < 4096 && !seen[id], "%s: node %d of program %d twice in run %d", what, id, r->program, r->run);
                    if (id >= 0 && id < 4096) seen[id] = 1;
                    got++;
                }
                (*segment_spans)++;
            } else {
                CHECK(x->node >= 0 && x->node < 4096, "%s: node span '%s' without a node id", what, x->name);
                if (x->node >= 0 && x->node < 4096) {
                    CHECK(!seen[x->node], "%s: node %d ('%s') of program %d has two spans in run %d", what, x->node, x->name,
                          r->program, r->run);
                    seen[x->node] = 1;
                }
                CHECK(gd_json_get_str(x->args, "op") != NULL && gd_json_get_str(x->args, "shapes") != NULL &&
                          gd_json_get_str(x->args, "dtype") != NULL, "%s: node span '%s' lacks op, shapes or dtype", what, x->name);
                got++;
                spans++;
            }
            on_device += be != NULL && device != NULL && strcmp(be, device) == 0;
            /* clocks: work starts after its run did, and after the host launched it */
            CHECK(x->ts >= r->ts, "%s: '%s' starts %lld ns before its run", what, x->name, (long long)(r->ts - x->ts));
            for (int k = 0; k < t->n; k++) {
                const ev *h = &t->e[k];
                if (h->pid != 1 || h->program != x->program || h->run != x->run) continue;
                int launch = is(h, "X", "launch") && node && x->segment < 0 && h->node == x->node;
                int segment = is(h, "X", "segment") && (seg || x->segment >= 0) && h->segment == x->segment;
                if (!launch && !segment) continue;
                if (x->ts < h->ts && late++ < 3)
                    CHECK(0, "%s: '%s' starts %lld ns before the host launched it ('%s')", what, x->name,
                          (long long)(h->ts - x->ts), h->name);
            }
        }
        CHECK(got == want, "%s: run %d of program %d: %d nodes have spans, it has %d", what, r->run, r->program, got, want);
    }
    CHECK(runs >= 3, "%s: %d runs", what, runs);
    if (device != NULL) CHECK(on_device > 0, "%s: no span of work on %s", what, device);
    return spans;
}

/* The summary read back from the file: its totals are the sums of the spans. */
static void check_summary(const char *path, const trace *t, const char *what)
{
    char err[600];
    gd_trace *tr = NULL;
    gd_summary *s = NULL;
    gd_status st = gd_trace_load(path, &tr, err, sizeof err);
    CHECK(st == GD_OK, "%s: reading it back: %s", what, err);
    if (st == GD_OK) st = gd_trace_summarize(tr, &s, err, sizeof err);
    CHECK(st == GD_OK, "%s: summary: %s", what, st == GD_OK ? "" : err);
    if (s == NULL) {
        gd_trace_free(tr);
        return;
    }
    int64_t all = 0, all_calls = 0;
    for (int i = 0; i < s->n_programs; i++) {
        const gd_sum_program *p = &s->programs[i];
        int64_t want = 0, want_calls = 0, want_run = 0, runs = 0;
        for (int k = 0; k < t->n; k++) {
            const ev *e = &t->e[k];
            int work = is(e, "X", "node") || is(e, "X", "device_segment");
            if (work && e->program == p->program) want += e->dur, want_calls++;
            if (is(e, "X", "run") && e->program == p->program) want_run += e->dur, runs++;
        }
        int64_t ops = 0, op_calls = 0, nodes = 0, node_calls = 0;
        for (int k = 0; k < p->n_ops; k++) ops += p->ops[k].total_ns, op_calls += p->ops[k].calls;
        for (int k = 0; k < p->n_nodes; k++) nodes += p->nodes[k].total_ns, node_calls += p->nodes[k].calls;
        CHECK(ops == want && nodes == want && p->device_ns == want, "%s: program %d: op total %lld, node total %lld, "
              "summary %lld ns; its spans add up to %lld", what, p->program, (long long)ops, (long long)nodes,
              (long long)p->device_ns, (long long)want);
        CHECK(op_calls == want_calls && node_calls == want_calls, "%s: program %d: %lld/%lld calls, %lld spans", what,
              p->program, (long long)op_calls, (long long)node_calls, (long long)want_calls);
        CHECK(p->run_ns == want_run && p->runs == runs, "%s: program %d: runs %lld ns in %lld, spans say %lld in %lld",
              what, p->program, (long long)p->run_ns, (long long)p->runs, (long long)want_run, (long long)runs);
        all += want;
        all_calls += want_calls;
    }
    CHECK(s->device_ns == all && s->spans == all_calls, "%s: summary total %lld ns in %lld spans, want %lld in %lld", what,
          (long long)s->device_ns, (long long)s->spans, (long long)all, (long long)all_calls);
    gd_summary_free(s);
    gd_trace_free(tr);
}

static int count(const trace *t, const char *ph, const char *cat, const char *name)
{
    int n = 0;
    for (int i = 0; i < t->n; i++)
        n += strcmp(t->e[i].ph, ph) == 0 && (cat == NULL || strcmp(t->e[i].cat, cat) == 0) &&
             (name == NULL || strcmp(t->e[i].name, name) == 0);
    return n;
}

/* What every trace of training must hold besides the node spans. */
static void check_common(const trace *t, const char *what, int n_backends)
{
    static const char *const phases[] = {"select", "passes", "layout", "actions", "memory", "describe", "segments", "bind"};
    int compiles = count(t, "X", "compile", NULL);
    CHECK(compiles >= 2, "%s: %d compile spans", what, compiles);
    for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++)
        CHECK(count(t, "X", "phase", phases[i]) >= compiles, "%s: phase %s: %d spans for %d compiles", what, phases[i],
              count(t, "X", "phase", phases[i]), compiles);
    CHECK(count(t, "X", "user", "train step") == 3, "%s: %d 'train step' spans, 3 steps", what, count(t, "X", "user", "train step"));
    CHECK(count(t, "X", "user", "load batch") >= 3, "%s: %d 'load batch' spans", what, count(t, "X", "user", "load batch"));
    CHECK(count(t, "X", "transfer", NULL) >= 12, "%s: %d writes and reads of tensors", what, count(t, "X", "transfer", NULL));
    CHECK(count(t, "C", "counter", "examples/s") == 3, "%s: %d examples/s samples", what, count(t, "C", "counter", "examples/s"));
    int mem_pids = 0;
    for (int pid = 2; pid < 2 + n_backends; pid++) {
        int n = 0;
        for (int i = 0; i < t->n; i++) n += is(&t->e[i], "C", "counter") && t->e[i].pid == pid;
        mem_pids += n > 0;
    }
    CHECK(mem_pids == n_backends, "%s: memory counters on %d of %d backends", what, mem_pids, n_backends);
    int64_t dropped = -1;
    gd_json_get_int(t->other, "dropped_events", &dropped);
    CHECK(dropped == 0, "%s: %lld events dropped", what, (long long)dropped);
}

/* ---- runs --------------------------------------------------------------------------------- */

static gd_dataset train_set, test_set;

static int train_steps(gd_ctx *c, int steps)
{
    gd_train_config cfg = {.model = "cnn", .epochs = 1, .batch = 64, .seed = 3, .limit = 64 * steps};
    gd_train_result r;
    gd_status st = gd_train_classifier(c, &train_set, &test_set, &cfg, &r);
    CHECK(st == GD_OK && r.steps == steps, "training on %s: %s", gd_ctx_backend(c), gd_ctx_error(c));
    return st == GD_OK;
}

static void profile_run(gd_ctx *c, const char *name, const char *device, int whole_segments)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    gd_status st = gd_profile_start(c, path);
    CHECK(st == GD_OK, "%s: start: %s", name, gd_ctx_error(c));
    CHECK(gd_profile_active(c) && strcmp(gd_profile_path(c), path) == 0, "%s: not recording into %s", name, path);
    train_steps(c, 3);
    st = gd_profile_stop(c);
    CHECK(st == GD_OK, "%s: stop: %s", name, gd_ctx_error(c));
    CHECK(!gd_profile_active(c), "%s: still recording after stop", name);
    trace t;
    if (!load_trace(path, &t)) return;
    int segs = 0;
    int spans = check_node_spans(&t, name, device, &segs);
    CHECK(spans > 0, "%s: no node spans", name);
    if (whole_segments) CHECK(segs > 0, "%s: no segment timed whole", name);
    else CHECK(segs == 0, "%s: %d segment spans from a backend that times nodes", name, segs);
    check_nesting(&t, name);
    check_common(&t, name, gd_backend_count(c));
    check_summary(path, &t, name);
    if (device != NULL && strcmp(device, "testdev") == 0) {
        CHECK(count(&t, "X", "copy", NULL) > 0, "%s: no copies between backends", name);
        /* the test device reports a peak; the trace keeps it */
        const gd_json *bs = gd_json_get(t.other, "backends");
        int peak = 0;
        for (size_t i = 0; bs != NULL && i < bs->len; i++) {
            const char *n = gd_json_get_str(bs->items[i], "name");
            const gd_json *f32 = gd_json_get(gd_json_get(bs->items[i], "peak"), "f32");
            double fl = 0;
            if (n != NULL && strcmp(n, "testdev") == 0 && gd_json_get_num(f32, "flop_per_s", &fl)) peak = fl == 16e9;
        }
        CHECK(peak, "%s: the test device's peak is not in otherData", name);
    }
    /* a node with a cost: linear's FLOPs are 2 * rows * in * out + rows * out */
    int linears = 0;
    for (int i = 0; i < t.n; i++) {
        const ev *e = &t.e[i];
        const char *op = gd_json_get_str(e->args, "op");
        double flops = -1;
        if (!is(e, "X", "node") || op == NULL || strcmp(op, "linear") != 0 || !gd_json_get_num(e->args, "flops", &flops))
            continue;
        const char *shapes = gd_json_get_str(e->args, "shapes");
        long long rows, in, out, w_out, w_in;
        if (shapes != NULL && sscanf(shapes, "f32[%lld,%lld], f32[%lld,%lld]", &rows, &in, &w_out, &w_in) == 4) {
            out = w_out;
            CHECK(flops == 2.0 * rows * in * out + rows * out, "%s: linear %s: %g FLOPs", name, shapes, flops);
            linears++;
        }
    }
    if (device == NULL || strcmp(device, "cpu") == 0) CHECK(linears > 0, "%s: no linear node with its FLOPs", name);
    free_trace(&t);
}

/* GRADUS_PROFILE: a context records from its creation and writes when freed. */
static void profile_from_env(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/env-%%p.json", dir);
    setenv("GRADUS_PROFILE", path, 1);
    gd_ctx *c = NULL;
    gd_status st = gd_ctx_create(&c, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .plugin_path = ""});
    unsetenv("GRADUS_PROFILE");
    CHECK(st == GD_OK && gd_profile_active(c), "GRADUS_PROFILE did not start a profile");
    if (c == NULL) return;
    train_steps(c, 3);
    gd_ctx_free(c);
    snprintf(path, sizeof path, "%s/env-%ld.json", dir, (long)getpid());
    trace t;
    if (load_trace(path, &t)) {
        int segs;
        check_node_spans(&t, "GRADUS_PROFILE", NULL, &segs);
        check_nesting(&t, "GRADUS_PROFILE");
        free_trace(&t);
    }
}

/* Failures: the trace is lost, never the work. */
static void check_failures(void)
{
    gd_ctx *c = NULL;
    gd_ctx_create(&c, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .plugin_path = ""});
    if (c == NULL) return;
    char path[512];
    /* a directory that does not exist: refused at start, naming the file */
    snprintf(path, sizeof path, "%s/no-such-dir/t.json", dir);
    gd_status st = gd_profile_start(c, path);
    CHECK(st == GD_ERR_IO && strstr(gd_ctx_error(c), path) != NULL, "start into a missing directory: %d '%s'", st,
          gd_ctx_error(c));
    CHECK(!gd_profile_active(c), "a refused profile is recording");
    gd_ctx_clear_error(c);
    train_steps(c, 1);
    /* the directory goes away while recording: stop reports it, the context goes on */
    char sub[400];
    snprintf(sub, sizeof sub, "%s/gone", dir);
    mkdir(sub, 0700);
    snprintf(path, sizeof path, "%s/t.json", sub);
    CHECK(gd_profile_start(c, path) == GD_OK, "start: %s", gd_ctx_error(c));
    CHECK(gd_profile_start(c, path) == GD_ERR_INVALID, "a second start while recording was not refused");
    gd_profile_end(c); /* an end without a begin: ignored */
    gd_profile_begin(c, "left open");
    train_steps(c, 1);
    rmdir(sub);
    st = gd_profile_stop(c);
    CHECK(st == GD_ERR_IO && strstr(gd_ctx_error(c), path) != NULL && strstr(gd_ctx_error(c), "cannot write") != NULL,
          "stop into a removed directory: %d '%s'", st, gd_ctx_error(c));
    CHECK(!gd_profile_active(c), "still recording after a failed stop");
    CHECK(gd_profile_stop(c) == GD_ERR_INVALID, "stop without a profile was not refused");
    gd_ctx_clear_error(c);
    train_steps(c, 1);
    /* flush writes what there is and keeps recording; an open span is closed at stop */
    snprintf(path, sizeof path, "%s/flush.json", dir);
    CHECK(gd_profile_start(c, path) == GD_OK, "start: %s", gd_ctx_error(c));
    gd_profile_begin(c, "outer");
    train_steps(c, 1);
    CHECK(gd_profile_flush(c) == GD_OK, "flush: %s", gd_ctx_error(c));
    trace t;
    int runs_then = 0;
    if (load_trace(path, &t)) {
        runs_then = count(&t, "X", "run", NULL);
        CHECK(runs_then > 0, "flush wrote no runs");
        free_trace(&t);
    }
    train_steps(c, 1);
    CHECK(gd_profile_stop(c) == GD_OK, "stop: %s", gd_ctx_error(c));
    if (load_trace(path, &t)) {
        CHECK(count(&t, "X", "run", NULL) > runs_then, "the trace after flush lost the runs after it");
        CHECK(count(&t, "X", "user", "outer") == 1, "a span left open is not closed at stop");
        check_nesting(&t, "flush");
        free_trace(&t);
    }
    gd_ctx_free(c);
}

/* Out of memory while profiling costs records or the trace, never the work: each
 * allocation of starting a profile, running two steps and stopping is failed in turn;
 * runs must succeed, start and stop return OK or NOMEM, and a trace written is JSON. */
static void out_of_memory(void)
{
    td_model m;
    gd_ctx *c = NULL;
    gd_ctx_create(&c, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1});
    if (c == NULL || td_model_build(c, &m) != GD_OK) {
        CHECK(0, "out of memory: building: %s", c != NULL ? gd_ctx_error(c) : "no context");
        gd_ctx_free(c);
        return;
    }
    gd_program *p = gd_compile(m.g, 1, &m.loss, GD_COMPILE_UPDATES);
    char path[512];
    snprintf(path, sizeof path, "%s/oom.json", dir);
    int64_t total = -1, passes = 0, written = 0;
    for (int64_t n = 1; p != NULL && (total < 0 || n <= total); n++) {
        gd_alloc_fail_at(total < 0 ? 0 : n); /* the first pass counts the allocations */
        gd_alloc_count_reset();
        gd_status s0 = gd_profile_start(c, path), s1 = td_model_step(&m, p, 0, NULL), s2 = td_model_step(&m, p, 1, NULL);
        gd_status s3 = gd_profile_active(c) ? gd_profile_stop(c) : GD_OK;
        int64_t made = gd_alloc_count();
        gd_alloc_fail_at(0);
        CHECK((s0 == GD_OK || s0 == GD_ERR_NOMEM) && (s3 == GD_OK || s3 == GD_ERR_NOMEM),
              "out of memory at allocation %lld: start %d, stop %d: %s", (long long)n, s0, s3, gd_ctx_error(c));
        CHECK(s1 == GD_OK && s2 == GD_OK, "out of memory at allocation %lld of the profile failed a run: %s",
              (long long)n, gd_ctx_error(c));
        if (s0 == GD_OK && s3 == GD_OK) {
            trace t;
            if (load_trace(path, &t)) free_trace(&t);
            written++;
        }
        remove(path);
        gd_ctx_clear_error(c);
        if (total < 0) {
            total = made;
            n = 0;
        }
        passes++;
    }
    CHECK(total > 10 && written > 0, "out of memory: %lld allocations, %lld traces written", (long long)total, (long long)written);
    printf("out of memory: each of %lld allocations of a profile failed in turn; %lld traces still written\n",
           (long long)total, (long long)written - 1);
    gd_program_free(p);
    gd_graph_free(m.g);
    gd_ctx_free(c);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/test_profile.XXXXXX", GD_BUILD_DIR);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "FAIL: mkdtemp %s\n", dir);
        return 1;
    }
    if (!tu_open_ctx()) return 1;
    if (gd_dataset_shapes(ctx, 192, 11, &train_set) != GD_OK || gd_dataset_shapes(ctx, 64, 12, &test_set) != GD_OK) {
        fprintf(stderr, "FAIL: shapes: %s\n", gd_ctx_error(ctx));
        return 1;
    }
    CHECK(!gd_profile_active(ctx), "a context records without being asked");

    /* the fast CPU backend: the host times its kernels */
    gd_ctx *c = NULL;
    gd_ctx_create(&c, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .plugin_path = ""});
    if (c != NULL && gd_ctx_use_backend(c, "cpu") == GD_OK) profile_run(c, "cpu", "cpu", 0);
    else CHECK(0, "no cpu backend");
    gd_ctx_free(c);
    /* the reference alone */
    profile_run(ctx, "ref", "ref", 0);
    /* the test device: its profiler module times each node, segments included */
    if ((c = td_new_ctx("testdev", 1)) != NULL) profile_run(c, "testdev", "testdev", 0);
    gd_ctx_free(c);
    /* ... and executing segments late, when the host waits */
    if ((c = td_new_ctx("testdev_hostvis", 1)) != NULL) profile_run(c, "testdev_hostvis", "testdev", 0);
    gd_ctx_free(c);
    /* a device that times a prepared segment as a whole (as CUDA graphs are timed) */
    if ((c = td_new_ctx("testdev_wholeseg", 1)) != NULL) profile_run(c, "testdev_wholeseg", "testdev", 1);
    gd_ctx_free(c);
    /* segments off: node by node through launches */
    setenv("GRADUS_EXECUTOR", "0", 1);
    if ((c = td_new_ctx("testdev_wholeseg", 1)) != NULL) profile_run(c, "testdev_noexec", "testdev", 0);
    gd_ctx_free(c);
    unsetenv("GRADUS_EXECUTOR");

    profile_from_env();
    check_failures();
    out_of_memory();
    gd_dataset_free(&train_set);
    gd_dataset_free(&test_set);
    if (failures == 0 && getenv("GRADUS_TEST_KEEP") == NULL) { /* kept for a look when set */
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
    return tu_finish("profile");
}
