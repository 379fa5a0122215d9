/* fuzz_metrics.c — the metrics-log reader (src/prof/metrics.c) and the plot drawn from
 * what it reads, on arbitrary bytes: no crash, no leak, no undefined behaviour; a refusal
 * names the file; a plot is a document that starts as SVG and ends closed.
 *
 * Built and run by CMake with -DGRADUS_FUZZ=ON (clang); seeds in tests/fuzz/corpus/metrics.
 */
#include "alloc.h"
#include "prof/trace.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[600];
    gd_metrics *m = NULL;
    gd_status st = gd_metrics_parse((const char *)data, size, "fuzz.jsonl", &m, err, sizeof err);
    if (st != GD_OK) {
        if (m != NULL || strncmp(err, "fuzz.jsonl", 10) != 0) abort(); /* a refusal names the file */
        return 0;
    }
    char *svg = NULL;
    size_t len = 0;
    if (gd_metrics_plot(m, "fuzz", &svg, &len, err, sizeof err) == GD_OK) {
        if (len < 20 || strncmp(svg, "<?xml", 5) != 0 || strcmp(svg + len - 7, "</svg>\n") != 0) abort();
        gd_free(svg);
    }
    gd_metrics_free(m);
    return 0;
}
