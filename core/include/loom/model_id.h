/* Model ids: a checkpoint directory, or an `org/name` id found in the local
 * Hugging Face hub cache (model_id.c). */
#ifndef LOOM_MODEL_ID_H
#define LOOM_MODEL_ID_H

#include <stddef.h>

#include <loom/status.h>

/* Resolves MODEL (a directory, or an `org/name[@REV]` id in the local
 * Hugging Face hub cache) to a directory path. REV is a branch or tag under
 * refs/ (default main) or a snapshot hash (whole, or a unique prefix of at
 * least 7 characters). */
loom_status loom_model_resolve(const char *model, char *dir, size_t size,
                               loom_err *err);

#endif
