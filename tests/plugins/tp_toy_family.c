/* The toy family at ABI 2.2, every optional member filled: what the lane
 * tests run on. It claims architectures ["LoomToyForTest"]. */
#include "tp_toy.h"

static const loom_family_i toy_family = {
    sizeof(loom_family_i), toy_geometry,  toy_open,          toy_close,
    toy_describe,          toy_cache_new, toy_cache_reset,   toy_cache_free,
    toy_forward,           toy_commit,    toy_get_extension, toy_cache_copy,
};

static int32_t LOOM_ABI toy_probe(const loom_host *h, const loom_checkpoint *c)
{
    return toy_probe_arch(h, c, "LoomToyForTest", 10);
}

static const void *LOOM_ABI toy_get_interface(const char *id)
{
    return strcmp(id, LOOM_FAMILY_ID) == 0 ? &toy_family : NULL;
}

static const loom_plugin toy_plugin = {
    LOOM_ABI_MAJOR,
    LOOM_ABI_MINOR,
    sizeof(loom_plugin),
    "tp-toy",
    "0.1.0",
    LOOM_PLUGIN_FAMILY,
    "lane tests: a closed-form family with no weights",
    toy_probe,
    toy_get_interface,
};

LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &toy_plugin;
}
