/* The export of a plugin that serves one interface, in one macro: its
 * get_interface, its static loom_plugin descriptor and loom_plugin_entry(),
 * so that each plugin writes only its vtable and its probe. */
#ifndef LOOM_ENTRY_H
#define LOOM_ENTRY_H

#include <string.h>

#include <loom/plugin.h>

/* Use once per plugin, at file scope:
 *   LOOM_PLUGIN_ENTRY(LOOM_PLUGIN_FAMILY, LOOM_FAMILY_ID, my_family, "name",
 *                     "0.1.0", "what it runs", my_probe)
 * `iface` is the static vtable object returned for `iface_id`; every other
 * id (and NULL) gets NULL. */
#define LOOM_PLUGIN_ENTRY(kind, iface_id, iface, name, version, description,   \
                          probe)                                               \
    static const void *LOOM_ABI loom__get_interface(const char *id)            \
    {                                                                          \
        return id && strcmp(id, iface_id) == 0 ? (const void *)&(iface)        \
                                               : NULL;                         \
    }                                                                          \
    static const loom_plugin loom__plugin = {                                  \
        /* .abi_major     = */ LOOM_ABI_MAJOR,                                 \
        /* .abi_minor     = */ LOOM_ABI_MINOR,                                 \
        /* .struct_size   = */ sizeof(loom_plugin),                            \
        /* .name          = */ name,                                           \
        /* .version       = */ version,                                        \
        /* .kind          = */ kind,                                           \
        /* .description   = */ description,                                    \
        /* .probe         = */ probe,                                          \
        /* .get_interface = */ loom__get_interface,                            \
    };                                                                         \
    LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)            \
    {                                                                          \
        return &loom__plugin;                                                  \
    }

#endif
