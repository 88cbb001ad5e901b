/* The toy family with every optional member NULL (geometry, cache_reset,
 * commit, get_extension, cache_copy): the dispatcher's defaults stand in for
 * them. Forced by name (its probe scores below the toy's). */
#include "tp_toy.h"

static const loom_family_i toy_family = {
    sizeof(loom_family_i), NULL,          toy_open, toy_close,
    toy_describe,          toy_cache_new, NULL,     toy_cache_free,
    toy_forward,           NULL,          NULL,     NULL,
};

static int32_t LOOM_ABI toy_probe(const loom_host *h, const loom_checkpoint *c)
{
    return toy_probe_arch(h, c, "LoomToyForTest", 1);
}

static const void *LOOM_ABI toy_get_interface(const char *id)
{
    return strcmp(id, LOOM_FAMILY_ID) == 0 ? &toy_family : NULL;
}

static const loom_plugin toy_plugin = {
    LOOM_ABI_MAJOR,
    LOOM_ABI_MINOR,
    sizeof(loom_plugin),
    "tp-toy-bare",
    "0.1.0",
    LOOM_PLUGIN_FAMILY,
    "ABI tests: the toy without its optional members",
    toy_probe,
    toy_get_interface,
};

LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &toy_plugin;
}
