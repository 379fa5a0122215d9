/* prof.c — a context's profile: starting and stopping it, its strings, tracks and event
 * records, and what the application marks itself (spans, counters). The core's hooks are
 * in hooks.c, the trace's file format in trace_write.c. */
#include "record.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *const gd_pcat_names[GD_PCAT_N] = {"compile", "phase", "run", "launch", "segment", "copy", "transfer",
                                               "sync", "user", "node", "device_segment", "device", "counter"};

/* Past this many events a profile drops the rest (counted in the trace): about 48 bytes
 * each in memory, a few hundred in the file. GRADUS_PROFILE_MAX_EVENTS changes it. */
#define GD_PROF_MAX_EVENTS 1000000

uint64_t gd_prof_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- strings --------------------------------------------------------------------------- */

static uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

const char *gd_prof_str_at(const gd_prof *pr, int32_t id)
{
    return id >= 0 && id < pr->n_str ? pr->str + pr->str_off[id] : "";
}

static int rehash(gd_prof *pr, int32_t cap)
{
    int32_t *h = gd_malloc(sizeof *h * (size_t)cap);
    if (h == NULL) return -1;
    for (int32_t i = 0; i < cap; i++) h[i] = -1;
    for (int32_t id = 0; id < pr->n_str; id++) {
        uint32_t k = hash_str(pr->str + pr->str_off[id]) & (uint32_t)(cap - 1);
        while (h[k] >= 0) k = (k + 1) & (uint32_t)(cap - 1);
        h[k] = id;
    }
    gd_free(pr->hash);
    pr->hash = h;
    pr->cap_hash = cap;
    return 0;
}

int32_t gd_prof_str(gd_prof *pr, const char *s)
{
    if (s == NULL) s = "";
    if (pr->cap_hash == 0 || (pr->n_str + 1) * 2 > pr->cap_hash) {
        if (pr->cap_hash > (1 << 29) || rehash(pr, pr->cap_hash ? pr->cap_hash * 2 : 256) != 0) goto oom;
    }
    uint32_t k = hash_str(s) & (uint32_t)(pr->cap_hash - 1);
    for (; pr->hash[k] >= 0; k = (k + 1) & (uint32_t)(pr->cap_hash - 1))
        if (strcmp(pr->str + pr->str_off[pr->hash[k]], s) == 0) return pr->hash[k];
    size_t len = strlen(s) + 1;
    if (pr->str_cap - pr->str_len < len) {
        size_t c = pr->str_cap ? pr->str_cap : 4096;
        while (c - pr->str_len < len) {
            if (c > SIZE_MAX / 4) goto oom;
            c *= 2;
        }
        char *b = gd_realloc(pr->str, c);
        if (b == NULL) goto oom;
        pr->str = b;
        pr->str_cap = c;
    }
    if (pr->n_str == pr->cap_str) {
        int32_t c = pr->cap_str ? pr->cap_str * 2 : 256;
        uint32_t *o = gd_realloc(pr->str_off, sizeof *o * (size_t)c);
        if (o == NULL) goto oom;
        pr->str_off = o;
        pr->cap_str = c;
    }
    if (pr->str_len > UINT32_MAX - len) goto oom;
    memcpy(pr->str + pr->str_len, s, len);
    pr->str_off[pr->n_str] = (uint32_t)pr->str_len;
    pr->str_len += len;
    pr->hash[k] = pr->n_str;
    return pr->n_str++;
oom:
    pr->failed_memory = 1;
    return -1;
}

/* ---- tracks and events -------------------------------------------------------------------- */

int16_t gd_prof_track(gd_prof *pr, int32_t pid, int32_t tid, const char *name)
{
    for (int i = 0; i < pr->n_tracks; i++)
        if (pr->tracks[i].pid == pid && pr->tracks[i].tid == tid) return (int16_t)i;
    if (pr->n_tracks == (int)(sizeof pr->tracks / sizeof pr->tracks[0])) return -1;
    gd_ptrack *t = &pr->tracks[pr->n_tracks];
    t->pid = pid;
    t->tid = tid;
    t->name = gd_prof_str(pr, name);
    return (int16_t)pr->n_tracks++;
}

gd_pev *gd_prof_event(gd_prof *pr, int cat, int16_t track, uint64_t t0, uint64_t t1)
{
    if (track < 0) return NULL;
    if (pr->n_ev == pr->cap_ev) {
        size_t c = pr->cap_ev ? pr->cap_ev * 2 : 4096;
        if (c > pr->max_ev) c = pr->max_ev;
        gd_pev *e = c > pr->cap_ev ? gd_realloc(pr->ev, sizeof *e * c) : NULL;
        if (e == NULL) {
            if (c > pr->cap_ev) pr->failed_memory = 1;
            pr->dropped++;
            if (!pr->said_dropped) {
                pr->said_dropped = 1;
                gd_ctx_log(pr->ctx, "profile: %s after %zu events; the rest are counted, not kept",
                           c > pr->cap_ev ? "out of memory" : "full (GRADUS_PROFILE_MAX_EVENTS)", pr->n_ev);
            }
            return NULL;
        }
        pr->ev = e;
        pr->cap_ev = c;
    }
    gd_pev *e = &pr->ev[pr->n_ev++];
    memset(e, 0, sizeof *e);
    e->t0 = t0;
    e->t1 = t1 >= t0 ? t1 : t0;
    e->cat = (uint8_t)cat;
    e->track = track;
    e->name = e->prog = e->run = e->node = e->seg = -1;
    return e;
}

/* ---- starting and stopping ------------------------------------------------------------------ */

/* "<path>.part": what a trace is written to before it is renamed over path. */
static char *part_name(const char *path)
{
    size_t n = strlen(path);
    char *s = gd_malloc(n + 6);
    if (s != NULL) snprintf(s, n + 6, "%s.part", path);
    return s;
}

/* Whether a trace could be written at path: its temporary file can be made. */
static gd_status check_writable(gd_ctx *ctx, const char *path)
{
    if (path[0] == '\0') return gd_fail(ctx, GD_ERR_INVALID, "profile: the trace file name is empty");
    char *part = part_name(path);
    if (part == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "profile: out of memory");
    FILE *f = fopen(part, "wb");
    int err = errno;
    if (f != NULL) {
        fclose(f);
        remove(part);
    }
    gd_free(part);
    if (f == NULL) return gd_fail(ctx, GD_ERR_IO, "profile %s: cannot write: %s", path, strerror(err));
    return GD_OK;
}

static void prof_free(gd_prof *pr)
{
    if (pr == NULL) return;
    for (int i = 0; i < pr->n_progs; i++) {
        gd_free(pr->progs[i].nodes);
        gd_free(pr->progs[i].by_id);
        gd_free(pr->progs[i].seg_first);
        gd_free(pr->progs[i].seg_count);
    }
    for (int b = 0; b < GD_MAX_BACKENDS; b++) gd_free(pr->be[b].q);
    gd_free(pr->progs);
    gd_free(pr->ev);
    gd_free(pr->str);
    gd_free(pr->str_off);
    gd_free(pr->hash);
    gd_free(pr->spans);
    gd_free(pr->path);
    gd_free(pr);
}

static const int32_t peak_dtypes[] = {GDP_F32, GDP_F16, GDP_BF16, GDP_F64};

/* Backend b joins the profile: its track, its profiler module started, its peaks. */
static void attach(gd_prof *pr, gd_backend *be)
{
    gd_pbackend *x = &pr->be[be->index];
    char name[96];
    snprintf(name, sizeof name, "%s stream 0", be->name);
    x->track = gd_prof_track(pr, gd_prof_backend_pid(be->index), 0, name);
    if (be->has_prof && be->prof_mod.start != NULL && be->prof_mod.collect != NULL) {
        gdp_err e = {.size = sizeof e};
        if (be->prof_mod.start(be->plugin.backend, &e) == GDP_OK) x->profiled = 1;
        else gd_ctx_log(pr->ctx, "profile: %s: its profiler did not start (%s); no device spans from it", be->name, e.msg);
    }
    x->host_timed = !x->profiled && !be->has_dev;
    for (size_t k = 0; be->has_prof && be->prof_mod.peak != NULL && k < sizeof peak_dtypes / sizeof peak_dtypes[0]; k++) {
        gdp_err e = {.size = sizeof e};
        double f = 0, bw = 0;
        if (be->prof_mod.peak(be->plugin.backend, peak_dtypes[k], &f, &bw, &e) != GDP_OK) continue;
        x->peak_flops[peak_dtypes[k]] = f > 0 ? f : 0;
        x->peak_bw[peak_dtypes[k]] = bw > 0 ? bw : 0;
    }
}

gd_pbackend *gd_prof_backend(gd_prof *pr, const gd_backend *b)
{
    /* a plugin loaded while recording joins when it is first seen */
    while (pr->n_be <= b->index) attach(pr, pr->ctx->backends[pr->n_be++]);
    return &pr->be[b->index];
}

gd_status gd_profile_start(gd_ctx *ctx, const char *path)
{
    if (ctx == NULL) return GD_ERR_INVALID;
    if (path == NULL) return gd_fail(ctx, GD_ERR_INVALID, "profile: the trace file name is NULL");
    if (ctx->prof != NULL)
        return gd_fail(ctx, GD_ERR_INVALID, "profile %s: already recording into %s (gd_profile_stop first)", path,
                       ctx->prof->path);
    gd_status st = check_writable(ctx, path);
    if (st != GD_OK) return st;
    gd_prof *pr = gd_calloc(1, sizeof *pr);
    if (pr == NULL || (pr->path = gd_strdup(path)) == NULL) {
        prof_free(pr);
        return gd_fail(ctx, GD_ERR_NOMEM, "profile %s: out of memory", path);
    }
    pr->ctx = ctx;
    pr->cur_prog = pr->cur_run = -1;
    pr->session = ++ctx->prof_sessions;
    pr->max_ev = GD_PROF_MAX_EVENTS;
    const char *cap = getenv("GRADUS_PROFILE_MAX_EVENTS");
    if (cap != NULL && atoll(cap) > 0) pr->max_ev = (size_t)atoll(cap);
    pr->host_track = gd_prof_track(pr, 1, 0, "host");
    while (pr->n_be < ctx->n_backends) attach(pr, ctx->backends[pr->n_be++]);
    pr->cap_spans = 1024;
    pr->spans = gd_calloc((size_t)pr->cap_spans, sizeof *pr->spans);
    if (pr->spans == NULL || pr->host_track < 0) {
        for (int b = 0; b < ctx->n_backends; b++) {
            gd_backend *be = ctx->backends[b];
            gdp_err e = {.size = sizeof e};
            if (pr->be[b].profiled && be->prof_mod.stop != NULL) be->prof_mod.stop(be->plugin.backend, &e);
        }
        prof_free(pr);
        return gd_fail(ctx, GD_ERR_NOMEM, "profile %s: out of memory", path);
    }
    pr->t_start = gd_prof_now();
    ctx->prof = pr;
    for (int b = 0; b < ctx->n_backends; b++) gd_prof_memory(pr, ctx->backends[b]);
    return GD_OK;
}

gd_status gd_profile_flush(gd_ctx *ctx)
{
    if (ctx == NULL) return GD_ERR_INVALID;
    gd_prof *pr = ctx->prof;
    if (pr == NULL) return gd_fail(ctx, GD_ERR_INVALID, "profile flush: no profile is being recorded");
    gd_status dev = gd_prof_collect(pr, 1);
    char err[600];
    gd_status st = gd_prof_write(pr, pr->path, err, sizeof err);
    if (st != GD_OK) return gd_fail(ctx, st, "%s", err);
    return dev; /* a device's failure found while waiting for it: its message is in ctx */
}

gd_status gd_profile_stop(gd_ctx *ctx)
{
    if (ctx == NULL) return GD_ERR_INVALID;
    gd_prof *pr = ctx->prof;
    if (pr == NULL) return gd_fail(ctx, GD_ERR_INVALID, "profile stop: no profile is being recorded");
    gd_status dev = gd_prof_collect(pr, 1);
    for (int b = 0; b < pr->n_be; b++) {
        gd_backend *be = ctx->backends[b];
        gdp_err e = {.size = sizeof e};
        if (pr->be[b].profiled && be->prof_mod.stop != NULL) be->prof_mod.stop(be->plugin.backend, &e);
    }
    /* spans the application left open end here */
    uint64_t now = gd_prof_now();
    while (pr->depth > 0) {
        pr->depth--;
        gd_pev *e = gd_prof_event(pr, GD_PCAT_USER, pr->host_track, pr->stack[pr->depth].t0, now);
        if (e != NULL) e->name = pr->stack[pr->depth].name;
    }
    char err[600];
    gd_status st = gd_prof_write(pr, pr->path, err, sizeof err);
    ctx->prof = NULL;
    prof_free(pr);
    if (st != GD_OK) return gd_fail(ctx, st, "%s", err);
    return dev;
}

int gd_profile_active(const gd_ctx *ctx) { return ctx != NULL && ctx->prof != NULL; }
const char *gd_profile_path(const gd_ctx *ctx) { return ctx != NULL && ctx->prof != NULL ? ctx->prof->path : NULL; }

/* ---- what the application marks ------------------------------------------------------------- */

void gd_profile_begin(gd_ctx *ctx, const char *name)
{
    gd_prof *pr = ctx != NULL ? ctx->prof : NULL;
    if (GD_UNLIKELY(pr != NULL)) {
        if (pr->depth == GD_PROF_STACK) {
            pr->overflow++; /* deeper than anyone reads; its end is ignored too */
            return;
        }
        pr->stack[pr->depth].name = gd_prof_str(pr, name);
        pr->stack[pr->depth].t0 = gd_prof_now();
        pr->depth++;
    }
}

void gd_profile_end(gd_ctx *ctx)
{
    gd_prof *pr = ctx != NULL ? ctx->prof : NULL;
    if (GD_UNLIKELY(pr != NULL)) {
        if (pr->overflow > 0) {
            pr->overflow--;
            return;
        }
        if (pr->depth == 0) return; /* an end without a begin: nothing to close */
        pr->depth--;
        gd_pev *e = gd_prof_event(pr, GD_PCAT_USER, pr->host_track, pr->stack[pr->depth].t0, gd_prof_now());
        if (e != NULL) e->name = pr->stack[pr->depth].name;
    }
}

void gd_profile_counter(gd_ctx *ctx, const char *name, double value)
{
    gd_prof *pr = ctx != NULL ? ctx->prof : NULL;
    if (GD_UNLIKELY(pr != NULL)) {
        uint64_t t = gd_prof_now();
        gd_pev *e = gd_prof_event(pr, GD_PCAT_COUNTER, pr->host_track, t, t);
        if (e == NULL) return;
        e->name = gd_prof_str(pr, name);
        e->val = value;
    }
}

void gd_prof_memory(gd_prof *pr, const gd_backend *b)
{
    gd_pbackend *x = gd_prof_backend(pr, b);
    size_t now = b->has_dev ? b->dev_bytes : b->host_bytes;
    if (x->mem_seen && x->mem_last == now) return;
    uint64_t t = gd_prof_now();
    gd_pev *e = gd_prof_event(pr, GD_PCAT_COUNTER, x->track, t, t);
    if (e == NULL) return;
    e->name = gd_prof_str(pr, "memory in use (bytes)");
    e->val = (double)now;
    x->mem_last = now;
    x->mem_seen = 1;
}

/* ---- the context's side ------------------------------------------------------------------------ */

/* GRADUS_PROFILE's value with "%p" replaced by the process id. */
static void env_path(const char *v, char *out, size_t cap)
{
    size_t o = 0;
    for (const char *p = v; *p && o + 1 < cap; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            o += (size_t)snprintf(out + o, cap - o, "%ld", (long)getpid());
            if (o >= cap) o = cap - 1;
            p++;
            continue;
        }
        out[o++] = *p;
    }
    out[o] = '\0';
}

void gd_prof_from_env(gd_ctx *ctx)
{
    const char *v = getenv("GRADUS_PROFILE");
    if (v == NULL || v[0] == '\0') return;
    char path[4096];
    env_path(v, path, sizeof path);
    if (gd_profile_start(ctx, path) != GD_OK) {
        /* a profile that cannot be written must not stop the program that asked for it */
        gd_ctx_log(ctx, "GRADUS_PROFILE: %s; not profiling", ctx->err);
        ctx->err[0] = '\0';
        ctx->status = GD_OK;
    }
}

void gd_prof_close(gd_ctx *ctx)
{
    if (ctx->prof == NULL) return;
    if (gd_profile_stop(ctx) != GD_OK) gd_ctx_log(ctx, "profile not written: %s", ctx->err);
}
