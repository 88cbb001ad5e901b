/* The Qwen3.5 / Qwen3-Next family plugin's one export: its descriptor and
 * the loom.family/1 vtable. */
#include "qwen35.h"

static loom_status LOOM_ABI q35_geometry_fn(const loom_host *host,
                                            const loom_checkpoint *ckpt,
                                            const loom_fields *out,
                                            loom_err *err)
{
    q35_geometry g;
    loom_status st = q35_geometry_parse(host, ckpt, &g, err);
    if (st != LOOM_OK)
        return st;
    if (out)
        q35_geometry_report(&g, out);
    return LOOM_OK;
}

static loom_status LOOM_ABI q35_open_fn(const loom_host *host,
                                        const loom_checkpoint *ckpt,
                                        const loom_model_options *options,
                                        loom_model **model, loom_err *err)
{
    return q35_open(host, ckpt, options, model, err);
}

static void LOOM_ABI q35_close_fn(loom_model *model)
{
    q35_close(model);
}

static void LOOM_ABI q35_describe_fn(const loom_model *model,
                                     loom_model_info *info)
{
    q35_describe(model, info);
}

static loom_status LOOM_ABI q35_cache_new_fn(loom_model *model,
                                             loom_cache **cache, loom_err *err)
{
    return q35_cache_new(model, cache, err);
}

static void LOOM_ABI q35_cache_reset_fn(loom_model *model, loom_cache *cache)
{
    q35_cache_reset(model, cache);
}

static void LOOM_ABI q35_cache_free_fn(loom_model *model, loom_cache *cache)
{
    q35_cache_free(model, cache);
}

static loom_status LOOM_ABI q35_forward_fn(loom_model *model,
                                           const loom_round *round,
                                           const loom_output *out,
                                           loom_err *err)
{
    return q35_forward(model, round, out, err);
}

static loom_status LOOM_ABI q35_commit_fn(loom_model *model, loom_cache *cache,
                                          int32_t kept, loom_err *err)
{
    return q35_commit(model, cache, kept, err);
}

static const loom_family_i q35_family = {
    .struct_size = sizeof(loom_family_i),
    .geometry = q35_geometry_fn,
    .open = q35_open_fn,
    .close = q35_close_fn,
    .describe = q35_describe_fn,
    .cache_new = q35_cache_new_fn,
    .cache_reset = q35_cache_reset_fn,
    .cache_free = q35_cache_free_fn,
    .forward = q35_forward_fn,
    .commit = q35_commit_fn,
};

static int32_t LOOM_ABI q35_probe_fn(const loom_host *host,
                                     const loom_checkpoint *ckpt)
{
    return q35_probe(host, ckpt);
}

static const void *LOOM_ABI q35_get_interface(const char *id)
{
    if (id && strcmp(id, LOOM_FAMILY_ID) == 0)
        return &q35_family;
    return NULL;
}

static const loom_plugin q35_plugin = {
    .abi_major = LOOM_ABI_MAJOR,
    .abi_minor = LOOM_ABI_MINOR,
    .struct_size = sizeof(loom_plugin),
    .name = "qwen35",
    .version = "0.1.0",
    .kind = LOOM_PLUGIN_FAMILY,
    .description = "Qwen3.5 and Qwen3-Next hybrids (Gated DeltaNet + gated "
                   "attention), CPU path",
    .probe = q35_probe_fn,
    .get_interface = q35_get_interface,
};

LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &q35_plugin;
}
