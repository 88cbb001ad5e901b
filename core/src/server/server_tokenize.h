/* POST /tokenize and POST /detokenize (server_tokenize.c): llama-server's
 * shapes, and vLLM's /tokenize with chat messages. */
#ifndef LOOM_SERVER_TOKENIZE_H
#define LOOM_SERVER_TOKENIZE_H

#include <stddef.h>
#include <stdint.h>

#include <loom/chat_template.h>
#include <loom/tokenizer.h>

#include "server_openai.h"

/* What the handlers read; lane gives token pieces (with_pieces). */
typedef struct srv_tok_ctx {
    const loom_tokenizer *tok;
    const loom_chat_template *tpl;
    void *lane;
    int64_t ctx;
} srv_tok_ctx;

/* {"content": TEXT, "with_pieces"?, "parse_special"?} or {"prompt": TEXT}
 * or {"messages": [...]} -> {"tokens": [...], "count": N, "max_model_len":
 * CTX}; with_pieces gives [{"id", "piece"}] (a piece that is not valid
 * UTF-8 is its byte values). Returns the malloc'd JSON, or NULL with e. */
char *srv_tokenize_json(const srv_tok_ctx *c, const char *body, size_t len,
                        srv_error *e);
/* {"tokens": [...]} -> {"content": TEXT, "prompt": TEXT}. */
char *srv_detokenize_json(const srv_tok_ctx *c, const char *body, size_t len,
                          srv_error *e);

#endif
