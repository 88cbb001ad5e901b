/* A drafter for the drafter dispatcher's tests: it proposes last+1, last+2,
 * ... (mod the target's vocab), three at most, as a chain. It leaves
 * geometry and absorb NULL (it asks for no taps) and claims no checkpoint:
 * tests force it by name. It is a 2.0 plugin (abi_minor 0, a 2.0-sized
 * vtable) loaded by a later minor's core. */
#include <stdlib.h>
#include <string.h>

#include <loom/plugin.h>

struct loom_drafter {
    int32_t vocab;
};

struct loom_draft_stream {
    int32_t n_drafts;
};

static loom_status LOOM_ABI td_open(const loom_host *h,
                                    const loom_checkpoint *c,
                                    const loom_target *target,
                                    loom_drafter **out, loom_err *err)
{
    (void)h;
    (void)c;
    if (!target || target->struct_size < sizeof(loom_target) || !target->info ||
        target->info->vocab <= 0)
        return loom_err_set(err, LOOM_ERR_INVALID, "no target to fit");
    loom_drafter *d = (loom_drafter *)malloc(sizeof *d);
    if (!d)
        return loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
    d->vocab = target->info->vocab;
    *out = d;
    return LOOM_OK;
}

static void LOOM_ABI td_close(loom_drafter *d)
{
    free(d);
}

static void LOOM_ABI td_needs(const loom_drafter *d, loom_drafter_needs *req)
{
    req->n_taps = 0;
    req->taps = NULL;
    req->block_size = 4;
    req->mask_token = d->vocab - 1;
}

static loom_status LOOM_ABI td_stream_new(loom_drafter *d,
                                          loom_draft_stream **s, loom_err *err)
{
    (void)d;
    *s = (loom_draft_stream *)calloc(1, sizeof **s);
    return *s ? LOOM_OK : loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
}

static void LOOM_ABI td_stream_free(loom_drafter *d, loom_draft_stream *s)
{
    (void)d;
    free(s);
}

static loom_status LOOM_ABI td_draft(loom_drafter *d,
                                     loom_draft_stream *const *streams,
                                     const int32_t *last, int32_t n_streams,
                                     const loom_proposals *out, loom_err *err)
{
    if (out->struct_size < sizeof(loom_proposals))
        return loom_err_set(err, LOOM_ERR_ABI, "proposals of %u bytes",
                            out->struct_size);
    for (int32_t i = 0; i < n_streams; i++)
        if (last[i] < 0 || last[i] >= d->vocab)
            return loom_err_set(err, LOOM_ERR_RANGE, "stream %d: last token %d",
                                i, last[i]);
    for (int32_t i = 0; i < n_streams; i++) {
        int32_t n = out->max < 3 ? out->max : 3;
        for (int32_t j = 0; j < n; j++) {
            out->tokens[i * out->max + j] = (last[i] + 1 + j) % d->vocab;
            out->parents[i * out->max + j] = -1;
        }
        out->n_out[i] = n;
        streams[i]->n_drafts++;
    }
    return LOOM_OK;
}

/* Past the vtable's struct_size: a core that reads it anyway fails. */
static loom_status LOOM_ABI td_past_the_end(loom_drafter *d,
                                            loom_draft_stream *s,
                                            const int32_t *tokens,
                                            const int32_t *positions, int32_t n,
                                            loom_err *err)
{
    (void)d;
    (void)s;
    (void)tokens;
    (void)positions;
    (void)n;
    return loom_err_set(err, LOOM_ERR_ABI, "read past the 2.0 vtable");
}

/* A 2.0 vtable (it ends before 2.1's absorb_tokens), as a drafter built
 * against the older minor ships it: the core never reads past it. */
static const loom_drafter_i td_drafter = {
    offsetof(loom_drafter_i, absorb_tokens),
    NULL,
    td_open,
    td_close,
    td_needs,
    td_stream_new,
    td_stream_free,
    NULL,
    td_draft,
    td_past_the_end,
};

static int32_t LOOM_ABI td_probe(const loom_host *h, const loom_checkpoint *c)
{
    (void)h;
    (void)c;
    return 0;
}

static const void *LOOM_ABI td_get_interface(const char *id)
{
    return strcmp(id, LOOM_DRAFTER_ID) == 0 ? &td_drafter : NULL;
}

static const loom_plugin td_plugin = {
    LOOM_ABI_MAJOR,
    0,
    sizeof(loom_plugin),
    "tp-toy-drafter",
    "0.1.0",
    LOOM_PLUGIN_DRAFTER,
    "ABI tests: a chain drafter without geometry or absorb",
    td_probe,
    td_get_interface,
};

LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &td_plugin;
}
