/* The OpenAI-compatible HTTP server behind `loom serve`: /v1/completions,
 * /v1/chat/completions (JSON or server-sent events), /v1/models, /health and
 * /metrics over one lane, with optional bearer keys and a request log. */
#ifndef LOOM_SERVER_H
#define LOOM_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <loom/engine.h>

typedef struct loom_server loom_server;

typedef struct loom_server_params {
    const char *host;    /* address to bind; NULL: "127.0.0.1" */
    int port;            /* 0: any free port (see loom_server_port) */
    int32_t parallel;    /* streams decoding at once; 0: the lane's default */
    int32_t max_queued;  /* streams waiting beyond those; past it 429. 0: 64 */
    int64_t max_context; /* context streams are held to; 0: the model's */
    size_t max_body;     /* request body limit in bytes; 0: 8 MiB */
    const char *api_key_file; /* NULL: /v1 is open */
    const char *request_log;  /* NULL: no log */
    /* Name reported by /v1/models and in responses; NULL: the model
     * directory's last component. */
    const char *model_name;
    /* Seconds an idle keep-alive connection stays open; 0: 60. */
    int32_t idle_timeout_s;
    /* 1: no chat page at / (see webui.c); the API is unchanged. */
    int no_webui;
    /* Milliseconds a client has for a request's line and headers, and
     * again for its body (plus its length at 16 KiB/s); past it the
     * connection is shut, however slowly it trickles bytes. 0: 30000. */
    int32_t read_timeout_ms;
    /* 1: generation_config.json's sampling defaults and max_new_tokens are
     * not applied to requests that leave them unset. */
    int no_generation_config;
    /* 1: chat replies keep <think>...</think> in content rather than
     * returning it as reasoning_content. */
    int no_reasoning_split;
    /* One more key /v1 accepts (--api-key, $LOOM_API_KEY), beside or
     * instead of the key file; NULL: none. */
    const char *api_key;
    /* Origins allowed by CORS ("*": any); preflight OPTIONS is answered for
     * them. None: no CORS headers, OPTIONS is a 405. */
    const char *const *cors_origins;
    int n_cors_origins;
    /* Seconds a request may take before it ends with a timeout error; 0: no
     * limit. */
    double request_timeout_s;
    /* PEM files: both given, the server speaks HTTPS only. */
    const char *tls_cert, *tls_key;
    /* A Jinja chat template replacing the model's; NULL: the model's. */
    const char *chat_template_file;
} loom_server_params;

/* Binds and starts answering: until loom_server_load succeeds /health is 503
 * and /v1 requests get 503. Refuses an API key file that is missing, empty or
 * readable by group or others, and a request log it cannot open. */
loom_status loom_server_start(const loom_server_params *params,
                              loom_server **out, loom_err *err);
/* The port actually bound (useful with port 0). */
int loom_server_port(const loom_server *srv);

/* Opens the model (engine, tokenizer, chat template), starts its lane and
 * makes the server ready. The server owns what it opened. */
loom_status loom_server_load(loom_server *srv, const loom_engine_params *ep,
                             loom_err *err);

/* What a loaded server runs, for its startup summary; strings owned by the
 * server. */
typedef struct loom_server_info {
    const char *model_dir, *model_name, *family, *device;
    int64_t ctx;
    int32_t streams;
    int threads;
    int tls; /* 1: HTTPS */
} loom_server_info;
void loom_server_describe(const loom_server *srv, loom_server_info *out);

/* Rereads the API key file (SIGHUP). On failure the old keys stay. */
loom_status loom_server_reload_keys(loom_server *srv, loom_err *err);

/* Graceful stop: refuses new connections, lets in-flight streams finish for
 * up to drain_ms, cancels the rest, then stops the lane and the HTTP
 * threads. Idempotent. */
void loom_server_stop(loom_server *srv, uint32_t drain_ms);
/* Stops (without draining) if needed and frees everything. NULL accepted. */
void loom_server_free(loom_server *srv);

#endif
