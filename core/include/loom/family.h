/* The family dispatcher: the only caller of a family plugin's vtable. It
 * checks the vtable's size, applies the defaults of optional members, makes
 * the device context current and prefixes every error with the plugin's
 * name. */
#ifndef LOOM_FAMILY_H
#define LOOM_FAMILY_H

#include <loom/plugin.h>

struct loom_cuda;

typedef struct loom_family {
    const char *name;           /* the plugin's, for messages */
    const loom_family_i *vt;    /* the plugin's vtable */
    uint32_t size;              /* vt->struct_size */
    const struct loom_cuda *cu; /* made current before each call, or NULL */
} loom_family;

/* Binds the "loom.family/2" vtable of plugin `p`: refused when missing or
 * smaller than the 2.0 required members, naming the plugin and the sizes. */
loom_status loom_family_bind(const loom_plugin *p, loom_family *out,
                             loom_err *err);

loom_status loom_family_geometry(const loom_family *f, const loom_host *host,
                                 const loom_checkpoint *ckpt,
                                 const loom_fields *out, loom_err *err);
loom_status loom_family_open(const loom_family *f, const loom_host *host,
                             const loom_checkpoint *ckpt,
                             const loom_model_options *options,
                             loom_model **model, loom_err *err);
void loom_family_close(const loom_family *f, loom_model *model);
/* Zero-fills *info, then lets the plugin fill what it knows. */
void loom_family_describe(const loom_family *f, const loom_model *model,
                          loom_model_info *info);
loom_status loom_family_cache_new(const loom_family *f, loom_model *model,
                                  loom_cache **cache, loom_err *err);
/* Empties *cache for reuse; without cache_reset, frees it and makes a new
 * one (so *cache may change; NULL when making it failed). */
loom_status loom_family_cache_reset(const loom_family *f, loom_model *model,
                                    loom_cache **cache, loom_err *err);
void loom_family_cache_free(const loom_family *f, loom_model *model,
                            loom_cache *cache);
loom_status loom_family_forward(const loom_family *f, loom_model *model,
                                const loom_round *round, const loom_output *out,
                                loom_err *err);
/* LOOM_ERR_UNSUPPORTED when the family has no commit. */
loom_status loom_family_commit(const loom_family *f, loom_model *model,
                               loom_cache *cache, int32_t kept, loom_err *err);
/* Whether the family copies caches (cache_copy, ABI 2.2). */
int loom_family_has_cache_copy(const loom_family *f);
/* dst becomes an exact copy of src; LOOM_ERR_UNSUPPORTED when the family
 * has no cache_copy, LOOM_ERR_STATE when src has an open window. */
loom_status loom_family_cache_copy(const loom_family *f, loom_model *model,
                                   loom_cache *dst, const loom_cache *src,
                                   loom_err *err);
/* NULL when the family has no get_extension or the model lacks `id`. */
const void *loom_family_extension(const loom_family *f, const loom_model *model,
                                  const char *id);

/* The model's loom.target/1 set_taps: LOOM_ERR_UNSUPPORTED when the model
 * has no such extension or its extension lacks set_taps. */
loom_status loom_family_set_taps(const loom_family *f, loom_model *model,
                                 const int32_t *layers, int32_t n,
                                 loom_err *err);

#endif
