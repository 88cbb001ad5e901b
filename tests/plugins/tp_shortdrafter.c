/* A test plugin whose drafter vtable ends before `draft`, a member ABI 2.0
 * requires: the registry refuses it, naming the plugin and both sizes. */
#include <string.h>

#include <loom/plugin.h>

static const loom_drafter_i short_drafter = {
    offsetof(loom_drafter_i, draft),
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

static int32_t LOOM_ABI probe(const loom_host *h, const loom_checkpoint *c)
{
    (void)h;
    (void)c;
    return 0;
}

static const void *LOOM_ABI get_interface(const char *id)
{
    return strcmp(id, LOOM_DRAFTER_ID) == 0 ? &short_drafter : NULL;
}

static const loom_plugin plugin = {
    LOOM_ABI_MAJOR,
    LOOM_ABI_MINOR,
    sizeof(loom_plugin),
    "tp-shortdrafter",
    "1.0",
    LOOM_PLUGIN_DRAFTER,
    "discovery test: a drafter vtable without draft",
    probe,
    get_interface,
};

LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &plugin;
}
