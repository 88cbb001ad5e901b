/* A well-formed test family plugin: it claims architecture "LoomTestGood". */
#include "tp_common.h"

static int32_t LOOM_ABI probe(const loom_host *h, const loom_checkpoint *c)
{
    return tp_probe_arch(h, c, "LoomTestGood");
}

static const loom_plugin plugin = {
    LOOM_ABI_MAJOR,   LOOM_ABI_MINOR,     sizeof(loom_plugin),    "tp-good",
    "1.2.3",          LOOM_PLUGIN_FAMILY, "discovery test: good", probe,
    tp_get_interface,
};

LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &plugin;
}
