/* Lifetime and threading contracts, through the test device:
 *  - init runs once per gradus context: two contexts loading the test device get two
 *    instances, which count separately and log to their own context; freeing one leaves
 *    the other working, graph pass included (the pass calls the host it was given at
 *    init: with state shared between instances, that is a use after free, which the
 *    sanitizer build reports);
 *  - two contexts may be used from two threads at once, each giving the results one
 *    context gives alone;
 *  - a program, its graph and their context may be freed in any of the 6 orders, with
 *    device memory, prepared segments and (host-visible variant) queued work outstanding:
 *    the driver's count of instances and bytes comes back to where it was, and nothing is
 *    used after it was freed (the sanitizer build runs this too). */
#include "testdev_util.h"

#include <pthread.h>
#include <stdlib.h>

#define STEPS 3

/* Trains the model for STEPS steps on c's test device; losses into out. */
static gd_status train(gd_ctx *c, float *out)
{
    td_model m;
    gd_status s = td_model_build(c, &m);
    gd_program *p = s == GD_OK ? gd_compile(m.g, 1, &m.loss, GD_COMPILE_UPDATES) : NULL;
    if (s == GD_OK && p == NULL) s = GD_ERR_INVALID;
    for (int i = 0; i < STEPS && s == GD_OK; i++) s = td_model_step(&m, p, i, &out[i]);
    gd_program_free(p);
    gd_graph_free(m.g);
    return s;
}

typedef struct log_buf {
    char text[2048];
} log_buf;

static void log_into(void *user, const char *line)
{
    log_buf *b = user;
    size_t n = strlen(b->text);
    snprintf(b->text + n, sizeof b->text - n, "%s\n", line);
}

static void test_two_contexts(void)
{
    int32_t inst0, inst;
    int64_t bytes0, bytes;
    td_driver("testdev", &inst0, &bytes0);
    gd_ctx *a = td_new_ctx("testdev", 0), *b = td_new_ctx("testdev", 0);
    if (a == NULL || b == NULL) {
        gd_ctx_free(a);
        gd_ctx_free(b);
        return;
    }
    const testdev_stats *sa = td_stats(a), *sb = td_stats(b);
    CHECK(sa != sb && sa->id != sb->id, "the two contexts share one test-device instance");
    td_driver("testdev", &inst, &bytes);
    CHECK(inst == inst0 + 2, "%d instances alive, want %d", inst, inst0 + 2);
    log_buf la = {{0}}, lb = {{0}};
    gd_ctx_set_log(a, log_into, &la);
    gd_ctx_set_log(b, log_into, &lb);
    setenv("GRADUS_TESTDEV_VERBOSE", "1", 1);

    float loss_a[STEPS], loss_b[STEPS], again[STEPS];
    testdev_stats b0 = *sb;
    CHECK(train(a, loss_a) == GD_OK, "training in context a: %s", gd_ctx_error(a));
    CHECK(sb->allocs == b0.allocs && sb->launches == b0.launches && sb->prepares == b0.prepares,
          "work in context a was counted by b's instance");
    CHECK(sa->launches > 0 && sa->allocs > 0 && sa->prepares > 0, "a's instance counted nothing");
    CHECK(strstr(la.text, "fused 1 linear+relu") != NULL && lb.text[0] == '\0',
          "a's graph pass logged into a's log? a: '%s' b: '%s'", la.text, lb.text);
    CHECK(train(b, loss_b) == GD_OK, "training in context b: %s", gd_ctx_error(b));
    CHECK(memcmp(loss_a, loss_b, sizeof loss_a) == 0, "the two contexts disagree: %g vs %g", loss_a[STEPS - 1],
          loss_b[STEPS - 1]);
    CHECK(strstr(lb.text, "fused 1 linear+relu") != NULL, "b's graph pass did not log into b's log: '%s'", lb.text);

    gd_ctx_free(b);
    td_driver("testdev", &inst, &bytes);
    CHECK(inst == inst0 + 1, "after freeing b, %d instances alive, want %d", inst, inst0 + 1);
    la.text[0] = '\0';
    CHECK(train(a, again) == GD_OK, "training in a after b was freed: %s", gd_ctx_error(a));
    CHECK(memcmp(loss_a, again, sizeof again) == 0, "a trains differently after b was freed");
    CHECK(strstr(la.text, "fused 1 linear+relu") != NULL, "a's graph pass stopped logging after b was freed");
    unsetenv("GRADUS_TESTDEV_VERBOSE");

    /* the "threads" setting reaches the instance of its own context only */
    gd_ctx_set_threads(a, 3);
    CHECK(sa->threads == 3, "configure(threads) did not reach the instance: %lld", (long long)sa->threads);
    gd_ctx_free(a);
    td_driver("testdev", &inst, &bytes);
    CHECK(inst == inst0 && bytes == bytes0, "after freeing both: %d instances, %lld bytes; want %d, %lld", inst,
          (long long)bytes, inst0, (long long)bytes0);
}

/* ---- two threads, two contexts ----------------------------------------------------------- */

typedef struct job {
    const char *variant;
    float loss[STEPS];
    gd_status status;
    char msg[512];
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    gd_ctx *c = NULL;
    char path[1024];
    j->status = gd_ctx_create(&c, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1});
    if (j->status == GD_OK) j->status = gd_plugin_load_file(c, td_path(j->variant, path, sizeof path));
    if (j->status == GD_OK) j->status = gd_ctx_use_backend(c, "testdev");
    for (int round = 0; round < 4 && j->status == GD_OK; round++) j->status = train(c, j->loss);
    if (j->status != GD_OK) snprintf(j->msg, sizeof j->msg, "%s", c != NULL ? gd_ctx_error(c) : "no context");
    gd_ctx_free(c);
    return NULL;
}

static void test_threads(void)
{
    float alone[STEPS];
    gd_ctx *c = td_new_ctx("testdev", 0);
    if (c == NULL) return;
    CHECK(train(c, alone) == GD_OK, "training alone: %s", gd_ctx_error(c));
    gd_ctx_free(c);
    job jobs[3] = {{.variant = "testdev"}, {.variant = "testdev"}, {.variant = "testdev_hostvis"}};
    pthread_t th[3];
    int started[3];
    for (int i = 0; i < 3; i++) started[i] = pthread_create(&th[i], NULL, run_job, &jobs[i]) == 0;
    for (int i = 0; i < 3; i++) {
        CHECK(started[i], "pthread_create failed");
        if (!started[i]) continue;
        pthread_join(th[i], NULL);
        CHECK(jobs[i].status == GD_OK, "thread %d (%s): %s", i, jobs[i].variant, jobs[i].msg);
        for (int s = 0; s < STEPS && jobs[i].status == GD_OK; s++)
            CHECK(jobs[i].loss[s] == alone[s], "thread %d step %d: loss %.9g, alone %.9g", i, s, jobs[i].loss[s], alone[s]);
    }
}

/* ---- frees in any order -------------------------------------------------------------------- */

static void test_free_orders(const char *variant)
{
    static const char *const orders[6] = {"pgc", "pcg", "gpc", "gcp", "cpg", "cgp"};
    for (int o = 0; o < 6; o++) {
        int32_t inst0, inst;
        int64_t bytes0, bytes;
        td_driver(variant, &inst0, &bytes0);
        gd_ctx *c = td_new_ctx(variant, 0);
        if (c == NULL) return;
        td_model m;
        gd_status s = td_model_build(c, &m);
        gd_program *train_p = s == GD_OK ? gd_compile(m.g, 1, &m.loss, GD_COMPILE_UPDATES) : NULL;
        gd_program *eval_p = s == GD_OK ? gd_compile(m.g, 1, &m.logits, 0) : NULL;
        CHECK(train_p != NULL && eval_p != NULL, "%s: compile: %s", variant, gd_ctx_error(c));
        /* run, and leave the results unread: the host-visible variant still has work queued */
        for (int i = 0; i < 2 && train_p != NULL && eval_p != NULL; i++) {
            CHECK(td_model_step(&m, train_p, i, NULL) == GD_OK, "%s: step: %s", variant, gd_ctx_error(c));
            CHECK(gd_program_run(eval_p) == GD_OK, "%s: evaluation: %s", variant, gd_ctx_error(c));
        }
        CHECK(td_stats(c)->prepares > 0 && td_stats(c)->bytes > 0, "%s: nothing prepared or allocated", variant);
        for (const char *f = orders[o]; *f; f++) {
            if (*f == 'p') {
                gd_program_free(eval_p);
                gd_program_free(train_p);
            } else if (*f == 'g') {
                gd_graph_free(m.g);
            } else {
                gd_ctx_free(c);
            }
        }
        td_driver(variant, &inst, &bytes);
        CHECK(inst == inst0 && bytes == bytes0, "%s, frees in order %s: %d instances and %lld device bytes left, want %d "
              "and %lld", variant, orders[o], inst, (long long)bytes, inst0, (long long)bytes0);
    }
}

int main(void)
{
    unsetenv("GRADUS_EXECUTOR");
    unsetenv("GRADUS_SYNC");
    test_two_contexts();
    test_threads();
    test_free_orders("testdev");
    test_free_orders("testdev_hostvis");
    return tu_finish("contexts");
}
