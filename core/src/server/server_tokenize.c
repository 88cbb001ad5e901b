/* POST /tokenize and POST /detokenize: a model's tokenizer over HTTP, in
 * llama-server's shapes (content, tokens, with_pieces) and vLLM's (prompt
 * or messages, count, max_model_len). */
#include "server_tokenize.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <loom/lane.h>

#include "server_prompt.h"

static json_t *parse_body(const char *body, size_t len, srv_error *e)
{
    json_error_t je;
    json_t *root = json_loadb(body ? body : "", len, 0, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        srv_error_set(e, 400, "invalid_request_error", "invalid_json", NULL,
                      "the body is not a JSON object");
        return NULL;
    }
    return root;
}

/* A bool member: its value, or def when absent; -1 when not a bool. */
static int bool_member(json_t *o, const char *k, int def)
{
    json_t *v = json_object_get(o, k);
    if (!v)
        return def;
    return json_is_boolean(v) ? json_is_true(v) : -1;
}

/* The piece of TOKEN: a string when its bytes are UTF-8, else a list of the
 * byte values (as llama-server gives it). */
static json_t *piece_json(void *lane, int32_t token)
{
    size_t n = 0;
    const char *b = loom_lane_token_bytes(lane, token, &n);
    json_t *s = b ? json_stringn(b, n) : json_string("");
    if (s)
        return s;
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)b[i]));
    return a;
}

char *srv_tokenize_json(const srv_tok_ctx *c, const char *body, size_t len,
                        srv_error *e)
{
    json_t *root = parse_body(body, len, e);
    if (!root)
        return NULL;
    char *out = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    json_t *text = json_object_get(root, "content");
    if (!text)
        text = json_object_get(root, "prompt");
    json_t *messages = json_object_get(root, "messages");
    int pieces = bool_member(root, "with_pieces", 0);
    int special = bool_member(root, "parse_special", 1);
    if (pieces < 0 || special < 0) {
        srv_error_set(e, 400, "invalid_request_error", "invalid_type",
                      pieces < 0 ? "with_pieces" : "parse_special",
                      "%s must be a boolean",
                      pieces < 0 ? "with_pieces" : "parse_special");
        goto done;
    }
    if (!!json_is_string(text) == !!messages) {
        srv_error_set(e, 400, "invalid_request_error", "invalid_value",
                      "content",
                      "give \"content\" (or \"prompt\") as a string, or "
                      "\"messages\"");
        goto done;
    }
    if (messages) {
        /* vLLM's shape: the messages (and tools) as a chat request's,
         * each an object with a role as /v1/chat/completions checks */
        size_t i;
        json_t *m;
        int bad = !json_is_array(messages) || !json_array_size(messages);
        json_array_foreach(messages, i, m) bad |=
            !json_is_string(json_object_get(m, "role"));
        if (bad) {
            srv_error_set(e, 400, "invalid_request_error", "invalid_value",
                          "messages",
                          "'messages' must be a non-empty array of objects "
                          "with a 'role'");
            goto done;
        }
        int32_t ni = 0;
        srv_request rq;
        memset(&rq, 0, sizeof rq);
        rq.kind = SRV_CHAT;
        rq.messages = messages;
        json_t *tools = json_object_get(root, "tools");
        rq.tools = json_is_array(tools) ? tools : NULL;
        if (srv_chat_prompt(c->tok, c->tpl, &rq, &ids, &ni, NULL, e) != 0)
            goto done;
        n = (size_t)ni;
    } else {
        loom_err err;
        if (loom_tokenizer_encode(c->tok, json_string_value(text),
                                  json_string_length(text), special, &ids, &n,
                                  &err) != LOOM_OK) {
            srv_error_set(e, 400, "invalid_request_error", "invalid_value",
                          "content", "content: %s", err.msg);
            goto done;
        }
    }
    json_t *toks = json_array();
    for (size_t i = 0; toks && i < n; i++) {
        if (!pieces) {
            json_array_append_new(toks, json_integer(ids[i]));
            continue;
        }
        json_t *p = json_object();
        json_object_set_new(p, "id", json_integer(ids[i]));
        json_object_set_new(p, "piece", piece_json(c->lane, ids[i]));
        json_array_append_new(toks, p);
    }
    json_t *res = json_object();
    json_object_set_new(res, "tokens", toks);
    json_object_set_new(res, "count", json_integer((json_int_t)n));
    json_object_set_new(res, "max_model_len", json_integer(c->ctx));
    out = json_dumps(res, JSON_COMPACT);
    json_decref(res);
    if (!out)
        srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
done:
    free(ids);
    json_decref(root);
    return out;
}

char *srv_detokenize_json(const srv_tok_ctx *c, const char *body, size_t len,
                          srv_error *e)
{
    json_t *root = parse_body(body, len, e);
    if (!root)
        return NULL;
    char *out = NULL, *text = NULL;
    json_t *toks = json_object_get(root, "tokens");
    size_t n = json_array_size(toks);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!json_is_array(toks) || !ids) {
        srv_error_set(e, 400, "invalid_request_error", "invalid_value",
                      "tokens", "\"tokens\" must be an array of token ids");
        goto done;
    }
    size_t vocab = loom_tokenizer_vocab_size(c->tok);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(toks, i);
        json_int_t x = json_integer_value(v);
        if (!json_is_integer(v) || x < 0 || (size_t)x >= vocab) {
            srv_error_set(e, 400, "invalid_request_error", "invalid_value",
                          "tokens",
                          "tokens[%zu] is not a token id of this model's "
                          "vocabulary of %zu",
                          i, vocab);
            goto done;
        }
        ids[i] = (int32_t)x;
    }
    size_t tl = 0;
    loom_err err;
    if (loom_tokenizer_decode(c->tok, ids, n, 0, &text, &tl, &err) != LOOM_OK) {
        srv_error_set(e, 400, "invalid_request_error", "invalid_value",
                      "tokens", "tokens: %s", err.msg);
        goto done;
    }
    json_t *res = json_object();
    json_object_set_new(res, "content", json_stringn(text, tl));
    json_object_set_new(res, "prompt", json_stringn(text, tl));
    out = json_dumps(res, JSON_COMPACT);
    json_decref(res);
    if (!out)
        srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
done:
    free(text);
    free(ids);
    json_decref(root);
    return out;
}
