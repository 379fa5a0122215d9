/* bench_tokenizer — training and encoding speed of the byte-level BPE tokenizer.
 *
 *   bench_tokenizer [-t TOKENIZER.json] [-v VOCAB] [-o SAVE.json] [-r RUNS] CORPUS...
 *
 * A CORPUS is a file, a directory (its .c, .h, .cu and .md files, walked, concatenated,
 * leaving out build* directories), or "bible" (the King James text printed by `bible`
 * from Debian's bible-kjv). Without -t a tokenizer of VOCAB tokens (default 4096) is
 * trained on the first corpus and timed; -o saves the tokenizer (trained or read). Each
 * corpus is then encoded RUNS times (default 7) in one call on one thread, and the median
 * wall time is reported as MB/s (10^6 bytes per second).
 */
#include "gradus_lm.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef struct buf {
    unsigned char *p;
    size_t n, cap;
} buf;

static void append(buf *b, const void *s, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (b->p == NULL) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void append_stream(buf *b, FILE *f)
{
    char chunk[1 << 16];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) append(b, chunk, k);
}

static int is_source(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot != NULL && (!strcmp(dot, ".c") || !strcmp(dot, ".h") || !strcmp(dot, ".md") || !strcmp(dot, ".cu"));
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void add_dir(buf *b, const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) return;
    char *names[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 4096)
        if (e->d_name[0] != '.' && strncmp(e->d_name, "build", 5) != 0) names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_name);
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            add_dir(b, path);
        } else if (S_ISREG(st.st_mode) && is_source(names[i])) {
            FILE *f = fopen(path, "rb");
            if (f != NULL) {
                append_stream(b, f);
                fclose(f);
            }
        }
        free(names[i]);
    }
}

static int load_corpus(const char *spec, buf *b)
{
    memset(b, 0, sizeof *b);
    if (strcmp(spec, "bible") == 0) {
        FILE *p = popen("bible -f gen1:1-rev22:21 </dev/null 2>/dev/null", "r");
        if (p == NULL) return -1;
        append_stream(b, p);
        pclose(p);
        return b->n > 1000000 ? 0 : -1;
    }
    struct stat st;
    if (stat(spec, &st) != 0) return -1;
    if (S_ISDIR(st.st_mode)) {
        add_dir(b, spec);
    } else {
        FILE *f = fopen(spec, "rb");
        if (f == NULL) return -1;
        append_stream(b, f);
        fclose(f);
    }
    return b->n > 0 ? 0 : -1;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *tok_path = NULL, *save = NULL;
    int vocab = 4096, runs = 7, first = 1;
    for (; first < argc && argv[first][0] == '-' && first + 1 < argc; first += 2) {
        if (!strcmp(argv[first], "-t")) tok_path = argv[first + 1];
        else if (!strcmp(argv[first], "-v")) vocab = atoi(argv[first + 1]);
        else if (!strcmp(argv[first], "-o")) save = argv[first + 1];
        else if (!strcmp(argv[first], "-r")) runs = atoi(argv[first + 1]);
        else break;
    }
    if (first >= argc || runs < 1 || runs > 101) {
        fprintf(stderr, "usage: %s [-t TOKENIZER.json] [-v VOCAB] [-o SAVE.json] [-r RUNS] CORPUS...\n", argv[0]);
        return 2;
    }
    gd_ctx *ctx;
    if (gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1}) != GD_OK) return 1;
    printf("method: wall clock (CLOCK_MONOTONIC) of gd_tokenizer_encode over each whole corpus in one call, one thread,\n"
           "        median of %d runs; MB/s is 10^6 input bytes per second; the piece cache starts empty each call\n",
           runs);
    gd_tokenizer *t = NULL;
    if (tok_path != NULL) {
        if (gd_tokenizer_load(ctx, tok_path, &t) != GD_OK) {
            fprintf(stderr, "%s\n", gd_ctx_error(ctx));
            return 1;
        }
        printf("tokenizer: %s (%d tokens)\n", tok_path, gd_tokenizer_vocab_size(t));
    } else {
        buf b;
        if (load_corpus(argv[first], &b) != 0) {
            fprintf(stderr, "%s: cannot read the corpus\n", argv[first]);
            return 1;
        }
        double t0 = now();
        if (gd_tokenizer_train(ctx, b.p, b.n, vocab, &t) != GD_OK) {
            fprintf(stderr, "%s\n", gd_ctx_error(ctx));
            return 1;
        }
        double dt = now() - t0;
        printf("train: %d tokens on %s (%.2f MB) in %.2f s (one run)\n", gd_tokenizer_vocab_size(t), argv[first],
               (double)b.n / 1e6, dt);
        free(b.p);
    }
    if (save != NULL && gd_tokenizer_save(ctx, t, save) != GD_OK) {
        fprintf(stderr, "%s\n", gd_ctx_error(ctx));
        return 1;
    }
    for (int c = first; c < argc; c++) {
        buf b;
        if (load_corpus(argv[c], &b) != 0) {
            printf("%s: not available, skipped\n", argv[c]);
            continue;
        }
        double times[101];
        size_t n_ids = 0;
        for (int r = 0; r < runs; r++) {
            int32_t *ids;
            double t0 = now();
            if (gd_tokenizer_encode(ctx, t, b.p, b.n, &ids, &n_ids) != GD_OK) {
                fprintf(stderr, "%s\n", gd_ctx_error(ctx));
                return 1;
            }
            times[r] = now() - t0;
            gd_free_mem(ids);
        }
        qsort(times, (size_t)runs, sizeof *times, cmp_double);
        double med = times[runs / 2];
        printf("encode %-24s %8.2f MB  %9zu ids  %.2f bytes/id  median %.4f s (min %.4f, max %.4f)  %7.1f MB/s\n",
               argv[c], (double)b.n / 1e6, n_ids, (double)b.n / (double)n_ids, med, times[0], times[runs - 1],
               (double)b.n / 1e6 / med);
        free(b.p);
    }
    gd_tokenizer_free(t);
    gd_ctx_free(ctx);
    return 0;
}
