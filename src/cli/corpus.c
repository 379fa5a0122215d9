/* corpus.c — the text of --data paths read into memory, to train a tokenizer on and to
 * measure. Files are visited in sorted order (hidden ones skipped), as the token-file
 * builder visits them, so that the same tree gives the same sample on any file system. */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int skip_hidden(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

static int read_path(const char *cmd, cli_corpus *c, const char *path, int depth)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "gradus %s: %s: %s\n", cmd, path, strerror(errno));
        return 0;
    }
    if (S_ISDIR(sb.st_mode)) {
        if (depth > 32) return 1; /* a loop of links, or a tree no corpus has */
        struct dirent **list = NULL;
        int n = scandir(path, &list, skip_hidden, alphasort), ok = 1;
        if (n < 0) {
            fprintf(stderr, "gradus %s: %s: %s\n", cmd, path, strerror(errno));
            return 0;
        }
        for (int i = 0; i < n; i++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", path, list[i]->d_name);
            if (ok) ok = read_path(cmd, c, p, depth + 1);
            free(list[i]);
        }
        free(list);
        return ok;
    }
    if (!S_ISREG(sb.st_mode) || c->len >= c->cap) return 1;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "gradus %s: %s: %s\n", cmd, path, strerror(errno));
        return 0;
    }
    c->len += fread(c->buf + c->len, 1, c->cap - c->len, f);
    fclose(f);
    c->files++;
    return 1;
}

int cli_corpus_read(const char *cmd, cli_corpus *c, const char *path)
{
    if (c->buf == NULL) {
        if ((c->buf = malloc(c->cap)) == NULL) {
            fprintf(stderr, "gradus %s: out of memory for a %zu-byte sample of the corpus\n", cmd, c->cap);
            return 0;
        }
    }
    return read_path(cmd, c, path, 0);
}
