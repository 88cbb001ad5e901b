/* Serves the chat page embedded in the executable, with headers that hold
 * it to its own origin: its own script and style only, no inline code, no
 * framing, and fetches to this server alone. */
#include "webui.h"

#include <string.h>

/* No inline script or style, no plugins, no other origin; Trusted Types
 * make any HTML sink (innerHTML and kin) throw, so model text can only ever
 * become text. */
static const char CSP[] = "default-src 'none'; script-src 'self'; "
                          "style-src 'self'; connect-src 'self'; "
                          "img-src 'self' data:; base-uri 'none'; "
                          "form-action 'none'; frame-ancestors 'none'; "
                          "require-trusted-types-for 'script'; "
                          "trusted-types 'none'";

/* The embedded file PATH names, or -1. */
static int find(const char *path)
{
    if (path[0] != '/')
        return -1;
    const char *name = path[1] ? path + 1 : "index.html";
    for (int i = 0; i < loom__webui_count; i++)
        if (strcmp(name, loom__webui_names[i]) == 0)
            return i;
    return -1;
}

int srv_webui_has(const char *path)
{
    return find(path) >= 0;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static const char *content_type(const char *name)
{
    if (ends_with(name, ".html"))
        return "text/html; charset=utf-8";
    if (ends_with(name, ".css"))
        return "text/css; charset=utf-8";
    if (ends_with(name, ".js"))
        return "text/javascript; charset=utf-8";
    return "application/octet-stream";
}

static enum MHD_Result queue(struct MHD_Connection *c, int status,
                             struct MHD_Response *r, int *out_status)
{
    if (!r)
        return MHD_NO;
    *out_status = status;
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

enum MHD_Result srv_webui_reply(struct MHD_Connection *c, const char *path,
                                const char *method, int *status)
{
    int i = find(path);
    if (i < 0)
        return MHD_NO;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        static const char body[] =
            "{\"error\":{\"message\":\"the chat page takes GET or HEAD\","
            "\"type\":\"invalid_request_error\",\"param\":null,"
            "\"code\":\"method_not_allowed\"}}";
        struct MHD_Response *r = MHD_create_response_from_buffer(
            sizeof body - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
        if (r) {
            MHD_add_response_header(r, "Content-Type", "application/json");
            MHD_add_response_header(r, "Allow", "GET, HEAD");
        }
        return queue(c, 405, r, status);
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(
        loom__webui_sizes[i], (void *)loom__webui_data[i],
        MHD_RESPMEM_PERSISTENT);
    if (r) {
        MHD_add_response_header(r, "Content-Type",
                                content_type(loom__webui_names[i]));
        MHD_add_response_header(r, "Content-Security-Policy", CSP);
        MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
        MHD_add_response_header(r, "X-Frame-Options", "DENY");
        /* revalidate, so a rebuilt server's page is the one shown */
        MHD_add_response_header(r, "Cache-Control", "no-cache");
    }
    return queue(c, 200, r, status);
}
