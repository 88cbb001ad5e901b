/* libFuzzer target for the chat template engine: the input up to its first
 * NUL byte is a template, the rest (when it is JSON) the messages. Parsing
 * and rendering must end in output or an error, within the engine's limits
 * on depth, steps and size; never a crash, UB or a hang. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <loom/chat_template.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t tl = nul ? (size_t)(nul - data) : size;
    char *tmpl = malloc(tl + 1);
    if (!tmpl)
        return 0;
    memcpy(tmpl, data, tl);
    tmpl[tl] = 0;
    json_t *msgs = NULL;
    if (nul)
        msgs = json_loadb((const char *)nul + 1, size - tl - 1, 0, NULL);
    if (!json_is_array(msgs)) {
        json_decref(msgs);
        msgs = json_pack("[{s:s, s:s}, {s:s, s:s, s:I}]", "role", "system",
                         "content", "Be brief.", "role", "user", "content",
                         "hi", "turn", (json_int_t)INT64_MIN);
    }
    loom_chat_template *t = NULL;
    loom_err err;
    if (loom_chat_template_parse(tmpl, &t, &err) == LOOM_OK) {
        char *out = NULL;
        json_t *extra = json_pack("{s:b}", "enable_thinking", 1);
        if (loom_chat_template_render(t, msgs, 1, extra, &out, &err) == LOOM_OK)
            free(out);
        json_decref(extra);
        loom_chat_template_free(t);
    }
    json_decref(msgs);
    free(tmpl);
    return 0;
}
