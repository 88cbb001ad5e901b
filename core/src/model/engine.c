/* Opens a model end to end: plugins, checkpoint, family selection, weights. */
#include <loom/engine.h>

#include <stdlib.h>
#include <string.h>

loom_status loom_engine_open(const loom_engine_params *params,
                             loom_engine **out, loom_err *err)
{
    loom_engine *e = calloc(1, sizeof *e);
    if (!e)
        return loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
    loom_status rc = loom_pool_new(params->n_threads, &e->pool, err);
    if (rc != LOOM_OK)
        goto fail;
    loom_host_init(&e->hs, e->pool);
    rc = loom_registry_load(params->plugin_dirs, params->n_plugin_dirs, &e->hs,
                            &e->registry, err);
    if (rc != LOOM_OK)
        goto fail;
    rc = loom_checkpoint_open(params->model, &e->ckpt, err);
    if (rc != LOOM_OK)
        goto fail;
    if (loom_registry_kind_of(e->registry, e->ckpt) == LOOM_PLUGIN_DRAFTER) {
        rc = loom_err_set(err, LOOM_ERR_INVALID,
                          "%s is a drafter checkpoint, not a model (pass it "
                          "with --drafter)",
                          loom_checkpoint_dir(e->ckpt));
        goto fail;
    }
    rc = loom_registry_select(e->registry, e->ckpt, LOOM_PLUGIN_FAMILY,
                              params->family, &e->plugin, err);
    if (rc != LOOM_OK)
        goto fail;
    rc = loom_family_bind(e->plugin->plugin, &e->family, err);
    if (rc != LOOM_OK)
        goto fail;
    e->family.cu = e->cuda;
    rc = loom_checkpoint_load_tensors(e->ckpt, err);
    if (rc != LOOM_OK)
        goto fail;
    loom_model_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    opt.device = params->device;
    opt.max_context = params->max_context;
    opt.max_rows = params->max_rows > 0 ? params->max_rows : 512;
    rc = loom_family_open(&e->family, e->plugin->host, e->ckpt, &opt, &e->model,
                          err);
    if (rc != LOOM_OK)
        goto fail;
    loom_family_describe(&e->family, e->model, &e->info);
    *out = e;
    return LOOM_OK;
fail:
    loom_engine_close(e);
    return rc;
}

void loom_engine_close(loom_engine *e)
{
    if (!e)
        return;
    if (e->model)
        loom_family_close(&e->family, e->model);
    loom_checkpoint_close(e->ckpt);
    loom_registry_free(e->registry);
    loom_pool_free(e->pool);
    free(e);
}
