/* Prompt ids for chat requests: the checkpoint's chat template rendered so
 * that only the template's own text may hold special tokens.
 *
 * Each message's content is swapped for a placeholder before rendering; the
 * rendered text is then encoded piece by piece: the template's pieces with
 * special tokens recognised, each content as plain text. So a user who types
 * "<|im_start|>system" gets those characters as ordinary tokens, and cannot
 * open a turn of their own. */
#include "server_prompt.h"

#include <stdlib.h>
#include <string.h>

#include <loom/chat_template.h>
#include <loom/checkpoint.h>
#include <loom/platform.h>
#include <loom/tokenizer.h>

#include "server_http.h"

loom_status srv_chat_template_open(const loom_checkpoint *ckpt,
                                   const loom_tokenizer *tok,
                                   loom_chat_template **out, loom_err *err)
{
    (void)tok;
    *out = NULL;
    loom_status st =
        loom_chat_template_load(loom_checkpoint_dir(ckpt), out, err);
    /* a model without a template still serves completions */
    if (st == LOOM_ERR_NOT_FOUND) {
        *out = NULL;
        return LOOM_OK;
    }
    return st;
}

void srv_chat_template_free(loom_chat_template *tpl)
{
    loom_chat_template_free(tpl);
}

/* Roles the template may see; the role string is written into the prompt
 * by the template, so it must not carry text of the client's choosing. */
static int known_role(const char *r)
{
    static const char *const roles[] = {"system", "user", "assistant", "tool",
                                        "developer"};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strcmp(r, roles[i]) == 0)
            return 1;
    return 0;
}

/* The text of a content value: a string, or text parts joined by "\n" (as
 * vLLM joins them). NULL for null content. */
static int content_text(json_t *content, srv_buf *out)
{
    if (json_is_string(content))
        return srv_buf_add(out, json_string_value(content),
                           json_string_length(content));
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        json_t *t = json_object_get(part, "text");
        if ((i && srv_buf_add(out, "\n", 1)) ||
            srv_buf_add(out, json_string_value(t), json_string_length(t)))
            return -1;
    }
    return 0;
}

static int append_ids(int32_t **ids, int32_t *n, size_t *cap,
                      const int32_t *add, size_t k)
{
    if ((size_t)*n + k > INT32_MAX)
        return -1;
    if ((size_t)*n + k > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < (size_t)*n + k)
            c *= 2;
        int32_t *p = realloc(*ids, c * sizeof *p);
        if (!p)
            return -1;
        *ids = p;
        *cap = c;
    }
    if (k)
        memcpy(*ids + *n, add, k * sizeof *add);
    *n += (int32_t)k;
    return 0;
}

static int encode_into(const loom_tokenizer *tok, const char *s, size_t len,
                       int special, int32_t **ids, int32_t *n, size_t *cap,
                       srv_error *e)
{
    if (len == 0)
        return 0;
    int32_t *part = NULL;
    size_t k = 0;
    loom_err err;
    if (loom_tokenizer_encode(tok, s, len, special, &part, &k, &err) != LOOM_OK)
        return srv_error_set(e, 400, "invalid_request_error", "invalid_value",
                             "messages", "messages: %s", err.msg);
    int rc = append_ids(ids, n, cap, part, k);
    free(part);
    if (rc)
        return srv_error_set(e, 500, "server_error", NULL, NULL,
                             "out of memory");
    return 0;
}

int srv_chat_prompt(const loom_tokenizer *tok, const loom_chat_template *tpl,
                    json_t *messages, int32_t **ids_out, int32_t *n_out,
                    srv_error *e)
{
    if (!tpl)
        return srv_error_set(e, 400, "invalid_request_error",
                             "no_chat_template", "messages",
                             "this model has no chat template; use "
                             "/v1/completions");
    size_t n_msg = json_array_size(messages);
    for (size_t i = 0; i < n_msg; i++) {
        const char *role = json_string_value(
            json_object_get(json_array_get(messages, i), "role"));
        if (!known_role(role)) {
            char param[64];
            snprintf(param, sizeof param, "messages[%zu].role", i);
            return srv_error_set(e, 400, "invalid_request_error",
                                 "invalid_value", param,
                                 "'%s' is '%s'; expected system, user, "
                                 "assistant, tool or developer",
                                 param, role);
        }
    }

    /* Placeholders: private-use characters around a per-call nonce and the
     * message index, text no template changes (no spaces to trim, no
     * markup) and no client can predict. */
    char open_mark[48];
    snprintf(open_mark, sizeof open_mark,
             "\xEE\x80\x80%llx:", (unsigned long long)loom_now_ns());
    static const char close_mark[] = "\xEE\x80\x81";
    json_t *msgs = json_deep_copy(messages);
    srv_buf *texts = calloc(n_msg ? n_msg : 1, sizeof *texts);
    char *rendered = NULL;
    int32_t *ids = NULL, n = 0;
    size_t cap = 0;
    int rc = -1;
    if (!msgs || !texts) {
        srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_msg; i++) {
        json_t *m = json_array_get(msgs, i);
        json_t *content = json_object_get(m, "content");
        if (!content || json_is_null(content))
            continue;
        char mark[96];
        snprintf(mark, sizeof mark, "%s%zu%s", open_mark, i, close_mark);
        if (content_text(content, &texts[i]) != 0 ||
            json_object_set_new(m, "content", json_string(mark)) != 0) {
            srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
            goto done;
        }
    }
    loom_err err;
    loom_status st =
        loom_chat_template_render(tpl, msgs, 1, NULL, &rendered, &err);
    if (st != LOOM_OK) {
        srv_error_set(e, st == LOOM_ERR_NOMEM ? 500 : 400,
                      st == LOOM_ERR_NOMEM ? "server_error"
                                           : "invalid_request_error",
                      "template_error", "messages",
                      "the chat template refused the messages: %s", err.msg);
        goto done;
    }
    size_t open_len = strlen(open_mark), close_len = sizeof close_mark - 1;
    const char *p = rendered;
    for (;;) {
        const char *m = strstr(p, open_mark);
        if (encode_into(tok, p, m ? (size_t)(m - p) : strlen(p), 1, &ids, &n,
                        &cap, e) != 0)
            goto done;
        if (!m)
            break;
        char *end = NULL;
        unsigned long idx = strtoul(m + open_len, &end, 10);
        if (idx >= n_msg || strncmp(end, close_mark, close_len) != 0) {
            srv_error_set(e, 500, "server_error", NULL, NULL,
                          "chat template output is garbled");
            goto done;
        }
        if (encode_into(tok, texts[idx].data ? texts[idx].data : "",
                        texts[idx].len, 0, &ids, &n, &cap, e) != 0)
            goto done;
        p = end + close_len;
    }
    if (n == 0) {
        srv_error_set(e, 400, "invalid_request_error", "invalid_value",
                      "messages", "the messages render to an empty prompt");
        goto done;
    }
    *ids_out = ids;
    *n_out = n;
    ids = NULL;
    rc = 0;
done:
    free(ids);
    free(rendered);
    if (texts)
        for (size_t i = 0; i < n_msg; i++)
            srv_buf_free(&texts[i]);
    free(texts);
    json_decref(msgs);
    return rc;
}
