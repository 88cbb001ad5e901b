/* Splits a chat reply as it is generated into reasoning, content and tool
 * calls, so that streamed deltas and the whole message agree: the whole
 * message is the same parser fed everything at once.
 *
 * Text that could still be the start of a tag (<think>, </think>, a tool
 * block) is held back until it is known not to be one. */
#include "server_reply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { M_CONTENT, M_REASON, M_TOOL };

static const char THINK_OPEN[] = "<think>";
static const char THINK_CLOSE[] = "</think>";
static const char *const TOOL_OPEN[] = {"<tool_call>", "<TOOLCALL>"};
static const char *const TOOL_CLOSE[] = {"</tool_call>", "</TOOLCALL>"};
#define N_TOOL_TAGS 2

void srv_reply_init(srv_reply *r, int split_reasoning, int think_open,
                    int parse_tools, const char *id_base)
{
    memset(r, 0, sizeof *r);
    r->split_reasoning = split_reasoning;
    r->parse_tools = parse_tools;
    r->mode = split_reasoning && think_open ? M_REASON : M_CONTENT;
    r->reasoned = r->mode == M_REASON;
    r->skip_nl = r->mode == M_REASON;
    r->calls = json_array();
    snprintf(r->id_base, sizeof r->id_base, "%s", id_base ? id_base : "call");
}

void srv_reply_free(srv_reply *r)
{
    srv_buf_free(&r->pend);
    srv_buf_free(&r->held_ws);
    srv_buf_free(&r->reasoning);
    srv_buf_free(&r->content);
    json_decref(r->calls);
    memset(r, 0, sizeof *r);
}

void srv_reply_clear(srv_reply *r)
{
    r->reasoning.len = 0;
    r->content.len = 0;
    json_array_clear(r->calls);
}

static const char *find(const char *s, size_t n, const char *tag)
{
    size_t k = strlen(tag);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(s + i, tag, k) == 0)
            return s + i;
    return NULL;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t partial_tail(const char *s, size_t n, const char *tag)
{
    size_t k = strlen(tag);
    for (size_t m = k - 1 < n ? k - 1 : n; m > 0; m--)
        if (memcmp(s + n - m, tag, m) == 0)
            return m;
    return 0;
}

static void consume(srv_buf *b, size_t k)
{
    memmove(b->data, b->data + k, b->len - k);
    b->len -= k;
    if (b->data)
        b->data[b->len] = 0;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* Reasoning text; newlines at its end are held until more text shows they
 * are not its end. */
static int emit_reason(srv_reply *r, const char *s, size_t n)
{
    size_t body = n;
    while (body > 0 && s[body - 1] == '\n')
        body--;
    if (body > 0) {
        for (; r->held_nl > 0; r->held_nl--)
            if (srv_buf_add(&r->reasoning, "\n", 1))
                return -1;
        if (srv_buf_add(&r->reasoning, s, body))
            return -1;
    }
    r->held_nl += (int)(n - body);
    return 0;
}

/* Content text; with tool parsing on, white space at its end is held, as
 * it is dropped when a call follows. */
static int emit_content(srv_reply *r, const char *s, size_t n)
{
    if (!r->parse_tools) {
        for (size_t i = 0; i < n && !r->began; i++)
            r->began = !is_ws(s[i]);
        return n ? srv_buf_add(&r->content, s, n) : 0;
    }
    size_t body = n;
    while (body > 0 && is_ws(s[body - 1]))
        body--;
    if (body > 0) {
        if (srv_buf_add(&r->content, r->held_ws.data, r->held_ws.len) ||
            srv_buf_add(&r->content, s, body))
            return -1;
        r->held_ws.len = 0;
        r->began = 1;
    }
    return srv_buf_add(&r->held_ws, s + body, n - body);
}

static int add_calls(srv_reply *r, json_t *calls)
{
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c)
    {
        char id[80];
        snprintf(id, sizeof id, "%s_%d", r->id_base, r->n_calls++);
        json_object_set_new(c, "id", json_string(id));
        if (json_array_append(r->calls, c))
            return -1;
    }
    return 0;
}

static int process(srv_reply *r, int final)
{
    for (;;) {
        srv_buf *p = &r->pend;
        const char *s = p->data ? p->data : "";
        size_t n = p->len;
        if (r->mode == M_REASON) {
            if (r->skip_nl) {
                size_t k = 0;
                while (k < n && s[k] == '\n')
                    k++;
                consume(p, k);
                if (p->len == 0)
                    return 0;
                r->skip_nl = 0;
                continue;
            }
            const char *end = find(s, n, THINK_CLOSE);
            if (end) {
                if (emit_reason(r, s, (size_t)(end - s)))
                    return -1;
                r->held_nl = 0; /* the reasoning's last newlines */
                consume(p, (size_t)(end - s) + strlen(THINK_CLOSE));
                r->mode = M_CONTENT;
                r->skip_nl = 1;
                continue;
            }
            size_t keep = final ? 0 : partial_tail(s, n, THINK_CLOSE);
            if (emit_reason(r, s, n - keep))
                return -1;
            consume(p, n - keep);
            return 0;
        }
        if (r->mode == M_TOOL) {
            const char *end = find(s, n, r->close);
            if (!end && !final)
                return 0;
            size_t body = end ? (size_t)(end - s) : n;
            json_t *calls = end ? srv_tool_calls_parse(s, body) : NULL;
            int rc;
            if (calls) {
                r->held_ws.len = 0;
                rc = add_calls(r, calls);
                r->began = 1;
            } else {
                /* not a call after all: the model's text as written */
                rc =
                    srv_buf_add(&r->content, r->held_ws.data, r->held_ws.len) ||
                    srv_buf_add(&r->content, r->open, strlen(r->open)) ||
                    srv_buf_add(&r->content, s, body) ||
                    (end &&
                     srv_buf_add(&r->content, r->close, strlen(r->close)));
                r->held_ws.len = 0;
                r->began = 1;
            }
            json_decref(calls);
            if (rc)
                return -1;
            consume(p, end ? body + strlen(r->close) : n);
            r->mode = M_CONTENT;
            r->skip_nl = calls != NULL;
            continue;
        }
        /* content */
        if (r->skip_nl) {
            size_t k = 0;
            while (k < n && (s[k] == '\n' || (r->parse_tools && is_ws(s[k]))))
                k++;
            consume(p, k);
            if (p->len == 0)
                return 0;
            r->skip_nl = 0;
            continue;
        }
        if (r->split_reasoning && !r->reasoned && !r->began) {
            /* a reply that opens with a think block */
            size_t k = 0;
            while (k < n && is_ws(s[k]))
                k++;
            size_t tl = strlen(THINK_OPEN);
            if (n - k >= tl && memcmp(s + k, THINK_OPEN, tl) == 0) {
                consume(p, k + tl);
                r->mode = M_REASON;
                r->reasoned = 1;
                r->skip_nl = 1;
                continue;
            }
            if (!final && n - k < tl && memcmp(s + k, THINK_OPEN, n - k) == 0)
                return 0; /* maybe the start of <think> */
        }
        if (!r->parse_tools) {
            if (emit_content(r, s, n))
                return -1;
            consume(p, n);
            return 0;
        }
        const char *at = NULL;
        int which = -1;
        for (int t = 0; t < N_TOOL_TAGS; t++) {
            const char *f = find(s, n, TOOL_OPEN[t]);
            if (f && (!at || f < at)) {
                at = f;
                which = t;
            }
        }
        if (at) {
            if (emit_content(r, s, (size_t)(at - s)))
                return -1;
            consume(p, (size_t)(at - s) + strlen(TOOL_OPEN[which]));
            r->mode = M_TOOL;
            r->open = TOOL_OPEN[which];
            r->close = TOOL_CLOSE[which];
            continue;
        }
        size_t keep = 0;
        for (int t = 0; t < N_TOOL_TAGS && !final; t++) {
            size_t k = partial_tail(s, n, TOOL_OPEN[t]);
            if (k > keep)
                keep = k;
        }
        if (emit_content(r, s, n - keep))
            return -1;
        consume(p, n - keep);
        return 0;
    }
}

int srv_reply_feed(srv_reply *r, const char *s, size_t n)
{
    if (srv_buf_add(&r->pend, s, n))
        return -1;
    return process(r, 0);
}

int srv_reply_finish(srv_reply *r)
{
    if (process(r, 1))
        return -1;
    /* white space the reply ended with stays, unless calls were made */
    if (r->n_calls == 0 &&
        srv_buf_add(&r->content, r->held_ws.data, r->held_ws.len))
        return -1;
    r->held_ws.len = 0;
    return 0;
}

/* ------------------------------------------------------------ tool calls */

/* {"type": "function", "function": {"name", "arguments": "<json>"}}: the
 * arguments as json.dumps writes them (", " and ": "), or a string value
 * kept as the model wrote it. */
static json_t *call_json(const char *name, json_t *args)
{
    json_t *a;
    if (json_is_string(args)) {
        a = json_incref(args);
    } else {
        char *d = json_dumps(args, JSON_INDENT(0) | JSON_PRESERVE_ORDER);
        a = d ? json_string(d) : NULL;
        free(d);
    }
    if (!a)
        return NULL;
    json_t *c = json_pack("{s:s, s:{s:s, s:o}}", "type", "function", "function",
                          "name", name, "arguments", a);
    return c;
}

static json_t *json_calls(json_t *v)
{
    json_t *list = json_is_array(v) ? json_incref(v) : json_pack("[O]", v);
    json_t *out = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(list, i, c)
    {
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *args = json_object_get(c, "arguments");
        if (!args)
            args = json_object_get(c, "parameters");
        if (!json_is_object(c) || !name || !*name ||
            (args && !json_is_object(args) && !json_is_string(args))) {
            json_decref(out);
            out = NULL;
            break;
        }
        json_t *empty = args ? NULL : json_object();
        json_array_append_new(out, call_json(name, args ? args : empty));
        json_decref(empty);
    }
    json_decref(list);
    if (out && json_array_size(out) == 0) {
        json_decref(out);
        out = NULL;
    }
    return out;
}

/* s[0..n) with one newline taken off each end. */
static void trim_nl(const char **s, size_t *n)
{
    if (*n && (*s)[0] == '\n') {
        (*s)++;
        (*n)--;
    }
    if (*n && (*s)[*n - 1] == '\n')
        (*n)--;
}

/* <function=NAME> <parameter=KEY>VALUE</parameter>... </function>, as many
 * as there are; a VALUE that is JSON (a number, true, an object) is taken
 * as such, else as a string. */
static json_t *xml_calls(const char *s, size_t n)
{
    static const char FN[] = "<function=", FN_END[] = "</function>",
                      PAR[] = "<parameter=", PAR_END[] = "</parameter>";
    json_t *out = json_array();
    const char *p = s, *end = s + n;
    for (;;) {
        while (p < end && is_ws(*p))
            p++;
        if (p == end)
            break;
        if ((size_t)(end - p) < sizeof FN - 1 ||
            memcmp(p, FN, sizeof FN - 1) != 0)
            goto bad;
        p += sizeof FN - 1;
        const char *gt = memchr(p, '>', (size_t)(end - p));
        const char *fe = find(p, (size_t)(end - p), FN_END);
        if (!gt || !fe || gt > fe || gt == p)
            goto bad;
        json_t *name = json_stringn(p, (size_t)(gt - p));
        json_t *args = json_object();
        const char *q = gt + 1;
        for (;;) {
            while (q < fe && is_ws(*q))
                q++;
            if (q == fe)
                break;
            const char *pe = find(q, (size_t)(fe - q), PAR_END);
            const char *kg = memchr(q, '>', (size_t)(fe - q));
            if ((size_t)(fe - q) < sizeof PAR - 1 ||
                memcmp(q, PAR, sizeof PAR - 1) != 0 || !pe || !kg || kg > pe) {
                json_decref(name);
                json_decref(args);
                goto bad;
            }
            const char *key = q + sizeof PAR - 1;
            const char *val = kg + 1;
            size_t vn = (size_t)(pe - val);
            trim_nl(&val, &vn);
            json_t *v = json_loadb(val, vn, JSON_DECODE_ANY, NULL);
            if (!v)
                v = json_stringn(val, vn);
            char k[256];
            snprintf(k, sizeof k, "%.*s", (int)(kg - key), key);
            json_object_set_new(args, k, v);
            q = pe + sizeof PAR_END - 1;
        }
        json_array_append_new(out, call_json(json_string_value(name), args));
        json_decref(name);
        json_decref(args);
        p = fe + sizeof FN_END - 1;
    }
    if (json_array_size(out) > 0)
        return out;
bad:
    json_decref(out);
    return NULL;
}

json_t *srv_tool_calls_parse(const char *body, size_t n)
{
    while (n && is_ws(*body)) {
        body++;
        n--;
    }
    while (n && is_ws(body[n - 1]))
        n--;
    if (n && body[0] == '<')
        return xml_calls(body, n);
    json_t *v = json_loadb(body, n, 0, NULL);
    if (!v)
        return NULL;
    json_t *calls =
        json_is_object(v) || json_is_array(v) ? json_calls(v) : NULL;
    json_decref(v);
    return calls;
}
