/* The chat template interpreter: Jinja semantics (Python truthiness,
 * scoping of for loops, undefined values, filters, tests and methods) over
 * Jansson values, writing the rendered text into a buffer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template_impl.h"

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t len)
{
    if (b->oom)
        return;
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

static void sb_str(sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

typedef struct macro_def {
    const char *name;
    const ct_node *node;
} macro_def;

typedef struct ctx {
    json_t *frames[64]; /* scopes, innermost last */
    size_t n_frames;
    sbuf *out;
    loom_err *err;
    int brk, cont; /* a break/continue is unwinding to its loop */
    macro_def macros[32];
    size_t n_macros;
    int depth;
} ctx;

static loom_status ev(ctx *c, const ct_node *n, json_t **out);
static loom_status exec_list(ctx *c, const ct_list *l);

static loom_status error(ctx *c, const ct_node *n, loom_status code,
                         const char *fmt, const char *a, const char *b)
{
    char msg[400];
    snprintf(msg, sizeof msg, fmt, a, b);
    return loom_err_set(c->err, code, "chat template line %d: %s", n->line,
                        msg);
}

static loom_status nomem(ctx *c)
{
    return loom_err_set(c->err, LOOM_ERR_NOMEM, "chat template: out of memory");
}

/* ------------------------------------------------------------- values */

static const char *type_name(json_t *v)
{
    if (!v)
        return "undefined";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "dict";
    case JSON_ARRAY: return "list";
    case JSON_STRING: return "str";
    case JSON_INTEGER: return "int";
    case JSON_REAL: return "float";
    case JSON_TRUE:
    case JSON_FALSE: return "bool";
    default: return "NoneType";
    }
}

static int truthy(json_t *v)
{
    if (!v)
        return 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT: return json_object_size(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_TRUE: return 1;
    default: return 0;
    }
}

static int is_num(json_t *v)
{
    return v && (json_is_number(v) || json_is_boolean(v));
}

static double num(json_t *v)
{
    return json_is_boolean(v) ? (json_is_true(v) ? 1 : 0) : json_number_value(v);
}

static int is_int(json_t *v)
{
    return v && (json_is_integer(v) || json_is_boolean(v));
}

static json_int_t inum(json_t *v)
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

/* JSON text as Python's json.dumps(ensure_ascii=False) writes it. */
static void json_str(sbuf *b, const char *s, size_t len)
{
    sb_add(b, "\"", 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[8];
        switch (ch) {
        case '"': sb_add(b, "\\\"", 2); break;
        case '\\': sb_add(b, "\\\\", 2); break;
        case '\n': sb_add(b, "\\n", 2); break;
        case '\r': sb_add(b, "\\r", 2); break;
        case '\t': sb_add(b, "\\t", 2); break;
        case '\b': sb_add(b, "\\b", 2); break;
        case '\f': sb_add(b, "\\f", 2); break;
        default:
            if (ch < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", ch);
                sb_add(b, esc, 6);
            } else {
                sb_add(b, (const char *)&ch, 1);
            }
        }
    }
    sb_add(b, "\"", 1);
}

static void indent_to(sbuf *b, int indent, int level)
{
    sb_add(b, "\n", 1);
    for (int i = 0; i < indent * level; i++)
        sb_add(b, " ", 1);
}

static void to_json(sbuf *b, json_t *v, int indent, int level)
{
    char tmp[64];
    if (!v || json_is_null(v)) {
        sb_str(b, "null");
    } else if (json_is_true(v)) {
        sb_str(b, "true");
    } else if (json_is_false(v)) {
        sb_str(b, "false");
    } else if (json_is_integer(v)) {
        snprintf(tmp, sizeof tmp, "%lld", (long long)json_integer_value(v));
        sb_str(b, tmp);
    } else if (json_is_real(v)) {
        py_float(json_real_value(v), tmp, sizeof tmp);
        sb_str(b, tmp);
    } else if (json_is_string(v)) {
        json_str(b, json_string_value(v), json_string_length(v));
    } else if (json_is_array(v)) {
        sb_str(b, "[");
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            if (i)
                sb_str(b, indent >= 0 ? "," : ", ");
            if (indent >= 0)
                indent_to(b, indent, level + 1);
            to_json(b, x, indent, level + 1);
        }
        if (indent >= 0 && json_array_size(v))
            indent_to(b, indent, level);
        sb_str(b, "]");
    } else {
        sb_str(b, "{");
        const char *k;
        json_t *x;
        int first = 1;
        json_object_foreach(v, k, x)
        {
            if (!first)
                sb_str(b, indent >= 0 ? "," : ", ");
            first = 0;
            if (indent >= 0)
                indent_to(b, indent, level + 1);
            json_str(b, k, strlen(k));
            sb_str(b, ": ");
            to_json(b, x, indent, level + 1);
        }
        if (indent >= 0 && json_object_size(v))
            indent_to(b, indent, level);
        sb_str(b, "}");
    }
}

/* Python's str() of a value (repr for the strings inside containers). */
static void py_str(sbuf *b, json_t *v, int top)
{
    char tmp[64];
    if (!v)
        return; /* undefined prints as nothing */
    switch (json_typeof(v)) {
    case JSON_NULL: sb_str(b, "None"); break;
    case JSON_TRUE: sb_str(b, "True"); break;
    case JSON_FALSE: sb_str(b, "False"); break;
    case JSON_INTEGER:
        snprintf(tmp, sizeof tmp, "%lld", (long long)json_integer_value(v));
        sb_str(b, tmp);
        break;
    case JSON_REAL:
        py_float(json_real_value(v), tmp, sizeof tmp);
        sb_str(b, tmp);
        break;
    case JSON_STRING: {
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);
        if (top) {
            sb_add(b, s, len);
            break;
        }
        char q = memchr(s, '\'', len) && !memchr(s, '"', len) ? '"' : '\'';
        sb_add(b, &q, 1);
        for (size_t i = 0; i < len; i++) {
            if (s[i] == q || s[i] == '\\') {
                sb_add(b, "\\", 1);
                sb_add(b, s + i, 1);
            } else if (s[i] == '\n') {
                sb_str(b, "\\n");
            } else if (s[i] == '\t') {
                sb_str(b, "\\t");
            } else if (s[i] == '\r') {
                sb_str(b, "\\r");
            } else {
                sb_add(b, s + i, 1);
            }
        }
        sb_add(b, &q, 1);
        break;
    }
    case JSON_ARRAY: {
        sb_str(b, "[");
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            if (i)
                sb_str(b, ", ");
            py_str(b, x, 0);
        }
        sb_str(b, "]");
        break;
    }
    case JSON_OBJECT: {
        sb_str(b, "{");
        const char *k;
        json_t *x;
        int first = 1;
        json_object_foreach(v, k, x)
        {
            if (!first)
                sb_str(b, ", ");
            first = 0;
            json_t *key = json_string(k);
            py_str(b, key, 0);
            json_decref(key);
            sb_str(b, ": ");
            py_str(b, x, 0);
        }
        sb_str(b, "}");
        break;
    }
    }
}

static json_t *str_of(json_t *v)
{
    if (v && json_is_string(v))
        return json_incref(v);
    sbuf b = {0};
    py_str(&b, v, 1);
    json_t *s = b.oom ? NULL : json_stringn_nocheck(b.p ? b.p : "", b.n);
    free(b.p);
    return s;
}

static int equal(json_t *a, json_t *b)
{
    if (!a || !b)
        return !a && !b;
    if (is_num(a) && is_num(b))
        return num(a) == num(b);
    return json_equal(a, b);
}

/* ---- UTF-8 code point indexing for len(), s[i] and slices */

static size_t u8_count(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

/* Byte offset of code point IDX (IDX <= count). */
static size_t u8_offset(const char *s, size_t len, size_t idx)
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
    static const char *const u[] = {"\xC2\x85",     "\xC2\xA0",
                                    "\xE1\x9A\x80", "\xE2\x80\xA8",
                                    "\xE2\x80\xA9", "\xE2\x80\xAF",
                                    "\xE2\x81\x9F", "\xE3\x80\x80",
                                    NULL};
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

static size_t u8_len_at(const char *s, size_t len)
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
    *k = u8_len_at(s, len);
    const char *c = json_string_value(chars);
    size_t cl = json_string_length(chars);
    for (size_t i = 0; i < cl;) {
        size_t m = u8_len_at(c + i, cl - i);
        if (m == *k && !memcmp(c + i, s, m))
            return 1;
        i += m;
    }
    return 0;
}

static json_t *strip(json_t *v, json_t *chars, int left, int right)
{
    const char *s = json_string_value(v);
    size_t a = 0, b = json_string_length(v), k;
    if (left)
        while (a < b && strip_match(s + a, b - a, chars, &k))
            a += k;
    if (right) {
        while (b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)s[st] & 0xC0) == 0x80)
                st--;
            if (!strip_match(s + st, b - st, chars, &k) || st + k != b)
                break;
            b = st;
        }
    }
    return json_stringn_nocheck(s + a, b - a);
}

static json_t *split(json_t *v, json_t *sep, json_int_t maxsplit)
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
                    size_t p = e - 1;
                    while (p > st && ((unsigned char)s[p] & 0xC0) == 0x80)
                        p--;
                    if (!u8_is_space(s + p, e - p, &k))
                        break;
                    e = p;
                }
                json_array_append_new(out, json_stringn_nocheck(s + st, e - st));
                break;
            }
            while (i < len && !u8_is_space(s + i, len - i, &k))
                i += u8_len_at(s + i, len - i);
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

static json_t *replace(json_t *v, json_t *from, json_t *to, json_int_t count)
{
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    const char *f = json_string_value(from);
    size_t fl = json_string_length(from);
    sbuf b = {0};
    json_int_t done = 0;
    size_t i = 0;
    while (i < len) {
        if (fl && (count < 0 || done < count) && i + fl <= len &&
            !memcmp(s + i, f, fl)) {
            sb_add(&b, json_string_value(to), json_string_length(to));
            i += fl;
            done++;
        } else {
            sb_add(&b, s + i, 1);
            i++;
        }
    }
    json_t *r = b.oom ? NULL : json_stringn_nocheck(b.p ? b.p : "", b.n);
    free(b.p);
    return r;
}

static json_t *change_case(json_t *v, int mode)
{
    /* ASCII letters only: the templates lower/upper role names. */
    size_t len = json_string_length(v);
    char *s = malloc(len + 1);
    if (!s)
        return NULL;
    memcpy(s, json_string_value(v), len);
    int start = 1;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        int alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        int up = mode == 1 || ((mode == 2 || mode == 3) && start);
        if (mode == 3 && i > 0)
            up = 0;
        if (alpha)
            s[i] = up ? (char)(ch & ~0x20) : (char)(ch | 0x20);
        start = mode == 2 ? !alpha : 0;
    }
    json_t *r = json_stringn_nocheck(s, len);
    free(s);
    return r;
}

/* ----------------------------------------------------------- variables */

static json_t *lookup(ctx *c, const char *name)
{
    for (size_t i = c->n_frames; i-- > 0;) {
        json_t *v = json_object_get(c->frames[i], name);
        if (v)
            return v;
    }
    return NULL;
}

static loom_status push_frame(ctx *c, const ct_node *n)
{
    if (c->n_frames == sizeof c->frames / sizeof c->frames[0])
        return error(c, n, LOOM_ERR_RANGE, "%s%s", "scopes nested too deeply",
                     "");
    c->frames[c->n_frames] = json_object();
    if (!c->frames[c->n_frames])
        return nomem(c);
    c->n_frames++;
    return LOOM_OK;
}

static void pop_frame(ctx *c)
{
    json_decref(c->frames[--c->n_frames]);
}

/* ---------------------------------------------------------------- eval */

static loom_status ev_args(ctx *c, const ct_node *n, json_t **args,
                           size_t max, size_t *n_args)
{
    if (n->args.n > max)
        return error(c, n, LOOM_ERR_INVALID, "too many arguments to '%s'%s",
                     n->name ? n->name : "call", "");
    for (size_t i = 0; i < n->args.n; i++) {
        loom_status st = ev(c, n->args.v[i], &args[i]);
        if (st != LOOM_OK) {
            while (i-- > 0)
                json_decref(args[i]);
            return st;
        }
    }
    *n_args = n->args.n;
    return LOOM_OK;
}

/* A keyword argument's value (new reference), or NULL. */
static loom_status kwarg(ctx *c, const ct_node *n, const char *name,
                         json_t **out)
{
    *out = NULL;
    for (size_t i = 0; i < n->n_kw; i++)
        if (!strcmp(n->kwnames[i], name))
            return ev(c, n->kwargs.v[i], out);
    return LOOM_OK;
}

static void decref_all(json_t **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(v[i]);
}

static json_t *slice(json_t *v, json_t *a, json_t *b, json_t *step)
{
    int is_str = json_is_string(v);
    size_t len = is_str ? u8_count(json_string_value(v), json_string_length(v))
                        : json_array_size(v);
    json_int_t st = step ? inum(step) : 1;
    if (st == 0)
        return NULL;
    json_int_t n = (json_int_t)len, lo, hi;
    if (st > 0) {
        lo = a ? inum(a) : 0;
        hi = b ? inum(b) : n;
        if (lo < 0)
            lo += n;
        if (hi < 0)
            hi += n;
        lo = lo < 0 ? 0 : lo > n ? n : lo;
        hi = hi < 0 ? 0 : hi > n ? n : hi;
    } else {
        lo = a ? inum(a) : n - 1;
        hi = b ? inum(b) : -1 - n;
        if (lo < 0)
            lo += n;
        if (hi < 0)
            hi += n;
        lo = lo < -1 ? -1 : lo > n - 1 ? n - 1 : lo;
        hi = hi < -1 ? -1 : hi > n - 1 ? n - 1 : hi;
    }
    json_t *out = is_str ? NULL : json_array();
    sbuf sb = {0};
    const char *s = is_str ? json_string_value(v) : NULL;
    size_t sl = is_str ? json_string_length(v) : 0;
    for (json_int_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
        if (is_str) {
            size_t o = u8_offset(s, sl, (size_t)i);
            sb_add(&sb, s + o, u8_len_at(s + o, sl - o));
        } else {
            json_array_append(out, json_array_get(v, (size_t)i));
        }
    }
    if (is_str) {
        out = sb.oom ? NULL : json_stringn_nocheck(sb.p ? sb.p : "", sb.n);
        free(sb.p);
    }
    return out;
}

static json_t *item(json_t *v, json_t *k)
{
    if (json_is_object(v) && json_is_string(k))
        return json_incref(json_object_get(v, json_string_value(k)));
    if ((json_is_array(v) || json_is_string(v)) && is_int(k)) {
        json_int_t i = inum(k);
        size_t len = json_is_array(v) ? json_array_size(v)
                                      : u8_count(json_string_value(v),
                                                 json_string_length(v));
        if (i < 0)
            i += (json_int_t)len;
        if (i < 0 || (size_t)i >= len)
            return NULL;
        if (json_is_array(v))
            return json_incref(json_array_get(v, (size_t)i));
        const char *s = json_string_value(v);
        size_t sl = json_string_length(v);
        size_t o = u8_offset(s, sl, (size_t)i);
        return json_stringn_nocheck(s + o, u8_len_at(s + o, sl - o));
    }
    return NULL;
}

static loom_status binop(ctx *c, const ct_node *n, json_t *a, json_t *b,
                         json_t **out)
{
    const char *op = n->op;
    *out = NULL;
    if (!strcmp(op, "~")) {
        json_t *x = str_of(a), *y = str_of(b);
        if (x && y) {
            sbuf s = {0};
            sb_add(&s, json_string_value(x), json_string_length(x));
            sb_add(&s, json_string_value(y), json_string_length(y));
            *out = s.oom ? NULL : json_stringn_nocheck(s.p ? s.p : "", s.n);
            free(s.p);
        }
        json_decref(x);
        json_decref(y);
        return *out ? LOOM_OK : nomem(c);
    }
    if (!strcmp(op, "==") || !strcmp(op, "!=")) {
        int eq = equal(a, b);
        *out = json_boolean(op[0] == '=' ? eq : !eq);
        return LOOM_OK;
    }
    if (!strcmp(op, "in") || !strcmp(op, "notin")) {
        int found = 0;
        if (json_is_string(b) && json_is_string(a)) {
            const char *h = json_string_value(b), *nd = json_string_value(a);
            size_t hl = json_string_length(b), nl = json_string_length(a);
            for (size_t i = 0; !found && i + nl <= hl; i++)
                found = !memcmp(h + i, nd, nl);
        } else if (json_is_array(b)) {
            size_t i;
            json_t *x;
            json_array_foreach(b, i, x) found |= equal(a, x);
        } else if (json_is_object(b) && json_is_string(a)) {
            found = json_object_get(b, json_string_value(a)) != NULL;
        } else {
            return error(c, n, LOOM_ERR_INVALID,
                         "'in' needs a str, list or dict on its right, not "
                         "%s%s",
                         type_name(b), "");
        }
        *out = json_boolean(op[0] == 'i' ? found : !found);
        return LOOM_OK;
    }
    if (op[0] == '<' || op[0] == '>') {
        int r;
        if (is_num(a) && is_num(b)) {
            double x = num(a), y = num(b);
            r = op[0] == '<' ? (op[1] ? x <= y : x < y) : (op[1] ? x >= y : x > y);
        } else if (json_is_string(a) && json_is_string(b)) {
            size_t la = json_string_length(a), lb = json_string_length(b);
            int cmp = memcmp(json_string_value(a), json_string_value(b),
                             la < lb ? la : lb);
            if (!cmp)
                cmp = la < lb ? -1 : la > lb;
            r = op[0] == '<' ? (op[1] ? cmp <= 0 : cmp < 0)
                             : (op[1] ? cmp >= 0 : cmp > 0);
        } else {
            return error(c, n, LOOM_ERR_INVALID, "cannot compare %s and %s",
                         type_name(a), type_name(b));
        }
        *out = json_boolean(r);
        return LOOM_OK;
    }
    if (!strcmp(op, "+") && json_is_string(a) && json_is_string(b)) {
        return binop(c, &(ct_node){.kind = CT_BINOP, .line = n->line, .op = "~"},
                     a, b, out);
    }
    if (!strcmp(op, "+") && json_is_array(a) && json_is_array(b)) {
        *out = json_array();
        if (!*out)
            return nomem(c);
        json_array_extend(*out, a);
        json_array_extend(*out, b);
        return LOOM_OK;
    }
    if (!strcmp(op, "*") && json_is_string(a) && is_int(b)) {
        sbuf s = {0};
        for (json_int_t i = 0; i < inum(b); i++)
            sb_add(&s, json_string_value(a), json_string_length(a));
        *out = s.oom ? NULL : json_stringn_nocheck(s.p ? s.p : "", s.n);
        free(s.p);
        return *out ? LOOM_OK : nomem(c);
    }
    if (!is_num(a) || !is_num(b))
        return error(c, n, LOOM_ERR_INVALID,
                     "unsupported operand types for the operator: %s and %s",
                     type_name(a), type_name(b));
    int ints = is_int(a) && is_int(b);
    json_int_t x = ints ? inum(a) : 0, y = ints ? inum(b) : 0;
    double fx = num(a), fy = num(b);
    switch (op[0]) {
    case '+':
        *out = ints ? json_integer(x + y) : json_real(fx + fy);
        break;
    case '-':
        *out = ints ? json_integer(x - y) : json_real(fx - fy);
        break;
    case '*':
        if (op[1] == '*')
            *out = ints && y >= 0 ? json_integer((json_int_t)pow((double)x, (double)y))
                                  : json_real(pow(fx, fy));
        else
            *out = ints ? json_integer(x * y) : json_real(fx * fy);
        break;
    case '/':
        if (fy == 0)
            return error(c, n, LOOM_ERR_INVALID, "division by zero%s%s", "", "");
        if (op[1] == '/') {
            if (ints) {
                json_int_t q = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0)))
                    q--;
                *out = json_integer(q);
            } else {
                *out = json_real(floor(fx / fy));
            }
        } else {
            *out = json_real(fx / fy);
        }
        break;
    case '%':
        if (fy == 0)
            return error(c, n, LOOM_ERR_INVALID, "modulo by zero%s%s", "", "");
        if (ints) {
            json_int_t r = x % y;
            if (r != 0 && ((r < 0) != (y < 0)))
                r += y;
            *out = json_integer(r);
        } else {
            double r = fmod(fx, fy);
            if (r != 0 && ((r < 0) != (fy < 0)))
                r += fy;
            *out = json_real(r);
        }
        break;
    default:
        return error(c, n, LOOM_ERR_UNSUPPORTED, "operator '%s'%s", op, "");
    }
    return *out ? LOOM_OK : nomem(c);
}

static loom_status apply_test(ctx *c, const ct_node *n, json_t *v,
                              json_t **args, size_t na, int *r)
{
    const char *t = n->name;
    if (!strcmp(t, "defined"))
        *r = v != NULL;
    else if (!strcmp(t, "undefined"))
        *r = v == NULL;
    else if (!strcmp(t, "none"))
        *r = v && json_is_null(v);
    else if (!strcmp(t, "string"))
        *r = v && json_is_string(v);
    else if (!strcmp(t, "number"))
        *r = v && json_is_number(v);
    else if (!strcmp(t, "integer"))
        *r = v && json_is_integer(v);
    else if (!strcmp(t, "float"))
        *r = v && json_is_real(v);
    else if (!strcmp(t, "boolean"))
        *r = v && json_is_boolean(v);
    else if (!strcmp(t, "true"))
        *r = v && json_is_true(v);
    else if (!strcmp(t, "false"))
        *r = v && json_is_false(v);
    else if (!strcmp(t, "mapping"))
        *r = v && json_is_object(v);
    else if (!strcmp(t, "sequence") || !strcmp(t, "iterable"))
        *r = v && (json_is_array(v) || json_is_string(v) || json_is_object(v));
    else if (!strcmp(t, "callable"))
        *r = 0;
    else if (!strcmp(t, "even") || !strcmp(t, "odd"))
        *r = is_int(v) && (inum(v) % 2 == 0) == (t[0] == 'e');
    else if ((!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "sameas")) && na == 1)
        *r = equal(v, args[0]);
    else if (!strcmp(t, "ne") && na == 1)
        *r = !equal(v, args[0]);
    else if (!strcmp(t, "in") && na == 1) {
        json_t *o = NULL;
        loom_status st = binop(c, &(ct_node){.kind = CT_BINOP, .line = n->line, .op = "in"}, v, args[0], &o);
        if (st != LOOM_OK)
            return st;
        *r = json_is_true(o);
        json_decref(o);
    } else if (!strcmp(t, "divisibleby") && na == 1 && is_int(v) && is_int(args[0]) && inum(args[0]))
        *r = inum(v) % inum(args[0]) == 0;
    else
        return error(c, n, LOOM_ERR_UNSUPPORTED, "the test '%s' is not supported%s", t, "");
    return LOOM_OK;
}

static loom_status call_filter(ctx *c, const ct_node *n, json_t *v,
                               json_t **out);

/* Methods of str, dict and list values: obj.name(args). */
static loom_status call_method(ctx *c, const ct_node *n, json_t *obj,
                               const char *m, json_t **args, size_t na,
                               json_t **out)
{
    *out = NULL;
    if (json_is_string(obj)) {
        const char *s = json_string_value(obj);
        size_t len = json_string_length(obj);
        if ((!strcmp(m, "startswith") || !strcmp(m, "endswith")) && na == 1) {
            json_t *opts = json_is_array(args[0]) ? args[0] : NULL;
            size_t k = opts ? json_array_size(opts) : 1;
            int r = 0;
            for (size_t i = 0; i < k && !r; i++) {
                json_t *p = opts ? json_array_get(opts, i) : args[0];
                if (!json_is_string(p))
                    return error(c, n, LOOM_ERR_INVALID, "%s needs a str%s", m, "");
                size_t pl = json_string_length(p);
                r = pl <= len && !memcmp(m[0] == 's' ? s : s + len - pl,
                                         json_string_value(p), pl);
            }
            *out = json_boolean(r);
            return LOOM_OK;
        }
        if ((!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) &&
            na <= 1) {
            json_t *chars = na && json_is_string(args[0]) ? args[0] : NULL;
            *out = strip(obj, chars, m[0] != 'r', m[0] != 'l');
            return *out ? LOOM_OK : nomem(c);
        }
        if (!strcmp(m, "split") && na <= 2) {
            if (na && !json_is_string(args[0]) && !json_is_null(args[0]))
                return error(c, n, LOOM_ERR_INVALID, "split needs a str%s%s", "", "");
            *out = split(obj, na ? args[0] : NULL, na > 1 ? inum(args[1]) : -1);
            return *out ? LOOM_OK : nomem(c);
        }
        if (!strcmp(m, "replace") && (na == 2 || na == 3) &&
            json_is_string(args[0]) && json_is_string(args[1])) {
            *out = replace(obj, args[0], args[1], na == 3 ? inum(args[2]) : -1);
            return *out ? LOOM_OK : nomem(c);
        }
        if ((!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "title") ||
             !strcmp(m, "capitalize")) && na == 0) {
            int mode = m[0] == 'l' ? 0 : m[0] == 'u' ? 1 : m[0] == 't' ? 2 : 3;
            *out = change_case(obj, mode);
            return *out ? LOOM_OK : nomem(c);
        }
        if (!strcmp(m, "find") && na == 1 && json_is_string(args[0])) {
            const char *nd = json_string_value(args[0]);
            size_t nl = json_string_length(args[0]);
            json_int_t at = -1;
            for (size_t i = 0; i + nl <= len; i++)
                if (!memcmp(s + i, nd, nl)) {
                    at = (json_int_t)u8_count(s, i);
                    break;
                }
            *out = json_integer(at);
            return LOOM_OK;
        }
        if (!strcmp(m, "join") && na == 1 && json_is_array(args[0])) {
            sbuf b = {0};
            size_t i;
            json_t *x;
            json_array_foreach(args[0], i, x)
            {
                json_t *xs = str_of(x);
                if (i)
                    sb_add(&b, s, len);
                if (xs)
                    sb_add(&b, json_string_value(xs), json_string_length(xs));
                json_decref(xs);
            }
            *out = json_stringn_nocheck(b.p ? b.p : "", b.n);
            free(b.p);
            return *out ? LOOM_OK : nomem(c);
        }
    } else if (json_is_object(obj)) {
        if (!strcmp(m, "items") && na == 0) {
            *out = json_array();
            const char *k;
            json_t *x;
            json_object_foreach(obj, k, x)
                json_array_append_new(*out, json_pack("[sO]", k, x));
            return LOOM_OK;
        }
        if ((!strcmp(m, "keys") || !strcmp(m, "values")) && na == 0) {
            *out = json_array();
            const char *k;
            json_t *x;
            json_object_foreach(obj, k, x)
                json_array_append_new(*out, m[0] == 'k' ? json_string(k)
                                                        : json_incref(x));
            return LOOM_OK;
        }
        if (!strcmp(m, "get") && (na == 1 || na == 2) && json_is_string(args[0])) {
            json_t *x = json_object_get(obj, json_string_value(args[0]));
            *out = json_incref(x ? x : na == 2 ? args[1] : json_null());
            return LOOM_OK;
        }
    }
    return error(c, n, LOOM_ERR_UNSUPPORTED, "the method %s.%s() is not supported",
                 type_name(obj), m);
}

static loom_status call_macro(ctx *c, const ct_node *n, const ct_node *mac,
                              json_t **args, size_t na, json_t **out)
{
    if (na > mac->n_targets)
        return error(c, n, LOOM_ERR_INVALID, "too many arguments to macro '%s'%s",
                     mac->name, "");
    if (c->depth > 64)
        return error(c, n, LOOM_ERR_RANGE, "macro '%s' recurses too deeply%s",
                     mac->name, "");
    /* A macro sees the template's globals and its parameters. */
    json_t *saved[64];
    size_t n_saved = c->n_frames;
    memcpy(saved, c->frames, n_saved * sizeof *saved);
    c->n_frames = 1;
    loom_status st = push_frame(c, n);
    if (st != LOOM_OK) {
        c->n_frames = n_saved;
        return st;
    }
    json_t *frame = c->frames[1];
    for (size_t i = 0; i < mac->n_targets && st == LOOM_OK; i++) {
        json_t *v = NULL;
        if (i < na) {
            v = json_incref(args[i]);
        } else {
            st = kwarg(c, n, mac->targets[i], &v);
            if (st == LOOM_OK && !v && mac->args.v[i])
                st = ev(c, mac->args.v[i], &v);
        }
        if (v)
            json_object_set_new(frame, mac->targets[i], v);
    }
    sbuf body = {0};
    sbuf *outer = c->out;
    c->out = &body;
    c->depth++;
    if (st == LOOM_OK)
        st = exec_list(c, &mac->body);
    c->depth--;
    c->out = outer;
    pop_frame(c);
    c->n_frames = n_saved;
    memcpy(c->frames, saved, n_saved * sizeof *saved);
    if (st == LOOM_OK) {
        *out = body.oom ? NULL : json_stringn_nocheck(body.p ? body.p : "", body.n);
        if (!*out)
            st = nomem(c);
    }
    free(body.p);
    return st;
}

static loom_status ev_call(ctx *c, const ct_node *n, json_t **out)
{
    json_t *args[8] = {0};
    size_t na = 0;
    *out = NULL;
    loom_status st = ev_args(c, n, args, 8, &na);
    if (st != LOOM_OK)
        return st;
    const ct_node *f = n->a;
    if (f->kind == CT_ATTR) {
        json_t *obj = NULL;
        st = ev(c, f->a, &obj);
        if (st == LOOM_OK)
            st = call_method(c, n, obj, f->name, args, na, out);
        json_decref(obj);
    } else if (f->kind == CT_NAME && !strcmp(f->name, "namespace")) {
        *out = json_object();
        if (na == 1 && json_is_object(args[0]))
            json_object_update(*out, args[0]);
        for (size_t i = 0; i < n->n_kw && st == LOOM_OK; i++) {
            json_t *v = NULL;
            st = ev(c, n->kwargs.v[i], &v);
            if (st == LOOM_OK)
                json_object_set_new(*out, n->kwnames[i], v ? v : json_null());
        }
    } else if (f->kind == CT_NAME && !strcmp(f->name, "dict")) {
        *out = json_object();
        for (size_t i = 0; i < n->n_kw && st == LOOM_OK; i++) {
            json_t *v = NULL;
            st = ev(c, n->kwargs.v[i], &v);
            if (st == LOOM_OK)
                json_object_set_new(*out, n->kwnames[i], v ? v : json_null());
        }
    } else if (f->kind == CT_NAME && !strcmp(f->name, "range") && na >= 1 &&
               na <= 3) {
        for (size_t i = 0; i < na; i++)
            if (!is_int(args[i]))
                st = error(c, n, LOOM_ERR_INVALID, "range() needs integers%s%s", "", "");
        if (st == LOOM_OK) {
            json_int_t a = na > 1 ? inum(args[0]) : 0;
            json_int_t b = na > 1 ? inum(args[1]) : inum(args[0]);
            json_int_t s = na > 2 ? inum(args[2]) : 1;
            if (s == 0 || (b - a) / s > 1000000)
                st = error(c, n, LOOM_ERR_RANGE, "range() too long or zero step%s%s", "", "");
            *out = json_array();
            for (json_int_t i = a; st == LOOM_OK && (s > 0 ? i < b : i > b); i += s)
                json_array_append_new(*out, json_integer(i));
        }
    } else if (f->kind == CT_NAME && !strcmp(f->name, "raise_exception")) {
        json_t *msg = na ? str_of(args[0]) : NULL;
        st = loom_err_set(c->err, LOOM_ERR_INVALID,
                          "chat template line %d: raise_exception: %s", n->line,
                          msg ? json_string_value(msg) : "");
        json_decref(msg);
    } else if (f->kind == CT_NAME && !lookup(c, f->name)) {
        const ct_node *mac = NULL;
        for (size_t i = c->n_macros; i-- > 0 && !mac;)
            if (!strcmp(c->macros[i].name, f->name))
                mac = c->macros[i].node;
        if (mac)
            st = call_macro(c, n, mac, args, na, out);
        else
            st = error(c, n, LOOM_ERR_UNSUPPORTED,
                       "'%s' is not a function this interpreter knows%s",
                       f->name, "");
    } else {
        st = error(c, n, LOOM_ERR_UNSUPPORTED, "this call is not supported%s%s", "", "");
    }
    decref_all(args, na);
    if (st != LOOM_OK) {
        json_decref(*out);
        *out = NULL;
    }
    return st;
}

static loom_status ev(ctx *c, const ct_node *n, json_t **out)
{
    json_t *a = NULL, *b = NULL;
    loom_status st = LOOM_OK;
    *out = NULL;
    switch (n->kind) {
    case CT_LIT:
        *out = json_incref(n->lit);
        return LOOM_OK;
    case CT_NAME:
        *out = json_incref(lookup(c, n->name));
        return LOOM_OK;
    case CT_ATTR:
    case CT_ITEM:
        st = ev(c, n->a, &a);
        if (st != LOOM_OK)
            return st;
        if (!a) {
            st = error(c, n, LOOM_ERR_INVALID, "'%s' is undefined%s",
                       n->a->kind == CT_NAME ? n->a->name : "value", "");
            break;
        }
        if (n->kind == CT_ATTR) {
            if (json_is_object(a))
                *out = json_incref(json_object_get(a, n->name));
            break;
        }
        st = ev(c, n->b, &b);
        if (st == LOOM_OK)
            *out = item(a, b);
        break;
    case CT_SLICE: {
        json_t *step = NULL;
        st = ev(c, n->a, &a);
        if (st == LOOM_OK && n->b)
            st = ev(c, n->b, &b);
        json_t *stop = NULL;
        if (st == LOOM_OK && n->c)
            st = ev(c, n->c, &stop);
        if (st == LOOM_OK && n->args.n)
            st = ev(c, n->args.v[0], &step);
        if (st == LOOM_OK) {
            if (!(json_is_array(a) || json_is_string(a)) ||
                (b && !is_int(b)) || (stop && !is_int(stop)) ||
                (step && !is_int(step)))
                st = error(c, n, LOOM_ERR_INVALID, "cannot slice %s%s",
                           type_name(a), "");
            else if (!(*out = slice(a, b, stop, step)))
                st = error(c, n, LOOM_ERR_INVALID, "bad slice of %s%s",
                           type_name(a), "");
        }
        json_decref(stop);
        json_decref(step);
        break;
    }
    case CT_CALL:
        return ev_call(c, n, out);
    case CT_FILTER:
        st = ev(c, n->a, &a);
        if (st == LOOM_OK)
            st = call_filter(c, n, a, out);
        break;
    case CT_TEST: {
        json_t *args[4] = {0};
        size_t na = 0;
        st = ev(c, n->a, &a);
        if (st == LOOM_OK)
            st = ev_args(c, n, args, 4, &na);
        int r = 0;
        if (st == LOOM_OK)
            st = apply_test(c, n, a, args, na, &r);
        decref_all(args, na);
        if (st == LOOM_OK)
            *out = json_boolean(n->neg ? !r : r);
        break;
    }
    case CT_NOT:
        st = ev(c, n->a, &a);
        if (st == LOOM_OK)
            *out = json_boolean(!truthy(a));
        break;
    case CT_NEG:
        st = ev(c, n->a, &a);
        if (st == LOOM_OK) {
            if (is_int(a))
                *out = json_integer(-inum(a));
            else if (is_num(a))
                *out = json_real(-num(a));
            else
                st = error(c, n, LOOM_ERR_INVALID, "cannot negate %s%s",
                           type_name(a), "");
        }
        break;
    case CT_AND:
    case CT_OR:
        /* Python's and/or give one of their operands. */
        st = ev(c, n->a, &a);
        if (st != LOOM_OK)
            break;
        if (truthy(a) == (n->kind == CT_OR)) {
            *out = a;
            return LOOM_OK;
        }
        json_decref(a);
        return ev(c, n->b, out);
    case CT_COND:
        st = ev(c, n->a, &a);
        if (st != LOOM_OK)
            break;
        if (truthy(a))
            st = ev(c, n->b, out);
        else if (n->c)
            st = ev(c, n->c, out);
        break;
    case CT_BINOP:
        st = ev(c, n->a, &a);
        if (st == LOOM_OK)
            st = ev(c, n->b, &b);
        if (st == LOOM_OK)
            st = binop(c, n, a, b, out);
        break;
    case CT_LIST:
    case CT_DICT:
        *out = n->kind == CT_LIST ? json_array() : json_object();
        if (!*out)
            return nomem(c);
        for (size_t i = 0; i < n->args.n && st == LOOM_OK; i++) {
            json_t *v = NULL;
            st = ev(c, n->args.v[i], &v);
            if (st != LOOM_OK)
                break;
            if (n->kind == CT_LIST) {
                json_array_append_new(*out, v ? v : json_null());
                continue;
            }
            json_t *val = NULL;
            st = ev(c, n->args.v[++i], &val);
            if (st == LOOM_OK && !json_is_string(v))
                st = error(c, n, LOOM_ERR_UNSUPPORTED, "dict keys must be strings%s%s", "", "");
            if (st == LOOM_OK)
                json_object_set_new(*out, json_string_value(v), val ? val : json_null());
            else
                json_decref(val);
            json_decref(v);
        }
        break;
    default:
        st = error(c, n, LOOM_ERR_UNSUPPORTED, "not an expression%s%s", "", "");
    }
    json_decref(a);
    json_decref(b);
    if (st != LOOM_OK) {
        json_decref(*out);
        *out = NULL;
    }
    return st;
}

/* -------------------------------------------------------------- filters */

static loom_status call_filter(ctx *c, const ct_node *n, json_t *v,
                               json_t **out)
{
    json_t *args[4] = {0};
    size_t na = 0;
    const char *f = n->name;
    *out = NULL;
    loom_status st = ev_args(c, n, args, 4, &na);
    if (st != LOOM_OK)
        return st;
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        if (json_is_string(v))
            *out = json_integer((json_int_t)u8_count(json_string_value(v),
                                                     json_string_length(v)));
        else if (json_is_array(v))
            *out = json_integer((json_int_t)json_array_size(v));
        else if (json_is_object(v))
            *out = json_integer((json_int_t)json_object_size(v));
        else
            st = error(c, n, LOOM_ERR_INVALID, "%s has no length%s", type_name(v), "");
    } else if (!strcmp(f, "tojson")) {
        json_t *ind = NULL;
        st = kwarg(c, n, "indent", &ind);
        int indent = -1;
        if (ind && is_int(ind))
            indent = (int)inum(ind);
        else if (na && is_int(args[0]))
            indent = (int)inum(args[0]);
        json_decref(ind);
        sbuf b = {0};
        to_json(&b, v, indent, 0);
        *out = b.oom ? NULL : json_stringn_nocheck(b.p ? b.p : "", b.n);
        free(b.p);
    } else if (!strcmp(f, "trim") || !strcmp(f, "strip")) {
        json_t *s = str_of(v);
        *out = s ? strip(s, na && json_is_string(args[0]) ? args[0] : NULL, 1, 1) : NULL;
        json_decref(s);
    } else if (!strcmp(f, "upper") || !strcmp(f, "lower") || !strcmp(f, "title") ||
               !strcmp(f, "capitalize")) {
        json_t *s = str_of(v);
        int mode = f[0] == 'l' ? 0 : f[0] == 'u' ? 1 : f[0] == 't' ? 2 : 3;
        *out = s ? change_case(s, mode) : NULL;
        json_decref(s);
    } else if (!strcmp(f, "string")) {
        *out = str_of(v);
    } else if (!strcmp(f, "safe") || !strcmp(f, "e") || !strcmp(f, "escape")) {
        /* HF renders without autoescaping: these leave text as it is. */
        *out = str_of(v);
    } else if (!strcmp(f, "default") || !strcmp(f, "d")) {
        int boolean = na > 1 && truthy(args[1]);
        int use_default = !v || (boolean && !truthy(v));
        *out = json_incref(use_default ? (na ? args[0] : NULL) : v);
        if (use_default && !na)
            *out = json_string("");
    } else if (!strcmp(f, "first") || !strcmp(f, "last")) {
        json_t *idx = json_integer(f[0] == 'f' ? 0 : -1);
        *out = item(v, idx);
        json_decref(idx);
        if (!json_is_array(v) && !json_is_string(v))
            st = error(c, n, LOOM_ERR_INVALID, "%s of %s", f, type_name(v));
    } else if (!strcmp(f, "join")) {
        if (!json_is_array(v)) {
            st = error(c, n, LOOM_ERR_INVALID, "join of %s%s", type_name(v), "");
        } else {
            json_t *sep = na && json_is_string(args[0]) ? args[0] : NULL;
            json_t *empty = json_string("");
            st = call_method(c, n, sep ? sep : empty, "join", &v, 1, out);
            json_decref(empty);
        }
    } else if (!strcmp(f, "int")) {
        if (is_num(v))
            *out = json_integer((json_int_t)num(v));
        else if (json_is_string(v))
            *out = json_integer(strtoll(json_string_value(v), NULL, 10));
        else
            *out = json_integer(0);
    } else if (!strcmp(f, "float")) {
        *out = json_real(is_num(v) ? num(v)
                         : json_is_string(v) ? strtod(json_string_value(v), NULL)
                                             : 0.0);
    } else if (!strcmp(f, "abs") && is_num(v)) {
        *out = is_int(v) ? json_integer(llabs(inum(v))) : json_real(fabs(num(v)));
    } else if (!strcmp(f, "list")) {
        if (json_is_array(v)) {
            *out = json_copy(v);
        } else if (json_is_string(v)) {
            json_t *l = json_array();
            const char *s = json_string_value(v);
            size_t len = json_string_length(v);
            for (size_t i = 0; i < len;) {
                size_t k = u8_len_at(s + i, len - i);
                json_array_append_new(l, json_stringn_nocheck(s + i, k));
                i += k;
            }
            *out = l;
        } else if (json_is_object(v)) {
            st = call_method(c, n, v, "keys", NULL, 0, out);
        } else {
            st = error(c, n, LOOM_ERR_INVALID, "list of %s%s", type_name(v), "");
        }
    } else if (!strcmp(f, "reverse")) {
        if (json_is_array(v) || json_is_string(v)) {
            json_t *step = json_integer(-1);
            *out = slice(v, NULL, NULL, step);
            json_decref(step);
        } else {
            st = error(c, n, LOOM_ERR_INVALID, "reverse of %s%s", type_name(v), "");
        }
    } else if (!strcmp(f, "items") && json_is_object(v)) {
        st = call_method(c, n, v, "items", NULL, 0, out);
    } else if (!strcmp(f, "replace") && na >= 2 && json_is_string(args[0]) &&
               json_is_string(args[1])) {
        json_t *s = str_of(v);
        *out = s ? replace(s, args[0], args[1], na > 2 ? inum(args[2]) : -1) : NULL;
        json_decref(s);
    } else if ((!strcmp(f, "selectattr") || !strcmp(f, "rejectattr")) && na >= 1 &&
               json_is_array(v) && json_is_string(args[0])) {
        /* selectattr("attr") / selectattr("attr", "test"[, arg]) */
        int select = f[0] == 's';
        *out = json_array();
        ct_node tn = {.kind = CT_TEST, .line = n->line};
        tn.name = na > 1 && json_is_string(args[1]) ? (char *)json_string_value(args[1])
                                                    : NULL;
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            json_t *attr = json_is_object(x)
                               ? json_object_get(x, json_string_value(args[0]))
                               : NULL;
            int r;
            if (tn.name) {
                st = apply_test(c, &tn, attr, args + 2, na > 2 ? na - 2 : 0, &r);
                if (st != LOOM_OK)
                    break;
            } else {
                r = truthy(attr);
            }
            if (r == select)
                json_array_append(*out, x);
        }
    } else if (!strcmp(f, "map") && json_is_array(v)) {
        json_t *attr = NULL;
        st = kwarg(c, n, "attribute", &attr);
        if (st == LOOM_OK && json_is_string(attr)) {
            *out = json_array();
            size_t i;
            json_t *x;
            json_array_foreach(v, i, x)
            {
                json_t *y = json_is_object(x) ? json_object_get(x, json_string_value(attr))
                                              : NULL;
                json_array_append(*out, y ? y : json_null());
            }
        } else if (st == LOOM_OK) {
            st = error(c, n, LOOM_ERR_UNSUPPORTED, "map() needs attribute=%s%s", "", "");
        }
        json_decref(attr);
    } else {
        st = error(c, n, LOOM_ERR_UNSUPPORTED,
                   "the filter '%s' is not supported for %s", f, type_name(v));
    }
    decref_all(args, na);
    if (st == LOOM_OK && !*out && strcmp(f, "first") && strcmp(f, "last") &&
        strcmp(f, "default") && strcmp(f, "d"))
        st = nomem(c);
    if (st != LOOM_OK) {
        json_decref(*out);
        *out = NULL;
    }
    return st;
}

/* ------------------------------------------------------------ statements */

static loom_status assign(ctx *c, const ct_node *n, json_t *v)
{
    json_t *frame = c->frames[c->n_frames - 1];
    if (n->attr) {
        json_t *ns = lookup(c, n->targets[0]);
        if (!json_is_object(ns))
            return error(c, n, LOOM_ERR_INVALID,
                         "cannot set an attribute of '%s' (not a namespace)%s",
                         n->targets[0], "");
        json_object_set(ns, n->attr, v ? v : json_null());
        return LOOM_OK;
    }
    if (n->n_targets == 1) {
        if (v)
            json_object_set(frame, n->targets[0], v);
        else
            json_object_del(frame, n->targets[0]);
        return LOOM_OK;
    }
    if (!json_is_array(v) || json_array_size(v) != n->n_targets)
        return error(c, n, LOOM_ERR_INVALID, "cannot unpack %s into %s names",
                     type_name(v), "several");
    for (size_t i = 0; i < n->n_targets; i++)
        json_object_set(frame, n->targets[i], json_array_get(v, i));
    return LOOM_OK;
}

static loom_status exec_for(ctx *c, const ct_node *n)
{
    json_t *seq = NULL;
    loom_status st = ev(c, n->a, &seq);
    if (st != LOOM_OK)
        return st;
    json_t *items = NULL;
    if (json_is_array(seq)) {
        items = json_incref(seq);
    } else if (json_is_object(seq)) {
        st = call_method(c, n, seq, "keys", NULL, 0, &items);
    } else if (json_is_string(seq)) {
        json_t *empty = json_array();
        const char *s = json_string_value(seq);
        size_t len = json_string_length(seq);
        for (size_t i = 0; i < len;) {
            size_t k = u8_len_at(s + i, len - i);
            json_array_append_new(empty, json_stringn_nocheck(s + i, k));
            i += k;
        }
        items = empty;
    } else if (!seq) {
        st = error(c, n, LOOM_ERR_INVALID, "'%s' is undefined (for loop)%s",
                   n->a->kind == CT_NAME ? n->a->name : "value", "");
    } else {
        st = error(c, n, LOOM_ERR_INVALID, "cannot loop over %s%s",
                   type_name(seq), "");
    }
    json_decref(seq);
    if (st != LOOM_OK)
        return st;
    st = push_frame(c, n);
    if (st != LOOM_OK) {
        json_decref(items);
        return st;
    }
    json_t *frame = c->frames[c->n_frames - 1];
    /* The loop filter runs first, so loop.length counts what is kept. */
    if (n->b) {
        json_t *kept = json_array();
        size_t i;
        json_t *x;
        json_array_foreach(items, i, x)
        {
            ct_node tgt = {.kind = CT_SET, .line = n->line,
                           .targets = n->targets, .n_targets = n->n_targets};
            st = assign(c, &tgt, x);
            json_t *r = NULL;
            if (st == LOOM_OK)
                st = ev(c, n->b, &r);
            if (st != LOOM_OK)
                break;
            if (truthy(r))
                json_array_append(kept, x);
            json_decref(r);
        }
        json_decref(items);
        items = kept;
    }
    size_t len = json_array_size(items);
    for (size_t i = 0; i < len && st == LOOM_OK; i++) {
        json_t *x = json_array_get(items, i);
        ct_node tgt = {.kind = CT_SET, .line = n->line, .targets = n->targets,
                       .n_targets = n->n_targets};
        st = assign(c, &tgt, x);
        if (st != LOOM_OK)
            break;
        json_t *loop = json_pack(
            "{s:I, s:I, s:b, s:b, s:I, s:I, s:I}", "index", (json_int_t)i + 1,
            "index0", (json_int_t)i, "first", i == 0, "last", i + 1 == len,
            "length", (json_int_t)len, "revindex", (json_int_t)(len - i),
            "revindex0", (json_int_t)(len - i - 1));
        if (!loop) {
            st = nomem(c);
            break;
        }
        if (i > 0)
            json_object_set(loop, "previtem", json_array_get(items, i - 1));
        if (i + 1 < len)
            json_object_set(loop, "nextitem", json_array_get(items, i + 1));
        json_object_set_new(frame, "loop", loop);
        st = exec_list(c, &n->body);
        c->cont = 0;
        if (c->brk) {
            c->brk = 0;
            break;
        }
    }
    pop_frame(c);
    if (st == LOOM_OK && len == 0 && n->orelse.n)
        st = exec_list(c, &n->orelse);
    json_decref(items);
    return st;
}

static loom_status exec(ctx *c, const ct_node *n)
{
    loom_status st = LOOM_OK;
    json_t *v = NULL;
    switch (n->kind) {
    case CT_TEXT:
        sb_add(c->out, n->name, n->name_len);
        break;
    case CT_OUTPUT:
        st = ev(c, n->a, &v);
        if (st == LOOM_OK)
            py_str(c->out, v, 1);
        break;
    case CT_IF:
        st = ev(c, n->a, &v);
        if (st == LOOM_OK)
            st = exec_list(c, truthy(v) ? &n->body : &n->orelse);
        break;
    case CT_FOR:
        st = exec_for(c, n);
        break;
    case CT_SET:
        if (n->a) {
            st = ev(c, n->a, &v);
        } else {
            sbuf body = {0};
            sbuf *outer = c->out;
            c->out = &body;
            st = exec_list(c, &n->body);
            c->out = outer;
            if (st == LOOM_OK)
                v = json_stringn_nocheck(body.p ? body.p : "", body.n);
            free(body.p);
        }
        if (st == LOOM_OK)
            st = assign(c, n, v);
        break;
    case CT_BREAK:
        c->brk = 1;
        break;
    case CT_CONTINUE:
        c->cont = 1;
        break;
    case CT_MACRO:
        if (c->n_macros == sizeof c->macros / sizeof c->macros[0])
            return error(c, n, LOOM_ERR_RANGE, "too many macros%s%s", "", "");
        c->macros[c->n_macros].name = n->name;
        c->macros[c->n_macros++].node = n;
        break;
    case CT_BLOCK:
        st = exec_list(c, &n->body);
        break;
    default:
        st = error(c, n, LOOM_ERR_UNSUPPORTED, "not a statement%s%s", "", "");
    }
    json_decref(v);
    if (st == LOOM_OK && c->out->oom)
        st = nomem(c);
    return st;
}

static loom_status exec_list(ctx *c, const ct_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        loom_status st = exec(c, l->v[i]);
        if (st != LOOM_OK)
            return st;
        if (c->brk || c->cont)
            break;
    }
    return LOOM_OK;
}

loom_status loom__ct_render(const loom_chat_template *t, json_t *vars,
                            char **out, loom_err *err)
{
    sbuf b = {0};
    ctx c = {.out = &b, .err = err};
    c.frames[0] = json_incref(vars);
    c.n_frames = 1;
    /* The template's own top-level sets go in a frame over the inputs, so
     * the caller's objects are never written to. */
    loom_status st = push_frame(&c, t->body.n ? t->body.v[0] : NULL);
    if (st == LOOM_OK)
        st = exec_list(&c, &t->body);
    while (c.n_frames)
        pop_frame(&c);
    if (st == LOOM_OK && (b.oom || !(b.p || (b.p = calloc(1, 1)))))
        st = nomem(&c);
    if (st != LOOM_OK) {
        free(b.p);
        return st;
    }
    *out = b.p;
    return LOOM_OK;
}
