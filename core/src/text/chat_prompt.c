/* Chat prompts as Hugging Face builds them: the chat template rendered with
 * the real messages, and the rendered text tokenized as transformers'
 * apply_chat_template(tokenize=True) does (special tokens written in the
 * text are parsed, none are added). Shared by `loom serve` and
 * `loom run --chat`. */
#include <stdlib.h>
#include <string.h>

#include <loom/chat_template.h>
#include <loom/tokenizer.h>

loom_status loom_chat_prompt(const loom_chat_template *t,
                             const loom_tokenizer *tok, json_t *messages,
                             int add_generation_prompt, json_t *extra,
                             char **text, int32_t **ids, size_t *n_ids,
                             loom_err *err)
{
    char *rendered = NULL;
    *ids = NULL;
    *n_ids = 0;
    if (text)
        *text = NULL;
    loom_status st = loom_chat_template_render(
        t, messages, add_generation_prompt, extra, &rendered, err);
    if (st != LOOM_OK)
        return st;
    st = loom_tokenizer_encode(tok, rendered, strlen(rendered), 1, ids, n_ids,
                               err);
    if (st == LOOM_OK && text)
        *text = rendered;
    else
        free(rendered);
    return st;
}
