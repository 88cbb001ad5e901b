/* The DFlash block-diffusion drafter plugin: entry, probe, and the
 * loom.drafter/2 interface. The forward is not built yet: `open` refuses
 * with a message, while the probe and geometry parse are real; the members
 * that need an opened drafter are there (the ABI requires them) and refuse,
 * since no drafter can be made. */
#include "dflash.h"

#include <loom/config.h>
#include <loom/entry.h>

static loom_status LOOM_ABI d_geometry(const loom_host *h,
                                       const loom_checkpoint *ckpt,
                                       const loom_fields *out, loom_err *err)
{
    dflash_geometry g;
    loom_status rc = dflash_parse_geometry(h, ckpt, &g, err);
    if (rc != LOOM_OK)
        return rc;
    out->i64(out->ctx, "hidden_size", g.hidden);
    out->i64(out->ctx, "target_hidden_size", g.target_hidden);
    out->i64(out->ctx, "intermediate_size", g.ffn);
    out->i64(out->ctx, "num_hidden_layers", g.n_layers);
    out->i64(out->ctx, "num_attention_heads", g.n_heads);
    out->i64(out->ctx, "num_key_value_heads", g.n_kv_heads);
    out->i64(out->ctx, "head_dim", g.head_dim);
    out->i64(out->ctx, "vocab_size", g.vocab);
    out->i64(out->ctx, "block_size", g.block_size);
    out->i64(out->ctx, "mask_token_id", g.mask_token);
    loom_cfg_report_ids(out, "target_layer_ids", g.taps, g.n_taps);
    out->f64(out->ctx, "rms_norm_eps", g.rms_eps);
    out->f64(out->ctx, "rope_theta", g.rope_theta);
    return LOOM_OK;
}

static loom_status LOOM_ABI d_open(const loom_host *h,
                                   const loom_checkpoint *ckpt,
                                   const loom_target *target,
                                   loom_drafter **drafter, loom_err *err)
{
    (void)drafter;
    if (!target || !LOOM_HAS_FIELD(target->struct_size, loom_target, ext))
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%s: no target, or a loom_target of %u bytes "
                            "(ABI 2.0's is %zu)",
                            h->checkpoint_path(ckpt),
                            target ? (unsigned)target->struct_size : 0u,
                            sizeof *target);
    dflash_geometry g;
    loom_status rc = dflash_parse_geometry(h, ckpt, &g, err);
    if (rc != LOOM_OK)
        return rc;
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "%s: the DFlash drafter's forward is not built yet",
                        h->checkpoint_path(ckpt));
}

static void LOOM_ABI d_close(loom_drafter *d)
{
    (void)d;
}

/* Without an opened drafter there is nothing to need: req stays as the
 * caller zeroed it (no taps). */
static void LOOM_ABI d_needs(const loom_drafter *d, loom_drafter_needs *req)
{
    (void)d;
    (void)req;
}

static loom_status LOOM_ABI d_stream_new(loom_drafter *d, loom_draft_stream **s,
                                         loom_err *err)
{
    (void)d;
    (void)s;
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "dflash: no drafter is open (the forward is not built "
                        "yet)");
}

static void LOOM_ABI d_stream_free(loom_drafter *d, loom_draft_stream *s)
{
    (void)d;
    (void)s;
}

static loom_status LOOM_ABI d_draft(loom_drafter *d,
                                    loom_draft_stream *const *streams,
                                    const int32_t *last, int32_t n_streams,
                                    const loom_proposals *out, loom_err *err)
{
    (void)d;
    (void)streams;
    (void)last;
    (void)n_streams;
    (void)out;
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "dflash: no drafter is open (the forward is not built "
                        "yet)");
}

const loom_drafter_i dflash_drafter_i = {
    /* .struct_size = */ sizeof(loom_drafter_i),
    /* .geometry    = */ d_geometry,
    /* .open        = */ d_open,
    /* .close       = */ d_close,
    /* .needs       = */ d_needs,
    /* .stream_new  = */ d_stream_new,
    /* .stream_free = */ d_stream_free,
    /* .absorb      = */ NULL, /* optional: the default absorbs nothing */
    /* .draft       = */ d_draft,
};

LOOM_PLUGIN_ENTRY(LOOM_PLUGIN_DRAFTER, LOOM_DRAFTER_ID, dflash_drafter_i,
                  "dflash", "0.1.0", "DFlash block-diffusion drafter (z-lab)",
                  dflash_probe)
