/* The chat template lexer: text and tags with Jinja's whitespace control
 * and HF's trim_blocks / lstrip_blocks, tag contents as expression tokens. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template_impl.h"
#include "tokenizer_impl.h" /* loom__utf8_encode */

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
    return loom_err_set(lx->err, LOOM_ERR_FORMAT, "chat template line %d: %s",
                        lx->line, msg);
}

static loom_status lex_nomem(lexer *lx)
{
    return loom_err_set(lx->err, LOOM_ERR_NOMEM, "out of memory");
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

/* A TYPE token of the K bytes at the cursor (with their text when
 * WITH_TEXT), then past them. */
static loom_status take(lexer *lx, tk_type type, size_t k, int with_text)
{
    if (!push(lx, type, with_text ? lx->src + lx->pos : NULL, with_text ? k : 0,
              lx->line))
        return lex_nomem(lx);
    advance_to(lx, lx->pos + k);
    return LOOM_OK;
}

/* A string literal at lx->pos (Python escapes). */
static loom_status lex_string(lexer *lx)
{
    char q = lx->src[lx->pos];
    int line = lx->line;
    char *buf = malloc(lx->len - lx->pos + 1);
    if (!buf)
        return lex_nomem(lx);
    size_t n = 0, p = lx->pos + 1;
    while (p < lx->len && lx->src[p] != q) {
        char c = lx->src[p++];
        if (c != '\\' || p >= lx->len) {
            buf[n++] = c;
            continue;
        }
        c = lx->src[p++];
        /* The one-letter escapes, and the characters they stand for. */
        static const char letter[] = "ntr0bf\\'\"";
        static const char value[] = "\n\t\r\0\b\f\\'\"";
        const char *k = c ? strchr(letter, c) : NULL;
        if (k) {
            buf[n++] = value[k - letter];
            continue;
        }
        if (c != 'x' && c != 'u' && c != 'U') {
            /* Python keeps unknown escapes as they are */
            buf[n++] = '\\';
            buf[n++] = c;
            continue;
        }
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (int d = 0; d < digits; d++, p++) {
            char h = p < lx->len ? lx->src[p] : 0;
            if (!isxdigit((unsigned char)h)) {
                free(buf);
                return lex_fail(lx, "bad \\%s escape in a string", "x/u");
            }
            cp = cp * 16 +
                 (uint32_t)(isdigit((unsigned char)h)
                                ? h - '0'
                                : tolower((unsigned char)h) - 'a' + 10);
        }
        /* At most 4 bytes of UTF-8, and the escape took >= 4. */
        n += loom__utf8_encode(cp, buf + n);
    }
    if (p >= lx->len) {
        free(buf);
        return lex_fail(lx, "unterminated string%s", "");
    }
    int ok = push(lx, TK_STRING, buf, n, line);
    free(buf);
    if (!ok)
        return lex_nomem(lx);
    advance_to(lx, p + 1);
    return LOOM_OK;
}

/* Tokens of one tag up to its end marker; sets *strip_after when the tag
 * ends with '-', *plus when with '+'. */
static loom_status lex_tag(lexer *lx, int block, int *strip_after, int *plus)
{
    static const char *const ops[] = {
        "**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
        ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|", NULL};
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
                return take(lx, block ? TK_BLOCK_END : TK_VAR_END, 3, 0);
            }
            if (left >= 2 && !strncmp(p, end, 2))
                return take(lx, block ? TK_BLOCK_END : TK_VAR_END, 2, 0);
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
            loom_status st = take(lx, TK_NAME, k, 1);
            if (st != LOOM_OK)
                return st;
            continue;
        }
        if (isdigit((unsigned char)p[0])) {
            size_t k = 0;
            int is_float = 0;
            while (k < left && (isdigit((unsigned char)p[k]) || p[k] == '_'))
                k++;
            if (k + 1 < left && p[k] == '.' &&
                isdigit((unsigned char)p[k + 1])) {
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
            /* Python has big ints and inf; JSON values have neither. */
            errno = 0;
            json_int_t iv = is_float ? 0 : strtoll(num, NULL, 10);
            double fv = strtod(num, NULL);
            if ((!is_float && errno == ERANGE) || !isfinite(fv))
                return lex_fail(lx, "the number %s is out of range", num);
            if (!push(lx, is_float ? TK_FLOAT : TK_INT, NULL, 0, lx->line))
                return lex_nomem(lx);
            lx->v[lx->n - 1].i = iv;
            lx->v[lx->n - 1].f = fv;
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
                loom_status st = take(lx, TK_OP, k, 1);
                if (st != LOOM_OK)
                    return st;
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
            return lex_nomem(lx);
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
                return lex_nomem(lx);
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
            while (lx->pos < lx->len &&
                   isspace((unsigned char)lx->src[lx->pos])) {
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
    return push(lx, TK_EOF, NULL, 0, lx->line) ? LOOM_OK : lex_nomem(lx);
}

loom_status loom__ct_lex(const char *src, size_t len, tk **out, size_t *n,
                         loom_err *err)
{
    lexer lx = {.src = src, .len = len, .line = 1, .err = err};
    loom_status st = lex(&lx);
    if (st != LOOM_OK) {
        loom__ct_tokens_free(lx.v, lx.n);
        return st;
    }
    *out = lx.v;
    *n = lx.n;
    return LOOM_OK;
}

void loom__ct_tokens_free(tk *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].s);
    free(v);
}
