/* --drafter NAME[:key=value,...]: a drafter plugin named without a
 * checkpoint directory, its options parsed into the config it opens with,
 * and the check that it knows every option given. */
#ifndef LOOM_DRAFTER_ARG_H
#define LOOM_DRAFTER_ARG_H

#include <stddef.h>

#include <jansson.h>

#include <loom/drafter.h>

/* Whether `arg` names a plugin rather than a directory: no path separator
 * and no directory of that name. */
int loom__drafter_arg_is_name(const char *arg);

/* Splits "ngram:n=3,k=8" into the plugin's name and an object of its
 * options ({"n": 3, "k": 8}; integers, reals, true/false, else strings).
 * Refuses an empty name, an option without '=' or a key, a key twice. */
loom_status loom__drafter_arg_parse(const char *arg, char *name, size_t size,
                                    json_t **options, loom_err *err);

/* Refuses, by name, an option the drafter does not know: a checkpoint-less
 * drafter's geometry reports every option it reads, and any other key of
 * `ckpt`'s config is unknown. */
loom_status loom__drafter_arg_check(const loom_drafter_ref *d,
                                    const loom_host *host,
                                    const loom_checkpoint *ckpt, loom_err *err);

#endif
