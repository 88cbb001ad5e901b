/* libFuzzer target for the server's request parsers: the first byte picks
 * the request head checker (bit 1) or the body parser for completions or
 * chat (bit 0); the rest is the input. Any bytes give a parsed request or
 * an OpenAI error with a 4xx/5xx status and a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/src/server/server_gate.h"
#include "../../core/src/server/server_openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 2) {
        srv_error e;
        size_t head_len = 0;
        int rc =
            srv_head_check((const char *)data + 1, size - 1, &head_len, &e);
        if (rc == 0 && (head_len == 0 || head_len > size - 1))
            abort();
        if (rc < 0 && (e.status < 400 || e.status > 599 || !e.message[0]))
            abort();
        return 0;
    }
    srv_kind kind = data[0] & 1 ? SRV_CHAT : SRV_COMPLETION;
    srv_request rq;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (srv_request_parse(kind, (const char *)data + 1, size - 1, &rq, &e) !=
        0) {
        if (e.status < 400 || e.status > 599 || !e.message[0])
            abort();
        char *body = srv_error_json(&e);
        free(body);
    }
    srv_request_free(&rq);
    return 0;
}
