/* test_cases.c — the sweep-case parser refuses specs that cannot be sized or filled, and
 * gd_case_fill keeps integer values inside the range a spec gives. Each refused spec
 * once parsed and then overflowed (found by tests/fuzz/fuzz_cases.c). */
#include "gradus.h"
#include "testutil.h"

#include "cases.h"

#include <stdlib.h>

static void refused(const char *spec, const char *phrase)
{
    gd_case c;
    char msg[256] = "";
    int r = gd_case_parse(spec, GDP_F32, &c, msg, sizeof msg);
    CHECK(r != 0, "\"%s\" parsed", spec);
    CHECK(r == 0 || strstr(msg, phrase) != NULL, "\"%s\": message \"%s\" lacks \"%s\"", spec, msg, phrase);
}

int main(void)
{
    refused("f[1,-2,3]", "negative dim -2");
    refused("f[4611686018427387904,4]", "too large");
    refused("i64[1099511627776,1099511627776]", "too large");
    refused("i32[2]<1e300", "does not fit i32");
    refused("u8[2]<-1:3", "does not fit u8");
    refused("i8[2]<-129:0", "does not fit i8");
    refused("i64[2]<1e17", "does not fit i64");
    refused("f[2]<nan", "bad range");
    refused("f[2]<3:3", "bad range");
    refused("i32[2]<5:1", "bad range");

    /* A zero dim beside dims whose product overflows: no elements, so it parses, and its
     * row-major strides must be computed without signed overflow (found by fuzz_cases;
     * the sanitizer pass fails here if gdp_set_contiguous multiplies signed). */
    gdp_tensor z = {.ndim = 3, .shape = {0, INT64_MAX, 5}};
    gdp_set_contiguous(&z);
    CHECK(z.stride[2] == 1 && z.stride[1] == 5, "strides of [0, INT64_MAX, 5]: %lld %lld", (long long)z.stride[1],
          (long long)z.stride[2]);

    /* The widest i32 range: every value fits, including where lo + u * (hi - lo) rounds
     * up to hi. */
    gd_case c;
    char msg[256] = "";
    int r = gd_case_parse("i32[4096]<-2147483648:2147483648 u8[300]<256", GDP_F32, &c, msg, sizeof msg);
    CHECK(r == 0, "widest ranges: %s", msg);
    if (r == 0) {
        int32_t *v = malloc(4096 * sizeof *v);
        uint8_t u[300];
        gd_case_fill(&c.in[0], v, 7);
        gd_case_fill(&c.in[1], u, 7);
        int lo = 0, hi = 0;
        for (int i = 0; i < 4096; i++) lo += v[i] < 0, hi += v[i] > 0;
        CHECK(lo > 1000 && hi > 1000, "i32 over the widest range: %d negative, %d positive of 4096", lo, hi);
        int big = 0;
        for (int i = 0; i < 300; i++) big += u[i] >= 128;
        CHECK(big > 50, "u8 below 256: %d of 300 at 128 or above", big);
        CHECK(gd_case_numel(&c.in[0]) == 4096, "numel %lld", (long long)gd_case_numel(&c.in[0]));
        free(v);
    }
    /* Shapes with a zero dim are empty, not refused. */
    r = gd_case_parse("f[0,3] f[]", GDP_F32, &c, msg, sizeof msg);
    CHECK(r == 0 && gd_case_numel(&c.in[0]) == 0 && gd_case_numel(&c.in[1]) == 1, "f[0,3] f[]: %s", msg);
    return tu_finish("test_cases");
}
