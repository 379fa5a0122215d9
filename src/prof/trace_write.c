/* trace_write.c — a profile as a Chrome trace-event file (the JSON object form, which
 * Perfetto and chrome://tracing open): "traceEvents" holds metadata naming the tracks,
 * then every span as a complete event ("ph": "X") and every counter sample ("ph": "C"),
 * sorted by track and start so that each track reads in order; "otherData" says what the
 * profile knew (backends, their peaks, programs, what was dropped).
 *
 * Times are microseconds since the earliest event, written with exactly three decimals,
 * so a reader recovers the recorded nanoseconds exactly. The file is written to
 * "<path>.part" and renamed over path, so a trace on disk is always a whole one. */
#include "record.h"
#include "text.h"

#include "io/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A string value; bytes that are not UTF-8 (a label is the user's) become '?', so the
 * file stays JSON. */
static void put_str(gd_json_out *o, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s), i = 0;
    for (; i < n; i += gd_utf8_len(u + i, n - i))
        if (gd_utf8_len(u + i, n - i) == 0) break;
    if (i == n) {
        gd_json_string(o, s, n);
        return;
    }
    char buf[1024];
    size_t m = 0;
    for (i = 0; i < n && m + 4 < sizeof buf;) {
        size_t l = gd_utf8_len(u + i, n - i);
        if (l == 0) {
            buf[m++] = '?';
            i++;
            continue;
        }
        memcpy(buf + m, s + i, l);
        m += l;
        i += l;
    }
    gd_json_string(o, buf, m);
}

static void key_str(gd_json_out *o, const char *k, const char *v)
{
    gd_json_key(o, k);
    put_str(o, v);
}
static void key_int(gd_json_out *o, const char *k, int64_t v)
{
    gd_json_key(o, k);
    gd_json_int(o, v);
}
/* Microseconds with three decimals: the nanoseconds exactly. */
static void key_us(gd_json_out *o, const char *k, uint64_t ns)
{
    char b[40];
    int n = snprintf(b, sizeof b, "%llu.%03llu", (unsigned long long)(ns / 1000), (unsigned long long)(ns % 1000));
    gd_json_key(o, k);
    gd_json_raw(o, b, (size_t)n);
}
static void key_num(gd_json_out *o, const char *k, double v)
{
    gd_json_key(o, k);
    if (v > -9e15 && v < 9e15 && v == (double)(int64_t)v) gd_json_int(o, (int64_t)v);
    else gd_json_number(o, v);
}

static void reset(gd_json_out *o)
{
    o->len = 0;
    o->depth = 0;
    o->after_key = 0;
    if (o->buf != NULL) o->buf[0] = '\0';
}

typedef struct sorted {
    uint64_t t0, t1;
    int32_t track;
    uint32_t index;
} sorted;

static int by_track_time(const void *a, const void *b)
{
    const sorted *x = a, *y = b;
    if (x->track != y->track) return x->track < y->track ? -1 : 1;
    if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
    if (x->t1 != y->t1) return x->t1 > y->t1 ? -1 : 1; /* the enclosing span first */
    return x->index < y->index ? -1 : x->index > y->index;
}

static const char *dtype_key(int32_t dt) { return gd_dtype_name((gd_dtype)dt); }

static const gd_pprog *prog_of(const gd_prof *pr, int32_t i) { return i >= 0 && i < pr->n_progs ? &pr->progs[i] : NULL; }
static const gd_pnode_info *node_of(const gd_pprog *x, int32_t i)
{
    return x != NULL && i >= 0 && i < x->n_nodes ? &x->nodes[i] : NULL;
}

/* The event's name: its own, or made from what it is about. */
static const char *event_name(const gd_prof *pr, const gd_pev *e, char *buf, size_t cap)
{
    if (e->name >= 0 && e->cat != GD_PCAT_DEVSEG) return gd_prof_str_at(pr, e->name);
    const gd_pprog *x = prog_of(pr, e->prog);
    const gd_pnode_info *ni = e->cat == GD_PCAT_NODE || e->cat == GD_PCAT_LAUNCH ? node_of(x, e->node) : NULL;
    int serial = x != NULL ? x->serial : 0;
    switch (e->cat) {
    case GD_PCAT_NODE: return ni != NULL ? gd_prof_str_at(pr, ni->label) : "node";
    case GD_PCAT_LAUNCH:
        snprintf(buf, cap, "launch %s", ni != NULL ? gd_prof_str_at(pr, ni->label) : "node");
        return buf;
    case GD_PCAT_RUN: snprintf(buf, cap, "run program %d", serial); return buf;
    case GD_PCAT_COMPILE: snprintf(buf, cap, "compile program %d", serial); return buf;
    case GD_PCAT_SEGMENT:
    case GD_PCAT_DEVSEG: {
        /* "segment 3: conv1 .. relu#4 (5 nodes)": the same name on the host's and the
         * device's side, whatever the backend calls it */
        int ok = x != NULL && e->node >= 0 && e->node < x->n_segs && x->seg_count[e->node] > 0;
        int first = ok ? x->seg_first[e->node] : 0, count = ok ? x->seg_count[e->node] : 0;
        if (!ok) snprintf(buf, cap, "segment %d of program %d", e->node, serial);
        else if (count == 1) snprintf(buf, cap, "segment %d: %s", e->node, gd_prof_str_at(pr, x->nodes[first].label));
        else
            snprintf(buf, cap, "segment %d: %s .. %s (%d nodes)", e->node, gd_prof_str_at(pr, x->nodes[first].label),
                     gd_prof_str_at(pr, x->nodes[first + count - 1].label), count);
        return buf;
    }
    default: return gd_pcat_names[e->cat];
    }
}

static void event_args(const gd_prof *pr, const gd_pev *e, gd_json_out *o)
{
    const gd_pprog *x = prog_of(pr, e->prog);
    gd_json_key(o, "args");
    gd_json_begin_object(o);
    if (x != NULL) key_int(o, "program", x->serial);
    if (e->run >= 0) key_int(o, "run", e->run);
    switch (e->cat) {
    case GD_PCAT_NODE:
    case GD_PCAT_LAUNCH: {
        const gd_pnode_info *ni = node_of(x, e->node);
        if (ni == NULL) break;
        key_int(o, "node", ni->id);
        key_str(o, "label", gd_prof_str_at(pr, ni->label));
        key_str(o, "op", gd_prof_str_at(pr, ni->op));
        key_str(o, "backend", pr->ctx->backends[ni->backend]->name);
        if (e->cat == GD_PCAT_LAUNCH) break;
        key_str(o, "shapes", gd_prof_str_at(pr, ni->shapes));
        key_str(o, "dtype", dtype_key(ni->dtype));
        if (ni->bytes >= 0) key_num(o, "bytes", ni->bytes);
        if (ni->flops >= 0) key_num(o, "flops", ni->flops);
        if (e->seg >= 0) key_int(o, "segment", e->seg);
        break;
    }
    case GD_PCAT_SEGMENT:
    case GD_PCAT_DEVSEG: {
        key_int(o, "segment", e->node);
        if (x == NULL || e->node < 0 || e->node >= x->n_segs) break;
        int first = x->seg_first[e->node], count = x->seg_count[e->node];
        if (count > 0 && first >= 0 && first < x->n_nodes)
            key_str(o, "backend", pr->ctx->backends[x->nodes[first].backend]->name);
        if (e->cat == GD_PCAT_SEGMENT) {
            key_int(o, "n_nodes", count);
            break;
        }
        /* a segment timed as a whole: which nodes it ran, and what its backend called it */
        if (e->name >= 0) key_str(o, "device_name", gd_prof_str_at(pr, e->name));
        gd_json_key(o, "nodes");
        gd_json_begin_array(o);
        for (int i = first; i < first + count && i < x->n_nodes; i++) put_str(o, gd_prof_str_at(pr, x->nodes[i].label));
        gd_json_end_array(o);
        gd_json_key(o, "node_ids");
        gd_json_begin_array(o);
        for (int i = first; i < first + count && i < x->n_nodes; i++) gd_json_int(o, x->nodes[i].id);
        gd_json_end_array(o);
        break;
    }
    case GD_PCAT_RUN:
        if (x != NULL) key_str(o, "description", gd_prof_str_at(pr, x->desc));
        if (e->val != 0) key_str(o, "failed", gd_status_name((gd_status)e->val));
        break;
    case GD_PCAT_COMPILE:
        if (x != NULL) key_str(o, "description", gd_prof_str_at(pr, x->desc));
        break;
    case GD_PCAT_COPY:
    case GD_PCAT_TRANSFER: key_num(o, "bytes", e->val); break;
    default: break;
    }
    gd_json_end_object(o);
}

static void write_event(const gd_prof *pr, const gd_pev *e, uint64_t origin, gd_json_out *o)
{
    char nb[256];
    const gd_ptrack *t = &pr->tracks[e->track];
    gd_json_begin_object(o);
    key_str(o, "name", event_name(pr, e, nb, sizeof nb));
    key_str(o, "cat", gd_pcat_names[e->cat]);
    key_str(o, "ph", e->cat == GD_PCAT_COUNTER ? "C" : "X");
    key_us(o, "ts", e->t0 - origin);
    if (e->cat != GD_PCAT_COUNTER) key_us(o, "dur", e->t1 - e->t0);
    key_int(o, "pid", t->pid);
    key_int(o, "tid", t->tid);
    if (e->cat == GD_PCAT_COUNTER) {
        gd_json_key(o, "args");
        gd_json_begin_object(o);
        key_num(o, "value", e->val);
        gd_json_end_object(o);
    } else {
        event_args(pr, e, o);
    }
    gd_json_end_object(o);
}

static void write_meta(gd_json_out *o, const char *what, int32_t pid, int32_t tid, const char *key, const char *s,
                       int64_t v)
{
    gd_json_begin_object(o);
    key_str(o, "name", what);
    key_str(o, "ph", "M");
    key_int(o, "pid", pid);
    if (tid >= 0) key_int(o, "tid", tid);
    gd_json_key(o, "args");
    gd_json_begin_object(o);
    if (s != NULL) key_str(o, key, s);
    else key_int(o, key, v);
    gd_json_end_object(o);
    gd_json_end_object(o);
}

static void write_other(const gd_prof *pr, uint64_t origin, gd_json_out *o)
{
    gd_json_begin_object(o);
    key_str(o, "producer", "gradus " GD_VERSION);
    key_str(o, "clock", "CLOCK_MONOTONIC");
    key_num(o, "origin_ns", (double)origin);
    key_num(o, "events", (double)pr->n_ev);
    key_num(o, "dropped_events", (double)pr->dropped);
    key_num(o, "unmatched_device_spans", (double)pr->unmatched);
    key_num(o, "clamped_device_spans", (double)pr->clamped);
    if (pr->failed_memory) key_str(o, "incomplete", "out of memory while recording");
    gd_json_key(o, "backends");
    gd_json_begin_array(o);
    for (int b = 0; b < pr->n_be; b++) {
        const gd_backend *be = pr->ctx->backends[b];
        const gd_pbackend *x = &pr->be[b];
        gd_json_begin_object(o);
        key_str(o, "name", be->name);
        key_int(o, "pid", gd_prof_backend_pid(b));
        if (be->has_dev && be->dev.name != NULL) key_str(o, "device", be->dev.name);
        key_str(o, "spans", x->profiled ? "profiler module" : x->host_timed ? "timed by the host" : "none");
        gd_json_key(o, "peak");
        gd_json_begin_object(o);
        for (int dt = 0; dt < GDP_DTYPE_COUNT; dt++) {
            if (x->peak_flops[dt] <= 0 && x->peak_bw[dt] <= 0) continue;
            gd_json_key(o, dtype_key(dt));
            gd_json_begin_object(o);
            key_num(o, "flop_per_s", x->peak_flops[dt]);
            key_num(o, "bytes_per_s", x->peak_bw[dt]);
            gd_json_end_object(o);
        }
        gd_json_end_object(o);
        gd_json_end_object(o);
    }
    gd_json_end_array(o);
    gd_json_key(o, "programs");
    gd_json_begin_array(o);
    for (int i = 0; i < pr->n_progs; i++) {
        const gd_pprog *x = &pr->progs[i];
        gd_json_begin_object(o);
        key_int(o, "program", x->serial);
        key_str(o, "description", gd_prof_str_at(pr, x->desc));
        key_int(o, "nodes", x->n_nodes);
        key_int(o, "runs", x->runs);
        key_int(o, "segments", x->n_segs);
        gd_json_end_object(o);
    }
    gd_json_end_array(o);
    gd_json_end_object(o);
}

static int emit(FILE *f, gd_json_out *o, int comma)
{
    if (o->failed) return -1;
    if (comma && fputs(",\n", f) == EOF) return -1;
    if (fwrite(o->buf, 1, o->len, f) != o->len) return -1;
    reset(o);
    return 0;
}

gd_status gd_prof_write(gd_prof *pr, const char *path, char *err, size_t cap)
{
    sorted *order = gd_malloc(sizeof *order * (pr->n_ev ? pr->n_ev : 1));
    size_t part_len = strlen(path) + 6;
    char *part = gd_malloc(part_len);
    if (order == NULL || part == NULL) {
        gd_free(order);
        gd_free(part);
        snprintf(err, cap, "profile %s: out of memory for %zu events", path, pr->n_ev);
        return GD_ERR_NOMEM;
    }
    snprintf(part, part_len, "%s.part", path);
    uint64_t origin = pr->t_start;
    for (size_t i = 0; i < pr->n_ev; i++) {
        const gd_pev *e = &pr->ev[i];
        if (e->t0 < origin) origin = e->t0;
        order[i] = (sorted){e->t0, e->t1, e->track, (uint32_t)i};
    }
    qsort(order, pr->n_ev, sizeof *order, by_track_time);

    FILE *f = fopen(part, "wb");
    int bad = f == NULL;
    int saved = errno;
    gd_json_out o = {0};
    if (!bad && fputs("{\"traceEvents\":[\n", f) == EOF) bad = 1;
    int n = 0;
    /* track names: processes (the host, each backend) and their threads (streams) */
    for (int i = 0; !bad && i < pr->n_tracks; i++) {
        const gd_ptrack *t = &pr->tracks[i];
        int first_of_pid = 1;
        for (int j = 0; j < i; j++) first_of_pid &= pr->tracks[j].pid != t->pid;
        if (first_of_pid) {
            const char *pname = t->pid == 1 ? "host" : NULL;
            char pb[96];
            if (pname == NULL && t->pid - 2 >= 0 && t->pid - 2 < pr->n_be) {
                snprintf(pb, sizeof pb, "backend %s", pr->ctx->backends[t->pid - 2]->name);
                pname = pb;
            }
            write_meta(&o, "process_name", t->pid, -1, "name", pname != NULL ? pname : "?", 0);
            bad |= emit(f, &o, n++ > 0) != 0;
            write_meta(&o, "process_sort_index", t->pid, -1, "sort_index", NULL, t->pid);
            bad |= emit(f, &o, n++ > 0) != 0;
        }
        write_meta(&o, "thread_name", t->pid, t->tid, "name", gd_prof_str_at(pr, t->name), 0);
        bad |= emit(f, &o, n++ > 0) != 0;
    }
    for (size_t i = 0; !bad && i < pr->n_ev; i++) {
        write_event(pr, &pr->ev[order[i].index], origin, &o);
        bad |= emit(f, &o, n++ > 0) != 0;
    }
    if (!bad && fputs("\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":", f) == EOF) bad = 1;
    if (!bad) {
        write_other(pr, origin, &o);
        bad |= emit(f, &o, 0) != 0;
    }
    if (!bad && fputs("}\n", f) == EOF) bad = 1;
    if (bad && f != NULL && !o.failed) saved = errno;
    if (f != NULL && fclose(f) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    if (!bad && rename(part, path) != 0) {
        bad = 1;
        saved = errno;
    }
    if (bad) {
        if (f != NULL) remove(part);
        if (o.failed) snprintf(err, cap, "profile %s: out of memory while writing", path);
        else snprintf(err, cap, "profile %s: cannot write: %s", path, strerror(saved ? saved : EIO));
    }
    int oom = o.failed;
    gd_json_out_free(&o);
    gd_free(order);
    gd_free(part);
    if (!bad) return GD_OK;
    return oom ? GD_ERR_NOMEM : GD_ERR_IO;
}
