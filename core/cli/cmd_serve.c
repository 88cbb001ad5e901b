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

static void help(FILE *out)
{
    fprintf(out,
            "usage: loom serve MODEL [--host ADDR] [--port N] [--parallel N] "
            "[--ctx N]\n"
            "                  [--api-key-file F] [--request-log F] "
            "[--drafter D] ...\n\n"
            "Serves MODEL over an OpenAI-compatible HTTP API: POST "
            "/v1/completions,\nPOST /v1/chat/completions (stream: true for "
            "server-sent events),\nGET /v1/models, GET /health, GET /metrics "
            "(Prometheus text),\nand a chat page at GET /.\nPrints the address "
            "once the model is "
            "loaded; SIGINT/SIGTERM stop it (in-flight\nstreams get %d s to "
            "finish), SIGHUP rereads the API key file.\n\n"
            "  --host ADDR         address to listen on (default "
            "127.0.0.1)\n"
            "  --port N            port (default 8888; 0 picks a free one)\n"
            "  --parallel N        streams decoding at once (default: the "
            "lane's)\n"
            "  --queue N           requests waiting beyond those before 429 "
            "(default 64)\n"
            "  --api-key-file F    require 'Authorization: Bearer KEY' on "
            "/v1; F holds one\n"
            "                      key a line, optionally 'label: key', and "
            "must not be\n"
            "                      readable by group or others\n"
            "  --request-log F     append one JSON line per request to F\n"
            "  --max-body N        request body limit in bytes (default "
            "8388608)\n"
            "  --name NAME         model name in /v1/models (default: the "
            "directory's)\n"
            "  --no-webui          no chat page at / (the API stays)\n",
            SERVE_DRAIN_MS / 1000);
    loom_cli_model_opts_help(out);
}

static int parse_long(const char *opt, const char *s, long lo, long hi,
                      long *out)
{
    char *end = NULL;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || v < lo || v > hi) {
        fprintf(stderr,
                "loom serve: %s needs an integer in [%ld, %ld], got "
                "'%s'\n",
                opt, lo, hi, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

int loom_cmd_serve(int argc, char **argv)
{
    loom_cli_model_opts o;
    memset(&o, 0, sizeof o);
    loom_server_params sp;
    memset(&sp, 0, sizeof sp);
    sp.port = 8888;
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help(stdout);
            return 0;
        }
        if (!strcmp(a, "--host") && v) {
            sp.host = v;
        } else if (!strcmp(a, "--port")) {
            if (parse_long(a, v, 0, 65535, &n))
                return 2;
            sp.port = (int)n;
        } else if (!strcmp(a, "--parallel")) {
            if (parse_long(a, v, 1, 4096, &n))
                return 2;
            sp.parallel = (int32_t)n;
        } else if (!strcmp(a, "--queue")) {
            if (parse_long(a, v, 1, 1000000, &n))
                return 2;
            sp.max_queued = (int32_t)n;
        } else if (!strcmp(a, "--max-body")) {
            if (parse_long(a, v, 1, 1L << 30, &n))
                return 2;
            sp.max_body = (size_t)n;
        } else if (!strcmp(a, "--api-key-file") && v) {
            sp.api_key_file = v;
        } else if (!strcmp(a, "--request-log") && v) {
            sp.request_log = v;
        } else if (!strcmp(a, "--name") && v) {
            sp.model_name = v;
        } else if (!strcmp(a, "--no-webui")) {
            sp.no_webui = 1;
            continue; /* a flag, no value */
        } else {
            int r = loom_cli_model_opt(&o, argc, argv, &i);
            if (r < 0)
                return 2;
            if (r == 1)
                continue;
            if (a[0] == '-' || model) {
                fprintf(stderr, "loom serve: unexpected argument '%s'\n", a);
                help(stderr);
                return 2;
            }
            model = a;
            continue;
        }
        i++; /* the option's value */
    }
    if (!model) {
        help(stderr);
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
    fprintf(stderr, "loom serve: loading %s\n", model);
    loom_engine_params ep;
    loom_cli_engine_params(&o, model, &ep);
    if (loom_server_load(srv, &ep, &err) != LOOM_OK) {
        fprintf(stderr, "loom serve: %s\n", err.msg);
        loom_server_free(srv);
        return 1;
    }
    const char *host = sp.host ? sp.host : "127.0.0.1";
    int v6 = strchr(host, ':') != NULL;
    printf("loom serve: listening on http://%s%s%s:%d\n", v6 ? "[" : "", host,
           v6 ? "]" : "", loom_server_port(srv));
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
