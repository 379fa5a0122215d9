/* model_tokenizer.c — what `generate` and `eval` share about the model they are given:
 * which tokenizer goes with it, and the parsing of their options. */
#include "cli.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int cli_is_one_of(const char *a, const char *const *names)
{
    for (; *names != NULL; names++)
        if (strcmp(a, *names) == 0) return 1;
    return 0;
}

int cli_unknown(const char *cmd, const char *a)
{
    fprintf(stderr, "gradus %s: %s \"%s\" (see gradus %s --help)\n", cmd,
            a[0] == '-' ? "unknown option" : "unexpected argument", a, cmd);
    return 2;
}

/* Whether `model` is a training directory's `latest` file (the name of its newest checkpoint):
 * then parent gets that directory, which is what the user meant. */
static int latest_pointer(const char *model, char *parent, size_t cap)
{
    const char *slash = strrchr(model, '/'), *base = slash != NULL ? slash + 1 : model;
    if (strcmp(base, "latest") != 0) return 0;
    FILE *f = fopen(model, "r");
    char head[8] = "";
    const int named = f != NULL && fgets(head, sizeof head, f) != NULL && strncmp(head, "ckpt-", 5) == 0;
    if (f != NULL) fclose(f);
    if (!named) return 0;
    snprintf(parent, cap, "%.*s", slash != NULL ? (int)(slash - model) : 1, slash != NULL ? model : ".");
    if (parent[0] == '\0') snprintf(parent, cap, "/");
    return 1;
}

int cli_model_tokenizer(gd_ctx *ctx, const char *cmd, const char *model, const char *tokenizer, char *dir, size_t cap,
                        gd_tokenizer **tok)
{
    *tok = NULL;
    struct stat sb;
    char path[4400], parent[4200];
    if (latest_pointer(model, parent, sizeof parent)) model = parent;
    if (stat(model, &sb) == 0 && S_ISREG(sb.st_mode)) { /* a llama2.c checkpoint: no tokenizer.json */
        snprintf(dir, cap, "%s", model);
        path[0] = '\0';
    } else if (gd_lm_checkpoint_resolve(ctx, model, dir, cap) != GD_OK) {
        fprintf(stderr, "gradus %s: %s\n", cmd, gd_ctx_error(ctx));
        return 0;
    } else {
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    }
    if (tokenizer != NULL) snprintf(path, sizeof path, "%s", tokenizer);
    FILE *f = path[0] ? fopen(path, "rb") : NULL;
    if (f == NULL) {
        if (tokenizer != NULL) fprintf(stderr, "gradus %s: --tokenizer %s: cannot open it\n", cmd, tokenizer);
        return tokenizer == NULL;
    }
    fclose(f);
    if (gd_tokenizer_load(ctx, path, tok) != GD_OK) {
        fprintf(stderr, "gradus %s: %s\n", cmd, gd_ctx_error(ctx));
        return 0;
    }
    return 1;
}
