/* The smallest family plugin: claims configs whose model_type is "hello"
 * and reports their hidden_size; it has no forward. */
#include <loom/plugin.h>

static int32_t LOOM_ABI hello_probe(const loom_host *h,
                                    const loom_checkpoint *c)
{
    const char *t = h->json_str(h->json_get(h->text_config(c), "model_type"));
    return t && strcmp(t, "hello") == 0 ? 10 : 0;
}

static loom_status LOOM_ABI hello_geometry(const loom_host *h,
                                           const loom_checkpoint *c,
                                           const loom_fields *out,
                                           loom_err *err)
{
    const loom_json *v = h->json_get(h->text_config(c), "hidden_size");
    if (h->json_type(v) != LOOM_JSON_INT || h->json_int(v) <= 0)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s/config.json: hidden_size must be a positive "
                            "integer",
                            h->checkpoint_path(c));
    out->i64(out->ctx, "hidden_size", h->json_int(v));
    return LOOM_OK;
}

static loom_status LOOM_ABI hello_open(const loom_host *h,
                                       const loom_checkpoint *c,
                                       const loom_model_options *o,
                                       loom_model **m, loom_err *err)
{
    (void)o;
    (void)m;
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "%s: the hello family has no forward",
                        h->checkpoint_path(c));
}

static const loom_family_i hello_family = {
    /* .struct_size = */ sizeof(loom_family_i),
    /* .geometry    = */ hello_geometry,
    /* .open        = */ hello_open,
    /* .close       = */ NULL,
    /* .describe    = */ NULL,
    /* .cache_new   = */ NULL,
    /* .cache_reset = */ NULL,
    /* .cache_free  = */ NULL,
    /* .forward     = */ NULL,
    /* .commit      = */ NULL,
};

static const void *LOOM_ABI hello_get_interface(const char *id)
{
    return strcmp(id, LOOM_FAMILY_ID) == 0 ? &hello_family : NULL;
}

static const loom_plugin hello_plugin = {
    /* .abi_major     = */ LOOM_ABI_MAJOR,
    /* .abi_minor     = */ LOOM_ABI_MINOR,
    /* .struct_size   = */ sizeof(loom_plugin),
    /* .name          = */ "hello",
    /* .version       = */ "0.1.0",
    /* .kind          = */ LOOM_PLUGIN_FAMILY,
    /* .description   = */ "example out-of-tree family",
    /* .probe         = */ hello_probe,
    /* .get_interface = */ hello_get_interface,
};

LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &hello_plugin;
}
