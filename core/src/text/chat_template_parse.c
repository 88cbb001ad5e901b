/* The chat template parser: tokens into a syntax tree of statements and
 * expressions, with Jinja's operator precedence. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template_impl.h"

/* strdup is POSIX, not C11. */
char *loom__ct_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

typedef struct parser {
    tk *v;
    size_t n, i;
    loom_err *err;
    int failed;
    int nest; /* open (), not, unary minus and blocks: CT_MAX_NEST */
} parser;

static tk *cur(parser *p)
{
    return &p->v[p->i < p->n ? p->i : p->n - 1];
}

static int is_op(parser *p, const char *op)
{
    return cur(p)->type == TK_OP && !strcmp(cur(p)->s, op);
}

static int is_name(parser *p, const char *name)
{
    return cur(p)->type == TK_NAME && !strcmp(cur(p)->s, name);
}

static int is_name_at(parser *p, size_t k, const char *name)
{
    return p->i + k < p->n && p->v[p->i + k].type == TK_NAME &&
           !strcmp(p->v[p->i + k].s, name);
}

static void *fail(parser *p, loom_status code, const char *fmt,
                  const char *what)
{
    if (!p->failed) {
        char msg[256];
        snprintf(msg, sizeof msg, fmt, what);
        loom_err_set(p->err, code, "chat template line %d: %s", cur(p)->line,
                     msg);
        p->failed = code;
    }
    return NULL;
}

static void *oom(parser *p)
{
    return fail(p, LOOM_ERR_NOMEM, "out of memory%s", "");
}

static const char *tk_desc(tk *t)
{
    switch (t->type) {
    case TK_EOF:
        return "end of template";
    case TK_VAR_END:
        return "'}}'";
    case TK_BLOCK_END:
        return "'%}'";
    case TK_TEXT:
        return "text";
    default:
        return t->s ? t->s : "a number";
    }
}

/* Fails with "expected WHAT, found <the current token>". */
static int expected(parser *p, const char *what)
{
    char msg[96];
    snprintf(msg, sizeof msg, "expected %s, found %s", what, tk_desc(cur(p)));
    fail(p, LOOM_ERR_FORMAT, "%s", msg);
    return 0;
}

static int expect_op(parser *p, const char *op)
{
    if (!is_op(p, op)) {
        char what[16];
        snprintf(what, sizeof what, "'%s'", op);
        return expected(p, what);
    }
    p->i++;
    return 1;
}

static int expect(parser *p, tk_type type, const char *what)
{
    if (cur(p)->type != type)
        return expected(p, what);
    p->i++;
    return 1;
}

static ct_node *node(parser *p, ct_kind kind)
{
    ct_node *n = calloc(1, sizeof *n);
    if (!n)
        return oom(p);
    n->kind = kind;
    n->line = cur(p)->line;
    n->height = 1;
    return n;
}

static void free_node(ct_node *n);

/* N over its children A and B: refused (and freed) when the tree grows past
 * CT_MAX_HEIGHT, which chains like a+a+...+a or x|f|f|... reach without
 * nesting. */
static ct_node *grown(parser *p, ct_node *n)
{
    int ha = n->a ? n->a->height : 0, hb = n->b ? n->b->height : 0;
    n->height = 1 + (ha > hb ? ha : hb);
    if (n->height > CT_MAX_HEIGHT) {
        free_node(n);
        return fail(p, LOOM_ERR_RANGE, "%s",
                    "expression too deeply nested (CT_MAX_HEIGHT)");
    }
    return n;
}

/* Enters one level of nesting; 0 (and the error set) past CT_MAX_NEST. */
static int nest_in(parser *p)
{
    if (++p->nest > CT_MAX_NEST) {
        fail(p, LOOM_ERR_RANGE, "%s", "nested too deeply (CT_MAX_NEST)");
        return 0;
    }
    return 1;
}

void loom__ct_free_list(ct_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free_node(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static void free_node(ct_node *n)
{
    if (!n)
        return;
    free(n->name);
    json_decref(n->lit);
    free_node(n->a);
    free_node(n->b);
    free_node(n->c);
    loom__ct_free_list(&n->args);
    loom__ct_free_list(&n->kwargs);
    for (size_t i = 0; i < n->n_kw; i++)
        free(n->kwnames[i]);
    free(n->kwnames);
    for (size_t i = 0; i < n->n_targets; i++)
        free(n->targets[i]);
    free(n->targets);
    free(n->attr);
    loom__ct_free_list(&n->body);
    loom__ct_free_list(&n->orelse);
    free(n);
}

static int list_add(parser *p, ct_list *l, ct_node *n)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        ct_node **v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            free_node(n);
            oom(p);
            return 0;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = n;
    return 1;
}

static int add_str(parser *p, char ***v, size_t *n, const char *s)
{
    char **g = realloc(*v, (*n + 1) * sizeof *g);
    char *d = loom__ct_strdup(s);
    if (!g || !d) {
        if (g)
            *v = g;
        free(d);
        oom(p);
        return 0;
    }
    *v = g;
    g[(*n)++] = d;
    return 1;
}

/* A new KIND node over operand A; on failure A is freed. */
static ct_node *wrap(parser *p, ct_kind kind, ct_node *a)
{
    ct_node *n = node(p, kind);
    if (!n) {
        free_node(a);
        return NULL;
    }
    n->a = a;
    return grown(p, n);
}

/* wrap() for the nodes that carry a NAME (attribute, filter). */
static ct_node *wrap_named(parser *p, ct_kind kind, ct_node *a,
                           const char *name)
{
    ct_node *n = node(p, kind);
    if (!n || !(n->name = loom__ct_strdup(name))) {
        free(n);
        free_node(a);
        return oom(p);
    }
    n->a = a;
    return grown(p, n);
}

static ct_node *parse_expr(parser *p, int with_cond);
static ct_node *parse_unary(parser *p, int with_filter);
static int parse_args(parser *p, ct_node *n);

/* The call FN(args) at '('; on failure FN is freed. */
static ct_node *parse_call(parser *p, ct_node *fn)
{
    p->i++;
    ct_node *c = wrap(p, CT_CALL, fn);
    if (c && !parse_args(p, c)) {
        free_node(c);
        return NULL;
    }
    return c;
}

/* After FIRST and a ',': the rest of a tuple "FIRST, x, y", as a CT_LIST
 * node. A ',' before CLOSE (when set) ends it. On failure FIRST is freed. */
static ct_node *parse_tuple(parser *p, ct_node *first, const char *close)
{
    ct_node *t = node(p, CT_LIST);
    if (!t) {
        free_node(first);
        return NULL;
    }
    if (!list_add(p, &t->args, first)) {
        free_node(t);
        return NULL;
    }
    while (is_op(p, ",")) {
        p->i++;
        if (close && is_op(p, close))
            break;
        ct_node *x = parse_expr(p, 1);
        if (!x || !list_add(p, &t->args, x)) {
            free_node(t);
            return NULL;
        }
    }
    return t;
}

static ct_node *lit(parser *p, json_t *v)
{
    ct_node *n = node(p, CT_LIT);
    if (!n || !v) {
        json_decref(v);
        free(n);
        return oom(p);
    }
    n->lit = v;
    return n;
}

/* Call arguments after '(' up to ')': positional, then name=value. */
static int parse_args(parser *p, ct_node *n)
{
    while (!is_op(p, ")")) {
        if (cur(p)->type == TK_NAME && p->i + 1 < p->n &&
            p->v[p->i + 1].type == TK_OP && !strcmp(p->v[p->i + 1].s, "=")) {
            if (!add_str(p, &n->kwnames, &n->n_kw, cur(p)->s))
                return 0;
            p->i += 2;
            ct_node *v = parse_expr(p, 1);
            if (!v || !list_add(p, &n->kwargs, v))
                return 0;
        } else {
            if (is_op(p, "*") || is_op(p, "**")) {
                fail(p, LOOM_ERR_UNSUPPORTED, "%s",
                     "*args and **kwargs are not supported");
                return 0;
            }
            ct_node *v = parse_expr(p, 1);
            if (!v || !list_add(p, &n->args, v))
                return 0;
        }
        if (!is_op(p, ","))
            break;
        p->i++;
    }
    return expect_op(p, ")");
}

static ct_node *parse_primary(parser *p)
{
    tk *t = cur(p);
    if (t->type == TK_NAME) {
        p->i++;
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True"))
            return lit(p, json_true());
        if (!strcmp(t->s, "false") || !strcmp(t->s, "False"))
            return lit(p, json_false());
        if (!strcmp(t->s, "none") || !strcmp(t->s, "None"))
            return lit(p, json_null());
        ct_node *n = node(p, CT_NAME);
        if (n && !(n->name = loom__ct_strdup(t->s))) {
            free(n);
            return oom(p);
        }
        return n;
    }
    if (t->type == TK_STRING) {
        /* Adjacent literals concatenate, as in Python. */
        size_t total = 0, k = p->i;
        while (k < p->n && p->v[k].type == TK_STRING)
            total += p->v[k++].len;
        char *buf = malloc(total + 1);
        if (!buf)
            return oom(p);
        size_t o = 0;
        while (p->i < k) {
            memcpy(buf + o, p->v[p->i].s, p->v[p->i].len);
            o += p->v[p->i++].len;
        }
        ct_node *n = lit(p, json_stringn_nocheck(buf, o));
        free(buf);
        return n;
    }
    if (t->type == TK_INT) {
        p->i++;
        return lit(p, json_integer(t->i));
    }
    if (t->type == TK_FLOAT) {
        p->i++;
        return lit(p, json_real(t->f));
    }
    if (is_op(p, "(")) {
        p->i++;
        if (is_op(p, ")")) {
            p->i++;
            return node(p, CT_LIST);
        }
        ct_node *e = parse_expr(p, 1);
        if (!e)
            return NULL;
        if (is_op(p, ",") && !(e = parse_tuple(p, e, ")")))
            return NULL;
        if (!expect_op(p, ")")) {
            free_node(e);
            return NULL;
        }
        return e;
    }
    if (is_op(p, "[") || is_op(p, "{")) {
        int dict = is_op(p, "{");
        p->i++;
        ct_node *n = node(p, dict ? CT_DICT : CT_LIST);
        if (!n)
            return NULL;
        while (!is_op(p, dict ? "}" : "]")) {
            ct_node *k = parse_expr(p, 1);
            if (!k || !list_add(p, &n->args, k))
                goto bad;
            if (dict) {
                if (!expect_op(p, ":"))
                    goto bad;
                ct_node *v = parse_expr(p, 1);
                if (!v || !list_add(p, &n->args, v))
                    goto bad;
            }
            if (!is_op(p, ","))
                break;
            p->i++;
        }
        if (!expect_op(p, dict ? "}" : "]"))
            goto bad;
        return n;
    bad:
        free_node(n);
        return NULL;
    }
    char msg[96];
    snprintf(msg, sizeof msg, "unexpected %s in an expression",
             tk_desc(cur(p)));
    return fail(p, LOOM_ERR_FORMAT, "%s", msg);
}

static ct_node *parse_postfix(parser *p, ct_node *n)
{
    while (n) {
        if (is_op(p, ".")) {
            p->i++;
            tk *t = cur(p);
            if (t->type != TK_NAME && t->type != TK_INT) {
                free_node(n);
                return fail(p, LOOM_ERR_FORMAT, "%s",
                            "expected an attribute name after '.'");
            }
            char num[32];
            snprintf(num, sizeof num, "%lld", (long long)t->i);
            n = wrap_named(p, CT_ATTR, n, t->type == TK_NAME ? t->s : num);
            if (!n)
                return NULL;
            p->i++;
        } else if (is_op(p, "[")) {
            p->i++;
            ct_node *s = wrap(p, CT_ITEM, n);
            if (!s)
                return NULL;
            n = s;
            if (!is_op(p, ":") && !(s->b = parse_expr(p, 1))) {
                free_node(n);
                return NULL;
            }
            if (is_op(p, ":")) {
                s->kind = CT_SLICE;
                p->i++;
                if (!is_op(p, ":") && !is_op(p, "]") &&
                    !(s->c = parse_expr(p, 1))) {
                    free_node(n);
                    return NULL;
                }
                if (is_op(p, ":")) {
                    p->i++;
                    ct_node *step = NULL;
                    if (!is_op(p, "]") && !(step = parse_expr(p, 1))) {
                        free_node(n);
                        return NULL;
                    }
                    if (step && !list_add(p, &s->args, step)) {
                        free_node(n);
                        return NULL;
                    }
                }
            }
            if (!expect_op(p, "]")) {
                free_node(n);
                return NULL;
            }
        } else if (is_op(p, "(")) {
            n = parse_call(p, n);
        } else {
            break;
        }
    }
    return n;
}

static int test_arg_start(parser *p)
{
    static const char *const stop[] = {"else", "or", "and", "if",
                                       "not",  "in", "is",  NULL};
    tk *t = cur(p);
    if (t->type == TK_NAME) {
        for (size_t i = 0; stop[i]; i++)
            if (!strcmp(t->s, stop[i]))
                return 0;
        return 1;
    }
    return t->type == TK_STRING || t->type == TK_INT || t->type == TK_FLOAT ||
           is_op(p, "[") || is_op(p, "{");
}

static ct_node *parse_filters(parser *p, ct_node *n)
{
    while (n) {
        if (is_op(p, "|")) {
            p->i++;
            if (cur(p)->type != TK_NAME) {
                free_node(n);
                return fail(p, LOOM_ERR_FORMAT, "%s",
                            "expected a filter name after '|'");
            }
            n = wrap_named(p, CT_FILTER, n, cur(p)->s);
            if (!n)
                return NULL;
            p->i++;
            if (is_op(p, "(")) {
                p->i++;
                if (!parse_args(p, n)) {
                    free_node(n);
                    return NULL;
                }
            }
        } else if (is_name(p, "is")) {
            p->i++;
            ct_node *t = wrap(p, CT_TEST, n);
            if (!t)
                return NULL;
            n = t;
            if (is_name(p, "not")) {
                t->neg = 1;
                p->i++;
            }
            if (cur(p)->type != TK_NAME) {
                free_node(n);
                return fail(p, LOOM_ERR_FORMAT, "%s",
                            "expected a test name after 'is'");
            }
            if (!(t->name = loom__ct_strdup(cur(p)->s))) {
                free_node(n);
                return oom(p);
            }
            p->i++;
            if (is_op(p, "(")) {
                p->i++;
                if (!parse_args(p, t)) {
                    free_node(n);
                    return NULL;
                }
            } else if (test_arg_start(p)) {
                ct_node *arg = parse_postfix(p, parse_primary(p));
                if (!arg || !list_add(p, &t->args, arg)) {
                    free_node(n);
                    return NULL;
                }
            }
        } else if (is_op(p, "(")) {
            n = parse_call(p, n);
        } else {
            break;
        }
    }
    return n;
}

static ct_node *parse_unary(parser *p, int with_filter)
{
    ct_node *n;
    if (is_op(p, "-") || is_op(p, "+")) {
        int neg = is_op(p, "-");
        p->i++;
        ct_node *x = nest_in(p) ? parse_unary(p, 0) : NULL;
        p->nest--;
        if (!x)
            return NULL;
        n = neg ? wrap(p, CT_NEG, x) : x;
    } else {
        n = parse_postfix(p, parse_primary(p));
    }
    return with_filter ? parse_filters(p, n) : n;
}

static ct_node *binop(parser *p, const char *op, ct_node *a, ct_node *b)
{
    if (!a || !b) {
        free_node(a);
        free_node(b);
        return NULL;
    }
    ct_node *n = node(p, CT_BINOP);
    if (!n) {
        free_node(a);
        free_node(b);
        return NULL;
    }
    snprintf(n->op, sizeof n->op, "%s", op);
    n->a = a;
    n->b = b;
    return grown(p, n);
}

static ct_node *parse_pow(parser *p)
{
    ct_node *n = parse_unary(p, 1);
    while (n && is_op(p, "**")) {
        p->i++;
        n = binop(p, "**", n, parse_unary(p, 1));
    }
    return n;
}

static ct_node *parse_math2(parser *p)
{
    ct_node *n = parse_pow(p);
    while (n && (is_op(p, "*") || is_op(p, "/") || is_op(p, "//") ||
                 is_op(p, "%"))) {
        char op[4];
        snprintf(op, sizeof op, "%s", cur(p)->s);
        p->i++;
        n = binop(p, op, n, parse_pow(p));
    }
    return n;
}

static ct_node *parse_concat(parser *p)
{
    ct_node *n = parse_math2(p);
    while (n && is_op(p, "~")) {
        p->i++;
        n = binop(p, "~", n, parse_math2(p));
    }
    return n;
}

static ct_node *parse_math1(parser *p)
{
    ct_node *n = parse_concat(p);
    while (n && (is_op(p, "+") || is_op(p, "-"))) {
        char op[2] = {cur(p)->s[0], 0};
        p->i++;
        n = binop(p, op, n, parse_concat(p));
    }
    return n;
}

static ct_node *parse_compare(parser *p)
{
    ct_node *n = parse_math1(p);
    while (n) {
        const char *op = NULL;
        static const char *const cmp[] = {"==", "!=", "<", ">",
                                          "<=", ">=", NULL};
        for (size_t i = 0; cmp[i]; i++)
            if (is_op(p, cmp[i]))
                op = cmp[i];
        if (op) {
            p->i++;
        } else if (is_name(p, "in")) {
            op = "in";
            p->i++;
        } else if (is_name(p, "not") && is_name_at(p, 1, "in")) {
            op = "notin";
            p->i += 2;
        } else {
            break;
        }
        n = binop(p, op, n, parse_math1(p));
    }
    return n;
}

static ct_node *parse_not(parser *p)
{
    if (is_name(p, "not")) {
        p->i++;
        ct_node *x = nest_in(p) ? parse_not(p) : NULL;
        p->nest--;
        return x ? wrap(p, CT_NOT, x) : NULL;
    }
    return parse_compare(p);
}

static ct_node *logic(parser *p, ct_kind kind, ct_node *a, ct_node *b)
{
    ct_node *n = binop(p, "", a, b);
    if (n)
        n->kind = kind;
    return n;
}

static ct_node *parse_and(parser *p)
{
    ct_node *n = parse_not(p);
    while (n && is_name(p, "and")) {
        p->i++;
        n = logic(p, CT_AND, n, parse_not(p));
    }
    return n;
}

static ct_node *parse_or(parser *p)
{
    ct_node *n = parse_and(p);
    while (n && is_name(p, "or")) {
        p->i++;
        n = logic(p, CT_OR, n, parse_and(p));
    }
    return n;
}

static ct_node *parse_cond(parser *p, int with_cond);

static ct_node *parse_expr(parser *p, int with_cond)
{
    ct_node *n = nest_in(p) ? parse_cond(p, with_cond) : NULL;
    p->nest--;
    return n;
}

static ct_node *parse_cond(parser *p, int with_cond)
{
    ct_node *n = parse_or(p);
    while (n && with_cond && is_name(p, "if")) {
        p->i++;
        ct_node *c = node(p, CT_COND);
        if (!c) {
            free_node(n);
            return NULL;
        }
        c->b = n;
        n = c;
        if (!(c->a = parse_or(p))) {
            free_node(n);
            return NULL;
        }
        if (is_name(p, "else")) {
            p->i++;
            if (!(c->c = parse_expr(p, 1))) {
                free_node(n);
                return NULL;
            }
        }
        if (!(n = grown(p, c)))
            return NULL;
    }
    return n;
}

/* ----------------------------------------------------------- statements */

static int parse_body(parser *p, ct_list *out, const char *const *ends);

static int end_of_block(parser *p)
{
    return expect(p, TK_BLOCK_END, "'%}'");
}

/* The end tag whose name parse_body() stopped at, and its '%}'. */
static int end_tag(parser *p)
{
    p->i++;
    return end_of_block(p);
}

/* The '%}' that opens a body, the body, and its end tag {% END %}. */
static int body_until(parser *p, ct_list *out, const char *end)
{
    const char *const ends[] = {end, NULL};
    return end_of_block(p) && parse_body(p, out, ends) && end_tag(p);
}

static ct_node *parse_if(parser *p)
{
    ct_node *n = node(p, CT_IF);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    if (!n || !(n->a = parse_expr(p, 1)) || !end_of_block(p) ||
        !parse_body(p, &n->body, ends))
        goto bad;
    if (is_name(p, "elif")) {
        p->i++;
        ct_node *e = parse_if(p);
        if (!e || !list_add(p, &n->orelse, e))
            goto bad;
        return n; /* the nested if consumed endif */
    }
    if (is_name(p, "else")) {
        p->i++;
        if (!body_until(p, &n->orelse, "endif"))
            goto bad;
        return n;
    }
    if (!is_name(p, "endif")) {
        fail(p, LOOM_ERR_FORMAT, "%s", "expected endif");
        goto bad;
    }
    if (!end_tag(p))
        goto bad;
    return n;
bad:
    free_node(n);
    return NULL;
}

/* The NAME token at the cursor, appended to N's targets (loop variables,
 * set targets, macro parameters); WHAT is the message when it is absent. */
static int take_target(parser *p, ct_node *n, const char *what)
{
    if (cur(p)->type != TK_NAME) {
        fail(p, LOOM_ERR_FORMAT, "%s", what);
        return 0;
    }
    if (!add_str(p, &n->targets, &n->n_targets, cur(p)->s))
        return 0;
    p->i++;
    return 1;
}

static ct_node *parse_for(parser *p)
{
    ct_node *n = node(p, CT_FOR);
    if (!n)
        return NULL;
    do {
        if (n->n_targets)
            p->i++;
        if (!take_target(p, n, "expected a loop variable"))
            goto bad;
    } while (is_op(p, ","));
    if (!is_name(p, "in")) {
        fail(p, LOOM_ERR_FORMAT, "%s", "expected 'in' in a for loop");
        goto bad;
    }
    p->i++;
    if (!(n->a = parse_expr(p, 0)))
        goto bad;
    if (is_name(p, "if")) {
        p->i++;
        if (!(n->b = parse_expr(p, 0)))
            goto bad;
    }
    if (is_name(p, "recursive")) {
        fail(p, LOOM_ERR_UNSUPPORTED, "%s",
             "recursive loops are not supported");
        goto bad;
    }
    static const char *const ends[] = {"else", "endfor", NULL};
    if (!end_of_block(p) || !parse_body(p, &n->body, ends))
        goto bad;
    if (is_name(p, "else")) {
        p->i++;
        if (!body_until(p, &n->orelse, "endfor"))
            goto bad;
    } else if (!end_tag(p)) {
        goto bad;
    }
    return n;
bad:
    free_node(n);
    return NULL;
}

static ct_node *parse_set(parser *p)
{
    ct_node *n = node(p, CT_SET);
    if (!n)
        return NULL;
    if (!take_target(p, n, "expected a name after set"))
        goto bad;
    if (is_op(p, ".")) {
        p->i++;
        if (cur(p)->type != TK_NAME ||
            !(n->attr = loom__ct_strdup(cur(p)->s))) {
            fail(p, LOOM_ERR_FORMAT, "%s", "expected an attribute after '.'");
            goto bad;
        }
        p->i++;
    } else {
        while (is_op(p, ",")) {
            p->i++;
            if (!take_target(p, n, "expected a name after ','"))
                goto bad;
        }
    }
    if (is_op(p, "=")) {
        p->i++;
        ct_node *e = parse_expr(p, 1);
        if (!e)
            goto bad;
        /* set a, b = x, y */
        if (is_op(p, ",") && !(e = parse_tuple(p, e, NULL)))
            goto bad;
        n->a = e;
        if (!end_of_block(p))
            goto bad;
        return n;
    }
    if (!body_until(p, &n->body, "endset"))
        goto bad;
    return n;
bad:
    free_node(n);
    return NULL;
}

static ct_node *parse_macro(parser *p)
{
    ct_node *n = node(p, CT_MACRO);
    if (!n)
        return NULL;
    if (cur(p)->type != TK_NAME || !(n->name = loom__ct_strdup(cur(p)->s))) {
        fail(p, LOOM_ERR_FORMAT, "%s", "expected a macro name");
        goto bad;
    }
    p->i++;
    if (!expect_op(p, "("))
        goto bad;
    while (!is_op(p, ")")) {
        if (!take_target(p, n, "expected a parameter name"))
            goto bad;
        ct_node *def = NULL;
        if (is_op(p, "=")) {
            p->i++;
            if (!(def = parse_expr(p, 1)))
                goto bad;
        }
        if (!list_add(p, &n->args, def))
            goto bad;
        if (!is_op(p, ","))
            break;
        p->i++;
    }
    if (!expect_op(p, ")") || !body_until(p, &n->body, "endmacro"))
        goto bad;
    return n;
bad:
    free_node(n);
    return NULL;
}

static ct_node *parse_stmt(parser *p)
{
    tk *t = cur(p);
    if (t->type == TK_TEXT) {
        ct_node *n = node(p, CT_TEXT);
        if (!n)
            return NULL;
        n->name = malloc(t->len + 1);
        if (!n->name) {
            free(n);
            return oom(p);
        }
        memcpy(n->name, t->s, t->len + 1);
        n->name_len = t->len;
        p->i++;
        return n;
    }
    if (t->type == TK_VAR_BEGIN) {
        p->i++;
        ct_node *n = node(p, CT_OUTPUT);
        if (!n)
            return NULL;
        if (!(n->a = parse_expr(p, 1)) || !expect(p, TK_VAR_END, "'}}'")) {
            free_node(n);
            return NULL;
        }
        return n;
    }
    if (t->type != TK_BLOCK_BEGIN)
        return fail(p, LOOM_ERR_FORMAT, "unexpected %s", tk_desc(t));
    p->i++;
    t = cur(p);
    if (t->type != TK_NAME)
        return fail(p, LOOM_ERR_FORMAT, "%s", "expected a statement name");
    p->i++;
    if (!strcmp(t->s, "if"))
        return parse_if(p);
    if (!strcmp(t->s, "for"))
        return parse_for(p);
    if (!strcmp(t->s, "set"))
        return parse_set(p);
    if (!strcmp(t->s, "macro"))
        return parse_macro(p);
    if (!strcmp(t->s, "break") || !strcmp(t->s, "continue")) {
        ct_node *n = node(p, t->s[0] == 'b' ? CT_BREAK : CT_CONTINUE);
        if (n && !end_of_block(p)) {
            free_node(n);
            return NULL;
        }
        return n;
    }
    if (!strcmp(t->s, "filter")) {
        /* {% filter a | b(x) %}body{% endfilter %} */
        ct_node *n = node(p, CT_OUTPUT), *body = node(p, CT_NAME);
        if (body && !(body->name = loom__ct_strdup(CT_FILTER_BODY))) {
            free_node(body);
            body = NULL;
        }
        if (!n || !body) {
            free_node(n);
            free_node(body);
            return oom(p);
        }
        n->neg = 1;
        if (cur(p)->type != TK_NAME) {
            free_node(n);
            free_node(body);
            return fail(p, LOOM_ERR_FORMAT, "%s",
                        "expected a filter name after 'filter'");
        }
        ct_node *f = wrap_named(p, CT_FILTER, body, cur(p)->s);
        if (!f) {
            free_node(n);
            return NULL;
        }
        p->i++;
        if (is_op(p, "(")) {
            p->i++;
            if (!parse_args(p, f)) {
                free_node(f);
                free_node(n);
                return NULL;
            }
        }
        if (!(n->a = parse_filters(p, f)) ||
            !body_until(p, &n->body, "endfilter")) {
            free_node(n);
            return NULL;
        }
        return n;
    }
    if (!strcmp(t->s, "generation")) {
        /* HF's marker of assistant text: rendered as its body. */
        ct_node *n = node(p, CT_BLOCK);
        if (!n || !body_until(p, &n->body, "endgeneration")) {
            free_node(n);
            return NULL;
        }
        return n;
    }
    p->i--;
    return fail(p, LOOM_ERR_UNSUPPORTED, "the '%s' statement is not supported",
                t->s);
}

/* Statements until a block tag naming one of ENDS (left unconsumed, just
 * after its '{%') or the end of the template (an error when ENDS is set). */
static int parse_body_in(parser *p, ct_list *out, const char *const *ends);

static int parse_body(parser *p, ct_list *out, const char *const *ends)
{
    int ok = nest_in(p) && parse_body_in(p, out, ends);
    p->nest--;
    return ok;
}

static int parse_body_in(parser *p, ct_list *out, const char *const *ends)
{
    for (;;) {
        tk *t = cur(p);
        if (t->type == TK_EOF) {
            if (ends) {
                size_t last = 0;
                while (ends[last + 1])
                    last++;
                fail(p, LOOM_ERR_FORMAT, "missing {%% %s %%}", ends[last]);
                return 0;
            }
            return 1;
        }
        if (t->type == TK_BLOCK_BEGIN && ends && p->i + 1 < p->n &&
            p->v[p->i + 1].type == TK_NAME) {
            for (size_t k = 0; ends[k]; k++) {
                if (!strcmp(p->v[p->i + 1].s, ends[k])) {
                    p->i++;
                    return 1;
                }
            }
        }
        if (t->type == TK_BLOCK_BEGIN && p->i + 1 < p->n &&
            p->v[p->i + 1].type == TK_NAME) {
            static const char *const stray[] = {
                "endif", "endfor", "else", "elif", "endset", "endmacro", NULL};
            for (size_t k = 0; stray[k]; k++) {
                if (!strcmp(p->v[p->i + 1].s, stray[k])) {
                    p->i++;
                    fail(p, LOOM_ERR_FORMAT, "unexpected '%s'", stray[k]);
                    return 0;
                }
            }
        }
        ct_node *s = parse_stmt(p);
        if (!s || !list_add(p, out, s))
            return 0;
    }
}

loom_status loom__ct_parse(tk *v, size_t n, ct_list *body, loom_err *err)
{
    parser p = {.v = v, .n = n, .err = err};
    if (!parse_body(&p, body, NULL)) {
        loom__ct_free_list(body);
        return p.failed ? p.failed : LOOM_ERR_FORMAT;
    }
    return LOOM_OK;
}
