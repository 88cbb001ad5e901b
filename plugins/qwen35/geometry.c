/* config.json -> q35_geometry: every width the plugin uses, checked, with a
 * refusal naming the field and its value wherever the file is unusable. */
#include "qwen35.h"

#include <stdio.h>

#include <loom/checked.h>
#include <loom/config.h>

/* A positive integer field; `def` > 0 is used when it is absent. */
static loom_status q35_pos_int(const loom_cfg *c, const char *key, int64_t def,
                               int64_t *out)
{
    return loom_cfg_int(c, key, def <= 0, def, 1, INT64_MAX, out);
}

/* A non-negative integer field, 0 when absent. */
static loom_status q35_nonneg_int(const loom_cfg *c, const char *key,
                                  int64_t *out)
{
    return loom_cfg_int(c, key, 0, 0, 0, INT64_MAX, out);
}

static loom_status q35_layer_types(const loom_cfg *s, q35_geometry *g)
{
    const loom_host *host = s->host;
    const loom_json *lt = host->json_get(s->obj, "layer_types");
    loom_json_type t = host->json_type(lt);
    if (t == LOOM_JSON_MISSING || t == LOOM_JSON_NULL) {
        int64_t every;
        loom_status st = q35_pos_int(s, "full_attention_interval", 4, &every);
        if (st != LOOM_OK)
            return st;
        for (int64_t i = 0; i < g->n_layers; i++)
            g->kinds[i] = (i + 1) % every == 0 ? 'A' : 'L';
        g->kinds[g->n_layers] = '\0';
        return LOOM_OK;
    }
    if (t != LOOM_JSON_ARRAY)
        return loom_err_set(s->err, LOOM_ERR_FORMAT,
                            "config.json: %slayer_types must be an array, "
                            "not %s",
                            s->prefix, loom_cfg_type_name(t));
    size_t n = host->json_len(lt);
    if ((int64_t)n != g->n_layers)
        return loom_err_set(s->err, LOOM_ERR_FORMAT,
                            "config.json: %slayer_types has %zu entries but "
                            "num_hidden_layers = %lld",
                            s->prefix, n, (long long)g->n_layers);
    for (size_t i = 0; i < n; i++) {
        const char *k = host->json_str(host->json_at(lt, i));
        if (k && strcmp(k, "linear_attention") == 0)
            g->kinds[i] = 'L';
        else if (k && strcmp(k, "full_attention") == 0)
            g->kinds[i] = 'A';
        else
            return loom_err_set(s->err, LOOM_ERR_FORMAT,
                                "config.json: %slayer_types[%zu] = \"%s\" is "
                                "neither linear_attention nor full_attention",
                                s->prefix, i, k ? k : "(not a string)");
    }
    g->kinds[n] = '\0';
    return LOOM_OK;
}

/* Qwen3.5-MoE (transformers' Qwen3_5MoeTextConfig): every layer is sparse
 * and the top-k weights are always renormalised; the config has no
 * intermediate_size, decoder_sparse_step, mlp_only_layers or norm_topk_prob
 * (transformers drops them), so any such key is ignored. */
static loom_status q35_moe35(const loom_cfg *s, q35_geometry *g)
{
    loom_status st;
    if ((st = q35_pos_int(s, "num_experts", 0, &g->n_experts)) ||
        (st = q35_pos_int(s, "num_experts_per_tok", 0, &g->top_k)) ||
        (st = q35_pos_int(s, "moe_intermediate_size", 0, &g->moe_ffn)) ||
        (st = q35_pos_int(s, "shared_expert_intermediate_size", 0,
                          &g->shared_ffn)))
        return st;
    g->norm_topk = 1;
    memset(g->moe_layer, 1, (size_t)g->n_layers);
    return LOOM_OK;
}

/* Qwen3-Next: MoE where num_experts > 0, on every decoder_sparse_step-th
 * layer not in mlp_only_layers. */
static loom_status q35_moe_next(const loom_cfg *s, q35_geometry *g)
{
    const loom_host *host = s->host;
    loom_status st = q35_nonneg_int(s, "num_experts", &g->n_experts);
    if (st != LOOM_OK || g->n_experts == 0)
        return st;
    int64_t step;
    if ((st = q35_pos_int(s, "num_experts_per_tok", 0, &g->top_k)) ||
        (st = q35_pos_int(s, "moe_intermediate_size", 0, &g->moe_ffn)) ||
        (st = q35_nonneg_int(s, "shared_expert_intermediate_size",
                             &g->shared_ffn)) ||
        (st = q35_pos_int(s, "decoder_sparse_step", 1, &step)))
        return st;
    const loom_json *nt = host->json_get(s->obj, "norm_topk_prob");
    g->norm_topk =
        host->json_type(nt) == LOOM_JSON_BOOL ? host->json_bool(nt) : 1;
    for (int64_t i = 0; i < g->n_layers; i++)
        g->moe_layer[i] = (i + 1) % step == 0;
    const loom_json *only = host->json_get(s->obj, "mlp_only_layers");
    for (size_t i = 0; i < host->json_len(only); i++) {
        int64_t l = host->json_int(host->json_at(only, i));
        if (l < 0 || l >= g->n_layers)
            return loom_err_set(s->err, LOOM_ERR_FORMAT,
                                "config.json: %smlp_only_layers[%zu] = %lld "
                                "is not a layer",
                                s->prefix, i, (long long)l);
        g->moe_layer[l] = 0;
    }
    return LOOM_OK;
}

static loom_status q35_moe(const loom_cfg *s, q35_geometry *g)
{
    loom_status st = g->qwen35_moe ? q35_moe35(s, g) : q35_moe_next(s, g);
    if (st == LOOM_OK && g->top_k > g->n_experts)
        return loom_err_set(s->err, LOOM_ERR_FORMAT,
                            "config.json: %snum_experts_per_tok = %lld "
                            "exceeds num_experts = %lld",
                            s->prefix, (long long)g->top_k,
                            (long long)g->n_experts);
    return st;
}

/* A field that, when present and not null, must be an object. */
static loom_status q35_object_or_missing(const loom_cfg *s, const char *key)
{
    loom_json_type t = s->host->json_type(s->host->json_get(s->obj, key));
    if (t == LOOM_JSON_MISSING || t == LOOM_JSON_NULL || t == LOOM_JSON_OBJECT)
        return LOOM_OK;
    return loom_err_set(s->err, LOOM_ERR_FORMAT,
                        "config.json: %s%s must be an object, not %s",
                        s->prefix, key, loom_cfg_type_name(t));
}

/* Every width the plugin derives from the fields, in elements, computed
 * with overflow checks and at most 2^48: a product that wrapped (4 key
 * heads of 2^62 + 8 gave 32) once passed every shape check, sized the
 * state by the wrapped value, and the forward walked the real one. */
static loom_status q35_check_sizes(const loom_cfg *s, const q35_geometry *g)
{
    const int64_t limit = (int64_t)1 << 48;
    const struct {
        const char *what;
        int64_t f[4];
    } p[] = {
        {"linear_num_key_heads x linear_key_head_dim x 2",
         {g->lin_k_heads, g->lin_dk, 2, 1}},
        {"linear_num_value_heads x linear_value_head_dim x 2",
         {g->lin_v_heads, g->lin_dv, 2, 1}},
        {"linear_num_value_heads x linear_key_head_dim x "
         "linear_value_head_dim",
         {g->lin_v_heads, g->lin_dk, g->lin_dv, 1}},
        {"num_attention_heads x head_dim x 2", {g->n_heads, g->head_dim, 2, 1}},
        {"num_key_value_heads x head_dim x 2",
         {g->n_kv_heads, g->head_dim, 2, 1}},
        {"vocab_size x hidden_size", {g->vocab, g->hidden, 1, 1}},
        {"intermediate_size x hidden_size x 2", {g->ffn, g->hidden, 2, 1}},
        {"num_experts x moe_intermediate_size x hidden_size x 2",
         {g->n_experts, g->moe_ffn, g->hidden, 2}},
        {"shared_expert_intermediate_size x hidden_size x 2",
         {g->shared_ffn, g->hidden, 2, 1}},
    };
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        int64_t n = 0;
        if (loom_prod_i64(p[i].f, 4, &n) || n > limit)
            return loom_err_set(s->err, LOOM_ERR_FORMAT,
                                "config.json: %s%s is over 2^48 elements",
                                s->prefix, p[i].what);
    }
    /* each term is bounded now: the conv channels fit; times the kernel */
    int64_t conv = 2 * g->lin_k_heads * g->lin_dk + g->lin_v_heads * g->lin_dv;
    int64_t tail = 0;
    if (loom_mul_i64(conv, g->conv_kernel, &tail) || tail > limit)
        return loom_err_set(s->err, LOOM_ERR_FORMAT,
                            "config.json: %slinear_conv_kernel_dim = %lld x "
                            "%lld conv channels is over 2^48 elements",
                            s->prefix, (long long)g->conv_kernel,
                            (long long)conv);
    return LOOM_OK;
}

loom_status q35_geometry_parse(const loom_host *host,
                               const loom_checkpoint *ckpt, q35_geometry *g,
                               loom_err *err)
{
    memset(g, 0, sizeof *g);
    const loom_json *root = host->config(ckpt);
    const loom_json *tc = host->text_config(ckpt);
    g->nested = tc != root && tc != NULL;
    loom_cfg s = {
        host, tc ? tc : root, "config.json", g->nested ? "text_config." : "", 0,
        err};
    const char *mt = host->json_str(host->json_get(s.obj, "model_type"));
    const char *rmt = host->json_str(host->json_get(root, "model_type"));
    g->variant = (mt && strcmp(mt, "qwen3_next") == 0) ||
                         (rmt && strcmp(rmt, "qwen3_next") == 0)
                     ? Q35_VARIANT_NEXT
                     : Q35_VARIANT_QWEN35;
    g->qwen35_moe = (mt && strncmp(mt, "qwen3_5_moe", 11) == 0) ||
                    (rmt && strncmp(rmt, "qwen3_5_moe", 11) == 0);

    loom_status st;
    if ((st = q35_pos_int(&s, "vocab_size", 0, &g->vocab)) ||
        (st = q35_pos_int(&s, "hidden_size", 0, &g->hidden)) ||
        /* Qwen3.5-MoE has no dense MLP, and no intermediate_size */
        (st = g->qwen35_moe
                  ? q35_nonneg_int(&s, "intermediate_size", &g->ffn)
                  : q35_pos_int(&s, "intermediate_size", 0, &g->ffn)) ||
        (st = q35_pos_int(&s, "num_hidden_layers", 0, &g->n_layers)) ||
        (st = q35_pos_int(&s, "num_attention_heads", 0, &g->n_heads)) ||
        (st = q35_pos_int(&s, "num_key_value_heads", 0, &g->n_kv_heads)) ||
        (st = q35_pos_int(&s, "head_dim", 0, &g->head_dim)) ||
        (st = q35_pos_int(&s, "linear_num_key_heads", 0, &g->lin_k_heads)) ||
        (st = q35_pos_int(&s, "linear_num_value_heads", 0, &g->lin_v_heads)) ||
        (st = q35_pos_int(&s, "linear_key_head_dim", 0, &g->lin_dk)) ||
        (st = q35_pos_int(&s, "linear_value_head_dim", 0, &g->lin_dv)) ||
        (st = q35_pos_int(&s, "linear_conv_kernel_dim", 4, &g->conv_kernel)) ||
        (st = q35_pos_int(&s, "max_position_embeddings", 32768, &g->max_pos)))
        return st;
    if (g->n_layers > Q35_MAX_LAYERS)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "config.json: %snum_hidden_layers = %lld exceeds "
                            "this plugin's %d",
                            s.prefix, (long long)g->n_layers, Q35_MAX_LAYERS);
    if (g->n_heads % g->n_kv_heads != 0)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "config.json: %snum_key_value_heads = %lld does "
                            "not divide num_attention_heads = %lld",
                            s.prefix, (long long)g->n_kv_heads,
                            (long long)g->n_heads);
    if (g->lin_v_heads % g->lin_k_heads != 0)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "config.json: %slinear_num_value_heads = %lld is "
                            "not a multiple of linear_num_key_heads = %lld",
                            s.prefix, (long long)g->lin_v_heads,
                            (long long)g->lin_k_heads);
    if (g->lin_dv > 1024)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "config.json: %slinear_value_head_dim = %lld "
                            "exceeds this plugin's 1024",
                            s.prefix, (long long)g->lin_dv);
    const char *act = host->json_str(host->json_get(s.obj, "hidden_act"));
    if (act && strcmp(act, "silu") != 0)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "config.json: %shidden_act = \"%s\" (only silu)",
                            s.prefix, act);

    if ((st = loom_cfg_pos_real(&s, "rms_norm_eps", 1e-6, &g->eps)))
        return st;
    /* RoPE: rope_parameters wins over the top-level keys (spec 1.2) */
    const loom_json *rp = host->json_get(s.obj, "rope_parameters");
    if (host->json_type(rp) != LOOM_JSON_OBJECT)
        rp = host->json_get(s.obj, "rope_scaling");
    /* present but not an object: refused, not passed over */
    if ((st = q35_object_or_missing(&s, "rope_parameters")) ||
        (st = q35_object_or_missing(&s, "rope_scaling")))
        return st;
    char rpw[64];
    snprintf(rpw, sizeof rpw, "%srope_parameters.", s.prefix);
    loom_cfg rps = s; /* the same fields under rope_parameters */
    rps.obj = rp;
    rps.prefix = rpw;
    const char *rt = host->json_str(host->json_get(rp, "rope_type"));
    if (rt && strcmp(rt, "default") != 0)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "config.json: %srope_type = \"%s\" (only "
                            "default)",
                            rpw, rt);
    double top_prf, top_theta;
    if ((st = loom_cfg_pos_real(&s, "partial_rotary_factor", 0.25, &top_prf)) ||
        (st = loom_cfg_pos_real(&rps, "partial_rotary_factor", top_prf,
                                &g->partial_rotary)) ||
        (st = loom_cfg_pos_real(&s, "rope_theta",
                                g->variant == Q35_VARIANT_NEXT ? 10000.0 : 1e7,
                                &top_theta)) ||
        (st = loom_cfg_pos_real(&rps, "rope_theta", top_theta, &g->rope_theta)))
        return st;
    if (g->partial_rotary > 1.0)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "config.json: partial_rotary_factor = %g exceeds "
                            "1",
                            g->partial_rotary);
    g->rot_dim = (int64_t)((double)g->head_dim * g->partial_rotary);
    if (g->rot_dim < 2 || g->rot_dim % 2 != 0)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "config.json: head_dim = %lld x "
                            "partial_rotary_factor = %g gives %lld rotary "
                            "dims, not a positive even number",
                            (long long)g->head_dim, g->partial_rotary,
                            (long long)g->rot_dim);

    if ((st = q35_layer_types(&s, g)))
        return st;
    if ((st = q35_moe(&s, g)))
        return st;
    if ((st = q35_check_sizes(&s, g)))
        return st;

    /* tie_word_embeddings: the text config's, else the root's; either of
     * another type is refused */
    loom_cfg rs = {host, root, "config.json", "", 0, err};
    int tied_root = 0;
    if ((st = loom_cfg_bool(&rs, "tie_word_embeddings", 0, &tied_root)) ||
        (st = loom_cfg_bool(&s, "tie_word_embeddings", tied_root, &g->tied)))
        return st;

    if ((st = loom_cfg_eos_ids_check(host, ckpt, g->vocab, err)))
        return st;
    loom_cfg_eos_ids(host, ckpt, g->vocab, g->eos, &g->n_eos);
    return LOOM_OK;
}

void q35_geometry_report(const q35_geometry *g, const loom_fields *out)
{
    void *c = out->ctx;
    out->str(c, "variant",
             g->variant == Q35_VARIANT_NEXT ? "qwen3_next"
             : g->qwen35_moe                ? "qwen3_5_moe"
                                            : "qwen3_5");
    out->i64(c, "nested_text_config", g->nested);
    out->i64(c, "vocab_size", g->vocab);
    out->i64(c, "hidden_size", g->hidden);
    out->i64(c, "intermediate_size", g->ffn);
    out->i64(c, "num_hidden_layers", g->n_layers);
    out->str(c, "layer_kinds", g->kinds);
    out->i64(c, "num_attention_heads", g->n_heads);
    out->i64(c, "num_key_value_heads", g->n_kv_heads);
    out->i64(c, "head_dim", g->head_dim);
    out->f64(c, "partial_rotary_factor", g->partial_rotary);
    out->i64(c, "rotary_dim", g->rot_dim);
    out->f64(c, "rope_theta", g->rope_theta);
    out->i64(c, "linear_num_key_heads", g->lin_k_heads);
    out->i64(c, "linear_num_value_heads", g->lin_v_heads);
    out->i64(c, "linear_key_head_dim", g->lin_dk);
    out->i64(c, "linear_value_head_dim", g->lin_dv);
    out->i64(c, "linear_conv_kernel_dim", g->conv_kernel);
    out->f64(c, "rms_norm_eps", g->eps);
    out->i64(c, "tie_word_embeddings", g->tied);
    out->i64(c, "max_position_embeddings", g->max_pos);
    if (g->n_experts) {
        out->i64(c, "num_experts", g->n_experts);
        out->i64(c, "num_experts_per_tok", g->top_k);
        out->i64(c, "moe_intermediate_size", g->moe_ffn);
        out->i64(c, "shared_expert_intermediate_size", g->shared_ffn);
        out->i64(c, "norm_topk_prob", g->norm_topk);
        int64_t n = 0;
        for (int64_t i = 0; i < g->n_layers; i++)
            n += g->moe_layer[i];
        out->i64(c, "moe_layers", n);
    }
    loom_cfg_report_ids(out, "eos_token_ids", g->eos, g->n_eos);
}
