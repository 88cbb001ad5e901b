/* Opens a model end to end: plugins, checkpoint, family selection, weights. */
#include <loom/engine.h>

#include <stdlib.h>
#include <string.h>

#include <loom/checkpoint.h>
#include <loom/host.h>
#include <loom/log.h>
#include <loom/platform.h>
#include <loom/safetensors.h>

/* The one pinning policy: a model on the CPU reads every weight each token
 * and the page cache must not evict them (decode fell 7x once), so its
 * mapped checkpoint is pinned when it fits in half the memory; a model on a
 * device has its own copy. A failure only costs speed: it is logged. */
static void pin_weights(loom_engine *e)
{
    if (e->info.device == LOOM_DEVICE_CUDA)
        return;
    const loom_st *st = loom_checkpoint_tensors(e->ckpt);
    uint64_t total = 0, mem = loom_mem_total();
    for (size_t i = 0; st && i < loom_st_count(st); i++)
        total += loom_st_at(st, i)->nbytes;
    /* a family that copied its weights out of the mapping (and accounted
     * the copy) reads the copy: pinning the mapping would hold them twice */
    int64_t copied =
        loom_host_accounted(&e->hs, LOOM_MEM_HOST, LOOM_MEM_WEIGHTS);
    if (copied > 0 && (uint64_t)copied >= total / 2) {
        loom_log(LOOM_LOG_INFO,
                 "weights not pinned: the family holds its own %.2f GB copy",
                 (double)copied / 1e9);
        e->pin = LOOM_ENGINE_PIN_FAMILY_COPY;
        return;
    }
    if (mem == 0 || total > mem / 2) {
        loom_log(LOOM_LOG_INFO, "weights not pinned: %.2f GB of %.2f GB memory",
                 (double)total / 1e9, (double)mem / 1e9);
        return;
    }
    loom_err err;
    err.msg[0] = 0;
    e->pin = loom_checkpoint_pin(e->ckpt, &e->pin_bytes, &err);
    if (e->pin == LOOM_PIN_NONE)
        loom_log(LOOM_LOG_WARN, "weights not pinned: %s", err.msg);
    else
        loom_log(LOOM_LOG_INFO, "weights pinned (%s): %.2f GB",
                 loom_pin_name((loom_pin_kind)e->pin),
                 (double)e->pin_bytes / 1e9);
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
    pin_weights(e);
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
