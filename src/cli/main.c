/* main.c — `gradus <command> [options]`: finds the command in the table and runs it. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const cli_command commands[] = {
    {"train", "train a language model (lm) on text, or the MLP or CNN classifier of images", cmd_train},
    {"generate", "continue a prompt with a trained language model", cmd_generate},
    {"eval", "a language model's loss and perplexity on held-out text", cmd_eval},
    {"tokenize", "encode text into a token file, training a tokenizer on it", cmd_tokenize},
    {"devices", "list backends, plugins found (and why any declined) and device memory", cmd_devices},
    {"sweep", "verify every op on every backend against the CPU reference", cmd_sweep},
    {"profile", "summarize a saved trace: time by op and by node, achieved GB/s and FLOP/s", cmd_profile},
    {"plot", "draw training curves from a metrics log into an SVG file", cmd_plot},
};
static const int n_commands = (int)(sizeof commands / sizeof commands[0]);

static void usage(FILE *f)
{
    fprintf(f, "usage: gradus <command> [options]\n\ncommands:\n");
    for (int i = 0; i < n_commands; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n  gradus <command> --help   options of a command\n"
               "  gradus --version          print the version\n");
}

int cli_int(const char *opt, const char *value, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "gradus: bad value \"%s\" for %s (want an integer in [%lld, %lld])\n", value, opt,
                (long long)lo, (long long)hi);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_double(const char *opt, const char *value, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (errno != 0 || end == value || *end != '\0' || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "gradus: bad value \"%s\" for %s (want a number in [%g, %g])\n", value, opt, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_quantize(const char *opt, const char *value, gd_lm_quant *out)
{
    if (strcmp(value, "int8") == 0) *out = GD_LM_INT8;
    else if (strcmp(value, "w8a8") == 0) *out = GD_LM_W8A8;
    else {
        fprintf(stderr, "gradus: bad value \"%s\" for %s (want int8 or w8a8)\n", value, opt);
        return 0;
    }
    return 1;
}

int cli_float_dtype(const char *opt, const char *value, gd_dtype *out)
{
    gd_dtype dt;
    if (!gd_dtype_parse(value, &dt) || (dt != GD_F32 && dt != GD_BF16 && dt != GD_F16)) {
        fprintf(stderr, "gradus: bad value \"%s\" for %s (want f32, bf16 or f16)\n", value, opt);
        return 0;
    }
    *out = dt;
    return 1;
}

const char *cli_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "gradus: option %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

/* The plugin path of the command: GRADUS_PLUGIN_PATH, then GD_CLI_PLUGIN_DIRS (relative
 * to the directory this executable is in: the installed tree's plugin directory, then the
 * build tree's). Found through /proc/self/exe, so a tree installed under any prefix, or
 * moved, finds its own plugins, and nothing points into a build tree from an installed
 * command. Empty when the executable's path is unknown (then the library's own search,
 * and GRADUS_PLUGIN_PATH, still apply). */
static void plugin_path(char *buf, size_t cap)
{
    buf[0] = '\0';
#ifdef GD_CLI_PLUGIN_DIRS
    char exe[2048];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || (size_t)n >= sizeof exe - 1) return;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash == NULL) return;
    *slash = '\0';
    const char *env = getenv("GRADUS_PLUGIN_PATH");
    size_t used = 0;
    if (env != NULL && env[0] != '\0') used = (size_t)snprintf(buf, cap, "%s", env);
    for (const char *d = GD_CLI_PLUGIN_DIRS; *d != '\0' && used < cap;) {
        size_t l = strcspn(d, ":");
        used += (size_t)snprintf(buf + used, cap - used, "%s%s/%.*s", used ? ":" : "", exe, (int)l, d);
        d += l + (d[l] == ':');
    }
    if (used >= cap) buf[0] = '\0'; /* cut short: better none than a wrong directory */
#else
    (void)cap;
#endif
}

gd_ctx *cli_ctx(const char *backend)
{
    gd_ctx *ctx = NULL;
    char path[4096]; /* the library reads at most this much of a plugin path */
    plugin_path(path, sizeof path);
    gd_ctx_options opt = {.size = sizeof opt, .plugin_path = path[0] != '\0' ? path : NULL};
    gd_status st = gd_ctx_create(&ctx, &opt);
    if (st != GD_OK || ctx == NULL) {
        fprintf(stderr, "gradus: cannot create a context: %s\n", gd_status_name(st));
        return NULL;
    }
    if (backend != NULL && gd_ctx_use_backend(ctx, backend) != GD_OK) {
        fprintf(stderr, "gradus: no backend \"%s\"; available:", backend);
        for (int i = 0; i < gd_backend_count(ctx); i++) fprintf(stderr, " %s", gd_backend_name(ctx, i));
        fprintf(stderr, "\n");
        gd_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        /* `gradus help train` is `gradus train --help` */
        if (strcmp(cmd, "help") == 0 && argc > 2) {
            for (int i = 0; i < n_commands; i++)
                if (strcmp(argv[2], commands[i].name) == 0)
                    return commands[i].run(2, (char *[]){argv[2], "--help", NULL});
            fprintf(stderr, "gradus help: no command \"%s\"\n\n", argv[2]);
            usage(stderr);
            return 2;
        }
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
        printf("gradus %s\n", GD_VERSION);
        return 0;
    }
    for (int i = 0; i < n_commands; i++)
        if (strcmp(cmd, commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "gradus: unknown command \"%s\"\n\n", cmd);
    usage(stderr);
    return 2;
}

int cli_mkdirs(const char *cmd, const char *path)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) {
        fprintf(stderr, "gradus %s: %s: path too long\n", cmd, path);
        return 0;
    }
    for (char *c = p + 1;; c++) { /* each parent, then the directory itself */
        int end = *c == '\0';
        if (*c != '/' && !end) continue;
        *c = '\0';
        struct stat sb;
        if (mkdir(p, 0755) != 0 && (errno != EEXIST || stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
            fprintf(stderr, "gradus %s: %s: %s\n", cmd, p, errno == EEXIST ? "not a directory" : strerror(errno));
            return 0;
        }
        if (end) return 1;
        *c = '/';
    }
}
