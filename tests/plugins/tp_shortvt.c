/* A test plugin whose family vtable ends before `forward`, a member ABI 2.0
 * requires: the registry refuses it, naming the plugin and both sizes. */
#include "tp_common.h"

static const loom_family_i short_family = {
    offsetof(loom_family_i, forward),
    tp_geometry,
    tp_open,
    tp_close,
    tp_describe,
    tp_cache_new,
    NULL,
    tp_cache_free,
    tp_forward,
    NULL,
    NULL,
    NULL,
};

static int32_t LOOM_ABI probe(const loom_host *h, const loom_checkpoint *c)
{
    return tp_probe_arch(h, c, "LoomTestGood");
}

static const void *LOOM_ABI get_interface(const char *id)
{
    /* tp_common's own family is not this plugin's */
    (void)tp_get_interface;
    return strcmp(id, LOOM_FAMILY_ID) == 0 ? &short_family : NULL;
}

static const loom_plugin plugin = {
    LOOM_ABI_MAJOR,
    LOOM_ABI_MINOR,
    sizeof(loom_plugin),
    "tp-shortvt",
    "1.0",
    LOOM_PLUGIN_FAMILY,
    "discovery test: a family vtable without forward",
    probe,
    get_interface,
};

LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &plugin;
}
