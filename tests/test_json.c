/* The JSON reader and writer: the grammar accepted and refused (with the byte where it
 * went wrong), escapes and surrogate pairs, numbers, depth limits, lookups, and writer
 * output that the reader reads back to the same values. */
#include "io/json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int fails;
#define CHECK(c, ...)                                                  \
    do {                                                               \
        if (!(c)) {                                                    \
            printf("FAIL line %d: ", __LINE__);                        \
            printf(__VA_ARGS__);                                       \
            printf("\n");                                              \
            fails++;                                                   \
        }                                                              \
    } while (0)

static gd_json_doc *parse(const char *s, char *err, size_t cap) { return gd_json_parse(s, strlen(s), 0, err, cap); }

static void accepts(void)
{
    char err[128];
    gd_json_doc *d = parse(" {\"a\": 1, \"b\": [true, false, null, -0.5e2, \"x\\ty\"], \"c\": {}, \"d\": []} ", err,
                           sizeof err);
    CHECK(d != NULL, "valid document refused: %s", err);
    const gd_json *r = gd_json_root(d);
    int64_t a = 0;
    CHECK(gd_json_get_int(r, "a", &a) && a == 1, "a = %lld", (long long)a);
    const gd_json *b = gd_json_get(r, "b");
    CHECK(b != NULL && b->kind == GD_JSON_ARRAY && b->len == 5, "b");
    if (b != NULL && b->len == 5) {
        CHECK(b->items[0]->kind == GD_JSON_TRUE && b->items[1]->kind == GD_JSON_FALSE && b->items[2]->kind == GD_JSON_NULL,
              "literals");
        CHECK(b->items[3]->kind == GD_JSON_NUMBER && b->items[3]->num == -50.0 && !b->items[3]->is_int, "number");
        CHECK(b->items[4]->kind == GD_JSON_STRING && strcmp(b->items[4]->str, "x\ty") == 0, "escape");
    }
    CHECK(gd_json_get(r, "c")->kind == GD_JSON_OBJECT && gd_json_get(r, "c")->len == 0, "empty object");
    CHECK(gd_json_get(r, "nope") == NULL && gd_json_get_str(r, "a") == NULL, "missing and mistyped lookups");
    gd_json_free(d);

    /* \u escapes: BMP, a surrogate pair (U+1F600), an embedded NUL */
    d = parse("\"\\u00e9\\ud83d\\ude00\\u0000z\"", err, sizeof err);
    CHECK(d != NULL, "unicode escapes refused: %s", err);
    if (d != NULL) {
        const gd_json *s = gd_json_root(d);
        CHECK(s->len == 8 && memcmp(s->str, "\xC3\xA9\xF0\x9F\x98\x80\0z", 8) == 0, "decoded %zu bytes", s->len);
    }
    gd_json_free(d);

    d = parse("[9007199254740993, 1e400, 12345678901234567890, 0]", err, sizeof err);
    CHECK(d != NULL, "big numbers refused: %s", err);
    if (d != NULL) {
        const gd_json *v = gd_json_root(d);
        CHECK(v->items[0]->is_int && v->items[0]->i == 9007199254740993LL, "an integer beyond 2^53 kept exact");
        CHECK(isinf(v->items[1]->num) && !v->items[2]->is_int && v->items[3]->is_int, "overflowing numbers");
    }
    gd_json_free(d);

    /* duplicate members: the last wins */
    d = parse("{\"k\": 1, \"k\": 2}", err, sizeof err);
    int64_t k = 0;
    CHECK(d != NULL && gd_json_get_int(gd_json_root(d), "k", &k) && k == 2, "duplicate member");
    gd_json_free(d);
}

static void refuses(void)
{
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"", "end of the text"},
        {"{", "member name"},
        {"[1,]", "a value"},
        {"{\"a\" 1}", "':'"},
        {"{\"a\":1,}", "member name"},
        {"01", "end of the text after"},
        {"1.", "after the decimal point"},
        {"1e", "exponent"},
        {"-", "a digit"},
        {"\"abc", "unterminated"},
        {"\"a\nb\"", "control character"},
        {"\"\\x\"", "unknown escape"},
        {"\"\\u12\"", "4 hex digits"},
        {"\"\\ud800\"", "high surrogate"},
        {"\"\\udc00\"", "lone low surrogate"},
        {"\"\xC3\"", "invalid UTF-8"},
        {"\"\xED\xA0\x80\"", "invalid UTF-8"}, /* an encoded surrogate */
        {"\"\xC0\xAF\"", "invalid UTF-8"},     /* overlong */
        {"tru", "a value"},
        {"[1] 2", "end of the text after"},
        {"nan", "a value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[128];
        gd_json_doc *d = parse(bad[i].text, err, sizeof err);
        CHECK(d == NULL, "accepted bad text #%zu", i);
        CHECK(strstr(err, "at byte") != NULL && strstr(err, bad[i].why) != NULL, "#%zu message \"%s\" lacks \"%s\"", i,
              err, bad[i].why);
        gd_json_free(d);
    }
    /* depth: 300 nested arrays exceed the default limit of 256 and are refused, not recursed into */
    char deep[700];
    memset(deep, '[', 300);
    memset(deep + 300, ']', 300);
    deep[600] = '\0';
    char err[128];
    gd_json_doc *d = parse(deep, err, sizeof err);
    CHECK(d == NULL && strstr(err, "nesting") != NULL, "deep nesting: %s", err);
    d = gd_json_parse(deep, 600, 400, err, sizeof err);
    CHECK(d != NULL, "a raised limit takes 300 levels: %s", err);
    gd_json_free(d);
}

static void writes(void)
{
    gd_json_out o = {0};
    gd_json_begin_object(&o);
    gd_json_key(&o, "name");
    gd_json_cstring(&o, "a \"q\"\n\x01");
    gd_json_key(&o, "dims");
    gd_json_begin_array(&o);
    gd_json_int(&o, 3);
    gd_json_int(&o, -7);
    gd_json_begin_object(&o);
    gd_json_end_object(&o);
    gd_json_end_array(&o);
    gd_json_key(&o, "x");
    gd_json_number(&o, 0.1);
    gd_json_key(&o, "inf");
    gd_json_number(&o, INFINITY);
    gd_json_key(&o, "ok");
    gd_json_bool(&o, 1);
    gd_json_end_object(&o);
    CHECK(!o.failed, "writer failed");
    char err[128];
    gd_json_doc *d = gd_json_parse(o.buf, o.len, 0, err, sizeof err);
    CHECK(d != NULL, "written JSON does not parse (%s): %s", err, o.buf);
    if (d != NULL) {
        const gd_json *r = gd_json_root(d);
        const char *name = gd_json_get_str(r, "name");
        CHECK(name != NULL && strcmp(name, "a \"q\"\n\x01") == 0, "string round trip");
        const gd_json *dims = gd_json_get(r, "dims");
        CHECK(dims != NULL && dims->len == 3 && dims->items[1]->i == -7, "array round trip");
        double x = 0;
        CHECK(gd_json_get_num(r, "x", &x) && x == 0.1, "0.1 reads back exactly");
        CHECK(gd_json_get(r, "inf")->kind == GD_JSON_NULL, "infinity written as null");
        int ok = 0;
        CHECK(gd_json_get_bool(r, "ok", &ok) && ok, "bool");
    }
    CHECK(strstr(o.buf, "\"x\":0.1") != NULL, "0.1 written in its shortest form: %s", o.buf);
    gd_json_free(d);
    gd_json_out_free(&o);
}

int main(void)
{
    accepts();
    refuses();
    writes();
    printf("test_json: %s\n", fails ? "FAILED" : "ok");
    return fails != 0;
}
