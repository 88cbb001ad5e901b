/* Prompt ids of chat requests (server_prompt.c): the checkpoint's chat
 * template rendered so only its own text may hold special tokens. */
#ifndef LOOM_SERVER_PROMPT_H
#define LOOM_SERVER_PROMPT_H

#include <jansson.h>

#include <loom/checkpoint.h>
#include <loom/tokenizer.h>

#include "server_openai.h"

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
