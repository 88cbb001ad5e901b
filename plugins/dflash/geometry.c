/* DFlash config.json -> geometry: the fields z-lab, SGLang and vLLM write,
 * with their variations (block_size or ids inside or outside dflash_config,
 * rope_parameters or rope_theta). */
#include "dflash.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <loom/config.h>

/* A DFlash checkpoint says so by its architecture or by dflash_config. The
 * latter marks a drafter whatever architecture it names (the target's,
 * sometimes), so it scores as high as a family's own architecture: the core
 * gives a tie to the drafter and never opens these weights as a model. */
int32_t LOOM_ABI dflash_probe(const loom_host *h, const loom_checkpoint *ckpt)
{
    static const char *const archs[] = {"DFlashDraftModel"};
    if (loom_cfg_probe(h, ckpt, archs, 1, NULL, 0) > 0)
        return 100;
    const loom_json *dc = h->json_get(h->config(ckpt), "dflash_config");
    return h->json_type(dc) == LOOM_JSON_OBJECT ? 100 : 0;
}

/* A required integer >= min from the first of objs[0..n_objs) that has it
 * (c->obj is left pointing there). */
static loom_status need_int(loom_cfg *c, const loom_json *const *objs,
                            int n_objs, const char *key, int64_t min,
                            int64_t *out)
{
    for (int i = 0; i < n_objs; i++) {
        c->obj = objs[i];
        if (loom_cfg_has(c, key))
            break;
    }
    return loom_cfg_int(c, key, 1, 0, min, INT64_MAX, out);
}

/* z-lab's build_target_layer_ids: the middle layer for one draft layer,
 * else n ids spread evenly over [1, L-3], rounded half to even as Python's
 * round() does. */
static void dflash_default_taps(int32_t n_target, int32_t n_draft,
                                dflash_geometry *g)
{
    g->n_taps = n_draft < DFLASH_MAX_TAPS ? n_draft : DFLASH_MAX_TAPS;
    if (n_draft == 1) {
        g->taps[0] = n_target / 2;
        return;
    }
    double span = (double)n_target - 4.0;
    for (int32_t i = 0; i < g->n_taps; i++)
        g->taps[i] = (int32_t)nearbyint(1.0 + i * span / (n_draft - 1));
}

/* Per-layer attention from layer_types, sliding_window and is_causal:
 * full layers are non-causal, sliding ones causal within the window, unless
 * is_causal says otherwise for all. */
static loom_status layer_kinds(const loom_host *h, const loom_json *cfg,
                               const char *path, dflash_geometry *g,
                               loom_err *err)
{
    const loom_json *types = h->json_get(cfg, "layer_types");
    const loom_json *sw = h->json_get(cfg, "sliding_window");
    const loom_json *ic = h->json_get(cfg, "is_causal");
    if (h->json_type(types) == LOOM_JSON_ARRAY &&
        h->json_len(types) != (size_t)g->n_layers)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s/config.json: layer_types has %zu entries for "
                            "%d layers",
                            path, h->json_len(types), g->n_layers);
    for (int32_t l = 0; l < g->n_layers; l++) {
        const char *t = h->json_str(h->json_at(types, (size_t)l));
        int sliding = 0;
        if (t && strcmp(t, "sliding_attention") == 0)
            sliding = 1;
        else if (t && strcmp(t, "full_attention") != 0)
            return loom_err_set(err, LOOM_ERR_FORMAT,
                                "%s/config.json: layer_types[%d] is \"%s\", "
                                "not full_attention or sliding_attention",
                                path, l, t);
        if (sliding &&
            (h->json_type(sw) != LOOM_JSON_INT || h->json_int(sw) <= 0))
            return loom_err_set(err, LOOM_ERR_FORMAT,
                                "%s/config.json: layer %d is "
                                "sliding_attention but sliding_window is not "
                                "a positive integer",
                                path, l);
        g->window[l] = sliding ? (int32_t)h->json_int(sw) : 0;
        g->causal[l] =
            (uint8_t)(h->json_type(ic) == LOOM_JSON_BOOL ? h->json_bool(ic)
                                                         : sliding);
    }
    return LOOM_OK;
}

loom_status dflash_parse_geometry(const loom_host *h,
                                  const loom_checkpoint *ckpt,
                                  int32_t n_target_layers, dflash_geometry *g,
                                  loom_err *err)
{
    memset(g, 0, sizeof *g);
    const loom_json *cfg = h->config(ckpt);
    const loom_json *dc = h->json_get(cfg, "dflash_config");
    const loom_json *top[] = {cfg};
    const loom_json *both[] = {dc, cfg}; /* dflash_config wins */
    const char *path = h->checkpoint_path(ckpt);
    char file[1024];
    snprintf(file, sizeof file, "%s/config.json", path);
    loom_cfg c = {h, cfg, file, "", 0, err};
    int64_t v;
    loom_status rc;
#define NEED(objs, key, min, field)                                            \
    do {                                                                       \
        rc = need_int(&c, objs, (int)(sizeof objs / sizeof *objs), key, min,   \
                      &v);                                                     \
        if (rc != LOOM_OK)                                                     \
            return rc;                                                         \
        g->field = (int32_t)v;                                                 \
    } while (0)
    NEED(top, "hidden_size", 1, hidden);
    NEED(top, "intermediate_size", 1, ffn);
    NEED(top, "num_hidden_layers", 1, n_layers);
    NEED(top, "num_attention_heads", 1, n_heads);
    NEED(top, "num_key_value_heads", 1, n_kv_heads);
    NEED(top, "vocab_size", 1, vocab);
    NEED(both, "block_size", 2, block_size);
    NEED(both, "mask_token_id", 0, mask_token);
#undef NEED
    g->target_hidden = g->hidden;
    const loom_json *th = h->json_get(cfg, "target_hidden_size");
    if (h->json_type(th) == LOOM_JSON_INT && h->json_int(th) > 0)
        g->target_hidden = (int32_t)h->json_int(th);
    const loom_json *hd = h->json_get(cfg, "head_dim");
    g->head_dim = h->json_type(hd) == LOOM_JSON_INT ? (int32_t)h->json_int(hd)
                                                    : g->hidden / g->n_heads;
    if (g->head_dim <= 0)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s/config.json: head_dim is %d, must be > 0", path,
                            g->head_dim);
    if (g->n_heads % g->n_kv_heads != 0)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s/config.json: num_attention_heads %d is not a "
                            "multiple of num_key_value_heads %d",
                            path, g->n_heads, g->n_kv_heads);
    if (g->mask_token >= g->vocab)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s/config.json: mask_token_id %d is not below "
                            "vocab_size %d",
                            path, g->mask_token, g->vocab);
    const loom_json *ntl = h->json_get(cfg, "num_target_layers");
    if (h->json_type(ntl) == LOOM_JSON_INT)
        g->n_target_layers = (int32_t)h->json_int(ntl);

    const loom_json *ids = h->json_get(dc, "target_layer_ids");
    if (h->json_type(ids) != LOOM_JSON_ARRAY)
        ids = h->json_get(cfg, "target_layer_ids");
    if (h->json_type(ids) == LOOM_JSON_ARRAY && h->json_len(ids) == 0)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s/config.json: target_layer_ids is empty", path);
    if (h->json_len(ids) > DFLASH_MAX_TAPS)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s/config.json: target_layer_ids has %zu "
                            "entries, at most %d supported",
                            path, h->json_len(ids), DFLASH_MAX_TAPS);
    for (size_t i = 0; i < h->json_len(ids); i++) {
        const loom_json *e = h->json_at(ids, i);
        int64_t id = h->json_int(e);
        if (h->json_type(e) != LOOM_JSON_INT || id < 0 ||
            (g->n_target_layers > 0 && id >= g->n_target_layers))
            return loom_err_set(err, LOOM_ERR_FORMAT,
                                "%s/config.json: target_layer_ids[%zu] is "
                                "not a layer index below num_target_layers "
                                "%d",
                                path, i, g->n_target_layers);
        g->taps[g->n_taps++] = (int32_t)id;
    }
    if (g->n_taps == 0) {
        int32_t lt =
            g->n_target_layers > 0 ? g->n_target_layers : n_target_layers;
        if (lt > 0)
            dflash_default_taps(lt, g->n_layers, g);
    }

    if (g->n_layers > DFLASH_MAX_LAYERS)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s/config.json: num_hidden_layers %d, at most %d "
                            "supported",
                            path, g->n_layers, DFLASH_MAX_LAYERS);
    rc = layer_kinds(h, cfg, path, g, err);
    if (rc != LOOM_OK)
        return rc;
    const loom_json *bias = h->json_get(cfg, "attention_bias");
    if (h->json_type(bias) == LOOM_JSON_BOOL && h->json_bool(bias))
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "%s/config.json: attention_bias true is not "
                            "supported",
                            path);

    g->rms_eps = 1e-6;
    const loom_json *eps = h->json_get(cfg, "rms_norm_eps");
    if (h->json_type(eps) == LOOM_JSON_REAL ||
        h->json_type(eps) == LOOM_JSON_INT)
        g->rms_eps = h->json_real(eps);
    g->rope_theta = 10000.0;
    const loom_json *rp = h->json_get(cfg, "rope_parameters");
    const loom_json *th2 = h->json_get(rp, "rope_theta");
    if (h->json_type(th2) == LOOM_JSON_MISSING)
        th2 = h->json_get(cfg, "rope_theta");
    if (h->json_type(th2) == LOOM_JSON_REAL ||
        h->json_type(th2) == LOOM_JSON_INT)
        g->rope_theta = h->json_real(th2);
    const loom_json *rt = h->json_get(rp, "rope_type");
    if (h->json_type(rt) == LOOM_JSON_STRING &&
        strcmp(h->json_str(rt), "default") != 0)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "%s/config.json: rope_parameters.rope_type \"%s\" "
                            "is not supported (only \"default\")",
                            path, h->json_str(rt));
    const loom_json *mp = h->json_get(cfg, "max_position_embeddings");
    g->max_position = h->json_type(mp) == LOOM_JSON_INT ? h->json_int(mp) : 0;
    return LOOM_OK;
}
