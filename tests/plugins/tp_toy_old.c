/* The toy family as an older minor would ship it: its vtable one member
 * shorter (it ends before get_extension). The member is filled in memory
 * but lies outside struct_size, so a dispatcher that read it would find the
 * extension: the tests check that it does not. Forced by name (its probe
 * scores below the toy's). */
#include "tp_toy.h"

static const loom_family_i toy_family = {
    offsetof(loom_family_i, get_extension),
    toy_geometry,
    toy_open,
    toy_close,
    toy_describe,
    toy_cache_new,
    toy_cache_reset,
    toy_cache_free,
    toy_forward,
    toy_commit,
    toy_get_extension,
    toy_cache_copy,
};

static int32_t LOOM_ABI toy_probe(const loom_host *h, const loom_checkpoint *c)
{
    return toy_probe_arch(h, c, "LoomToyForTest", 2);
}

static const void *LOOM_ABI toy_get_interface(const char *id)
{
    return strcmp(id, LOOM_FAMILY_ID) == 0 ? &toy_family : NULL;
}

static const loom_plugin toy_plugin = {
    LOOM_ABI_MAJOR,
    0,
    sizeof(loom_plugin),
    "tp-toy-old",
    "0.1.0",
    LOOM_PLUGIN_FAMILY,
    "ABI tests: the toy with a vtable one member short",
    toy_probe,
    toy_get_interface,
};

LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &toy_plugin;
}
