/* ctx.c — the context: error messages, logging, backends chosen at creation. */
#include "core.h"
#include "prof/prof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

gd_status gd_failv(gd_ctx *ctx, gd_status s, const char *fmt, va_list ap)
{
    if (ctx != NULL) {
        /* a message may quote the previous one (callers add context to it) */
        char m[sizeof ctx->err];
        vsnprintf(m, sizeof m, fmt, ap);
        memcpy(ctx->err, m, sizeof m);
        ctx->status = s;
    }
    return s;
}

gd_status gd_fail(gd_ctx *ctx, gd_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gd_failv(ctx, s, fmt, ap);
    va_end(ap);
    return s;
}

gd_tensor *gd_fail_null(gd_graph *g, gd_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gd_failv(g != NULL ? g->ctx : NULL, s, fmt, ap);
    va_end(ap);
    return NULL;
}

void gd_ctx_log(gd_ctx *ctx, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (ctx != NULL && ctx->log_fn != NULL) ctx->log_fn(ctx->log_user, line);
    else fprintf(stderr, "gradus: %s\n", line);
}

const char *gd_ctx_error(const gd_ctx *ctx) { return ctx != NULL ? ctx->err : "no context"; }
gd_status gd_ctx_status(const gd_ctx *ctx) { return ctx != NULL ? ctx->status : GD_ERR_INVALID; }
void gd_ctx_clear_error(gd_ctx *ctx)
{
    if (ctx == NULL) return;
    ctx->err[0] = '\0';
    ctx->status = GD_OK;
}

gd_status gd_ctx_fail(gd_ctx *ctx, gd_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gd_failv(ctx, s, fmt != NULL ? fmt : "", ap);
    va_end(ap);
    return s;
}

void gd_ctx_set_log(gd_ctx *ctx, void (*fn)(void *, const char *), void *user)
{
    if (ctx == NULL) return;
    ctx->log_fn = fn;
    ctx->log_user = user;
}

static int env_flag(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

void gd_ctx_set_threads(gd_ctx *ctx, int n)
{
    if (ctx == NULL) return;
    if (n <= 0) {
        const char *v = getenv("GRADUS_THREADS");
        n = v != NULL ? atoi(v) : 0;
        if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (n <= 0) n = 1;
    }
    ctx->threads = n;
    for (int i = 0; i < ctx->n_backends; i++) {
        gd_backend *b = ctx->backends[i];
        if (b->plugin.configure == NULL) continue;
        gdp_err e = {.size = sizeof e};
        if (b->plugin.configure(b->plugin.backend, "threads", n, &e) != GDP_OK)
            gd_ctx_log(ctx, "%s: threads=%d: %s", b->name, n, e.msg);
    }
}
int gd_ctx_threads(const gd_ctx *ctx) { return ctx != NULL ? ctx->threads : 0; }

gd_status gd_ctx_create(gd_ctx **out, const gd_ctx_options *opt)
{
    if (out == NULL) return GD_ERR_INVALID;
    *out = NULL;
    if (opt != NULL && opt->size < sizeof(size_t)) return GD_ERR_INVALID;
    gd_ctx *ctx = gd_calloc(1, sizeof *ctx);
    if (ctx == NULL) return GD_ERR_NOMEM;
    ctx->refs = 1;
    ctx->reg = gd_registry_new_all();
    ctx->backends[0] = gd_backend_ref_new();
    if (ctx->reg == NULL || ctx->backends[0] == NULL) {
        gd_backend_destroy(ctx->backends[0]);
        gd_registry_free(ctx->reg);
        gd_free(ctx);
        return GD_ERR_NOMEM;
    }
    ctx->n_backends = 1;
    ctx->backends[0]->host_ctx.ctx = ctx;
    ctx->backends[0]->host_ctx.b = ctx->backends[0];
    int no_plugins = 0;
    if (opt != NULL && GDP_HAS_FIELD(opt, gd_ctx_options, no_plugins)) no_plugins = opt->no_plugins;
    if (opt != NULL && GDP_HAS_FIELD(opt, gd_ctx_options, strict)) ctx->strict = opt->strict;
    if (opt != NULL && GDP_HAS_FIELD(opt, gd_ctx_options, trace)) ctx->trace = opt->trace;
    if (env_flag("GRADUS_STRICT")) ctx->strict = 1;
    if (env_flag("GRADUS_TRACE")) ctx->trace = 1;
    if (!no_plugins) gd_plugins_load(ctx, opt);
    gd_ctx_set_threads(ctx, 0);
    /* Preferred: the highest priority (ties: the first loaded). */
    ctx->preferred = 0;
    for (int i = 1; i < ctx->n_backends; i++)
        if (ctx->backends[i]->priority > ctx->backends[ctx->preferred]->priority) ctx->preferred = i;
    const char *want = getenv("GRADUS_BACKEND");
    if (want != NULL && want[0] != '\0' && gd_ctx_use_backend(ctx, want) != GD_OK) {
        gd_ctx_log(ctx, "GRADUS_BACKEND=%s: no such backend, using %s", want,
               ctx->backends[ctx->preferred]->name);
        ctx->err[0] = '\0';
    }
    gd_prof_from_env(ctx);
    *out = ctx;
    return GD_OK;
}

/* The context lives until its creator freed it and its last graph is gone. */
void gd_ctx_unref(gd_ctx *ctx)
{
    if (ctx == NULL || --ctx->refs > 0) return;
    gd_prof_close(ctx); /* the trace, while the backends that made it are still here */
    for (int i = ctx->n_backends - 1; i >= 0; i--) gd_backend_destroy(ctx->backends[i]);
    gd_registry_free(ctx->reg);
    gd_free(ctx->notes);
    gd_free(ctx);
}

void gd_ctx_free(gd_ctx *ctx) { gd_ctx_unref(ctx); }

int gd_backend_count(const gd_ctx *ctx) { return ctx != NULL ? ctx->n_backends : 0; }
const char *gd_backend_name(const gd_ctx *ctx, int i)
{
    return ctx != NULL && i >= 0 && i < ctx->n_backends ? ctx->backends[i]->name : NULL;
}

gd_status gd_ctx_use_backend(gd_ctx *ctx, const char *name)
{
    if (ctx == NULL) return GD_ERR_INVALID;
    if (name == NULL) return gd_fail(ctx, GD_ERR_INVALID, "use backend: the name is NULL");
    for (int i = 0; i < ctx->n_backends; i++) {
        if (strcmp(ctx->backends[i]->name, name) == 0) {
            ctx->preferred = i;
            return GD_OK;
        }
    }
    char have[256] = "";
    for (int i = 0; i < ctx->n_backends; i++) {
        strncat(have, ctx->backends[i]->name, sizeof have - strlen(have) - 3);
        if (i + 1 < ctx->n_backends) strncat(have, ", ", sizeof have - strlen(have) - 1);
    }
    return gd_fail(ctx, GD_ERR_INVALID, "no backend named '%s' (available: %s)", name, have);
}

const char *gd_status_name(gd_status s)
{
    static const char *names[] = {"ok", "invalid argument", "unsupported", "out of memory", "device error",
                                  "version mismatch", "no device", "shape mismatch", "i/o error",
                                  "bad format", "strict placement"};
    return s >= 0 && s < (int)(sizeof names / sizeof names[0]) ? names[s] : "unknown status";
}

gd_status gd_ctx_synchronize(gd_ctx *ctx)
{
    if (ctx == NULL) return GD_ERR_INVALID;
    for (int i = 0; i < ctx->n_backends; i++) {
        gd_status s = gd_backend_sync(ctx, ctx->backends[i]);
        if (s != GD_OK) return s;
    }
    return GD_OK;
}

const char *gd_ctx_backend(const gd_ctx *ctx) { return ctx != NULL ? ctx->backends[ctx->preferred]->name : ""; }
