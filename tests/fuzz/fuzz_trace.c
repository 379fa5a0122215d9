/* fuzz_trace.c — the trace reader (src/prof/trace_read.c) and the summary of what it
 * reads, on arbitrary bytes: no crash, no leak, no undefined behaviour; a refusal always
 * comes with a message naming the file.
 *
 * Built and run by CMake with -DGRADUS_FUZZ=ON (clang); seeds in tests/fuzz/corpus/trace.
 */
#include "prof/trace.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void sink(void *user, const char *line)
{
    size_t *n = user;
    *n += strlen(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[600];
    gd_trace *t = NULL;
    gd_status st = gd_trace_parse((const char *)data, size, "fuzz.json", &t, err, sizeof err);
    if (st != GD_OK) {
        if (t != NULL || strncmp(err, "fuzz.json", 9) != 0) abort(); /* a refusal names the file */
        return 0;
    }
    gd_summary *s = NULL;
    if (gd_trace_summarize(t, &s, err, sizeof err) == GD_OK) {
        size_t n = 0;
        gd_summary_lines(s, 3, 0, 2, sink, &n);
        gd_summary_lines(s, 0, 1, 0, sink, &n);
        gd_summary_free(s);
    }
    gd_trace_free(t);
    return 0;
}
