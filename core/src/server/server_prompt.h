/* Prompt ids of chat requests (server_prompt.c): the checkpoint's chat
 * template rendered with the request's messages, tools and template
 * arguments, tokenized as transformers does. */
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
/* The prompt ids of a chat request: the template rendered with a
 * generation prompt and tokenized as apply_chat_template(tokenize=True)
 * does. *rendered (may be NULL) gets the text. Returns 0, or -1 with e
 * filled. */
int srv_chat_prompt(const loom_tokenizer *tok, const loom_chat_template *tpl,
                    const srv_request *rq, int32_t **ids, int32_t *n,
                    char **rendered, srv_error *e);

#endif
