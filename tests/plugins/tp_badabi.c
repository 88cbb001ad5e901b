/* A test plugin built for another ABI major version. */
#include "tp_common.h"

static int32_t LOOM_ABI probe(const loom_host *h, const loom_checkpoint *c)
{
    return tp_probe_arch(h, c, "LoomTestGood");
}

static const loom_plugin plugin = {
    LOOM_ABI_MAJOR + 1,
    0,
    sizeof(loom_plugin),
    "tp-badabi",
    "1.0",
    LOOM_PLUGIN_FAMILY,
    "discovery test: future ABI",
    probe,
    tp_get_interface,
};

LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &plugin;
}
