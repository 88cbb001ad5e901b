/* The smallest family plugin: claims configs whose model_type is "hello"
 * and reports their hidden_size; it has no forward. Its open refuses, so the
 * members ABI 2.0 requires beside it are here only to be complete: they
 * refuse or do nothing. The optional ones (cache_reset, commit,
 * get_extension) are left NULL and get the core's defaults. */
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
    if (out)
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

/* open never makes a model, so nothing below is ever given one */
static void LOOM_ABI hello_close(loom_model *m)
{
    (void)m;
}

static void LOOM_ABI hello_describe(const loom_model *m, loom_model_info *info)
{
    (void)m;
    (void)info;
}

static loom_status LOOM_ABI hello_cache_new(loom_model *m, loom_cache **c,
                                            loom_err *err)
{
    (void)m;
    (void)c;
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "hello: the hello family has no caches");
}

static void LOOM_ABI hello_cache_free(loom_model *m, loom_cache *c)
{
    (void)m;
    (void)c;
}

static loom_status LOOM_ABI hello_forward(loom_model *m,
                                          const loom_round *round,
                                          const loom_output *out, loom_err *err)
{
    (void)m;
    (void)round;
    (void)out;
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "hello: the hello family has no forward");
}

static const loom_family_i hello_family = {
    /* .struct_size   = */ sizeof(loom_family_i),
    /* .geometry      = */ hello_geometry,
    /* .open          = */ hello_open,
    /* .close         = */ hello_close,
    /* .describe      = */ hello_describe,
    /* .cache_new     = */ hello_cache_new,
    /* .cache_reset   = */ NULL,
    /* .cache_free    = */ hello_cache_free,
    /* .forward       = */ hello_forward,
    /* .commit        = */ NULL,
    /* .get_extension = */ NULL,
    /* .cache_copy    = */ NULL,
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
