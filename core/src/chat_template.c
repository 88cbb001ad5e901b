/* Chat templates: the Jinja lexer (with HF's trim_blocks and lstrip_blocks),
 * the parser into a syntax tree, and loading from tokenizer_config.json. The
 * interpreter is chat_template_eval.c. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/platform.h>

#include "chat_template_impl.h"

/* strdup is POSIX, not C11. */
static char *strdup_safe(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ---------------------------------------------------------------- lexer */

typedef enum tk_type {
    TK_TEXT,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STRING,
    TK_INT,
    TK_FLOAT,
    TK_OP,
    TK_EOF,
} tk_type;

typedef struct tk {
    tk_type type;
    int line;
    char *s; /* text, name, string value or operator */
    size_t len;
    json_int_t i;
    double f;
} tk;

typedef struct lexer {
    const char *src;
    size_t len, pos;
    int line;
    tk *v;
    size_t n, cap;
    loom_err *err;
} lexer;

static loom_status lex_fail(lexer *lx, const char *fmt, const char *what)
{
    char msg[256];
    snprintf(msg, sizeof msg, fmt, what);
    return loom_err_set(lx->err, LOOM_ERR_FORMAT,
                        "chat template line %d: %s", lx->line, msg);
}

static int push(lexer *lx, tk_type type, const char *s, size_t len, int line)
{
    if (lx->n == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        tk *v = realloc(lx->v, cap * sizeof *v);
        if (!v)
            return 0;
        lx->v = v;
        lx->cap = cap;
    }
    tk *t = &lx->v[lx->n];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->line = line;
    if (s) {
        t->s = malloc(len + 1);
        if (!t->s)
            return 0;
        memcpy(t->s, s, len);
        t->s[len] = '\0';
        t->len = len;
    }
    lx->n++;
    return 1;
}

static void advance_to(lexer *lx, size_t to)
{
    for (; lx->pos < to; lx->pos++)
        if (lx->src[lx->pos] == '\n')
            lx->line++;
}

/* A string literal at lx->pos (Python escapes). */
static loom_status lex_string(lexer *lx)
{
    char q = lx->src[lx->pos];
    int line = lx->line;
    char *buf = malloc(lx->len - lx->pos + 1);
    if (!buf)
        return loom_err_set(lx->err, LOOM_ERR_NOMEM, "out of memory");
    size_t n = 0, p = lx->pos + 1;
    while (p < lx->len && lx->src[p] != q) {
        char c = lx->src[p++];
        if (c != '\\' || p >= lx->len) {
            buf[n++] = c;
            continue;
        }
        c = lx->src[p++];
        switch (c) {
        case 'n': buf[n++] = '\n'; break;
        case 't': buf[n++] = '\t'; break;
        case 'r': buf[n++] = '\r'; break;
        case '0': buf[n++] = '\0'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case '\\': case '\'': case '"': buf[n++] = c; break;
        case 'x': case 'u': case 'U': {
            int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < digits; k++, p++) {
                char h = p < lx->len ? lx->src[p] : 0;
                if (!isxdigit((unsigned char)h)) {
                    free(buf);
                    return lex_fail(lx, "bad \\%s escape in a string", "x/u");
                }
                cp = cp * 16 + (uint32_t)(isdigit((unsigned char)h)
                                              ? h - '0'
                                              : tolower((unsigned char)h) - 'a' + 10);
            }
            /* UTF-8 of cp (at most 4 bytes; the escape took >= 4). */
            if (cp < 0x80) {
                buf[n++] = (char)cp;
            } else if (cp < 0x800) {
                buf[n++] = (char)(0xC0 | (cp >> 6));
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                buf[n++] = (char)(0xE0 | (cp >> 12));
                buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                buf[n++] = (char)(0xF0 | (cp >> 18));
                buf[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default: /* Python keeps unknown escapes as they are */
            buf[n++] = '\\';
            buf[n++] = c;
        }
    }
    if (p >= lx->len) {
        free(buf);
        return lex_fail(lx, "unterminated string%s", "");
    }
    int ok = push(lx, TK_STRING, buf, n, line);
    free(buf);
    if (!ok)
        return loom_err_set(lx->err, LOOM_ERR_NOMEM, "out of memory");
    advance_to(lx, p + 1);
    return LOOM_OK;
}

/* Tokens of one tag up to its end marker; sets *strip_after when the tag
 * ends with '-', *plus when with '+'. */
static loom_status lex_tag(lexer *lx, int block, int *strip_after, int *plus)
{
    static const char *const ops[] = {"**", "//", "==", "!=", "<=", ">=",
                                      "+",  "-",  "*",  "/",  "%",  "~",
                                      "<",  ">",  "=",  "(",  ")",  "[",
                                      "]",  "{",  "}",  ",",  ".",  ":",
                                      "|",  NULL};
    int depth = 0;
    const char *end = block ? "%}" : "}}";
    *strip_after = *plus = 0;
    for (;;) {
        while (lx->pos < lx->len && isspace((unsigned char)lx->src[lx->pos]))
            advance_to(lx, lx->pos + 1);
        if (lx->pos >= lx->len)
            return lex_fail(lx, "unterminated %s tag", block ? "{%" : "{{");
        const char *p = lx->src + lx->pos;
        size_t left = lx->len - lx->pos;
        if (depth == 0) {
            if (left >= 3 && (p[0] == '-' || (block && p[0] == '+')) &&
                !strncmp(p + 1, end, 2)) {
                *strip_after = p[0] == '-';
                *plus = p[0] == '+';
                advance_to(lx, lx->pos + 3);
                return push(lx, block ? TK_BLOCK_END : TK_VAR_END, NULL, 0,
                            lx->line)
                           ? LOOM_OK
                           : loom_err_set(lx->err, LOOM_ERR_NOMEM,
                                          "out of memory");
            }
            if (left >= 2 && !strncmp(p, end, 2)) {
                advance_to(lx, lx->pos + 2);
                return push(lx, block ? TK_BLOCK_END : TK_VAR_END, NULL, 0,
                            lx->line)
                           ? LOOM_OK
                           : loom_err_set(lx->err, LOOM_ERR_NOMEM,
                                          "out of memory");
            }
        }
        if (p[0] == '\'' || p[0] == '"') {
            loom_status st = lex_string(lx);
            if (st != LOOM_OK)
                return st;
            continue;
        }
        if (isalpha((unsigned char)p[0]) || p[0] == '_') {
            size_t k = 1;
            while (k < left && (isalnum((unsigned char)p[k]) || p[k] == '_'))
                k++;
            if (!push(lx, TK_NAME, p, k, lx->line))
                return loom_err_set(lx->err, LOOM_ERR_NOMEM, "out of memory");
            advance_to(lx, lx->pos + k);
            continue;
        }
        if (isdigit((unsigned char)p[0])) {
            size_t k = 0;
            int is_float = 0;
            while (k < left && (isdigit((unsigned char)p[k]) || p[k] == '_'))
                k++;
            if (k + 1 < left && p[k] == '.' && isdigit((unsigned char)p[k + 1])) {
                is_float = 1;
                k++;
                while (k < left && isdigit((unsigned char)p[k]))
                    k++;
            }
            if (k < left && (p[k] == 'e' || p[k] == 'E')) {
                size_t e = k + 1;
                if (e < left && (p[e] == '+' || p[e] == '-'))
                    e++;
                if (e < left && isdigit((unsigned char)p[e])) {
                    is_float = 1;
                    k = e;
                    while (k < left && isdigit((unsigned char)p[k]))
                        k++;
                }
            }
            char num[64];
            size_t m = 0;
            for (size_t q = 0; q < k && m < sizeof num - 1; q++)
                if (p[q] != '_')
                    num[m++] = p[q];
            num[m] = '\0';
            if (!push(lx, is_float ? TK_FLOAT : TK_INT, NULL, 0, lx->line))
                return loom_err_set(lx->err, LOOM_ERR_NOMEM, "out of memory");
            lx->v[lx->n - 1].i = strtoll(num, NULL, 10);
            lx->v[lx->n - 1].f = strtod(num, NULL);
            advance_to(lx, lx->pos + k);
            continue;
        }
        int found = 0;
        for (size_t o = 0; ops[o]; o++) {
            size_t k = strlen(ops[o]);
            if (left >= k && !strncmp(p, ops[o], k)) {
                if (strchr("([{", p[0]) && k == 1)
                    depth++;
                if (strchr(")]}", p[0]) && k == 1 && depth > 0)
                    depth--;
                if (!push(lx, TK_OP, p, k, lx->line))
                    return loom_err_set(lx->err, LOOM_ERR_NOMEM,
                                        "out of memory");
                advance_to(lx, lx->pos + k);
                found = 1;
                break;
            }
        }
        if (!found) {
            char c[2] = {p[0], 0};
            return lex_fail(lx, "unexpected character '%s'", c);
        }
    }
}

static loom_status lex(lexer *lx)
{
    int line_starting = 1;
    while (lx->pos < lx->len) {
        const char *tag = NULL;
        for (size_t i = lx->pos; i + 1 < lx->len; i++) {
            if (lx->src[i] == '{' && strchr("{%#", lx->src[i + 1])) {
                tag = lx->src + i;
                break;
            }
        }
        size_t tstart = tag ? (size_t)(tag - lx->src) : lx->len;
        const char *text = lx->src + lx->pos;
        size_t tlen = tstart - lx->pos;
        int text_line = lx->line;
        if (tag) {
            char ctl = tstart + 2 < lx->len ? tag[2] : 0;
            int block_like = tag[1] == '%' || tag[1] == '#';
            if (ctl == '-') {
                while (tlen && isspace((unsigned char)text[tlen - 1]))
                    tlen--;
            } else if (ctl != '+' && block_like) {
                /* lstrip_blocks: spaces between a line's start and a block
                 * tag go. */
                size_t l = tlen;
                while (l && text[l - 1] != '\n')
                    l--;
                if (l > 0 || line_starting) {
                    size_t k = l;
                    while (k < tlen && isspace((unsigned char)text[k]))
                        k++;
                    if (k == tlen && k > l)
                        tlen = l;
                }
            }
        }
        if (tlen && !push(lx, TK_TEXT, text, tlen, text_line))
            return loom_err_set(lx->err, LOOM_ERR_NOMEM, "out of memory");
        advance_to(lx, tstart);
        if (!tag)
            break;
        int strip_after = 0, plus = 0, block = 0;
        if (tag[1] == '#') {
            const char *e = NULL;
            for (size_t i = tstart + 2; i + 1 < lx->len; i++)
                if (lx->src[i] == '#' && lx->src[i + 1] == '}') {
                    e = lx->src + i;
                    break;
                }
            if (!e)
                return lex_fail(lx, "unterminated comment%s", "");
            strip_after = e > tag + 2 && e[-1] == '-';
            block = 1;
            advance_to(lx, (size_t)(e - lx->src) + 2);
        } else {
            block = tag[1] == '%';
            if (!push(lx, block ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, NULL, 0,
                      lx->line))
                return loom_err_set(lx->err, LOOM_ERR_NOMEM, "out of memory");
            size_t skip = tstart + 2 < lx->len &&
                                  (tag[2] == '-' || (block && tag[2] == '+'))
                              ? 3
                              : 2;
            advance_to(lx, tstart + skip);
            loom_status st = lex_tag(lx, block, &strip_after, &plus);
            if (st != LOOM_OK)
                return st;
        }
        line_starting = 0;
        if (strip_after) {
            while (lx->pos < lx->len && isspace((unsigned char)lx->src[lx->pos])) {
                line_starting = lx->src[lx->pos] == '\n';
                advance_to(lx, lx->pos + 1);
            }
        } else if (block && !plus && lx->pos < lx->len &&
                   lx->src[lx->pos] == '\n') {
            /* trim_blocks: the newline after a block tag goes. */
            advance_to(lx, lx->pos + 1);
            line_starting = 1;
        }
    }
    return push(lx, TK_EOF, NULL, 0, lx->line)
               ? LOOM_OK
               : loom_err_set(lx->err, LOOM_ERR_NOMEM, "out of memory");
}

/* --------------------------------------------------------------- parser */

typedef struct parser {
    tk *v;
    size_t n, i;
    loom_err *err;
    int failed;
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

static const char *tk_desc(tk *t)
{
    switch (t->type) {
    case TK_EOF: return "end of template";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_END: return "'%}'";
    case TK_TEXT: return "text";
    default: return t->s ? t->s : "a number";
    }
}

static int expect_op(parser *p, const char *op)
{
    if (!is_op(p, op)) {
        char msg[96];
        snprintf(msg, sizeof msg, "expected '%s', found %s", op,
                 tk_desc(cur(p)));
        fail(p, LOOM_ERR_FORMAT, "%s", msg);
        return 0;
    }
    p->i++;
    return 1;
}

static int expect(parser *p, tk_type type, const char *what)
{
    if (cur(p)->type != type) {
        char msg[96];
        snprintf(msg, sizeof msg, "expected %s, found %s", what,
                 tk_desc(cur(p)));
        fail(p, LOOM_ERR_FORMAT, "%s", msg);
        return 0;
    }
    p->i++;
    return 1;
}

static ct_node *node(parser *p, ct_kind kind)
{
    ct_node *n = calloc(1, sizeof *n);
    if (!n)
        return fail(p, LOOM_ERR_NOMEM, "out of memory%s", "");
    n->kind = kind;
    n->line = cur(p)->line;
    return n;
}

static void free_node(ct_node *n);

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
            fail(p, LOOM_ERR_NOMEM, "out of memory%s", "");
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
    char *d = strdup_safe(s);
    if (!g || !d) {
        if (g)
            *v = g;
        free(d);
        fail(p, LOOM_ERR_NOMEM, "out of memory%s", "");
        return 0;
    }
    *v = g;
    g[(*n)++] = d;
    return 1;
}

static ct_node *parse_expr(parser *p, int with_cond);
static ct_node *parse_unary(parser *p, int with_filter);

static ct_node *lit(parser *p, json_t *v)
{
    ct_node *n = node(p, CT_LIT);
    if (!n || !v) {
        json_decref(v);
        free(n);
        return fail(p, LOOM_ERR_NOMEM, "out of memory%s", "");
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
        if (n && !(n->name = strdup_safe(t->s))) {
            free(n);
            return fail(p, LOOM_ERR_NOMEM, "out of memory%s", "");
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
            return fail(p, LOOM_ERR_NOMEM, "out of memory%s", "");
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
        ct_node *tuple = NULL;
        if (is_op(p, ")")) {
            p->i++;
            return node(p, CT_LIST);
        }
        ct_node *e = parse_expr(p, 1);
        if (!e)
            return NULL;
        if (is_op(p, ",")) {
            tuple = node(p, CT_LIST);
            if (!tuple || !list_add(p, &tuple->args, e)) {
                free_node(tuple);
                return NULL;
            }
            while (is_op(p, ",")) {
                p->i++;
                if (is_op(p, ")"))
                    break;
                ct_node *x = parse_expr(p, 1);
                if (!x || !list_add(p, &tuple->args, x)) {
                    free_node(tuple);
                    return NULL;
                }
            }
            e = tuple;
        }
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
            ct_node *a = node(p, CT_ATTR);
            char num[32];
            snprintf(num, sizeof num, "%lld", (long long)t->i);
            if (!a || !(a->name = strdup_safe(t->type == TK_NAME ? t->s : num))) {
                free(a);
                free_node(n);
                return fail(p, LOOM_ERR_NOMEM, "out of memory%s", "");
            }
            p->i++;
            a->a = n;
            n = a;
        } else if (is_op(p, "[")) {
            p->i++;
            ct_node *s = node(p, CT_ITEM);
            if (!s) {
                free_node(n);
                return NULL;
            }
            s->a = n;
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
            p->i++;
            ct_node *c = node(p, CT_CALL);
            if (!c) {
                free_node(n);
                return NULL;
            }
            c->a = n;
            n = c;
            if (!parse_args(p, c)) {
                free_node(n);
                return NULL;
            }
        } else {
            break;
        }
    }
    return n;
}

static int test_arg_start(parser *p)
{
    static const char *const stop[] = {"else", "or", "and", "if", "not",
                                       "in",   "is", NULL};
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
            ct_node *f = node(p, CT_FILTER);
            if (!f || !(f->name = strdup_safe(cur(p)->s))) {
                free(f);
                free_node(n);
                return fail(p, LOOM_ERR_NOMEM, "out of memory%s", "");
            }
            p->i++;
            f->a = n;
            n = f;
            if (is_op(p, "(")) {
                p->i++;
                if (!parse_args(p, f)) {
                    free_node(n);
                    return NULL;
                }
            }
        } else if (is_name(p, "is")) {
            p->i++;
            ct_node *t = node(p, CT_TEST);
            if (!t) {
                free_node(n);
                return NULL;
            }
            t->a = n;
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
            if (!(t->name = strdup_safe(cur(p)->s))) {
                free_node(n);
                return fail(p, LOOM_ERR_NOMEM, "out of memory%s", "");
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
            p->i++;
            ct_node *c = node(p, CT_CALL);
            if (!c) {
                free_node(n);
                return NULL;
            }
            c->a = n;
            n = c;
            if (!parse_args(p, c)) {
                free_node(n);
                return NULL;
            }
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
        ct_node *x = parse_unary(p, 0);
        if (!x)
            return NULL;
        if (!neg) {
            n = x;
        } else {
            n = node(p, CT_NEG);
            if (!n) {
                free_node(x);
                return NULL;
            }
            n->a = x;
        }
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
    return n;
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
        static const char *const cmp[] = {"==", "!=", "<", ">", "<=", ">=",
                                          NULL};
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
        ct_node *x = parse_not(p);
        if (!x)
            return NULL;
        ct_node *n = node(p, CT_NOT);
        if (!n) {
            free_node(x);
            return NULL;
        }
        n->a = x;
        return n;
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

static ct_node *parse_expr(parser *p, int with_cond)
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
    }
    return n;
}

/* ----------------------------------------------------------- statements */

static int parse_body(parser *p, ct_list *out, const char *const *ends);

static int end_of_block(parser *p)
{
    return expect(p, TK_BLOCK_END, "'%}'");
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
        static const char *const end[] = {"endif", NULL};
        p->i++;
        if (!end_of_block(p) || !parse_body(p, &n->orelse, end))
            goto bad;
    }
    if (!is_name(p, "endif")) {
        fail(p, LOOM_ERR_FORMAT, "%s", "expected endif");
        goto bad;
    }
    p->i++;
    if (!end_of_block(p))
        goto bad;
    return n;
bad:
    free_node(n);
    return NULL;
}

static ct_node *parse_for(parser *p)
{
    ct_node *n = node(p, CT_FOR);
    if (!n)
        return NULL;
    do {
        if (n->n_targets)
            p->i++;
        if (cur(p)->type != TK_NAME) {
            fail(p, LOOM_ERR_FORMAT, "%s", "expected a loop variable");
            goto bad;
        }
        if (!add_str(p, &n->targets, &n->n_targets, cur(p)->s))
            goto bad;
        p->i++;
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
        fail(p, LOOM_ERR_UNSUPPORTED, "%s", "recursive loops are not supported");
        goto bad;
    }
    static const char *const ends[] = {"else", "endfor", NULL};
    if (!end_of_block(p) || !parse_body(p, &n->body, ends))
        goto bad;
    if (is_name(p, "else")) {
        static const char *const end[] = {"endfor", NULL};
        p->i++;
        if (!end_of_block(p) || !parse_body(p, &n->orelse, end))
            goto bad;
    }
    p->i++; /* endfor */
    if (!end_of_block(p))
        goto bad;
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
    if (cur(p)->type != TK_NAME) {
        fail(p, LOOM_ERR_FORMAT, "%s", "expected a name after set");
        goto bad;
    }
    if (!add_str(p, &n->targets, &n->n_targets, cur(p)->s))
        goto bad;
    p->i++;
    if (is_op(p, ".")) {
        p->i++;
        if (cur(p)->type != TK_NAME ||
            !(n->attr = strdup_safe(cur(p)->s))) {
            fail(p, LOOM_ERR_FORMAT, "%s", "expected an attribute after '.'");
            goto bad;
        }
        p->i++;
    } else {
        while (is_op(p, ",")) {
            p->i++;
            if (cur(p)->type != TK_NAME) {
                fail(p, LOOM_ERR_FORMAT, "%s", "expected a name after ','");
                goto bad;
            }
            if (!add_str(p, &n->targets, &n->n_targets, cur(p)->s))
                goto bad;
            p->i++;
        }
    }
    if (is_op(p, "=")) {
        p->i++;
        ct_node *e = parse_expr(p, 1);
        if (!e)
            goto bad;
        if (is_op(p, ",")) { /* set a, b = x, y */
            ct_node *t = node(p, CT_LIST);
            if (!t || !list_add(p, &t->args, e)) {
                free_node(t);
                goto bad;
            }
            e = t;
            while (is_op(p, ",")) {
                p->i++;
                ct_node *x = parse_expr(p, 1);
                if (!x || !list_add(p, &e->args, x)) {
                    free_node(e);
                    goto bad;
                }
            }
        }
        n->a = e;
        if (!end_of_block(p))
            goto bad;
        return n;
    }
    static const char *const ends[] = {"endset", NULL};
    if (!end_of_block(p) || !parse_body(p, &n->body, ends))
        goto bad;
    p->i++;
    if (!end_of_block(p))
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
    if (cur(p)->type != TK_NAME || !(n->name = strdup_safe(cur(p)->s))) {
        fail(p, LOOM_ERR_FORMAT, "%s", "expected a macro name");
        goto bad;
    }
    p->i++;
    if (!expect_op(p, "("))
        goto bad;
    while (!is_op(p, ")")) {
        if (cur(p)->type != TK_NAME) {
            fail(p, LOOM_ERR_FORMAT, "%s", "expected a parameter name");
            goto bad;
        }
        if (!add_str(p, &n->targets, &n->n_targets, cur(p)->s))
            goto bad;
        p->i++;
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
    static const char *const ends[] = {"endmacro", NULL};
    if (!expect_op(p, ")") || !end_of_block(p) ||
        !parse_body(p, &n->body, ends))
        goto bad;
    p->i++;
    if (!end_of_block(p))
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
            return fail(p, LOOM_ERR_NOMEM, "out of memory%s", "");
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
    if (!strcmp(t->s, "generation")) {
        /* HF's marker of assistant text: rendered as its body. */
        static const char *const ends[] = {"endgeneration", NULL};
        ct_node *n = node(p, CT_BLOCK);
        if (!n || !end_of_block(p) || !parse_body(p, &n->body, ends)) {
            free_node(n);
            return NULL;
        }
        p->i++;
        if (!end_of_block(p)) {
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
static int parse_body(parser *p, ct_list *out, const char *const *ends)
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
            static const char *const stray[] = {"endif", "endfor", "else",
                                                "elif",  "endset", "endmacro",
                                                NULL};
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

/* ------------------------------------------------------------------ API */

loom_status loom_chat_template_parse(const char *source,
                                     loom_chat_template **out, loom_err *err)
{
    /* Jinja reads the source with universal newlines and drops one final
     * newline (keep_trailing_newline is off in HF's environment). */
    size_t len = strlen(source);
    char *src = malloc(len + 1);
    if (!src)
        return loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (source[i] == '\r') {
            src[n++] = '\n';
            if (i + 1 < len && source[i + 1] == '\n')
                i++;
        } else {
            src[n++] = source[i];
        }
    }
    if (n && src[n - 1] == '\n')
        n--;
    src[n] = '\0';

    lexer lx = {.src = src, .len = n, .line = 1, .err = err};
    loom_status st = lex(&lx);
    loom_chat_template *t = NULL;
    if (st == LOOM_OK) {
        t = calloc(1, sizeof *t);
        parser p = {.v = lx.v, .n = lx.n, .err = err};
        if (!t) {
            st = loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
        } else if (!parse_body(&p, &t->body, NULL)) {
            st = p.failed ? p.failed : LOOM_ERR_FORMAT;
            loom_chat_template_free(t);
            t = NULL;
        }
    }
    for (size_t i = 0; i < lx.n; i++)
        free(lx.v[i].s);
    free(lx.v);
    free(src);
    if (st == LOOM_OK)
        *out = t;
    return st;
}

void loom_chat_template_free(loom_chat_template *t)
{
    if (!t)
        return;
    loom__ct_free_list(&t->body);
    free(t->bos);
    free(t->eos);
    free(t);
}

const char *loom_chat_template_bos(const loom_chat_template *t)
{
    return t->bos ? t->bos : "";
}

const char *loom_chat_template_eos(const loom_chat_template *t)
{
    return t->eos ? t->eos : "";
}

/* A special token in tokenizer_config.json: a string, or an object with
 * "content" (the AddedToken form). */
static char *token_string(json_t *v)
{
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? strdup_safe(json_string_value(v)) : NULL;
}

loom_status loom_chat_template_load(const char *dir, loom_chat_template **out,
                                    loom_err *err)
{
    char path[4096];
    if (loom_dir_exists(dir))
        snprintf(path, sizeof path, "%s%ctokenizer_config.json", dir,
                 loom_path_sep());
    else
        snprintf(path, sizeof path, "%s", dir);
    char *data = NULL;
    size_t size = 0;
    loom_status st = loom_read_file(path, &data, &size, err);
    if (st != LOOM_OK)
        return st;
    json_error_t je;
    json_t *cfg = json_loadb(data, size, 0, &je);
    free(data);
    if (!cfg)
        return loom_err_set(err, LOOM_ERR_FORMAT, "%s:%d:%d: %s", path,
                            je.line, je.column, je.text);
    json_t *tpl = json_object_get(cfg, "chat_template");
    if (json_is_array(tpl)) {
        size_t i;
        json_t *v, *found = NULL;
        json_array_foreach(tpl, i, v)
        {
            const char *name = json_string_value(json_object_get(v, "name"));
            if (name && !strcmp(name, "default"))
                found = json_object_get(v, "template");
        }
        tpl = found;
    }
    if (!json_is_string(tpl)) {
        json_decref(cfg);
        return loom_err_set(err, LOOM_ERR_NOT_FOUND,
                            "%s: no chat_template", path);
    }
    st = loom_chat_template_parse(json_string_value(tpl), out, err);
    if (st == LOOM_OK) {
        (*out)->bos = token_string(json_object_get(cfg, "bos_token"));
        (*out)->eos = token_string(json_object_get(cfg, "eos_token"));
    } else {
        loom_err_prefix(err, "%s", path);
    }
    json_decref(cfg);
    return st;
}

loom_status loom_chat_render(const char *tmpl, json_t *messages,
                             int add_generation_prompt, json_t *extra,
                             char **out, loom_err *err)
{
    loom_chat_template *t = NULL;
    loom_status st = loom_chat_template_parse(tmpl, &t, err);
    if (st != LOOM_OK)
        return st;
    st = loom_chat_template_render(t, messages, add_generation_prompt, extra,
                                   out, err);
    loom_chat_template_free(t);
    return st;
}

loom_status loom_chat_template_render(const loom_chat_template *t,
                                      json_t *messages,
                                      int add_generation_prompt, json_t *extra,
                                      char **out, loom_err *err)
{
    if (!json_is_array(messages))
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "chat template: messages is not an array");
    json_t *vars = json_object();
    if (!vars)
        return loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
    /* What HF's apply_chat_template passes: tools and documents default to
     * None, the special tokens that the config names, then the extras. */
    json_object_set(vars, "messages", messages);
    json_object_set_new(vars, "add_generation_prompt",
                        json_boolean(add_generation_prompt));
    json_object_set_new(vars, "tools", json_null());
    json_object_set_new(vars, "documents", json_null());
    if (t->bos)
        json_object_set_new(vars, "bos_token", json_string(t->bos));
    if (t->eos)
        json_object_set_new(vars, "eos_token", json_string(t->eos));
    if (json_is_object(extra))
        json_object_update(vars, extra);
    loom_status st = loom__ct_render(t, vars, out, err);
    json_decref(vars);
    return st;
}
