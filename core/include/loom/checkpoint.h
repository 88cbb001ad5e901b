/* A checkpoint directory: its config files (parsed with Jansson) and, once
 * loaded, its tensors. This is what plugins see as `loom_checkpoint`. */
#ifndef LOOM_CHECKPOINT_H
#define LOOM_CHECKPOINT_H

#include <jansson.h>

#include <loom/model_id.h>
#include <loom/status.h>

/* Opens MODEL (a directory or a model id, model_id.h): config.json (required),
 * generation_config.json and tokenizer_config.json (optional). Tensors are not
 * mapped yet. */
loom_status loom_checkpoint_open(const char *model, loom_checkpoint **out,
                                 loom_err *err);
/* A checkpoint without a directory, named `name` in messages, whose
 * config.json is `config` (taken, even on failure): no generation config,
 * no tensors. What a drafter named without a checkpoint ("ngram:n=3")
 * opens with, its options as the config. */
loom_status loom_checkpoint_from_config(const char *name, json_t *config,
                                        loom_checkpoint **out, loom_err *err);
/* Maps and validates the tensors. Idempotent; nothing for a checkpoint made
 * from a config. */
loom_status loom_checkpoint_load_tensors(loom_checkpoint *ckpt, loom_err *err);
void loom_checkpoint_close(loom_checkpoint *ckpt);

const char *loom_checkpoint_dir(const loom_checkpoint *ckpt);
json_t *loom_checkpoint_config(const loom_checkpoint *ckpt);
json_t *loom_checkpoint_text_config(const loom_checkpoint *ckpt);
json_t *loom_checkpoint_generation_config(const loom_checkpoint *ckpt);
/* Pins the mapped tensors (loom_st_pin): a loom_pin_kind. */
int loom_checkpoint_pin(loom_checkpoint *ckpt, uint64_t *bytes, loom_err *err);
/* NULL until loom_checkpoint_load_tensors succeeded. */
const struct loom_st *loom_checkpoint_tensors(const loom_checkpoint *ckpt);

/* Parses a JSON file; errors name the file, line and column. */
loom_status loom_json_load_file(const char *path, json_t **out, loom_err *err);

#endif
