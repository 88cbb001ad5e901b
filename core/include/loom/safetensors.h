/* Memory-mapped safetensors checkpoints: one file or shards with an index,
 * header validated before any tensor is used. */
#ifndef LOOM_SAFETENSORS_H
#define LOOM_SAFETENSORS_H

#include <loom/status.h>

typedef struct loom_st loom_st;

/* Opens `dir/model.safetensors` or every shard named by
 * `dir/model.safetensors.index.json`. */
loom_status loom_st_open_dir(const char *dir, loom_st **out, loom_err *err);
/* Opens one .safetensors file. */
loom_status loom_st_open_file(const char *path, loom_st **out, loom_err *err);
void loom_st_close(loom_st *st);
/* Parses a safetensors image already in memory (fuzzing, tests); `data` must
 * outlive the result. `label` names it in messages. */
loom_status loom_st_open_memory(const void *data, uint64_t size,
                                const char *label, loom_st **out,
                                loom_err *err);
/* Pins every mapped shard (loom_map_pin); returns the weakest kind used,
 * LOOM_PIN_NONE with err set if a shard could not be pinned. */
int loom_st_pin(loom_st *st, uint64_t *bytes, loom_err *err);
/* The file a tensor of st came from; NULL if t is not one of st's. */
const char *loom_st_file_of(const loom_st *st, const loom_tensor *t);

size_t loom_st_count(const loom_st *st);
/* Tensors in header order, shards in the order of their file names. */
const loom_tensor *loom_st_at(const loom_st *st, size_t i);
/* NULL when absent. */
const loom_tensor *loom_st_find(const loom_st *st, const char *name);

/* Bytes per element, 0 for an unknown dtype. */
size_t loom_dtype_size(loom_dtype t);
const char *loom_dtype_name(loom_dtype t); /* "BF16" as in the header */
/* LOOM_DTYPE_COUNT when the name is unknown. */
loom_dtype loom_dtype_from_name(const char *name);

#endif
