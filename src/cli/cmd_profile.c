/* cmd_profile.c — `gradus profile TRACE`: where the time of a saved trace went, by op and
 * by node; and the profiling every training or generating command shares: --profile FILE
 * (cli_profile_start) and the summary printed when the run ends (cli_profile_finish). */
#include "cli.h"
#include "prof/trace.h"

#include <stdio.h>
#include <string.h>

static void print_line(void *user, const char *text)
{
    fprintf((FILE *)user, "%s\n", text);
}

/* Prints the summary of the trace at path; 0 (with the reason printed) when it cannot. */
static int print_summary(const char *cmd, const char *path, int top, int program, int max_programs, int skip, FILE *out)
{
    char err[600];
    gd_trace *t = NULL;
    gd_summary *s = NULL;
    gd_status st = gd_trace_load(path, &t, err, sizeof err);
    if (st == GD_OK) st = gd_trace_summarize_from(t, skip, &s, err, sizeof err);
    if (st != GD_OK) {
        fprintf(stderr, "gradus %s: %s\n", cmd, err);
        gd_trace_free(t);
        return 0;
    }
    gd_summary_lines(s, top, program, max_programs, print_line, out);
    gd_summary_free(s);
    gd_trace_free(t);
    return 1;
}

int cli_profile_start(gd_ctx *ctx, const char *cmd, const char *path)
{
    if (path == NULL) return 1;
    if (gd_profile_start(ctx, path) != GD_OK) {
        fprintf(stderr, "gradus %s: %s; going on without a profile\n", cmd, gd_ctx_error(ctx));
        gd_ctx_clear_error(ctx);
        return 0;
    }
    printf("profiling into %s (a Chrome trace: open it in https://ui.perfetto.dev)\n", path);
    return 1;
}

int cli_profile_finish(gd_ctx *ctx, const char *cmd)
{
    if (!gd_profile_active(ctx)) return 1;
    char path[4096];
    snprintf(path, sizeof path, "%s", gd_profile_path(ctx));
    if (gd_profile_stop(ctx) != GD_OK) {
        /* the run itself is done and reported; only its trace is missing */
        fprintf(stderr, "gradus %s: the profile was not saved: %s\n", cmd, gd_ctx_error(ctx));
        gd_ctx_clear_error(ctx);
        return 0;
    }
    printf("\nprofile written to %s; where the time went (gradus profile %s shows it again):\n", path, path);
    print_summary(cmd, path, 12, 0, 2, 0, stdout);
    fflush(stdout);
    return 1;
}

static void help(FILE *f)
{
    fprintf(f, "usage: gradus profile TRACE [--top N] [--program N] [--skip N]\n"
               "\n"
               "Summarizes a trace that gradus wrote (--profile FILE, GRADUS_PROFILE=FILE): for each\n"
               "program, its runs and its nodes' work by op and by node — calls, total and mean time,\n"
               "share of the runs' time, and for ops that declare their cost the bandwidth and\n"
               "arithmetic rate achieved, beside the backend's peak when it reports one.\n"
               "\n"
               "  --top N       rows per table (default 25; 0: all)\n"
               "  --program N   only program N\n"
               "  --skip N      leave out each program's first N runs (warm-up: kernels loaded, algorithms\n"
               "                chosen) and their nodes' work\n");
}

int cmd_profile(int argc, char **argv)
{
    const char *path = NULL;
    int64_t top = 25, program = 0, skip = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help(stdout);
            return 0;
        } else if (strcmp(a, "--top") == 0 || strcmp(a, "--program") == 0 || strcmp(a, "--skip") == 0) {
            if ((v = cli_value(argc, argv, &i)) == NULL) return 2;
            int64_t *dst = strcmp(a, "--top") == 0 ? &top : strcmp(a, "--skip") == 0 ? &skip : &program;
            if (!cli_int(a, v, strcmp(a, "--program") == 0 ? 1 : 0, 1 << 30, dst)) return 2;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "gradus profile: unknown option %s (see gradus profile --help)\n", a);
            return 2;
        } else if (path == NULL) {
            path = a;
        } else {
            fprintf(stderr, "gradus profile: one trace at a time (got \"%s\" and \"%s\")\n", path, a);
            return 2;
        }
    }
    if (path == NULL) {
        fprintf(stderr, "gradus profile: which trace?\n\n");
        help(stderr);
        return 2;
    }
    return print_summary("profile", path, (int)top, (int)program, 0, (int)skip, stdout) ? 0 : 1;
}
