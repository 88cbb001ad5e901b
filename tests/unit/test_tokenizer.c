/* Tokenizer against the Hugging Face `tokenizers` references: the Qwen3
 * goldens, the model fixtures' goldens, the harder cases of
 * tokenizer_refs/ (tools/make_tokenizer_refs.py), incremental decoding, and
 * every error path of loading and encoding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <loom/platform.h>
#include <loom/tokenizer.h>

#include "testutil.h"

static loom_tokenizer *qwen3;
static json_t *refs;

static void load_shared(void)
{
    loom_err err;
    if (loom_tokenizer_open(fixture("tokenizers/qwen3"), &qwen3, &err) !=
        LOOM_OK) {
        fprintf(stderr, "qwen3: %s\n", err.msg);
        qwen3 = NULL;
    }
    json_error_t je;
    refs = json_load_file(fixture("tokenizer_refs/tokenizer_refs.json"),
                          JSON_ALLOW_NUL, &je);
    if (!refs)
        fprintf(stderr, "tokenizer_refs.json: %s\n", je.text);
}

static void free_shared(void)
{
    loom_tokenizer_free(qwen3);
    json_decref(refs);
}

static json_t *load_json(const char *path)
{
    json_error_t je;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);
    ck_assert_msg(j != NULL, "%s: %s", path, je.text);
    return j;
}

/* Encodes TEXT and compares with the reference ids. */
static void check_encode(const loom_tokenizer *tok, const char *name,
                         json_t *text, json_t *ids, int parse_special)
{
    int32_t *got = NULL;
    size_t n = 0;
    loom_err err;
    loom_status st = loom_tokenizer_encode(tok, json_string_value(text),
                                           json_string_length(text),
                                           parse_special, &got, &n, &err);
    ck_assert_msg(st == LOOM_OK, "%s: encode %s: %s", name,
                  json_string_value(text), err.msg);
    size_t want = json_array_size(ids);
    size_t first_diff = 0;
    while (first_diff < n && first_diff < want &&
           got[first_diff] ==
               json_integer_value(json_array_get(ids, first_diff)))
        first_diff++;
    ck_assert_msg(n == want && first_diff == n,
                  "%s: \"%.60s\": %zu ids, want %zu; first difference at "
                  "%zu: %d vs %d",
                  name, json_string_value(text), n, want, first_diff,
                  first_diff < n ? got[first_diff] : -1,
                  (int)json_integer_value(json_array_get(ids, first_diff)));
    free(got);
}

static int32_t *ids_of(json_t *ids)
{
    size_t n = json_array_size(ids);
    int32_t *v = malloc((n + 1) * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (int32_t)json_integer_value(json_array_get(ids, i));
    return v;
}

/* Decodes the ids whole and one at a time; both must give WANT. */
static void check_decode(const loom_tokenizer *tok, const char *name,
                         json_t *ids, const char *want, size_t want_len,
                         int skip_special)
{
    size_t n = json_array_size(ids);
    int32_t *v = ids_of(ids);
    char *text = NULL;
    size_t len = 0;
    loom_err err;
    ck_assert_msg(loom_tokenizer_decode(tok, v, n, skip_special, &text, &len,
                                        &err) == LOOM_OK,
                  "%s: decode: %s", name, err.msg);
    ck_assert_msg(len == want_len && memcmp(text, want, len) == 0,
                  "%s: decoded \"%s\", want \"%s\"", name, text, want);
    free(text);

    loom_detok *d = NULL;
    ck_assert_int_eq(loom_detok_new(tok, skip_special, &d, &err), LOOM_OK);
    char *acc = malloc(want_len * 2 + 64);
    size_t acc_n = 0;
    for (size_t i = 0; i < n; i++) {
        const char *t;
        size_t tl;
        ck_assert_int_eq(loom_detok_push(d, v[i], &t, &tl, &err), LOOM_OK);
        ck_assert_uint_eq(strlen(t), tl == 0 ? 0 : strlen(t));
        ck_assert(acc_n + tl <= want_len * 2 + 64);
        /* Each piece is whole UTF-8 characters on its own. */
        ck_assert_uint_eq(loom_utf8_check(t, tl), tl);
        memcpy(acc + acc_n, t, tl);
        acc_n += tl;
    }
    const char *t;
    size_t tl;
    loom_detok_flush(d, &t, &tl);
    memcpy(acc + acc_n, t, tl);
    acc_n += tl;
    ck_assert_msg(acc_n == want_len && memcmp(acc, want, acc_n) == 0,
                  "%s: incremental decode differs from \"%s\"", name, want);
    free(acc);
    loom_detok_free(d);
    free(v);
}

START_TEST(qwen3_golden)
{
    ck_assert_ptr_nonnull(qwen3);
    json_t *g = load_json(fixture("tokenizers/qwen3/golden.json"));
    json_t *cases = json_object_get(g, "cases");
    ck_assert_uint_gt(json_array_size(cases), 10);
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c)
    {
        json_t *dec = json_object_get(c, "decoded");
        check_encode(qwen3, "qwen3 golden", json_object_get(c, "text"),
                     json_object_get(c, "ids"), 1);
        check_decode(qwen3, "qwen3 golden", json_object_get(c, "ids"),
                     json_string_value(dec), json_string_length(dec), 0);
    }
    json_decref(g);
}
END_TEST

/* The tiny fixtures' goldens have no decoded text: their texts are NFC
 * already, so decoding must give the text back. */
static const char *const MODELS[] = {
    "models/qwen35-tiny", "models/qwen35-vl-tiny", "models/nemotron-h-tiny"};

START_TEST(model_goldens)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer_golden.json",
             fixture(MODELS[_i]));
    json_t *g = load_json(path);
    loom_tokenizer *tok = NULL;
    loom_err err;
    ck_assert_msg(loom_tokenizer_open(fixture(MODELS[_i]), &tok, &err) ==
                      LOOM_OK,
                  "%s", err.msg);
    ck_assert_uint_eq(loom_tokenizer_vocab_size(tok),
                      json_integer_value(json_object_get(g, "vocab_size")));
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(g, "specials"), key, v)
    {
        ck_assert_int_eq(loom_tokenizer_token_id(tok, key),
                         json_integer_value(v));
        ck_assert(
            loom_tokenizer_is_special(tok, (int32_t)json_integer_value(v)));
        ck_assert_str_eq(
            loom_tokenizer_token_text(tok, (int32_t)json_integer_value(v)),
            key);
    }
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(g, "cases"), i, c)
    {
        json_t *text = json_object_get(c, "text");
        check_encode(tok, MODELS[_i], text, json_object_get(c, "ids"), 1);
        check_decode(tok, MODELS[_i], json_object_get(c, "ids"),
                     json_string_value(text), json_string_length(text), 0);
    }
    loom_tokenizer_free(tok);
    json_decref(g);
}
END_TEST

static const char *const REF_NAMES[] = {
    "qwen3", "qwen35-tiny", "qwen35-vl-tiny", "nemotron-h-tiny", "kjv-qwen35"};
static const char *const REF_DIRS[] = {
    NULL, "models/qwen35-tiny", "models/qwen35-vl-tiny",
    "models/nemotron-h-tiny", "../../models/kjv-qwen35"};

START_TEST(hf_refs)
{
    ck_assert_ptr_nonnull(refs);
    json_t *r =
        json_object_get(json_object_get(refs, "tokenizers"), REF_NAMES[_i]);
    ck_assert_ptr_nonnull(r);
    ck_assert_ptr_null(json_object_get(r, "error"));
    loom_tokenizer *tok = qwen3;
    loom_err err;
    if (REF_DIRS[_i]) {
        ck_assert_msg(loom_tokenizer_open(fixture(REF_DIRS[_i]), &tok, &err) ==
                          LOOM_OK,
                      "%s", err.msg);
    }
    ck_assert_ptr_nonnull(tok);
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(r, "cases"), i, c)
    {
        json_t *dec = json_object_get(c, "decoded");
        check_encode(tok, REF_NAMES[_i], json_object_get(c, "text"),
                     json_object_get(c, "ids"), 1);
        check_decode(tok, REF_NAMES[_i], json_object_get(c, "ids"),
                     json_string_value(dec), json_string_length(dec), 0);
    }
    ck_assert_uint_gt(i, 300);
    json_array_foreach(json_object_get(r, "decode_cases"), i, c)
    {
        json_t *dec = json_object_get(c, "decoded");
        json_t *skip = json_object_get(c, "decoded_skip_special");
        check_decode(tok, REF_NAMES[_i], json_object_get(c, "ids"),
                     json_string_value(dec), json_string_length(dec), 0);
        check_decode(tok, REF_NAMES[_i], json_object_get(c, "ids"),
                     json_string_value(skip), json_string_length(skip), 1);
    }
    json_array_foreach(json_object_get(r, "no_special_cases"), i, c)
    {
        check_encode(tok, REF_NAMES[_i], json_object_get(c, "text"),
                     json_object_get(c, "ids"), 0);
    }
    if (tok != qwen3)
        loom_tokenizer_free(tok);
}
END_TEST

START_TEST(qwen3_api)
{
    ck_assert_ptr_nonnull(qwen3);
    /* Ids from tokenizer.json: 151643 vocabulary entries, then added. */
    ck_assert_uint_eq(loom_tokenizer_vocab_size(qwen3), 151669);
    ck_assert_int_eq(loom_tokenizer_token_id(qwen3, "<|im_end|>"), 151645);
    ck_assert_int_eq(loom_tokenizer_token_id(qwen3, "<think>"), 151667);
    ck_assert_int_eq(loom_tokenizer_token_id(qwen3, "Hello"), 9707);
    ck_assert_int_eq(loom_tokenizer_token_id(qwen3, "no such token!"), -1);
    ck_assert(loom_tokenizer_is_special(qwen3, 151645));
    ck_assert(!loom_tokenizer_is_special(qwen3, 151667));
    ck_assert(!loom_tokenizer_is_special(qwen3, 9707));
    ck_assert_str_eq(loom_tokenizer_token_text(qwen3, 151644), "<|im_start|>");
    /* 220 is "Ġ": one space byte. */
    size_t len = 0;
    const char *b = loom_tokenizer_token_bytes(qwen3, 220, &len);
    ck_assert_uint_eq(len, 1);
    ck_assert_int_eq(b[0], ' ');
    ck_assert_str_eq(loom_tokenizer_token_text(qwen3, 220), "\xC4\xA0");
    ck_assert_ptr_null(loom_tokenizer_token_text(qwen3, -1));
    ck_assert_ptr_null(loom_tokenizer_token_text(qwen3, 151669));

    /* Special tokens as plain text when parse_special is 0. */
    int32_t *ids;
    size_t n;
    loom_err err;
    ck_assert_int_eq(
        loom_tokenizer_encode(qwen3, "<|im_end|>", 10, 0, &ids, &n, &err),
        LOOM_OK);
    ck_assert_uint_gt(n, 1);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_ne(ids[i], 151645);
    free(ids);
    ck_assert_int_eq(
        loom_tokenizer_encode(qwen3, "<|im_end|>", 10, 1, &ids, &n, &err),
        LOOM_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(ids[0], 151645);
    free(ids);
    /* Non-special added tokens are matched either way. */
    ck_assert_int_eq(
        loom_tokenizer_encode(qwen3, "<think>", 7, 0, &ids, &n, &err), LOOM_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(ids[0], 151667);
    free(ids);
}
END_TEST

START_TEST(long_words)
{
    /* A 200 000-byte word and a 100 000-space run: the merge heap keeps
     * these n log n, and the regex falls back from the JIT stack if needed. */
    ck_assert_ptr_nonnull(qwen3);
    size_t len = 200000;
    char *s = malloc(len);
    for (size_t i = 0; i < len; i++)
        s[i] = "abcdefghij"[(i * 7 + i / 3) % 10];
    int32_t *ids;
    size_t n;
    loom_err err;
    ck_assert_int_eq(loom_tokenizer_encode(qwen3, s, len, 1, &ids, &n, &err),
                     LOOM_OK);
    char *back;
    size_t blen;
    ck_assert_int_eq(
        loom_tokenizer_decode(qwen3, ids, n, 0, &back, &blen, &err), LOOM_OK);
    ck_assert_uint_eq(blen, len);
    ck_assert(memcmp(back, s, len) == 0);
    free(back);
    free(ids);
    memset(s, ' ', 100000);
    ck_assert_int_eq(loom_tokenizer_encode(qwen3, s, 100000, 1, &ids, &n, &err),
                     LOOM_OK);
    ck_assert_int_eq(
        loom_tokenizer_decode(qwen3, ids, n, 0, &back, &blen, &err), LOOM_OK);
    ck_assert_uint_eq(blen, 100000);
    free(back);
    free(ids);
    free(s);
}
END_TEST

START_TEST(invalid_utf8)
{
    ck_assert_ptr_nonnull(qwen3);
    static const struct {
        const char *s;
        size_t len, at;
    } bad[] = {
        {"ab\xFF", 3, 2},           /* never valid */
        {"\xC3", 1, 0},             /* truncated */
        {"x\xC0\x80", 3, 1},        /* overlong NUL */
        {"\xED\xA0\x80", 3, 0},     /* surrogate */
        {"\xF4\x90\x80\x80", 4, 0}, /* above U+10FFFF */
        {"ok \x80 ok", 7, 3},       /* lone continuation */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        loom_err err;
        ck_assert_int_eq(loom_tokenizer_encode(qwen3, bad[i].s, bad[i].len, 1,
                                               &ids, &n, &err),
                         LOOM_ERR_INVALID);
        char want[64];
        snprintf(want, sizeof want, "offset %zu", bad[i].at);
        ck_assert_msg(strstr(err.msg, "UTF-8") && strstr(err.msg, want),
                      "message: %s", err.msg);
        ck_assert_uint_eq(loom_utf8_check(bad[i].s, bad[i].len), bad[i].at);
    }
}
END_TEST

START_TEST(decode_errors_and_partial)
{
    ck_assert_ptr_nonnull(qwen3);
    loom_err err;
    char *text;
    int32_t bad[] = {9707, 151669};
    ck_assert_int_eq(loom_tokenizer_decode(qwen3, bad, 2, 0, &text, NULL, &err),
                     LOOM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "151669"));
    int32_t neg = -3;
    ck_assert_int_eq(
        loom_tokenizer_decode(qwen3, &neg, 1, 0, &text, NULL, &err),
        LOOM_ERR_INVALID);

    /* U+10348 is 4 bytes split over several tokens; the first holds only a
     * part of the character: the stream holds it back, then flush gives one
     * U+FFFD as HF's decode of that lone token does. */
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(
        loom_tokenizer_encode(qwen3, "\xF0\x90\x8D\x88", 4, 1, &ids, &n, &err),
        LOOM_OK);
    ck_assert_uint_ge(n, 2);
    loom_detok *d;
    ck_assert_int_eq(loom_detok_new(qwen3, 0, &d, &err), LOOM_OK);
    const char *t;
    size_t tl;
    ck_assert_int_eq(loom_detok_push(d, ids[0], &t, &tl, &err), LOOM_OK);
    ck_assert_uint_eq(tl, 0);
    loom_detok_flush(d, &t, &tl);
    ck_assert_str_eq(t, "\xEF\xBF\xBD");
    /* After a flush the stream starts over. */
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(loom_detok_push(d, ids[i], &t, &tl, &err), LOOM_OK);
    ck_assert_str_eq(t, "\xF0\x90\x8D\x88");
    ck_assert_int_eq(loom_detok_push(d, 151670, &t, &tl, &err),
                     LOOM_ERR_INVALID);
    loom_detok_free(d);
    free(ids);
}
END_TEST

/* Encoding is [thread-safe]: threads sharing one tokenizer each get the
 * reference ids. */
typedef struct worker {
    json_t *cases;
    int mismatches;
} worker;

static void encode_all(void *arg)
{
    worker *w = arg;
    for (int round = 0; round < 5; round++) {
        size_t i;
        json_t *c;
        json_array_foreach(w->cases, i, c)
        {
            json_t *text = json_object_get(c, "text");
            json_t *want = json_object_get(c, "ids");
            int32_t *ids = NULL;
            size_t n = 0;
            loom_err err;
            if (loom_tokenizer_encode(qwen3, json_string_value(text),
                                      json_string_length(text), 1, &ids, &n,
                                      &err) != LOOM_OK ||
                n != json_array_size(want)) {
                w->mismatches++;
            } else {
                for (size_t k = 0; k < n; k++)
                    w->mismatches +=
                        ids[k] != json_integer_value(json_array_get(want, k));
            }
            free(ids);
        }
    }
}

START_TEST(concurrent)
{
    ck_assert_ptr_nonnull(qwen3);
    json_t *cases = json_object_get(
        json_object_get(json_object_get(refs, "tokenizers"), "qwen3"), "cases");
    worker w[3] = {{cases, 0}, {cases, 0}, {cases, 0}};
    loom_thread *t[3];
    loom_err err;
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(loom_thread_start(&t[i], encode_all, &w[i], &err),
                         LOOM_OK);
    for (int i = 0; i < 3; i++) {
        loom_thread_join(t[i]);
        ck_assert_int_eq(w[i].mismatches, 0);
    }
}
END_TEST

/* ------------------------------------------------------ malformed files */

static const char *write_tok(const char *json)
{
    static char path[1024];
    const char *dir = temp_dir();
    ck_assert_ptr_nonnull(dir);
    write_text_in(dir, "tokenizer.json", json);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    return path;
}

#define GOOD_MODEL                                                             \
    "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": "  \
    "2, \"\\u0120\": 3}, \"merges\": [\"a b\"]}"

static const struct {
    const char *json;
    loom_status code;
    const char *needle;
} MALFORMED[] = {
    {"{\"added_tokens\": []}", LOOM_ERR_FORMAT, "no \"model\""},
    {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}",
     LOOM_ERR_UNSUPPORTED, "WordPiece"},
    {"{" GOOD_MODEL ", \"pre_tokenizer\": {\"type\": \"Metaspace\"}}",
     LOOM_ERR_UNSUPPORTED, "Metaspace"},
    {"{" GOOD_MODEL ", \"pre_tokenizer\": {\"type\": \"Sequence\", "
     "\"pretokenizers\": [{\"type\": \"ByteLevel\"}, {\"type\": "
     "\"WhitespaceSplit\"}]}}",
     LOOM_ERR_UNSUPPORTED, "WhitespaceSplit"},
    {"{" GOOD_MODEL ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": "
     "{\"Regex\": \"(a|b\"}, \"behavior\": \"Isolated\"}}",
     LOOM_ERR_FORMAT, "(a|b"},
    {"{" GOOD_MODEL ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": "
     "{\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}}",
     LOOM_ERR_UNSUPPORTED, "Sideways"},
    {"{" GOOD_MODEL ", \"normalizer\": {\"type\": \"Precompiled\"}}",
     LOOM_ERR_UNSUPPORTED, "Precompiled"},
    {"{" GOOD_MODEL ", \"decoder\": {\"type\": \"WordPiece\"}}",
     LOOM_ERR_UNSUPPORTED, "WordPiece"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, "
     "\"merges\": [\"a c\"]}}",
     LOOM_ERR_FORMAT, "\"c\""},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, "
     "\"merges\": [[\"x\", \"b\"]]}}",
     LOOM_ERR_FORMAT, "\"x\""},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, "
     "\"merges\": [\"a b\"]}}",
     LOOM_ERR_FORMAT, "\"ab\""},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": "
     "[\"a a a\"]}}",
     LOOM_ERR_FORMAT, "merges[0]"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -4}, \"merges\": "
     "[]}}",
     LOOM_ERR_FORMAT, "vocab"},
    {"{" GOOD_MODEL ", \"added_tokens\": [{\"content\": \"\", \"id\": 9}]}",
     LOOM_ERR_FORMAT, "added_tokens[0]"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [], "
     "\"byte_fallback\": true}}",
     LOOM_ERR_UNSUPPORTED, "byte_fallback"},
    {"{\"model\": ", LOOM_ERR_FORMAT, "tokenizer.json:1:"},
    {"{" GOOD_MODEL "}", LOOM_ERR_UNSUPPORTED, "ByteLevel"},
    {"{" GOOD_MODEL ", \"pre_tokenizer\": {\"type\": \"Digits\"}}",
     LOOM_ERR_UNSUPPORTED, "byte-level"},
};

START_TEST(malformed)
{
    const char *path = write_tok(MALFORMED[_i].json);
    loom_tokenizer *tok = NULL;
    loom_err err;
    loom_status st = loom_tokenizer_open(path, &tok, &err);
    ck_assert_msg(st == MALFORMED[_i].code, "case %d: status %d (%s)", _i,
                  (int)st, st == LOOM_OK ? "ok" : err.msg);
    ck_assert_msg(strstr(err.msg, MALFORMED[_i].needle) != NULL,
                  "case %d: message \"%s\" lacks \"%s\"", _i, err.msg,
                  MALFORMED[_i].needle);
    ck_assert_ptr_null(tok);
}
END_TEST

START_TEST(missing_file)
{
    loom_tokenizer *tok = NULL;
    loom_err err;
    ck_assert_int_ne(loom_tokenizer_open(temp_dir(), &tok, &err), LOOM_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "tokenizer.json"));
}
END_TEST

/* A hand-made tokenizer exercising the options the fixtures do not use:
 * lstrip/rstrip/single_word added tokens, a normalized added token,
 * Lowercase, ByteLevel with its own regex and prefix space, and the Split
 * behaviors. Expected ids are worked out by hand in the comments. */
START_TEST(options)
{
    const char *path = write_tok(
        "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": "
        "[{\"type\": \"NFC\"}, {\"type\": \"Lowercase\"}]},"
        "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": "
        "true},"
        "\"added_tokens\": ["
        "{\"id\": 10, \"content\": \"<S>\", \"special\": true, \"lstrip\": "
        "true, \"rstrip\": true, \"normalized\": false},"
        "{\"id\": 11, \"content\": \"xy\", \"special\": false, "
        "\"single_word\": true, \"normalized\": false},"
        "{\"id\": 12, \"content\": \"qq\", \"special\": false, "
        "\"normalized\": true},"
        "{\"id\": 13, \"content\": \"a \\u0120\", \"special\": false, "
        "\"normalized\": false}],"
        "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, "
        "\"\\u0120\": 2, \"\\u0120a\": 3, \"ab\": 4, \"\\u0120ab\": 5, "
        "\"x\": 6, \"y\": 7, \"q\": 8}, \"merges\": [\"\\u0120 a\", "
        "\"a b\", [\"\\u0120a\", \"b\"]]}}");
    loom_tokenizer *tok = NULL;
    loom_err err;
    ck_assert_msg(loom_tokenizer_open(path, &tok, &err) == LOOM_OK, "%s",
                  err.msg);
    static const struct {
        const char *text;
        int32_t ids[8];
        size_t n;
    } cases[] = {
        /* prefix space, then Ġ+a (rank 0) then Ġa+b (rank 2) */
        {"ab", {5}, 1},
        /* Lowercase applies; "AB B" -> " ab", " b" */
        {"AB B", {5, 2, 1}, 3},
        /* lstrip/rstrip swallow the spaces round <S>; pieces "ab", "b" */
        {"ab  <S>  b", {5, 10, 2, 1}, 4},
        /* single_word: "xy" alone is the token, inside a word it is not */
        {"xy", {11}, 1},
        {"axy", {3, 6, 7}, 3},
        /* normalized token matched after lowercasing: "QQ" -> "qq" */
        {"QQ", {12}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t *ids;
        size_t n;
        ck_assert_int_eq(loom_tokenizer_encode(tok, cases[i].text,
                                               strlen(cases[i].text), 1, &ids,
                                               &n, &err),
                         LOOM_OK);
        ck_assert_msg(n == cases[i].n, "\"%s\": %zu ids", cases[i].text, n);
        for (size_t k = 0; k < n; k++)
            ck_assert_msg(ids[k] == cases[i].ids[k], "\"%s\": id %zu is %d",
                          cases[i].text, k, ids[k]);
        free(ids);
    }
    /* Decoding goes through the byte-level alphabet ("\u0120" is a space)
     * unless a token has a character outside it, like the space in id 13. */
    int32_t dec[] = {3, 10, 13};
    char *text;
    ck_assert_int_eq(loom_tokenizer_decode(tok, dec, 3, 0, &text, NULL, &err),
                     LOOM_OK);
    ck_assert_str_eq(text, " a<S>a \xC4\xA0");
    free(text);
    ck_assert_int_eq(loom_tokenizer_decode(tok, dec, 3, 1, &text, NULL, &err),
                     LOOM_OK);
    ck_assert_str_eq(text, " aa \xC4\xA0");
    free(text);
    loom_tokenizer_free(tok);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *shared = tcase_create("qwen3");
    tcase_add_unchecked_fixture(shared, load_shared, free_shared);
    tcase_set_timeout(shared, 120);
    tcase_add_test(shared, qwen3_golden);
    tcase_add_test(shared, qwen3_api);
    tcase_add_loop_test(shared, hf_refs, 0, 5);
    tcase_add_test(shared, long_words);
    tcase_add_test(shared, invalid_utf8);
    tcase_add_test(shared, decode_errors_and_partial);
    tcase_add_test(shared, concurrent);
    suite_add_tcase(s, shared);
    TCase *small = tcase_create("small");
    tcase_add_loop_test(small, model_goldens, 0, 3);
    tcase_add_loop_test(small, malformed, 0,
                        (int)(sizeof MALFORMED / sizeof MALFORMED[0]));
    tcase_add_test(small, missing_file);
    tcase_add_test(small, options);
    suite_add_tcase(s, small);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
