/* The Qwen3.5 / Qwen3-Next family plugin's one export: its descriptor and
 * the loom.family/2 vtable. */
#include "qwen35.h"

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

static const loom_family_i q35_family = {
    .struct_size = sizeof(loom_family_i),
    .geometry = q35_geometry_fn,
    .open = q35_open,
    .close = q35_close,
    .describe = q35_describe,
    .cache_new = q35_cache_new,
    .cache_reset = q35_cache_reset,
    .cache_free = q35_cache_free,
    .forward = q35_forward,
    .commit = q35_commit,
    .get_extension = q35_get_extension,
};

LOOM_PLUGIN_ENTRY(LOOM_PLUGIN_FAMILY, LOOM_FAMILY_ID, q35_family, "qwen35",
                  "0.1.0",
                  "Qwen3.5 and Qwen3-Next hybrids (Gated DeltaNet + gated "
                  "attention), CPU path",
                  q35_probe)
