/* OpenAI request parsing and response shaping (server_openai.c): parsed
 * bodies, errors in OpenAI's shape, response and SSE chunk JSON. */
#ifndef LOOM_SERVER_OPENAI_H
#define LOOM_SERVER_OPENAI_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <loom/lane.h>
#include <loom/sample.h>

#include "server_http.h"

typedef enum srv_kind { SRV_COMPLETION = 1, SRV_CHAT = 2 } srv_kind;

/* An error as OpenAI shapes it, with the HTTP status it goes out with. */
typedef struct srv_error {
    int status;
    const char *type; /* "invalid_request_error", "server_error", ... */
    const char *code; /* NULL or a short code */
    char param[64];   /* the offending field, or "" */
    char message[512];
} srv_error;

int srv_error_set(srv_error *e, int status, const char *type, const char *code,
                  const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;
/* A JSON string of possibly invalid UTF-8: invalid bytes become U+FFFD. */
json_t *srv_json_text(const char *s, size_t n);
/* {"error": {"message", "type", "param", "code"}} (malloc'd). */
char *srv_error_json(const srv_error *e);

#define SRV_MAX_STOP 4

/* A parsed /v1/completions or /v1/chat/completions body. Strings point into
 * `root`, which the request owns. */
typedef struct srv_request {
    srv_kind kind;
    json_t *root;
    const char *model;
    /* completions: a text prompt, or token ids */
    const char *prompt;
    size_t prompt_len;
    int32_t *prompt_ids; /* malloc'd */
    int32_t n_prompt_ids;
    /* chat: the messages array (validated: role and text content) */
    json_t *messages;
    loom_sample_params sample;
    loom_logit_bias *bias; /* malloc'd, sample.bias points here */
    int32_t max_tokens;    /* -1: not given */
    const char *stop[SRV_MAX_STOP];
    int32_t n_stop;
    int stream;
    int include_usage; /* stream_options.include_usage */
    int logprobs;      /* report logprobs */
    int32_t top_logprobs;
    int ignore_eos;
    int no_speculation; /* "speculative": false */
} srv_request;

/* Parses and type-checks a body. Malformed JSON is a 400 naming the line,
 * column and byte; a field of the wrong type or out of range is a 400 naming
 * the field. Returns 0, or -1 with e filled. */
int srv_request_parse(srv_kind kind, const char *body, size_t len,
                      srv_request *rq, srv_error *e);
void srv_request_free(srv_request *rq);

/* One token's logprob entry as the response reports it. */
typedef struct srv_token_lp {
    int32_t token;
    float logprob;
    int32_t n_top;
    loom_token_logprob top[LOOM_MAX_TOP_LOGPROBS];
} srv_token_lp;

/* What a response is built from. */
typedef struct srv_result {
    srv_kind kind;
    const char *id; /* "cmpl-..." / "chatcmpl-..." */
    const char *model;
    int64_t created;
    const char *text;
    size_t text_len;
    const srv_token_lp *lp; /* logprobs, when asked */
    int32_t n_lp;
    const char *finish; /* "stop", "length", or NULL in a middle chunk */
    int32_t prompt_tokens, completion_tokens;
    uint64_t seed;
} srv_result;

/* A token's text for logprobs: its decoded bytes (may be partial UTF-8). */
typedef const char *(*srv_piece_fn)(void *ctx, int32_t token, size_t *len);

/* The whole non-streaming response body (malloc'd). */
char *srv_response_json(const srv_result *r, int logprobs, srv_piece_fn piece,
                        void *piece_ctx);
/* One SSE event "data: {...}\n\n" for a streamed chunk. role_chunk: the
 * chat's first chunk carrying the role. usage_chunk: the empty-choices chunk
 * carrying usage. Appends to out; returns 0 or -1 (out of memory). */
int srv_chunk_sse(srv_buf *out, const srv_result *r, int logprobs,
                  srv_piece_fn piece, void *piece_ctx, int role_chunk,
                  int usage_chunk);
/* "finish_reason" for a lane finish: "stop", "length", ... */
const char *srv_finish_reason(loom_finish f);
/* GET /v1/models and GET /v1/models/{id} bodies (malloc'd). */
char *srv_models_json(const char *model, int64_t created);
char *srv_model_json(const char *model, int64_t created);

#endif
