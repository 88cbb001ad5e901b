/* The drafter dispatcher (see loom/drafter.h). */
#include <stdio.h>
#include <string.h>

#include <loom/cuda.h>
#include <loom/drafter.h>

/* The 2.0 vtable must hold every member up to draft; geometry and absorb
 * are the optional ones. */
#define DRAFTER_MIN_SIZE                                                       \
    (offsetof(loom_drafter_i, draft) + sizeof(((loom_drafter_i *)0)->draft))

static loom_status named(const loom_drafter_ref *d, loom_status rc,
                         loom_err *err)
{
    if (rc == LOOM_OK || !err)
        return rc;
    size_t n = strlen(d->name);
    /* "name: ..." and "name forward: ..." already say who */
    if (strncmp(err->msg, d->name, n) == 0 &&
        (err->msg[n] == ':' || err->msg[n] == ' '))
        return rc;
    /* room for the whole message; the prefixed one is cut to fit */
    char tmp[sizeof err->msg + 64];
    snprintf(tmp, sizeof tmp, "%s: %s", d->name,
             err->msg[0] ? err->msg : "failed without a message");
    memcpy(err->msg, tmp, sizeof err->msg - 1);
    err->msg[sizeof err->msg - 1] = '\0';
    return rc;
}

static void current(const loom_drafter_ref *d)
{
    if (d->cu)
        d->cu->ctxSetCurrent(d->cu->context);
}

loom_status loom_drafter_bind(const loom_plugin *p, loom_drafter_ref *out,
                              loom_err *err)
{
    const loom_drafter_i *vt = p->get_interface(LOOM_DRAFTER_ID);
    if (!vt)
        return loom_err_set(err, LOOM_ERR_ABI, "%s: no %s interface", p->name,
                            LOOM_DRAFTER_ID);
    if (vt->struct_size < DRAFTER_MIN_SIZE)
        return loom_err_set(err, LOOM_ERR_ABI,
                            "%s: %s vtable is %u bytes, ABI %d.0 needs %zu",
                            p->name, LOOM_DRAFTER_ID, (unsigned)vt->struct_size,
                            LOOM_ABI_MAJOR, (size_t)DRAFTER_MIN_SIZE);
    if (!vt->open || !vt->close || !vt->needs || !vt->stream_new ||
        !vt->stream_free || !vt->draft)
        return loom_err_set(err, LOOM_ERR_ABI,
                            "%s: %s vtable lacks a required member", p->name,
                            LOOM_DRAFTER_ID);
    memset(out, 0, sizeof *out);
    out->name = p->name;
    out->vt = vt;
    out->size = vt->struct_size;
    return LOOM_OK;
}

loom_status loom_drafter_geometry(const loom_drafter_ref *d,
                                  const loom_host *host,
                                  const loom_checkpoint *ckpt,
                                  const loom_fields *out, loom_err *err)
{
    if (!d->vt->geometry)
        return LOOM_OK;
    return named(d, d->vt->geometry(host, ckpt, out, err), err);
}

loom_status loom_drafter_open(const loom_drafter_ref *d, const loom_host *host,
                              const loom_checkpoint *ckpt,
                              const loom_target *target, loom_drafter **drafter,
                              loom_err *err)
{
    current(d);
    return named(d, d->vt->open(host, ckpt, target, drafter, err), err);
}

void loom_drafter_close(const loom_drafter_ref *d, loom_drafter *drafter)
{
    if (!drafter)
        return;
    current(d);
    d->vt->close(drafter);
}

void loom_drafter_get_needs(const loom_drafter_ref *d,
                            const loom_drafter *drafter,
                            loom_drafter_needs *req)
{
    memset(req, 0, sizeof *req);
    req->struct_size = sizeof *req;
    d->vt->needs(drafter, req);
    req->struct_size = sizeof *req;
}

loom_status loom_drafter_stream_new(const loom_drafter_ref *d,
                                    loom_drafter *drafter,
                                    loom_draft_stream **s, loom_err *err)
{
    current(d);
    return named(d, d->vt->stream_new(drafter, s, err), err);
}

void loom_drafter_stream_free(const loom_drafter_ref *d, loom_drafter *drafter,
                              loom_draft_stream *s)
{
    if (!s)
        return;
    current(d);
    d->vt->stream_free(drafter, s);
}

loom_status loom_drafter_absorb(const loom_drafter_ref *d,
                                loom_drafter *drafter, loom_draft_stream *s,
                                const loom_view *features,
                                const int32_t *positions, int32_t n,
                                loom_err *err)
{
    if (!d->vt->absorb || n == 0)
        return LOOM_OK;
    current(d);
    return named(d, d->vt->absorb(drafter, s, features, positions, n, err),
                 err);
}

loom_status
loom_drafter_absorb_tokens(const loom_drafter_ref *d, loom_drafter *drafter,
                           loom_draft_stream *s, const int32_t *tokens,
                           const int32_t *positions, int32_t n, loom_err *err)
{
    /* a 2.0 vtable ends before the member: never read past its size */
    if (!LOOM_HAS_FIELD(d->size, loom_drafter_i, absorb_tokens) ||
        !d->vt->absorb_tokens || n == 0)
        return LOOM_OK;
    current(d);
    return named(d, d->vt->absorb_tokens(drafter, s, tokens, positions, n, err),
                 err);
}

loom_status loom_drafter_draft(const loom_drafter_ref *d, loom_drafter *drafter,
                               loom_draft_stream *const *streams,
                               const int32_t *last, int32_t n_streams,
                               const loom_proposals *out, loom_err *err)
{
    current(d);
    return named(d, d->vt->draft(drafter, streams, last, n_streams, out, err),
                 err);
}
