/* fuzz_cases.c — libFuzzer target: the sweep-case parser (gd_case_parse, cases.h).
 *
 * Input: one byte choosing the dtype the case's float inputs stand for, then the spec
 * string (up to its first NUL). A spec that parses must describe inputs the sweep can
 * size and fill: counts and dims in range, an element count that does not overflow, and
 * for small inputs gd_case_fill is run on a buffer of exactly that size. A spec that does
 * not parse must say why.
 *
 * Built and run by CMake with -DGRADUS_FUZZ=ON (clang); seeds in tests/fuzz/corpus/cases.
 */
#include "cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void bad(const char *spec, const char *what)
{
    fprintf(stderr, "case parser: %s for spec \"%s\"\n", what, spec);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int32_t float_dtypes[] = {GDP_F32, GDP_F16, GDP_BF16, GDP_F64};
    if (size < 1) return 0;
    int32_t fdt = float_dtypes[data[0] % 4];
    char *spec = malloc(size);
    if (spec == NULL) abort();
    memcpy(spec, data + 1, size - 1);
    spec[size - 1] = '\0';
    gd_case *c = malloc(sizeof *c);
    if (c == NULL) abort();
    char msg[256] = "";
    if (gd_case_parse(spec, fdt, c, msg, sizeof msg) != 0) {
        if (msg[0] == '\0') bad(spec, "a refusal without a message");
    } else {
        if (c->n_in < 0 || c->n_in > GDP_MAX_INPUTS || c->n_attr < 0 || c->n_attr > 16) bad(spec, "counts out of range");
        for (int k = 0; k < c->n_in; k++) {
            const gd_case_input *ci = &c->in[k];
            if (ci->ndim < 0 || ci->ndim > GDP_MAX_DIMS) bad(spec, "ndim out of range");
            if (ci->dtype < 0 || ci->dtype >= GDP_DTYPE_COUNT) bad(spec, "dtype out of range");
            int64_t n = gd_case_numel(ci);
            if (n < 0) bad(spec, "negative element count");
            if (n <= 4096) {
                size_t bytes = (size_t)n * gdp_dtype_size(ci->dtype);
                void *buf = malloc(bytes > 0 ? bytes : 1);
                if (buf == NULL) abort();
                gd_case_fill(ci, buf, 42);
                free(buf);
            }
        }
        for (int a = 0; a < c->n_attr; a++) {
            if (c->attrs[a].name != c->names[a] || memchr(c->names[a], 0, sizeof c->names[a]) == NULL)
                bad(spec, "attribute name not in the case's storage");
            if (c->attrs[a].kind == GD_ATTR_INTS && (c->attrs[a].n < 0 || c->attrs[a].n > GD_MAX_DIMS))
                bad(spec, "attribute list length out of range");
        }
    }
    free(c);
    free(spec);
    return 0;
}
