/* Normalizers (NFC and friends through utf8proc) and pre-tokenizers (regex
 * Split through PCRE2 with JIT, ByteLevel, Digits) of tokenizer.json. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer_impl.h"

typedef loom_status (*load_fn)(loom_tokenizer *tok, json_t *node,
                               loom_err *err);

/* A Sequence NODE of WHAT (normalizer, pre_tokenizer): each step in its
 * array KEY, loaded with ONE. */
static loom_status load_sequence(loom_tokenizer *tok, json_t *node,
                                 const char *what, const char *key, load_fn one,
                                 loom_err *err)
{
    json_t *list = json_object_get(node, key);
    if (!json_is_array(list))
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "tokenizer.json: %s Sequence without a \"%s\" "
                            "array",
                            what, key);
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        loom_status st = one(tok, v, err);
        if (st != LOOM_OK)
            return st;
    }
    return LOOM_OK;
}

/* The "normalizer" or "pre_tokenizer" object KEY of tokenizer.json, loaded
 * with ONE; absent or null: none. */
static loom_status load_top(loom_tokenizer *tok, json_t *node, const char *key,
                            load_fn one, loom_err *err)
{
    if (!node || json_is_null(node))
        return LOOM_OK;
    if (!json_is_object(node))
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "tokenizer.json: \"%s\" is not an object", key);
    return one(tok, node, err);
}

/* ---------------------------------------------------------- normalizers */

static loom_status load_norm_one(loom_tokenizer *tok, json_t *node,
                                 loom_err *err)
{
    const char *type = json_string_value(json_object_get(node, "type"));
    if (!type)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "tokenizer.json: normalizer without a \"type\"");
    if (strcmp(type, "Sequence") == 0)
        return load_sequence(tok, node, "normalizer", "normalizers",
                             load_norm_one, err);
    static const struct {
        const char *name;
        tok_norm_kind kind;
    } kinds[] = {{"NFC", TOK_NORM_NFC},
                 {"NFD", TOK_NORM_NFD},
                 {"NFKC", TOK_NORM_NFKC},
                 {"NFKD", TOK_NORM_NFKD},
                 {"Lowercase", TOK_NORM_LOWERCASE}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        if (strcmp(type, kinds[k].name) != 0)
            continue;
        if (tok->n_norm == TOK_MAX_STEPS)
            return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                                "tokenizer.json: more than %d normalizers",
                                TOK_MAX_STEPS);
        tok->norm[tok->n_norm++] = kinds[k].kind;
        return LOOM_OK;
    }
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "tokenizer.json: normalizer type \"%s\" is not "
                        "supported",
                        type);
}

loom_status loom__tok_load_normalizer(loom_tokenizer *tok, json_t *node,
                                      loom_err *err)
{
    return load_top(tok, node, "normalizer", load_norm_one, err);
}

static loom_status lowercase(const char *s, size_t len, char **out,
                             size_t *out_len, loom_err *err)
{
    /* A lowercase code point never needs more than 4 bytes, but it may need
     * more than its uppercase form (U+023A -> U+2C65). */
    char *o = malloc(len * 2 + 4);
    if (!o)
        return loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += loom__utf8_decode(s + i, len - i, &cp);
        n += loom__utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp),
                               o + n);
        if (n + 4 > len * 2 + 4) {
            char *g = realloc(o, n * 2 + 8);
            if (!g) {
                free(o);
                return loom_err_set(err, LOOM_ERR_NOMEM,
                                    "tokenizer: out of memory");
            }
            o = g;
            len = n + 4; /* keeps the bound check above growing with o */
        }
    }
    *out = o;
    *out_len = n;
    return LOOM_OK;
}

static loom_status unicode_form(const char *s, size_t len, tok_norm_kind kind,
                                char **out, size_t *out_len, loom_err *err)
{
    int opt = UTF8PROC_STABLE;
    switch (kind) {
    case TOK_NORM_NFC:
        opt |= UTF8PROC_COMPOSE;
        break;
    case TOK_NORM_NFD:
        opt |= UTF8PROC_DECOMPOSE;
        break;
    case TOK_NORM_NFKC:
        opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        break;
    default:
        opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        break;
    }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t n =
        utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst,
                     (utf8proc_option_t)opt);
    if (n < 0)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "tokenizer: normalization failed: %s",
                            utf8proc_errmsg(n));
    *out = (char *)dst;
    *out_len = (size_t)n;
    return LOOM_OK;
}

/* Applies a Unicode normal form only where the text is not ASCII. An ASCII
 * character is its own normal form and never the second half of a
 * composition, so each run of non-ASCII characters can be normalized alone,
 * together with the one ASCII character before it (which a combining mark
 * in the run may compose with). */
static loom_status unicode_form_spans(const char *s, size_t len,
                                      tok_norm_kind kind, char **out,
                                      size_t *out_len, loom_err *err)
{
    size_t cap = len + len / 2 + 16, n = 0;
    char *o = malloc(cap);
    if (!o)
        return loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");
    size_t i = 0;
    while (i < len) {
        size_t a = i;
        while (i < len && (uint8_t)s[i] < 0x80)
            i++;
        size_t span = i; /* first non-ASCII byte, or len */
        if (span > a && span < len)
            span--; /* the ASCII character before the run joins it */
        while (i < len && (uint8_t)s[i] >= 0x80)
            i++;
        /* ASCII part [a, span) as it is, then [span, i) normalized. */
        char *norm = NULL;
        size_t nlen = 0;
        if (i > span) {
            loom_status st =
                unicode_form(s + span, i - span, kind, &norm, &nlen, err);
            if (st != LOOM_OK) {
                free(o);
                return st;
            }
        }
        if (n + (span - a) + nlen + 1 > cap) {
            cap = (n + (span - a) + nlen + 1) * 2;
            char *g = realloc(o, cap);
            if (!g) {
                free(norm);
                free(o);
                return loom_err_set(err, LOOM_ERR_NOMEM,
                                    "tokenizer: out of memory");
            }
            o = g;
        }
        memcpy(o + n, s + a, span - a);
        n += span - a;
        if (nlen)
            memcpy(o + n, norm, nlen);
        n += nlen;
        free(norm);
    }
    o[n] = '\0';
    *out = o;
    *out_len = n;
    return LOOM_OK;
}

loom_status loom__tok_normalize(const loom_tokenizer *tok, const char *s,
                                size_t len, char **out, size_t *out_len,
                                loom_err *err)
{
    *out = NULL;
    *out_len = len;
    if (!tok->n_norm)
        return LOOM_OK;
    int ascii = 1;
    for (size_t i = 0; i < len && ascii; i++)
        ascii = (uint8_t)s[i] < 0x80;
    const char *cur = s;
    size_t cur_len = len;
    char *owned = NULL;
    for (size_t k = 0; k < tok->n_norm; k++) {
        char *next = NULL;
        size_t next_len = 0;
        loom_status st;
        if (tok->norm[k] == TOK_NORM_LOWERCASE) {
            st = lowercase(cur, cur_len, &next, &next_len, err);
        } else {
            /* Every Unicode normal form of ASCII text is itself. */
            if (ascii)
                continue;
            st = unicode_form_spans(cur, cur_len, tok->norm[k], &next,
                                    &next_len, err);
        }
        free(owned);
        if (st != LOOM_OK)
            return st;
        owned = next;
        cur = next;
        cur_len = next_len;
        ascii = 1;
        for (size_t i = 0; i < cur_len && ascii; i++)
            ascii = (uint8_t)cur[i] < 0x80;
    }
    *out = owned;
    *out_len = cur_len;
    return LOOM_OK;
}

/* -------------------------------------------------------- pre-tokenizers */

/* GPT-2's pattern, used by ByteLevel when use_regex is true. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";

static loom_status add_step(loom_tokenizer *tok, tok_pre **out, loom_err *err)
{
    if (tok->n_pre == TOK_MAX_STEPS)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "tokenizer.json: more than %d pre-tokenizers",
                            TOK_MAX_STEPS);
    *out = &tok->pre[tok->n_pre++];
    memset(*out, 0, sizeof **out);
    (*out)->behavior = TOK_SPLIT_ISOLATED;
    return LOOM_OK;
}

/* Oniguruma (the reference's engine) and PCRE2 agree on the patterns that
 * tokenizers ship once PCRE2 runs in UTF mode with Unicode properties for
 * \s, \w and \d (PCRE2_UCP). */
static loom_status compile(tok_pre *p, const char *pattern, size_t len,
                           int literal, loom_err *err)
{
    int code = 0;
    PCRE2_SIZE off = 0;
    uint32_t opt = PCRE2_UTF | PCRE2_UCP;
    if (literal)
        opt |= PCRE2_LITERAL;
    p->re = pcre2_compile((PCRE2_SPTR)pattern, len, opt, &code, &off, NULL);
    if (!p->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "tokenizer.json: pre_tokenizer Split pattern "
                            "\"%.80s\": %s at offset %zu",
                            pattern, (const char *)msg, (size_t)off);
    }
    p->jit = pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE) == 0;
    return LOOM_OK;
}

static loom_status load_split(loom_tokenizer *tok, json_t *node, loom_err *err)
{
    json_t *pat = json_object_get(node, "pattern");
    json_t *rx = json_object_get(pat, "Regex");
    json_t *str = json_object_get(pat, "String");
    json_t *src = json_is_string(rx) ? rx : str;
    if (!json_is_string(src))
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "tokenizer.json: pre_tokenizer Split needs "
                            "\"pattern\": {\"Regex\": ...} or {\"String\": "
                            "...}");
    const char *beh = json_string_value(json_object_get(node, "behavior"));
    static const struct {
        const char *name;
        tok_split_behavior b;
    } behaviors[] = {{"Removed", TOK_SPLIT_REMOVED},
                     {"Isolated", TOK_SPLIT_ISOLATED},
                     {"MergedWithPrevious", TOK_SPLIT_MERGED_WITH_PREVIOUS},
                     {"MergedWithNext", TOK_SPLIT_MERGED_WITH_NEXT},
                     {"Contiguous", TOK_SPLIT_CONTIGUOUS}};
    int found = -1;
    for (size_t k = 0; beh && k < sizeof behaviors / sizeof behaviors[0]; k++)
        if (strcmp(beh, behaviors[k].name) == 0)
            found = (int)k;
    if (found < 0)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "tokenizer.json: pre_tokenizer Split behavior "
                            "\"%s\" is not supported",
                            beh ? beh : "(missing)");
    tok_pre *p = NULL;
    loom_status st = add_step(tok, &p, err);
    if (st != LOOM_OK)
        return st;
    p->behavior = behaviors[found].b;
    p->invert = json_is_true(json_object_get(node, "invert"));
    return compile(p, json_string_value(src), json_string_length(src),
                   src == str, err);
}

static loom_status load_pre_one(loom_tokenizer *tok, json_t *node,
                                loom_err *err)
{
    const char *type = json_string_value(json_object_get(node, "type"));
    if (!type)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "tokenizer.json: pre_tokenizer without a "
                            "\"type\"");
    if (strcmp(type, "Sequence") == 0)
        return load_sequence(tok, node, "pre_tokenizer", "pretokenizers",
                             load_pre_one, err);
    if (strcmp(type, "Split") == 0)
        return load_split(tok, node, err);
    if (strcmp(type, "ByteLevel") == 0) {
        tok_pre *p = NULL;
        loom_status st = add_step(tok, &p, err);
        if (st != LOOM_OK)
            return st;
        tok->byte_level = 1;
        p->add_prefix_space =
            json_is_true(json_object_get(node, "add_prefix_space"));
        /* use_regex defaults to true in the reference. */
        json_t *ur = json_object_get(node, "use_regex");
        if (ur && !json_is_boolean(ur))
            return loom_err_set(err, LOOM_ERR_FORMAT,
                                "tokenizer.json: ByteLevel use_regex is not "
                                "a boolean");
        if (!ur || json_is_true(ur))
            return compile(p, GPT2_PATTERN, sizeof GPT2_PATTERN - 1, 0, err);
        return LOOM_OK;
    }
    if (strcmp(type, "Digits") == 0) {
        tok_pre *p = NULL;
        loom_status st = add_step(tok, &p, err);
        if (st != LOOM_OK)
            return st;
        int each = json_is_true(json_object_get(node, "individual_digits"));
        const char *pat = each ? "\\p{N}" : "\\p{N}+";
        return compile(p, pat, strlen(pat), 0, err);
    }
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "tokenizer.json: pre_tokenizer type \"%s\" is not "
                        "supported",
                        type);
}

loom_status loom__tok_load_pretokenizer(loom_tokenizer *tok, json_t *node,
                                        loom_err *err)
{
    return load_top(tok, node, "pre_tokenizer", load_pre_one, err);
}

void loom__tok_free_pretokenizers(loom_tokenizer *tok)
{
    for (size_t i = 0; i < tok->n_pre; i++)
        pcre2_code_free(tok->pre[i].re);
    tok->n_pre = 0;
}

/* One match at or after OFF: 1 found, 0 none, <0 error code. */
static int find(tok_enc *e, const tok_pre *p, const char *s, size_t len,
                size_t off, size_t *ms, size_t *me)
{
    int rc = -1;
    if (p->jit)
        rc = pcre2_jit_match(p->re, (PCRE2_SPTR)s, len, off, 0, e->md, NULL);
    /* The JIT's small default stack can run out on pathological input; the
     * interpreter keeps its frames on the heap. */
    if (!p->jit || rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(p->re, (PCRE2_SPTR)s, len, off,
                         PCRE2_NO_UTF_CHECK | (p->jit ? PCRE2_NO_JIT : 0),
                         e->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0)
        return rc;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

typedef struct seg {
    size_t a, b;
    int match;
} seg;

typedef struct segs {
    seg *v;
    size_t n, cap;
} segs;

static int segs_push(segs *s, size_t a, size_t b, int match)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 32;
        seg *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return 0;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (seg){a, b, match};
    return 1;
}

/* Splits s by the step's pattern into pieces per its behavior (the
 * reference's SplitDelimiterBehavior), then passes each to the next step. */
static loom_status split_general(tok_enc *e, size_t step, const char *s,
                                 size_t len)
{
    const tok_pre *p = &e->tok->pre[step];
    segs sg = {0};
    loom_status st = LOOM_OK;
    size_t prev = 0, off = 0;
    while (off < len) {
        size_t ms, me;
        int rc = find(e, p, s, len, off, &ms, &me);
        if (rc < 0) {
            st = loom_err_set(e->err, LOOM_ERR_INVALID,
                              "tokenizer: regex match failed (PCRE2 %d)", rc);
            goto done;
        }
        if (rc == 0)
            break;
        if (me == ms) {
            uint32_t cp;
            off =
                ms + (ms < len ? loom__utf8_decode(s + ms, len - ms, &cp) : 1);
            continue;
        }
        if ((ms > prev && !segs_push(&sg, prev, ms, 0)) ||
            !segs_push(&sg, ms, me, 1))
            goto nomem;
        prev = off = me;
    }
    if (len > prev && !segs_push(&sg, prev, len, 0))
        goto nomem;
    if (p->invert)
        for (size_t i = 0; i < sg.n; i++)
            sg.v[i].match = !sg.v[i].match;

    /* Fold the segments into pieces (match flag cleared = a kept piece). */
    segs out = {0};
    int prev_match = 0;
    switch (p->behavior) {
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; i < sg.n; i++)
            if (!sg.v[i].match && !segs_push(&out, sg.v[i].a, sg.v[i].b, 0))
                goto nomem_out;
        break;
    case TOK_SPLIT_ISOLATED:
        for (size_t i = 0; i < sg.n; i++)
            if (!segs_push(&out, sg.v[i].a, sg.v[i].b, 0))
                goto nomem_out;
        break;
    case TOK_SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < sg.n; i++) {
            if (sg.v[i].match && !prev_match && out.n)
                out.v[out.n - 1].b = sg.v[i].b;
            else if (!segs_push(&out, sg.v[i].a, sg.v[i].b, 0))
                goto nomem_out;
            prev_match = sg.v[i].match;
        }
        break;
    case TOK_SPLIT_MERGED_WITH_NEXT:
        for (size_t i = sg.n; i-- > 0;) {
            if (sg.v[i].match && !prev_match && out.n)
                out.v[out.n - 1].a = sg.v[i].a;
            else if (!segs_push(&out, sg.v[i].a, sg.v[i].b, 0))
                goto nomem_out;
            prev_match = sg.v[i].match;
        }
        for (size_t i = 0; i < out.n / 2; i++) {
            seg t = out.v[i];
            out.v[i] = out.v[out.n - 1 - i];
            out.v[out.n - 1 - i] = t;
        }
        break;
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < sg.n; i++) {
            if (i > 0 && sg.v[i].match == prev_match && out.n)
                out.v[out.n - 1].b = sg.v[i].b;
            else if (!segs_push(&out, sg.v[i].a, sg.v[i].b, 0))
                goto nomem_out;
            prev_match = sg.v[i].match;
        }
        break;
    }
    for (size_t i = 0; i < out.n && st == LOOM_OK; i++)
        st = loom__tok_pretokenize(e, step + 1, s + out.v[i].a,
                                   out.v[i].b - out.v[i].a);
    free(out.v);
    goto done;
nomem_out:
    free(out.v);
nomem:
    st = loom_err_set(e->err, LOOM_ERR_NOMEM, "tokenizer: out of memory");
done:
    free(sg.v);
    return st;
}

loom_status loom__tok_pretokenize(tok_enc *e, size_t step, const char *s,
                                  size_t len)
{
    const loom_tokenizer *tok = e->tok;
    if (len == 0)
        return LOOM_OK;
    if (step == tok->n_pre)
        return loom__tok_bpe_word(e, s, len);
    const tok_pre *p = &tok->pre[step];
    if (p->add_prefix_space && s[0] != ' ') {
        char *b = malloc(len + 1);
        if (!b)
            return loom_err_set(e->err, LOOM_ERR_NOMEM,
                                "tokenizer: out of memory");
        b[0] = ' ';
        memcpy(b + 1, s, len);
        loom_status st = loom__tok_enc_keep(e, b);
        if (st != LOOM_OK)
            return st;
        s = b;
        len++;
    }
    if (!p->re)
        return loom__tok_pretokenize(e, step + 1, s, len);
    if (p->behavior != TOK_SPLIT_ISOLATED || p->invert)
        return split_general(e, step, s, len);

    /* The common case (Isolated, not inverted) streams without a list. */
    size_t prev = 0, off = 0;
    while (off < len) {
        size_t ms, me;
        int rc = find(e, p, s, len, off, &ms, &me);
        if (rc < 0)
            return loom_err_set(e->err, LOOM_ERR_INVALID,
                                "tokenizer: regex match failed (PCRE2 %d)", rc);
        if (rc == 0)
            break;
        if (me == ms) {
            uint32_t cp;
            off =
                ms + (ms < len ? loom__utf8_decode(s + ms, len - ms, &cp) : 1);
            continue;
        }
        loom_status st =
            loom__tok_pretokenize(e, step + 1, s + prev, ms - prev);
        if (st == LOOM_OK)
            st = loom__tok_pretokenize(e, step + 1, s + ms, me - ms);
        if (st != LOOM_OK)
            return st;
        prev = off = me;
    }
    return loom__tok_pretokenize(e, step + 1, s + prev, len - prev);
}
