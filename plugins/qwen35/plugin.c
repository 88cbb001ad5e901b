/* The Qwen3.5 / Qwen3-Next family plugin's one export: its descriptor and
 * the loom.family/2 vtable. */
#include "gpu.h"

#include <loom/entry.h>

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

/* The vtable's stream calls go to the device path for a model opened on
 * cuda, else to the CPU path. */
static loom_status LOOM_ABI q35_forward_any(loom_model *m,
                                            const loom_round *round,
                                            const loom_output *out,
                                            loom_err *err)
{
    return m->gpu ? q35_gpu_forward(m, round, out, err)
                  : q35_forward(m, round, out, err);
}

static loom_status LOOM_ABI q35_commit_any(loom_model *m, loom_cache *c,
                                           int32_t kept, loom_err *err)
{
    return m->gpu ? q35_gpu_commit(m, c, kept, err)
                  : q35_commit(m, c, kept, err);
}

static loom_status LOOM_ABI q35_cache_copy_any(loom_model *m, loom_cache *dst,
                                               const loom_cache *src,
                                               loom_err *err)
{
    return m->gpu ? q35_gpu_cache_copy(m, dst, src, err)
                  : q35_cache_copy(m, dst, src, err);
}

static loom_status LOOM_ABI q35_cache_new_any(loom_model *m, loom_cache **out,
                                              loom_err *err)
{
    return m->gpu ? q35_gpu_cache_new(m, out, err) : q35_cache_new(m, out, err);
}

static void LOOM_ABI q35_cache_reset_any(loom_model *m, loom_cache *c)
{
    if (m->gpu)
        q35_gpu_cache_reset(m, c);
    else
        q35_cache_reset(m, c);
}

static void LOOM_ABI q35_cache_free_any(loom_model *m, loom_cache *c)
{
    if (m->gpu)
        q35_gpu_cache_free(m, c);
    else
        q35_cache_free(m, c);
}

static const loom_family_i q35_family = {
    .struct_size = sizeof(loom_family_i),
    .geometry = q35_geometry_fn,
    .open = q35_open,
    .close = q35_close,
    .describe = q35_describe,
    .cache_new = q35_cache_new_any,
    .cache_reset = q35_cache_reset_any,
    .cache_free = q35_cache_free_any,
    .forward = q35_forward_any,
    .commit = q35_commit_any,
    .get_extension = q35_get_extension,
    .cache_copy = q35_cache_copy_any,
};

LOOM_PLUGIN_ENTRY(LOOM_PLUGIN_FAMILY, LOOM_FAMILY_ID, q35_family, "qwen35",
                  "0.1.0",
                  "Qwen3.5 and Qwen3-Next hybrids (Gated DeltaNet + gated "
                  "attention), CPU and CUDA paths",
                  q35_probe)
