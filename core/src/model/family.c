/* The family dispatcher (see loom/family.h): vtable sizes, defaults of
 * optional members, the device context, and errors named by plugin. */
#include <stdio.h>
#include <string.h>

#include <loom/cuda.h>
#include <loom/family.h>

/* The 2.0 vtable must hold every required member, up to forward. */
#define FAMILY_MIN_SIZE                                                        \
    (offsetof(loom_family_i, forward) + sizeof(((loom_family_i *)0)->forward))

#define HAS(f, member) LOOM_HAS_FIELD((f)->size, loom_family_i, member)
#define OPT(f, member) (HAS(f, member) ? (f)->vt->member : NULL)

/* Prefixes err's message with the plugin's name unless it starts with it. */
static loom_status named(const loom_family *f, loom_status rc, loom_err *err)
{
    if (rc == LOOM_OK || !err)
        return rc;
    size_t n = strlen(f->name);
    /* "name: ..." and "name forward: ..." already say who */
    if (strncmp(err->msg, f->name, n) == 0 &&
        (err->msg[n] == ':' || err->msg[n] == ' '))
        return rc;
    /* room for the whole message; the prefixed one is cut to fit */
    char tmp[sizeof err->msg + 64];
    snprintf(tmp, sizeof tmp, "%s: %s", f->name,
             err->msg[0] ? err->msg : "failed without a message");
    memcpy(err->msg, tmp, sizeof err->msg - 1);
    err->msg[sizeof err->msg - 1] = '\0';
    return rc;
}

static void current(const loom_family *f)
{
    if (f->cu)
        f->cu->ctxSetCurrent(f->cu->context);
}

loom_status loom_family_bind(const loom_plugin *p, loom_family *out,
                             loom_err *err)
{
    const loom_family_i *vt = p->get_interface(LOOM_FAMILY_ID);
    if (!vt)
        return loom_err_set(err, LOOM_ERR_ABI, "%s: no %s interface", p->name,
                            LOOM_FAMILY_ID);
    if (vt->struct_size < FAMILY_MIN_SIZE)
        return loom_err_set(err, LOOM_ERR_ABI,
                            "%s: %s vtable is %u bytes, ABI %d.0 needs %zu",
                            p->name, LOOM_FAMILY_ID, (unsigned)vt->struct_size,
                            LOOM_ABI_MAJOR, (size_t)FAMILY_MIN_SIZE);
    if (!vt->open || !vt->close || !vt->describe || !vt->cache_new ||
        !vt->cache_free || !vt->forward)
        return loom_err_set(err, LOOM_ERR_ABI,
                            "%s: %s vtable lacks a required member", p->name,
                            LOOM_FAMILY_ID);
    memset(out, 0, sizeof *out);
    out->name = p->name;
    out->vt = vt;
    out->size = vt->struct_size;
    return LOOM_OK;
}

loom_status loom_family_geometry(const loom_family *f, const loom_host *host,
                                 const loom_checkpoint *ckpt,
                                 const loom_fields *out, loom_err *err)
{
    if (!OPT(f, geometry))
        return LOOM_OK;
    return named(f, f->vt->geometry(host, ckpt, out, err), err);
}

loom_status loom_family_open(const loom_family *f, const loom_host *host,
                             const loom_checkpoint *ckpt,
                             const loom_model_options *options,
                             loom_model **model, loom_err *err)
{
    current(f);
    return named(f, f->vt->open(host, ckpt, options, model, err), err);
}

void loom_family_close(const loom_family *f, loom_model *model)
{
    if (!model)
        return;
    current(f);
    f->vt->close(model);
}

void loom_family_describe(const loom_family *f, const loom_model *model,
                          loom_model_info *info)
{
    memset(info, 0, sizeof *info);
    info->struct_size = sizeof *info;
    f->vt->describe(model, info);
    info->struct_size = sizeof *info;
}

loom_status loom_family_cache_new(const loom_family *f, loom_model *model,
                                  loom_cache **cache, loom_err *err)
{
    current(f);
    return named(f, f->vt->cache_new(model, cache, err), err);
}

loom_status loom_family_cache_reset(const loom_family *f, loom_model *model,
                                    loom_cache **cache, loom_err *err)
{
    current(f);
    if (OPT(f, cache_reset)) {
        f->vt->cache_reset(model, *cache);
        return LOOM_OK;
    }
    /* free first, so a cache budget that fits the old one fits the new */
    f->vt->cache_free(model, *cache);
    *cache = NULL;
    return named(f, f->vt->cache_new(model, cache, err), err);
}

void loom_family_cache_free(const loom_family *f, loom_model *model,
                            loom_cache *cache)
{
    if (!cache)
        return;
    current(f);
    f->vt->cache_free(model, cache);
}

loom_status loom_family_forward(const loom_family *f, loom_model *model,
                                const loom_round *round, const loom_output *out,
                                loom_err *err)
{
    current(f);
    return named(f, f->vt->forward(model, round, out, err), err);
}

loom_status loom_family_commit(const loom_family *f, loom_model *model,
                               loom_cache *cache, int32_t kept, loom_err *err)
{
    if (!OPT(f, commit))
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "%s: the family does not support windows", f->name);
    current(f);
    return named(f, f->vt->commit(model, cache, kept, err), err);
}

int loom_family_has_cache_copy(const loom_family *f)
{
    return OPT(f, cache_copy) != NULL;
}

loom_status loom_family_cache_copy(const loom_family *f, loom_model *model,
                                   loom_cache *dst, const loom_cache *src,
                                   loom_err *err)
{
    if (!OPT(f, cache_copy))
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "%s: the family cannot copy a cache (ABI 2.2's "
                            "cache_copy)",
                            f->name);
    if (dst == src)
        return LOOM_OK;
    current(f);
    return named(f, f->vt->cache_copy(model, dst, src, err), err);
}

const void *loom_family_extension(const loom_family *f, const loom_model *model,
                                  const char *id)
{
    if (!OPT(f, get_extension) || !id)
        return NULL;
    return f->vt->get_extension(model, id);
}

loom_status loom_family_set_taps(const loom_family *f, loom_model *model,
                                 const int32_t *layers, int32_t n,
                                 loom_err *err)
{
    const loom_target_i *t =
        (const loom_target_i *)loom_family_extension(f, model, LOOM_TARGET_ID);
    if (!t || !LOOM_HAS_FIELD(t->struct_size, loom_target_i, set_taps) ||
        !t->set_taps)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "%s: the model has no %s set_taps", f->name,
                            LOOM_TARGET_ID);
    current(f);
    return named(f, t->set_taps(model, layers, n, err), err);
}
