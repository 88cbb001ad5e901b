/* The chat API's reply shaping and prompt path (issue 16): reasoning and
 * tool calls split out of replies (whole and streamed byte by byte alike),
 * OpenAI's shapes for them, top_logprobs keys that would collide, and the
 * server's prompt of OpenAI-shaped requests against the ids transformers
 * gives (tokenizer_refs/chat_prompt_refs.json). */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <loom/chat_template.h>
#include <loom/tokenizer.h>

#include "../../core/src/server/server_openai.h"
#include "../../core/src/server/server_prompt.h"
#include "../../core/src/server/server_reply.h"

typedef struct reply_case {
    const char *name;
    int split, think_open, tools;
    const char *text;
    const char *reasoning, *content;
    const char *calls; /* [[name, arguments string], ...] as JSON, or NULL */
} reply_case;

static const reply_case REPLIES[] = {
    {"qwen3 think + json call", 1, 0, 1,
     "<think>\nplan it\n</think>\n\nI'll look.\n<tool_call>\n{\"name\": "
     "\"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": "
     "2}}\n</tool_call>",
     "plan it", "I'll look.",
     "[[\"get_weather\", \"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 2}\"]]"},
    {"two qwen3 calls", 0, 0, 1,
     "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
     "<tool_call>\n{\"name\": \"b\", \"parameters\": {\"q\": \"x y\"}}\n"
     "</tool_call>",
     NULL, "", "[[\"a\", \"{}\"], [\"b\", \"{\\\"q\\\": \\\"x y\\\"}\"]]"},
    {"template opened the think block", 1, 1, 0,
     "\nreason\nmore\n\n</think>\n\nanswer\n", "reason\nmore", "answer\n",
     NULL},
    {"think never closed", 1, 1, 0, "still thinking", "still thinking", "",
     NULL},
    {"nemotron list", 1, 0, 1,
     "<TOOLCALL>[{\"name\": \"a\", \"arguments\": {\"x\": [1, 2]}}, "
     "{\"name\": \"b\", \"arguments\": {}}]</TOOLCALL>",
     NULL, "", "[[\"a\", \"{\\\"x\\\": [1, 2]}\"], [\"b\", \"{}\"]]"},
    {"qwen3.5 xml", 1, 0, 1,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew "
     "York\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n"
     "</tool_call>",
     NULL, "",
     "[[\"get_weather\", \"{\\\"city\\\": \\\"New York\\\", \\\"days\\\": "
     "3}\"]]"},
    {"not json: content as written", 1, 0, 1,
     "<tool_call>{not json}</tool_call> tail", NULL,
     "<tool_call>{not json}</tool_call> tail", NULL},
    {"unclosed call: content", 1, 0, 1, "ok <tool_call>{\"name\"", NULL,
     "ok <tool_call>{\"name\"", NULL},
    {"tools off: calls are text", 1, 0, 0,
     "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>", NULL,
     "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>", NULL},
    {"split off", 0, 0, 0, "<think>x</think>y", NULL, "<think>x</think>y",
     NULL},
    {"think only at the start", 1, 0, 0, "a <think>b</think>", NULL,
     "a <think>b</think>", NULL},
    {"angle brackets that are no tags", 1, 0, 1, "a < b <tool and <TOOL", NULL,
     "a < b <tool and <TOOL", NULL},
};

/* Feeds TEXT in pieces of STEP bytes (0: at once), collecting what comes
 * out across clears as a stream's deltas would. */
static void run_reply(const reply_case *c, size_t step, srv_buf *reason,
                      srv_buf *content, json_t *calls)
{
    srv_reply r;
    srv_reply_init(&r, c->split, c->think_open, c->tools, "call_t");
    size_t n = strlen(c->text);
    size_t k = step ? step : n;
    for (size_t i = 0; i < n; i += k) {
        size_t m = i + k > n ? n - i : k;
        ck_assert_int_eq(srv_reply_feed(&r, c->text + i, m), 0);
        srv_buf_add(reason, r.reasoning.data, r.reasoning.len);
        srv_buf_add(content, r.content.data, r.content.len);
        json_array_extend(calls, r.calls);
        srv_reply_clear(&r);
    }
    ck_assert_int_eq(srv_reply_finish(&r), 0);
    srv_buf_add(reason, r.reasoning.data, r.reasoning.len);
    srv_buf_add(content, r.content.data, r.content.len);
    json_array_extend(calls, r.calls);
    srv_reply_free(&r);
}

START_TEST(reply_split)
{
    const reply_case *c = &REPLIES[_i];
    json_t *want = c->calls ? json_loads(c->calls, 0, NULL) : json_array();
    ck_assert_ptr_nonnull(want);
    static const size_t steps[] = {0, 1, 2, 3, 7};
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        srv_buf reason = {0}, content = {0};
        json_t *calls = json_array();
        run_reply(c, steps[s], &reason, &content, calls);
        ck_assert_msg(strcmp(reason.data ? reason.data : "",
                             c->reasoning ? c->reasoning : "") == 0,
                      "%s (step %zu): reasoning '%s'", c->name, steps[s],
                      reason.data ? reason.data : "");
        ck_assert_msg(strcmp(content.data ? content.data : "", c->content) == 0,
                      "%s (step %zu): content '%s'", c->name, steps[s],
                      content.data ? content.data : "");
        ck_assert_msg(json_array_size(calls) == json_array_size(want),
                      "%s (step %zu): %zu calls", c->name, steps[s],
                      json_array_size(calls));
        for (size_t i = 0; i < json_array_size(want); i++) {
            json_t *got = json_array_get(calls, i);
            json_t *w = json_array_get(want, i);
            json_t *f = json_object_get(got, "function");
            ck_assert_str_eq(json_string_value(json_object_get(got, "type")),
                             "function");
            char id[32];
            snprintf(id, sizeof id, "call_t_%zu", i);
            ck_assert_str_eq(json_string_value(json_object_get(got, "id")), id);
            ck_assert_str_eq(json_string_value(json_object_get(f, "name")),
                             json_string_value(json_array_get(w, 0)));
            ck_assert_str_eq(json_string_value(json_object_get(f, "arguments")),
                             json_string_value(json_array_get(w, 1)));
        }
        srv_buf_free(&reason);
        srv_buf_free(&content);
        json_decref(calls);
    }
    json_decref(want);
}
END_TEST

static const char *piece(void *ctx, int32_t token, size_t *len)
{
    static const char *const P[] = {"\xe2", "\xe2\x80", "\x80",
                                    "a",    "\xf0",     "\xef\xbf\xbd"};
    (void)ctx;
    *len = strlen(P[token]);
    return P[token];
}

/* Byte tokens all read U+FFFD as text: each keeps a key of its own. */
START_TEST(top_logprobs_keys_distinct)
{
    srv_token_lp lp;
    memset(&lp, 0, sizeof lp);
    lp.token = 3;
    lp.logprob = -0.5f;
    lp.n_top = 6;
    for (int k = 0; k < 6; k++) {
        lp.top[k].token = k;
        lp.top[k].logprob = -(float)k;
    }
    srv_result r;
    memset(&r, 0, sizeof r);
    r.kind = SRV_COMPLETION;
    r.id = "cmpl-x";
    r.model = "m";
    r.lp = &lp;
    r.n_lp = 1;
    r.finish = "length";
    char *s = srv_response_json(&r, 1, 1, piece, NULL, 1, 1);
    json_t *j = json_loads(s, 0, NULL);
    json_t *top = json_array_get(
        json_object_get(
            json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                            "logprobs"),
            "top_logprobs"),
        0);
    ck_assert_uint_eq(json_object_size(top), 6);
    ck_assert_ptr_nonnull(json_object_get(top, "bytes:\\xe2"));
    ck_assert_ptr_nonnull(json_object_get(top, "bytes:\\xe2\\x80"));
    ck_assert_ptr_nonnull(json_object_get(top, "bytes:\\x80"));
    ck_assert_ptr_nonnull(json_object_get(top, "a"));
    ck_assert_ptr_nonnull(json_object_get(top, "\xef\xbf\xbd"));
    json_decref(j);
    free(s);
}
END_TEST

/* A message that only calls tools: content null, tool_calls as OpenAI's;
 * streamed: a delta with id, type and name, then one with the arguments,
 * the finish on the last. */
START_TEST(tool_call_shapes)
{
    json_t *calls = json_pack(
        "[{s:s, s:s, s:{s:s, s:s}}]", "id", "call_1", "type", "function",
        "function", "name", "get_weather", "arguments", "{\"city\": \"Oslo\"}");
    srv_result r;
    memset(&r, 0, sizeof r);
    r.kind = SRV_CHAT;
    r.id = "chatcmpl-x";
    r.model = "m";
    r.tool_calls = calls;
    r.reasoning = "why";
    r.reasoning_len = 3;
    r.finish = "tool_calls";
    char *s = srv_response_json(&r, 1, 0, NULL, NULL, 5, 7);
    json_t *j = json_loads(s, 0, NULL);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    ck_assert(json_is_null(json_object_get(msg, "content")));
    ck_assert_str_eq(
        json_string_value(json_object_get(msg, "reasoning_content")), "why");
    ck_assert(json_equal(json_object_get(msg, "tool_calls"), calls));
    ck_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")),
                     "tool_calls");
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_object_get(j, "usage"), "total_tokens")),
                     12);
    json_decref(j);
    free(s);

    srv_buf out = {0};
    r.reasoning = NULL;
    r.reasoning_len = 0;
    r.first_call = 2;
    r.index = 1;
    ck_assert_int_eq(srv_chunk_sse(&out, &r, 0, NULL, NULL, 0, 0), 0);
    /* two events: name first, then the arguments */
    char *e1 = strstr(out.data, "data: ");
    char *e2 = e1 ? strstr(e1 + 6, "data: ") : NULL;
    ck_assert_ptr_nonnull(e2);
    ck_assert_ptr_null(strstr(e2 + 6, "data: "));
    *e2 = 0;
    json_t *a = json_loads(e1 + 6, 0, NULL);
    json_t *b = json_loads(e2 + 6, 0, NULL);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    json_t *ca = json_array_get(json_object_get(a, "choices"), 0);
    json_t *cb = json_array_get(json_object_get(b, "choices"), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(ca, "index")), 1);
    json_t *da = json_array_get(
        json_object_get(json_object_get(ca, "delta"), "tool_calls"), 0);
    json_t *db = json_array_get(
        json_object_get(json_object_get(cb, "delta"), "tool_calls"), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(da, "index")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(da, "id")), "call_1");
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(da, "function"), "name")),
                     "get_weather");
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(da, "function"), "arguments")),
                     "");
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(db, "function"), "arguments")),
                     "{\"city\": \"Oslo\"}");
    ck_assert(json_is_null(json_object_get(ca, "finish_reason")));
    ck_assert_str_eq(json_string_value(json_object_get(cb, "finish_reason")),
                     "tool_calls");
    json_decref(a);
    json_decref(b);
    srv_buf_free(&out);
    json_decref(calls);
}
END_TEST

/* The server's prompt of an OpenAI-shaped request (tool call arguments as
 * JSON strings, null content) gives the ids transformers gives for the
 * conversation. */
START_TEST(server_prompt_matches_transformers)
{
    json_error_t je;
    json_t *refs =
        json_load_file(fixture("tokenizer_refs/chat_prompt_refs.json"), 0, &je);
    ck_assert_msg(refs != NULL, "%s", je.text);
    json_t *r = json_object_get(json_object_get(refs, "templates"), "qwen3");
    loom_err err;
    loom_tokenizer *tok = NULL;
    loom_chat_template *tpl = NULL;
    ck_assert(loom_tokenizer_open(fixture("tokenizers/qwen3"), &tok, &err) ==
              LOOM_OK);
    ck_assert(loom_chat_template_load(fixture("tokenizers/qwen3"), &tpl,
                                      &err) == LOOM_OK);
    size_t i, checked = 0;
    json_t *c;
    json_array_foreach(json_object_get(r, "renderings"), i, c)
    {
        if (json_object_get(c, "error") ||
            !json_is_true(json_object_get(c, "add_generation_prompt")))
            continue;
        json_t *msgs = json_deep_copy(json_object_get(c, "messages"));
        size_t k;
        json_t *m;
        json_array_foreach(msgs, k, m)
        {
            size_t q;
            json_t *call;
            json_array_foreach(json_object_get(m, "tool_calls"), q, call)
            {
                json_t *f = json_object_get(call, "function");
                char *a =
                    json_dumps(json_object_get(f, "arguments"), JSON_COMPACT);
                json_object_set_new(f, "arguments", json_string(a));
                free(a);
            }
        }
        json_t *body = json_pack("{s:o}", "messages", msgs);
        if (json_object_get(c, "tools"))
            json_object_set(body, "tools", json_object_get(c, "tools"));
        if (json_object_get(c, "extra"))
            json_object_set(body, "chat_template_kwargs",
                            json_object_get(c, "extra"));
        char *text = json_dumps(body, 0);
        srv_request rq;
        srv_error e;
        ck_assert_msg(
            srv_request_parse(SRV_CHAT, text, strlen(text), &rq, &e) == 0, "%s",
            e.message);
        int32_t *ids = NULL, n = 0;
        char *rendered = NULL;
        ck_assert_msg(srv_chat_prompt(tok, tpl, &rq, &ids, &n, &rendered, &e) ==
                          0,
                      "%s", e.message);
        const char *name = json_string_value(json_object_get(c, "name"));
        ck_assert_msg(strcmp(rendered, json_string_value(json_object_get(
                                           c, "rendered"))) == 0,
                      "%s:\n%s", name, rendered);
        json_t *want = json_object_get(c, "ids");
        ck_assert_uint_eq((size_t)n, json_array_size(want));
        for (int32_t t = 0; t < n; t++)
            ck_assert_int_eq(
                ids[t], json_integer_value(json_array_get(want, (size_t)t)));
        /* tool_choice "none": the template sees no tools */
        if (json_object_get(c, "tools")) {
            json_object_set_new(body, "tool_choice", json_string("none"));
            json_object_del(body, "tools");
            char *plain = json_dumps(body, 0);
            json_object_set(body, "tools", json_object_get(c, "tools"));
            char *none = json_dumps(body, 0);
            srv_request a, b;
            int32_t *ia = NULL, *ib = NULL, na = 0, nb = 0;
            json_object_del(body, "tool_choice");
            ck_assert(
                srv_request_parse(SRV_CHAT, plain, strlen(plain), &a, &e) == 0);
            ck_assert(srv_request_parse(SRV_CHAT, none, strlen(none), &b, &e) ==
                      0);
            ck_assert(srv_chat_prompt(tok, tpl, &a, &ia, &na, NULL, &e) == 0);
            ck_assert(srv_chat_prompt(tok, tpl, &b, &ib, &nb, NULL, &e) == 0);
            ck_assert_int_eq(na, nb);
            ck_assert_int_lt(na, n);
            ck_assert_int_eq(memcmp(ia, ib, (size_t)na * sizeof *ia), 0);
            free(ia);
            free(ib);
            srv_request_free(&a);
            srv_request_free(&b);
            free(plain);
            free(none);
        }
        free(ids);
        free(rendered);
        free(text);
        srv_request_free(&rq);
        json_decref(body);
        checked++;
    }
    ck_assert_uint_ge(checked, 5);
    loom_chat_template_free(tpl);
    loom_tokenizer_free(tok);
    json_decref(refs);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("chat_api");
    TCase *tc = tcase_create("chat_api");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, reply_split, 0,
                        (int)(sizeof REPLIES / sizeof REPLIES[0]));
    tcase_add_test(tc, top_logprobs_keys_distinct);
    tcase_add_test(tc, tool_call_shapes);
    tcase_add_test(tc, server_prompt_matches_transformers);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
