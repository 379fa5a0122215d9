/* sample.c — picking the next token from logits inside a program, so that a decoder reads
 * back one id per sequence instead of a row of logits.
 *
 *   sample(logits (B, V), draw (B) i32|i64) -> ids (B) i32
 *   attrs: temperature (0: greedy), top_k (0: all), top_p (0 or 1: all), seed
 *
 * Row b is gd_lm_sample's pick (gradus_lm.h) with draw number draw[b]: greedy takes the
 * first highest logit; otherwise the logits divided by the temperature (f32) are ordered
 * by value, then id, cut to the top k and to the smallest prefix holding top_p of the
 * mass (gdp_exp in double), and the Philox draw at (draw[b], seed) picks from what is left.
 * The reference calls gd_lm_sample itself, so a sampled program and a host-side sampler
 * give the same tokens; another backend must follow the same steps. Not differentiable.
 */
#include "gradus_lm.h"
#include "attention_ref.h"
#include "refwalk.h"

static int sample_infer(gd_infer *c)
{
    const gd_shape *x = &c->in[0], *d = &c->in[1];
    char sx[160], sd[160];
    gd_shape_str(x, sx, sizeof sx);
    gd_shape_str(d, sd, sizeof sd);
    if (x->ndim != 2 || x->dim[1] < 1) return gd_infer_fail(c, "logits %s must be (B, V) with V >= 1", sx);
    if ((d->dtype != GDP_I32 && d->dtype != GDP_I64) || d->ndim != 1 || d->dim[0] != x->dim[0])
        return gd_infer_fail(c, "draw %s must be [%lld] of i32 or i64 (a draw number per row)", sd, (long long)x->dim[0]);
    double t = gdp_attr_float(c->attrs, "temperature", 0), p = gdp_attr_float(c->attrs, "top_p", 0);
    if (!(t >= 0) || !(p >= 0 && p <= 1) || gdp_attr_int(c->attrs, "top_k", 0) < 0)
        return gd_infer_fail(c, "temperature %g, top_p %g, top_k %lld: want t >= 0, 0 <= top_p <= 1, top_k >= 0", t, p,
                             (long long)gdp_attr_int(c->attrs, "top_k", 0));
    c->out[0] = (gd_shape){.dtype = GDP_I32, .ndim = 1, .dim = {x->dim[0]}};
    return 0;
}

/* a row of the logits in f32 (the core widens halves), then gd_lm_sample's scratch */
static size_t sample_workspace(const gdp_node *node)
{
    int64_t V = node->in[0]->shape[1];
    return sizeof(float) * (size_t)V + 64 + gd_lm_sample_scratch(V);
}

static gdp_status sample_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend, (void)stream;
    const gdp_tensor *x = node->in[0], *d = node->in[1];
    int64_t B = x->shape[0], V = x->shape[1];
    char *ws = rw_workspace(node, sample_workspace(node), err);
    if (ws == NULL) return GDP_ERR_INVALID;
    float *row = (float *)ws;
    void *scratch = ws + ((sizeof(float) * (size_t)V + 63) & ~(size_t)63);
    gd_sample_config c = {.temperature = gdp_attr_float(&node->attrs, "temperature", 0),
                          .top_k = gdp_attr_int(&node->attrs, "top_k", 0),
                          .top_p = gdp_attr_float(&node->attrs, "top_p", 0),
                          .seed = (uint64_t)gdp_attr_int(&node->attrs, "seed", 0)};
    int32_t *out = node->out[0]->data;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t v = 0; v < V; v++) row[v] = (float)rw_ld(x, b * x->stride[0] + v * x->stride[1]);
        int64_t draw = rw_ld_index(d, b * d->stride[0]);
        out[b] = gd_lm_sample(row, V, &c, (uint64_t)draw, scratch);
    }
    return GDP_OK;
}

static const char *const sample_cases[] = {
    "f[3,7] i64[3]<100 | temperature=0",
    "n[5,3000] i32[5]<10 | temperature=0", /* greedy over a vocabulary wider than a block */
    "n[3,50000] i64[3]<10 | temperature=0", /* and wider than a backend's one block takes */
    "f[2,9000] i32[2]<10 | temperature=0",  /* ties (in f16, bf16) across those blocks */
    "f[2,1] i64[2]<3 | temperature=0",
    "n[2,50] i64[2]<100 | temperature=0.8 top_k=5 seed=3",
    "n[4,50] i32[4]<1000 | temperature=1 top_p=0.9 seed=11",
    "n[2,300] i64[2]<1000 | temperature=0.7 top_k=40 top_p=0.95 seed=7",
    "f[1,1] i64[1]<5 | temperature=2",
    /* wide vocabularies: top-k by selection, top-p over a sort of every logit, and the
     * sums over all of them in id order (temperature alone) */
    "n[3,32000] i64[3]<100000 | temperature=0.8 top_k=50 seed=5",
    "n[2,32000] i32[2]<100000 | temperature=1 top_p=0.9 seed=9",
    "n[2,32000] i64[2]<100000 | temperature=1.5 top_k=2000 top_p=0.5 seed=23",
    "n[4,5000] i64[4]<1000 | temperature=0.5 seed=2",
    /* runs of the sums (GDP_SAMPLE_RUN) filled exactly, and one value past them */
    "n[2,512] i64[2]<1000 | temperature=1 top_p=0.99 seed=3",
    "n[3,768] i64[3]<1000 | temperature=0.9 seed=8",
    "n[2,513] i32[2]<1000 | temperature=2 top_p=0.999 seed=5",
    "n[1,150000] i64[1]<1000 | temperature=1.2 seed=4",
    "n[1,150000] i64[1]<1000 | temperature=1 top_p=0.3 seed=6",
    /* ties: bf16 logits repeat, so the top-k cut and the top-p order fall on equal values
     * that only the id separates */
    "bf16[3,4000] i64[3]<1000 | temperature=1 top_k=20 seed=13",
    "bf16[3,4000] i32[3]<1000 | temperature=0.7 top_p=0.5 seed=17",
    "bf16[2,300] i64[2]<1000 | temperature=1 top_k=1 seed=1",
    NULL,
};

gd_tensor *gd_sample(gd_tensor *logits, gd_tensor *draw, const gd_sample_config *c)
{
    if (logits == NULL || draw == NULL || c == NULL) return NULL;
    gd_attr a[4] = {gd_attr_f("temperature", c->temperature), gd_attr_i("top_k", c->top_k),
                    gd_attr_f("top_p", c->top_p), gd_attr_i("seed", (int64_t)c->seed)};
    return gd_op(gd_tensor_graph(logits), "sample", 2, (gd_tensor *[]){logits, draw}, 4, a);
}

/* ---- decode_advance: a decode step's feedback, on the backend ---------------------------- */

/* (tok (B), ids (B, 1) or (B), pos, kv_len (scalars or [B]), draw (B)) -> ids', pos', kv_len',
 * draw' in place: the next step's input tokens are the ones just sampled, and its position,
 * cached length and draw number are one further on. With it at the end of a decode program,
 * steps follow each other on the device with nothing written by the host between them. */
static int decode_advance_infer(gd_infer *c)
{
    const gd_shape *tok = &c->in[0], *ids = &c->in[1], *draw = &c->in[4];
    char s1[160], s2[160];
    if (!gdp_is_index(tok->dtype) || tok->ndim != 1)
        return gd_infer_fail(c, "tok %s must be [B] of i32 or i64", gd_shape_str(tok, s1, sizeof s1));
    int64_t B = tok->dim[0];
    if (!gdp_is_index(ids->dtype) || gd_shape_numel(ids) != B || ids->ndim < 1 || ids->dim[0] != B || ids->ndim > 2)
        return gd_infer_fail(c, "ids %s must be [%lld] or [%lld, 1] of i32 or i64 (tok is %s)",
                             gd_shape_str(ids, s1, sizeof s1), (long long)B, (long long)B, gd_shape_str(tok, s2, sizeof s2));
    if (gd_index_per_row(c, 2, "pos", B) || gd_index_per_row(c, 3, "kv_len", B)) return 1;
    if (!gdp_is_index(draw->dtype) || draw->ndim != 1 || draw->dim[0] != B)
        return gd_infer_fail(c, "draw %s must be [%lld] of i32 or i64", gd_shape_str(draw, s1, sizeof s1), (long long)B);
    for (int k = 0; k < 4; k++) c->out[k] = c->in[k + 1];
    c->n_out = 4;
    return 0;
}

static void add_one(const gdp_tensor *x, const gdp_tensor *y)
{
    for (int64_t i = 0, n = gdp_numel(x); i < n; i++)
        if (x->dtype == GDP_I64) ((int64_t *)y->data)[i] = (int64_t)((uint64_t)((const int64_t *)x->data)[i] + 1u);
        else ((int32_t *)y->data)[i] = (int32_t)((uint32_t)((const int32_t *)x->data)[i] + 1u);
}

static gdp_status decode_advance_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend, (void)stream, (void)err;
    const gdp_tensor *tok = node->in[0], *ids = node->out[0];
    for (int64_t b = 0, B = tok->shape[0]; b < B; b++) {
        int64_t v = rw_ld_index(tok, b * tok->stride[0]);
        if (ids->dtype == GDP_I64) ((int64_t *)ids->data)[b] = v;
        else ((int32_t *)ids->data)[b] = (int32_t)v;
    }
    for (int k = 1; k < 4; k++) add_one(node->in[k + 1], node->out[k]); /* element by element: in place is safe */
    return GDP_OK;
}

static const char *const decode_advance_cases[] = {
    "i32[1]<100 i32[1,1]<100 i32[]<50 i32[]<50 i64[1]<100",  /* one sequence: scalar position and length */
    "i32[3]<100 i32[3,1]<100 i32[3]<50 i32[3]<50 i64[3]<100", /* a batch, each sequence at its own position */
    "i64[2]<100 i32[2]<100 i64[2]<50 i32[]<50 i32[2]<100",
    NULL,
};

gd_status gd_decode_advance(gd_tensor *tok, gd_tensor *ids, gd_tensor *pos, gd_tensor *kv_len, gd_tensor *draw,
                            gd_tensor **out)
{
    if (tok == NULL || ids == NULL || pos == NULL || kv_len == NULL || draw == NULL || out == NULL) return GD_ERR_INVALID;
    gd_graph *g = gd_tensor_graph(tok);
    return gd_op_multi(g, "decode_advance", 5, (gd_tensor *[]){tok, ids, pos, kv_len, draw}, 0, NULL, 4, out);
}

GD_FAMILY(sample)
{
    gd_register_op(r, &(gd_op_def){
        .name = "sample", .min_in = 2, .max_in = 2, .n_out = 1,
        .attrs = "temperature:float top_k:int top_p:float seed:int",
        .dtypes = GD_FLOATS, .infer = sample_infer, .ref = sample_ref, .cases = sample_cases,
        .ref_workspace = sample_workspace, .ref_strided = 1, .tol = 0,
        .doc = "the next token of each row of logits (B, V): greedy at temperature 0, else temperature, top-k and "
               "top-p as gd_lm_sample, drawing Philox number draw[b] of the seed"});
    gd_register_op(r, &(gd_op_def){
        .name = "decode_advance", .min_in = 5, .max_in = 5, .n_out = 4, .attrs = "", .dtypes = 0,
        .infer = decode_advance_infer, .ref = decode_advance_ref, .cases = decode_advance_cases,
        .inplace = {1, 2, 3, 4}, .updates = 1, .tol = 0, .ref_strided = 1,
        .doc = "(tok (B), ids (B, 1), pos, kv_len, draw (B)) -> ids <- tok, and pos, kv_len, draw each plus one, in "
               "place: a decode step's sampled tokens fed to the next step on the backend"});
}
