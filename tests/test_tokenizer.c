/* test_tokenizer — the byte-level BPE tokenizer: pre-tokenizer pieces worked out by hand
 * from the regexes, a hand-built GPT-2-style tokenizer.json and the ids it must give,
 * training, exact round trips on any bytes (invalid UTF-8 included), save and load, NFC,
 * and files that must be refused with a message naming them. */
#include "gradus.h"
#include "testutil.h"

#include "alloc.h"
#include "gradus_lm.h"
#include "io/pretok.h"
#include "io/unicode_nfc.h"

#include <stdlib.h>
#include <sys/stat.h>

static char dir[512];

static const char *path_of(const char *name)
{
    static char p[4][640];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (f == NULL) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

/* ---- pre-tokenizer pieces ------------------------------------------------------------- */

static void expect_pieces(gd_pretok_kind k, const char *text, const char *want)
{
    char got[1024];
    size_t n = strlen(text), g = 0;
    for (size_t p = 0; p < n;) {
        size_t q = gd_pretok_next(k, (const uint8_t *)text, n, p);
        CHECK(q > p && q <= n, "piece at %zu of '%s' ends at %zu", p, text, q);
        if (q <= p || q > n) return;
        if (p > 0) got[g++] = '|';
        memcpy(got + g, text + p, q - p);
        g += q - p;
        p = q;
    }
    got[g] = 0;
    CHECK(strcmp(got, want) == 0, "kind %d: '%s' split as '%s', want '%s'", (int)k, text, got, want);
}

static void test_pieces(void)
{
    expect_pieces(GD_PRETOK_GPT2, "Hello world", "Hello| world");
    /* a run of spaces before a word gives its last space to the word */
    expect_pieces(GD_PRETOK_GPT2, "it's  fine\n\n", "it|'s| | fine|\n\n");
    expect_pieces(GD_PRETOK_GPT2, "a  123 ?!x", "a| | 123| ?!|x");
    expect_pieces(GD_PRETOK_GPT2, "I'M we'll", "I|'|M| we|'ll");          /* case matters in GPT-2's */
    expect_pieces(GD_PRETOK_GPT2, "\t\tx", "\t|\t|x");                   /* only ' ' joins a word */
    expect_pieces(GD_PRETOK_GPT2, "caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd", "caf\xc3\xa9| \xe4\xbd\xa0\xe5\xa5\xbd");
    expect_pieces(GD_PRETOK_GPT2, "a\xff\xfe" "b \x80", "a|\xff\xfe|b| \x80"); /* invalid bytes: punctuation */
    expect_pieces(GD_PRETOK_GPT2, "x\xe3\x80\x80\xe3\x80\x80y", "x|\xe3\x80\x80|\xe3\x80\x80|y"); /* U+3000 is \s */
    expect_pieces(GD_PRETOK_LLAMA3, "I'M (hello 12345", "I|'M| (|hello| |123|45");
    expect_pieces(GD_PRETOK_LLAMA3, "a\n\n  b", "a|\n\n| | b");
    expect_pieces(GD_PRETOK_LLAMA3, "x.\n\ny", "x|.\n\n|y");
    expect_pieces(GD_PRETOK_LLAMA3, "\tword  \n x", "\tword|  \n| x");
    expect_pieces(GD_PRETOK_LLAMA3, "it'\xc5\xbf", "it|'\xc5\xbf"); /* U+017F folds to s */
    expect_pieces(GD_PRETOK_QWEN2, "v12345", "v|1|2|3|4|5");
    CHECK(gd_pretok_from_pattern(gd_pretok_pattern(GD_PRETOK_QWEN2), strlen(gd_pretok_pattern(GD_PRETOK_QWEN2))) ==
              GD_PRETOK_QWEN2,
          "the Qwen2 pattern is recognised");
    CHECK(gd_pretok_from_pattern("\\s+", 3) == -1, "an unknown pattern is not");
}

/* ---- a hand-built tokenizer.json ----------------------------------------------------------- */

/* GPT-2's byte-level alphabet, as tokenizer.json spells bytes. */
static unsigned bl_char(unsigned b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    unsigned k = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) k++;
    return 0x100 + k;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    o[0] = (char)(0xC0 | cp >> 6);
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

typedef struct json_opts {
    const char *extra_vocab;  /* more "token": id members, after the bytes */
    const char *merges;       /* the merges list's members */
    const char *added;        /* added_tokens members */
    const char *pre;          /* the pre_tokenizer object */
    const char *normalizer;
    int ignore_merges;
} json_opts;

/* Vocabulary: byte b has id b; the extras follow. */
static char *make_json(const json_opts *o)
{
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n, "{\"version\": \"1.0\", \"added_tokens\": [%s], \"normalizer\": %s,\n",
                          o->added ? o->added : "", o->normalizer ? o->normalizer : "null");
    n += (size_t)snprintf(s + n, cap - n, "\"pre_tokenizer\": %s,\n",
                          o->pre ? o->pre
                                 : "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
                                   "\"use_regex\": true}");
    n += (size_t)snprintf(s + n, cap - n,
                          "\"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"ignore_merges\": %s, "
                          "\"vocab\": {",
                          o->ignore_merges ? "true" : "false");
    for (unsigned b = 0; b < 256; b++) {
        char ch[4];
        size_t k = put_utf8(ch, bl_char(b));
        s[n++] = '"';
        if (ch[0] == '"' || ch[0] == '\\') s[n++] = '\\';
        memcpy(s + n, ch, k);
        n += k;
        n += (size_t)snprintf(s + n, cap - n, "\": %u%s", b, b < 255 || o->extra_vocab ? ", " : "");
    }
    n += (size_t)snprintf(s + n, cap - n, "%s}, \"merges\": [%s]}}\n", o->extra_vocab ? o->extra_vocab : "",
                          o->merges ? o->merges : "");
    return s;
}

static const char *vocab_extra = "\"th\": 256, \"\xc4\xa0t\": 257, \"the\": 258, \"\xc4\xa0th\": 259, \"\xc4\xa0the\": 260, "
                                 "\"ll\": 261, \"ell\": 262, \"hell\": 263, \"<|endoftext|>\": 264, \"hello\": 265";
static const char *merges_str = "\"t h\", \"\xc4\xa0 t\", \"th e\", \"\xc4\xa0t h\", \"\xc4\xa0th e\", \"l l\", \"e ll\", "
                                "\"h ell\"";
static const char *merges_pairs = "[\"t\", \"h\"], [\"\xc4\xa0\", \"t\"], [\"th\", \"e\"], [\"\xc4\xa0t\", \"h\"], "
                                  "[\"\xc4\xa0th\", \"e\"], [\"l\", \"l\"], [\"e\", \"ll\"], [\"h\", \"ell\"]";
static const char *added_eot = "{\"id\": 264, \"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false, "
                               "\"rstrip\": false, \"normalized\": false, \"special\": true}";

static gd_tokenizer *load_json(const char *name, const json_opts *o)
{
    char *s = make_json(o);
    write_file(path_of(name), s, strlen(s));
    free(s);
    gd_tokenizer *t = NULL;
    gd_status st = gd_tokenizer_load(ctx, path_of(name), &t);
    CHECK(st == GD_OK, "load %s: %s", name, gd_ctx_error(ctx));
    return t;
}

static void expect_ids(const gd_tokenizer *t, const char *text, size_t n, const int32_t *want, size_t n_want)
{
    int32_t *ids = NULL;
    size_t k = 0;
    gd_status st = gd_tokenizer_encode(ctx, t, (const uint8_t *)text, n, &ids, &k);
    CHECK(st == GD_OK, "encode '%s': %s", text, gd_ctx_error(ctx));
    int same = k == n_want;
    for (size_t i = 0; same && i < k; i++) same = ids[i] == want[i];
    if (!same) {
        char got[512];
        size_t g = 0;
        for (size_t i = 0; i < k && g + 16 < sizeof got; i++) g += (size_t)snprintf(got + g, sizeof got - g, " %d", ids[i]);
        got[g] = 0;
        CHECK(0, "encode '%s' gave [%s ] (%zu ids, want %zu)", text, got, k, n_want);
    }
    gd_free_mem(ids);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)

static void test_hand_json(void)
{
    json_opts o = {.extra_vocab = vocab_extra, .merges = merges_str, .added = added_eot};
    gd_tokenizer *t = load_json("hand.json", &o);
    if (t == NULL) return;
    CHECK(gd_tokenizer_vocab_size(t) == 266, "vocab size %d", gd_tokenizer_vocab_size(t));
    CHECK(gd_tokenizer_eos(t) == 264, "eos %d", gd_tokenizer_eos(t));
    /* "the": t h e -> (t,h) rank 0 -> th e -> (th,e) rank 2 -> the.
     * " the": (t,h) outranks (Ġ,t), so Ġ th e -> Ġ the, and Ġthe (rank 4) is never reached.
     * " hello": (l,l) -> ll, (e,ll) -> ell, (h,ell) -> hell: Ġ hell o. */
    expect_ids(t, "the hello the", 13, IDS(258, 32, 263, 111, 32, 258));
    expect_ids(t, "a<|endoftext|>b", 15, IDS(97, 264, 98));
    expect_ids(t, "<|endoftext|><|endoftext|>", 26, IDS(264, 264));
    expect_ids(t, "it's", 4, IDS(105, 116, 39, 115));
    expect_ids(t, "\xff\xfe x", 4, IDS(255, 254, 32, 120));
    expect_ids(t, "", 0, NULL, 0);
    gd_tokenizer_free(t);

    /* merges as pairs read the same */
    o.merges = merges_pairs;
    t = load_json("hand_pairs.json", &o);
    if (t != NULL) expect_ids(t, "the hello the", 13, IDS(258, 32, 263, 111, 32, 258));
    gd_tokenizer_free(t);

    /* ignore_merges (Llama 3): a piece that is a whole token is that token; others merge */
    o.ignore_merges = 1;
    t = load_json("hand_ignore.json", &o);
    if (t != NULL) expect_ids(t, "hello hello", 11, IDS(265, 32, 263, 111));
    gd_tokenizer_free(t);

    /* the Llama 3 split: "(the" is one piece; digits go in threes */
    o.ignore_merges = 0;
    o.pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
            "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|"
            "\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
            "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}]}";
    t = load_json("hand_llama.json", &o);
    if (t != NULL) {
        /* "(the" is one piece: ( t h e, (t,h) then (th,e); digits go in threes */
        expect_ids(t, "(the 1234", 9, IDS(40, 258, 32, 49, 50, 51, 52));
        CHECK(t != NULL && gd_tokenizer_save(ctx, t, path_of("hand_llama_saved.json")) == GD_OK, "save: %s",
              gd_ctx_error(ctx));
        gd_tokenizer *t2 = NULL;
        CHECK(gd_tokenizer_load(ctx, path_of("hand_llama_saved.json"), &t2) == GD_OK, "reload: %s", gd_ctx_error(ctx));
        if (t2 != NULL) expect_ids(t2, "(the 1234", 9, IDS(40, 258, 32, 49, 50, 51, 52));
        gd_tokenizer_free(t2);
    }
    gd_tokenizer_free(t);

    /* NFC: e + combining acute is é (C3 A9) before byte-level encoding */
    o.pre = NULL;
    o.normalizer = "{\"type\": \"NFC\"}";
    t = load_json("hand_nfc.json", &o);
    if (t != NULL) expect_ids(t, "e\xcc\x81", 3, IDS(0xC3, 0xA9));
    gd_tokenizer_free(t);
}

/* ---- NFC ------------------------------------------------------------------------------ */

static void expect_nfc(const char *in, const char *want)
{
    size_t n = strlen(in), m = 0;
    int quick = gd_nfc_quick((const uint8_t *)in, n);
    uint8_t *out = gd_nfc((const uint8_t *)in, n, &m);
    CHECK(out != NULL && m == strlen(want) && memcmp(out, want, m) == 0, "NFC of '%s' is '%.*s'", in, (int)m,
          out != NULL ? (const char *)out : "");
    if (strcmp(in, want) != 0) CHECK(!quick, "the quick check passes '%s', which NFC changes", in);
    gd_free_mem(out);
}

static void test_nfc(void)
{
    expect_nfc("e\xcc\x81", "\xc3\xa9");                              /* e + U+0301 -> é */
    expect_nfc("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81"); /* jamo -> U+AC01 */
    expect_nfc("q\xcc\x87\xcc\xa3", "q\xcc\xa3\xcc\x87");             /* marks reordered by class */
    expect_nfc("\xe2\x84\xab", "\xc3\x85");                           /* Angstrom sign -> Å */
    expect_nfc("a\xff\xcc\x81", "a\xff\xcc\x81");                     /* an invalid byte blocks */
    expect_nfc("plain text, caf\xc3\xa9", "plain text, caf\xc3\xa9");
    CHECK(gd_nfc_quick((const uint8_t *)"caf\xc3\xa9 \xe4\xbd\xa0", 9), "NFC text passes the quick check");
}

/* ---- training, round trips, save and load -------------------------------------------------- */

static uint64_t rng = 88172645463325252ull;
static uint32_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* Words from a small list, with punctuation, digits and line breaks. */
static uint8_t *make_text(size_t n)
{
    static const char *const words[] = {"the", "of", "and", "lord", "said", "unto", "him", "that", "shall", "house",
                                        "people", "israel", "king", "day", "land", "come", "caf\xc3\xa9", "na\xc3\xafve",
                                        "\xe4\xbd\xa0\xe5\xa5\xbd", "don't", "we'll"};
    uint8_t *s = malloc(n + 32);
    size_t k = 0;
    while (k < n) {
        const char *w = words[next_rand() % (sizeof words / sizeof *words)];
        size_t l = strlen(w);
        memcpy(s + k, w, l);
        k += l;
        uint32_t r = next_rand() % 20;
        s[k++] = r == 0 ? '\n' : r == 1 ? ',' : r == 2 ? '.' : ' ';
        if (r == 3) k += (size_t)snprintf((char *)s + k, 16, "%u ", next_rand() % 1000);
    }
    return s;
}

static void round_trip(const gd_tokenizer *t, const uint8_t *s, size_t n, const char *what)
{
    int32_t *ids = NULL;
    uint8_t *back = NULL;
    size_t k = 0, m = 0;
    CHECK(gd_tokenizer_encode(ctx, t, s, n, &ids, &k) == GD_OK, "%s: encode: %s", what, gd_ctx_error(ctx));
    CHECK(gd_tokenizer_decode(ctx, t, ids, k, &back, &m) == GD_OK, "%s: decode: %s", what, gd_ctx_error(ctx));
    CHECK(back != NULL && m == n && memcmp(back, s, n) == 0 && back[m] == 0, "%s: round trip of %zu bytes gave %zu", what,
          n, m);
    gd_free_mem(ids);
    gd_free_mem(back);
}

static int same_encoding(const gd_tokenizer *a, const gd_tokenizer *b, const uint8_t *s, size_t n)
{
    int32_t *x = NULL, *y = NULL;
    size_t kx = 0, ky = 0;
    gd_tokenizer_encode(ctx, a, s, n, &x, &kx);
    gd_tokenizer_encode(ctx, b, s, n, &y, &ky);
    int same = x != NULL && y != NULL && kx == ky && memcmp(x, y, kx * sizeof *x) == 0;
    gd_free_mem(x);
    gd_free_mem(y);
    return same;
}

static void test_train_and_round_trip(void)
{
    const size_t n = 200000;
    uint8_t *text = make_text(n);
    gd_tokenizer *t = NULL, *t2 = NULL;
    CHECK(gd_tokenizer_train(ctx, text, n, 600, &t) == GD_OK, "train: %s", gd_ctx_error(ctx));
    if (t == NULL) {
        free(text);
        return;
    }
    CHECK(gd_tokenizer_vocab_size(t) == 600, "trained vocab size %d", gd_tokenizer_vocab_size(t));
    CHECK(gd_tokenizer_eos(t) == 599, "eos %d", gd_tokenizer_eos(t));
    size_t len = 0;
    const uint8_t *eot = gd_tokenizer_token(t, 599, &len);
    CHECK(eot != NULL && len == 13 && memcmp(eot, "<|endoftext|>", 13) == 0, "the last token is <|endoftext|>");
    CHECK(gd_tokenizer_token(t, 600, &len) == NULL && gd_tokenizer_token(t, -1, &len) == NULL, "ids outside are NULL");

    int32_t *ids = NULL;
    size_t k = 0;
    CHECK(gd_tokenizer_encode(ctx, t, text, n, &ids, &k) == GD_OK, "encode: %s", gd_ctx_error(ctx));
    /* the text's 21 words are each one token by now: about a token per word and a space */
    CHECK(k > 0 && k < n / 3, "%zu bytes encode to %zu ids: training merged too little", n, k);
    int word = 0;
    for (size_t i = 0; i < k; i++) {
        const uint8_t *b = gd_tokenizer_token(t, ids[i], &len);
        if (b != NULL && len == 6 && memcmp(b, " israel", 6) == 0) word = 1;
        if (b != NULL && len == 7 && memcmp(b, " israel", 7) == 0) word = 1;
    }
    CHECK(word, "\" israel\" became one token");
    gd_free_mem(ids);
    round_trip(t, text, n, "training text");

    /* training is deterministic */
    CHECK(gd_tokenizer_train(ctx, text, n, 600, &t2) == GD_OK, "train again: %s", gd_ctx_error(ctx));
    if (t2 != NULL) CHECK(same_encoding(t, t2, text, n), "two trainings on the same text agree");
    gd_tokenizer_free(t2);
    t2 = NULL;

    /* any bytes */
    uint8_t buf[4096];
    for (int r = 0; r < 200; r++) {
        size_t m = next_rand() % sizeof buf;
        for (size_t i = 0; i < m; i++) buf[i] = (uint8_t)next_rand();
        round_trip(t, buf, m, "random bytes");
        /* mostly text with stray bytes: long runs, spaces, the marker */
        for (size_t i = 0; i < m; i++) {
            uint32_t c = next_rand() % 16;
            buf[i] = c < 8 ? text[next_rand() % n] : c < 11 ? ' ' : c < 12 ? '\n' : c < 13 ? 'a' : (uint8_t)next_rand();
        }
        if (m > 20) memcpy(buf + m / 2, "<|endoftext|>", 13);
        round_trip(t, buf, m, "text with stray bytes");
    }
    static const char *const invalid[] = {"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80",
                                          "\x80\x80", "\xc3", "\xe4\xbd", "a\xf0\x9f\x98", "\xff\xfe\xfd", "\xef\xbb\xbf"};
    for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++)
        round_trip(t, (const uint8_t *)invalid[i], strlen(invalid[i]), "invalid UTF-8");
    memset(buf, 'a', sizeof buf); /* one long piece: merged with the heap */
    round_trip(t, buf, sizeof buf, "a run of one letter");
    memset(buf, ' ', sizeof buf);
    round_trip(t, buf, sizeof buf, "a run of spaces");
    expect_ids(t, "a<|endoftext|>b", 15, IDS(97, 599, 98));

    /* save, load, same ids */
    CHECK(gd_tokenizer_save(ctx, t, path_of("trained.json")) == GD_OK, "save: %s", gd_ctx_error(ctx));
    CHECK(gd_tokenizer_load(ctx, path_of("trained.json"), &t2) == GD_OK, "load: %s", gd_ctx_error(ctx));
    if (t2 != NULL) {
        CHECK(gd_tokenizer_vocab_size(t2) == 600 && gd_tokenizer_eos(t2) == 599, "reloaded: vocab %d, eos %d",
              gd_tokenizer_vocab_size(t2), gd_tokenizer_eos(t2));
        CHECK(same_encoding(t, t2, text, n), "reloaded tokenizer encodes the training text the same");
        for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)next_rand();
        CHECK(same_encoding(t, t2, buf, sizeof buf), "reloaded tokenizer encodes random bytes the same");
        for (int32_t id = 0; id < 600; id++) {
            size_t la = 0, lb = 0;
            const uint8_t *a = gd_tokenizer_token(t, id, &la), *b = gd_tokenizer_token(t2, id, &lb);
            CHECK(a != NULL && b != NULL && la == lb && memcmp(a, b, la) == 0, "token %d differs after reload", id);
        }
    }
    gd_tokenizer_free(t2);

    /* decoding refuses an id outside the vocabulary, naming its position */
    uint8_t *out = NULL;
    size_t m = 0;
    gd_status st = gd_tokenizer_decode(ctx, t, IDS(65, 66, 600), &out, &m);
    CHECK(st == GD_ERR_INVALID && out == NULL, "decode of id 600 fails");
    check_error("decode", (const char *const[]){"600", "position 2", NULL});
    gd_tokenizer_free(t);

    /* bad training requests */
    CHECK(gd_tokenizer_train(ctx, text, n, 256, &t) == GD_ERR_INVALID && t == NULL, "vocab 256 is refused");
    check_error("vocab 256", (const char *const[]){"256", NULL});
    CHECK(gd_tokenizer_train(ctx, (const uint8_t *)"", 0, 300, &t) == GD_ERR_INVALID, "empty text is refused");
    check_error("empty text", (const char *const[]){"empty", NULL});
    CHECK(gd_tokenizer_train(ctx, (const uint8_t *)"<|endoftext|>", 13, 300, &t) == GD_ERR_INVALID,
          "text of only markers is refused");
    free(text);
}

/* ---- files that must be refused --------------------------------------------------------- */

static void expect_refused(const char *name, const char *content, const char *needle)
{
    write_file(path_of(name), content, strlen(content));
    gd_tokenizer *t = NULL;
    gd_status st = gd_tokenizer_load(ctx, path_of(name), &t);
    CHECK(st != GD_OK && t == NULL, "%s was accepted", name);
    check_error(name, (const char *const[]){name, needle, NULL});
    gd_tokenizer_free(t);
}

static void test_bad_files(void)
{
    gd_tokenizer *t = NULL;
    CHECK(gd_tokenizer_load(ctx, path_of("no-such.json"), &t) == GD_ERR_IO, "a missing file is an I/O error");
    check_error("missing", (const char *const[]){"no-such.json", "cannot open", NULL});
    expect_refused("empty.json", "", "not valid JSON");
    expect_refused("truncated.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0", "not valid JSON");
    expect_refused("array.json", "[1, 2]", "not a tokenizer");
    expect_refused("wordpiece.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "WordPiece");

    json_opts o = {.extra_vocab = vocab_extra, .merges = merges_str, .added = added_eot};
    o.pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"}, "
            "\"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}";
    char *s = make_json(&o);
    expect_refused("pattern.json", s, "not one gradus implements");
    free(s);
    o.pre = "{\"type\": \"Metaspace\"}";
    s = make_json(&o);
    expect_refused("metaspace.json", s, "Metaspace");
    free(s);
    o.pre = NULL;
    o.normalizer = "{\"type\": \"Lowercase\"}";
    s = make_json(&o);
    expect_refused("lowercase.json", s, "Lowercase");
    free(s);
    o.normalizer = NULL;
    o.merges = "\"t h\", \"q zz\"";
    s = make_json(&o);
    expect_refused("merge.json", s, "merges[1]");
    free(s);
    o.merges = "\"t h\", \"e l\"";
    s = make_json(&o);
    expect_refused("merged.json", s, "merges[1]");
    free(s);
    o.merges = merges_str;
    o.extra_vocab = "\"th\": 256, \"the\": 256";
    o.added = NULL;
    s = make_json(&o);
    expect_refused("twice.json", s, "id 256");
    free(s);
    /* a vocabulary without byte 0x41 ("A"): replace its key */
    o.extra_vocab = vocab_extra;
    o.added = added_eot;
    s = make_json(&o);
    char *a = strstr(s, "\"A\": 65");
    if (a != NULL) memcpy(a, "\"\xc5\x82\"", 4); /* U+0142: the spelling of 0xAD, now given twice */
    expect_refused("nobyte.json", s, "byte");
    free(s);
}

/* ---- out of memory ------------------------------------------------------------------- */

/* Fails each allocation of the call in turn: every failure must come back as NOMEM with
 * nothing leaked (the sanitizer build checks leaks), until the call needs no more. */
#define WALK_ALLOCS(what, call, cleanup)                                                                       \
    do {                                                                                                       \
        for (int64_t kk_ = 1;; kk_++) {                                                                        \
            gd_alloc_fail_at(kk_);                                                                             \
            gd_status st_ = (call);                                                                            \
            int64_t made_ = gd_alloc_count();                                                                  \
            gd_alloc_fail_at(0);                                                                               \
            cleanup;                                                                                           \
            if (st_ == GD_OK && made_ < kk_) {                                                                 \
                CHECK(kk_ > 1, "%s: made no allocation to fail", what);                                        \
                break;                                                                                         \
            }                                                                                                  \
            CHECK(st_ == GD_ERR_NOMEM || st_ == GD_OK, "%s: allocation %lld failed as %s: %s", what,           \
                  (long long)kk_, gd_status_name(st_), gd_ctx_error(ctx));                                     \
            if (st_ != GD_ERR_NOMEM && st_ != GD_OK) break;                                                    \
            if (kk_ > 100000) {                                                                                \
                CHECK(0, "%s: too many allocations", what);                                                    \
                break;                                                                                         \
            }                                                                                                  \
        }                                                                                                      \
    } while (0)

static void test_out_of_memory(void)
{
    json_opts o = {.extra_vocab = vocab_extra, .merges = merges_str, .added = added_eot,
                   .normalizer = "{\"type\": \"NFC\"}"};
    char *s = make_json(&o);
    write_file(path_of("oom.json"), s, strlen(s));
    free(s);
    gd_tokenizer *t = NULL;
    WALK_ALLOCS("load", gd_tokenizer_load(ctx, path_of("oom.json"), &t), (gd_tokenizer_free(t), t = NULL));
    uint8_t *text = make_text(3000);
    WALK_ALLOCS("train", gd_tokenizer_train(ctx, text, 3000, 300, &t), (gd_tokenizer_free(t), t = NULL));
    CHECK(gd_tokenizer_load(ctx, path_of("oom.json"), &t) == GD_OK, "load: %s", gd_ctx_error(ctx));
    int32_t *ids = NULL;
    size_t k = 0;
    static const char nfc_text[] = "the hello e\xcc\x81 <|endoftext|> the";
    WALK_ALLOCS("encode", gd_tokenizer_encode(ctx, t, (const uint8_t *)nfc_text, sizeof nfc_text - 1, &ids, &k),
                (gd_free_mem(ids), ids = NULL));
    gd_tokenizer_encode(ctx, t, text, 3000, &ids, &k);
    uint8_t *back = NULL;
    size_t m;
    WALK_ALLOCS("decode", gd_tokenizer_decode(ctx, t, ids, k, &back, &m), (gd_free_mem(back), back = NULL));
    WALK_ALLOCS("save", gd_tokenizer_save(ctx, t, path_of("oom_saved.json")), (void)0);
    gd_free_mem(ids);
    gd_tokenizer_free(t);
    free(text);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    snprintf(dir, sizeof dir, "%s/test_tokenizer_files", GD_BUILD_DIR);
    mkdir(dir, 0755);
    test_pieces();
    test_hand_json();
    test_nfc();
    test_train_and_round_trip();
    test_bad_files();
    test_out_of_memory();
    return tu_finish("test_tokenizer");
}
