/* Chat template filters kept apart from the interpreter, each as Jinja 3
 * (and transformers' tojson) defines it: sort, dictsort, unique, sum, max,
 * min, round, format, indent, center, batch, tojson, e/escape. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/platform.h>

#include "chat_template_impl.h"

static const char *const KNOWN[] = {"sort",   "dictsort", "unique", "sum",
                                    "max",    "min",      "round",  "format",
                                    "indent", "center",   "batch",  "tojson",
                                    "escape", "e",        NULL};

int loom__ct_filter_known(const char *name)
{
    for (size_t i = 0; KNOWN[i]; i++)
        if (!strcmp(name, KNOWN[i]))
            return 1;
    return 0;
}

/* One call's arguments: positional first, then by keyword. */
typedef struct fargs {
    const char *name;
    int line;
    json_t **args;
    size_t na;
    char **kw;
    json_t **kwv;
    size_t n_kw;
    loom_err *err;
} fargs;

/* The argument at position POS or named NAME; *given when it was passed. */
static json_t *arg(const fargs *a, size_t pos, const char *name, int *given)
{
    for (size_t i = 0; i < a->n_kw; i++)
        if (!strcmp(a->kw[i], name)) {
            if (given)
                *given = 1;
            return a->kwv[i];
        }
    if (given)
        *given = pos < a->na;
    return pos < a->na ? a->args[pos] : NULL;
}

static int arg_bool(const fargs *a, size_t pos, const char *name, int def)
{
    int given = 0;
    json_t *v = arg(a, pos, name, &given);
    return given ? loom__ct_truthy(v) : def;
}

static loom_status fail(const fargs *a, loom_status code, const char *what)
{
    return loom_err_set(a->err, code, "chat template line %d: %s: %s", a->line,
                        a->name, what);
}

static loom_status nomem(const fargs *a)
{
    return loom_err_set(a->err, LOOM_ERR_NOMEM, "chat template: out of memory");
}

/* The text of B as a new string (B freed); past CT_MAX_STR an error. */
static loom_status take(const fargs *a, ct_buf *b, json_t **out)
{
    int why = b->oom;
    *out = loom__ct_sb_take(b);
    if (why == 2)
        return loom_err_set(a->err, LOOM_ERR_RANGE,
                            "chat template line %d: %s: a string over the "
                            "render's size limit (%zu MiB)",
                            a->line, a->name, CT_MAX_STR >> 20);
    return *out ? LOOM_OK : nomem(a);
}

/* Jinja's attribute="a.b.0": dotted names and list indices. */
static json_t *attr_path(json_t *v, const char *path)
{
    char part[128];
    while (v && *path) {
        size_t n = strcspn(path, ".");
        if (n >= sizeof part)
            return NULL;
        memcpy(part, path, n);
        part[n] = 0;
        path += n + (path[n] == '.');
        char *end;
        long idx = strtol(part, &end, 10);
        if (json_is_object(v))
            v = json_object_get(v, part);
        else if (json_is_array(v) && *part && !*end && idx >= 0)
            v = json_array_get(v, (size_t)idx);
        else
            return NULL;
    }
    return v;
}

/* -------------------------------------------------- Python's ordering */

/* a < b as Python orders them: -1, 0, 1, or 2 when they cannot be ordered
 * (Python's TypeError). */
static int py_cmp(json_t *a, json_t *b)
{
    if (loom__ct_is_num(a) && loom__ct_is_num(b)) {
        if (loom__ct_is_int(a) && loom__ct_is_int(b)) {
            json_int_t x = loom__ct_inum(a), y = loom__ct_inum(b);
            return x < y ? -1 : x > y;
        }
        double x = loom__ct_num(a), y = loom__ct_num(b);
        return x < y ? -1 : x > y;
    }
    if (json_is_string(a) && json_is_string(b)) {
        /* UTF-8 byte order is code point order */
        size_t la = json_string_length(a), lb = json_string_length(b);
        int r = memcmp(json_string_value(a), json_string_value(b),
                       la < lb ? la : lb);
        return r ? (r < 0 ? -1 : 1) : la < lb ? -1 : la > lb;
    }
    if (json_is_array(a) && json_is_array(b)) {
        size_t la = json_array_size(a), lb = json_array_size(b);
        for (size_t i = 0; i < la && i < lb; i++) {
            int r = py_cmp(json_array_get(a, i), json_array_get(b, i));
            if (r)
                return r;
        }
        return la < lb ? -1 : la > lb;
    }
    return 2;
}

/* The sort key of V: its attribute, lowercased when it is a str and the
 * comparison ignores case (Jinja's ignore_case). New reference or NULL. */
static json_t *sort_key(json_t *v, const char *attribute, int case_sensitive)
{
    json_t *k = attribute ? attr_path(v, attribute) : v;
    if (!k)
        return NULL;
    if (!case_sensitive && json_is_string(k))
        return loom__ct_change_case(k, 0);
    return json_incref(k);
}

typedef struct keyed {
    json_t *key, *val;
    size_t idx;
} keyed;

/* a before b in the sort: the key order (reversed on request), ties by
 * position, so the sort is stable as Python's; *failed on keys that cannot
 * be ordered. */
static int keyed_before(const keyed *a, const keyed *b, int reverse,
                        int *failed)
{
    int r = a->key && b->key ? py_cmp(a->key, b->key) : 2;
    if (r == 2) {
        *failed = 1;
        r = 0;
    }
    if (reverse)
        r = -r;
    return r ? r < 0 : a->idx < b->idx;
}

/* Merge sort of k[0..n) through tmp (n entries). */
static void merge_sort(keyed *k, keyed *tmp, size_t n, int reverse, int *failed)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    merge_sort(k, tmp, h, reverse, failed);
    merge_sort(k + h, tmp, n - h, reverse, failed);
    size_t i = 0, j = h, o = 0;
    while (i < h && j < n)
        tmp[o++] =
            keyed_before(&k[j], &k[i], reverse, failed) ? k[j++] : k[i++];
    while (i < h)
        tmp[o++] = k[i++];
    while (j < n)
        tmp[o++] = k[j++];
    memcpy(k, tmp, n * sizeof *k);
}

/* Keys of the items of LIST (for dictsort: [k, v] pairs keyed by pos). */
static keyed *make_keys(json_t *list, const char *attribute, int cs, int pos,
                        size_t *n)
{
    *n = json_array_size(list);
    keyed *k = calloc(*n ? *n : 1, sizeof *k);
    if (!k)
        return NULL;
    for (size_t i = 0; i < *n; i++) {
        json_t *x = json_array_get(list, i);
        k[i].val = x;
        k[i].idx = i;
        k[i].key = pos >= 0 ? sort_key(json_array_get(x, (size_t)pos), NULL, cs)
                            : sort_key(x, attribute, cs);
    }
    return k;
}

static void free_keys(keyed *k, size_t n)
{
    for (size_t i = 0; k && i < n; i++)
        json_decref(k[i].key);
    free(k);
}

static loom_status sort_keys(const fargs *a, keyed *k, size_t n, int reverse)
{
    int failed = n == 1 && !k[0].key;
    keyed *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp)
        return nomem(a);
    merge_sort(k, tmp, n, reverse, &failed);
    free(tmp);
    if (failed)
        return fail(a, LOOM_ERR_INVALID,
                    "the items cannot be ordered (mixed or missing types)");
    return LOOM_OK;
}

static json_t *values_of(keyed *k, size_t n)
{
    json_t *out = json_array();
    for (size_t i = 0; out && i < n; i++)
        json_array_append(out, k[i].val);
    return out;
}

static const char *str_arg(const fargs *a, size_t pos, const char *name)
{
    return json_string_value(arg(a, pos, name, NULL));
}

static loom_status f_sort(const fargs *a, json_t *v, json_t **out)
{
    if (!json_is_array(v))
        return fail(a, LOOM_ERR_INVALID, "not a list");
    size_t n;
    keyed *k = make_keys(v, str_arg(a, 2, "attribute"),
                         arg_bool(a, 1, "case_sensitive", 0), -1, &n);
    if (!k)
        return nomem(a);
    loom_status st = sort_keys(a, k, n, arg_bool(a, 0, "reverse", 0));
    if (st == LOOM_OK && !(*out = values_of(k, n)))
        st = nomem(a);
    free_keys(k, n);
    return st;
}

static loom_status f_dictsort(const fargs *a, json_t *v, json_t **out)
{
    if (!json_is_object(v))
        return fail(a, LOOM_ERR_INVALID, "not a dict");
    const char *by = str_arg(a, 1, "by");
    if (by && strcmp(by, "key") && strcmp(by, "value"))
        return fail(a, LOOM_ERR_INVALID, "by must be 'key' or 'value'");
    json_t *pairs = json_array();
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x)
        json_array_append_new(pairs, json_pack("[sO]", key, x));
    size_t n;
    keyed *k = make_keys(pairs, NULL, arg_bool(a, 0, "case_sensitive", 0),
                         by && !strcmp(by, "value"), &n);
    loom_status st =
        k ? sort_keys(a, k, n, arg_bool(a, 2, "reverse", 0)) : nomem(a);
    if (st == LOOM_OK && !(*out = values_of(k, n)))
        st = nomem(a);
    free_keys(k, n);
    json_decref(pairs);
    return st;
}

static loom_status f_unique(const fargs *a, json_t *v, json_t **out)
{
    if (!json_is_array(v))
        return fail(a, LOOM_ERR_INVALID, "not a list");
    int cs = arg_bool(a, 0, "case_sensitive", 0);
    const char *attribute = str_arg(a, 1, "attribute");
    json_t *seen = json_array();
    *out = json_array();
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x)
    {
        json_t *key = sort_key(x, attribute, cs);
        int dup = 0;
        size_t j;
        json_t *y;
        json_array_foreach(seen, j, y) dup = dup || loom__ct_equal(key, y);
        if (!dup) {
            json_array_append(seen, key ? key : json_null());
            json_array_append(*out, x);
        }
        json_decref(key);
    }
    json_decref(seen);
    return *out ? LOOM_OK : nomem(a);
}

/* Python's a + b over ints and floats. */
static json_t *num_add(json_t *a, json_t *b)
{
    if (loom__ct_is_int(a) && loom__ct_is_int(b))
        return json_integer(loom__ct_inum(a) + loom__ct_inum(b));
    return json_real(loom__ct_num(a) + loom__ct_num(b));
}

static loom_status f_sum(const fargs *a, json_t *v, json_t **out)
{
    if (!json_is_array(v))
        return fail(a, LOOM_ERR_INVALID, "not a list");
    const char *attribute = str_arg(a, 0, "attribute");
    json_t *start = arg(a, 1, "start", NULL);
    json_t *acc = start ? json_incref(start) : json_integer(0);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x)
    {
        json_t *y = attribute ? attr_path(x, attribute) : x;
        if (!loom__ct_is_num(acc) || !loom__ct_is_num(y)) {
            json_decref(acc);
            return fail(a, LOOM_ERR_INVALID, "only numbers can be summed");
        }
        json_t *s = num_add(acc, y);
        json_decref(acc);
        acc = s;
    }
    *out = acc;
    return acc ? LOOM_OK : nomem(a);
}

static loom_status f_minmax(const fargs *a, json_t *v, int max, json_t **out)
{
    if (!json_is_array(v))
        return fail(a, LOOM_ERR_INVALID, "not a list");
    size_t n;
    keyed *k = make_keys(v, str_arg(a, 1, "attribute"),
                         arg_bool(a, 0, "case_sensitive", 0), -1, &n);
    if (!k)
        return nomem(a);
    loom_status st = LOOM_OK;
    size_t best = 0;
    for (size_t i = 0; i < n && st == LOOM_OK; i++) {
        int r = k[i].key ? py_cmp(k[i].key, k[best].key) : 2;
        if (r == 2 || !k[best].key)
            st = fail(a, LOOM_ERR_INVALID, "the items cannot be ordered");
        else if (max ? r > 0 : r < 0)
            best = i;
    }
    /* an empty list gives Undefined, which prints as nothing */
    if (st == LOOM_OK && n)
        *out = json_incref(k[best].val);
    free_keys(k, n);
    return st;
}

static loom_status f_round(const fargs *a, json_t *v, json_t **out)
{
    if (!loom__ct_is_num(v))
        return fail(a, LOOM_ERR_INVALID, "not a number");
    json_t *p = arg(a, 0, "precision", NULL);
    const char *method = str_arg(a, 1, "method");
    if (method && strcmp(method, "common") && strcmp(method, "ceil") &&
        strcmp(method, "floor"))
        return fail(a, LOOM_ERR_INVALID,
                    "method must be 'common', 'ceil' or 'floor'");
    json_int_t prec = p && loom__ct_is_int(p) ? loom__ct_inum(p) : 0;
    if (prec < -300 || prec > 300)
        return fail(a, LOOM_ERR_RANGE, "precision out of range");
    /* Python's round(int, n) stays an int */
    if (loom__ct_is_int(v) && (!method || !strcmp(method, "common")) &&
        prec >= 0) {
        *out = json_integer(loom__ct_inum(v));
        return *out ? LOOM_OK : nomem(a);
    }
    double x = loom__ct_num(v), scale = pow(10.0, (double)prec), r;
    if (method && !strcmp(method, "ceil"))
        r = ceil(x * scale) / scale;
    else if (method && !strcmp(method, "floor"))
        r = floor(x * scale) / scale;
    else if (prec >= 0 && fabs(x) < 1e15) {
        /* Python's round(): the exact binary value rounded to PREC
         * decimals, halves to even, which is what printf's %.*f does */
        char tmp[400];
        snprintf(tmp, sizeof tmp, "%.*f", (int)prec, x);
        r = strtod(tmp, NULL);
    } else {
        r = nearbyint(x * scale) / scale;
    }
    *out = json_real(r);
    return *out ? LOOM_OK : nomem(a);
}

#define FMT_MAX_WIDTH 400

/* printf-style VALUE % ARGS (Python's str % tuple) for the conversions
 * templates use: s r d i f F e E g G x X o c %. */
static loom_status f_format(const fargs *a, json_t *v, json_t **out)
{
    if (!json_is_string(v))
        return fail(a, LOOM_ERR_INVALID, "the format is not a str");
    if (a->n_kw)
        return fail(a, LOOM_ERR_UNSUPPORTED, "keyword arguments");
    const char *f = json_string_value(v);
    size_t next = 0;
    ct_buf b = {0};
    loom_status st = LOOM_OK;
    while (*f && st == LOOM_OK) {
        if (*f != '%') {
            loom__ct_sb_add(&b, f++, 1);
            continue;
        }
        const char *spec = f++;
        while (*f && strchr("-+ #0", *f))
            f++;
        /* width and precision: at most FMT_MAX_WIDTH, what tmp holds */
        long width = 0, prec = 0;
        while (*f >= '0' && *f <= '9' && width <= FMT_MAX_WIDTH)
            width = width * 10 + (*f++ - '0');
        if (*f == '.') {
            f++;
            while (*f >= '0' && *f <= '9' && prec <= FMT_MAX_WIDTH)
                prec = prec * 10 + (*f++ - '0');
        }
        if (width > FMT_MAX_WIDTH || prec > FMT_MAX_WIDTH) {
            st = fail(a, LOOM_ERR_RANGE, "format width or precision over 400");
            break;
        }
        char conv = *f ? *f++ : 0;
        if (conv == '%') {
            loom__ct_sb_add(&b, "%", 1);
            continue;
        }
        if (!conv || !strchr("srdifFeEgGxXoc", conv)) {
            st = fail(a, LOOM_ERR_UNSUPPORTED, "unsupported format character");
            break;
        }
        if (next >= a->na) {
            st = fail(a, LOOM_ERR_INVALID, "not enough arguments for format");
            break;
        }
        json_t *x = a->args[next++];
        char fmt[32], tmp[1024]; /* "%.400f" of 1e308: 711 bytes */
        size_t sl = (size_t)(f - 1 - spec);
        if (sl > 20) {
            st = fail(a, LOOM_ERR_UNSUPPORTED, "format spec too long");
            break;
        }
        memcpy(fmt, spec, sl);
        if (conv == 's' || conv == 'r') {
            ct_buf s = {0};
            loom__ct_py_str(&s, x, conv == 's');
            snprintf(fmt + sl, sizeof fmt - sl, "s");
            /* width and precision count characters; templates pad ASCII */
            char *str = s.p ? s.p : "";
            int w = snprintf(NULL, 0, fmt, str);
            char *o = w >= 0 ? malloc((size_t)w + 1) : NULL;
            if (o) {
                snprintf(o, (size_t)w + 1, fmt, str);
                loom__ct_sb_add(&b, o, (size_t)w);
            } else {
                b.oom = 1;
            }
            free(o);
            free(s.p);
            continue;
        }
        if (!loom__ct_is_num(x)) {
            st = fail(a, LOOM_ERR_INVALID, "a number is required");
            break;
        }
        if (strchr("dixXoc", conv)) {
            snprintf(fmt + sl, sizeof fmt - sl, "ll%c",
                     conv == 'i' ? 'd' : conv);
            long long iv = loom__ct_is_int(x) ? (long long)loom__ct_inum(x)
                                              : (long long)loom__ct_num(x);
            if (conv == 'c')
                snprintf(fmt + sl, sizeof fmt - sl, "c");
            if (conv == 'c')
                snprintf(tmp, sizeof tmp, fmt, (int)iv);
            else
                snprintf(tmp, sizeof tmp, fmt, iv);
        } else {
            snprintf(fmt + sl, sizeof fmt - sl, "%c", conv);
            snprintf(tmp, sizeof tmp, fmt, loom__ct_num(x));
        }
        loom__ct_sb_str(&b, tmp);
    }
    if (st == LOOM_OK && next < a->na)
        st = fail(a, LOOM_ERR_INVALID,
                  "not all arguments converted during string formatting");
    if (st != LOOM_OK) {
        free(b.p);
        return st;
    }
    return take(a, &b, out);
}

static loom_status f_indent(const fargs *a, json_t *v, json_t **out)
{
    json_t *s = loom__ct_str_of(v);
    if (!s)
        return nomem(a);
    json_t *w = arg(a, 0, "width", NULL);
    char pad[256];
    if (json_is_string(w))
        snprintf(pad, sizeof pad, "%s", json_string_value(w));
    else {
        json_int_t n = w && loom__ct_is_int(w) ? loom__ct_inum(w) : 4;
        if (n < 0 || n >= (json_int_t)sizeof pad) {
            json_decref(s);
            return fail(a, LOOM_ERR_RANGE, "width out of range");
        }
        memset(pad, ' ', (size_t)n);
        pad[n] = 0;
    }
    int first = arg_bool(a, 1, "first", 0), blank = arg_bool(a, 2, "blank", 0);
    const char *p = json_string_value(s), *end = p + json_string_length(s);
    ct_buf b = {0};
    /* Jinja's: lines after the first get the pad, empty ones only with
     * blank=True; first=True pads the first line as well */
    if (first)
        loom__ct_sb_str(&b, pad);
    for (int line = 0;; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (line > 0) {
            loom__ct_sb_add(&b, "\n", 1);
            if (len > 0 || blank)
                loom__ct_sb_str(&b, pad);
        }
        loom__ct_sb_add(&b, p, len);
        if (!nl || b.oom)
            break;
        p = nl + 1;
    }
    json_decref(s);
    return take(a, &b, out);
}

static loom_status f_center(const fargs *a, json_t *v, json_t **out)
{
    json_t *s = loom__ct_str_of(v);
    if (!s)
        return nomem(a);
    json_t *w = arg(a, 0, "width", NULL);
    json_int_t width = w && loom__ct_is_int(w) ? loom__ct_inum(w) : 80;
    json_int_t len = (json_int_t)loom__ct_u8_count(json_string_value(s),
                                                   json_string_length(s));
    if (width > 1000000) {
        json_decref(s);
        return fail(a, LOOM_ERR_RANGE, "width out of range");
    }
    if (width <= len) {
        *out = s;
        return LOOM_OK;
    }
    /* CPython's str.center: the odd space goes left when width is odd */
    json_int_t marg = width - len, left = marg / 2 + (marg & width & 1);
    ct_buf b = {0};
    for (json_int_t i = 0; i < left && !b.oom; i++)
        loom__ct_sb_add(&b, " ", 1);
    loom__ct_sb_add(&b, json_string_value(s), json_string_length(s));
    for (json_int_t i = 0; i < marg - left && !b.oom; i++)
        loom__ct_sb_add(&b, " ", 1);
    json_decref(s);
    return take(a, &b, out);
}

static loom_status f_batch(const fargs *a, json_t *v, json_t **out)
{
    json_t *c = arg(a, 0, "linecount", NULL);
    int fill_given = 0;
    json_t *fill = arg(a, 1, "fill_with", &fill_given);
    if (!json_is_array(v) || !c || !loom__ct_is_int(c) || loom__ct_inum(c) < 1)
        return fail(a, LOOM_ERR_INVALID,
                    "needs a list and a line count of at least 1");
    size_t k = (size_t)loom__ct_inum(c), n = json_array_size(v);
    /* the fill pads the last row to K items: bounded as any list is */
    if (fill_given && (uint64_t)loom__ct_inum(c) > CT_MAX_ITEMS)
        return fail(a, LOOM_ERR_RANGE,
                    "the line count is over the render's list limit");
    *out = json_array();
    json_t *row = NULL;
    for (size_t i = 0; *out && i < n; i++) {
        if (!row)
            row = json_array();
        json_array_append(row, json_array_get(v, i));
        if (json_array_size(row) == k) {
            json_array_append_new(*out, row);
            row = NULL;
        }
    }
    if (row) {
        while (fill_given && json_array_size(row) < k)
            json_array_append(row, fill ? fill : json_null());
        json_array_append_new(*out, row);
    }
    return *out ? LOOM_OK : nomem(a);
}

/* transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False). */
static loom_status f_tojson(const fargs *a, json_t *v, json_t **out)
{
    ct_json_opts o = {-1, NULL, NULL, 0, 0};
    o.ascii = arg_bool(a, 0, "ensure_ascii", 0);
    json_t *ind = arg(a, 1, "indent", NULL);
    if (ind && loom__ct_is_int(ind)) {
        /* the output's size is bounded anyway (CT_MAX_STR); this keeps
         * indent x depth in range */
        if (loom__ct_inum(ind) > 1000)
            return fail(a, LOOM_ERR_RANGE, "indent over 1000");
        o.indent = (int)loom__ct_inum(ind);
    } else if (json_is_string(ind) || (ind && !json_is_null(ind)))
        return fail(a, LOOM_ERR_UNSUPPORTED, "indent must be an int");
    json_t *sep = arg(a, 2, "separators", NULL);
    if (sep && !json_is_null(sep)) {
        if (!json_is_array(sep) || json_array_size(sep) != 2 ||
            !json_is_string(json_array_get(sep, 0)) ||
            !json_is_string(json_array_get(sep, 1)))
            return fail(a, LOOM_ERR_INVALID,
                        "separators must be two strs (item, key)");
        o.item_sep = json_string_value(json_array_get(sep, 0));
        o.key_sep = json_string_value(json_array_get(sep, 1));
    }
    o.sort_keys = arg_bool(a, 3, "sort_keys", 0);
    ct_buf b = {0};
    loom__ct_to_json_opts(&b, v, &o, 0);
    return take(a, &b, out);
}

/* markupsafe's escape: & < > " ' as entities. */
static loom_status f_escape(const fargs *a, json_t *v, json_t **out)
{
    json_t *s = loom__ct_str_of(v);
    if (!s)
        return nomem(a);
    ct_buf b = {0};
    const char *p = json_string_value(s);
    for (size_t i = 0, n = json_string_length(s); i < n; i++) {
        switch (p[i]) {
        case '&':
            loom__ct_sb_str(&b, "&amp;");
            break;
        case '<':
            loom__ct_sb_str(&b, "&lt;");
            break;
        case '>':
            loom__ct_sb_str(&b, "&gt;");
            break;
        case '"':
            loom__ct_sb_str(&b, "&#34;");
            break;
        case '\'':
            loom__ct_sb_str(&b, "&#39;");
            break;
        default:
            loom__ct_sb_add(&b, p + i, 1);
        }
    }
    json_decref(s);
    return take(a, &b, out);
}

loom_status loom__ct_filter(const char *name, int line, json_t *v,
                            json_t **args, size_t na, char **kw, json_t **kwv,
                            size_t n_kw, json_t **out, loom_err *err)
{
    fargs a = {name, line, args, na, kw, kwv, n_kw, err};
    *out = NULL;
    if (!strcmp(name, "sort"))
        return f_sort(&a, v, out);
    if (!strcmp(name, "dictsort"))
        return f_dictsort(&a, v, out);
    if (!strcmp(name, "unique"))
        return f_unique(&a, v, out);
    if (!strcmp(name, "sum"))
        return f_sum(&a, v, out);
    if (!strcmp(name, "max") || !strcmp(name, "min"))
        return f_minmax(&a, v, name[1] == 'a', out);
    if (!strcmp(name, "round"))
        return f_round(&a, v, out);
    if (!strcmp(name, "format"))
        return f_format(&a, v, out);
    if (!strcmp(name, "indent"))
        return f_indent(&a, v, out);
    if (!strcmp(name, "center"))
        return f_center(&a, v, out);
    if (!strcmp(name, "batch"))
        return f_batch(&a, v, out);
    if (!strcmp(name, "tojson"))
        return f_tojson(&a, v, out);
    if (!strcmp(name, "escape") || !strcmp(name, "e"))
        return f_escape(&a, v, out);
    return fail(&a, LOOM_ERR_UNSUPPORTED, "not a filter of this file");
}

json_t *loom__ct_strftime_now(json_t *format)
{
    char buf[512];
    const char *f = json_is_string(format) ? json_string_value(format) : "";
    if (loom_local_time_format(f, buf, sizeof buf) != 0)
        return NULL;
    return json_string(buf);
}
