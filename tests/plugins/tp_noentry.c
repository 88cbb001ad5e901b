/* A test plugin that exports no loom_plugin_entry. */
#include <loom/plugin.h>

LOOM_EXPORT int loom_plugin_entry_misspelt(void);
LOOM_EXPORT int loom_plugin_entry_misspelt(void)
{
    return 1;
}
