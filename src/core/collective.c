/* collective.c — the preferred backend's collective module on parameters and states.
 * The tensors are leaves: their storage (t->data on t->home) does not move once made, so
 * the device sums them where they are and the next program reads the result. */
#include "collective.h"

#include "alloc.h"
#include "core.h"

#include <stdlib.h>
#include <string.h>

struct gd_collective {
    gd_ctx *ctx;
    gd_backend *b;
    void *comm;
    int rank, size;
};

static gd_backend *preferred(gd_ctx *ctx)
{
    const char *off = getenv("GRADUS_DEVICE_COLLECTIVE");
    if (off != NULL && strcmp(off, "0") == 0) return NULL;
    const char *name = gd_ctx_backend(ctx);
    for (int i = 0; i < ctx->n_backends; i++)
        if (strcmp(ctx->backends[i]->name, name) == 0) return ctx->backends[i]->has_coll ? ctx->backends[i] : NULL;
    return NULL;
}

size_t gd_collective_id_bytes(gd_ctx *ctx)
{
    gd_backend *b = ctx != NULL ? preferred(ctx) : NULL;
    return b != NULL ? b->coll.id_bytes : 0;
}

gd_status gd_collective_unique_id(gd_ctx *ctx, void *id)
{
    gd_backend *b = preferred(ctx);
    if (b == NULL) return gd_fail(ctx, GD_ERR_UNSUPPORTED, "collective: backend %s has no collective module", gd_ctx_backend(ctx));
    gdp_err e = {.size = sizeof e};
    gdp_status s = b->coll.unique_id(b->plugin.backend, id, &e);
    return s == GDP_OK ? GD_OK : gd_fail(ctx, gd_status_from_plugin(s), "%s: collective id: %s", b->name, e.msg);
}

gd_status gd_collective_open(gd_ctx *ctx, const void *id, int rank, int size, gd_collective **out)
{
    *out = NULL;
    gd_backend *b = preferred(ctx);
    if (b == NULL) return gd_fail(ctx, GD_ERR_UNSUPPORTED, "collective: backend %s has no collective module", gd_ctx_backend(ctx));
    gd_collective *c = gd_calloc(1, sizeof *c);
    if (c == NULL) return gd_fail(ctx, GD_ERR_NOMEM, "collective: out of memory");
    gdp_err e = {.size = sizeof e};
    gdp_status s = b->coll.comm_open(b->plugin.backend, id, rank, size, &c->comm, &e);
    if (s != GDP_OK) {
        gd_free(c);
        return gd_fail(ctx, gd_status_from_plugin(s), "%s: rank %d of %d: joining the collective: %s", b->name, rank,
                       size, e.msg);
    }
    c->ctx = ctx;
    c->b = b;
    c->rank = rank;
    c->size = size;
    *out = c;
    return GD_OK;
}

gd_status gd_collective_allreduce(gd_collective *c, gd_tensor *t)
{
    if (c == NULL || t == NULL) return GD_ERR_INVALID;
    if (t->kind == GD_V_NODE || t->data == NULL || t->home != c->b)
        return gd_fail(c->ctx, GD_ERR_INVALID, "collective: '%s' is not a parameter or state stored on %s",
                       gd_tensor_name(t), c->b->name);
    gdp_err e = {.size = sizeof e};
    gdp_status s = c->b->coll.allreduce_sum(c->b->plugin.backend, c->comm, t->data, gd_tensor_numel(t), t->dtype,
                                           c->b->stream, &e);
    return s == GDP_OK ? GD_OK
                       : gd_fail(c->ctx, gd_status_from_plugin(s), "%s: rank %d of %d: sum of '%s': %s", c->b->name,
                                 c->rank, c->size, gd_tensor_name(t), e.msg);
}

int gd_collective_can_broadcast(const gd_collective *c) { return c != NULL && c->b->coll.broadcast != NULL; }

gd_status gd_collective_broadcast(gd_collective *c, gd_tensor *t, int root)
{
    if (c == NULL || t == NULL) return GD_ERR_INVALID;
    if (c->b->coll.broadcast == NULL)
        return gd_fail(c->ctx, GD_ERR_UNSUPPORTED, "collective: %s's module has no broadcast", c->b->name);
    if (t->kind == GD_V_NODE || t->data == NULL || t->home != c->b)
        return gd_fail(c->ctx, GD_ERR_INVALID, "collective: '%s' is not a parameter or state stored on %s",
                       gd_tensor_name(t), c->b->name);
    gdp_err e = {.size = sizeof e};
    int64_t bytes = gd_tensor_numel(t) * (int64_t)gdp_dtype_size(t->dtype);
    gdp_status s = c->b->coll.broadcast(c->b->plugin.backend, c->comm, t->data, bytes, root, c->b->stream, &e);
    return s == GDP_OK ? GD_OK
                       : gd_fail(c->ctx, gd_status_from_plugin(s), "%s: rank %d of %d: '%s' from rank %d: %s", c->b->name,
                                 c->rank, c->size, gd_tensor_name(t), root, e.msg);
}

gd_status gd_collective_finish(gd_collective *c, double timeout_s)
{
    if (c == NULL) return GD_ERR_INVALID;
    gdp_err e = {.size = sizeof e};
    gdp_status s = c->b->coll.finish != NULL ? c->b->coll.finish(c->b->plugin.backend, c->comm, c->b->stream, timeout_s, &e)
                                             : GDP_OK;
    if (s == GDP_OK && c->b->coll.finish == NULL) return gd_backend_sync(c->ctx, c->b);
    return s == GDP_OK ? GD_OK
                       : gd_fail(c->ctx, gd_status_from_plugin(s), "%s: rank %d of %d: %s", c->b->name, c->rank, c->size,
                                 e.msg);
}

const char *gd_collective_backend(const gd_collective *c) { return c != NULL ? c->b->name : ""; }

void gd_collective_close(gd_collective *c)
{
    if (c == NULL) return;
    c->b->coll.comm_close(c->b->plugin.backend, c->comm);
    gd_free(c);
}
