/* test_tokens — token files: building one from a directory tree (sorted, hidden and
 * empty files left out, documents ended by the end-of-text id), reading it back, batches
 * (targets shifted by one, a seeded order that visits each window once per epoch and
 * resumes from a saved position, a validation split disjoint from training), and files
 * that must be refused: truncated, corrupt, not a token file, an empty corpus. */
#include "gradus.h"
#include "testutil.h"

#include "alloc.h"
#include "gradus_lm.h"

#include <stdlib.h>
#include <sys/stat.h>

static char dir[512];

static const char *path_of(const char *name)
{
    static char p[4][700];
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

static unsigned char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* Words of letters (training documents) or groups of digits (the validation one). */
static char *make_doc(size_t n, int digits)
{
    static const char *const words[] = {"alpha", "beta", "gamma", "delta", "lorem", "ipsum", "dolor", "amet", "sit"};
    char *s = malloc(n + 32);
    size_t k = 0;
    while (k < n) {
        if (digits)
            k += (size_t)snprintf(s + k, 16, "%u ", next_rand() % 100000);
        else
            k += (size_t)snprintf(s + k, 16, "%s%s", words[next_rand() % 9], next_rand() % 10 ? " " : ".\n");
    }
    s[k] = 0;
    return s;
}

static int64_t progress_done = -1, progress_total = -1;
static int progress_calls;
static void on_progress(void *user, int64_t done, int64_t total)
{
    (void)user;
    CHECK(done >= progress_done && done <= total, "progress went from %lld to %lld of %lld", (long long)progress_done,
          (long long)done, (long long)total);
    progress_done = done;
    progress_total = total;
    progress_calls++;
}

/* Does the token consist of digits, spaces and line breaks only (or is it the end id)? */
static int digit_token(const gd_tokenizer *t, int32_t id)
{
    if (id == gd_tokenizer_eos(t)) return 1;
    size_t n = 0;
    const uint8_t *b = gd_tokenizer_token(t, id, &n);
    for (size_t i = 0; b != NULL && i < n; i++)
        if (!((b[i] >= '0' && b[i] <= '9') || b[i] == ' ' || b[i] == '\n')) return 0;
    return b != NULL;
}

static int has_digit(const gd_tokenizer *t, int32_t id)
{
    size_t n = 0;
    const uint8_t *b = gd_tokenizer_token(t, id, &n);
    for (size_t i = 0; b != NULL && i < n; i++)
        if (b[i] >= '0' && b[i] <= '9') return 1;
    return 0;
}

/* The tokens of a file, read by the format (tokens.h): 2-byte tokens after 64 bytes. */
static int32_t *file_tokens(const char *path, int64_t *n)
{
    size_t len = 0;
    unsigned char *b = read_file(path, &len);
    if (b == NULL || len < 64) {
        free(b);
        return NULL;
    }
    uint64_t nt = 0;
    for (int k = 7; k >= 0; k--) nt = nt << 8 | b[24 + k];
    int32_t *t = malloc(nt * sizeof *t);
    for (uint64_t i = 0; i < nt; i++) t[i] = b[64 + 2 * i] | b[64 + 2 * i + 1] << 8;
    free(b);
    *n = (int64_t)nt;
    return t;
}

static void test_build_and_batches(const gd_tokenizer *t)
{
    char sub[700];
    snprintf(sub, sizeof sub, "%s/corpus", dir);
    mkdir(sub, 0755);
    snprintf(sub, sizeof sub, "%s/corpus/sub", dir);
    mkdir(sub, 0755);
    const char *names[] = {"corpus/a.txt", "corpus/b.txt", "corpus/c.txt", "corpus/sub/d.txt"};
    size_t text_bytes = 0;
    for (int i = 0; i < 4; i++) {
        char *d = make_doc(3000 + 1000 * (size_t)i, 0);
        write_file(path_of(names[i]), d, strlen(d));
        text_bytes += strlen(d);
        free(d);
    }
    char *v = make_doc(3000, 1);
    write_file(path_of("corpus/z_val.txt"), v, strlen(v));
    text_bytes += strlen(v);
    free(v);
    write_file(path_of("corpus/e_empty.txt"), "", 0);
    write_file(path_of("corpus/.hidden"), "12345 67890", 11); /* left out: digits would show in training */

    const char *paths[] = {path_of("corpus")};
    gd_token_file_info info;
    gd_status st = gd_tokens_build(ctx, t, paths, 1, path_of("corpus.tok"), on_progress, NULL, &info);
    CHECK(st == GD_OK, "build: %s", gd_ctx_error(ctx));
    if (st != GD_OK) return;
    CHECK(info.documents == 5, "%lld documents, want 5 (4 of words, 1 of digits; empty and hidden left out)",
          (long long)info.documents);
    CHECK(info.bytes == (int64_t)text_bytes, "%lld bytes read, want %zu", (long long)info.bytes, text_bytes);
    CHECK(progress_calls >= 2 && progress_done == progress_total && progress_total == (int64_t)text_bytes,
          "progress ended at %lld of %lld", (long long)progress_done, (long long)progress_total);

    gd_token_data *d = NULL;
    st = gd_token_data_open(ctx, path_of("corpus.tok"), 0.2, &d);
    CHECK(st == GD_OK, "open: %s", gd_ctx_error(ctx));
    if (d == NULL) return;
    int64_t n_train = gd_token_data_tokens(d, GD_SPLIT_TRAIN), n_val = gd_token_data_tokens(d, GD_SPLIT_VAL);
    CHECK(gd_token_data_vocab(d) == gd_tokenizer_vocab_size(t), "vocab %d", gd_token_data_vocab(d));
    CHECK(n_train + n_val == info.tokens && n_train > 0 && n_val > 0, "split %lld + %lld of %lld", (long long)n_train,
          (long long)n_val, (long long)info.tokens);

    /* the file's tokens decode to the documents, each ended by the end id */
    int64_t nt = 0;
    int32_t *all = file_tokens(path_of("corpus.tok"), &nt);
    CHECK(all != NULL && nt == info.tokens, "file holds %lld tokens", (long long)nt);
    if (all != NULL) {
        int eos_count = 0;
        for (int64_t i = 0; i < nt; i++) eos_count += all[i] == gd_tokenizer_eos(t);
        CHECK(eos_count == 5 && all[nt - 1] == gd_tokenizer_eos(t), "%d end ids, last %d", eos_count, all[nt - 1]);
        int64_t a_len = 0;
        while (a_len < nt && all[a_len] != gd_tokenizer_eos(t)) a_len++;
        uint8_t *txt = NULL;
        size_t m = 0;
        gd_tokenizer_decode(ctx, t, all, (size_t)a_len, &txt, &m);
        size_t an = 0;
        unsigned char *a = read_file(path_of("corpus/a.txt"), &an);
        CHECK(txt != NULL && a != NULL && m == an && memcmp(txt, a, an) == 0, "the first document is a.txt");
        free(a);
        gd_free_mem(txt);
    }

    enum { B = 4, T = 16 };
    int32_t x[B * T], y[B * T], x2[B * T], y2[B * T];
    gd_data_pos pos = {.seed = 7}, pos2 = {.seed = 7}, saved;
    for (int step = 0; step < 6; step++) {
        if (step == 2) saved = pos;
        CHECK(gd_token_data_batch(d, GD_SPLIT_TRAIN, B, T, &pos, x, y) == GD_OK, "batch: %s", gd_ctx_error(ctx));
        CHECK(gd_token_data_batch(d, GD_SPLIT_TRAIN, B, T, &pos2, x2, y2) == GD_OK, "batch: %s", gd_ctx_error(ctx));
        CHECK(memcmp(x, x2, sizeof x) == 0 && memcmp(y, y2, sizeof y) == 0, "same seed, different batch %d", step);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < T; i++) {
                CHECK(x[b * T + i] >= 0 && x[b * T + i] < gd_tokenizer_vocab_size(t), "token %d", x[b * T + i]);
                if (i + 1 < T) CHECK(x[b * T + i + 1] == y[b * T + i], "y is not x shifted by one");
                CHECK(!has_digit(t, x[b * T + i]) && !has_digit(t, y[b * T + i]), "a validation token in training");
            }
    }
    /* resume: reopened, from the position saved before step 2, the same batches follow */
    gd_token_data *d2 = NULL;
    CHECK(gd_token_data_open(ctx, path_of("corpus.tok"), 0.2, &d2) == GD_OK, "reopen: %s", gd_ctx_error(ctx));
    gd_data_pos pos3 = {.seed = 7};
    for (int step = 0; step < 2; step++) gd_token_data_batch(d, GD_SPLIT_TRAIN, B, T, &pos3, x2, y2);
    CHECK(pos3.seed == saved.seed && pos3.epoch == saved.epoch && pos3.index == saved.index, "positions advance alike");
    pos3 = saved;
    gd_data_pos pos4 = saved;
    for (int step = 2; step < 6 && d2 != NULL; step++) {
        gd_token_data_batch(d, GD_SPLIT_TRAIN, B, T, &pos4, x, y);
        gd_token_data_batch(d2, GD_SPLIT_TRAIN, B, T, &pos3, x2, y2);
        CHECK(memcmp(x, x2, sizeof x) == 0 && memcmp(y, y2, sizeof y) == 0, "resumed batch %d differs", step);
    }
    gd_token_data_close(d2);
    /* another seed, another order */
    gd_data_pos other = {.seed = 8}, same = {.seed = 7};
    gd_token_data_batch(d, GD_SPLIT_TRAIN, B, T, &other, x, y);
    gd_token_data_batch(d, GD_SPLIT_TRAIN, B, T, &same, x2, y2);
    CHECK(memcmp(x, x2, sizeof x) != 0, "seeds 7 and 8 gave the same first batch");

    /* one epoch visits every window once, then the next epoch starts */
    int64_t windows = (n_train - 1) / T;
    char *seen = calloc((size_t)windows, 1);
    gd_data_pos ep = {.seed = 3};
    int visited_twice = 0, unmatched = 0;
    for (int64_t k = 0; k < windows && all != NULL; k++) {
        gd_token_data_batch(d, GD_SPLIT_TRAIN, 1, T, &ep, x, y);
        int64_t w = 0;
        for (; w < windows; w++)
            if (!seen[w] && memcmp(all + w * T, x, T * sizeof *x) == 0 && all[w * T + T] == y[T - 1]) break;
        if (w == windows) {
            for (w = 0; w < windows && memcmp(all + w * T, x, T * sizeof *x) != 0; w++) {
            }
            if (w < windows) visited_twice++;
            else unmatched++;
        } else {
            seen[w] = 1;
        }
    }
    CHECK(visited_twice == 0 && unmatched == 0, "an epoch of %lld windows: %d seen twice, %d not windows",
          (long long)windows, visited_twice, unmatched);
    CHECK(ep.epoch == 0 && ep.index == windows, "after an epoch: epoch %lld index %lld", (long long)ep.epoch,
          (long long)ep.index);
    gd_token_data_batch(d, GD_SPLIT_TRAIN, 1, T, &ep, x, y);
    CHECK(ep.epoch == 1 && ep.index == 1, "the next epoch starts: epoch %lld index %lld", (long long)ep.epoch,
          (long long)ep.index);
    free(seen);
    free(all);

    /* validation: numbered batches of fixed windows, in order; the position is not moved */
    CHECK(gd_token_data_batch(d, GD_SPLIT_VAL, 2, T, NULL, x, y) == GD_OK, "val batch: %s", gd_ctx_error(ctx));
    gd_data_pos zero = {.seed = 99, .epoch = 5, .index = 0};
    CHECK(gd_token_data_batch(d, GD_SPLIT_VAL, 2, T, &zero, x2, y2) == GD_OK, "val batch: %s", gd_ctx_error(ctx));
    CHECK(memcmp(x, x2, 2 * T * sizeof *x) == 0 && zero.index == 0, "validation batch 0 depends on seed or epoch");
    CHECK(x[T] == y[T - 1], "validation windows follow each other");
    for (int i = 0; i < 2 * T; i++)
        CHECK(digit_token(t, x[i]) && digit_token(t, y[i]), "validation token %d is not from the digits document", x[i]);
    int64_t val_windows = (n_val - 1) / T;
    if (val_windows >= 3) {
        gd_data_pos one = {.index = 1};
        CHECK(gd_token_data_batch(d, GD_SPLIT_VAL, 1, T, &one, x2, y2) == GD_OK && one.index == 1, "val batch 1: %s",
              gd_ctx_error(ctx));
        CHECK(x2[0] == y[T - 1] && memcmp(x2, x + T, T * sizeof *x) == 0, "batch 1 of one window is the second window");
    }
    CHECK(gd_token_data_batch(d, GD_SPLIT_VAL, 1, n_val, NULL, x, y) != GD_OK, "a window longer than the split fails");
    check_error("val too short", (const char *const[]){"corpus.tok", "validation split", NULL});
    CHECK(gd_token_data_batch(d, GD_SPLIT_TRAIN, 1, n_train, &pos, x, y) != GD_OK, "a window longer than the split fails");
    gd_token_data_close(d);

    /* no validation split */
    CHECK(gd_token_data_open(ctx, path_of("corpus.tok"), 0, &d) == GD_OK, "open with 0: %s", gd_ctx_error(ctx));
    CHECK(gd_token_data_tokens(d, GD_SPLIT_VAL) == 0 && gd_token_data_tokens(d, GD_SPLIT_TRAIN) == info.tokens,
          "fraction 0 keeps everything for training");
    gd_token_data_close(d);
    CHECK(gd_token_data_open(ctx, path_of("corpus.tok"), 1.0, &d) != GD_OK && d == NULL, "fraction 1 is refused");

    /* a single document splits by tokens */
    const char *one[] = {path_of("corpus/a.txt")};
    CHECK(gd_tokens_build(ctx, t, one, 1, path_of("one.tok"), NULL, NULL, &info) == GD_OK, "build one: %s",
          gd_ctx_error(ctx));
    CHECK(gd_token_data_open(ctx, path_of("one.tok"), 0.25, &d) == GD_OK, "open one: %s", gd_ctx_error(ctx));
    int64_t val1 = gd_token_data_tokens(d, GD_SPLIT_VAL);
    CHECK(info.documents == 1 && val1 > 0 && llabs(val1 - info.tokens / 4) <= 1, "one document: %lld of %lld for validation",
          (long long)val1, (long long)info.tokens);
    gd_token_data_close(d);
}

/* ---- refused files ------------------------------------------------------------------------ */

static void expect_open_fails(const char *name, const char *needle)
{
    gd_token_data *d = NULL;
    gd_status st = gd_token_data_open(ctx, path_of(name), 0.1, &d);
    CHECK(st != GD_OK && d == NULL, "%s was accepted", name);
    check_error(name, (const char *const[]){name, needle, NULL});
    gd_token_data_close(d);
}

static void test_bad_files(const gd_tokenizer *t)
{
    size_t n = 0;
    unsigned char *good = read_file(path_of("corpus.tok"), &n);
    if (good == NULL) return;
    write_file(path_of("truncated.tok"), good, n - 8);
    expect_open_fails("truncated.tok", "truncated");
    write_file(path_of("short.tok"), good, 40);
    expect_open_fails("short.tok", "not a gradus token file");
    unsigned char *bad = malloc(n);
    memcpy(bad, good, n);
    bad[64 + 10] ^= 0x01; /* a token */
    write_file(path_of("flipped.tok"), bad, n);
    expect_open_fails("flipped.tok", "corrupt");
    memcpy(bad, good, n);
    bad[16] ^= 0x40; /* the vocabulary size */
    write_file(path_of("header.tok"), bad, n);
    expect_open_fails("header.tok", "header");
    memcpy(bad, good, n);
    bad[n - 12] ^= 0x02; /* the document table */
    write_file(path_of("table.tok"), bad, n);
    expect_open_fails("table.tok", "document table");
    write_file(path_of("text.tok"), "this is just some text, long enough to have a header's worth of bytes in it......", 81);
    expect_open_fails("text.tok", "not a gradus token file");
    expect_open_fails("missing.tok", "cannot open");
    free(bad);
    free(good);

    char empty[700];
    snprintf(empty, sizeof empty, "%s/empty_corpus", dir);
    mkdir(empty, 0755);
    write_file(path_of("empty_corpus/blank.txt"), "", 0);
    const char *paths[] = {empty};
    gd_token_file_info info;
    CHECK(gd_tokens_build(ctx, t, paths, 1, path_of("empty.tok"), NULL, NULL, &info) == GD_ERR_INVALID,
          "an empty corpus is refused");
    check_error("empty corpus", (const char *const[]){"empty", NULL});
    struct stat sb;
    CHECK(stat(path_of("empty.tok"), &sb) != 0, "a failed build leaves no file");
    const char *missing[] = {path_of("no-such-dir")};
    CHECK(gd_tokens_build(ctx, t, missing, 1, path_of("x.tok"), NULL, NULL, &info) == GD_ERR_IO, "a missing path fails");
    check_error("missing path", (const char *const[]){"no-such-dir", NULL});
}

/* A vocabulary past 65536 ids is stored 4 bytes a token. */
static void test_wide(void)
{
    size_t cap = 1 << 15, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n,
                          "{\"added_tokens\": [{\"id\": 70000, \"content\": \"<|endoftext|>\", \"special\": true}], "
                          "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"merges\": [], "
                          "\"vocab\": {");
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = b;
        if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
            unsigned k = 0;
            for (unsigned c = 0; c < b; c++)
                if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) k++;
            cp = 0x100 + k;
        }
        n += (size_t)snprintf(s + n, cap - n, "%s\"\\u%04x\": %u", b ? ", " : "", cp, b);
    }
    n += (size_t)snprintf(s + n, cap - n, "}}}");
    write_file(path_of("wide.json"), s, n);
    free(s);
    gd_tokenizer *t = NULL;
    CHECK(gd_tokenizer_load(ctx, path_of("wide.json"), &t) == GD_OK, "wide: %s", gd_ctx_error(ctx));
    if (t == NULL) return;
    CHECK(gd_tokenizer_vocab_size(t) == 70001 && gd_tokenizer_eos(t) == 70000, "wide vocab %d",
          gd_tokenizer_vocab_size(t));
    write_file(path_of("wide.txt"), "wide tokens, 4 bytes each", 25);
    const char *paths[] = {path_of("wide.txt"), path_of("wide.txt")};
    gd_token_file_info info;
    CHECK(gd_tokens_build(ctx, t, paths, 2, path_of("wide.tok"), NULL, NULL, &info) == GD_OK, "wide build: %s",
          gd_ctx_error(ctx));
    gd_token_data *d = NULL;
    CHECK(gd_token_data_open(ctx, path_of("wide.tok"), 0.5, &d) == GD_OK, "wide open: %s", gd_ctx_error(ctx));
    int32_t x[25], y[25];
    CHECK(gd_token_data_batch(d, GD_SPLIT_VAL, 1, 25, NULL, x, y) == GD_OK, "wide val: %s", gd_ctx_error(ctx));
    CHECK(x[0] == 'w' && y[24] == 70000 && x[24] == 'h', "wide tokens read back: %d %d %d", x[0], x[24], y[24]);
    gd_token_data_close(d);
    gd_tokenizer_free(t);
}

/* Each allocation of building and opening fails in turn: NOMEM every time, nothing
 * leaked, no file left behind. */
static void test_out_of_memory(const gd_tokenizer *t)
{
    char corpus[700], out[700];
    snprintf(corpus, sizeof corpus, "%s", path_of("corpus"));
    snprintf(out, sizeof out, "%s", path_of("oom.tok"));
    const char *paths[] = {corpus};
    gd_token_file_info info;
    for (int64_t k = 1; k < 100000; k++) {
        gd_alloc_fail_at(k);
        gd_status st = gd_tokens_build(ctx, t, paths, 1, out, NULL, NULL, &info);
        int64_t made = gd_alloc_count();
        gd_alloc_fail_at(0);
        if (st == GD_OK && made < k) {
            CHECK(k > 5, "build: only %lld allocations", (long long)k);
            break;
        }
        CHECK(st == GD_ERR_NOMEM || st == GD_OK, "build: allocation %lld failed as %s: %s", (long long)k,
              gd_status_name(st), gd_ctx_error(ctx));
        if (st != GD_ERR_NOMEM && st != GD_OK) break;
    }
    for (int64_t k = 1; k < 100000; k++) {
        gd_token_data *d = NULL;
        gd_alloc_fail_at(k);
        gd_status st = gd_token_data_open(ctx, out, 0.2, &d);
        int64_t made = gd_alloc_count();
        gd_alloc_fail_at(0);
        gd_token_data_close(d);
        if (st == GD_OK && made < k) {
            CHECK(k > 1, "open: no allocation");
            break;
        }
        CHECK(st == GD_ERR_NOMEM || st == GD_OK, "open: allocation %lld failed as %s: %s", (long long)k,
              gd_status_name(st), gd_ctx_error(ctx));
        if (st != GD_ERR_NOMEM && st != GD_OK) break;
    }
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    snprintf(dir, sizeof dir, "%s/test_tokens_files", GD_BUILD_DIR);
    mkdir(dir, 0755);
    char *train_text = make_doc(20000, 0);
    char *digits = make_doc(5000, 1);
    size_t n1 = strlen(train_text), n2 = strlen(digits);
    char *both = malloc(n1 + n2 + 1);
    memcpy(both, train_text, n1);
    memcpy(both + n1, digits, n2 + 1);
    gd_tokenizer *t = NULL;
    CHECK(gd_tokenizer_train(ctx, (const uint8_t *)both, n1 + n2, 400, &t) == GD_OK, "train: %s", gd_ctx_error(ctx));
    free(train_text);
    free(digits);
    free(both);
    if (t != NULL) {
        test_build_and_batches(t);
        test_bad_files(t);
        test_out_of_memory(t);
    }
    test_wide();
    gd_tokenizer_free(t);
    return tu_finish("test_tokens");
}
