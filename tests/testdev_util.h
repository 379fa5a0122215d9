/* testdev_util.h — helpers for the tests that run through the test device: loading one of
 * its variants into a context, reading its counters (backends/testdev/testdev.h), and
 * looking inside a compiled program (program.h): where nodes were placed, which copies
 * and segments the planner made.
 *
 * Header-only, like testutil.h (which it includes: CHECK, the context `ctx`). */
#ifndef GD_TESTS_TESTDEV_UTIL_H
#define GD_TESTS_TESTDEV_UTIL_H

#include "gradus.h"
#include "testutil.h"

#include "../backends/testdev/testdev.h"
#include "program.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* The file of a test-device variant ("testdev", "testdev_hostvis", ...). */
static inline const char *td_path(const char *variant, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/plugins-test/libgradus_%s.so", GD_BUILD_DIR, variant);
    return buf;
}

/* A new context with `variant` loaded and preferred; with_builtins adds the built-in
 * backends (the fast CPU backend). NULL (and a failure counted) if that fails. */
static inline gd_ctx *td_new_ctx(const char *variant, int with_builtins)
{
    gd_ctx *c = NULL;
    gd_ctx_options o = {.size = sizeof o, .no_plugins = !with_builtins, .plugin_path = ""};
    if (gd_ctx_create(&c, &o) != GD_OK) {
        CHECK(0, "gd_ctx_create failed");
        return NULL;
    }
    char path[1024];
    gd_status s = gd_plugin_load_file(c, td_path(variant, path, sizeof path));
    CHECK(s == GD_OK, "loading %s: %s", variant, gd_ctx_error(c));
    if (s == GD_OK) s = gd_ctx_use_backend(c, "testdev");
    if (s != GD_OK) {
        gd_ctx_free(c);
        return NULL;
    }
    return c;
}

static inline gd_backend *td_backend(gd_ctx *c, const char *name)
{
    for (int i = 0; c != NULL && i < c->n_backends; i++)
        if (strcmp(c->backends[i]->name, name) == 0) return c->backends[i];
    return NULL;
}

/* The counters of the context's test-device instance (NULL when it has none). */
static inline const testdev_stats *td_stats(gd_ctx *c)
{
    gd_backend *b = td_backend(c, "testdev");
    return b != NULL ? testdev_stats_of(b->plugin.backend) : NULL;
}

/* The process-wide state of a test-device variant's driver: instances alive, bytes held
 * (each variant is its own shared object, with its own driver). */
static inline void td_driver(const char *variant, int32_t *instances, int64_t *bytes)
{
    char path[1024];
    *instances = -1;
    *bytes = -1;
    void *dl = dlopen(td_path(variant, path, sizeof path), RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        CHECK(0, "dlopen %s: %s", path, dlerror());
        return;
    }
    void *sym = dlsym(dl, TESTDEV_DRIVER_SYMBOL);
    testdev_driver_fn fn;
    memcpy(&fn, &sym, sizeof fn);
    if (sym != NULL) fn(instances, bytes);
    else CHECK(0, "%s exports no %s", path, TESTDEV_DRIVER_SYMBOL);
    dlclose(dl);
}

/* ---- a small model ------------------------------------------------------------------- */

/* A classifier training step: x (16, 32), given transposed as an input (32, 16) so that a
 * view and a copy are in the program; linear 64 + relu (the test device fuses them),
 * linear 10, cross-entropy against y; the backward pass and AdamW. */
typedef struct td_model {
    gd_graph *g;
    gd_tensor *xt, *y, *logits, *loss;
} td_model;

/* The batch of step `step` (a fixed function of it). */
static inline void td_model_batch(int step, float *xt, int64_t *y)
{
    for (int i = 0; i < 32 * 16; i++) xt[i] = sinf(0.37f * (float)i + 0.11f * (float)step);
    for (int i = 0; i < 16; i++) y[i] = (i * 7 + step) % 10;
}

/* Builds the model on a new graph of c (placed from c's preferred backend). GD_OK, or a
 * status with the message in c. */
static inline gd_status td_model_build(gd_ctx *c, td_model *m)
{
    memset(m, 0, sizeof *m);
    m->g = gd_graph_new(c);
    if (m->g == NULL) return GD_ERR_NOMEM;
    m->xt = gd_input(m->g, "xt", GD_F32, 2, (int64_t[]){32, 16});
    m->y = gd_input(m->g, "y", GD_I64, 1, (int64_t[]){16});
    gd_tensor *h = gd_relu(gd_nn_linear(gd_transpose(m->xt, 0, 1), "l1", 64, 1));
    m->logits = gd_nn_linear(h, "l2", 10, 1);
    m->loss = gd_cross_entropy(m->logits, m->y, -100);
    if (m->loss == NULL) return GD_ERR_INVALID;
    gd_status s = gd_backward(m->g, m->loss);
    if (s == GD_OK) s = gd_optimizer_adamw(m->g, &(gd_adamw_config){.lr = 1e-2});
    if (s == GD_OK) s = gd_graph_init_params(m->g, 5);
    return s;
}

/* Writes step `step`'s batch, runs `p` and reads the loss. */
static inline gd_status td_model_step(td_model *m, gd_program *p, int step, float *loss)
{
    float xt[32 * 16];
    int64_t y[16];
    td_model_batch(step, xt, y);
    gd_status s = gd_tensor_write(m->xt, xt, sizeof xt);
    if (s == GD_OK) s = gd_tensor_write(m->y, y, sizeof y);
    if (s == GD_OK) s = gd_program_run(p);
    if (s == GD_OK && loss != NULL) s = gd_tensor_read(m->loss, loss, sizeof *loss);
    return s;
}

/* Kernel nodes of op `op` placed on `backend` (NULL: anywhere). */
static inline int td_count_nodes(const gd_program *p, const char *op, const char *backend)
{
    int n = 0;
    for (int i = 0; i < p->n_pn; i++) {
        const gd_pnode *x = &p->pn[i];
        if (x->dead || x->view || strcmp(x->node->op->name, op) != 0) continue;
        n += backend == NULL || strcmp(x->be->name, backend) == 0;
    }
    return n;
}

/* View nodes (aliases, no kernel) of op `op`. */
static inline int td_count_views(const gd_program *p, const char *op)
{
    int n = 0;
    for (int i = 0; i < p->n_pn; i++) n += !p->pn[i].dead && p->pn[i].view && strcmp(p->pn[i].node->op->name, op) == 0;
    return n;
}

/* Copies between backends the planner added. */
static inline int td_count_transfers(const gd_program *p)
{
    int n = 0;
    for (int a = 0; a < p->n_acts; a++) n += p->acts[a].kind == GD_ACT_COPY;
    return n;
}

/* The k-th kernel action (in program order) of op `op`, or -1. */
static inline int td_action_of(const gd_program *p, const char *op, int k)
{
    for (int a = 0; a < p->n_acts; a++) {
        if (p->acts[a].kind != GD_ACT_KERNEL || strcmp(p->pn[p->acts[a].pnode].node->op->name, op) != 0) continue;
        if (k-- == 0) return a;
    }
    return -1;
}

/* The descriptor the kernel of action a receives. */
static inline const gdp_node *td_desc(const gd_program *p, int a) { return &p->descs[p->acts[a].desc].node; }

#endif
