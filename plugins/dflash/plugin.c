/* The DFlash block-diffusion drafter plugin: entry, probe, and the drafter
 * interface. The forward is not built yet: `open` refuses with a message,
 * while the probe and geometry parse are real. */
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
                                   const loom_model_info *target,
                                   loom_drafter **drafter, loom_err *err)
{
    (void)target;
    (void)drafter;
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

const loom_drafter_i dflash_drafter_i = {
    /* .struct_size = */ sizeof(loom_drafter_i),
    /* .geometry    = */ d_geometry,
    /* .open        = */ d_open,
    /* .close       = */ d_close,
    /* .needs       = */ NULL,
    /* .stream_new  = */ NULL,
    /* .stream_free = */ NULL,
    /* .absorb      = */ NULL,
    /* .draft       = */ NULL,
};

LOOM_PLUGIN_ENTRY(LOOM_PLUGIN_DRAFTER, LOOM_DRAFTER_ID, dflash_drafter_i,
                  "dflash", "0.1.0", "DFlash block-diffusion drafter (z-lab)",
                  dflash_probe)
