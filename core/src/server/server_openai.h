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

/* One prompt of /v1/completions: text, or token ids (malloc'd). */
typedef struct srv_prompt_in {
    const char *text;
    size_t len;
    int32_t *ids;
    int32_t n_ids;
} srv_prompt_in;

/* tool_choice */
typedef enum srv_tool_choice {
    SRV_TOOLS_AUTO = 0,
    SRV_TOOLS_NONE,
    SRV_TOOLS_REQUIRED,
    SRV_TOOLS_NAMED
} srv_tool_choice;

/* Sampling fields the request set itself (generation_config.json's
 * defaults fill the others). */
enum {
    SRV_SET_TEMPERATURE = 1,
    SRV_SET_TOP_P = 2,
    SRV_SET_TOP_K = 4,
    SRV_SET_MIN_P = 8,
    SRV_SET_REPETITION = 16
};

/* The most choices one request may ask for (n times the prompts). */
#define SRV_MAX_CHOICES 64

/* A parsed /v1/completions or /v1/chat/completions body. Strings point into
 * `root`, which the request owns. */
typedef struct srv_request {
    srv_kind kind;
    json_t *root;
    const char *model;
    /* completions: one or more prompts, text or token ids (malloc'd) */
    srv_prompt_in *prompts;
    int32_t n_prompts;
    int echo; /* the prompt's text before the completion */
    /* chat: the messages array (validated: role and text content) */
    json_t *messages;
    json_t *tools;           /* the tools array, or NULL */
    int tool_choice;         /* srv_tool_choice */
    const char *tool_name;   /* SRV_TOOLS_NAMED: the function */
    json_t *template_kwargs; /* chat_template_kwargs, or NULL */
    json_t *documents;       /* or NULL */
    int32_t n;               /* choices per prompt */
    loom_sample_params sample;
    unsigned sample_set;   /* SRV_SET_* */
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

/* Defaults a server applies to what a request leaves unset. */
typedef struct srv_defaults {
    loom_sample_params sample; /* from generation_config.json */
    unsigned set;              /* SRV_SET_* fields that sample holds */
    int32_t max_tokens;        /* max_new_tokens; 0: none */
} srv_defaults;

/* Fills the sampling fields RQ did not set from D. */
void srv_request_defaults(srv_request *rq, const srv_defaults *d);

/* Parses and type-checks a body. Malformed JSON is a 400 naming the line,
 * column and byte; a field of the wrong type or out of range is a 400 naming
 * the field. Returns 0, or -1 with e filled. */
int srv_request_parse(srv_kind kind, const char *body, size_t len,
                      srv_request *rq, srv_error *e);
void srv_request_free(srv_request *rq);

/* One token's logprob entry as the response reports it. */
typedef struct srv_token_lp {
    int32_t none; /* no logprob (an echoed prompt's first token): null */
    int32_t token;
    float logprob;
    int32_t n_top;
    loom_token_logprob top[LOOM_MAX_TOP_LOGPROBS];
} srv_token_lp;

/* What a response (or one of its choices) is built from. */
typedef struct srv_result {
    srv_kind kind;
    const char *id; /* "cmpl-..." / "chatcmpl-..." */
    const char *model;
    int64_t created;
    int32_t index; /* the choice's index */
    const char *text;
    size_t text_len;
    /* chat: reasoning_content (NULL: none) and tool_calls (NULL: none; a
     * stream's delta: the calls new in this chunk, from call index
     * first_call) */
    const char *reasoning;
    size_t reasoning_len;
    json_t *tool_calls;
    int32_t first_call;
    const srv_token_lp *lp; /* logprobs, when asked */
    int32_t n_lp;
    /* completions with echo: the prompt's tokens come first in logprobs */
    const char *finish; /* "stop", "length", "tool_calls", or NULL */
    int32_t prompt_tokens, completion_tokens;
    uint64_t seed;
} srv_result;

/* A token's text for logprobs: its decoded bytes (may be partial UTF-8). */
typedef const char *(*srv_piece_fn)(void *ctx, int32_t token, size_t *len);

/* The whole non-streaming response body (malloc'd): one choice per
 * result, usage from the totals given. */
char *srv_response_json(const srv_result *r, int32_t n_results, int logprobs,
                        srv_piece_fn piece, void *piece_ctx,
                        int32_t prompt_tokens, int32_t completion_tokens);
/* One SSE event "data: {...}\n\n" for a streamed chunk. role_chunk: the
 * chat's first chunk carrying the role. usage_chunk: the empty-choices chunk
 * carrying usage. Appends to out; returns 0 or -1 (out of memory). */
int srv_chunk_sse(srv_buf *out, const srv_result *r, int logprobs,
                  srv_piece_fn piece, void *piece_ctx, int role_chunk,
                  int usage_chunk);
/* "finish_reason" for a lane finish: "stop", "length", ... */
const char *srv_finish_reason(loom_finish f);
/* GET /v1/models and GET /v1/models/{id} bodies (malloc'd). */
char *srv_models_json(const char *model, int64_t created, int64_t max_len);
char *srv_model_json(const char *model, int64_t created, int64_t max_len);

#endif
