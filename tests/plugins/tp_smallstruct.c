/* A test plugin whose descriptor is smaller than ABI 2.0's fields. */
#include "tp_common.h"

static int32_t LOOM_ABI probe(const loom_host *h, const loom_checkpoint *c)
{
    return tp_probe_arch(h, c, "LoomTestGood");
}

static const loom_plugin plugin = {
    LOOM_ABI_MAJOR,
    0,
    16,
    "tp-small",
    "1.0",
    LOOM_PLUGIN_FAMILY,
    "discovery test: truncated descriptor",
    probe,
    tp_get_interface,
};

LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &plugin;
}
