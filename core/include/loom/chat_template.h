/* Chat formatting: a checkpoint's Jinja `chat_template` (from
 * tokenizer_config.json) rendered by a Jinja-subset interpreter, giving the
 * text of Hugging Face's apply_chat_template(..., tokenize=False). */
#ifndef LOOM_CHAT_TEMPLATE_H
#define LOOM_CHAT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <loom/status.h>

typedef struct loom_chat_template loom_chat_template;

/* Parses template source. Supported: text, {{ }}, {% %}, {# #} with
 * whitespace control ("-" and HF's trim_blocks/lstrip_blocks); statements
 * for (with loop.*, else, break/continue), if/elif/else, set (also
 * ns.attr and tuple targets), macro-free templates; expressions with
 * literals, lists, dicts, attribute/index/slice access, filters, tests
 * (is [not] defined/none/string/...), `in`, comparisons, arithmetic, `~`,
 * and/or/not, inline if; namespace(), range(), raise_exception(); string,
 * list and dict methods. Anything else is refused with LOOM_ERR_UNSUPPORTED
 * or LOOM_ERR_FORMAT and a message naming the template line. */
loom_status loom_chat_template_parse(const char *source,
                                     loom_chat_template **out, loom_err *err);

/* Loads chat_template, bos_token and eos_token from DIR's
 * tokenizer_config.json (DIR may also name the file itself); DIR's
 * chat_template.jinja, when present, is the template (as transformers
 * prefers it). A template given as a list of named templates uses the one
 * named "default". LOOM_ERR_NOT_FOUND when there is no chat template. */
loom_status loom_chat_template_load(const char *dir, loom_chat_template **out,
                                    loom_err *err);
/* The same with the template source read from FILE (NULL: as above);
 * bos_token and eos_token still come from DIR when it has them. */
loom_status loom_chat_template_load_file(const char *dir, const char *file,
                                         loom_chat_template **out,
                                         loom_err *err);
void loom_chat_template_free(loom_chat_template *t);

/* The special token strings loaded with the template ("" when none). */
const char *loom_chat_template_bos(const loom_chat_template *t);
const char *loom_chat_template_eos(const loom_chat_template *t);

/* Renders MESSAGES (a JSON array of objects with "role" and "content", and
 * whatever else the template reads, e.g. tool_calls) with
 * add_generation_prompt, bos_token, eos_token and the members of EXTRA
 * (an object or NULL: "tools", "enable_thinking", ...) as variables.
 * *out is malloc'd and NUL-terminated. A raise_exception() in the template
 * gives LOOM_ERR_INVALID with its message. Integer overflow, results that
 * are not finite, and renders past the engine's bounds (nesting, 10M steps,
 * 64 MiB per string or output, 1 GiB built, 4M items per list) give
 * LOOM_ERR_RANGE naming the cause, so hostile templates or messages cannot
 * crash or hang the caller. [thread-safe]: T is read-only. */
loom_status loom_chat_template_render(const loom_chat_template *t,
                                      json_t *messages,
                                      int add_generation_prompt, json_t *extra,
                                      char **out, loom_err *err);

typedef struct loom_tokenizer loom_tokenizer;

/* The prompt ids of MESSAGES as Hugging Face builds them: the template
 * rendered as loom_chat_template_render does, then the text tokenized as
 * apply_chat_template(tokenize=True) does (special tokens written in it are
 * parsed, none added). *text (when TEXT is not NULL) gets the rendered
 * text, malloc'd; *ids is malloc'd. [thread-safe]. */
loom_status loom_chat_prompt(const loom_chat_template *t,
                             const loom_tokenizer *tok, json_t *messages,
                             int add_generation_prompt, json_t *extra,
                             char **text, int32_t **ids, size_t *n_ids,
                             loom_err *err);

/* Parse and render in one call. */
loom_status loom_chat_render(const char *tmpl, json_t *messages,
                             int add_generation_prompt, json_t *extra,
                             char **out, loom_err *err);

#endif
