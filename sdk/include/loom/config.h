/* Reading a checkpoint's config.json through the loom_host JSON accessors,
 * with refusals that name the file, the field and its value, so that every
 * family and drafter plugin reads and refuses fields alike.
 *
 * A field that is absent or JSON null is "missing": an optional field then
 * takes its default, a required one is refused. Messages read
 * "<file>: <prefix><key> ...", e.g. "config.json: text_config.hidden_size
 * = 0 must be positive". */
#ifndef LOOM_CONFIG_H
#define LOOM_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include <loom/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where fields are read from, and how refusals name them. */
typedef struct loom_cfg {
    const loom_host *host;
    const loom_json *obj; /* the object holding the fields */
    const char *file;     /* names the file in messages: "config.json" */
    const char *prefix;   /* before each key in messages: "text_config." */
    int integral_reals;   /* accept 64.0 where an integer is wanted */
    loom_err *err;
} loom_cfg;

/* "missing", "null", "a boolean", "an integer", "a real", ... */
const char *loom_cfg_type_name(loom_json_type t);

/* 1 when `key` is present in c->obj and not null. */
int loom_cfg_has(const loom_cfg *c, const char *key);

/* An integer field in [min, max]. Missing: refused when `required`, else
 * `def`, which is range-checked like a written value. */
loom_status loom_cfg_int(const loom_cfg *c, const char *key, int required,
                         int64_t def, int64_t min, int64_t max, int64_t *out);

/* A number (integer or real) field; missing gives `def`. */
loom_status loom_cfg_real(const loom_cfg *c, const char *key, double def,
                          double *out);

/* A number field that must be > 0; missing gives `def` (not checked). */
loom_status loom_cfg_pos_real(const loom_cfg *c, const char *key, double def,
                              double *out);

/* A boolean field (0 or 1); missing gives `def`. */
loom_status loom_cfg_bool(const loom_cfg *c, const char *key, int def,
                          int *out);

/* The end-of-sequence ids a checkpoint names, in this order and without
 * repeats: the text config's eos_token_id, the root config's, then
 * generation_config.json's (each an integer or a list of them; anything
 * else is passed over). When vocab > 0, ids outside [0, vocab) are left
 * out. At most LOOM_MAX_EOS are kept. The one place these files' eos ids
 * are merged: families report the result, given their vocab, as
 * loom_model_info.eos, and the core's lane stops on exactly those. */
void loom_cfg_eos_ids(const loom_host *host, const loom_checkpoint *ckpt,
                      int64_t vocab, int32_t eos[LOOM_MAX_EOS], int32_t *n_eos);

/* Refuses (LOOM_ERR_FORMAT, naming the file, field and value) an eos id of
 * those three places that is not an integer in [0, vocab), so that a
 * family refuses a config instead of passing ids over. */
loom_status loom_cfg_eos_ids_check(const loom_host *host,
                                   const loom_checkpoint *ckpt, int64_t vocab,
                                   loom_err *err);

/* A family probe's score from config.json alone: 100 when an entry of
 * `architectures` is in archs[0..n_archs), else 50 when the root's or the
 * text config's model_type is in types[0..n_types), else 0. */
int32_t loom_cfg_probe(const loom_host *host, const loom_checkpoint *ckpt,
                       const char *const *archs, size_t n_archs,
                       const char *const *types, size_t n_types);

/* Reports ids[0..n) as one string field "1,7,9" (what fits in 1023
 * characters). */
void loom_cfg_report_ids(const loom_fields *out, const char *key,
                         const int32_t *ids, int32_t n);

#ifdef __cplusplus
}
#endif

#endif
