/* The chat template interpreter: Jinja semantics (Python truthiness,
 * scoping of for loops, undefined values, filters, tests and methods) over
 * Jansson values, writing the rendered text into a buffer. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/checked.h>

#include "chat_template_impl.h"

typedef struct macro_def {
    const char *name;
    const ct_node *node;
} macro_def;

typedef struct ctx {
    json_t *frames[64]; /* scopes, innermost last */
    size_t n_frames;
    ct_buf *out;
    loom_err *err;
    int brk, cont; /* a break/continue is unwinding to its loop */
    macro_def macros[32];
    size_t n_macros;
    int depth;       /* macro calls */
    int nest;        /* ev()/exec() recursion: CT_MAX_DEPTH */
    long long steps; /* CT_MAX_STEPS */
    long long bytes; /* built so far: CT_MAX_BYTES */
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

static loom_status too_big(ctx *c, const ct_node *n)
{
    return loom_err_set(c->err, LOOM_ERR_RANGE,
                        "chat template line %d: a string or list over the "
                        "render's size limit (%zu MiB, %zu items)",
                        n ? n->line : 0, CT_MAX_STR >> 20, CT_MAX_ITEMS);
}

static loom_status overflow(ctx *c, const ct_node *n)
{
    return error(c, n, LOOM_ERR_RANGE,
                 "integer overflow (values are 64-bit here)%s%s", "", "");
}

/* Adds COST steps; past CT_MAX_STEPS the render stops. */
static loom_status charge(ctx *c, const ct_node *n, long long cost)
{
    if (cost < 0 || cost > CT_MAX_STEPS - c->steps)
        return loom_err_set(c->err, LOOM_ERR_RANGE,
                            "chat template line %d: the render takes more "
                            "than %lld steps",
                            n ? n->line : 0, (long long)CT_MAX_STEPS);
    c->steps += cost;
    return LOOM_OK;
}

/* The steps a search for a NL-byte needle in HL bytes may take. */
static long long search_cost(size_t hl, size_t nl)
{
    double cost = ((double)hl / 64 + 1) * ((double)nl / 64 + 1);
    return cost > (double)CT_MAX_STEPS ? CT_MAX_STEPS + 1LL : (long long)cost;
}

/* A float result; JSON (and so this interpreter) has no inf or nan. */
static loom_status real(ctx *c, const ct_node *n, double d, json_t **out)
{
    if (!isfinite(d))
        return error(c, n, LOOM_ERR_RANGE,
                     "the result is not a finite number (%s)%s",
                     isnan(d) ? "nan" : "inf", "");
    *out = json_real(d);
    return *out ? LOOM_OK : nomem(c);
}

/* The text of B as a new string (B freed); a failed buffer is an error. */
static loom_status take(ctx *c, const ct_node *n, ct_buf *b, json_t **out)
{
    int why = b->oom;
    *out = loom__ct_sb_take(b);
    if (why == 2)
        return too_big(c, n);
    return *out ? LOOM_OK : nomem(c);
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

static loom_status ev_args(ctx *c, const ct_node *n, json_t **args, size_t max,
                           size_t *n_args)
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

static loom_status binop(ctx *c, const ct_node *n, json_t *a, json_t *b,
                         json_t **out)
{
    const char *op = n->op;
    *out = NULL;
    if (!strcmp(op, "~")) {
        json_t *x = loom__ct_str_of(a), *y = loom__ct_str_of(b);
        loom_status st = LOOM_OK;
        if (x && y) {
            ct_buf s = {0};
            loom__ct_sb_add(&s, json_string_value(x), json_string_length(x));
            loom__ct_sb_add(&s, json_string_value(y), json_string_length(y));
            st = take(c, n, &s, out);
        } else {
            st = too_big(c, n);
        }
        json_decref(x);
        json_decref(y);
        return st;
    }
    if (!strcmp(op, "==") || !strcmp(op, "!=")) {
        int eq = loom__ct_equal(a, b);
        *out = json_boolean(op[0] == '=' ? eq : !eq);
        return LOOM_OK;
    }
    if (!strcmp(op, "in") || !strcmp(op, "notin")) {
        int found = 0;
        if (json_is_string(b) && json_is_string(a)) {
            const char *h = json_string_value(b), *nd = json_string_value(a);
            size_t hl = json_string_length(b), nl = json_string_length(a);
            loom_status st = charge(c, n, search_cost(hl, nl));
            if (st != LOOM_OK)
                return st;
            for (size_t i = 0; !found && i + nl <= hl; i++)
                found = !memcmp(h + i, nd, nl);
        } else if (json_is_array(b)) {
            size_t i;
            json_t *x;
            loom_status st =
                charge(c, n, (long long)json_array_size(b) / 16 + 1);
            if (st != LOOM_OK)
                return st;
            json_array_foreach(b, i, x) found |= loom__ct_equal(a, x);
        } else if (json_is_object(b) && json_is_string(a)) {
            found = json_object_get(b, json_string_value(a)) != NULL;
        } else if (!b) {
            found = 0; /* Jinja's Undefined iterates as empty */
        } else {
            return error(c, n, LOOM_ERR_INVALID,
                         "'in' needs a str, list or dict on its right, not "
                         "%s%s",
                         loom__ct_type_name(b), "");
        }
        *out = json_boolean(op[0] == 'i' ? found : !found);
        return LOOM_OK;
    }
    if (op[0] == '<' || op[0] == '>') {
        int r;
        if (loom__ct_is_num(a) && loom__ct_is_num(b)) {
            double x = loom__ct_num(a), y = loom__ct_num(b);
            r = op[0] == '<' ? (op[1] ? x <= y : x < y)
                             : (op[1] ? x >= y : x > y);
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
                         loom__ct_type_name(a), loom__ct_type_name(b));
        }
        *out = json_boolean(r);
        return LOOM_OK;
    }
    if (!strcmp(op, "+") && json_is_string(a) && json_is_string(b)) {
        return binop(c,
                     &(ct_node){.kind = CT_BINOP, .line = n->line, .op = "~"},
                     a, b, out);
    }
    if (!strcmp(op, "+") && json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) + json_array_size(b) > CT_MAX_ITEMS)
            return too_big(c, n);
        *out = json_array();
        if (!*out)
            return nomem(c);
        json_array_extend(*out, a);
        json_array_extend(*out, b);
        return LOOM_OK;
    }
    if (!strcmp(op, "*") && json_is_string(a) && loom__ct_is_int(b)) {
        json_int_t k = loom__ct_inum(b);
        size_t len = json_string_length(a);
        if (k > 0 && len && (uint64_t)k > CT_MAX_STR / len)
            return too_big(c, n);
        ct_buf s = {0};
        /* '' * k is '' at once, however large k is */
        for (json_int_t i = 0; len && i < k && !s.oom; i++)
            loom__ct_sb_add(&s, json_string_value(a), len);
        return take(c, n, &s, out);
    }
    if (!loom__ct_is_num(a) || !loom__ct_is_num(b))
        return error(c, n, LOOM_ERR_INVALID,
                     "unsupported operand types for the operator: %s and %s",
                     loom__ct_type_name(a), loom__ct_type_name(b));
    int ints = loom__ct_is_int(a) && loom__ct_is_int(b);
    json_int_t x = ints ? loom__ct_inum(a) : 0, y = ints ? loom__ct_inum(b) : 0;
    double fx = loom__ct_num(a), fy = loom__ct_num(b);
    int64_t r = 0;
    switch (op[0]) {
    case '+':
        if (!ints)
            return real(c, n, fx + fy, out);
        if (loom_add_i64(x, y, &r))
            return overflow(c, n);
        break;
    case '-':
        if (!ints)
            return real(c, n, fx - fy, out);
        if (loom_sub_i64(x, y, &r))
            return overflow(c, n);
        break;
    case '*':
        if (op[1] == '*') {
            if (!ints || y < 0)
                return real(c, n, pow(fx, fy), out);
            /* by squaring: at most 64 checked products */
            int64_t base = x;
            r = 1;
            for (json_int_t e = y; e > 0; e >>= 1) {
                if ((e & 1) && loom_mul_i64(r, base, &r))
                    return overflow(c, n);
                if (e > 1 && loom_mul_i64(base, base, &base))
                    return overflow(c, n);
            }
        } else {
            if (!ints)
                return real(c, n, fx * fy, out);
            if (loom_mul_i64(x, y, &r))
                return overflow(c, n);
        }
        break;
    case '/':
        if (fy == 0)
            return error(c, n, LOOM_ERR_INVALID, "division by zero%s%s", "",
                         "");
        if (op[1] != '/')
            return real(c, n, fx / fy, out);
        if (!ints)
            return real(c, n, floor(fx / fy), out);
        if (loom_floordiv_i64(x, y, &r))
            return overflow(c, n);
        break;
    case '%':
        if (fy == 0)
            return error(c, n, LOOM_ERR_INVALID, "modulo by zero%s%s", "", "");
        if (ints) {
            loom_mod_i64(x, y, &r);
        } else {
            double m = fmod(fx, fy);
            if (m != 0 && ((m < 0) != (fy < 0)))
                m += fy;
            return real(c, n, m, out);
        }
        break;
    default:
        return error(c, n, LOOM_ERR_UNSUPPORTED, "operator '%s'%s", op, "");
    }
    *out = json_integer(r);
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
        *r = loom__ct_is_int(v) && (loom__ct_inum(v) % 2 == 0) == (t[0] == 'e');
    else if ((!strcmp(t, "eq") || !strcmp(t, "equalto") ||
              !strcmp(t, "sameas")) &&
             na == 1)
        *r = loom__ct_equal(v, args[0]);
    else if (!strcmp(t, "ne") && na == 1)
        *r = !loom__ct_equal(v, args[0]);
    else if (!strcmp(t, "in") && na == 1) {
        json_t *o = NULL;
        loom_status st =
            binop(c, &(ct_node){.kind = CT_BINOP, .line = n->line, .op = "in"},
                  v, args[0], &o);
        if (st != LOOM_OK)
            return st;
        *r = json_is_true(o);
        json_decref(o);
    } else if (!strcmp(t, "divisibleby") && na == 1 && loom__ct_is_int(v) &&
               loom__ct_is_int(args[0]) && loom__ct_inum(args[0])) {
        int64_t m = 0;
        loom_mod_i64(loom__ct_inum(v), loom__ct_inum(args[0]), &m);
        *r = m == 0;
    } else
        return error(c, n, LOOM_ERR_UNSUPPORTED,
                     "the test '%s' is not supported%s", t, "");
    return LOOM_OK;
}

static loom_status call_filter(ctx *c, const ct_node *n, json_t *v,
                               json_t **out);

/* The loom__ct_change_case() mode of a method or filter NAME, or -1. */
static int case_mode(const char *name)
{
    static const char *const modes[] = {"lower", "upper", "title",
                                        "capitalize"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, modes[i]))
            return i;
    return -1;
}

/* A str's code points as a list of one-character strs (NULL past
 * CT_MAX_ITEMS). */
static json_t *str_chars(json_t *v)
{
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    if (loom__ct_u8_count(s, len) > CT_MAX_ITEMS)
        return NULL;
    json_t *l = json_array();
    for (size_t i = 0; i < len;) {
        size_t k = loom__ct_u8_len_at(s + i, len - i);
        json_array_append_new(l, json_stringn_nocheck(s + i, k));
        i += k;
    }
    return l;
}

/* Bounds str.replace(FROM, TO) on S: its search and its result. */
static loom_status replace_check(ctx *c, const ct_node *n, json_t *s,
                                 json_t *from, json_t *to)
{
    size_t len = json_string_length(s), fl = json_string_length(from);
    size_t tl = json_string_length(to);
    /* at most len/fl replacements, each adding at most tl bytes */
    if (fl && tl > fl && (double)(len / fl) * (double)tl > (double)CT_MAX_STR)
        return too_big(c, n);
    return charge(c, n, search_cost(len, fl));
}

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
                    return error(c, n, LOOM_ERR_INVALID, "%s needs a str%s", m,
                                 "");
                size_t pl = json_string_length(p);
                r = pl <= len && !memcmp(m[0] == 's' ? s : s + len - pl,
                                         json_string_value(p), pl);
            }
            *out = json_boolean(r);
            return LOOM_OK;
        }
        if ((!strcmp(m, "strip") || !strcmp(m, "lstrip") ||
             !strcmp(m, "rstrip")) &&
            na <= 1) {
            json_t *chars = na && json_is_string(args[0]) ? args[0] : NULL;
            *out = loom__ct_strip(obj, chars, m[0] != 'r', m[0] != 'l');
            return *out ? LOOM_OK : nomem(c);
        }
        if (!strcmp(m, "split") && na <= 2) {
            if (na && !json_is_string(args[0]) && !json_is_null(args[0]))
                return error(c, n, LOOM_ERR_INVALID, "split needs a str%s%s",
                             "", "");
            loom_status st =
                charge(c, n,
                       search_cost(len, na && json_is_string(args[0])
                                            ? json_string_length(args[0])
                                            : 1));
            if (st != LOOM_OK)
                return st;
            *out = loom__ct_split(obj, na ? args[0] : NULL,
                                  na > 1 ? loom__ct_inum(args[1]) : -1);
            return *out ? LOOM_OK : too_big(c, n);
        }
        if (!strcmp(m, "replace") && (na == 2 || na == 3) &&
            json_is_string(args[0]) && json_is_string(args[1])) {
            loom_status st = replace_check(c, n, obj, args[0], args[1]);
            if (st != LOOM_OK)
                return st;
            *out = loom__ct_replace(obj, args[0], args[1],
                                    na == 3 ? loom__ct_inum(args[2]) : -1);
            return *out ? LOOM_OK : nomem(c);
        }
        if (case_mode(m) >= 0 && na == 0) {
            *out = loom__ct_change_case(obj, case_mode(m));
            return *out ? LOOM_OK : nomem(c);
        }
        if (!strcmp(m, "find") && na == 1 && json_is_string(args[0])) {
            const char *nd = json_string_value(args[0]);
            size_t nl = json_string_length(args[0]);
            json_int_t at = -1;
            loom_status st = charge(c, n, search_cost(len, nl));
            if (st != LOOM_OK)
                return st;
            for (size_t i = 0; i + nl <= len; i++)
                if (!memcmp(s + i, nd, nl)) {
                    at = (json_int_t)loom__ct_u8_count(s, i);
                    break;
                }
            *out = json_integer(at);
            return LOOM_OK;
        }
        if (!strcmp(m, "join") && na == 1 && json_is_array(args[0])) {
            ct_buf b = {0};
            size_t i;
            json_t *x;
            json_array_foreach(args[0], i, x)
            {
                json_t *xs = loom__ct_str_of(x);
                if (i)
                    loom__ct_sb_add(&b, s, len);
                if (xs)
                    loom__ct_sb_add(&b, json_string_value(xs),
                                    json_string_length(xs));
                json_decref(xs);
                if (b.oom)
                    break;
            }
            return take(c, n, &b, out);
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
            json_object_foreach(obj, k, x) json_array_append_new(
                *out, m[0] == 'k' ? json_string(k) : json_incref(x));
            return LOOM_OK;
        }
        if (!strcmp(m, "get") && (na == 1 || na == 2) &&
            json_is_string(args[0])) {
            json_t *x = json_object_get(obj, json_string_value(args[0]));
            *out = json_incref(x ? x : na == 2 ? args[1] : json_null());
            return LOOM_OK;
        }
    }
    return error(c, n, LOOM_ERR_UNSUPPORTED,
                 "the method %s.%s() is not supported", loom__ct_type_name(obj),
                 m);
}

/* Runs L with its output going into BODY instead of the page. */
static loom_status exec_into(ctx *c, const ct_list *l, ct_buf *body)
{
    ct_buf *outer = c->out;
    c->out = body;
    loom_status st = exec_list(c, l);
    c->out = outer;
    return st;
}

static loom_status call_macro(ctx *c, const ct_node *n, const ct_node *mac,
                              json_t **args, size_t na, json_t **out)
{
    if (na > mac->n_targets)
        return error(c, n, LOOM_ERR_INVALID,
                     "too many arguments to macro '%s'%s", mac->name, "");
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
    ct_buf body = {0};
    c->depth++;
    if (st == LOOM_OK)
        st = exec_into(c, &mac->body, &body);
    c->depth--;
    pop_frame(c);
    c->n_frames = n_saved;
    memcpy(c->frames, saved, n_saved * sizeof *saved);
    if (st == LOOM_OK)
        st = take(c, n, &body, out);
    free(body.p);
    return st;
}

/* namespace(...) and dict(...): OBJ[name] = value for each name=value. */
static loom_status set_kwargs(ctx *c, const ct_node *n, json_t *obj)
{
    loom_status st = LOOM_OK;
    for (size_t i = 0; i < n->n_kw && st == LOOM_OK; i++) {
        json_t *v = NULL;
        st = ev(c, n->kwargs.v[i], &v);
        if (st == LOOM_OK)
            json_object_set_new(obj, n->kwnames[i], v ? v : json_null());
    }
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
    if (f->kind == CT_ATTR && !strcmp(f->name, "cycle") &&
        f->a->kind == CT_NAME && !strcmp(f->a->name, "loop") && na > 0 &&
        json_is_object(lookup(c, "loop"))) {
        /* loop.cycle(a, b, ...): the argument at the loop's index0 */
        json_int_t i =
            json_integer_value(json_object_get(lookup(c, "loop"), "index0"));
        *out = json_incref(args[(size_t)i % na]);
    } else if (f->kind == CT_ATTR) {
        json_t *obj = NULL;
        st = ev(c, f->a, &obj);
        if (st == LOOM_OK)
            st = call_method(c, n, obj, f->name, args, na, out);
        json_decref(obj);
    } else if (f->kind == CT_NAME && !strcmp(f->name, "strftime_now") &&
               !lookup(c, f->name)) {
        /* transformers' global: datetime.now().strftime(format) */
        if (na != 1 || !json_is_string(args[0]))
            st = error(c, n, LOOM_ERR_INVALID,
                       "strftime_now() needs a format string%s%s", "", "");
        else if (!(*out = loom__ct_strftime_now(args[0])))
            st = error(c, n, LOOM_ERR_RANGE,
                       "strftime_now(): the time does not fit%s%s", "", "");
    } else if (f->kind == CT_NAME && !strcmp(f->name, "namespace")) {
        *out = json_object();
        if (na == 1 && json_is_object(args[0]))
            json_object_update(*out, args[0]);
        st = set_kwargs(c, n, *out);
    } else if (f->kind == CT_NAME && !strcmp(f->name, "dict")) {
        *out = json_object();
        st = set_kwargs(c, n, *out);
    } else if (f->kind == CT_NAME && !strcmp(f->name, "range") && na >= 1 &&
               na <= 3) {
        for (size_t i = 0; i < na; i++)
            if (!loom__ct_is_int(args[i]))
                st = error(c, n, LOOM_ERR_INVALID, "range() needs integers%s%s",
                           "", "");
        if (st == LOOM_OK) {
            json_int_t a = na > 1 ? loom__ct_inum(args[0]) : 0;
            json_int_t b =
                na > 1 ? loom__ct_inum(args[1]) : loom__ct_inum(args[0]);
            json_int_t s = na > 2 ? loom__ct_inum(args[2]) : 1;
            /* The length in unsigned arithmetic, where b - a cannot wrap. */
            uint64_t len = 0;
            if (s > 0 && b > a)
                len = ((uint64_t)b - (uint64_t)a - 1) / (uint64_t)s + 1;
            else if (s < 0 && a > b)
                len = ((uint64_t)a - (uint64_t)b - 1) /
                          ((uint64_t)0 - (uint64_t)s) +
                      1;
            if (s == 0 || len > 1000000)
                st = error(c, n, LOOM_ERR_RANGE,
                           "range() too long or zero step%s%s", "", "");
            if (st == LOOM_OK)
                st = charge(c, n, (long long)len);
            *out = json_array();
            /* a + k*s stays between a and b: no overflow */
            for (uint64_t k = 0; st == LOOM_OK && k < len; k++)
                json_array_append_new(
                    *out,
                    json_integer((json_int_t)((uint64_t)a + k * (uint64_t)s)));
        }
    } else if (f->kind == CT_NAME && !strcmp(f->name, "raise_exception")) {
        json_t *msg = na ? loom__ct_str_of(args[0]) : NULL;
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
        st = error(c, n, LOOM_ERR_UNSUPPORTED, "this call is not supported%s%s",
                   "", "");
    }
    decref_all(args, na);
    if (st != LOOM_OK) {
        json_decref(*out);
        *out = NULL;
    }
    return st;
}

/* What a new value V costs the render's CT_MAX_BYTES. */
static long long value_bytes(json_t *v)
{
    if (json_is_string(v))
        return (long long)json_string_length(v) + 16;
    if (json_is_array(v))
        return (long long)json_array_size(v) * 32 + 16;
    if (json_is_object(v))
        return (long long)json_object_size(v) * 48 + 16;
    return 16;
}

static loom_status ev_node(ctx *c, const ct_node *n, json_t **out);

/* Evaluates N within the render's bounds on depth, steps and bytes. */
static loom_status ev(ctx *c, const ct_node *n, json_t **out)
{
    *out = NULL;
    if (c->nest >= CT_MAX_DEPTH)
        return error(c, n, LOOM_ERR_RANGE,
                     "evaluation nested too deeply (CT_MAX_DEPTH)%s%s", "", "");
    loom_status st = charge(c, n, 1);
    if (st != LOOM_OK)
        return st;
    c->nest++;
    st = ev_node(c, n, out);
    c->nest--;
    /* names and literals are shared, not built */
    if (st == LOOM_OK && *out && n->kind != CT_LIT && n->kind != CT_NAME &&
        n->kind != CT_ATTR && n->kind != CT_ITEM) {
        c->bytes += value_bytes(*out);
        if (c->bytes > CT_MAX_BYTES) {
            json_decref(*out);
            *out = NULL;
            st = loom_err_set(c->err, LOOM_ERR_RANGE,
                              "chat template line %d: the render builds more "
                              "than %lld MiB",
                              n->line, (long long)(CT_MAX_BYTES >> 20));
        }
    }
    return st;
}

static loom_status ev_node(ctx *c, const ct_node *n, json_t **out)
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
            *out = loom__ct_item(a, b);
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
                (b && !loom__ct_is_int(b)) ||
                (stop && !loom__ct_is_int(stop)) ||
                (step && !loom__ct_is_int(step)))
                st = error(c, n, LOOM_ERR_INVALID, "cannot slice %s%s",
                           loom__ct_type_name(a), "");
            else if (!(*out = loom__ct_slice(a, b, stop, step)))
                st = error(c, n, LOOM_ERR_INVALID, "bad slice of %s%s",
                           loom__ct_type_name(a), "");
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
            *out = json_boolean(!loom__ct_truthy(a));
        break;
    case CT_NEG:
        st = ev(c, n->a, &a);
        if (st == LOOM_OK) {
            if (loom__ct_is_int(a) && loom__ct_inum(a) == INT64_MIN)
                st = overflow(c, n);
            else if (loom__ct_is_int(a))
                *out = json_integer(-loom__ct_inum(a));
            else if (loom__ct_is_num(a))
                *out = json_real(-loom__ct_num(a));
            else
                st = error(c, n, LOOM_ERR_INVALID, "cannot negate %s%s",
                           loom__ct_type_name(a), "");
        }
        break;
    case CT_AND:
    case CT_OR:
        /* Python's and/or give one of their operands. */
        st = ev(c, n->a, &a);
        if (st != LOOM_OK)
            break;
        if (loom__ct_truthy(a) == (n->kind == CT_OR)) {
            *out = a;
            return LOOM_OK;
        }
        json_decref(a);
        return ev(c, n->b, out);
    case CT_COND:
        st = ev(c, n->a, &a);
        if (st != LOOM_OK)
            break;
        if (loom__ct_truthy(a))
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
                st = error(c, n, LOOM_ERR_UNSUPPORTED,
                           "dict keys must be strings%s%s", "", "");
            if (st == LOOM_OK)
                json_object_set_new(*out, json_string_value(v),
                                    val ? val : json_null());
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

/* The steps filter F of chat_template_filter.c may take on V: sorts
 * n log n comparisons, unique's scan of what it kept n^2, the rest a pass. */
static long long filter_cost(const char *f, json_t *v)
{
    double k = json_is_array(v)    ? (double)json_array_size(v)
               : json_is_object(v) ? (double)json_object_size(v)
               : json_is_string(v) ? (double)json_string_length(v) / 64
                                   : 1;
    double cost = k / 16 + 1;
    if (!strcmp(f, "sort") || !strcmp(f, "dictsort"))
        cost = k * (log2(k + 1) + 1) / 16 + 1;
    else if (!strcmp(f, "unique"))
        cost = k * k / 16 + 1;
    return cost > (double)CT_MAX_STEPS ? CT_MAX_STEPS + 1LL : (long long)cost;
}

/* A filter of chat_template_filter.c, its arguments evaluated here; its
 * time is charged first, its result's size is bounded there (CT_MAX_STR,
 * CT_MAX_ITEMS) and counted by ev() against CT_MAX_BYTES. */
static loom_status filter_apart(ctx *c, const ct_node *n, json_t *v,
                                json_t **out)
{
    loom_status st = charge(c, n, filter_cost(n->name, v));
    if (st != LOOM_OK)
        return st;
    json_t *args[8] = {0}, **kwv = calloc(n->n_kw + 1, sizeof *kwv);
    size_t na = 0;
    if (!kwv)
        return nomem(c);
    st = ev_args(c, n, args, 8, &na);
    for (size_t i = 0; i < n->n_kw && st == LOOM_OK; i++)
        st = ev(c, n->kwargs.v[i], &kwv[i]);
    if (st == LOOM_OK)
        st = loom__ct_filter(n->name, n->line, v, args, na, n->kwnames, kwv,
                             n->n_kw, out, c->err);
    decref_all(args, na);
    decref_all(kwv, n->n_kw);
    free(kwv);
    return st;
}

static loom_status call_filter(ctx *c, const ct_node *n, json_t *v,
                               json_t **out)
{
    json_t *args[4] = {0};
    size_t na = 0;
    const char *f = n->name;
    *out = NULL;
    if (loom__ct_filter_known(f))
        return filter_apart(c, n, v, out);
    loom_status st = ev_args(c, n, args, 4, &na);
    if (st != LOOM_OK)
        return st;
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        if (json_is_string(v))
            *out = json_integer((json_int_t)loom__ct_u8_count(
                json_string_value(v), json_string_length(v)));
        else if (json_is_array(v))
            *out = json_integer((json_int_t)json_array_size(v));
        else if (json_is_object(v))
            *out = json_integer((json_int_t)json_object_size(v));
        else if (!v)
            *out = json_integer(0); /* len(Undefined) is 0 in Jinja */
        else
            st = error(c, n, LOOM_ERR_INVALID, "%s has no length%s",
                       loom__ct_type_name(v), "");
    } else if (!strcmp(f, "trim") || !strcmp(f, "strip")) {
        json_t *s = loom__ct_str_of(v);
        *out = s ? loom__ct_strip(
                       s, na && json_is_string(args[0]) ? args[0] : NULL, 1, 1)
                 : NULL;
        json_decref(s);
    } else if (case_mode(f) >= 0) {
        json_t *s = loom__ct_str_of(v);
        *out = s ? loom__ct_change_case(s, case_mode(f)) : NULL;
        json_decref(s);
    } else if (!strcmp(f, "string")) {
        *out = loom__ct_str_of(v);
    } else if (!strcmp(f, "safe")) {
        /* HF renders without autoescaping: safe leaves text as it is. */
        *out = loom__ct_str_of(v);
    } else if (!strcmp(f, "default") || !strcmp(f, "d")) {
        int boolean = na > 1 && loom__ct_truthy(args[1]);
        int use_default = !v || (boolean && !loom__ct_truthy(v));
        *out = json_incref(use_default ? (na ? args[0] : NULL) : v);
        if (use_default && !na)
            *out = json_string("");
    } else if (!strcmp(f, "first") || !strcmp(f, "last")) {
        json_t *idx = json_integer(f[0] == 'f' ? 0 : -1);
        *out = loom__ct_item(v, idx);
        json_decref(idx);
        if (!json_is_array(v) && !json_is_string(v))
            st = error(c, n, LOOM_ERR_INVALID, "%s of %s", f,
                       loom__ct_type_name(v));
    } else if (!strcmp(f, "join")) {
        if (!json_is_array(v)) {
            st = error(c, n, LOOM_ERR_INVALID, "join of %s%s",
                       loom__ct_type_name(v), "");
        } else {
            json_t *sep = na && json_is_string(args[0]) ? args[0] : NULL;
            json_t *empty = json_string("");
            st = call_method(c, n, sep ? sep : empty, "join", &v, 1, out);
            json_decref(empty);
        }
    } else if (!strcmp(f, "int")) {
        int64_t i = 0;
        errno = 0;
        if (loom__ct_is_int(v))
            i = loom__ct_inum(v);
        else if (loom__ct_is_num(v) && loom_f64_to_i64(loom__ct_num(v), &i))
            st = overflow(c, n);
        else if (json_is_string(v) &&
                 (i = strtoll(json_string_value(v), NULL, 10), errno))
            st = overflow(c, n);
        if (st == LOOM_OK)
            *out = json_integer(i);
    } else if (!strcmp(f, "float")) {
        st = real(c, n,
                  loom__ct_is_num(v)  ? loom__ct_num(v)
                  : json_is_string(v) ? strtod(json_string_value(v), NULL)
                                      : 0.0,
                  out);
    } else if (!strcmp(f, "abs") && loom__ct_is_num(v)) {
        if (loom__ct_is_int(v) && loom__ct_inum(v) == INT64_MIN)
            st = overflow(c, n);
        else
            *out = loom__ct_is_int(v) ? json_integer(llabs(loom__ct_inum(v)))
                                      : json_real(fabs(loom__ct_num(v)));
    } else if (!strcmp(f, "list")) {
        if (json_is_array(v)) {
            *out = json_copy(v);
        } else if (json_is_string(v)) {
            *out = str_chars(v);
        } else if (json_is_object(v)) {
            st = call_method(c, n, v, "keys", NULL, 0, out);
        } else {
            st = error(c, n, LOOM_ERR_INVALID, "list of %s%s",
                       loom__ct_type_name(v), "");
        }
    } else if (!strcmp(f, "reverse")) {
        if (json_is_array(v) || json_is_string(v)) {
            json_t *step = json_integer(-1);
            *out = loom__ct_slice(v, NULL, NULL, step);
            json_decref(step);
        } else {
            st = error(c, n, LOOM_ERR_INVALID, "reverse of %s%s",
                       loom__ct_type_name(v), "");
        }
    } else if (!strcmp(f, "items") && json_is_object(v)) {
        st = call_method(c, n, v, "items", NULL, 0, out);
    } else if (!strcmp(f, "replace") && na >= 2 && json_is_string(args[0]) &&
               json_is_string(args[1])) {
        json_t *s = loom__ct_str_of(v);
        if (s)
            st = replace_check(c, n, s, args[0], args[1]);
        *out = s && st == LOOM_OK
                   ? loom__ct_replace(s, args[0], args[1],
                                      na > 2 ? loom__ct_inum(args[2]) : -1)
                   : NULL;
        json_decref(s);
    } else if ((!strcmp(f, "selectattr") || !strcmp(f, "rejectattr")) &&
               na >= 1 && json_is_array(v) && json_is_string(args[0])) {
        /* selectattr("attr") / selectattr("attr", "test"[, arg]) */
        int select = f[0] == 's';
        *out = json_array();
        ct_node tn = {.kind = CT_TEST, .line = n->line};
        tn.name = na > 1 && json_is_string(args[1])
                      ? (char *)json_string_value(args[1])
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
                st =
                    apply_test(c, &tn, attr, args + 2, na > 2 ? na - 2 : 0, &r);
                if (st != LOOM_OK)
                    break;
            } else {
                r = loom__ct_truthy(attr);
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
                json_t *y = json_is_object(x)
                                ? json_object_get(x, json_string_value(attr))
                                : NULL;
                json_array_append(*out, y ? y : json_null());
            }
        } else if (st == LOOM_OK) {
            st = error(c, n, LOOM_ERR_UNSUPPORTED, "map() needs attribute=%s%s",
                       "", "");
        }
        json_decref(attr);
    } else {
        st = error(c, n, LOOM_ERR_UNSUPPORTED,
                   "the filter '%s' is not supported for %s", f,
                   loom__ct_type_name(v));
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

/* Walks V (shared parts as often as they are reached) to DEPTH, counting
 * nodes into *SEEN; 1 when V holds SELF, nests past CT_MAX_VALUE_DEPTH or
 * expands past CT_MAX_ITEMS. */
static int unbounded(json_t *v, json_t *self, int depth, size_t *seen)
{
    if (v == self || depth > CT_MAX_VALUE_DEPTH || ++*seen > CT_MAX_ITEMS)
        return 1;
    size_t i;
    const char *k;
    json_t *x;
    if (json_is_array(v))
        json_array_foreach(v, i,
                           x) if (unbounded(x, self, depth + 1, seen)) return 1;
    if (json_is_object(v))
        json_object_foreach(
            v, k, x) if (unbounded(x, self, depth + 1, seen)) return 1;
    return 0;
}

/* Refuses to store V in (the namespace NS): a value that holds itself,
 * nests without bound or shares its way to an exponential size would make
 * printing, comparing or freeing it overflow the stack or take forever. */
static loom_status check_stored(ctx *c, const ct_node *n, json_t *v, json_t *ns)
{
    if (!json_is_array(v) && !json_is_object(v))
        return LOOM_OK;
    size_t seen = 0;
    int bad = unbounded(v, ns, 0, &seen);
    loom_status st = charge(c, n, (long long)seen / 16);
    if (st == LOOM_OK && bad)
        st = error(c, n, LOOM_ERR_RANGE,
                   "the value set holds itself or is too large or deep%s%s", "",
                   "");
    return st;
}

static loom_status assign(ctx *c, const ct_node *n, json_t *v)
{
    json_t *frame = c->frames[c->n_frames - 1];
    if (n->attr) {
        json_t *ns = lookup(c, n->targets[0]);
        if (!json_is_object(ns))
            return error(c, n, LOOM_ERR_INVALID,
                         "cannot set an attribute of '%s' (not a namespace)%s",
                         n->targets[0], "");
        loom_status st = check_stored(c, n, v, ns);
        if (st != LOOM_OK)
            return st;
        json_object_set(ns, n->attr, v ? v : json_null());
        return LOOM_OK;
    }
    loom_status st = check_stored(c, n, v, NULL);
    if (st != LOOM_OK)
        return st;
    if (n->n_targets == 1) {
        if (v)
            json_object_set(frame, n->targets[0], v);
        else
            json_object_del(frame, n->targets[0]);
        return LOOM_OK;
    }
    if (!json_is_array(v) || json_array_size(v) != n->n_targets)
        return error(c, n, LOOM_ERR_INVALID, "cannot unpack %s into %s names",
                     loom__ct_type_name(v), "several");
    for (size_t i = 0; i < n->n_targets; i++)
        json_object_set(frame, n->targets[i], json_array_get(v, i));
    return LOOM_OK;
}

/* Binds the for loop N's target names to the item X. */
static loom_status assign_targets(ctx *c, const ct_node *n, json_t *x)
{
    ct_node tgt = {.kind = CT_SET,
                   .line = n->line,
                   .targets = n->targets,
                   .n_targets = n->n_targets};
    return assign(c, &tgt, x);
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
        if (!(items = str_chars(seq)))
            st = too_big(c, n);
    } else if (!seq) {
        items = json_array(); /* Jinja's Undefined iterates as empty */
    } else {
        st = error(c, n, LOOM_ERR_INVALID, "cannot loop over %s%s",
                   loom__ct_type_name(seq), "");
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
            st = assign_targets(c, n, x);
            json_t *r = NULL;
            if (st == LOOM_OK)
                st = ev(c, n->b, &r);
            if (st != LOOM_OK)
                break;
            if (loom__ct_truthy(r))
                json_array_append(kept, x);
            json_decref(r);
        }
        json_decref(items);
        items = kept;
    }
    size_t len = json_array_size(items);
    for (size_t i = 0; i < len && st == LOOM_OK; i++) {
        json_t *x = json_array_get(items, i);
        /* an iteration builds its loop object (seven members): it costs
         * what building them does */
        st = charge(c, n, 32);
        if (st == LOOM_OK)
            st = assign_targets(c, n, x);
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

static loom_status exec_node(ctx *c, const ct_node *n);
/* {% filter f %}body{% endfilter %}: the parser put the body's text in a
 * variable the template cannot name, which the filter chain n->a reads. */
static loom_status exec_filter_block(ctx *c, const ct_node *n)
{
    ct_buf body = {0};
    json_t *text = NULL;
    loom_status st = exec_into(c, &n->body, &body);
    if (st == LOOM_OK)
        st = take(c, n, &body, &text);
    free(body.p);
    if (st != LOOM_OK)
        return st;
    st = push_frame(c, n);
    if (st == LOOM_OK) {
        json_object_set_new(c->frames[c->n_frames - 1], CT_FILTER_BODY, text);
        json_t *v = NULL;
        st = ev(c, n->a, &v);
        if (st == LOOM_OK)
            loom__ct_py_str(c->out, v, 1);
        json_decref(v);
        pop_frame(c);
    } else {
        json_decref(text);
    }
    return st;
}

static loom_status exec(ctx *c, const ct_node *n)
{
    if (c->nest >= CT_MAX_DEPTH)
        return error(c, n, LOOM_ERR_RANGE,
                     "statements nested too deeply (CT_MAX_DEPTH)%s%s", "", "");
    loom_status st = charge(c, n, 1);
    if (st != LOOM_OK)
        return st;
    c->nest++;
    st = exec_node(c, n);
    c->nest--;
    return st;
}

static loom_status exec_node(ctx *c, const ct_node *n)
{
    loom_status st = LOOM_OK;
    json_t *v = NULL;
    switch (n->kind) {
    case CT_TEXT:
        loom__ct_sb_add(c->out, n->name, n->name_len);
        break;
    case CT_OUTPUT:
        if (n->neg) { /* {% filter %}: the body, through the filters */
            st = exec_filter_block(c, n);
            break;
        }
        st = ev(c, n->a, &v);
        if (st == LOOM_OK)
            loom__ct_py_str(c->out, v, 1);
        break;
    case CT_IF:
        st = ev(c, n->a, &v);
        if (st == LOOM_OK)
            st = exec_list(c, loom__ct_truthy(v) ? &n->body : &n->orelse);
        break;
    case CT_FOR:
        st = exec_for(c, n);
        break;
    case CT_SET:
        if (n->a) {
            st = ev(c, n->a, &v);
        } else {
            ct_buf body = {0};
            st = exec_into(c, &n->body, &body);
            if (st == LOOM_OK)
                st = take(c, n, &body, &v);
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
        st = c->out->oom == 2 ? too_big(c, n) : nomem(c);
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
    ct_buf b = {0};
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
