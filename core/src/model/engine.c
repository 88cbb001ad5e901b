/* Opens a model end to end: plugins, checkpoint, family selection, weights. */
#include <loom/engine.h>

#include <stdlib.h>
#include <string.h>

#include <loom/safetensors.h>

/* Reads every page of the mapped tensors (what the first forward or a
 * device upload would), reporting progress about every 1/64 of the total. */
static void read_in(const loom_st *st, const loom_engine_params *p)
{
    uint64_t total = 0, done = 0, next = 0;
    size_t n = loom_st_count(st);
    for (size_t i = 0; i < n; i++)
        total += loom_st_at(st, i)->nbytes;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < n; i++) {
        const loom_tensor *t = loom_st_at(st, i);
        const uint8_t *d = t->data;
        for (uint64_t off = 0; d && off < t->nbytes; off += 4096)
            sink ^= d[off];
        done += t->nbytes;
        if (done >= next || done == total) {
            p->progress(p->progress_user, done, total);
            next = done + total / 64;
        }
    }
    (void)sink;
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
    if (params->progress)
        read_in(loom_checkpoint_tensors(e->ckpt), params);
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
