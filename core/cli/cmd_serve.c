/* `loom serve MODEL`: the OpenAI-compatible HTTP server, in the foreground
 * until SIGINT or SIGTERM (SIGHUP rereads the API key file). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/platform.h>
#include <loom/server.h>

#include "cli_common.h"
#include "commands.h"

/* How long in-flight streams may run on after a stop signal. */
#define SERVE_DRAIN_MS 10000

#define MAX_CORS 16

static const char serve_usage[] =
    "usage: loom serve MODEL [options]\n\n"
    "Serves MODEL over an OpenAI-compatible HTTP API: POST /v1/completions,\n"
    "POST /v1/chat/completions (stream: true for server-sent events), GET "
    "/v1/models,\nPOST /tokenize, POST /detokenize, GET /version, GET "
    "/health, GET /metrics\n(Prometheus text), and a chat page at GET /.\n"
    "Prints a summary and the address once the model is loaded; "
    "SIGINT/SIGTERM\nstop it (in-flight streams get 10 s to finish), SIGHUP "
    "rereads the API key file.\n";

int loom_cmd_serve(int argc, char **argv)
{
    loom_cli_model_opts o;
    loom_cli_model_opts_init(&o, LOOM_CLI_ALL | LOOM_CLI_DRAFTER);
    loom_server_params sp;
    memset(&sp, 0, sizeof sp);
    const char *cors[MAX_CORS];
    int n_cors = 0;
    int64_t port = 8888, parallel = 0, queue = 0, max_body = 0;
    const loom_cli_opt opts[] = {
        {0, "host", "ADDR", LOOM_OPT_STR, &sp.host, 0, 0, NULL, NULL,
         "address to listen on (default 127.0.0.1)"},
        {0, "port", "N", LOOM_OPT_INT, &port, 0, 65535, NULL, NULL,
         "port (default 8888; 0 picks a free one)"},
        {0, "parallel", "N", LOOM_OPT_INT, &parallel, 1, 4096, NULL, NULL,
         "streams decoding at once (default: the lane's)"},
        {0, "queue", "N", LOOM_OPT_INT, &queue, 1, 1000000, NULL, NULL,
         "requests waiting beyond those before 429 (default 64)"},
        {0, "timeout", "S", LOOM_OPT_NUM, &sp.request_timeout_s, 0, 1e9, NULL,
         NULL, "end a request after S seconds (default 0: no limit)"},
        {0, "api-key", "KEY", LOOM_OPT_STR, &sp.api_key, 0, 0, NULL, NULL,
         "require this key on /v1 (default: $LOOM_API_KEY)"},
        {0, "api-key-file", "F", LOOM_OPT_STR, &sp.api_key_file, 0, 0, NULL,
         NULL,
         "require a key of F on /v1 ('Authorization: Bearer KEY'\nor "
         "'x-api-key: KEY'); F holds one key a line, optionally\n'label: "
         "key', and must not be readable by group or others"},
        {0, "cors-origin", "ORIGIN", LOOM_OPT_LIST, cors, 0, MAX_CORS, &n_cors,
         NULL, "allow browser requests from ORIGIN (* for any; repeatable)"},
        {0, "tls-cert", "FILE", LOOM_OPT_STR, &sp.tls_cert, 0, 0, NULL, NULL,
         "serve HTTPS with this PEM certificate (with --tls-key)"},
        {0, "tls-key", "FILE", LOOM_OPT_STR, &sp.tls_key, 0, 0, NULL, NULL,
         "the certificate's PEM private key"},
        {0, "request-log", "F", LOOM_OPT_STR, &sp.request_log, 0, 0, NULL, NULL,
         "append one JSON line per request to F"},
        {0, "max-body", "N", LOOM_OPT_INT, &max_body, 1, 1 << 30, NULL, NULL,
         "request body limit in bytes (default 8388608)"},
        {0, "name", "NAME", LOOM_OPT_STR, &sp.model_name, 0, 0, NULL, NULL,
         "model name in /v1/models (default: the hub id, or the\n"
         "directory's name)"},
        {0, "chat-template", "FILE", LOOM_OPT_STR, &sp.chat_template_file, 0, 0,
         NULL, NULL, "a Jinja chat template instead of the model's"},
        {0, "no-webui", NULL, LOOM_OPT_FLAG, &sp.no_webui, 0, 0, NULL, NULL,
         "no chat page at / (the API stays)"},
        {0, "no-generation-config", NULL, LOOM_OPT_FLAG,
         &sp.no_generation_config, 0, 0, NULL, NULL,
         "do not apply generation_config.json's sampling defaults\nand "
         "max_new_tokens to requests"},
        {0, "no-reasoning-split", NULL, LOOM_OPT_FLAG, &sp.no_reasoning_split,
         0, 0, NULL, NULL,
         "leave <think>...</think> in content (no reasoning_content)"},
        {0},
    };
    const loom_cli_cmd cmd = {"serve", serve_usage, {opts, o.table}, 1, 1};
    const char *model;
    int r = loom_cli_parse(&cmd, argc, argv, &model);
    if (r >= 0)
        return r;
    sp.port = (int)port;
    sp.parallel = (int32_t)parallel;
    sp.max_queued = (int32_t)queue;
    sp.max_body = (size_t)max_body;
    sp.cors_origins = cors;
    sp.n_cors_origins = n_cors;
    if (!sp.api_key)
        sp.api_key = loom_getenv("LOOM_API_KEY");
    if (sp.api_key && !*sp.api_key) {
        fprintf(stderr, "loom serve: the API key is empty\n");
        return 2;
    }
    if (!sp.tls_cert != !sp.tls_key) {
        fprintf(stderr, "loom serve: --tls-cert and --tls-key go together\n");
        return 2;
    }
    sp.max_context = o.ctx;

    loom_err err;
    /* before any thread starts, so that every thread inherits the mask */
    if (loom_signals_block(&err) != LOOM_OK) {
        fprintf(stderr, "loom serve: %s\n", err.msg);
        return 1;
    }
    loom_server *srv = NULL;
    if (loom_server_start(&sp, &srv, &err) != LOOM_OK) {
        fprintf(stderr, "loom serve: %s\n", err.msg);
        return 1;
    }
    loom_engine_params ep;
    loom_cli_engine_params(&o, model, &ep);
    ep.max_streams = sp.parallel;
    /* progress only where a person watches it */
    if (loom_is_terminal(2)) {
        ep.progress = loom_cli_progress;
        ep.progress_user = (void *)"loom serve: loading";
    }
    uint64_t t0 = loom_now_ns();
    if (loom_server_load(srv, &ep, &err) != LOOM_OK) {
        fprintf(stderr, "loom serve: %s\n", err.msg);
        loom_server_free(srv);
        return 1;
    }
    double load_s = (double)(loom_now_ns() - t0) / 1e9;
    loom_server_info si;
    loom_server_describe(srv, &si);
    fprintf(stderr,
            "loom serve: model %s (%s), family %s, device %s\n"
            "loom serve: context %lld tokens, %d streams, %d threads, loaded "
            "in %.2f s\n",
            si.model_name, si.model_dir, si.family, si.device,
            (long long)si.ctx, (int)si.streams, si.threads, load_s);
    const char *host = sp.host ? sp.host : "127.0.0.1";
    int v6 = strchr(host, ':') != NULL;
    printf("loom serve: listening on %s://%s%s%s:%d\n",
           si.tls ? "https" : "http", v6 ? "[" : "", host, v6 ? "]" : "",
           loom_server_port(srv));
    fflush(stdout);

    for (;;) {
        int sig = loom_signals_wait(1000);
        if (sig == LOOM_SIGNAL_STOP)
            break;
        if (sig == LOOM_SIGNAL_RELOAD) {
            if (loom_server_reload_keys(srv, &err) != LOOM_OK)
                fprintf(stderr, "loom serve: keys not reloaded: %s\n", err.msg);
            else
                fprintf(stderr, "loom serve: API keys reloaded\n");
        }
    }
    fprintf(stderr, "loom serve: stopping\n");
    loom_server_stop(srv, SERVE_DRAIN_MS);
    loom_server_free(srv);
    return 0;
}
