/* Every public entry point called with NULL where it takes a pointer (and with a graph or
 * tensor of no use), one argument at a time: each must return an error or NULL, never
 * crash, and where it has a context to report into, leave a message. Run under ASan and
 * UBSan in CI, where a read through NULL or an overrun would stop the test. */
#include "gradus_classifier.h"
#include "testutil.h"

#include <string.h>

/* A builder given a NULL input returns NULL and keeps the earlier message (the rule that
 * lets a chain of builders be checked once): check it returns NULL and the context lives. */
#define NULL_OUT(expr) CHECK((expr) == NULL, "%s should return NULL", #expr)
#define FAILS(expr) CHECK((expr) != GD_OK, "%s should fail", #expr)

static void contexts(void)
{
    FAILS(gd_ctx_create(NULL, NULL));
    gd_ctx *c = NULL;
    FAILS(gd_ctx_create(&c, &(gd_ctx_options){.size = 0})); /* size not set: refused, not misread */
    CHECK(c == NULL, "a refused context is NULL");
    gd_ctx_free(NULL);
    CHECK(strcmp(gd_ctx_error(NULL), "") != 0, "gd_ctx_error(NULL) names the problem");
    gd_ctx_clear_error(NULL);
    gd_ctx_set_log(NULL, NULL, NULL);
    gd_ctx_set_threads(NULL, 2);
    CHECK(gd_ctx_threads(NULL) == 0, "threads of NULL");
    FAILS(gd_ctx_synchronize(NULL));
    CHECK(gd_ctx_backend(NULL) != NULL, "gd_ctx_backend(NULL) is a string");
    CHECK(gd_backend_count(NULL) == 0 && gd_backend_name(NULL, 0) == NULL, "backends of NULL");
    FAILS(gd_ctx_use_backend(NULL, "ref"));
    FAILS(gd_ctx_use_backend(ctx, NULL));
    CHECK(strstr(gd_ctx_error(ctx), "NULL") != NULL, "use_backend(NULL) message: %s", gd_ctx_error(ctx));
    CHECK(gd_dtype_name((gd_dtype)99) != NULL && gd_status_name(99) != NULL, "names of unknown values");
    /* profiling */
    FAILS(gd_profile_start(NULL, "x.json"));
    FAILS(gd_profile_start(ctx, NULL));
    CHECK(strstr(gd_ctx_error(ctx), "NULL") != NULL, "profile_start(NULL) message: %s", gd_ctx_error(ctx));
    FAILS(gd_profile_stop(NULL));
    FAILS(gd_profile_flush(NULL));
    FAILS(gd_profile_stop(ctx)); /* not recording */
    CHECK(!gd_profile_active(NULL) && gd_profile_path(NULL) == NULL, "profile of NULL");
    gd_profile_begin(NULL, "x");
    gd_profile_begin(ctx, NULL); /* not recording: nothing to do */
    gd_profile_end(NULL);
    gd_profile_counter(NULL, "x", 1);
    gd_profile_counter(ctx, NULL, 1);
}

static void graphs(void)
{
    NULL_OUT(gd_graph_new(NULL));
    gd_graph_free(NULL);
    CHECK(gd_graph_ctx(NULL) == NULL, "ctx of NULL graph");
    gd_graph *g = gd_graph_new(ctx);
    NULL_OUT(gd_input(NULL, "x", GD_F32, 1, (int64_t[]){2}));
    NULL_OUT(gd_input(g, NULL, GD_F32, 1, (int64_t[]){2}));
    NULL_OUT(gd_input(g, "x", GD_F32, 2, NULL));
    NULL_OUT(gd_param(g, "p", (gd_dtype)42, 1, (int64_t[]){2}));
    NULL_OUT(gd_state(g, "s", GD_F32, 99, (int64_t[]){2}));
    CHECK(gd_graph_param_count(NULL) == 0 && gd_graph_param(NULL, 0) == NULL, "params of NULL");
    CHECK(gd_graph_find(NULL, "x") == NULL && gd_graph_find(g, NULL) == NULL, "find with NULL");
    FAILS(gd_graph_init_params(NULL, 1));
    CHECK(gd_tensor_graph(NULL) == NULL && gd_tensor_ndim(NULL) == 0 && gd_tensor_dim(NULL, 0) == 0 &&
              gd_tensor_numel(NULL) == 0 && strcmp(gd_tensor_name(NULL), "") == 0,
          "accessors of NULL");
    char buf[64];
    CHECK(gd_tensor_describe(NULL, buf, sizeof buf) != NULL, "describe NULL");
    CHECK(gd_tensor_describe(NULL, NULL, 0) != NULL, "describe into NULL");
    gd_tensor *x = gd_input(g, "x", GD_F32, 1, (int64_t[]){4});
    FAILS(gd_tensor_write(NULL, buf, 16));
    FAILS(gd_tensor_write(x, NULL, 16));
    CHECK(strstr(gd_ctx_error(ctx), "NULL") != NULL, "write(NULL) message: %s", gd_ctx_error(ctx));
    FAILS(gd_tensor_read(NULL, buf, 16));
    FAILS(gd_tensor_read(x, NULL, 16));
    NULL_OUT(gd_label(NULL, "l"));
    CHECK(gd_label(x, NULL) == x, "a NULL label changes nothing");
    gd_graph_free(g);
}

static void builders(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = gd_input(g, "x", GD_F32, 2, (int64_t[]){2, 3});
    NULL_OUT(gd_op(NULL, "add", 2, (gd_tensor *[]){x, x}, 0, NULL));
    NULL_OUT(gd_op(g, NULL, 2, (gd_tensor *[]){x, x}, 0, NULL));
    NULL_OUT(gd_op(g, "add", 2, NULL, 0, NULL));
    NULL_OUT(gd_op(g, "relu", 1, (gd_tensor *[]){NULL}, 0, NULL));
    NULL_OUT(gd_op(g, "scale", 1, &x, 1, NULL));
    gd_tensor *out[4];
    FAILS(gd_op_multi(g, "add", 2, (gd_tensor *[]){x, x}, 0, NULL, 1, NULL));
    FAILS(gd_op_multi(NULL, "add", 2, (gd_tensor *[]){x, x}, 0, NULL, 1, out));
    /* attribute arrays: more ints than a node holds is refused by name, not overrun */
    gd_attr big = gd_attr_is("shape", 12, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6});
    NULL_OUT(gd_op(g, "reshape", 1, &x, 1, &big));
    CHECK(strstr(gd_ctx_error(ctx), "12 ints") != NULL, "oversized ints message: %s", gd_ctx_error(ctx));
    gd_attr noname = {.name = NULL, .kind = GD_ATTR_INT};
    NULL_OUT(gd_op(g, "relu", 1, &x, 1, &noname));
    gd_attr nostr = gd_attr_s("shape", NULL);
    NULL_OUT(gd_op(g, "reshape", 1, &x, 1, &nostr));
    NULL_OUT(gd_add(NULL, x));
    NULL_OUT(gd_add(x, NULL));
    NULL_OUT(gd_relu(NULL));
    NULL_OUT(gd_cast(NULL, GD_F16));
    NULL_OUT(gd_sum(NULL, 0, NULL, 0));
    NULL_OUT(gd_sum(x, 2, NULL, 0));
    NULL_OUT(gd_matmul(NULL, x, 0, 0));
    NULL_OUT(gd_linear(x, NULL, NULL));
    NULL_OUT(gd_softmax(NULL, -1));
    NULL_OUT(gd_cross_entropy(x, NULL, -1));
    NULL_OUT(gd_layer_norm(NULL, NULL, NULL, 1e-5));
    NULL_OUT(gd_embedding(NULL, x));
    NULL_OUT(gd_index_select(x, 0, NULL));
    NULL_OUT(gd_concat(NULL, 1, &x, 0));
    NULL_OUT(gd_concat(g, 2, NULL, 0));
    NULL_OUT(gd_slice(NULL, 0, 0, 1));
    gd_tensor *parts[2];
    FAILS(gd_split(NULL, 0, 2, NULL, parts));
    FAILS(gd_split(x, 1, 2, NULL, NULL));
    NULL_OUT(gd_reshape(x, 2, NULL));
    NULL_OUT(gd_permute(x, 2, NULL));
    NULL_OUT(gd_expand(x, 3, NULL));
    NULL_OUT(gd_transpose(NULL, 0, 1));
    NULL_OUT(gd_squeeze(NULL, 0));
    NULL_OUT(gd_unsqueeze(NULL, 0));
    NULL_OUT(gd_rope(NULL, 1e4, 1, NULL));
    NULL_OUT(gd_attention(x, NULL, x, 0, 0, NULL));
    NULL_OUT(gd_cache_write(x, x, NULL));
    NULL_OUT(gd_conv2d(NULL, x, NULL, 1, 0, 1, 1));
    NULL_OUT(gd_max_pool2d(NULL, 2, 2, 0));
    NULL_OUT(gd_dropout(NULL, 0.5, 1, NULL));
    NULL_OUT(gd_fill(NULL, GD_F32, 1, (int64_t[]){2}, 0));
    NULL_OUT(gd_fill(g, GD_F32, 1, NULL, 0));
    NULL_OUT(gd_arange(NULL, GD_F32, 3, 0, 1));
    NULL_OUT(gd_rand_normal(g, GD_F32, 1, NULL, 0, 1, 1));
    NULL_OUT(gd_init_kaiming(NULL, GD_F32, 2, (int64_t[]){2, 2}, 1));
    NULL_OUT(gd_global_norm(g, 1, NULL));
    NULL_OUT(gd_global_norm(NULL, 1, &x));
    NULL_OUT(gd_global_norm_as(g, 1, NULL, GD_F32));
    NULL_OUT(gd_global_norm_as(NULL, 1, &x, GD_F32));
    NULL_OUT(gd_global_norm_as(g, 1, (gd_tensor *[]){NULL}, GD_F32));
    NULL_OUT(gd_assign(NULL, x));
    NULL_OUT(gd_nn_linear(NULL, "l", 4, 1));
    NULL_OUT(gd_nn_linear(x, NULL, 4, 1));
    NULL_OUT(gd_nn_conv2d(NULL, "c", 4, 3, 1, 1, 1));
    NULL_OUT(gd_nn_mlp(NULL, 16));
    NULL_OUT(gd_nn_cnn(NULL));
    gd_graph_free(g);
}

static void programs(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = gd_input(g, "x", GD_F32, 1, (int64_t[]){4});
    gd_tensor *y = gd_relu(x);
    FAILS(gd_backward(NULL, y));
    FAILS(gd_backward(g, NULL));
    CHECK(gd_grad(NULL, x) == NULL && gd_grad(g, NULL) == NULL, "grad of NULL");
    CHECK(gd_grad_narrow(NULL, x) == NULL && gd_grad_narrow(g, NULL) == NULL, "narrow grad of NULL");
    FAILS(gd_optimizer_sgd(NULL, &(gd_sgd_config){.lr = 0.1}));
    FAILS(gd_optimizer_sgd(g, NULL));
    FAILS(gd_optimizer_adamw(g, NULL));
    FAILS(gd_optimizer_set_lr(NULL, 0.1));
    NULL_OUT(gd_compile(NULL, 1, &y, 0));
    NULL_OUT(gd_compile(g, 1, NULL, 0));
    CHECK(strstr(gd_ctx_error(ctx), "targets") != NULL, "compile(NULL targets) message: %s", gd_ctx_error(ctx));
    NULL_OUT(gd_compile(g, 1, (gd_tensor *[]){NULL}, 0));
    NULL_OUT(gd_compile(g, -1, &y, 0));
    FAILS(gd_program_run(NULL));
    gd_program_free(NULL);
    FAILS(gd_program_describe(NULL, NULL, NULL));
    CHECK(gd_program_planned_bytes(NULL, "ref") == 0 && gd_graph_arena_bytes(NULL, "ref") == 0, "sizes of NULL");
    gd_program *p = gd_compile(g, 1, &y, 0);
    CHECK(p != NULL, "compile: %s", gd_ctx_error(ctx));
    CHECK(gd_program_planned_bytes(p, NULL) == 0, "planned bytes of a NULL backend name");
    gd_program_free(p);
    gd_graph_free(g);
}

static void data(void)
{
    gd_dataset d;
    FAILS(gd_dataset_load_idx(ctx, NULL, "labels", &d));
    FAILS(gd_dataset_load_idx(ctx, "images", NULL, &d));
    FAILS(gd_dataset_load_idx(ctx, "images", "labels", NULL));
    FAILS(gd_dataset_shapes(ctx, 10, 1, NULL));
    gd_dataset_free(NULL);
    gd_shuffle(NULL, 10, 1);
    gd_train_result r;
    FAILS(gd_train_classifier(NULL, NULL, NULL, NULL, &r));
    FAILS(gd_train_classifier(ctx, NULL, NULL, &(gd_train_config){.model = "mlp"}, &r));
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    contexts();
    graphs();
    builders();
    programs();
    data();
    return tu_finish("test_null_args");
}
