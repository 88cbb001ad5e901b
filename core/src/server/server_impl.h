/* Internals shared by the server's files: API keys (server_auth.c), the
 * request log (server_log.c), metrics (server_metrics.c) and OpenAI request
 * parsing and response shaping (server_openai.c). */
#ifndef LOOM_SERVER_IMPL_H
#define LOOM_SERVER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <loom/lane.h>
#include <loom/platform.h>
#include <loom/sample.h>
#include <loom/sha256.h>

/* ---------------------------------------------------------------- buffers */

/* A growable byte string, always NUL-terminated once non-empty. */
typedef struct srv_buf {
    char *data;
    size_t len, cap;
} srv_buf;

int srv_buf_add(srv_buf *b, const void *data, size_t n); /* 0 ok, -1 nomem */
int srv_buf_addf(srv_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void srv_buf_free(srv_buf *b);

/* ---------------------------------------------------------------- keys */

/* The keys of an --api-key-file, as SHA-256 digests with their labels. */
typedef struct srv_keyring srv_keyring;

/* Reads PATH: one key a line, optionally `label: key`; blank lines and lines
 * starting with '#' are skipped. Refuses a file readable by group or others,
 * and one without keys. Only digests are kept; the file's text is wiped. */
loom_status srv_keyring_load(const char *path, srv_keyring **out,
                             loom_err *err);
void srv_keyring_free(srv_keyring *k);
int srv_keyring_count(const srv_keyring *k);
/* Checks a presented key against every digest in constant time (the time
 * depends on the number of keys only). Returns the matching key's label, or
 * NULL. The label is owned by the keyring. */
const char *srv_keyring_check(const srv_keyring *k, const char *key,
                              size_t len);
/* The token of an "Authorization: Bearer <token>" value, or NULL. */
const char *srv_bearer_token(const char *header, size_t *len);

/* ---------------------------------------------------------------- log */

/* One request as the log records it. */
typedef struct srv_log_entry {
    double time; /* wall clock at arrival, seconds since the epoch */
    const char *method;
    const char *route; /* the path as requested */
    int status;
    const char *key; /* the key's label, or NULL */
    int stream;
    int32_t prompt_tokens, completion_tokens;
    const char *finish; /* finish reason, or NULL */
    double duration_s;  /* arrival -> response complete */
    double ttft_s;      /* arrival -> first token; < 0 when none */
    int client_gone;    /* the client left before the end */
    const char *error;  /* the error message sent, or NULL */
} srv_log_entry;

typedef struct srv_log srv_log;
loom_status srv_log_open(const char *path, srv_log **out, loom_err *err);
/* Appends one JSON line with a single write (whole under concurrency). */
loom_status srv_log_write(srv_log *log, const srv_log_entry *e, loom_err *err);
void srv_log_close(srv_log *log);
/* The line srv_log_write appends (malloc'd, ends with '\n'). */
char *srv_log_format(const srv_log_entry *e);

/* ---------------------------------------------------------------- metrics */

typedef struct srv_metrics srv_metrics;

srv_metrics *srv_metrics_new(void);
void srv_metrics_free(srv_metrics *m);
/* A finished request: counted by (route, status). Unknown routes are counted
 * under route="other" so a scanner cannot grow the table. */
void srv_metrics_request(srv_metrics *m, const char *route, int status);
/* A finished generation: its token counts and time to first token (< 0: no
 * token came). */
void srv_metrics_generation(srv_metrics *m, int32_t prompt_tokens,
                            int32_t completion_tokens, double ttft_s);
/* Prometheus text exposition (format 0.0.4) of the counters plus the lane's
 * live numbers (lane may be NULL while loading). Malloc'd. */
char *srv_metrics_render(srv_metrics *m, loom_lane *lane, int ready);

/* ---------------------------------------------------------------- openai */

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

/* ---------------------------------------------------------------- prompts */

typedef struct loom_chat_template loom_chat_template;

/* The checkpoint's chat template (tokenizer_config.json). */
loom_status srv_chat_template_open(const loom_checkpoint *ckpt,
                                   const loom_tokenizer *tok,
                                   loom_chat_template **out, loom_err *err);
void srv_chat_template_free(loom_chat_template *tpl);
/* The prompt ids of chat messages: the template rendered with a generation
 * prompt, where only what the template itself writes may become special
 * tokens; message content is always encoded as plain text. Returns 0, or -1
 * with e filled. */
int srv_chat_prompt(const loom_tokenizer *tok, const loom_chat_template *tpl,
                    json_t *messages, int32_t **ids, int32_t *n, srv_error *e);

#endif
