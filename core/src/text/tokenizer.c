/* Loading a Hugging Face tokenizer.json into lookup tables, and the encode
 * driver: added tokens split out first, then normalizer, pre-tokenizer and
 * BPE on the text between them (the order of the `tokenizers` library). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include <loom/platform.h>

#include "tokenizer_impl.h"

/* ---------------------------------------------------------------- arena */

/* The arena is sized once before anything points into it. */
static const char *arena_add(loom_tokenizer *tok, const char *s, size_t len)
{
    if (tok->arena_len + len + 1 > tok->arena_cap)
        return NULL;
    char *p = tok->arena + tok->arena_len;
    memcpy(p, s, len);
    p[len] = '\0';
    tok->arena_len += len + 1;
    return p;
}

/* The raw bytes a vocabulary token stands for: each code point mapped back
 * through the byte-level alphabet; a token with a code point outside it
 * keeps its own UTF-8 bytes, as the reference's ByteLevel decoder does. */
static const char *token_bytes(loom_tokenizer *tok, const char *s, size_t len,
                               uint32_t *out_len)
{
    char *p = tok->arena + tok->arena_len;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += loom__utf8_decode(s + i, len - i, &cp);
        int b = loom__tok_char_byte(cp);
        if (b < 0) {
            *out_len = (uint32_t)len;
            return s;
        }
        p[n++] = (char)b;
    }
    /* The arena was sized for a bytes copy of every token (n <= len). */
    p[n] = '\0';
    tok->arena_len += n + 1;
    *out_len = (uint32_t)n;
    return p;
}

/* ------------------------------------------------------------- loading */

static loom_status load_vocab(loom_tokenizer *tok, json_t *vocab, loom_err *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v)
    {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id > INT32_MAX - 1)
            return loom_err_set(err, LOOM_ERR_FORMAT,
                                "tokenizer.json: model.vocab[\"%.60s\"] is not "
                                "a valid id",
                                key);
        if ((size_t)id + 1 > tok->n_ids)
            tok->n_ids = (size_t)id + 1;
    }
    return LOOM_OK;
}

static loom_status parse_merge(json_t *m, size_t i, const char **a,
                               size_t *alen, const char **b, size_t *blen,
                               loom_err *err)
{
    if (json_is_string(m)) {
        /* "a b": exactly one space, as the reference requires. */
        const char *s = json_string_value(m);
        const char *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return loom_err_set(err, LOOM_ERR_FORMAT,
                                "tokenizer.json: model.merges[%zu] \"%.60s\" "
                                "is not two tokens separated by a space",
                                i, s);
        *a = s;
        *alen = (size_t)(sp - s);
        *b = sp + 1;
        *blen = strlen(sp + 1);
        return LOOM_OK;
    }
    if (json_is_array(m) && json_array_size(m) == 2 &&
        json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *alen = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *blen = json_string_length(json_array_get(m, 1));
        return LOOM_OK;
    }
    return loom_err_set(err, LOOM_ERR_FORMAT,
                        "tokenizer.json: model.merges[%zu] is neither \"a b\" "
                        "nor [\"a\", \"b\"]",
                        i);
}

static loom_status load_merges(loom_tokenizer *tok, json_t *merges,
                               loom_err *err)
{
    if (!json_is_array(merges))
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "tokenizer.json: model.merges is not an array");
    loom_status st =
        loom__tok_mergemap_init(&tok->merges, json_array_size(merges), err);
    if (st != LOOM_OK)
        return st;
    char *cat = NULL;
    size_t cat_cap = 0;
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m)
    {
        const char *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;
        st = parse_merge(m, i, &a, &alen, &b, &blen, err);
        if (st != LOOM_OK)
            break;
        int32_t ia = loom__tok_strmap_get(&tok->vocab, a, alen);
        int32_t ib = loom__tok_strmap_get(&tok->vocab, b, blen);
        if (ia < 0 || ib < 0) {
            st = loom_err_set(err, LOOM_ERR_FORMAT,
                              "tokenizer.json: model.merges[%zu] names "
                              "\"%.*s\", which is not in the vocabulary",
                              i, (int)(ia < 0 ? alen : blen), ia < 0 ? a : b);
            break;
        }
        if (alen + blen > cat_cap) {
            cat_cap = (alen + blen) * 2;
            char *g = realloc(cat, cat_cap);
            if (!g) {
                st = loom_err_set(err, LOOM_ERR_NOMEM,
                                  "tokenizer: out of memory");
                break;
            }
            cat = g;
        }
        memcpy(cat, a, alen);
        memcpy(cat + alen, b, blen);
        int32_t id = loom__tok_strmap_get(&tok->vocab, cat, alen + blen);
        if (id < 0) {
            st = loom_err_set(err, LOOM_ERR_FORMAT,
                              "tokenizer.json: model.merges[%zu] makes "
                              "\"%.*s\", which is not in the vocabulary",
                              i, (int)(alen + blen), cat);
            break;
        }
        loom__tok_mergemap_put(&tok->merges, ia, ib, (uint32_t)i, id);
    }
    free(cat);
    return st;
}

static int flag(json_t *o, const char *key)
{
    return json_is_true(json_object_get(o, key));
}

static loom_status load_added(loom_tokenizer *tok, json_t *list, loom_err *err)
{
    if (!list || json_is_null(list))
        return LOOM_OK;
    if (!json_is_array(list))
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "tokenizer.json: added_tokens is not an array");
    tok->added = calloc(json_array_size(list) + 1, sizeof *tok->added);
    if (!tok->added)
        return loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");
    size_t i;
    json_t *t;
    json_array_foreach(list, i, t)
    {
        json_t *c = json_object_get(t, "content");
        json_t *id = json_object_get(t, "id");
        if (!json_is_string(c) || !json_string_length(c) ||
            !json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) > INT32_MAX - 1)
            return loom_err_set(err, LOOM_ERR_FORMAT,
                                "tokenizer.json: added_tokens[%zu] needs a "
                                "non-empty \"content\" and an \"id\" >= 0",
                                i);
        tok_added *a = &tok->added[tok->n_added++];
        a->len = json_string_length(c);
        a->content = arena_add(tok, json_string_value(c), a->len);
        a->id = (int32_t)json_integer_value(id);
        a->special = (uint8_t)flag(t, "special");
        a->lstrip = (uint8_t)flag(t, "lstrip");
        a->rstrip = (uint8_t)flag(t, "rstrip");
        a->single_word = (uint8_t)flag(t, "single_word");
        a->normalized = (uint8_t)flag(t, "normalized");
        if ((size_t)a->id + 1 > tok->n_ids)
            tok->n_ids = (size_t)a->id + 1;
    }
    return LOOM_OK;
}

/* Normalized added tokens are matched against normalized text, so their
 * patterns are normalized too; then they are indexed by first byte. */
static loom_status index_added(loom_tokenizer *tok, loom_err *err)
{
    for (size_t i = 0; i < tok->n_added; i++) {
        tok_added *a = &tok->added[i];
        a->pat = a->content;
        a->pat_len = a->len;
        if (a->normalized && tok->n_norm) {
            char *norm = NULL;
            size_t nlen;
            loom_status st =
                loom__tok_normalize(tok, a->content, a->len, &norm, &nlen, err);
            if (st != LOOM_OK)
                return st;
            if (norm) {
                /* Normal forms can grow, so this copy lives on the heap and
                 * is tracked through `by_byte` ownership below. */
                a->pat = norm;
                a->pat_len = nlen;
            }
        }
        loom_status st = loom__tok_strmap_put(&tok->added_map, a->content,
                                              a->len, a->id, err);
        if (st != LOOM_OK)
            return st;
    }
    tok->by_byte = malloc((tok->n_added + 1) * sizeof *tok->by_byte);
    if (!tok->by_byte)
        return loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");
    uint32_t count[257] = {0};
    for (size_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].pat_len)
            count[(uint8_t)tok->added[i].pat[0] + 1]++;
    for (int b = 0; b < 256; b++)
        count[b + 1] += count[b];
    memcpy(tok->first, count, sizeof count);
    for (size_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].pat_len)
            tok->by_byte[count[(uint8_t)tok->added[i].pat[0]]++] = (uint32_t)i;
    return LOOM_OK;
}

static loom_status check_model(json_t *model, loom_err *err)
{
    if (!json_is_object(model))
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "tokenizer.json: no \"model\" object");
    const char *type = json_string_value(json_object_get(model, "type"));
    /* Old files leave out the type of a BPE model. */
    if (!type && json_object_get(model, "merges"))
        type = "BPE";
    if (!type || strcmp(type, "BPE") != 0)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "tokenizer.json: model type \"%s\" is not "
                            "supported (only BPE)",
                            type ? type : "(missing)");
    if (!json_is_object(json_object_get(model, "vocab")))
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "tokenizer.json: model.vocab is not an object");
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && json_number_value(dropout) > 0)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "tokenizer.json: BPE dropout is not supported");
    if (flag(model, "byte_fallback"))
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "tokenizer.json: BPE byte_fallback is not "
                            "supported");
    const char *keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        const char *v = json_string_value(json_object_get(model, keys[i]));
        if (v && *v)
            return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                                "tokenizer.json: BPE %s \"%s\" is not "
                                "supported",
                                keys[i], v);
    }
    return LOOM_OK;
}

/* Components that only matter for add_special_tokens=True or offsets are
 * accepted without effect; anything unknown is refused by name. */
static loom_status check_component(json_t *node, const char *what,
                                   const char *const *known, loom_err *err)
{
    if (!node || json_is_null(node))
        return LOOM_OK;
    const char *type = json_string_value(json_object_get(node, "type"));
    for (size_t i = 0; type && known[i]; i++) {
        if (strcmp(type, known[i]) != 0)
            continue;
        if (strcmp(type, "Sequence") != 0)
            return LOOM_OK;
        const char *lists[] = {"decoders", "processors"};
        for (size_t l = 0; l < 2; l++) {
            json_t *list = json_object_get(node, lists[l]);
            size_t j;
            json_t *v;
            json_array_foreach(list, j, v)
            {
                loom_status st = check_component(v, what, known, err);
                if (st != LOOM_OK)
                    return st;
            }
        }
        return LOOM_OK;
    }
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "tokenizer.json: %s type \"%s\" is not supported", what,
                        type ? type : "(missing)");
}

static loom_status build(loom_tokenizer *tok, json_t *root, loom_err *err)
{
    json_t *model = json_object_get(root, "model");
    loom_status st = check_model(model, err);
    if (st != LOOM_OK)
        return st;
    static const char *const decoders[] = {"ByteLevel", "Sequence", NULL};
    static const char *const posts[] = {
        "ByteLevel",      "TemplateProcessing", "RobertaProcessing",
        "BertProcessing", "Sequence",           NULL};
    st = check_component(json_object_get(root, "decoder"), "decoder", decoders,
                         err);
    if (st == LOOM_OK)
        st = check_component(json_object_get(root, "post_processor"),
                             "post_processor", posts, err);
    if (st == LOOM_OK)
        st = loom__tok_load_normalizer(tok, json_object_get(root, "normalizer"),
                                       err);
    if (st == LOOM_OK)
        st = loom__tok_load_pretokenizer(
            tok, json_object_get(root, "pre_tokenizer"), err);
    if (st != LOOM_OK)
        return st;

    json_t *vocab = json_object_get(model, "vocab");
    json_t *added = json_object_get(root, "added_tokens");
    st = load_vocab(tok, vocab, err);
    if (st != LOOM_OK)
        return st;

    /* Arena: every vocabulary and added token twice (text and bytes). */
    size_t need = 0;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) need += 2 * (strlen(key) + 1);
    size_t i;
    json_array_foreach(added, i, v) need +=
        2 * (json_string_length(json_object_get(v, "content")) + 1);
    tok->arena = malloc(need + 1);
    tok->arena_cap = need + 1;
    if (!tok->arena)
        return loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");

    st = load_added(tok, added, err);
    if (st != LOOM_OK)
        return st;
    tok->text = calloc(tok->n_ids, sizeof *tok->text);
    tok->bytes = calloc(tok->n_ids, sizeof *tok->bytes);
    tok->bytes_len = calloc(tok->n_ids, sizeof *tok->bytes_len);
    tok->special = calloc(tok->n_ids, 1);
    if (!tok->text || !tok->bytes || !tok->bytes_len || !tok->special)
        return loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");

    st = loom__tok_strmap_reserve(&tok->vocab, json_object_size(vocab), err);
    if (st != LOOM_OK)
        return st;
    json_object_foreach(vocab, key, v)
    {
        size_t len = strlen(key);
        int32_t id = (int32_t)json_integer_value(v);
        const char *t = arena_add(tok, key, len);
        tok->text[id] = t;
        tok->bytes[id] = token_bytes(tok, t, len, &tok->bytes_len[id]);
        st = loom__tok_strmap_put(&tok->vocab, t, len, id, err);
        if (st != LOOM_OK)
            return st;
    }
    /* An added token's text replaces the vocabulary's for its id. It goes
     * through the ByteLevel decoder like any token, as in the reference: a
     * token with a character outside the byte alphabet (a space, say) keeps
     * its own UTF-8 bytes. */
    for (i = 0; i < tok->n_added; i++) {
        tok_added *a = &tok->added[i];
        tok->text[a->id] = a->content;
        tok->bytes[a->id] =
            token_bytes(tok, a->content, a->len, &tok->bytes_len[a->id]);
        tok->special[a->id] = a->special;
    }
    for (int b = 0; b < 256; b++) {
        char c[4];
        size_t n = loom__utf8_encode(loom__tok_byte_char((uint8_t)b), c);
        tok->byte_id[b] = loom__tok_strmap_get(&tok->vocab, c, n);
    }
    tok->unk_id = -1;
    json_t *unk = json_object_get(model, "unk_token");
    if (json_is_string(unk)) {
        tok->unk_id = loom__tok_strmap_get(&tok->vocab, json_string_value(unk),
                                           json_string_length(unk));
        if (tok->unk_id < 0)
            return loom_err_set(err, LOOM_ERR_FORMAT,
                                "tokenizer.json: unk_token \"%s\" is not in "
                                "the vocabulary",
                                json_string_value(unk));
    }
    tok->ignore_merges = flag(model, "ignore_merges");
    st = load_merges(tok, json_object_get(model, "merges"), err);
    if (st != LOOM_OK)
        return st;
    /* Encoding works on bytes, which is only right for byte-level BPE. */
    if (!tok->byte_level)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "tokenizer.json: no ByteLevel pre_tokenizer (only "
                            "byte-level BPE is supported)");
    return index_added(tok, err);
}

loom_status loom__tok_read_json(const char *dir, const char *name, size_t flags,
                                char *path, size_t path_size, json_t **out,
                                loom_err *err)
{
    if (loom_dir_exists(dir))
        snprintf(path, path_size, "%s%c%s", dir, loom_path_sep(), name);
    else
        snprintf(path, path_size, "%s", dir);
    char *data = NULL;
    size_t size = 0;
    loom_status st = loom_read_file(path, &data, &size, err);
    if (st != LOOM_OK)
        return st;
    json_error_t jerr;
    *out = json_loadb(data, size, flags, &jerr);
    free(data);
    if (!*out)
        return loom_err_set(err, LOOM_ERR_FORMAT, "%s:%d:%d: %s", path,
                            jerr.line, jerr.column, jerr.text);
    return LOOM_OK;
}

loom_status loom_tokenizer_open(const char *path, loom_tokenizer **out,
                                loom_err *err)
{
    char file[4096];
    json_t *root = NULL;
    loom_status st = loom__tok_read_json(path, "tokenizer.json", JSON_ALLOW_NUL,
                                         file, sizeof file, &root, err);
    if (st != LOOM_OK)
        return st;
    loom_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) {
        json_decref(root);
        return loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");
    }
    st = json_is_object(root)
             ? build(tok, root, err)
             : loom_err_set(err, LOOM_ERR_FORMAT, "not a JSON object");
    json_decref(root);
    if (st != LOOM_OK) {
        loom_err_prefix(err, "%s", file);
        loom_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return LOOM_OK;
}

void loom_tokenizer_free(loom_tokenizer *tok)
{
    if (!tok)
        return;
    for (size_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].pat != tok->added[i].content)
            free((char *)tok->added[i].pat);
    free(tok->added);
    free(tok->by_byte);
    loom__tok_strmap_free(&tok->added_map);
    loom__tok_strmap_free(&tok->vocab);
    loom__tok_mergemap_free(&tok->merges);
    loom__tok_free_pretokenizers(tok);
    free(tok->text);
    free(tok->bytes);
    free(tok->bytes_len);
    free(tok->special);
    free(tok->arena);
    free(tok);
}

/* ------------------------------------------------------------ accessors */

size_t loom_tokenizer_vocab_size(const loom_tokenizer *tok)
{
    return tok->n_ids;
}

int32_t loom_tokenizer_token_id(const loom_tokenizer *tok, const char *text)
{
    size_t len = strlen(text);
    int32_t id = loom__tok_strmap_get(&tok->added_map, text, len);
    return id >= 0 ? id : loom__tok_strmap_get(&tok->vocab, text, len);
}

const char *loom_tokenizer_token_text(const loom_tokenizer *tok, int32_t id)
{
    if (id < 0 || (size_t)id >= tok->n_ids)
        return NULL;
    return tok->text[id];
}

const char *loom_tokenizer_token_bytes(const loom_tokenizer *tok, int32_t id,
                                       size_t *len)
{
    if (id < 0 || (size_t)id >= tok->n_ids || !tok->bytes[id])
        return NULL;
    *len = tok->bytes_len[id];
    return tok->bytes[id];
}

int loom_tokenizer_is_special(const loom_tokenizer *tok, int32_t id)
{
    return id >= 0 && (size_t)id < tok->n_ids && tok->special[id];
}

/* ------------------------------------------------------------- encoding */

static int is_word_char(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') ||
               (cp >= 'A' && cp <= 'Z') || cp == '_';
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

/* The code point that ends s[0..end). */
static uint32_t char_before(const char *s, size_t end, size_t *start)
{
    size_t i = end - 1;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80)
        i--;
    uint32_t cp;
    loom__utf8_decode(s + i, end - i, &cp);
    if (start)
        *start = i;
    return cp;
}

static uint32_t char_at(const char *s, size_t len, size_t i)
{
    uint32_t cp;
    loom__utf8_decode(s + i, len - i, &cp);
    return cp;
}

typedef loom_status (*piece_fn)(tok_enc *e, const char *s, size_t len);

/* Splits s into added tokens and the text between them, leftmost-longest
 * like the reference's Aho-Corasick search, then applies single_word,
 * lstrip and rstrip to each match as its AddedVocabulary does. */
static loom_status split_added(tok_enc *e, const char *s, size_t len,
                               int normalized, piece_fn text_fn)
{
    const loom_tokenizer *tok = e->tok;
    size_t last = 0; /* end of the last accepted match */
    size_t i = 0;
    while (i < len) {
        uint8_t b = (uint8_t)s[i];
        const tok_added *best = NULL;
        for (uint32_t k = tok->first[b]; k < tok->first[b + 1]; k++) {
            const tok_added *a = &tok->added[tok->by_byte[k]];
            if (a->normalized != normalized || a->pat_len > len - i ||
                (best && a->pat_len <= best->pat_len) ||
                memcmp(s + i, a->pat, a->pat_len) != 0)
                continue;
            best = a;
        }
        if (!best) {
            i++;
            continue;
        }
        size_t start = i, stop = i + best->pat_len;
        i = stop;
        if (best->special && !e->parse_special)
            continue;
        if (best->single_word &&
            ((start > 0 && is_word_char(char_before(s, start, NULL))) ||
             (stop < len && is_word_char(char_at(s, len, stop)))))
            continue;
        if (best->lstrip) {
            size_t p = start;
            while (p > last) {
                size_t q;
                if (!loom__tok_is_space(char_before(s, p, &q)))
                    break;
                p = q;
            }
            start = p;
        }
        if (best->rstrip) {
            while (stop < len) {
                uint32_t cp;
                size_t k = loom__utf8_decode(s + stop, len - stop, &cp);
                if (!loom__tok_is_space(cp))
                    break;
                stop += k;
            }
            i = stop;
        }
        loom_status st = LOOM_OK;
        if (start > last)
            st = text_fn(e, s + last, start - last);
        if (st == LOOM_OK)
            st = loom__tok_ids_push(&e->out, best->id, e->err);
        if (st != LOOM_OK)
            return st;
        last = stop;
    }
    return len > last ? text_fn(e, s + last, len - last) : LOOM_OK;
}

static loom_status pretok_piece(tok_enc *e, const char *s, size_t len)
{
    return loom__tok_pretokenize(e, 0, s, len);
}

/* Text between non-normalized added tokens: normalize it, then look for the
 * normalized added tokens in the result. */
static loom_status raw_piece(tok_enc *e, const char *s, size_t len)
{
    char *norm = NULL;
    size_t nlen = len;
    loom_status st = loom__tok_normalize(e->tok, s, len, &norm, &nlen, e->err);
    if (st != LOOM_OK)
        return st;
    if (norm) {
        st = loom__tok_enc_keep(e, norm);
        if (st != LOOM_OK)
            return st;
        s = norm;
    }
    return split_added(e, s, nlen, 1, pretok_piece);
}

loom_status loom_tokenizer_encode(const loom_tokenizer *tok, const char *text,
                                  size_t len, int parse_special, int32_t **ids,
                                  size_t *n, loom_err *err)
{
    size_t bad = loom_utf8_check(text, len);
    if (bad != len)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "tokenizer: input is not valid UTF-8 (byte 0x%02X "
                            "at offset %zu)",
                            (uint8_t)text[bad], bad);
    tok_enc e = {.tok = tok, .err = err, .parse_special = parse_special};
    e.cache = loom__tok_cache_new();
    e.md = pcre2_match_data_create(1, NULL);
    loom_status st = LOOM_OK;
    if (!e.cache || !e.md)
        st = loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");
    if (st == LOOM_OK)
        st = split_added(&e, text, len, 0, raw_piece);
    loom__tok_cache_free(e.cache);
    pcre2_match_data_free(e.md);
    loom__tok_enc_release(&e);
    if (st != LOOM_OK) {
        free(e.out.v);
        return st;
    }
    *ids = e.out.v ? e.out.v : malloc(sizeof(int32_t));
    *n = e.out.n;
    return *ids ? LOOM_OK
                : loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");
}
