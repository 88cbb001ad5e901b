/* The toy family as a newer minor (LOOM_ABI_MINOR + 1) would ship it: its
 * vtable and its descriptor each carry one more trailing field than this
 * SDK knows, which the core must accept and leave unread. Forced by name
 * (its probe scores below the toy's). */
#include "tp_toy.h"

static void LOOM_ABI toy_later(void)
{
}

/* what a later minor's vtable looks like to this SDK: 2.0's, then more */
static const struct toy_family_next {
    loom_family_i base;
    void(LOOM_ABI *later)(void);
} toy_family = {
    {
        sizeof(struct toy_family_next),
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
    },
    toy_later,
};

static int32_t LOOM_ABI toy_probe(const loom_host *h, const loom_checkpoint *c)
{
    return toy_probe_arch(h, c, "LoomToyForTest", 3);
}

static const void *LOOM_ABI toy_get_interface(const char *id)
{
    return strcmp(id, LOOM_FAMILY_ID) == 0 ? &toy_family.base : NULL;
}

static const struct toy_plugin_next {
    loom_plugin base;
    const char *later;
} toy_plugin = {
    {
        LOOM_ABI_MAJOR,
        LOOM_ABI_MINOR + 1,
        sizeof(struct toy_plugin_next),
        "tp-toy-new",
        "0.1.0",
        LOOM_PLUGIN_FAMILY,
        "ABI tests: the toy with a field more than this SDK knows",
        toy_probe,
        toy_get_interface,
    },
    "a field of a later minor",
};

LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &toy_plugin.base;
}
