/* The DFlash block-diffusion drafter plugin: entry, the loom.drafter/2
 * interface, and opening a drafter for a target it fits. */
#include "dflash.h"

#include <stdio.h>
#include <stdlib.h>

#include <loom/config.h>
#include <loom/entry.h>

static loom_status LOOM_ABI d_geometry(const loom_host *h,
                                       const loom_checkpoint *ckpt,
                                       const loom_fields *out, loom_err *err)
{
    dflash_geometry g;
    loom_status rc = dflash_parse_geometry(h, ckpt, 0, &g, err);
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

static void LOOM_ABI d_close(loom_drafter *d)
{
    if (!d)
        return;
    dflash_weights_free(&d->w, &d->g);
    free(d->inv_freq);
    free(d);
}

/* The drafter fits the target when it reads the target's rows (hidden size,
 * tapped layers) and writes through its embedding and head (vocab). */
static loom_status check_fit(const loom_host *h, const loom_checkpoint *ckpt,
                             const dflash_geometry *g, const loom_model_info *t,
                             loom_err *err)
{
    const char *path = h->checkpoint_path(ckpt);
#define MISFIT(field, mine, theirs, what)                                      \
    return loom_err_set(err, LOOM_ERR_INVALID,                                 \
                        "drafter %s does not fit its target: config.json "     \
                        "%s is %lld, the target model's %s is %lld",           \
                        path, field, (long long)(mine), what,                  \
                        (long long)(theirs))
    if (g->hidden != t->hidden)
        MISFIT("hidden_size", g->hidden, t->hidden, "hidden size");
    if (g->target_hidden != t->hidden)
        MISFIT("target_hidden_size", g->target_hidden, t->hidden,
               "hidden size");
    if (g->vocab != t->vocab)
        MISFIT("vocab_size", g->vocab, t->vocab, "vocab size");
    if (g->n_target_layers > 0 && g->n_target_layers != t->n_layers)
        MISFIT("num_target_layers", g->n_target_layers, t->n_layers,
               "layer count");
    for (int32_t i = 0; i < g->n_taps; i++)
        if (g->taps[i] >= t->n_layers)
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "drafter %s does not fit its target: "
                                "target_layer_ids[%d] is %d, but the target "
                                "model has %d layers",
                                path, i, g->taps[i], t->n_layers);
#undef MISFIT
    return LOOM_OK;
}

static loom_status LOOM_ABI d_open(const loom_host *h,
                                   const loom_checkpoint *ckpt,
                                   const loom_target *target,
                                   loom_drafter **out, loom_err *err)
{
    const char *path = h->checkpoint_path(ckpt);
    if (!target || !LOOM_HAS_FIELD(target->struct_size, loom_target, ext) ||
        !target->info)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%s: no target, or a loom_target of %u bytes "
                            "(ABI 2.0's is %zu)",
                            path, target ? (unsigned)target->struct_size : 0u,
                            sizeof *target);
    const loom_target_i *ext = target->ext;
    if (!ext || !LOOM_HAS_FIELD(ext->struct_size, loom_target_i, lm_head) ||
        !ext->embed || !ext->lm_head || !ext->set_taps)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "drafter %s needs the target's %s (embedding, "
                            "lm_head, taps), which this target model lacks",
                            path, LOOM_TARGET_ID);
    loom_drafter *d = calloc(1, sizeof *d);
    if (!d)
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: no memory", path);
    d->host = h;
    d->target = target->model;
    d->ext = ext;
    snprintf(d->path, sizeof d->path, "%s", path);
    dflash_geometry *g = &d->g;
    loom_status rc =
        dflash_parse_geometry(h, ckpt, target->info->n_layers, g, err);
    if (rc == LOOM_OK)
        rc = check_fit(h, ckpt, g, target->info, err);
    if (rc == LOOM_OK)
        rc = dflash_weights_bind(h, ckpt, g, &d->w, err);
    if (rc != LOOM_OK) {
        free(d);
        return rc;
    }
    d->inv_freq = malloc((size_t)(g->head_dim / 2 + 1) * sizeof *d->inv_freq);
    if (!d->inv_freq) {
        d_close(d);
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: no memory", path);
    }
    loom_cpu_rope_inv_freq(d->inv_freq, g->head_dim, g->rope_theta);
    /* the target's TAP rows carry what absorb reads */
    rc = ext->set_taps(d->target, g->taps, g->n_taps, err);
    if (rc != LOOM_OK) {
        d_close(d);
        return rc;
    }
    *out = d;
    return LOOM_OK;
}

static void LOOM_ABI d_needs(const loom_drafter *d, loom_drafter_needs *req)
{
    if (!d || !LOOM_HAS_FIELD(req->struct_size, loom_drafter_needs, mask_token))
        return;
    req->n_taps = d->g.n_taps;
    req->taps = d->g.taps;
    req->block_size = d->g.block_size;
    req->mask_token = d->g.mask_token;
}

static loom_status LOOM_ABI d_stream_new(loom_drafter *d, loom_draft_stream **s,
                                         loom_err *err)
{
    return dflash_stream_new(d, s, err);
}

static void LOOM_ABI d_stream_free(loom_drafter *d, loom_draft_stream *s)
{
    dflash_stream_free(d, s);
}

static loom_status LOOM_ABI d_absorb(loom_drafter *d, loom_draft_stream *s,
                                     const loom_view *features,
                                     const int32_t *positions, int32_t n,
                                     loom_err *err)
{
    return dflash_absorb(d, s, features, positions, n, err);
}

static loom_status LOOM_ABI d_draft(loom_drafter *d,
                                    loom_draft_stream *const *streams,
                                    const int32_t *last, int32_t n_streams,
                                    const loom_proposals *out, loom_err *err)
{
    return dflash_draft(d, streams, last, n_streams, out, err);
}

const loom_drafter_i dflash_drafter_i = {
    /* .struct_size = */ sizeof(loom_drafter_i),
    /* .geometry    = */ d_geometry,
    /* .open        = */ d_open,
    /* .close       = */ d_close,
    /* .needs       = */ d_needs,
    /* .stream_new  = */ d_stream_new,
    /* .stream_free = */ d_stream_free,
    /* .absorb      = */ d_absorb,
    /* .draft       = */ d_draft,
    /* .absorb_tokens = */ NULL,
};

LOOM_PLUGIN_ENTRY(LOOM_PLUGIN_DRAFTER, LOOM_DRAFTER_ID, dflash_drafter_i,
                  "dflash", "0.1.0", "DFlash block-diffusion drafter (z-lab)",
                  dflash_probe)
