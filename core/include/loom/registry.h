/* Plugin discovery (search path, ABI checks) and selection by config.json. */
#ifndef LOOM_REGISTRY_H
#define LOOM_REGISTRY_H

#include <loom/host.h>

typedef struct loom_registry loom_registry;

typedef struct loom_plugin_ref {
    const loom_plugin *plugin;
    const char *path; /* the file it came from */
    /* The host table lent to this plugin: pass it to every call into the
     * plugin, so what it logs says which plugin wrote it. */
    const loom_host *host;
} loom_plugin_ref;

typedef struct loom_refusal {
    const char *path;
    const char *reason;
} loom_refusal;

/* Searches, in order: each of extra_dirs, $LOOM_PLUGIN_PATH, the plugins/
 * directory beside the executable, the install directory. The first plugin
 * of a name wins; later ones of the same name are refused as duplicates.
 * HOST is lent to each plugin under the plugin's name, and must outlive the
 * registry. */
loom_status loom_registry_load(const char *const *extra_dirs, int n_extra,
                               loom_host_state *host, loom_registry **out,
                               loom_err *err);
void loom_registry_free(loom_registry *reg);

int loom_registry_count(const loom_registry *reg);
const loom_plugin_ref *loom_registry_at(const loom_registry *reg, int i);
int loom_registry_refused_count(const loom_registry *reg);
const loom_refusal *loom_registry_refused_at(const loom_registry *reg, int i);
/* The directories searched, in order. */
int loom_registry_dir_count(const loom_registry *reg);
const char *loom_registry_dir_at(const loom_registry *reg, int i);

/* Picks the plugin of `kind` for a checkpoint: `force` (a name) when not
 * NULL, else the highest probe score. No match: LOOM_ERR_NOT_FOUND with a
 * message listing the plugins found and the architectures/model_type seen. */
loom_status loom_registry_select(const loom_registry *reg,
                                 const loom_checkpoint *ckpt,
                                 loom_plugin_kind kind, const char *force,
                                 const loom_plugin_ref **out, loom_err *err);
/* The kind of plugin that claims a checkpoint most firmly: the kind of the
 * highest probe score over every plugin, families and drafters alike (on a
 * tie the drafter's, so a drafter's weights are never opened as a model).
 * 0 when no plugin claims it. */
loom_plugin_kind loom_registry_kind_of(const loom_registry *reg,
                                       const loom_checkpoint *ckpt);

#endif
