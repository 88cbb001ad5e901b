/* A test plugin linked against a library that is not on the loader's path,
 * so dlopen fails before its entry can run. */
#include "tp_common.h"

int tp_dep_value(void);

static int32_t LOOM_ABI probe(const loom_host *h, const loom_checkpoint *c)
{
    return tp_dep_value() + tp_probe_arch(h, c, "LoomTestGood");
}

static const loom_plugin plugin = {
    LOOM_ABI_MAJOR,
    LOOM_ABI_MINOR,
    sizeof(loom_plugin),
    "tp-missinglib",
    "1.0",
    LOOM_PLUGIN_FAMILY,
    "discovery test: missing dependency",
    probe,
    tp_get_interface,
};

LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &plugin;
}
