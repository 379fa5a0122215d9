/* cases.h — sweep cases: parsing the spec strings declared beside each op, and filling
 * their inputs with fixed-seed random values. Used by the sweep and by the tests. */
#ifndef GD_CASES_H
#define GD_CASES_H

#include "core.h"

typedef struct gd_case_input {
    int32_t dtype;
    int ndim;
    int64_t shape[GDP_MAX_DIMS];
    char kind;          /* 'f' uniform [lo, hi), 'n' normal, 'i' integer [lo, hi), 'b' bool */
    double lo, hi;
} gd_case_input;

typedef struct gd_case {
    int n_in;
    gd_case_input in[GDP_MAX_INPUTS];
    int n_attr;
    gd_attr attrs[16];
    char names[16][32]; /* storage for attrs[k].name: never copy a gd_case by value */
    int nograd;         /* '!' prefix: excluded from the gradient check */
} gd_case;

/* Parses spec with `float_dtype` standing for the case dtype. Returns 0, or -1 with a
 * message in msg. */
int gd_case_parse(const char *spec, int32_t float_dtype, gd_case *out, char *msg, size_t cap);
/* Fills host memory (numel * dtype size bytes) with values for input ci. */
void gd_case_fill(const gd_case_input *ci, void *data, uint64_t seed);
/* The element count of input ci; -1 if it overflows, which gd_case_parse never lets through. */
int64_t gd_case_numel(const gd_case_input *ci);
int gd_dtype_from_name(const char *s, size_t len);

#endif
