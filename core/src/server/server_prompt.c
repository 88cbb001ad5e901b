/* Prompt ids for chat requests: OpenAI's messages, tools and template
 * arguments given to the checkpoint's chat template as Hugging Face's
 * apply_chat_template sees them (vLLM's conventions where OpenAI's shape
 * and the templates' differ), then rendered and tokenized by
 * loom_chat_prompt, the same path as `loom run --chat`. */
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

/* An assistant's tool_calls for the template: OpenAI's shape, with each
 * arguments string parsed into an object, as templates write them with
 * tojson (vLLM does the same). */
static int template_calls(json_t *m, size_t i, srv_error *e)
{
    json_t *calls = json_object_get(m, "tool_calls");
    if (!calls || json_is_null(calls)) {
        json_object_del(m, "tool_calls");
        return 0;
    }
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (!json_is_array(calls))
        return srv_error_set(e, 400, "invalid_request_error", "invalid_type",
                             param, "'%s' must be an array", param);
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c)
    {
        json_t *f = json_object_get(c, "function");
        if (!json_is_object(c) || !json_is_object(f) ||
            !json_is_string(json_object_get(f, "name")))
            return srv_error_set(e, 400, "invalid_request_error",
                                 "invalid_type", param,
                                 "'%s'[%zu] must be {\"id\", \"type\": "
                                 "\"function\", \"function\": {\"name\", "
                                 "\"arguments\"}}",
                                 param, k);
        json_t *args = json_object_get(f, "arguments");
        if (json_is_string(args)) {
            json_t *obj = json_loads(json_string_value(args), 0, NULL);
            if (json_is_object(obj))
                json_object_set_new(f, "arguments", obj);
            else
                json_decref(obj);
        }
    }
    return 0;
}

/* The messages as the template reads them: content a string (text parts
 * joined by "\n", null as ""), tool calls as template_calls makes them. */
static json_t *template_messages(json_t *messages, srv_error *e)
{
    json_t *msgs = json_deep_copy(messages);
    if (!msgs) {
        srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        json_t *content = json_object_get(m, "content");
        if (!json_is_string(content)) {
            srv_buf text = {0};
            if ((content && !json_is_null(content) &&
                 content_text(content, &text) != 0) ||
                json_object_set_new(
                    m, "content",
                    json_stringn(text.data ? text.data : "", text.len)) != 0) {
                srv_buf_free(&text);
                json_decref(msgs);
                srv_error_set(e, 500, "server_error", NULL, NULL,
                              "out of memory");
                return NULL;
            }
            srv_buf_free(&text);
        }
        if (template_calls(m, i, e) != 0) {
            json_decref(msgs);
            return NULL;
        }
    }
    return msgs;
}

int srv_chat_prompt(const loom_tokenizer *tok, const loom_chat_template *tpl,
                    const srv_request *rq, int32_t **ids_out, int32_t *n_out,
                    char **rendered, srv_error *e)
{
    if (!tpl)
        return srv_error_set(e, 400, "invalid_request_error",
                             "no_chat_template", "messages",
                             "this model has no chat template; use "
                             "/v1/completions");
    json_t *messages = rq->messages;
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
    json_t *msgs = template_messages(messages, e);
    if (!msgs)
        return -1;
    /* template arguments: chat_template_kwargs, then tools (none with
     * tool_choice "none") and documents */
    json_t *extra = rq->template_kwargs ? json_deep_copy(rq->template_kwargs)
                                        : json_object();
    if (extra && rq->tools && rq->tool_choice != SRV_TOOLS_NONE)
        json_object_set(extra, "tools", rq->tools);
    if (extra && rq->documents)
        json_object_set(extra, "documents", rq->documents);
    int32_t *ids = NULL;
    size_t n = 0;
    loom_err err;
    loom_status st = extra
                         ? loom_chat_prompt(tpl, tok, msgs, 1, extra, rendered,
                                            &ids, &n, &err)
                         : loom_err_set(&err, LOOM_ERR_NOMEM, "out of memory");
    json_decref(extra);
    json_decref(msgs);
    if (st != LOOM_OK)
        return srv_error_set(
            e, st == LOOM_ERR_NOMEM ? 500 : 400,
            st == LOOM_ERR_NOMEM ? "server_error" : "invalid_request_error",
            "template_error", "messages",
            "the chat template refused the messages: %s", err.msg);
    if (n == 0 || n > INT32_MAX) {
        free(ids);
        if (rendered) {
            free(*rendered);
            *rendered = NULL;
        }
        return srv_error_set(e, 400, "invalid_request_error", "invalid_value",
                             "messages", "the messages render to %zu tokens",
                             n);
    }
    *ids_out = ids;
    *n_out = (int32_t)n;
    return 0;
}
