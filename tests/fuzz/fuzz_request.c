/* libFuzzer target for the server's request body parser: the first byte
 * picks completions or chat, the rest is the body. Any bytes give a parsed
 * request or an OpenAI error with a 4xx/5xx status and a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/src/server/server_openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
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
