/* OpenAI request parsing and response shaping for the server: type-checked
 * bodies of /v1/completions and /v1/chat/completions, errors in OpenAI's
 * shape, and the JSON and server-sent-event bodies sent back. */
#include "server_openai.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <loom/tokenizer.h>

/* ---------------------------------------------------------------- errors */

int srv_error_set(srv_error *e, int status, const char *type, const char *code,
                  const char *param, const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* A JSON string of possibly invalid UTF-8: invalid bytes become U+FFFD. */
json_t *srv_json_text(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    if (j)
        return j;
    srv_buf b = {0};
    size_t i = 0;
    while (i < n) {
        size_t ok = loom_utf8_check(s + i, n - i);
        srv_buf_add(&b, s + i, ok);
        i += ok;
        if (i < n) {
            srv_buf_add(&b, "\xEF\xBF\xBD", 3);
            i++;
        }
    }
    j = json_stringn(b.data ? b.data : "", b.len);
    srv_buf_free(&b);
    return j;
}

char *srv_error_json(const srv_error *e)
{
    json_t *err = json_object();
    json_object_set_new(err, "message",
                        srv_json_text(e->message, strlen(e->message)));
    json_object_set_new(err, "type", json_string(e->type ? e->type : ""));
    json_object_set_new(err, "param",
                        e->param[0] ? json_string(e->param) : json_null());
    json_object_set_new(err, "code",
                        e->code ? json_string(e->code) : json_null());
    json_t *root = json_object();
    json_object_set_new(root, "error", err);
    char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    return s;
}

/* ---------------------------------------------------------------- parsing */

#define BAD(param, ...)                                                        \
    srv_error_set(e, 400, "invalid_request_error", "invalid_type", param,      \
                  __VA_ARGS__)
#define BADVAL(param, ...)                                                     \
    srv_error_set(e, 400, "invalid_request_error", "invalid_value", param,     \
                  __VA_ARGS__)

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

/* Field present and not null. */
static json_t *field(json_t *root, const char *key)
{
    json_t *v = json_object_get(root, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int get_number(json_t *root, const char *key, double lo, double hi,
                      float *out, srv_error *e)
{
    json_t *v = field(root, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return BAD(key, "'%s' must be a number, not %s", key, type_name(v));
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return BADVAL(key, "'%s' is %g; it must be in [%g, %g]", key, d, lo,
                      hi);
    *out = (float)d;
    return 0;
}

static int get_int(json_t *root, const char *key, int64_t lo, int64_t hi,
                   int64_t *out, srv_error *e)
{
    json_t *v = field(root, key);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return BAD(key, "'%s' must be an integer, not %s", key, type_name(v));
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return BADVAL(key, "'%s' is %lld; it must be in [%lld, %lld]", key,
                      (long long)i, (long long)lo, (long long)hi);
    *out = i;
    return 0;
}

static int get_bool(json_t *root, const char *key, int *out, srv_error *e)
{
    json_t *v = field(root, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return BAD(key, "'%s' must be a boolean, not %s", key, type_name(v));
    *out = json_is_true(v);
    return 0;
}

static int get_string(json_t *root, const char *key, const char **out,
                      srv_error *e)
{
    json_t *v = field(root, key);
    if (!v)
        return 0;
    if (!json_is_string(v))
        return BAD(key, "'%s' must be a string, not %s", key, type_name(v));
    *out = json_string_value(v);
    return 0;
}

static int parse_ids(json_t *arr, const char *param, srv_request *rq,
                     srv_error *e)
{
    size_t n = json_array_size(arr);
    if (n == 0)
        return BADVAL(param, "'%s' is empty", param);
    if (n > INT32_MAX)
        return BADVAL(param, "'%s' is too long", param);
    rq->prompt_ids = malloc(n * sizeof *rq->prompt_ids);
    if (!rq->prompt_ids)
        return srv_error_set(e, 500, "server_error", NULL, NULL,
                             "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(arr, i);
        if (!json_is_integer(t))
            return BAD(param, "'%s'[%zu] must be a token id, not %s", param, i,
                       type_name(t));
        json_int_t id = json_integer_value(t);
        if (id < 0 || id > INT32_MAX)
            return BADVAL(param, "'%s'[%zu] = %lld is not a token id", param, i,
                          (long long)id);
        rq->prompt_ids[i] = (int32_t)id;
    }
    rq->n_prompt_ids = (int32_t)n;
    return 0;
}

static int parse_prompt(json_t *root, srv_request *rq, srv_error *e)
{
    json_t *p = field(root, "prompt");
    if (!p)
        return BADVAL("prompt", "'prompt' is required");
    if (json_is_string(p)) {
        rq->prompt = json_string_value(p);
        rq->prompt_len = json_string_length(p);
        if (rq->prompt_len == 0)
            return BADVAL("prompt", "'prompt' is empty");
        return 0;
    }
    if (!json_is_array(p))
        return BAD("prompt",
                   "'prompt' must be a string or an array of token ids, not "
                   "%s",
                   type_name(p));
    json_t *first = json_array_get(p, 0);
    if (first && (json_is_string(first) || json_is_array(first))) {
        /* a batch of prompts: loom answers one prompt per request */
        if (json_array_size(p) != 1)
            return BADVAL("prompt",
                          "'prompt' holds %zu prompts; one per request is "
                          "supported",
                          json_array_size(p));
        if (json_is_string(first)) {
            rq->prompt = json_string_value(first);
            rq->prompt_len = json_string_length(first);
            if (rq->prompt_len == 0)
                return BADVAL("prompt", "'prompt' is empty");
            return 0;
        }
        return parse_ids(first, "prompt", rq, e);
    }
    return parse_ids(p, "prompt", rq, e);
}

static int parse_messages(json_t *root, srv_request *rq, srv_error *e)
{
    json_t *m = field(root, "messages");
    if (!m)
        return BADVAL("messages", "'messages' is required");
    if (!json_is_array(m))
        return BAD("messages", "'messages' must be an array, not %s",
                   type_name(m));
    if (json_array_size(m) == 0)
        return BADVAL("messages", "'messages' is empty");
    size_t i;
    json_t *msg;
    char param[64];
    json_array_foreach(m, i, msg)
    {
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(msg))
            return BAD(param, "'%s' must be an object, not %s", param,
                       type_name(msg));
        json_t *role = json_object_get(msg, "role");
        if (!json_is_string(role)) {
            snprintf(param, sizeof param, "messages[%zu].role", i);
            return BAD(param, "'%s' must be a string", param);
        }
        json_t *content = json_object_get(msg, "content");
        snprintf(param, sizeof param, "messages[%zu].content", i);
        /* OpenAI lets only an assistant message with tool calls go without
         * content */
        if ((!content || json_is_null(content)) &&
            !(strcmp(json_string_value(role), "assistant") == 0 &&
              json_object_get(msg, "tool_calls")))
            return BADVAL(param, "'%s' is required (%s)", param,
                          content ? "null" : "missing");
        if (!content || json_is_null(content) || json_is_string(content))
            continue;
        if (!json_is_array(content))
            return BAD(param,
                       "'%s' must be a string or an array of parts, "
                       "not %s",
                       param, type_name(content));
        size_t j;
        json_t *part;
        json_array_foreach(content, j, part)
        {
            json_t *type = json_object_get(part, "type");
            json_t *text = json_object_get(part, "text");
            if (!json_is_object(part) || !json_is_string(type))
                return BAD(param, "'%s'[%zu] must be an object with a 'type'",
                           param, j);
            if (strcmp(json_string_value(type), "text") != 0)
                return srv_error_set(
                    e, 400, "invalid_request_error", "unsupported_content",
                    param, "'%s'[%zu] has type '%s'; only 'text' is supported",
                    param, j, json_string_value(type));
            if (!json_is_string(text))
                return BAD(param, "'%s'[%zu].text must be a string", param, j);
        }
    }
    rq->messages = m;
    return 0;
}

static int parse_stop(json_t *root, srv_request *rq, srv_error *e)
{
    json_t *s = field(root, "stop");
    if (!s)
        return 0;
    if (json_is_string(s)) {
        if (json_string_length(s) > 0)
            rq->stop[rq->n_stop++] = json_string_value(s);
        return 0;
    }
    if (!json_is_array(s))
        return BAD("stop",
                   "'stop' must be a string or an array of strings, "
                   "not %s",
                   type_name(s));
    if (json_array_size(s) > SRV_MAX_STOP)
        return BADVAL("stop", "'stop' has %zu strings; at most %d",
                      json_array_size(s), SRV_MAX_STOP);
    size_t i;
    json_t *v;
    json_array_foreach(s, i, v)
    {
        if (!json_is_string(v))
            return BAD("stop", "'stop'[%zu] must be a string, not %s", i,
                       type_name(v));
        if (json_string_length(v) > 0)
            rq->stop[rq->n_stop++] = json_string_value(v);
    }
    return 0;
}

static int parse_bias(json_t *root, srv_request *rq, srv_error *e)
{
    json_t *b = field(root, "logit_bias");
    if (!b)
        return 0;
    if (!json_is_object(b))
        return BAD("logit_bias", "'logit_bias' must be an object, not %s",
                   type_name(b));
    size_t n = json_object_size(b);
    if (n == 0)
        return 0;
    rq->bias = calloc(n, sizeof *rq->bias);
    if (!rq->bias)
        return srv_error_set(e, 500, "server_error", NULL, NULL,
                             "out of memory");
    const char *key;
    json_t *v;
    int32_t k = 0;
    json_object_foreach(b, key, v)
    {
        /* decimal digits only: no sign, no white space, at most 10 */
        size_t kl = strspn(key, "0123456789");
        long long id = kl && kl <= 10 ? strtoll(key, NULL, 10) : -1;
        if (!kl || key[kl] || id > INT32_MAX)
            return BADVAL("logit_bias",
                          "'logit_bias' key '%s' is not a "
                          "token id",
                          key);
        if (!json_is_number(v))
            return BAD("logit_bias", "'logit_bias'[\"%s\"] must be a number",
                       key);
        double d = json_number_value(v);
        if (!(d >= -100 && d <= 100))
            return BADVAL("logit_bias",
                          "'logit_bias'[\"%s\"] is %g; it must be in [-100, "
                          "100]",
                          key, d);
        rq->bias[k].token = (int32_t)id;
        /* OpenAI: -100 bans the token outright */
        rq->bias[k].bias = d <= -100 ? -INFINITY : (float)d;
        k++;
    }
    rq->sample.bias = rq->bias;
    rq->sample.n_bias = k;
    return 0;
}

int srv_request_parse(srv_kind kind, const char *body, size_t len,
                      srv_request *rq, srv_error *e)
{
    memset(rq, 0, sizeof *rq);
    rq->kind = kind;
    rq->max_tokens = -1;
    loom_sample_params_default(&rq->sample);
    rq->sample.n_logprobs = -1;

    json_error_t je;
    rq->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!rq->root)
        return srv_error_set(e, 400, "invalid_request_error", "invalid_json",
                             NULL,
                             "malformed JSON at line %d, column %d (byte "
                             "%d): %s",
                             je.line, je.column, je.position, je.text);
    json_t *root = rq->root;
    if (!json_is_object(root))
        return srv_error_set(e, 400, "invalid_request_error", "invalid_json",
                             NULL, "the body must be a JSON object, not %s",
                             type_name(root));

    if (get_string(root, "model", &rq->model, e))
        return -1;
    if (kind == SRV_COMPLETION ? parse_prompt(root, rq, e)
                               : parse_messages(root, rq, e))
        return -1;

    int64_t i64 = -1;
    if (get_int(root, "max_tokens", 1, INT32_MAX, &i64, e))
        return -1;
    if (kind == SRV_CHAT &&
        get_int(root, "max_completion_tokens", 1, INT32_MAX, &i64, e))
        return -1;
    rq->max_tokens = (int32_t)i64;

    i64 = 1;
    if (get_int(root, "n", 1, INT32_MAX, &i64, e))
        return -1;
    if (i64 != 1)
        return BADVAL("n", "'n' is %lld; loom answers n = 1", (long long)i64);
    i64 = 1;
    if (get_int(root, "best_of", 1, INT32_MAX, &i64, e))
        return -1;
    if (i64 != 1)
        return BADVAL("best_of", "'best_of' is %lld; loom answers best_of = 1",
                      (long long)i64);
    int echo = 0;
    if (get_bool(root, "echo", &echo, e))
        return -1;
    if (echo)
        return BADVAL("echo", "'echo' is not supported");

    loom_sample_params *sp = &rq->sample;
    if (get_number(root, "temperature", 0, 2, &sp->temperature, e) ||
        get_number(root, "top_p", 0, 1, &sp->top_p, e) ||
        get_number(root, "min_p", 0, 1, &sp->min_p, e) ||
        get_number(root, "presence_penalty", -2, 2, &sp->presence_penalty, e) ||
        get_number(root, "frequency_penalty", -2, 2, &sp->frequency_penalty,
                   e) ||
        get_number(root, "repetition_penalty", 0.01, 100, &sp->repeat_penalty,
                   e))
        return -1;
    i64 = 0;
    if (get_int(root, "top_k", -1, INT32_MAX, &i64, e))
        return -1;
    sp->top_k = i64 < 0 ? 0 : (int32_t)i64; /* vLLM: -1 means off */
    json_t *seed = field(root, "seed");
    if (seed) {
        if (!json_is_integer(seed))
            return BAD("seed", "'seed' must be an integer, not %s",
                       type_name(seed));
        sp->seed = (uint64_t)json_integer_value(seed);
        sp->has_seed = 1;
    }
    if (parse_bias(root, rq, e) || parse_stop(root, rq, e))
        return -1;

    /* logprobs: an integer count on completions, a boolean on chat */
    if (kind == SRV_COMPLETION) {
        i64 = -1;
        if (get_int(root, "logprobs", 0, LOOM_MAX_TOP_LOGPROBS, &i64, e))
            return -1;
        if (i64 >= 0) {
            rq->logprobs = 1;
            rq->top_logprobs = (int32_t)i64;
        }
    } else {
        if (get_bool(root, "logprobs", &rq->logprobs, e))
            return -1;
        i64 = 0;
        if (get_int(root, "top_logprobs", 0, LOOM_MAX_TOP_LOGPROBS, &i64, e))
            return -1;
        if (i64 > 0 && !rq->logprobs)
            return BADVAL("top_logprobs",
                          "'top_logprobs' needs 'logprobs': true");
        rq->top_logprobs = (int32_t)i64;
    }
    if (rq->logprobs)
        sp->n_logprobs = rq->top_logprobs;
    /* the sampler's own rules (the bounds above are the API's); bias ids
     * meet the vocabulary at loom_lane_add */
    const char *bad_field;
    loom_err serr;
    if (loom_sample_params_check_field(sp, 0, &bad_field, &serr))
        return BADVAL(bad_field, "%s", serr.msg);

    int speculative = 1;
    if (get_bool(root, "stream", &rq->stream, e) ||
        get_bool(root, "ignore_eos", &rq->ignore_eos, e) ||
        get_bool(root, "speculative", &speculative, e))
        return -1;
    rq->no_speculation = !speculative;
    json_t *so = field(root, "stream_options");
    if (so) {
        if (!json_is_object(so))
            return BAD("stream_options",
                       "'stream_options' must be an object, not %s",
                       type_name(so));
        if (get_bool(so, "include_usage", &rq->include_usage, e))
            return -1;
    }
    /* OpenAI's own types for fields loom accepts and ignores */
    const char *ignored_str;
    if (get_string(root, "user", &ignored_str, e))
        return -1;
    return 0;
}

void srv_request_free(srv_request *rq)
{
    free(rq->prompt_ids);
    free(rq->bias);
    json_decref(rq->root);
    memset(rq, 0, sizeof *rq);
}

/* ---------------------------------------------------------------- results */

const char *srv_finish_reason(loom_finish f)
{
    switch (f) {
    case LOOM_FINISH_STOP:
        return "stop";
    case LOOM_FINISH_LENGTH:
    case LOOM_FINISH_CONTEXT:
        return "length";
    case LOOM_FINISH_CANCELLED:
        return "cancelled";
    case LOOM_FINISH_ERROR:
        return "error";
    default:
        return NULL;
    }
}

static json_t *bytes_array(const char *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

static json_t *piece_json(srv_piece_fn piece, void *ctx, int32_t token,
                          const char **s, size_t *n)
{
    *n = 0;
    *s = piece ? piece(ctx, token, n) : NULL;
    if (!*s) {
        *s = "";
        *n = 0;
    }
    return srv_json_text(*s, *n);
}

/* Chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}. */
static json_t *chat_logprobs(const srv_result *r, srv_piece_fn piece, void *ctx)
{
    json_t *content = json_array();
    for (int32_t i = 0; i < r->n_lp; i++) {
        const srv_token_lp *t = &r->lp[i];
        const char *s;
        size_t n;
        json_t *o = json_object();
        json_object_set_new(o, "token",
                            piece_json(piece, ctx, t->token, &s, &n));
        json_object_set_new(o, "logprob", json_real(t->logprob));
        json_object_set_new(o, "bytes", bytes_array(s, n));
        json_t *top = json_array();
        for (int32_t k = 0; k < t->n_top; k++) {
            json_t *x = json_object();
            json_object_set_new(
                x, "token", piece_json(piece, ctx, t->top[k].token, &s, &n));
            json_object_set_new(x, "logprob", json_real(t->top[k].logprob));
            json_object_set_new(x, "bytes", bytes_array(s, n));
            json_array_append_new(top, x);
        }
        json_object_set_new(o, "top_logprobs", top);
        json_array_append_new(content, o);
    }
    json_t *lp = json_object();
    json_object_set_new(lp, "content", content);
    return lp;
}

/* Completions: {tokens, token_logprobs, top_logprobs, text_offset}. */
static json_t *completion_logprobs(const srv_result *r, srv_piece_fn piece,
                                   void *ctx, size_t offset0)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(),
           *offs = json_array();
    size_t off = offset0;
    for (int32_t i = 0; i < r->n_lp; i++) {
        const srv_token_lp *t = &r->lp[i];
        const char *s;
        size_t n;
        json_array_append_new(tokens, piece_json(piece, ctx, t->token, &s, &n));
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += n;
        json_array_append_new(lps, json_real(t->logprob));
        json_t *top = json_object();
        for (int32_t k = 0; k < t->n_top; k++) {
            json_t *key = piece_json(piece, ctx, t->top[k].token, &s, &n);
            json_object_set_new(top, json_string_value(key),
                                json_real(t->top[k].logprob));
            json_decref(key);
        }
        json_array_append_new(tops, top);
    }
    json_t *lp = json_object();
    json_object_set_new(lp, "tokens", tokens);
    json_object_set_new(lp, "token_logprobs", lps);
    json_object_set_new(lp, "top_logprobs", tops);
    json_object_set_new(lp, "text_offset", offs);
    return lp;
}

static json_t *usage_json(const srv_result *r)
{
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(r->prompt_tokens));
    json_object_set_new(u, "completion_tokens",
                        json_integer(r->completion_tokens));
    json_object_set_new(
        u, "total_tokens",
        json_integer((json_int_t)r->prompt_tokens + r->completion_tokens));
    return u;
}

static json_t *envelope(const srv_result *r, const char *object)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer(r->created));
    json_object_set_new(o, "model", srv_json_text(r->model, strlen(r->model)));
    json_object_set_new(o, "system_fingerprint", json_string("loom"));
    return o;
}

char *srv_response_json(const srv_result *r, int logprobs, srv_piece_fn piece,
                        void *piece_ctx)
{
    int chat = r->kind == SRV_CHAT;
    json_t *o = envelope(r, chat ? "chat.completion" : "text_completion");
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(0));
    json_t *text = srv_json_text(r->text ? r->text : "", r->text_len);
    if (chat) {
        json_t *msg = json_object();
        json_object_set_new(msg, "role", json_string("assistant"));
        json_object_set_new(msg, "content", text);
        json_object_set_new(choice, "message", msg);
    } else {
        json_object_set_new(choice, "text", text);
    }
    json_object_set_new(choice, "logprobs",
                        !logprobs ? json_null()
                        : chat    ? chat_logprobs(r, piece, piece_ctx)
                               : completion_logprobs(r, piece, piece_ctx, 0));
    json_object_set_new(choice, "finish_reason",
                        r->finish ? json_string(r->finish) : json_null());
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage_json(r));
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                JSON_REAL_PRECISION(9));
    json_decref(o);
    return s;
}

int srv_chunk_sse(srv_buf *out, const srv_result *r, int logprobs,
                  srv_piece_fn piece, void *piece_ctx, int role_chunk,
                  int usage_chunk)
{
    int chat = r->kind == SRV_CHAT;
    json_t *o = envelope(r, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choices = json_array();
    if (!usage_chunk) {
        json_t *choice = json_object();
        json_object_set_new(choice, "index", json_integer(0));
        if (chat) {
            json_t *delta = json_object();
            if (role_chunk)
                json_object_set_new(delta, "role", json_string("assistant"));
            if (role_chunk || r->text_len > 0 || !r->finish)
                json_object_set_new(
                    delta, "content",
                    srv_json_text(r->text ? r->text : "", r->text_len));
            json_object_set_new(choice, "delta", delta);
        } else {
            json_object_set_new(
                choice, "text",
                srv_json_text(r->text ? r->text : "", r->text_len));
        }
        json_object_set_new(choice, "logprobs",
                            !logprobs || r->n_lp == 0 ? json_null()
                            : chat
                                ? chat_logprobs(r, piece, piece_ctx)
                                : completion_logprobs(r, piece, piece_ctx, 0));
        json_object_set_new(choice, "finish_reason",
                            r->finish ? json_string(r->finish) : json_null());
        json_array_append_new(choices, choice);
    }
    json_object_set_new(o, "choices", choices);
    if (usage_chunk)
        json_object_set_new(o, "usage", usage_json(r));
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!s)
        return -1;
    int rc = srv_buf_add(out, "data: ", 6) || srv_buf_add(out, s, strlen(s)) ||
                     srv_buf_add(out, "\n\n", 2)
                 ? -1
                 : 0;
    free(s);
    return rc;
}

static json_t *model_object(const char *model, int64_t created)
{
    json_t *m = json_object();
    json_object_set_new(m, "id", srv_json_text(model, strlen(model)));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(created));
    json_object_set_new(m, "owned_by", json_string("loom"));
    return m;
}

char *srv_model_json(const char *model, int64_t created)
{
    json_t *m = model_object(model, created);
    char *s = json_dumps(m, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(m);
    return s;
}

char *srv_models_json(const char *model, int64_t created)
{
    json_t *m = model_object(model, created);
    json_t *data = json_array();
    json_array_append_new(data, m);
    json_t *o = json_object();
    json_object_set_new(o, "object", json_string("list"));
    json_object_set_new(o, "data", data);
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                JSON_REAL_PRECISION(9));
    json_decref(o);
    return s;
}
