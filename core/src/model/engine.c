/* Opens a model end to end: plugins, checkpoint, family selection, weights. */
#include <loom/engine.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/log.h>

/* --device: the GPU when asked for or when auto finds one, else the CPU
 * with the reason kept (and logged at info). */
static loom_status device_open(const loom_engine_params *p, loom_engine *e,
                               loom_err *err)
{
    if (p->device == LOOM_DEVICE_CPU) {
        snprintf(e->device_why, sizeof e->device_why, "--device cpu");
        return LOOM_OK;
    }
    loom_err cerr;
    loom_status st = loom_cuda_open(p->gpu_memory, &e->cuda, &cerr);
    if (st == LOOM_OK) {
        e->hs.cuda = loom_cuda_table(e->cuda);
        return LOOM_OK;
    }
    if (p->device == LOOM_DEVICE_CUDA)
        return loom_err_set(err, st, "--device cuda: %s", cerr.msg);
    memcpy(e->device_why, cerr.msg, sizeof e->device_why);
    loom_log(LOOM_LOG_INFO, "device: cpu (%s)", cerr.msg);
    return LOOM_OK;
}

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
    rc = device_open(params, e, err);
    if (rc != LOOM_OK)
        goto fail;
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
    /* the dispatcher makes the context current for every plugin call */
    e->family.cu = e->cuda ? loom_cuda_table(e->cuda) : NULL;
    rc = loom_checkpoint_load_tensors(e->ckpt, err);
    if (rc != LOOM_OK)
        goto fail;
    loom_model_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    /* auto with no device left is the CPU; with one, the plugin chooses */
    opt.device = e->cuda || params->device == LOOM_DEVICE_CPU ? params->device
                                                              : LOOM_DEVICE_CPU;
    opt.max_context = params->max_context;
    opt.max_rows = params->max_rows > 0 ? params->max_rows : 512;
    opt.max_streams = params->max_streams > 0 ? params->max_streams : 0;
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
    /* after every plugin object: the stream, then the context */
    loom_cuda_close(e->cuda);
    loom_pool_free(e->pool);
    free(e);
}
