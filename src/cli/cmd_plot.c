/* cmd_plot.c — `gradus plot METRICS.jsonl -o FILE.svg`: training curves as an SVG file. */
#include "cli.h"
#include "prof/trace.h"

#include "alloc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void help(FILE *f)
{
    fprintf(f, "usage: gradus plot METRICS.jsonl -o FILE.svg [--title TEXT]\n"
               "\n"
               "Draws the curves of a training metrics log (one JSON object per line, as\n"
               "`gradus train --metrics FILE` and the language-model trainer write): loss and\n"
               "validation loss, learning rate, throughput and any other column against step,\n"
               "one panel each, into a self-contained SVG file any browser opens.\n");
}

/* Writes n bytes to path through "<path>.part", renamed when complete. */
static int write_file(const char *path, const char *data, size_t n)
{
    char part[4200];
    snprintf(part, sizeof part, "%s.part", path);
    FILE *f = fopen(part, "wb");
    if (f == NULL) {
        fprintf(stderr, "gradus plot: cannot write %s: %s\n", path, strerror(errno));
        return 0;
    }
    int bad = fwrite(data, 1, n, f) != n;
    int err = errno;
    if (fclose(f) != 0 && !bad) bad = 1, err = errno;
    if (!bad && rename(part, path) != 0) bad = 1, err = errno;
    if (bad) {
        remove(part);
        fprintf(stderr, "gradus plot: cannot write %s: %s\n", path, strerror(err ? err : EIO));
        return 0;
    }
    return 1;
}

int cmd_plot(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *title = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help(stdout);
            return 0;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if ((out = cli_value(argc, argv, &i)) == NULL) return 2;
        } else if (strcmp(a, "--title") == 0) {
            if ((title = cli_value(argc, argv, &i)) == NULL) return 2;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "gradus plot: unknown option %s (see gradus plot --help)\n", a);
            return 2;
        } else if (in == NULL) {
            in = a;
        } else {
            fprintf(stderr, "gradus plot: one metrics log at a time (got \"%s\" and \"%s\")\n", in, a);
            return 2;
        }
    }
    if (in == NULL || out == NULL) {
        fprintf(stderr, "gradus plot: %s\n\n", in == NULL ? "which metrics log?" : "where to? (-o FILE.svg)");
        help(stderr);
        return 2;
    }
    char err[600];
    gd_metrics *m = NULL;
    char *svg = NULL;
    size_t len = 0;
    gd_status st = gd_metrics_load(in, &m, err, sizeof err);
    if (st == GD_OK) st = gd_metrics_plot(m, title != NULL ? title : in, &svg, &len, err, sizeof err);
    if (st != GD_OK) {
        fprintf(stderr, "gradus plot: %s\n", err);
        gd_metrics_free(m);
        return 1;
    }
    int ok = write_file(out, svg, len);
    if (ok) printf("wrote %s (%d steps)\n", out, m->n_rows);
    gd_free(svg);
    gd_metrics_free(m);
    return ok ? 0 : 1;
}
