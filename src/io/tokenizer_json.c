/* tokenizer_json.c — Hugging Face tokenizer.json, read and written (gradus_lm.h).
 *
 * What is read: model.type BPE with vocab (token -> id) and merges ("a b" strings or
 * [a, b] pairs, in rank order), added_tokens, the normalizer (none or NFC), and the
 * pre-tokenizer: ByteLevel (with its regex, GPT-2's, or without one), or a Sequence of a
 * Split on one of the patterns pretok.c knows followed by ByteLevel without a regex
 * (Llama 3, Qwen2). Vocabulary strings are in GPT-2's byte-level alphabet: one character
 * for each byte. Anything that changes how text becomes ids and is not one of these is
 * refused, naming the field, rather than encoded differently from `tokenizers`; what only
 * changes offsets or decoding to text (trim_offsets, the decoder) or adds template tokens
 * (the post-processor, which encoding here does not apply) is ignored. */
#include "bpe.h"

#include "alloc.h"
#include "checked.h"
#include "io/json.h"
#include "file_read.h"
#include "unicode.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The bytes a byte-level string stands for (into out, which has room for n bytes);
 * -1 when a character is outside the alphabet. */
static long bytelevel_decode(const char *s, size_t n, uint8_t *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = gd_utf8_next((const uint8_t *)s + i, n - i, &cp);
        int b = cp == 0xFFFFFFFFu ? -1 : gd_bytelevel_byte(cp);
        if (b < 0) return -1;
        out[k++] = (uint8_t)b;
        i += len;
    }
    return (long)k;
}

typedef struct loader {
    gd_ctx *ctx;
    const char *name;
    gd_tokenizer *t;
    uint8_t *buf;
    size_t cap;
    char why[512];
} loader;

static gd_status bad(loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static gd_status bad(loader *L, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gd_ctx_fail(L->ctx, GD_ERR_FORMAT, "%s: %s", L->name, msg);
}

static gd_status nomem(loader *L) { return gd_ctx_fail(L->ctx, GD_ERR_NOMEM, "%s: out of memory", L->name); }

static int room(loader *L, size_t n)
{
    if (n <= L->cap) return 0;
    size_t cap = n < 256 ? 256 : n;
    uint8_t *b = gd_realloc(L->buf, cap);
    if (b == NULL) return -1;
    L->buf = b;
    L->cap = cap;
    return 0;
}

/* A token of a merge: its id in the vocabulary, or -1. */
static int32_t merge_part(loader *L, const char *s, size_t n)
{
    if (room(L, n) != 0) return -2;
    long k = bytelevel_decode(s, n, L->buf);
    return k < 0 ? -1 : gd_bpe_lookup(L->t, L->buf, (size_t)k);
}

static int is_null_or_absent(const gd_json *j) { return j == NULL || j->kind == GD_JSON_NULL; }

static gd_status read_model(loader *L, const gd_json *model)
{
    if (model == NULL || model->kind != GD_JSON_OBJECT) return bad(L, "no \"model\" object");
    const char *type = gd_json_get_str(model, "type");
    if (type != NULL && strcmp(type, "BPE") != 0)
        return bad(L, "model.type is \"%s\"; gradus reads byte-level BPE tokenizers only", type);
    if (!is_null_or_absent(gd_json_get(model, "dropout"))) {
        double d;
        if (!gd_json_get_num(model, "dropout", &d) || d != 0.0)
            return bad(L, "model.dropout is set; encoding with dropout is random and not supported");
    }
    const char *keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const gd_json *v = gd_json_get(model, keys[k]);
        if (!is_null_or_absent(v) && !(v->kind == GD_JSON_STRING && v->len == 0))
            return bad(L, "model.%s is set; byte-level BPE does not use one", keys[k]);
    }
    int b;
    if (gd_json_get_bool(model, "ignore_merges", &b)) L->t->ignore_merges = b;

    const gd_json *vocab = gd_json_get(model, "vocab");
    if (vocab == NULL || vocab->kind != GD_JSON_OBJECT) return bad(L, "model.vocab is missing or not an object");
    for (size_t i = 0; i < vocab->len; i++) {
        const gd_json *v = vocab->items[i];
        if (v->kind != GD_JSON_NUMBER || !v->is_int || v->i < 0 || v->i >= GD_BPE_MAX_ID)
            return bad(L, "model.vocab[\"%.60s\"]: the id is not an integer from 0 to %d", vocab->keys[i],
                       GD_BPE_MAX_ID - 1);
        size_t n = vocab->key_lens[i];
        if (room(L, n) != 0) return nomem(L);
        long k = bytelevel_decode(vocab->keys[i], n, L->buf);
        gd_status st = k >= 0 ? gd_bpe_set_token(L->t, (int32_t)v->i, L->buf, (size_t)k, GD_TOK_MODEL, L->why,
                                                 sizeof L->why)
                              : gd_bpe_set_token(L->t, (int32_t)v->i, (const uint8_t *)vocab->keys[i], n, GD_TOK_RAW,
                                                 L->why, sizeof L->why);
        if (st == GD_ERR_NOMEM) return nomem(L);
        if (st != GD_OK) return bad(L, "model.vocab[\"%.60s\"]: %s", vocab->keys[i], L->why);
    }

    const gd_json *merges = gd_json_get(model, "merges");
    if (merges == NULL || merges->kind != GD_JSON_ARRAY) return bad(L, "model.merges is missing or not a list");
    for (size_t i = 0; i < merges->len; i++) {
        const gd_json *m = merges->items[i];
        const char *pa, *pb;
        size_t la, lb;
        if (m->kind == GD_JSON_STRING) {
            const char *sp = memchr(m->str, ' ', m->len);
            if (sp == NULL || memchr(sp + 1, ' ', m->len - (size_t)(sp + 1 - m->str)) != NULL)
                return bad(L, "model.merges[%zu] \"%.60s\" is not two tokens separated by one space", i, m->str);
            pa = m->str;
            la = (size_t)(sp - m->str);
            pb = sp + 1;
            lb = m->len - la - 1;
        } else if (m->kind == GD_JSON_ARRAY && m->len == 2 && m->items[0]->kind == GD_JSON_STRING &&
                   m->items[1]->kind == GD_JSON_STRING) {
            pa = m->items[0]->str;
            la = m->items[0]->len;
            pb = m->items[1]->str;
            lb = m->items[1]->len;
        } else {
            return bad(L, "model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", i);
        }
        int32_t a = merge_part(L, pa, la), c = -1;
        int32_t bb = a >= 0 ? merge_part(L, pb, lb) : -1;
        if (a == -2 || bb == -2) return nomem(L);
        if (a < 0 || bb < 0)
            return bad(L, "model.merges[%zu]: \"%.60s\" is not in the vocabulary", i, a < 0 ? pa : pb);
        size_t na = 0, nb = 0, nc;
        const uint8_t *ba = gd_bpe_bytes(L->t, a, &na), *bp = gd_bpe_bytes(L->t, bb, &nb);
        if (gd_add_size(na, nb, &nc) != 0 || room(L, nc) != 0) return nomem(L);
        memcpy(L->buf, ba, na);
        memcpy(L->buf + na, bp, nb);
        c = gd_bpe_lookup(L->t, L->buf, nc);
        if (c < 0) return bad(L, "model.merges[%zu]: the merged token \"%.40s%.40s\" is not in the vocabulary", i, pa, pb);
        gd_status st = gd_bpe_add_merge(L->t, a, bb, c, L->why, sizeof L->why);
        if (st == GD_ERR_NOMEM) return nomem(L);
        if (st != GD_OK) return bad(L, "model.merges[%zu]: %s", i, L->why);
    }
    return GD_OK;
}

static gd_status read_added(loader *L, const gd_json *added)
{
    if (is_null_or_absent(added)) return GD_OK;
    if (added->kind != GD_JSON_ARRAY) return bad(L, "added_tokens is not a list");
    for (size_t i = 0; i < added->len; i++) {
        const gd_json *a = added->items[i];
        int64_t id;
        const gd_json *content = gd_json_get(a, "content");
        if (!gd_json_get_int(a, "id", &id) || id < 0 || id >= GD_BPE_MAX_ID)
            return bad(L, "added_tokens[%zu]: \"id\" is missing or out of range", i);
        if (content == NULL || content->kind != GD_JSON_STRING)
            return bad(L, "added_tokens[%zu]: \"content\" is missing or not a string", i);
        int single = 0, lstrip = 0, rstrip = 0, normalized = 0, special = 0;
        gd_json_get_bool(a, "single_word", &single);
        gd_json_get_bool(a, "lstrip", &lstrip);
        gd_json_get_bool(a, "rstrip", &rstrip);
        gd_json_get_bool(a, "normalized", &normalized);
        gd_json_get_bool(a, "special", &special);
        if (single)
            return bad(L, "added_tokens[%zu] (\"%.60s\"): single_word tokens are not supported", i, content->str);
        int flags = GD_TOK_ADDED | (special ? GD_TOK_SPECIAL : 0);
        gd_status st = gd_bpe_set_token(L->t, (int32_t)id, (const uint8_t *)content->str, content->len, flags, L->why,
                                        sizeof L->why);
        if (st == GD_OK) st = gd_bpe_add_added(L->t, (int32_t)id, lstrip, rstrip, normalized, special);
        if (st == GD_ERR_NOMEM) return nomem(L);
        if (st != GD_OK) return bad(L, "added_tokens[%zu] (\"%.60s\"): %s", i, content->str, L->why);
    }
    return GD_OK;
}

static gd_status read_normalizer(loader *L, const gd_json *norm)
{
    if (is_null_or_absent(norm)) return GD_OK;
    const char *type = gd_json_get_str(norm, "type");
    if (type != NULL && strcmp(type, "NFC") == 0) {
        L->t->nfc = 1;
        return GD_OK;
    }
    if (type != NULL && strcmp(type, "Sequence") == 0) {
        const gd_json *list = gd_json_get(norm, "normalizers");
        if (list != NULL && list->kind == GD_JSON_ARRAY) {
            for (size_t i = 0; i < list->len; i++) {
                gd_status st = read_normalizer(L, list->items[i]);
                if (st != GD_OK) return st;
            }
            return GD_OK;
        }
    }
    return bad(L, "normalizer \"%s\" is not supported (byte-level BPE tokenizers use none or NFC)",
               type != NULL ? type : "(no type)");
}

/* ByteLevel: its regex (use_regex, on unless false) and add_prefix_space. */
static gd_status read_bytelevel(loader *L, const gd_json *p, int regex_allowed)
{
    int use_regex = 1, prefix = 0;
    gd_json_get_bool(p, "use_regex", &use_regex);
    gd_json_get_bool(p, "add_prefix_space", &prefix);
    if (use_regex && !regex_allowed)
        return bad(L, "pre_tokenizer: a ByteLevel with its own regex after a Split is not supported");
    if (prefix && !regex_allowed)
        return bad(L, "pre_tokenizer: add_prefix_space on a ByteLevel after a Split is not supported");
    if (use_regex) L->t->pretok = GD_PRETOK_GPT2;
    L->t->add_prefix_space = prefix;
    return GD_OK;
}

static gd_status read_split(loader *L, const gd_json *p)
{
    const gd_json *pat = gd_json_get(p, "pattern");
    const char *re = gd_json_get_str(pat, "Regex");
    if (re == NULL) return bad(L, "pre_tokenizer: a Split without a \"Regex\" pattern is not supported");
    const gd_json *rej = gd_json_get(pat, "Regex");
    const char *behavior = gd_json_get_str(p, "behavior");
    int invert = 0;
    gd_json_get_bool(p, "invert", &invert);
    if (behavior == NULL || strcmp(behavior, "Isolated") != 0 || invert)
        return bad(L, "pre_tokenizer: a Split with behavior \"%s\"%s is not supported (Isolated only)",
                   behavior != NULL ? behavior : "(none)", invert ? " inverted" : "");
    int k = gd_pretok_from_pattern(rej->str, rej->len);
    if (k < 0)
        return bad(L,
                   "pre_tokenizer: the Split pattern \"%.200s\" is not one gradus implements (those of GPT-2, "
                   "Llama 3 and Qwen2)",
                   re);
    L->t->pretok = (gd_pretok_kind)k;
    return GD_OK;
}

static gd_status read_pretok(loader *L, const gd_json *p)
{
    const char *type = gd_json_get_str(p, "type");
    if (type == NULL)
        return bad(L, "no pre_tokenizer: byte-level BPE needs a ByteLevel pre-tokenizer");
    if (strcmp(type, "ByteLevel") == 0) return read_bytelevel(L, p, 1);
    if (strcmp(type, "Sequence") == 0) {
        const gd_json *list = gd_json_get(p, "pretokenizers");
        if (list == NULL || list->kind != GD_JSON_ARRAY) return bad(L, "pre_tokenizer: a Sequence without a list");
        if (list->len == 1) return read_pretok(L, list->items[0]);
        const char *t0 = list->len == 2 ? gd_json_get_str(list->items[0], "type") : NULL;
        const char *t1 = list->len == 2 ? gd_json_get_str(list->items[1], "type") : NULL;
        if (t0 != NULL && t1 != NULL && strcmp(t0, "Split") == 0 && strcmp(t1, "ByteLevel") == 0) {
            gd_status st = read_split(L, list->items[0]);
            return st != GD_OK ? st : read_bytelevel(L, list->items[1], 0);
        }
        return bad(L, "pre_tokenizer: a Sequence other than [Split, ByteLevel] is not supported");
    }
    return bad(L, "pre_tokenizer \"%s\" is not supported (byte-level BPE uses ByteLevel)", type);
}

gd_status gd_tokenizer_from_json(gd_ctx *ctx, const char *name, const char *text, size_t n, gd_tokenizer **out)
{
    *out = NULL;
    char err[256];
    gd_json_doc *doc = gd_json_parse(text, n, 0, err, sizeof err);
    if (doc == NULL && strstr(err, "out of memory") != NULL)
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory reading its JSON", name);
    if (doc == NULL) return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: not valid JSON: %s", name, err);
    loader L = {.ctx = ctx, .name = name};
    const gd_json *root = gd_json_root(doc);
    gd_status st;
    if (root->kind != GD_JSON_OBJECT) {
        st = bad(&L, "not a tokenizer (the top level is not an object)");
        goto done;
    }
    L.t = gd_bpe_new();
    if (L.t == NULL) {
        st = nomem(&L);
        goto done;
    }
    if ((st = read_model(&L, gd_json_get(root, "model"))) != GD_OK) goto done;
    if ((st = read_added(&L, gd_json_get(root, "added_tokens"))) != GD_OK) goto done;
    if ((st = read_normalizer(&L, gd_json_get(root, "normalizer"))) != GD_OK) goto done;
    if ((st = read_pretok(&L, gd_json_get(root, "pre_tokenizer"))) != GD_OK) goto done;
    if (gd_bpe_finish(L.t, L.why, sizeof L.why) != GD_OK) {
        st = bad(&L, "%s", L.why);
        goto done;
    }
    *out = L.t;
    L.t = NULL;
done:
    gd_tokenizer_free(L.t);
    gd_free(L.buf);
    gd_json_free(doc);
    return st;
}

gd_status gd_tokenizer_load(gd_ctx *ctx, const char *path, gd_tokenizer **out)
{
    if (out != NULL) *out = NULL;
    if (path == NULL || out == NULL)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "tokenizer load: %s is NULL", path == NULL ? "the path" : "the output");
    char *buf;
    size_t len;
    gd_status rs = gd_read_whole_file(ctx, path, 0, "a tokenizer.json", &buf, &len);
    if (rs != GD_OK) return rs;
    /* JSON: a name ending in .json, or a document starting with '{' or '[' (after blanks);
     * anything else is taken for llama2.c's tokenizer.bin, which starts with an int32 */
    size_t at = 0, pl = strlen(path);
    while (at < len && (buf[at] == ' ' || buf[at] == '\t' || buf[at] == '\n' || buf[at] == '\r')) at++;
    int json = (pl >= 5 && strcmp(path + pl - 5, ".json") == 0) || at == len || buf[at] == '{' || buf[at] == '[';
    gd_status st = json ? gd_tokenizer_from_json(ctx, path, buf, len, out)
                        : gd_tokenizer_from_l2c(ctx, path, (const uint8_t *)buf, len, out);
    gd_free(buf);
    return st;
}

/* ---- writing ------------------------------------------------------------------------------- */

static void key_bool(gd_json_out *o, const char *k, int v)
{
    gd_json_key(o, k);
    gd_json_bool(o, v);
}

/* The byte-level spelling of token id (into *buf). */
static int spell(const gd_tokenizer *t, int32_t id, char **buf, size_t *cap, size_t *n)
{
    size_t len = 0;
    const uint8_t *b = gd_bpe_bytes(t, id, &len);
    if (t->flags[id] & GD_TOK_RAW) {
        if (memchr(b, 0, len) != NULL) return -1;
        *n = len;
        if (len + 1 > *cap) {
            char *q = gd_realloc(*buf, len + 1);
            if (q == NULL) return -2;
            *buf = q;
            *cap = len + 1;
        }
        memcpy(*buf, b, len);
        (*buf)[len] = 0;
        return 0;
    }
    size_t need;
    if (gd_mul_size(len, 2, &need) != 0 || gd_add_size(need, 1, &need) != 0) return -2;
    if (need > *cap) {
        char *q = gd_realloc(*buf, need);
        if (q == NULL) return -2;
        *buf = q;
        *cap = need;
    }
    size_t k = 0;
    for (size_t i = 0; i < len; i++) k += gd_utf8_put(gd_bytelevel_char(b[i]), (uint8_t *)*buf + k);
    (*buf)[k] = 0;
    *n = k;
    return 0;
}

static void write_bytelevel(gd_json_out *o, int prefix, int regex)
{
    gd_json_begin_object(o);
    gd_json_key(o, "type");
    gd_json_cstring(o, "ByteLevel");
    key_bool(o, "add_prefix_space", prefix);
    key_bool(o, "trim_offsets", 1);
    key_bool(o, "use_regex", regex);
    gd_json_end_object(o);
}

static int by_id(const void *pa, const void *pb)
{
    const gd_added_token *a = pa, *b = pb;
    return (a->id > b->id) - (a->id < b->id);
}

static gd_status to_json(gd_ctx *ctx, const gd_tokenizer *t, const char *path, gd_json_out *o)
{
    char *buf = NULL, *buf2 = NULL;
    size_t cap = 0, cap2 = 0, n, n2;
    gd_added_token *added = NULL;
    if (t->n_added > 0) {
        added = gd_malloc((size_t)t->n_added * sizeof *added);
        if (added == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", path);
        memcpy(added, t->added, (size_t)t->n_added * sizeof *added);
        qsort(added, (size_t)t->n_added, sizeof *added, by_id);
    }
    gd_json_begin_object(o);
    gd_json_key(o, "version");
    gd_json_cstring(o, "1.0");
    gd_json_key(o, "truncation");
    gd_json_null(o);
    gd_json_key(o, "padding");
    gd_json_null(o);
    gd_json_key(o, "added_tokens");
    gd_json_begin_array(o);
    for (int i = 0; i < t->n_added; i++) {
        const gd_added_token *a = &added[i];
        gd_json_begin_object(o);
        gd_json_key(o, "id");
        gd_json_int(o, a->id);
        gd_json_key(o, "content");
        gd_json_string(o, (const char *)a->bytes, a->len);
        key_bool(o, "single_word", 0);
        key_bool(o, "lstrip", a->lstrip);
        key_bool(o, "rstrip", a->rstrip);
        key_bool(o, "normalized", a->normalized);
        key_bool(o, "special", a->special);
        gd_json_end_object(o);
    }
    gd_json_end_array(o);
    gd_free(added);
    gd_json_key(o, "normalizer");
    if (t->nfc) {
        gd_json_begin_object(o);
        gd_json_key(o, "type");
        gd_json_cstring(o, "NFC");
        gd_json_end_object(o);
    } else {
        gd_json_null(o);
    }
    gd_json_key(o, "pre_tokenizer");
    if (t->pretok == GD_PRETOK_GPT2 || t->pretok == GD_PRETOK_NONE) {
        write_bytelevel(o, t->add_prefix_space, t->pretok == GD_PRETOK_GPT2);
    } else {
        gd_json_begin_object(o);
        gd_json_key(o, "type");
        gd_json_cstring(o, "Sequence");
        gd_json_key(o, "pretokenizers");
        gd_json_begin_array(o);
        gd_json_begin_object(o);
        gd_json_key(o, "type");
        gd_json_cstring(o, "Split");
        gd_json_key(o, "pattern");
        gd_json_begin_object(o);
        gd_json_key(o, "Regex");
        gd_json_cstring(o, gd_pretok_pattern(t->pretok));
        gd_json_end_object(o);
        gd_json_key(o, "behavior");
        gd_json_cstring(o, "Isolated");
        key_bool(o, "invert", 0);
        gd_json_end_object(o);
        write_bytelevel(o, 0, 0);
        gd_json_end_array(o);
        gd_json_end_object(o);
    }
    gd_json_key(o, "post_processor");
    gd_json_null(o);
    gd_json_key(o, "decoder");
    write_bytelevel(o, 1, 1);
    gd_json_key(o, "model");
    gd_json_begin_object(o);
    gd_json_key(o, "type");
    gd_json_cstring(o, "BPE");
    gd_json_key(o, "dropout");
    gd_json_null(o);
    gd_json_key(o, "unk_token");
    gd_json_null(o);
    gd_json_key(o, "continuing_subword_prefix");
    gd_json_null(o);
    gd_json_key(o, "end_of_word_suffix");
    gd_json_null(o);
    key_bool(o, "fuse_unk", 0);
    key_bool(o, "byte_fallback", 0);
    key_bool(o, "ignore_merges", t->ignore_merges);
    gd_json_key(o, "vocab");
    gd_json_begin_object(o);
    gd_status st = GD_OK;
    for (int32_t id = 0; id < t->n_ids && st == GD_OK; id++) {
        if (!(t->flags[id] & (GD_TOK_MODEL | GD_TOK_RAW))) continue;
        int r = spell(t, id, &buf, &cap, &n);
        if (r == -2) st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", path);
        else if (r == -1) st = gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: token %ld contains a NUL byte", path, (long)id);
        else {
            gd_json_key(o, buf);
            gd_json_int(o, id);
        }
    }
    gd_json_end_object(o);
    /* merges as "a b": byte-level tokens never contain a space (it is spelt U+0120),
     * and every version of `tokenizers` reads this form */
    gd_json_key(o, "merges");
    gd_json_begin_array(o);
    for (int32_t i = 0; i < t->n_merges && st == GD_OK; i++) {
        int r = spell(t, t->merge_list[i][0], &buf, &cap, &n);
        if (r == 0) r = spell(t, t->merge_list[i][1], &buf2, &cap2, &n2);
        if (r == 0 && (cap < n + n2 + 2)) {
            char *q = gd_realloc(buf, n + n2 + 2);
            if (q == NULL) r = -2;
            else {
                buf = q;
                cap = n + n2 + 2;
            }
        }
        if (r != 0) {
            st = gd_ctx_fail(ctx, r == -2 ? GD_ERR_NOMEM : GD_ERR_INVALID, "%s: cannot write merge %ld", path, (long)i);
            break;
        }
        buf[n] = ' ';
        memcpy(buf + n + 1, buf2, n2);
        gd_json_string(o, buf, n + 1 + n2);
    }
    gd_json_end_array(o);
    gd_json_end_object(o);
    gd_json_end_object(o);
    gd_free(buf);
    gd_free(buf2);
    if (st == GD_OK && o->failed) st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory writing JSON", path);
    return st;
}

gd_status gd_tokenizer_save(gd_ctx *ctx, const gd_tokenizer *t, const char *path)
{
    if (t == NULL || path == NULL)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "tokenizer save: %s is NULL", t == NULL ? "the tokenizer" : "the path");
    if (t->sp_score != NULL)
        return gd_ctx_fail(ctx, GD_ERR_UNSUPPORTED, "tokenizer save: %s: a llama2.c tokenizer has no tokenizer.json form",
                           path);
    gd_json_out o = {0};
    gd_status st = to_json(ctx, t, path, &o);
    if (st != GD_OK) {
        gd_json_out_free(&o);
        return st;
    }
    size_t tl = strlen(path) + 32;
    char *tmp = gd_malloc(tl);
    if (tmp == NULL) {
        gd_json_out_free(&o);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (f == NULL) {
        st = gd_ctx_fail(ctx, GD_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    } else {
        int ok = fwrite(o.buf, 1, o.len, f) == o.len && fputc('\n', f) != EOF && fflush(f) == 0 &&
                 fsync(fileno(f)) == 0;
        int e = errno;
        if (fclose(f) != 0) ok = 0;
        if (!ok) st = gd_ctx_fail(ctx, GD_ERR_IO, "%s: write failed: %s", tmp, strerror(e));
        else if (rename(tmp, path) != 0) st = gd_ctx_fail(ctx, GD_ERR_IO, "%s: cannot rename into place: %s", path, strerror(errno));
        if (st != GD_OK) remove(tmp);
    }
    gd_free(tmp);
    gd_json_out_free(&o);
    return st;
}
