/* Server goldens: a frozen set of requests (greedy and seeded, completions
 * and chat, streamed and not, an error) against the fixture models, whose
 * answers are compared byte for byte with tests/fixtures/server_goldens.json
 * after masking response ids and times (and merging a stream's text
 * chunks, whose cuts depend on timing), so that any change in what loom
 * answers shows in CI. LOOM_UPDATE_GOLDENS=1 rewrites the file (review the
 * diff: the greedy texts are checked against Hugging Face elsewhere). */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <loom/platform.h>
#include <loom/server.h>

#include "../../core/src/server/server_http.h"

static const char *const MODELS[] = {"models/qwen35-tiny",
                                     "models/nemotron-h-tiny"};

static const struct {
    const char *name, *path, *body;
} CASES[] = {
    {"completion-greedy", "/v1/completions",
     "{\"prompt\":\"Hello\",\"max_tokens\":8,\"temperature\":0}"},
    {"completion-seeded", "/v1/completions",
     "{\"prompt\":\"Hello\",\"max_tokens\":8,\"temperature\":0.8,"
     "\"top_p\":0.9,\"seed\":7}"},
    {"completion-ids-stream", "/v1/completions",
     "{\"prompt\":[3,4,5],\"max_tokens\":6,\"temperature\":0,"
     "\"stream\":true,\"stream_options\":{\"include_usage\":true}}"},
    {"chat-greedy", "/v1/chat/completions",
     "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
     "{\"role\":\"user\",\"content\":\"Hi there\"}],\"max_tokens\":6,"
     "\"temperature\":0}"},
    {"chat-seeded-stream", "/v1/chat/completions",
     "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me\"}],"
     "\"max_tokens\":6,\"temperature\":1.0,\"top_k\":20,\"seed\":11,"
     "\"stream\":true}"},
    {"completion-stop", "/v1/completions",
     "{\"prompt\":\"Hello\",\"max_tokens\":16,\"temperature\":0,"
     "\"stop\":[\"e\"]}"},
    {"error-bad-field", "/v1/completions",
     "{\"prompt\":\"a\",\"max_tokens\":\"10\"}"},
};

/* Sends one request and returns "STATUS\n" + the de-chunked body. */
static char *ask(int port, const char *path, const char *body)
{
    loom_socket s;
    loom_err err;
    ck_assert_msg(loom_tcp_connect("127.0.0.1", port, &s, &err) == LOOM_OK,
                  "%s", err.msg);
    char head[512];
    int n = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu"
                     "\r\n\r\n",
                     path, strlen(body));
    ck_assert_int_eq(loom_socket_send_all(s, head, (size_t)n), 0);
    ck_assert_int_eq(loom_socket_send_all(s, body, strlen(body)), 0);
    srv_buf raw = {0};
    char buf[16384];
    long got;
    while ((got = loom_socket_recv(s, buf, sizeof buf, 30000)) > 0)
        srv_buf_add(&raw, buf, (size_t)got);
    ck_assert_msg(got != -2, "timed out");
    loom_socket_close(s);
    srv_buf_add(&raw, "", 0);
    const char *sep = strstr(raw.data, "\r\n\r\n");
    ck_assert_ptr_nonnull(sep);
    int status = 0;
    ck_assert_int_eq(sscanf(raw.data, "HTTP/1.%*d %d", &status), 1);
    srv_buf out = {0};
    char st[16];
    snprintf(st, sizeof st, "%d\n", status);
    srv_buf_add(&out, st, strlen(st));
    const char *b = sep + 4;
    if (strstr(raw.data, "Transfer-Encoding: chunked") &&
        strstr(raw.data, "Transfer-Encoding: chunked") < sep) {
        for (;;) {
            unsigned long size = strtoul(b, NULL, 16);
            const char *crlf = strstr(b, "\r\n");
            ck_assert_ptr_nonnull(crlf);
            if (size == 0)
                break;
            srv_buf_add(&out, crlf + 2, size);
            b = crlf + 2 + size + 2;
        }
    } else {
        srv_buf_add(&out, b, strlen(b));
    }
    srv_buf_add(&out, "", 0);
    srv_buf_free(&raw);
    return out.data;
}

/* Masks what differs between runs: "id":"..." and "created":N. */
static char *mask(const char *s)
{
    srv_buf out = {0};
    for (const char *p = s; *p;) {
        if (!strncmp(p, "\"id\":\"", 6)) {
            srv_buf_add(&out, "\"id\":\"ID\"", 9);
            const char *q = strchr(p + 6, '"');
            ck_assert_ptr_nonnull(q);
            p = q + 1;
        } else if (!strncmp(p, "\"created\":", 10)) {
            srv_buf_add(&out, "\"created\":0", 11);
            p += 10;
            while (*p >= '0' && *p <= '9')
                p++;
        } else {
            srv_buf_add(&out, p, 1);
            p++;
        }
    }
    srv_buf_add(&out, "", 0);
    return out.data;
}

/* The text a stream chunk adds (choices[0].text or .delta.content), when
 * it is a plain text chunk (no role, no finish, no logprobs). */
static json_t *chunk_text(json_t *ev)
{
    json_t *c = json_array_get(json_object_get(ev, "choices"), 0);
    if (!c || !json_is_null(json_object_get(c, "finish_reason")))
        return NULL;
    json_t *d = json_object_get(c, "delta");
    if (d && (json_object_get(d, "role") || json_object_size(d) != 1))
        return NULL;
    json_t *t = d ? json_object_get(d, "content") : json_object_get(c, "text");
    return json_is_string(t) ? t : NULL;
}

/* A stream's events with consecutive text chunks merged: how the text is
 * cut into events depends on timing, not on what loom answers. */
static char *merge_stream(const char *body)
{
    srv_buf out = {0};
    json_t *held = NULL; /* a text chunk being extended */
    const char *p = strstr(body, "data: ");
    ck_assert_ptr_nonnull(p);
    srv_buf_add(&out, body, (size_t)(p - body)); /* the status line */
    for (;;) {
        const char *e = strstr(p, "\n\n");
        if (!e)
            break;
        json_t *ev = NULL;
        if (!strncmp(p, "data: {", 7))
            ev = json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL);
        json_t *t = ev ? chunk_text(ev) : NULL;
        if (t && held) {
            json_t *ht = chunk_text(held);
            char *joined =
                malloc(json_string_length(ht) + json_string_length(t) + 1);
            memcpy(joined, json_string_value(ht), json_string_length(ht));
            memcpy(joined + json_string_length(ht), json_string_value(t),
                   json_string_length(t) + 1);
            json_string_setn(ht, joined,
                             json_string_length(ht) + json_string_length(t));
            free(joined);
            json_decref(ev);
        } else {
            if (held) {
                char *d = json_dumps(held, JSON_COMPACT | JSON_PRESERVE_ORDER);
                srv_buf_addf(&out, "data: %s\n\n", d);
                free(d);
                json_decref(held);
                held = NULL;
            }
            if (t) {
                held = ev;
            } else {
                srv_buf_add(&out, p, (size_t)(e + 2 - p));
                json_decref(ev);
            }
        }
        p = e + 2;
    }
    if (held) {
        char *d = json_dumps(held, JSON_COMPACT | JSON_PRESERVE_ORDER);
        srv_buf_addf(&out, "data: %s\n\n", d);
        free(d);
        json_decref(held);
    }
    srv_buf_add(&out, p, strlen(p));
    srv_buf_add(&out, "", 0);
    return out.data;
}

START_TEST(answers_match_the_goldens)
{
    const char *path = fixture("server_goldens.json");
    int update = getenv("LOOM_UPDATE_GOLDENS") &&
                 !strcmp(getenv("LOOM_UPDATE_GOLDENS"), "1");
    json_t *gold = update ? json_object() : json_load_file(path, 0, NULL);
    ck_assert_msg(gold != NULL, "%s: missing or not JSON", path);
    size_t checked = 0;
    for (size_t m = 0; m < sizeof MODELS / sizeof MODELS[0]; m++) {
        loom_server_params p;
        memset(&p, 0, sizeof p);
        loom_server *srv = NULL;
        loom_err err;
        ck_assert_msg(loom_server_start(&p, &srv, &err) == LOOM_OK, "%s",
                      err.msg);
        static const char *const dirs[] = {LOOM_PLUGIN_DIR};
        loom_engine_params ep;
        memset(&ep, 0, sizeof ep);
        ep.model = fixture(MODELS[m]);
        ep.plugin_dirs = dirs;
        ep.n_plugin_dirs = 1;
        ep.n_threads = 1;
        ck_assert_msg(loom_server_load(srv, &ep, &err) == LOOM_OK, "%s",
                      err.msg);
        int port = loom_server_port(srv);
        for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
            char key[160];
            snprintf(key, sizeof key, "%s/%s", MODELS[m] + 7, CASES[i].name);
            char *raw = ask(port, CASES[i].path, CASES[i].body);
            char *got = strstr(raw, "\ndata: ") ? merge_stream(raw) : raw;
            if (got != raw)
                free(raw);
            char *masked = mask(got);
            if (update) {
                json_object_set_new(gold, key, json_string(masked));
            } else {
                const char *want =
                    json_string_value(json_object_get(gold, key));
                ck_assert_msg(want != NULL, "%s: no golden", key);
                ck_assert_msg(strcmp(masked, want) == 0,
                              "%s:\n--- got\n%s\n--- want\n%s", key, masked,
                              want);
                checked++;
            }
            free(masked);
            free(got);
        }
        loom_server_free(srv);
    }
    if (update)
        ck_assert_int_eq(
            json_dump_file(gold, path, JSON_INDENT(1) | JSON_SORT_KEYS), 0);
    else
        ck_assert_uint_eq(checked, json_object_size(gold));
    json_decref(gold);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_goldens");
    TCase *tc = tcase_create("goldens");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, answers_match_the_goldens);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
