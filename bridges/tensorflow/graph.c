/* graph.c — the GRADUS graph pass, through TensorFlow's graph optimizer C API
 * (`TF_InitGraph`): MatMul or Conv2D, then BiasAdd, then (optionally) Relu, all placed on
 * GRADUS, become one _FusedMatMul or _FusedConv2D node, which the bridge runs with gradus's
 * fused ops (linear_act; conv2d with its bias, the activation on the way out).
 *
 * The graph arrives as a serialized GraphDef and leaves as one. A small reader and writer
 * of the protobuf wire format are enough: nodes that are not rewritten are copied as the
 * bytes they came as, and so is everything in the GraphDef that is not a node (the
 * function library, versions). The fields read (tensorflow/core/framework/graph.proto,
 * node_def.proto, attr_value.proto): GraphDef.node = 1; NodeDef name = 1, op = 2,
 * input = 3, device = 4, attr = 5 (map entries: key = 1, value = 2); AttrValue s = 2,
 * list = 1 (ListValue s = 2, type = 6), type = 6.
 *
 * A node is swallowed only when nothing else reads it (data or control), it is not among
 * the nodes TensorFlow asks to preserve (fetches, feeds), and the whole chain is placed on
 * GRADUS. The fused node takes the name of the chain's last node, so readers of it are
 * unchanged. */
#include "gtf.h"

#include "tensorflow/c/experimental/grappler/grappler.h"
#include "tensorflow/c/tf_buffer.h"
#include "tensorflow/c/tf_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the wire format ------------------------------------------------------------------ */

typedef struct slice { const uint8_t *p; size_t n; } slice;

/* Reads a varint; 0 at the end of the input or on a malformed one (then *ok = 0). */
static uint64_t rd_varint(const uint8_t **p, const uint8_t *end, int *ok)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end) break;
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    *ok = 0;
    return 0;
}

/* One field: its number, wire type, and for length-delimited fields the bytes; `whole`
 * is the field as it stands in the input (key included). 0 at the end, -1 if malformed. */
static int rd_field(const uint8_t **p, const uint8_t *end, uint32_t *num, int *wt, slice *val, slice *whole)
{
    if (*p >= end) return 0;
    const uint8_t *start = *p;
    int ok = 1;
    uint64_t key = rd_varint(p, end, &ok);
    *num = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    val->p = *p;
    val->n = 0;
    switch (*wt) {
    case 0: rd_varint(p, end, &ok); break;
    case 1: if (end - *p < 8) ok = 0; else *p += 8; break;
    case 5: if (end - *p < 4) ok = 0; else *p += 4; break;
    case 2: {
        uint64_t n = rd_varint(p, end, &ok);
        if (!ok || n > (uint64_t)(end - *p)) return -1;
        val->p = *p;
        val->n = (size_t)n;
        *p += n;
        break;
    }
    default: return -1;
    }
    if (!ok) return -1;
    whole->p = start;
    whole->n = (size_t)(*p - start);
    return 1;
}

typedef struct wbuf { uint8_t *d; size_t n, cap; int oom; } wbuf;

static void w_bytes(wbuf *b, const void *p, size_t n)
{
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n) cap *= 2;
        uint8_t *d = realloc(b->d, cap);
        if (d == NULL) {
            b->oom = 1;
            return;
        }
        b->d = d;
        b->cap = cap;
    }
    memcpy(b->d + b->n, p, n);
    b->n += n;
}
static void w_varint(wbuf *b, uint64_t v)
{
    uint8_t t[10];
    int n = 0;
    do {
        t[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    w_bytes(b, t, (size_t)n);
}
static void w_len(wbuf *b, uint32_t num, const void *p, size_t n)
{
    w_varint(b, (uint64_t)num << 3 | 2);
    w_varint(b, n);
    w_bytes(b, p, n);
}
static void w_str(wbuf *b, uint32_t num, const char *s) { w_len(b, num, s, strlen(s)); }

static int slice_is(slice s, const char *lit) { return s.n == strlen(lit) && memcmp(s.p, lit, s.n) == 0; }

/* ---- the graph as read ---------------------------------------------------------------- */

typedef struct attr { slice key, value, whole; } attr;

typedef struct node {
    slice whole, name, op, device;
    int in0, n_in;      /* its inputs: ins[in0 .. in0 + n_in) */
    int at0, n_at;      /* its attributes: attrs[at0 ...) */
    int users;          /* data and control readers */
    int preserve;       /* TensorFlow asked for it to be kept */
    int gone;           /* swallowed by a fusion */
    int fused_into;     /* for the chain's last node: the first node of its chain, else -1 */
    int bias;           /* for the chain's last node: the BiasAdd */
    int act;            /* 1 when the chain ends in Relu */
} node;

typedef struct graph {
    node *nodes;
    int n, cap;
    slice *ins;
    int n_ins, cap_ins;
    attr *attrs;
    int n_attrs, cap_attrs;
    slice *other;       /* GraphDef fields that are not nodes, as read */
    int n_other, cap_other;
} graph;

#define GROW(arr, n, cap)                                                          \
    do {                                                                           \
        if ((n) == (cap)) {                                                        \
            int c2 = (cap) ? 2 * (cap) : 64;                                       \
            void *t2 = realloc((arr), (size_t)c2 * sizeof *(arr));                 \
            if (t2 == NULL) return -1;                                             \
            (arr) = t2;                                                            \
            (cap) = c2;                                                            \
        }                                                                          \
    } while (0)

static int read_node(graph *g, slice whole, slice body)
{
    GROW(g->nodes, g->n, g->cap);
    node *nd = &g->nodes[g->n];
    memset(nd, 0, sizeof *nd);
    nd->whole = whole;
    nd->in0 = g->n_ins;
    nd->at0 = g->n_attrs;
    nd->fused_into = -1;
    const uint8_t *p = body.p, *end = body.p + body.n;
    uint32_t num;
    int wt, r;
    slice v, w;
    while ((r = rd_field(&p, end, &num, &wt, &v, &w)) == 1) {
        if (wt != 2) continue;
        if (num == 1) nd->name = v;
        else if (num == 2) nd->op = v;
        else if (num == 4) nd->device = v;
        else if (num == 3) {
            GROW(g->ins, g->n_ins, g->cap_ins);
            g->ins[g->n_ins++] = v;
            nd->n_in++;
        } else if (num == 5) {
            GROW(g->attrs, g->n_attrs, g->cap_attrs);
            attr *a = &g->attrs[g->n_attrs++];
            a->whole = w;
            a->key.n = a->value.n = 0;
            const uint8_t *q = v.p, *qe = v.p + v.n;
            uint32_t n2;
            int wt2;
            slice v2, w2;
            while (rd_field(&q, qe, &n2, &wt2, &v2, &w2) == 1) {
                if (n2 == 1 && wt2 == 2) a->key = v2;
                if (n2 == 2 && wt2 == 2) a->value = v2;
            }
            nd->n_at++;
        }
    }
    if (r < 0) return -1;
    g->n++;
    return 0;
}

static int read_graph(graph *g, const uint8_t *p, size_t n)
{
    const uint8_t *end = p + n;
    uint32_t num;
    int wt, r;
    slice v, w;
    while ((r = rd_field(&p, end, &num, &wt, &v, &w)) == 1) {
        if (num == 1 && wt == 2) {
            if (read_node(g, w, v) != 0) return -1;
        } else {
            GROW(g->other, g->n_other, g->cap_other);
            g->other[g->n_other++] = w;
        }
    }
    return r < 0 ? -1 : 0;
}

/* The node an input names ("name", "name:1", "^name"), or -1; *port gets the output
 * index (-1 for a control input). Linear in the nodes: graphs of a training step have a
 * few thousand, and a pass looks up each input once. */
static int find_input(const graph *g, slice in, int *port)
{
    const uint8_t *p = in.p;
    size_t n = in.n;
    *port = 0;
    if (n > 0 && p[0] == '^') p++, n--, *port = -1;
    size_t colon = n;
    for (size_t i = n; i > 0; i--) {
        if (p[i - 1] == ':') {
            colon = i - 1;
            break;
        }
        if (p[i - 1] < '0' || p[i - 1] > '9') break;
    }
    if (colon < n && *port == 0) {
        int v = 0;
        for (size_t i = colon + 1; i < n; i++) v = v * 10 + (p[i] - '0');
        *port = v;
    }
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].name.n == colon && memcmp(g->nodes[i].name.p, p, colon) == 0) return i;
    return -1;
}

static const attr *find_attr(const graph *g, const node *nd, const char *key)
{
    for (int k = 0; k < nd->n_at; k++)
        if (slice_is(g->attrs[nd->at0 + k].key, key)) return &g->attrs[nd->at0 + k];
    return NULL;
}

/* The s field of a string attribute (AttrValue.s = 2). */
static int attr_str_is(const graph *g, const node *nd, const char *key, const char *want, int absent_ok)
{
    const attr *a = find_attr(g, nd, key);
    if (a == NULL) return absent_ok;
    const uint8_t *p = a->value.p, *end = p + a->value.n;
    uint32_t num;
    int wt;
    slice v, w;
    while (rd_field(&p, end, &num, &wt, &v, &w) == 1)
        if (num == 2 && wt == 2) return slice_is(v, want);
    return 0;
}

/* The type field of a type attribute (AttrValue.type = 6), or -1. */
static int attr_type(const graph *g, const node *nd, const char *key)
{
    const attr *a = find_attr(g, nd, key);
    if (a == NULL) return -1;
    const uint8_t *p = a->value.p, *end = p + a->value.n;
    int ok = 1;
    uint64_t k = rd_varint(&p, end, &ok);
    uint64_t v = ok && k == (6u << 3) ? rd_varint(&p, end, &ok) : 0;
    return ok && k == (6u << 3) ? (int)v : -1;
}

static int on_gradus(const node *nd)
{
    for (size_t i = 0; i + 6 <= nd->device.n; i++)
        if (memcmp(nd->device.p + i, "GRADUS", 6) == 0) return 1;
    return 0;
}

/* The single producer of data input k of node i (output 0, read by nothing else, not
 * preserved, on GRADUS, op `op`), or -1. */
static int sole_producer(const graph *g, int i, int k, const char *op)
{
    const node *nd = &g->nodes[i];
    if (k >= nd->n_in) return -1;
    int port;
    int j = find_input(g, g->ins[nd->in0 + k], &port);
    if (j < 0 || port != 0) return -1;
    const node *pr = &g->nodes[j];
    if (!slice_is(pr->op, op) || pr->users != 1 || pr->preserve || pr->gone || !on_gradus(pr)) return -1;
    return j;
}

/* ---- the pass ------------------------------------------------------------------------- */

/* Chains ending in Relu first, so that a BiasAdd a Relu reads is not taken for the end of
 * a shorter chain; then MatMul/Conv2D + BiasAdd where the BiasAdd's value has other readers
 * (it keeps its name and its value, so they are unchanged). */
static void find_chains(graph *g)
{
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < g->n; i++) {
            node *last = &g->nodes[i];
            if (last->gone || last->fused_into >= 0 || !on_gradus(last)) continue;
            int act = pass == 0;
            int b = act ? (slice_is(last->op, "Relu") ? sole_producer(g, i, 0, "BiasAdd") : -1)
                        : (slice_is(last->op, "BiasAdd") ? i : -1);
            if (b < 0 || !attr_str_is(g, &g->nodes[b], "data_format", "NHWC", 1)) continue;
            int m = sole_producer(g, b, 0, "MatMul");
            if (m < 0) m = sole_producer(g, b, 0, "Conv2D");
            if (m < 0 || (slice_is(g->nodes[m].op, "Conv2D") && (!attr_str_is(g, &g->nodes[m], "data_format", "NHWC", 1) ||
                                                                 attr_type(g, &g->nodes[m], "T") == 14 /* bfloat16 */)))
                continue; /* _FusedConv2D is not defined for bfloat16 */
            last->fused_into = m;
            last->bias = b;
            last->act = act;
            g->nodes[m].gone = 1;
            if (b != i) g->nodes[b].gone = 1;
        }
    }
}

/* Writes an AttrValue holding a list of strings (list = 1, ListValue.s = 2). */
static void w_attr_strs(wbuf *b, const char *key, const char *const *vals, int n)
{
    wbuf list = {0}, av = {0}, entry = {0};
    for (int k = 0; k < n; k++) w_str(&list, 2, vals[k]);
    w_len(&av, 1, list.d, list.n);
    w_str(&entry, 1, key);
    w_len(&entry, 2, av.d, av.n);
    w_len(b, 5, entry.d, entry.n);
    b->oom |= list.oom | av.oom | entry.oom;
    free(list.d), free(av.d), free(entry.d);
}
/* An AttrValue with one varint field (i = 3, type = 6) or a float (f = 4). */
static void w_attr_varint(wbuf *b, const char *key, uint32_t field, uint64_t v)
{
    wbuf av = {0}, entry = {0};
    w_varint(&av, (uint64_t)field << 3);
    w_varint(&av, v);
    w_str(&entry, 1, key);
    w_len(&entry, 2, av.d, av.n);
    w_len(b, 5, entry.d, entry.n);
    b->oom |= av.oom | entry.oom;
    free(av.d), free(entry.d);
}
static void w_attr_float(wbuf *b, const char *key, float f)
{
    wbuf av = {0}, entry = {0};
    w_varint(&av, 4u << 3 | 5);
    w_bytes(&av, &f, 4); /* little-endian, as the wire format is */
    w_str(&entry, 1, key);
    w_len(&entry, 2, av.d, av.n);
    w_len(b, 5, entry.d, entry.n);
    b->oom |= av.oom | entry.oom;
    free(av.d), free(entry.d);
}

/* The fused node that replaces chain (m, b, last). */
static void write_fused(const graph *g, const node *last, wbuf *out)
{
    const node *m = &g->nodes[last->fused_into], *b = &g->nodes[last->bias];
    int conv = slice_is(m->op, "Conv2D");
    wbuf nd = {0};
    w_len(&nd, 1, last->name.p, last->name.n);
    w_str(&nd, 2, conv ? "_FusedConv2D" : "_FusedMatMul");
    w_len(&nd, 3, g->ins[m->in0].p, g->ins[m->in0].n);
    w_len(&nd, 3, g->ins[m->in0 + 1].p, g->ins[m->in0 + 1].n);
    w_len(&nd, 3, g->ins[b->in0 + 1].p, g->ins[b->in0 + 1].n);
    const node *chain[3] = {m, b, last};
    for (int c = 0; c < 3; c++) /* control inputs of the chain stay */
        for (int k = 0; k < chain[c]->n_in; k++) {
            slice s = g->ins[chain[c]->in0 + k];
            if (s.n > 0 && s.p[0] == '^') w_len(&nd, 3, s.p, s.n);
        }
    w_len(&nd, 4, last->device.p, last->device.n);
    /* the attributes of the matmul or convolution that the fused op also has */
    static const char *const mm_keep[] = {"T", "transpose_a", "transpose_b", NULL};
    static const char *const conv_keep[] = {"T", "strides", "padding", "explicit_paddings", "data_format", "dilations",
                                            "use_cudnn_on_gpu", NULL};
    const char *const *keep = conv ? conv_keep : mm_keep;
    uint64_t T = 1;
    for (int k = 0; k < m->n_at; k++) {
        const attr *a = &g->attrs[m->at0 + k];
        for (int j = 0; keep[j] != NULL; j++)
            if (slice_is(a->key, keep[j])) w_bytes(&nd, a->whole.p, a->whole.n);
        if (slice_is(a->key, "T")) { /* AttrValue.type = 6 */
            const uint8_t *p = a->value.p, *end = p + a->value.n;
            int ok = 1;
            uint64_t key = rd_varint(&p, end, &ok);
            if (ok && key == (6u << 3)) T = rd_varint(&p, end, &ok);
        }
    }
    const char *ops[2] = {"BiasAdd", "Relu"};
    w_attr_strs(&nd, "fused_ops", ops, last->act ? 2 : 1);
    w_attr_varint(&nd, "num_args", 3, 1);
    w_attr_float(&nd, "epsilon", 0.0001f);
    w_attr_float(&nd, "leakyrelu_alpha", 0.2f);
    if (conv) {
        /* TArgs: list(type) of the one bias argument */
        wbuf list = {0}, av = {0}, entry = {0};
        w_varint(&list, 6u << 3);
        w_varint(&list, T);
        w_len(&av, 1, list.d, list.n);
        w_str(&entry, 1, "TArgs");
        w_len(&entry, 2, av.d, av.n);
        w_len(&nd, 5, entry.d, entry.n);
        nd.oom |= list.oom | av.oom | entry.oom;
        free(list.d), free(av.d), free(entry.d);
        w_attr_varint(&nd, "num_host_args", 3, 0);
    }
    w_len(out, 1, nd.d, nd.n);
    out->oom |= nd.oom;
    free(nd.d);
}

static void free_buffer(void *data, size_t length)
{
    (void)length;
    free(data);
}

/* Marks the nodes TensorFlow wants kept (fetches, feeds). 0 on success. */
static int mark_preserved(graph *g, const TF_GrapplerItem *item, TF_Status *st)
{
    int n = 0;
    size_t bytes = 0;
    TF_GetNodesToPreserveListSize(item, &n, &bytes, st);
    if (TF_GetCode(st) != TF_OK) return -1;
    if (n == 0) return 0;
    char **vals = calloc((size_t)n, sizeof *vals);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    void *storage = malloc(bytes ? bytes : 1);
    int rc = -1;
    if (vals != NULL && lens != NULL && storage != NULL) {
        TF_GetNodesToPreserveList(item, vals, lens, n, storage, bytes, st);
        if (TF_GetCode(st) == TF_OK) {
            for (int k = 0; k < n; k++)
                for (int i = 0; i < g->n; i++)
                    if (g->nodes[i].name.n == lens[k] && memcmp(g->nodes[i].name.p, vals[k], lens[k]) == 0)
                        g->nodes[i].preserve = 1;
            rc = 0;
        }
    }
    free(vals), free(lens), free(storage);
    return rc;
}

static void optimize(void *opt, const TF_Buffer *in, const TF_GrapplerItem *item, TF_Buffer *out, TF_Status *st)
{
    (void)opt;
    graph g = {0};
    wbuf w = {0};
    TF_SetStatus(st, TF_OK, "");
    if (read_graph(&g, in->data, in->length) != 0) {
        TF_SetStatus(st, TF_INVALID_ARGUMENT, "gradus graph pass: the GraphDef could not be read");
        goto done;
    }
    for (int i = 0; i < g.n; i++) /* readers of each node, data and control */
        for (int k = 0; k < g.nodes[i].n_in; k++) {
            int port, j = find_input(&g, g.ins[g.nodes[i].in0 + k], &port);
            if (j >= 0) g.nodes[j].users += port == 0 ? 1 : 2; /* another port or a control edge: keep it */
        }
    if (mark_preserved(&g, item, st) != 0) goto done;
    find_chains(&g);
    for (int i = 0; i < g.n; i++) {
        const node *nd = &g.nodes[i];
        if (nd->gone) continue;
        if (nd->fused_into >= 0) write_fused(&g, nd, &w);
        else w_bytes(&w, nd->whole.p, nd->whole.n);
    }
    for (int k = 0; k < g.n_other; k++) w_bytes(&w, g.other[k].p, g.other[k].n);
    if (w.oom) {
        TF_SetStatus(st, TF_RESOURCE_EXHAUSTED, "gradus graph pass: out of memory");
        goto done;
    }
    out->data = w.d;
    out->length = w.n;
    out->data_deallocator = free_buffer;
    w.d = NULL;
done:
    free(w.d);
    free(g.nodes), free(g.ins), free(g.attrs), free(g.other);
}

static void *opt_create(void) { return NULL; }
static void opt_destroy(void *opt) { (void)opt; }

__attribute__((visibility("default"))) void TF_InitGraph(TP_OptimizerRegistrationParams *params, TF_Status *st)
{
    params->major_version = GO_MAJOR;
    params->minor_version = GO_MINOR;
    params->patch_version = GO_PATCH;
    params->device_type = "GRADUS";
    params->optimizer_configs->struct_size = TP_OPTIMIZER_CONFIGS_STRUCT_SIZE;
    params->optimizer->struct_size = TP_OPTIMIZER_STRUCT_SIZE;
    params->optimizer->create_func = opt_create;
    params->optimizer->optimize_func = optimize;
    params->optimizer->destroy_func = opt_destroy;
    TF_SetStatus(st, TF_OK, "");
}
