/* Opens a model end to end: plugins, checkpoint, family selection, weights,
 * and the drafter that speculates for it when one is asked for. */
#include <loom/engine.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/checkpoint.h>
#include <loom/host.h>
#include <loom/drafter_arg.h>
#include <loom/log.h>
#include <loom/platform.h>
#include <loom/safetensors.h>

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

/* The name of the plugin of `kind` that would take ckpt, for messages. */
static const char *claimed_by(const loom_registry *reg,
                              const loom_checkpoint *ckpt,
                              loom_plugin_kind kind)
{
    const loom_plugin_ref *ref = NULL;
    loom_err ignored;
    if (loom_registry_select(reg, ckpt, kind, NULL, &ref, &ignored) != LOOM_OK)
        return "?";
    return ref->plugin->name;
}

/* Opens params->drafter for the opened model: a drafter checkpoint, a
 * drafter plugin for it, the target it sees (the family's info and its
 * loom.target/1) and the taps it needs set on the model. */
static loom_status open_drafter(loom_engine *e,
                                const loom_engine_params *params, loom_err *err)
{
    /* "ngram:n=3": a plugin named without a checkpoint, which opens with
     * its options as config */
    int named = loom__drafter_arg_is_name(params->drafter);
    const char *force = params->drafter_plugin;
    char plugin_name[128];
    loom_status rc;
    if (named) {
        json_t *options = NULL;
        rc = loom__drafter_arg_parse(params->drafter, plugin_name,
                                     sizeof plugin_name, &options, err);
        if (rc != LOOM_OK)
            return rc;
        rc = loom_checkpoint_from_config(params->drafter, options,
                                         &e->drafter_ckpt, err);
        force = plugin_name;
    } else {
        rc = loom_checkpoint_open(params->drafter, &e->drafter_ckpt, err);
    }
    if (rc != LOOM_OK)
        return rc;
    const char *dir = loom_checkpoint_dir(e->drafter_ckpt);
    if (!named && !params->drafter_plugin &&
        loom_registry_kind_of(e->registry, e->drafter_ckpt) ==
            LOOM_PLUGIN_FAMILY)
        return loom_err_set(
            err, LOOM_ERR_INVALID,
            "%s is a model checkpoint (family %s), not a "
            "drafter",
            dir, claimed_by(e->registry, e->drafter_ckpt, LOOM_PLUGIN_FAMILY));
    rc = loom_registry_select(e->registry, e->drafter_ckpt, LOOM_PLUGIN_DRAFTER,
                              force, &e->drafter_plugin, err);
    if (rc != LOOM_OK) {
        if (named)
            loom_err_prefix(err, "--drafter %s: not a directory", dir);
        return rc;
    }
    rc = loom_drafter_bind(e->drafter_plugin->plugin, &e->drafter_ref, err);
    if (rc != LOOM_OK)
        return rc;
    if (named) {
        rc = loom__drafter_arg_check(&e->drafter_ref, e->drafter_plugin->host,
                                     e->drafter_ckpt, err);
        if (rc != LOOM_OK)
            return rc;
    }
    e->drafter_ref.cu = e->family.cu;
    const char *name = e->drafter_ref.name;
    /* the lane verifies windows: the family must roll a cache back */
    if (!(e->info.caps & LOOM_CAP_WINDOWS))
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "drafter %s: the %s model has no speculative "
                            "windows (LOOM_CAP_WINDOWS)",
                            dir, e->family.name);
    rc = loom_checkpoint_load_tensors(e->drafter_ckpt, err);
    if (rc != LOOM_OK)
        return rc;
    memset(&e->target, 0, sizeof e->target);
    e->target.struct_size = sizeof e->target;
    e->target.info = &e->info;
    e->target.model = e->model;
    e->target.ext = (const loom_target_i *)loom_family_extension(
        &e->family, e->model, LOOM_TARGET_ID);
    rc = loom_drafter_open(&e->drafter_ref, e->drafter_plugin->host,
                           e->drafter_ckpt, &e->target, &e->drafter, err);
    if (rc != LOOM_OK) {
        e->drafter = NULL;
        loom_err_prefix(err, "drafter %s for model %s", dir,
                        loom_checkpoint_dir(e->ckpt));
        return rc;
    }
    loom_drafter_get_needs(&e->drafter_ref, e->drafter, &e->needs);
    if (e->needs.block_size < 2)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "drafter %s (%s): block_size %d, need at least 2",
                            dir, name, e->needs.block_size);
    if (e->needs.n_taps < 0 || (e->needs.n_taps > 0 && !e->needs.taps))
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "drafter %s (%s): %d taps without their ids", dir,
                            name, e->needs.n_taps);
    if (e->needs.n_taps > 0) {
        if (!(e->info.caps & LOOM_CAP_TAPS) || !e->target.ext ||
            !LOOM_HAS_FIELD(e->target.ext->struct_size, loom_target_i,
                            set_taps) ||
            !e->target.ext->set_taps)
            return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                                "drafter %s (%s) taps %d layers; the %s model "
                                "has no %s set_taps",
                                dir, name, e->needs.n_taps, e->family.name,
                                LOOM_TARGET_ID);
        rc = loom_family_set_taps(&e->family, e->model, e->needs.taps,
                                  e->needs.n_taps, err);
        if (rc != LOOM_OK) {
            loom_err_prefix(err, "drafter %s (%s) on model %s", dir, name,
                            loom_checkpoint_dir(e->ckpt));
            return rc;
        }
    }
    return LOOM_OK;
}

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
        rc = loom_err_set(
            err, LOOM_ERR_INVALID,
            "%s is a drafter checkpoint (drafter %s), not a model (pass it "
            "with --drafter)",
            loom_checkpoint_dir(e->ckpt),
            claimed_by(e->registry, e->ckpt, LOOM_PLUGIN_DRAFTER));
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
    if (params->progress)
        read_in(loom_checkpoint_tensors(e->ckpt), params);
    loom_model_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    /* auto with no device left is the CPU; with one, the plugin chooses */
    opt.device = e->cuda || params->device == LOOM_DEVICE_CPU ? params->device
                                                              : LOOM_DEVICE_CPU;
    opt.max_context = params->max_context;
    opt.max_rows = params->max_rows > 0 ? params->max_rows : 512;
    opt.max_streams = params->max_streams > 0 ? params->max_streams : 0;
    opt.no_windows = params->drafter == NULL;
    rc = loom_family_open(&e->family, e->plugin->host, e->ckpt, &opt, &e->model,
                          err);
    if (rc != LOOM_OK)
        goto fail;
    loom_family_describe(&e->family, e->model, &e->info);
    if (params->drafter) {
        rc = open_drafter(e, params, err);
        if (rc != LOOM_OK)
            goto fail;
    }
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
    /* the drafter holds the target's model: it goes first */
    if (e->drafter)
        loom_drafter_close(&e->drafter_ref, e->drafter);
    loom_checkpoint_close(e->drafter_ckpt);
    if (e->model)
        loom_family_close(&e->family, e->model);
    loom_checkpoint_close(e->ckpt);
    loom_registry_free(e->registry);
    /* after every plugin object: the stream, then the context */
    loom_cuda_close(e->cuda);
    loom_pool_free(e->pool);
    free(e);
}
