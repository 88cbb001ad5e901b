/* A minimal family vtable for discovery tests: it never opens a model. */
#ifndef TP_COMMON_H
#define TP_COMMON_H

#include <loom/plugin.h>

static loom_status LOOM_ABI tp_geometry(const loom_host *h,
                                        const loom_checkpoint *c,
                                        const loom_fields *out, loom_err *err)
{
    (void)h;
    (void)c;
    out->str(out->ctx, "kind", "test");
    (void)err;
    return LOOM_OK;
}

static loom_status LOOM_ABI tp_open(const loom_host *h,
                                    const loom_checkpoint *c,
                                    const loom_model_options *o, loom_model **m,
                                    loom_err *err)
{
    (void)h;
    (void)c;
    (void)o;
    (void)m;
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED, "test plugin");
}

/* Never reached (tp_open fails); present because the vtable requires them. */
static void LOOM_ABI tp_close(loom_model *m)
{
    (void)m;
}

static void LOOM_ABI tp_describe(const loom_model *m, loom_model_info *info)
{
    (void)m;
    (void)info;
}

static loom_status LOOM_ABI tp_cache_new(loom_model *m, loom_cache **c,
                                         loom_err *err)
{
    (void)m;
    (void)c;
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED, "test plugin");
}

static void LOOM_ABI tp_cache_free(loom_model *m, loom_cache *c)
{
    (void)m;
    (void)c;
}

static loom_status LOOM_ABI tp_forward(loom_model *m, const loom_round *r,
                                       const loom_output *o, loom_err *err)
{
    (void)m;
    (void)r;
    (void)o;
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED, "test plugin");
}

static const loom_family_i tp_family = {
    sizeof(loom_family_i),
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

/* Claims checkpoints whose architectures name `arch`. */
static int32_t tp_probe_arch(const loom_host *h, const loom_checkpoint *c,
                             const char *arch)
{
    const loom_json *a = h->json_get(h->config(c), "architectures");
    for (size_t i = 0; i < h->json_len(a); i++) {
        const char *s = h->json_str(h->json_at(a, i));
        if (s && strcmp(s, arch) == 0)
            return 10;
    }
    return 0;
}

static const void *LOOM_ABI tp_get_interface(const char *id)
{
    return strcmp(id, LOOM_FAMILY_ID) == 0 ? &tp_family : NULL;
}

#endif
