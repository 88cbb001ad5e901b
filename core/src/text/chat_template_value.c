/* Chat template values: Jansson values with Python's semantics (truth,
 * equality, str() and repr(), json.dumps as HF's tojson calls it) and the
 * str helpers that work by code point. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include <utf8proc.h>

#include "chat_template_impl.h"

void loom__ct_sb_add(ct_buf *b, const char *s, size_t len)
{
    if (b->oom)
        return;
    if (len > CT_MAX_STR || b->n > CT_MAX_STR - len) {
        b->oom = 2;
        return;
    }
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = '\0';
}

void loom__ct_sb_str(ct_buf *b, const char *s)
{
    loom__ct_sb_add(b, s, strlen(s));
}

json_t *loom__ct_sb_take(ct_buf *b)
{
    json_t *s = b->oom ? NULL : json_stringn_nocheck(b->p ? b->p : "", b->n);
    free(b->p);
    memset(b, 0, sizeof *b);
    return s;
}

/* ------------------------------------------------------------- values */

const char *loom__ct_type_name(json_t *v)
{
    if (!v)
        return "undefined";
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "dict";
    case JSON_ARRAY:
        return "list";
    case JSON_STRING:
        return "str";
    case JSON_INTEGER:
        return "int";
    case JSON_REAL:
        return "float";
    case JSON_TRUE:
    case JSON_FALSE:
        return "bool";
    default:
        return "NoneType";
    }
}

int loom__ct_truthy(json_t *v)
{
    if (!v)
        return 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return json_object_size(v) > 0;
    case JSON_ARRAY:
        return json_array_size(v) > 0;
    case JSON_STRING:
        return json_string_length(v) > 0;
    case JSON_INTEGER:
        return json_integer_value(v) != 0;
    case JSON_REAL:
        return json_real_value(v) != 0;
    case JSON_TRUE:
        return 1;
    default:
        return 0;
    }
}

int loom__ct_is_num(json_t *v)
{
    return v && (json_is_number(v) || json_is_boolean(v));
}

double loom__ct_num(json_t *v)
{
    return json_is_boolean(v) ? (json_is_true(v) ? 1 : 0)
                              : json_number_value(v);
}

int loom__ct_is_int(json_t *v)
{
    return v && (json_is_integer(v) || json_is_boolean(v));
}

json_int_t loom__ct_inum(json_t *v)
{
    return json_is_boolean(v) ? json_is_true(v) : json_integer_value(v);
}

/* Python's repr of a float: the shortest digits that read back the same. */
static void py_float(double d, char *out, size_t size)
{
    if (isnan(d)) {
        snprintf(out, size, "NaN");
        return;
    }
    if (isinf(d)) {
        snprintf(out, size, d > 0 ? "Infinity" : "-Infinity");
        return;
    }
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, d);
        if (strtod(e, NULL) == d)
            break;
    }
    /* e is like "-1.2345e+02": split digits and exponent. */
    char digits[24];
    size_t nd = 0;
    const char *q = e;
    int negative = *q == '-';
    if (negative)
        q++;
    for (; *q && *q != 'e'; q++)
        if (*q != '.')
            digits[nd++] = *q;
    digits[nd] = '\0';
    int exp = atoi(q + 1);
    char *o = out;
    size_t left = size;
#define PUT(...)                                                               \
    do {                                                                       \
        int k_ = snprintf(o, left, __VA_ARGS__);                               \
        if (k_ > 0 && (size_t)k_ < left) {                                     \
            o += k_;                                                           \
            left -= (size_t)k_;                                                \
        }                                                                      \
    } while (0)
    if (negative)
        PUT("-");
    if (exp < -4 || exp >= 16) {
        PUT("%c", digits[0]);
        if (nd > 1)
            PUT(".%s", digits + 1);
        PUT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        PUT("0.");
        for (int i = 0; i < -exp - 1; i++)
            PUT("0");
        PUT("%s", digits);
    } else {
        for (int i = 0; i <= exp; i++)
            PUT("%c", i < (int)nd ? digits[i] : '0');
        PUT(".");
        if ((int)nd > exp + 1)
            PUT("%s", digits + exp + 1);
        else
            PUT("0");
    }
#undef PUT
}

/* An int or a float as both str() and json.dumps spell it. */
static void put_number(ct_buf *b, json_t *v)
{
    char tmp[64];
    if (json_is_integer(v))
        snprintf(tmp, sizeof tmp, "%lld", (long long)json_integer_value(v));
    else
        py_float(json_real_value(v), tmp, sizeof tmp);
    loom__ct_sb_str(b, tmp);
}

/* JSON text as Python's json.dumps writes it; ASCII: ensure_ascii, every
 * character past U+007F as \uXXXX (a surrogate pair past U+FFFF). */
static void json_str(ct_buf *b, const char *s, size_t len, int ascii)
{
    loom__ct_sb_add(b, "\"", 1);
    /* The characters with a short escape, and the letter after '\\'. */
    static const char plain[] = "\"\\\n\r\t\b\f", letter[] = "\"\\nrtbf";
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *k = ch ? strchr(plain, ch) : NULL;
        char esc[16];
        if (k) {
            esc[0] = '\\';
            esc[1] = letter[k - plain];
            loom__ct_sb_add(b, esc, 2);
        } else if (ch < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", ch);
            loom__ct_sb_add(b, esc, 6);
        } else if (ascii && ch >= 0x80) {
            size_t n = loom__ct_u8_len_at(s + i, len - i);
            uint32_t cp = ch & (n == 2 ? 0x1f : n == 3 ? 0x0f : 0x07);
            for (size_t j = 1; j < n; j++)
                cp = (cp << 6) | ((unsigned char)s[i + j] & 0x3f);
            i += n - 1;
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x",
                         0xd800 + (unsigned)(cp >> 10),
                         0xdc00 + (unsigned)(cp & 0x3ff));
                loom__ct_sb_add(b, esc, 12);
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
                loom__ct_sb_add(b, esc, 6);
            }
        } else {
            loom__ct_sb_add(b, (const char *)&ch, 1);
        }
    }
    loom__ct_sb_add(b, "\"", 1);
}

static void indent_to(ct_buf *b, int indent, int level)
{
    static const char spaces[64] = "                                "
                                   "                               ";
    loom__ct_sb_add(b, "\n", 1);
    /* indent and level are bounded by the caller: the product fits */
    for (long long k = (long long)indent * level; k > 0 && !b->oom; k -= 63)
        loom__ct_sb_add(b, spaces, k < 63 ? (size_t)k : 63);
}

/* What json.dumps writes before an item of a list or dict at LEVEL. */
static void item_start(ct_buf *b, int first, const ct_json_opts *o, int level)
{
    if (!first)
        loom__ct_sb_str(b, o->item_sep      ? o->item_sep
                           : o->indent >= 0 ? ","
                                            : ", ");
    if (o->indent >= 0)
        indent_to(b, o->indent, level + 1);
}

/* ... and what it writes to close a list or dict of N items. */
static void close_items(ct_buf *b, size_t n, int indent, int level,
                        const char *close)
{
    if (indent >= 0 && n)
        indent_to(b, indent, level);
    loom__ct_sb_str(b, close);
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void loom__ct_to_json_opts(ct_buf *b, json_t *v, const ct_json_opts *o,
                           int level)
{
    if (b->oom)
        return;
    if (level > CT_MAX_VALUE_DEPTH) {
        b->oom = 2;
        return;
    }
    if (!v || json_is_null(v)) {
        loom__ct_sb_str(b, "null");
    } else if (json_is_true(v)) {
        loom__ct_sb_str(b, "true");
    } else if (json_is_false(v)) {
        loom__ct_sb_str(b, "false");
    } else if (json_is_number(v)) {
        put_number(b, v);
    } else if (json_is_string(v)) {
        json_str(b, json_string_value(v), json_string_length(v), o->ascii);
    } else if (json_is_array(v)) {
        loom__ct_sb_str(b, "[");
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            item_start(b, i == 0, o, level);
            loom__ct_to_json_opts(b, x, o, level + 1);
        }
        close_items(b, json_array_size(v), o->indent, level, "]");
    } else {
        loom__ct_sb_str(b, "{");
        size_t n = json_object_size(v), k = 0;
        const char **keys = malloc((n ? n : 1) * sizeof *keys);
        if (!keys) {
            b->oom = 1;
            return;
        }
        const char *key;
        json_t *x;
        json_object_foreach(v, key, x) keys[k++] = key;
        if (o->sort_keys)
            qsort(keys, n, sizeof *keys, key_cmp);
        for (k = 0; k < n; k++) {
            item_start(b, k == 0, o, level);
            json_str(b, keys[k], strlen(keys[k]), o->ascii);
            loom__ct_sb_str(b, o->key_sep ? o->key_sep : ": ");
            loom__ct_to_json_opts(b, json_object_get(v, keys[k]), o, level + 1);
        }
        free(keys);
        close_items(b, n, o->indent, level, "}");
    }
}

void loom__ct_to_json(ct_buf *b, json_t *v, int indent, int level)
{
    ct_json_opts o = {indent, NULL, NULL, 0, 0};
    loom__ct_to_json_opts(b, v, &o, level);
}

/* Python's str() of a value (repr for the strings inside containers). */
static void py_str(ct_buf *b, json_t *v, int top, int level);

void loom__ct_py_str(ct_buf *b, json_t *v, int top)
{
    py_str(b, v, top, 0);
}

static void py_str(ct_buf *b, json_t *v, int top, int level)
{
    if (!v || b->oom)
        return; /* undefined prints as nothing */
    if (level > CT_MAX_VALUE_DEPTH) {
        b->oom = 2;
        return;
    }
    switch (json_typeof(v)) {
    case JSON_NULL:
        loom__ct_sb_str(b, "None");
        break;
    case JSON_TRUE:
        loom__ct_sb_str(b, "True");
        break;
    case JSON_FALSE:
        loom__ct_sb_str(b, "False");
        break;
    case JSON_INTEGER:
    case JSON_REAL:
        put_number(b, v);
        break;
    case JSON_STRING: {
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);
        if (top) {
            loom__ct_sb_add(b, s, len);
            break;
        }
        char q = memchr(s, '\'', len) && !memchr(s, '"', len) ? '"' : '\'';
        loom__ct_sb_add(b, &q, 1);
        for (size_t i = 0; i < len; i++) {
            if (s[i] == q || s[i] == '\\') {
                loom__ct_sb_add(b, "\\", 1);
                loom__ct_sb_add(b, s + i, 1);
            } else if (s[i] == '\n') {
                loom__ct_sb_str(b, "\\n");
            } else if (s[i] == '\t') {
                loom__ct_sb_str(b, "\\t");
            } else if (s[i] == '\r') {
                loom__ct_sb_str(b, "\\r");
            } else {
                loom__ct_sb_add(b, s + i, 1);
            }
        }
        loom__ct_sb_add(b, &q, 1);
        break;
    }
    case JSON_ARRAY: {
        loom__ct_sb_str(b, "[");
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            if (i)
                loom__ct_sb_str(b, ", ");
            py_str(b, x, 0, level + 1);
        }
        loom__ct_sb_str(b, "]");
        break;
    }
    case JSON_OBJECT: {
        loom__ct_sb_str(b, "{");
        const char *k;
        json_t *x;
        int first = 1;
        json_object_foreach(v, k, x)
        {
            if (!first)
                loom__ct_sb_str(b, ", ");
            first = 0;
            json_t *key = json_string(k);
            py_str(b, key, 0, level + 1);
            json_decref(key);
            loom__ct_sb_str(b, ": ");
            py_str(b, x, 0, level + 1);
        }
        loom__ct_sb_str(b, "}");
        break;
    }
    }
}

json_t *loom__ct_str_of(json_t *v)
{
    if (v && json_is_string(v))
        return json_incref(v);
    ct_buf b = {0};
    loom__ct_py_str(&b, v, 1);
    return loom__ct_sb_take(&b);
}

int loom__ct_equal(json_t *a, json_t *b)
{
    if (!a || !b)
        return !a && !b;
    if (loom__ct_is_num(a) && loom__ct_is_num(b))
        return loom__ct_num(a) == loom__ct_num(b);
    return json_equal(a, b);
}

/* ---- UTF-8 code point indexing for len(), s[i] and slices */

size_t loom__ct_u8_count(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

/* Byte offset of code point IDX (IDX <= count). */
size_t loom__ct_u8_offset(const char *s, size_t len, size_t idx)
{
    size_t i = 0;
    while (i < len && idx > 0) {
        i++;
        while (i < len && ((unsigned char)s[i] & 0xC0) == 0x80)
            i++;
        idx--;
    }
    return i;
}

static int u8_is_space(const char *s, size_t len, size_t *k)
{
    unsigned char c = (unsigned char)s[0];
    if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) {
        *k = 1;
        return 1;
    }
    static const char *const u[] = {
        "\xC2\x85",     "\xC2\xA0",     "\xE1\x9A\x80",
        "\xE2\x80\xA8", "\xE2\x80\xA9", "\xE2\x80\xAF",
        "\xE2\x81\x9F", "\xE3\x80\x80", NULL};
    for (size_t i = 0; u[i]; i++) {
        size_t n = strlen(u[i]);
        if (len >= n && !memcmp(s, u[i], n)) {
            *k = n;
            return 1;
        }
    }
    /* U+2000..U+200A */
    if (len >= 3 && c == 0xE2 && (unsigned char)s[1] == 0x80 &&
        (unsigned char)s[2] >= 0x80 && (unsigned char)s[2] <= 0x8A) {
        *k = 3;
        return 1;
    }
    return 0;
}

/* Start of the code point that ends at END, not before LO. */
static size_t u8_prev(const char *s, size_t lo, size_t end)
{
    size_t st = end - 1;
    while (st > lo && ((unsigned char)s[st] & 0xC0) == 0x80)
        st--;
    return st;
}

size_t loom__ct_u8_len_at(const char *s, size_t len)
{
    size_t k = 1;
    while (k < len && ((unsigned char)s[k] & 0xC0) == 0x80)
        k++;
    return k;
}

/* Is the code point at s one of CHARS (or white space when CHARS is NULL)?
 * *k gets its length. */
static int strip_match(const char *s, size_t len, json_t *chars, size_t *k)
{
    if (!chars)
        return u8_is_space(s, len, k);
    *k = loom__ct_u8_len_at(s, len);
    const char *c = json_string_value(chars);
    size_t cl = json_string_length(chars);
    for (size_t i = 0; i < cl;) {
        size_t m = loom__ct_u8_len_at(c + i, cl - i);
        if (m == *k && !memcmp(c + i, s, m))
            return 1;
        i += m;
    }
    return 0;
}

json_t *loom__ct_strip(json_t *v, json_t *chars, int left, int right)
{
    const char *s = json_string_value(v);
    size_t a = 0, b = json_string_length(v), k;
    if (left)
        while (a < b && strip_match(s + a, b - a, chars, &k))
            a += k;
    if (right) {
        while (b > a) {
            size_t st = u8_prev(s, a, b);
            if (!strip_match(s + st, b - st, chars, &k) || st + k != b)
                break;
            b = st;
        }
    }
    return json_stringn_nocheck(s + a, b - a);
}

json_t *loom__ct_split(json_t *v, json_t *sep, json_int_t maxsplit)
{
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    json_t *out = json_array();
    if (!out)
        return NULL;
    if (!sep || json_is_null(sep)) {
        size_t i = 0, k;
        for (;;) {
            while (i < len && u8_is_space(s + i, len - i, &k))
                i += k;
            if (i >= len)
                break;
            size_t st = i;
            if (maxsplit >= 0 && (json_int_t)json_array_size(out) == maxsplit) {
                size_t e = len;
                while (e > st) {
                    size_t p = u8_prev(s, st, e);
                    if (!u8_is_space(s + p, e - p, &k))
                        break;
                    e = p;
                }
                json_array_append_new(out,
                                      json_stringn_nocheck(s + st, e - st));
                break;
            }
            while (i < len && !u8_is_space(s + i, len - i, &k))
                i += loom__ct_u8_len_at(s + i, len - i);
            if (json_array_size(out) >= CT_MAX_ITEMS) {
                json_decref(out);
                return NULL;
            }
            json_array_append_new(out, json_stringn_nocheck(s + st, i - st));
        }
        return out;
    }
    const char *d = json_string_value(sep);
    size_t dl = json_string_length(sep);
    size_t st = 0;
    for (size_t i = 0; dl && i + dl <= len;) {
        if ((maxsplit < 0 || (json_int_t)json_array_size(out) < maxsplit) &&
            !memcmp(s + i, d, dl)) {
            if (json_array_size(out) >= CT_MAX_ITEMS) {
                json_decref(out);
                return NULL;
            }
            json_array_append_new(out, json_stringn_nocheck(s + st, i - st));
            i += dl;
            st = i;
        } else {
            i++;
        }
    }
    json_array_append_new(out, json_stringn_nocheck(s + st, len - st));
    return out;
}

json_t *loom__ct_replace(json_t *v, json_t *from, json_t *to, json_int_t count)
{
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    const char *f = json_string_value(from);
    size_t fl = json_string_length(from);
    ct_buf b = {0};
    json_int_t done = 0;
    size_t i = 0;
    while (i < len) {
        if (fl && (count < 0 || done < count) && i + fl <= len &&
            !memcmp(s + i, f, fl)) {
            loom__ct_sb_add(&b, json_string_value(to), json_string_length(to));
            i += fl;
            done++;
        } else {
            loom__ct_sb_add(&b, s + i, 1);
            i++;
        }
    }
    return loom__ct_sb_take(&b);
}

/* Letters that have a case: what Python's title() calls cased. */
static int cased(utf8proc_int32_t cp)
{
    utf8proc_category_t k = utf8proc_category(cp);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL ||
           k == UTF8PROC_CATEGORY_LT;
}

json_t *loom__ct_change_case(json_t *v, int mode)
{
    const utf8proc_uint8_t *s = (const utf8proc_uint8_t *)json_string_value(v);
    utf8proc_ssize_t len = (utf8proc_ssize_t)json_string_length(v);
    ct_buf b = {0};
    int prev_cased = 0, first = 1;
    for (utf8proc_ssize_t i = 0; i < len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t n = utf8proc_iterate(s + i, len - i, &cp);
        if (n <= 0) { /* not UTF-8: the byte as it is */
            loom__ct_sb_add(&b, (const char *)s + i, 1);
            i++;
            continue;
        }
        utf8proc_int32_t to = cp;
        if (mode == 0)
            to = utf8proc_tolower(cp);
        else if (mode == 1)
            to = utf8proc_toupper(cp);
        else if (mode == 2)
            to = prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp);
        else
            to = first ? utf8proc_totitle(cp) : utf8proc_tolower(cp);
        prev_cased = cased(cp);
        first = 0;
        utf8proc_uint8_t enc[4];
        utf8proc_ssize_t k = utf8proc_encode_char(to, enc);
        loom__ct_sb_add(&b, (const char *)enc, (size_t)k);
        i += n;
    }
    return loom__ct_sb_take(&b);
}

json_t *loom__ct_slice(json_t *v, json_t *a, json_t *b, json_t *step)
{
    int is_str = json_is_string(v);
    size_t len =
        is_str ? loom__ct_u8_count(json_string_value(v), json_string_length(v))
               : json_array_size(v);
    json_int_t st = step ? loom__ct_inum(step) : 1;
    if (st == 0)
        return NULL;
    json_int_t n = (json_int_t)len, lo, hi;
    if (st > 0) {
        lo = a ? loom__ct_inum(a) : 0;
        hi = b ? loom__ct_inum(b) : n;
        if (lo < 0)
            lo += n;
        if (hi < 0)
            hi += n;
        lo = lo < 0 ? 0 : lo > n ? n : lo;
        hi = hi < 0 ? 0 : hi > n ? n : hi;
    } else {
        lo = a ? loom__ct_inum(a) : n - 1;
        hi = b ? loom__ct_inum(b) : -1 - n;
        if (lo < 0)
            lo += n;
        if (hi < 0)
            hi += n;
        lo = lo < -1 ? -1 : lo > n - 1 ? n - 1 : lo;
        hi = hi < -1 ? -1 : hi > n - 1 ? n - 1 : hi;
    }
    json_t *out = is_str ? NULL : json_array();
    ct_buf sb = {0};
    const char *s = is_str ? json_string_value(v) : NULL;
    size_t sl = is_str ? json_string_length(v) : 0;
    /* The count of items first: i += st could pass INT64_MAX. Both bounds
     * are in [-1, n], so the differences fit. */
    uint64_t count = 0;
    if (st > 0 && hi > lo)
        count = (uint64_t)(hi - lo - 1) / (uint64_t)st + 1;
    else if (st < 0 && lo > hi)
        count = (uint64_t)(lo - hi - 1) / ((uint64_t)0 - (uint64_t)st) + 1;
    /* Walk code points once (byte offset O of code point AT), not from the
     * start for each item. */
    size_t at = 0, o = 0;
    for (uint64_t k = 0; k < count; k++) {
        size_t i = (size_t)(lo + (json_int_t)k * st);
        if (is_str) {
            while (at < i) {
                o += loom__ct_u8_len_at(s + o, sl - o);
                at++;
            }
            while (at > i) {
                o = u8_prev(s, 0, o);
                at--;
            }
            loom__ct_sb_add(&sb, s + o, loom__ct_u8_len_at(s + o, sl - o));
            if (sb.oom)
                break;
        } else {
            json_array_append(out, json_array_get(v, i));
        }
    }
    return is_str ? loom__ct_sb_take(&sb) : out;
}

json_t *loom__ct_item(json_t *v, json_t *k)
{
    if (json_is_object(v) && json_is_string(k))
        return json_incref(json_object_get(v, json_string_value(k)));
    if ((json_is_array(v) || json_is_string(v)) && loom__ct_is_int(k)) {
        json_int_t i = loom__ct_inum(k);
        size_t len = json_is_array(v)
                         ? json_array_size(v)
                         : loom__ct_u8_count(json_string_value(v),
                                             json_string_length(v));
        if (i < 0)
            i += (json_int_t)len;
        if (i < 0 || (size_t)i >= len)
            return NULL;
        if (json_is_array(v))
            return json_incref(json_array_get(v, (size_t)i));
        const char *s = json_string_value(v);
        size_t sl = json_string_length(v);
        size_t o = loom__ct_u8_offset(s, sl, (size_t)i);
        return json_stringn_nocheck(s + o, loom__ct_u8_len_at(s + o, sl - o));
    }
    return NULL;
}
