/* xmlcheck.h — is a document well-formed XML 1.0? For tests of what gradus writes as SVG,
 * so that the check runs without any XML library.
 *
 * Checks: UTF-8 throughout and no control characters but tab, newline and return; an
 * optional XML declaration, comments and processing instructions around exactly one root
 * element; names; attributes quoted, each at most once per element; every tag closed by
 * its own name; character data without a bare '<' or '&' and without "]]>"; references to
 * the five predefined entities or to valid characters; CDATA sections. (No DTDs: what
 * gradus writes has none, and a document with one is refused.)
 *
 * Header-only: xml_check(text, n, err, cap) returns 1 when well-formed, else 0 with
 * "at byte B: what" in err. */
#ifndef GD_TESTS_XMLCHECK_H
#define GD_TESTS_XMLCHECK_H

#include <stdio.h>
#include <string.h>

typedef struct xml_ck {
    const unsigned char *s;
    size_t n, at;
    char *err;
    size_t cap;
    int failed;
} xml_ck;

static int xml_fail(xml_ck *x, const char *what)
{
    if (!x->failed) snprintf(x->err, x->cap, "at byte %zu: %s", x->at, what);
    x->failed = 1;
    return 0;
}

/* The code point at x->at (advancing past it), or -1 for bytes that are not UTF-8. */
static long xml_char(xml_ck *x)
{
    const unsigned char *s = x->s + x->at;
    size_t left = x->n - x->at;
    unsigned c = s[0];
    long cp;
    size_t len;
    if (c < 0x80) cp = c, len = 1;
    else if (c >= 0xC2 && c < 0xE0) cp = c & 0x1F, len = 2;
    else if (c >= 0xE0 && c < 0xF0) cp = c & 0x0F, len = 3;
    else if (c >= 0xF0 && c <= 0xF4) cp = c & 0x07, len = 4;
    else return -1;
    if (len > left) return -1;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    x->at += len;
    return cp;
}

static int xml_is_char(long c)
{
    return c == 0x9 || c == 0xA || c == 0xD || (c >= 0x20 && c <= 0xD7FF) || (c >= 0xE000 && c <= 0xFFFD) ||
           (c >= 0x10000 && c <= 0x10FFFF);
}

static int xml_name_start(long c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || c >= 0xC0;
}
static int xml_name_char(long c) { return xml_name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == 0xB7; }

static int xml_at(const xml_ck *x, const char *lit)
{
    size_t l = strlen(lit);
    return x->n - x->at >= l && memcmp(x->s + x->at, lit, l) == 0;
}

static void xml_ws(xml_ck *x)
{
    while (x->at < x->n && strchr(" \t\r\n", x->s[x->at]) != NULL && x->s[x->at] != '\0') x->at++;
}

/* A name, copied into buf (truncated) for matching tags. */
static int xml_name(xml_ck *x, char *buf, size_t cap)
{
    size_t start = x->at;
    if (x->at >= x->n) return xml_fail(x, "a name was expected, the document ended");
    long c = xml_char(x);
    if (c < 0 || !xml_name_start(c)) {
        x->at = start;
        return xml_fail(x, "a name was expected");
    }
    for (;;) {
        size_t here = x->at;
        if (x->at >= x->n) break;
        c = xml_char(x);
        if (c < 0 || !xml_name_char(c)) {
            x->at = here;
            break;
        }
    }
    size_t l = x->at - start < cap - 1 ? x->at - start : cap - 1;
    memcpy(buf, x->s + start, l);
    buf[l] = '\0';
    return 1;
}

/* A reference after '&': &amp; &lt; &gt; &quot; &apos; &#N; &#xH; */
static int xml_ref(xml_ck *x)
{
    x->at++; /* '&' */
    if (x->at < x->n && x->s[x->at] == '#') {
        x->at++;
        int hex = x->at < x->n && x->s[x->at] == 'x';
        x->at += hex;
        long v = 0;
        int digits = 0;
        while (x->at < x->n && x->s[x->at] != ';') {
            int c = x->s[x->at], d = c >= '0' && c <= '9' ? c - '0' : hex && c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                                   : hex && c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) return xml_fail(x, "a bad character reference");
            if (v < 0x110000) v = v * (hex ? 16 : 10) + d;
            digits++;
            x->at++;
        }
        if (x->at >= x->n || digits == 0 || !xml_is_char(v)) return xml_fail(x, "a bad character reference");
        x->at++;
        return 1;
    }
    static const char *const names[] = {"amp;", "lt;", "gt;", "quot;", "apos;"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (xml_at(x, names[i])) {
            x->at += strlen(names[i]);
            return 1;
        }
    return xml_fail(x, "a reference to an undeclared entity (or a bare '&')");
}

/* Characters up to and past `end` (a comment's, a CDATA section's, a PI's). */
static int xml_text_until(xml_ck *x, const char *end, const char *what)
{
    while (!xml_at(x, end)) {
        if (x->at >= x->n) return xml_fail(x, what);
        long c = xml_char(x);
        if (c < 0 || !xml_is_char(c)) return xml_fail(x, "not a character XML allows (or not UTF-8)");
    }
    x->at += strlen(end);
    return 1;
}

static int xml_misc(xml_ck *x)
{
    for (;;) {
        xml_ws(x);
        if (xml_at(x, "<!--")) {
            x->at += 4;
            while (!xml_at(x, "--")) {
                if (x->at >= x->n) return xml_fail(x, "a comment does not end");
                long c = xml_char(x);
                if (c < 0 || !xml_is_char(c)) return xml_fail(x, "not a character XML allows");
            }
            if (!xml_at(x, "-->")) return xml_fail(x, "'--' inside a comment");
            x->at += 3;
        } else if (xml_at(x, "<?")) {
            x->at += 2;
            char name[16];
            if (!xml_name(x, name, sizeof name)) return 0;
            if (strcmp(name, "xml") == 0 || strcmp(name, "XML") == 0) return xml_fail(x, "an XML declaration not at the start");
            if (!xml_text_until(x, "?>", "a processing instruction does not end")) return 0;
        } else {
            return 1;
        }
    }
}

static int xml_element(xml_ck *x, int depth)
{
    char tag[128], attrs[64][64];
    int n_attrs = 0;
    if (depth > 256) return xml_fail(x, "nested too deep");
    x->at++; /* '<' */
    if (!xml_name(x, tag, sizeof tag)) return 0;
    for (;;) {
        size_t before = x->at;
        xml_ws(x);
        if (x->at >= x->n) return xml_fail(x, "a tag does not end");
        if (xml_at(x, "/>")) {
            x->at += 2;
            return 1;
        }
        if (x->s[x->at] == '>') {
            x->at++;
            break;
        }
        if (x->at == before) return xml_fail(x, "white space was expected before an attribute");
        char an[64];
        if (!xml_name(x, an, sizeof an)) return 0;
        for (int i = 0; i < n_attrs; i++)
            if (strcmp(attrs[i], an) == 0) return xml_fail(x, "an attribute given twice");
        if (n_attrs < 64) snprintf(attrs[n_attrs++], sizeof attrs[0], "%s", an);
        xml_ws(x);
        if (x->at >= x->n || x->s[x->at] != '=') return xml_fail(x, "'=' was expected after an attribute name");
        x->at++;
        xml_ws(x);
        if (x->at >= x->n || (x->s[x->at] != '"' && x->s[x->at] != '\'')) return xml_fail(x, "an attribute value in quotes");
        unsigned char q = x->s[x->at++];
        while (x->at < x->n && x->s[x->at] != q) {
            if (x->s[x->at] == '<') return xml_fail(x, "'<' in an attribute value");
            if (x->s[x->at] == '&') {
                if (!xml_ref(x)) return 0;
                continue;
            }
            long c = xml_char(x);
            if (c < 0 || !xml_is_char(c)) return xml_fail(x, "not a character XML allows (or not UTF-8)");
        }
        if (x->at >= x->n) return xml_fail(x, "an attribute value does not end");
        x->at++;
    }
    /* content */
    for (;;) {
        if (x->at >= x->n) return xml_fail(x, "an element is not closed");
        if (xml_at(x, "</")) {
            x->at += 2;
            char end[128];
            if (!xml_name(x, end, sizeof end)) return 0;
            if (strcmp(end, tag) != 0) return xml_fail(x, "a closing tag does not match the open element");
            xml_ws(x);
            if (x->at >= x->n || x->s[x->at] != '>') return xml_fail(x, "'>' was expected to end a closing tag");
            x->at++;
            return 1;
        }
        if (xml_at(x, "<![CDATA[")) {
            x->at += 9;
            if (!xml_text_until(x, "]]>", "a CDATA section does not end")) return 0;
        } else if (xml_at(x, "<!--") || xml_at(x, "<?")) {
            if (!xml_misc(x)) return 0;
        } else if (xml_at(x, "<!")) {
            return xml_fail(x, "a declaration inside an element");
        } else if (x->s[x->at] == '<') {
            if (!xml_element(x, depth + 1)) return 0;
        } else if (x->s[x->at] == '&') {
            if (!xml_ref(x)) return 0;
        } else if (xml_at(x, "]]>")) {
            return xml_fail(x, "']]>' in character data");
        } else {
            long c = xml_char(x);
            if (c < 0 || !xml_is_char(c)) return xml_fail(x, "not a character XML allows (or not UTF-8)");
        }
    }
}

static int xml_check(const char *text, size_t n, char *err, size_t cap)
{
    xml_ck x = {(const unsigned char *)text, n, 0, err, cap, 0};
    if (cap > 0) err[0] = '\0';
    if (n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) x.at = 3;
    if (xml_at(&x, "<?xml")) {
        x.at += 5;
        if (!xml_text_until(&x, "?>", "the XML declaration does not end")) return 0;
    }
    if (!xml_misc(&x)) return 0;
    if (xml_at(&x, "<!")) return xml_fail(&x, "a DTD or declaration (not expected here)");
    if (x.at >= x.n || x.s[x.at] != '<') return xml_fail(&x, "the root element was expected");
    if (!xml_element(&x, 0)) return 0;
    if (!xml_misc(&x)) return 0;
    if (x.at != x.n) return xml_fail(&x, "something after the root element");
    return 1;
}

#endif
