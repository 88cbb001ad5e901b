/* `loom plugins`: the plugins found along the search path, and the refused. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include <loom/log.h>

#include "cli_common.h"
#include "commands.h"

static const char plugins_usage[] =
    "usage: loom plugins [options]\n\n"
    "Lists every plugin found (name, kind, version, ABI, path) and every "
    "file\nrefused with its reason. Search order: --plugin-path DIRs, "
    "$LOOM_PLUGIN_PATH,\nthe plugins/ directory beside the executable, then "
    "../lib/loom/plugins beside it\n(an installed prefix).\n";

static const char *kind_name(int32_t k)
{
    return k == LOOM_PLUGIN_FAMILY    ? "family"
           : k == LOOM_PLUGIN_DRAFTER ? "drafter"
                                      : "?";
}

int loom_cmd_plugins(int argc, char **argv)
{
    loom_cli_model_opts o;
    loom_cli_model_opts_init(&o, LOOM_CLI_PLUGIN_PATH);
    int json = 0;
    const loom_cli_opt opts[] = {
        {0, "json", NULL, LOOM_OPT_FLAG, &json, 0, 0, NULL, NULL,
         "one JSON object for machines"},
        {0},
    };
    const loom_cli_cmd cmd = {"plugins", plugins_usage, {opts, o.table}, 0, 0};
    int r = loom_cli_parse(&cmd, argc, argv, NULL);
    if (r >= 0)
        return r;
    loom_host_state hs;
    loom_host_init(&hs, NULL);
    loom_registry *reg = NULL;
    loom_err err;
    /* the table below reports refusals; no need to warn twice */
    loom_log_set_level(LOOM_LOG_ERROR);
    if (loom_registry_load(o.plugin_dirs, o.n_plugin_dirs, &hs, &reg, &err) !=
        LOOM_OK) {
        fprintf(stderr, "loom plugins: %s\n", err.msg);
        return 1;
    }
    if (json) {
        json_t *root = json_object(), *arr = json_array(), *bad = json_array(),
               *dirs = json_array();
        for (int i = 0; i < loom_registry_count(reg); i++) {
            const loom_plugin_ref *r = loom_registry_at(reg, i);
            char abi[32];
            snprintf(abi, sizeof abi, "%u.%u", r->plugin->abi_major,
                     r->plugin->abi_minor);
            json_array_append_new(
                arr, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "name",
                               r->plugin->name, "kind",
                               kind_name(r->plugin->kind), "version",
                               r->plugin->version ? r->plugin->version : "",
                               "abi", abi, "path", r->path, "description",
                               r->plugin->description ? r->plugin->description
                                                      : ""));
        }
        for (int i = 0; i < loom_registry_refused_count(reg); i++) {
            const loom_refusal *f = loom_registry_refused_at(reg, i);
            json_array_append_new(bad, json_pack("{s:s, s:s}", "path", f->path,
                                                 "reason", f->reason));
        }
        for (int i = 0; i < loom_registry_dir_count(reg); i++)
            json_array_append_new(dirs,
                                  json_string(loom_registry_dir_at(reg, i)));
        json_object_set_new(root, "plugins", arr);
        json_object_set_new(root, "refused", bad);
        json_object_set_new(root, "search_path", dirs);
        char line[512];
        void *dev = NULL;
        loom_cli_device(LOOM_DEVICE_AUTO, line, sizeof line, &dev);
        json_object_set_new(root, "device", dev);
        char *s = json_dumps(root, JSON_INDENT(2));
        printf("%s\n", s);
        free(s);
        json_decref(root);
    } else {
        printf("%-12s %-8s %-9s %-5s %s\n", "NAME", "KIND", "VERSION", "ABI",
               "PATH");
        for (int i = 0; i < loom_registry_count(reg); i++) {
            const loom_plugin_ref *r = loom_registry_at(reg, i);
            printf("%-12s %-8s %-9s %u.%-3u %s\n", r->plugin->name,
                   kind_name(r->plugin->kind),
                   r->plugin->version ? r->plugin->version : "",
                   r->plugin->abi_major, r->plugin->abi_minor, r->path);
        }
        if (loom_registry_count(reg) == 0)
            printf("(no plugins found)\n");
        if (loom_registry_refused_count(reg) > 0) {
            printf("\nrefused:\n");
            for (int i = 0; i < loom_registry_refused_count(reg); i++) {
                const loom_refusal *f = loom_registry_refused_at(reg, i);
                printf("  %s: %s\n", f->path, f->reason);
            }
        }
        printf("\nsearched:");
        for (int i = 0; i < loom_registry_dir_count(reg); i++)
            printf(" %s", loom_registry_dir_at(reg, i));
        printf("\n");
        char line[512];
        loom_cli_device(LOOM_DEVICE_AUTO, line, sizeof line, NULL);
        printf("device: %s\n", line);
    }
    loom_registry_free(reg);
    return 0;
}
