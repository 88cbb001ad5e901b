/* `loom inspect MODEL`: the plugin chosen for a checkpoint and the geometry
 * it parsed from config.json (and, with --tensors, every tensor). */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include <loom/drafter.h>
#include <loom/safetensors.h>

#include "cli_common.h"
#include "commands.h"

static const char inspect_usage[] =
    "usage: loom inspect MODEL [options]\n\n"
    "MODEL is a checkpoint directory or an org/name[@REV] id in the local "
    "Hugging Face\nhub cache. Prints the plugin that claims it and the "
    "geometry that plugin parsed.\n";

static void LOOM_ABI f_i64(void *ctx, const char *k, int64_t v)
{
    json_object_set_new(ctx, k, json_integer(v));
}

static void LOOM_ABI f_f64(void *ctx, const char *k, double v)
{
    json_object_set_new(ctx, k, json_real(v));
}

static void LOOM_ABI f_str(void *ctx, const char *k, const char *v)
{
    json_object_set_new(ctx, k, json_string(v ? v : ""));
}

int loom_cmd_inspect(int argc, char **argv)
{
    loom_cli_model_opts o;
    loom_cli_model_opts_init(&o, LOOM_CLI_PLUGIN_PATH | LOOM_CLI_FAMILY |
                                     LOOM_CLI_DEVICE);
    int json = 0, tensors = 0;
    const loom_cli_opt opts[] = {
        {0, "json", NULL, LOOM_OPT_FLAG, &json, 0, 0, NULL, NULL,
         "one JSON object for machines"},
        {0, "tensors", NULL, LOOM_OPT_FLAG, &tensors, 0, 0, NULL, NULL,
         "also list every tensor (dtype, shape, bytes) and the total"},
        {0},
    };
    const loom_cli_cmd cmd = {"inspect", inspect_usage, {opts, o.table}, 1, 1};
    const char *model;
    int r = loom_cli_parse(&cmd, argc, argv, &model);
    if (r >= 0)
        return r;

    loom_host_state hs;
    loom_host_init(&hs, NULL);
    loom_registry *reg = NULL;
    loom_checkpoint *ckpt = NULL;
    json_t *geo = json_object();
    loom_err err;
    int rc = 1;
    if (loom_registry_load(o.plugin_dirs, o.n_plugin_dirs, &hs, &reg, &err) !=
            LOOM_OK ||
        loom_checkpoint_open(model, &ckpt, &err) != LOOM_OK)
        goto fail;
    int drafter = loom_registry_kind_of(reg, ckpt) == LOOM_PLUGIN_DRAFTER;
    const loom_plugin_ref *ref = NULL;
    if (loom_registry_select(reg, ckpt,
                             drafter ? LOOM_PLUGIN_DRAFTER : LOOM_PLUGIN_FAMILY,
                             o.family, &ref, &err) != LOOM_OK)
        goto fail;
    loom_fields fields = {sizeof fields, geo, f_i64, f_f64, f_str};
    /* the registry bound the interface when it loaded the plugin, so this
     * bind only repeats checks that passed; the dispatcher names the plugin */
    loom_status st;
    if (drafter) {
        loom_drafter_ref d;
        st = loom_drafter_bind(ref->plugin, &d, &err);
        if (st == LOOM_OK)
            st = loom_drafter_geometry(&d, ref->host, ckpt, &fields, &err);
    } else {
        loom_family f;
        st = loom_family_bind(ref->plugin, &f, &err);
        if (st == LOOM_OK)
            st = loom_family_geometry(&f, ref->host, ckpt, &fields, &err);
    }
    if (st != LOOM_OK)
        goto fail;
    int32_t score = ref->plugin->probe(ref->host, ckpt);
    json_t *tensor_list = NULL;
    if (json && tensors) {
        if (loom_checkpoint_load_tensors(ckpt, &err) != LOOM_OK)
            goto fail;
        tensor_list = loom_cli_tensors_json(loom_checkpoint_tensors(ckpt),
                                            loom_checkpoint_dir(ckpt));
        if (!tensor_list) {
            loom_err_set(&err, LOOM_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    char device_line[512];
    if (!json)
        loom_cli_device(o.device, device_line, sizeof device_line, NULL);
    if (json) {
        json_t *root =
            json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:O}", "checkpoint",
                      loom_checkpoint_dir(ckpt), "plugin", ref->plugin->name,
                      "kind", drafter ? "drafter" : "family", "version",
                      ref->plugin->version ? ref->plugin->version : "", "path",
                      ref->path, "score", (int)score, "geometry", geo);
        if (tensor_list)
            json_object_set_new(root, "tensors", tensor_list);
        void *dev = NULL;
        char line[512];
        loom_cli_device(o.device, line, sizeof line, &dev);
        json_object_set_new(root, "device", dev);
        char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("%s\n", s);
        free(s);
        json_decref(root);
    } else {
        printf("checkpoint  %s\nplugin      %s %s (%s, score %d)\npath        "
               "%s\ndevice      %s\ngeometry:\n",
               loom_checkpoint_dir(ckpt), ref->plugin->name,
               ref->plugin->version ? ref->plugin->version : "",
               drafter ? "drafter" : "family", (int)score, ref->path,
               device_line);
        const char *k;
        json_t *v;
        json_object_foreach(geo, k, v)
        {
            char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(10));
            printf("  %-28s %s\n", k, s ? s : "?");
            free(s);
        }
    }
    rc = 0;
    if (tensors && !json) {
        fflush(stdout);
        rc = loom_cli_print_tensors(model, json);
    }
    goto done;
fail:
    fprintf(stderr, "loom inspect: %s\n", err.msg);
done:
    json_decref(geo);
    loom_checkpoint_close(ckpt);
    loom_registry_free(reg);
    return rc;
}
