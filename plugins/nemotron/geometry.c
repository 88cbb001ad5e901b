/* Nemotron-H geometry: config.json -> nem_geometry, with every missing,
 * non-positive or inconsistent field refused by its name and value.
 *
 * Layer kinds come from `hybrid_override_pattern` (M * - E) or from a
 * `layers_block_type` / `layer_types` list (mamba or linear_attention,
 * attention or full_attention, mlp, moe); when several are present they must
 * agree. Legacy key names (mamba_n_groups, mamba_d_conv, mamba_conv_bias,
 * attention_head_dim) are read where the current name is absent. Fields a
 * layer kind needs are required only when the pattern has that kind. */
#include "nemotron.h"

#include <stdio.h>
#include <string.h>

#include <loom/config.h>

/* A positive integer field that fits an int32_t. */
static loom_status get_pos(const loom_cfg *p, const char *key, int required,
                           int64_t def, int32_t *out)
{
    int64_t v;
    loom_status rc = loom_cfg_int(p, key, required, def, 1, INT32_MAX, &v);
    if (rc == LOOM_OK)
        *out = (int32_t)v;
    return rc;
}

/* A positive integer under `key` or its legacy name; both present must
 * agree. */
static loom_status get_pos_legacy(const loom_cfg *p, const char *key,
                                  const char *legacy, int required,
                                  int32_t *out)
{
    int has_new = loom_cfg_has(p, key);
    int has_old = loom_cfg_has(p, legacy);
    if (!has_new && has_old)
        return get_pos(p, legacy, required, 0, out);
    loom_status rc = get_pos(p, key, required, 0, out);
    if (rc != LOOM_OK || !has_old)
        return rc;
    int32_t old = 0;
    rc = get_pos(p, legacy, 1, 0, &old);
    if (rc != LOOM_OK)
        return rc;
    if (old != *out)
        return loom_err_set(p->err, LOOM_ERR_FORMAT,
                            "config.json: field %s = %d disagrees with its "
                            "legacy name %s = %d",
                            key, *out, legacy, old);
    return LOOM_OK;
}

/* A string field that must be `want` when present. */
static loom_status want_str(const loom_cfg *p, const char *key,
                            const char *want)
{
    const loom_json *v = p->host->json_get(p->obj, key);
    loom_json_type t = p->host->json_type(v);
    if (t == LOOM_JSON_MISSING || t == LOOM_JSON_NULL)
        return LOOM_OK;
    const char *s = p->host->json_str(v);
    if (!s || strcmp(s, want) != 0)
        return loom_err_set(p->err, LOOM_ERR_UNSUPPORTED,
                            "config.json: field %s = %s is not supported "
                            "(only \"%s\")",
                            key, s ? s : loom_cfg_type_name(t), want);
    return LOOM_OK;
}

/* ---------------------------------------------------------------- pattern */

static char kind_of_name(const char *s)
{
    if (!strcmp(s, "mamba") || !strcmp(s, "linear_attention"))
        return NEM_MAMBA;
    if (!strcmp(s, "attention") || !strcmp(s, "full_attention"))
        return NEM_ATTN;
    if (!strcmp(s, "mlp"))
        return NEM_MLP;
    if (!strcmp(s, "moe"))
        return NEM_MOE;
    return 0;
}

/* A layer-type list into pattern letters; *len = 0 when absent. */
static loom_status list_pattern(const loom_cfg *p, const char *key, char *pat,
                                size_t *len)
{
    const loom_json *v = p->host->json_get(p->obj, key);
    loom_json_type t = p->host->json_type(v);
    *len = 0;
    if (t == LOOM_JSON_MISSING || t == LOOM_JSON_NULL)
        return LOOM_OK;
    if (t != LOOM_JSON_ARRAY)
        return loom_err_set(p->err, LOOM_ERR_FORMAT,
                            "config.json: field %s is %s, not a list", key,
                            loom_cfg_type_name(t));
    size_t n = p->host->json_len(v);
    if (n == 0 || n > NEM_MAX_LAYERS)
        return loom_err_set(p->err, LOOM_ERR_FORMAT,
                            "config.json: field %s has %zu entries "
                            "(1..%d accepted)",
                            key, n, NEM_MAX_LAYERS);
    for (size_t i = 0; i < n; i++) {
        const char *s = p->host->json_str(p->host->json_at(v, i));
        char k = s ? kind_of_name(s) : 0;
        if (!k)
            return loom_err_set(p->err, LOOM_ERR_FORMAT,
                                "config.json: field %s[%zu] = %s is not a "
                                "layer type (mamba, linear_attention, "
                                "attention, full_attention, mlp, moe)",
                                key, i, s ? s : "(not a string)");
        pat[i] = k;
    }
    pat[n] = 0;
    *len = n;
    return LOOM_OK;
}

static loom_status parse_pattern(const loom_cfg *p, nem_geometry *g)
{
    char lbt[NEM_MAX_LAYERS + 1], lt[NEM_MAX_LAYERS + 1];
    size_t n_lbt, n_lt;
    loom_status rc = list_pattern(p, "layers_block_type", lbt, &n_lbt);
    if (rc == LOOM_OK)
        rc = list_pattern(p, "layer_types", lt, &n_lt);
    if (rc != LOOM_OK)
        return rc;
    if (n_lbt && n_lt && strcmp(lbt, lt) != 0)
        return loom_err_set(p->err, LOOM_ERR_FORMAT,
                            "config.json: layers_block_type (%s) and "
                            "layer_types (%s) disagree",
                            lbt, lt);
    const char *list = n_lbt ? lbt : n_lt ? lt : NULL;
    const char *list_key = n_lbt ? "layers_block_type" : "layer_types";

    const loom_json *hv = p->host->json_get(p->obj, "hybrid_override_pattern");
    loom_json_type ht = p->host->json_type(hv);
    const char *hop = NULL;
    if (ht != LOOM_JSON_MISSING && ht != LOOM_JSON_NULL) {
        hop = p->host->json_str(hv);
        if (!hop)
            return loom_err_set(p->err, LOOM_ERR_FORMAT,
                                "config.json: field hybrid_override_pattern "
                                "is %s, not a string",
                                loom_cfg_type_name(ht));
        size_t n = strlen(hop);
        if (n == 0 || n > NEM_MAX_LAYERS)
            return loom_err_set(p->err, LOOM_ERR_FORMAT,
                                "config.json: field hybrid_override_pattern "
                                "has %zu letters (1..%d accepted)",
                                n, NEM_MAX_LAYERS);
        for (size_t i = 0; i < n; i++)
            if (!strchr("M*-E", hop[i]))
                return loom_err_set(p->err, LOOM_ERR_FORMAT,
                                    "config.json: field "
                                    "hybrid_override_pattern = \"%s\": "
                                    "letter %zu '%c' is not one of M * - E",
                                    hop, i, hop[i]);
        if (list && strcmp(list, hop) != 0)
            return loom_err_set(p->err, LOOM_ERR_FORMAT,
                                "config.json: hybrid_override_pattern (%s) "
                                "and %s (%s) disagree",
                                hop, list_key, list);
    }
    const char *pat = list ? list : hop;
    if (!pat)
        return loom_err_set(p->err, LOOM_ERR_FORMAT,
                            "config.json: no layer pattern: required field "
                            "hybrid_override_pattern (or layers_block_type) "
                            "is missing");
    size_t n = strlen(pat);
    memcpy(g->kinds, pat, n + 1);
    g->n_layers = (int32_t)n;

    int64_t nhl;
    rc = loom_cfg_int(p, "num_hidden_layers", 0, (int64_t)n, INT64_MIN,
                      INT64_MAX, &nhl);
    if (rc != LOOM_OK)
        return rc;
    if (nhl != (int64_t)n)
        return loom_err_set(p->err, LOOM_ERR_FORMAT,
                            "config.json: field num_hidden_layers = %lld "
                            "but the layer pattern \"%s\" has %zu layers",
                            (long long)nhl, pat, n);
    for (size_t i = 0; i < n; i++) {
        g->n_mamba += pat[i] == NEM_MAMBA;
        g->n_attn += pat[i] == NEM_ATTN;
        g->n_mlp += pat[i] == NEM_MLP;
        g->n_moe += pat[i] == NEM_MOE;
    }
    return LOOM_OK;
}

/* ---------------------------------------------------------------- parse */

static loom_status parse_mamba(const loom_cfg *p, nem_geometry *g)
{
    int req = g->n_mamba > 0;
    loom_status rc;
    if ((rc = get_pos(p, "mamba_num_heads", req, 1, &g->m_heads)) ||
        (rc = get_pos(p, "mamba_head_dim", req, 1, &g->m_head_dim)) ||
        (rc = get_pos(p, "ssm_state_size", req, 1, &g->ssm_state)) ||
        (rc = get_pos_legacy(p, "n_groups", "mamba_n_groups", req,
                             &g->n_groups)) ||
        (rc = get_pos_legacy(p, "conv_kernel", "mamba_d_conv", req,
                             &g->conv_kernel)))
        return rc;
    if (!req) {
        g->m_heads = g->m_head_dim = g->ssm_state = 0;
        g->n_groups = g->conv_kernel = 0;
        return LOOM_OK;
    }
    if (g->m_heads % g->n_groups != 0)
        return loom_err_set(p->err, LOOM_ERR_FORMAT,
                            "config.json: field n_groups = %d does not "
                            "divide mamba_num_heads = %d",
                            g->n_groups, g->m_heads);
    if ((rc = want_str(p, "mamba_hidden_act", "silu")) != LOOM_OK)
        return rc;
    int64_t d_inner = (int64_t)g->m_heads * g->m_head_dim;
    int64_t conv_dim = d_inner + 2 * (int64_t)g->n_groups * g->ssm_state;
    if (2 * d_inner + 2 * (int64_t)g->n_groups * g->ssm_state + g->m_heads >
        INT32_MAX)
        return loom_err_set(p->err, LOOM_ERR_RANGE,
                            "config.json: mamba_num_heads = %d x "
                            "mamba_head_dim = %d is too large",
                            g->m_heads, g->m_head_dim);
    g->d_inner = (int32_t)d_inner;
    g->conv_dim = (int32_t)conv_dim;
    g->in_proj_dim = (int32_t)(d_inner + conv_dim + g->m_heads);
    return LOOM_OK;
}

static loom_status parse_attention(const loom_cfg *p, nem_geometry *g)
{
    int req = g->n_attn > 0;
    loom_status rc;
    if ((rc = get_pos(p, "num_attention_heads", req, 1, &g->n_q_heads)) ||
        (rc = get_pos(p, "num_key_value_heads", req, 1, &g->n_kv_heads)) ||
        (rc = get_pos_legacy(p, "head_dim", "attention_head_dim", req,
                             &g->head_dim)))
        return rc;
    if (!req) {
        g->n_q_heads = g->n_kv_heads = g->head_dim = 0;
        return LOOM_OK;
    }
    if (g->n_q_heads % g->n_kv_heads != 0)
        return loom_err_set(p->err, LOOM_ERR_FORMAT,
                            "config.json: field num_key_value_heads = %d "
                            "does not divide num_attention_heads = %d",
                            g->n_kv_heads, g->n_q_heads);
    const loom_json *sw = p->host->json_get(p->obj, "sliding_window");
    if (p->host->json_type(sw) > LOOM_JSON_NULL)
        return loom_err_set(p->err, LOOM_ERR_UNSUPPORTED,
                            "config.json: field sliding_window = %lld is not "
                            "supported (Nemotron-H attention is full-context)",
                            (long long)p->host->json_int(sw));
    return LOOM_OK;
}

static loom_status parse_ffn(const loom_cfg *p, nem_geometry *g)
{
    loom_status rc;
    int mlp_bias;
    if ((rc = loom_cfg_bool(p, "mlp_bias", 0, &mlp_bias)) != LOOM_OK)
        return rc;
    if (mlp_bias && (g->n_mlp || g->n_moe))
        return loom_err_set(p->err, LOOM_ERR_UNSUPPORTED,
                            "config.json: field mlp_bias = true is not "
                            "supported");
    if (g->n_mlp || g->n_moe)
        if ((rc = want_str(p, "mlp_hidden_act", "relu2")) != LOOM_OK)
            return rc;
    if ((rc = get_pos(p, "intermediate_size", g->n_mlp > 0, 1, &g->mlp_inter)))
        return rc;
    if (!g->n_mlp)
        g->mlp_inter = 0;
    if (!g->n_moe)
        return LOOM_OK;

    if ((rc = get_pos(p, "n_routed_experts", 1, 0, &g->n_experts)) ||
        (rc = get_pos(p, "num_experts_per_tok", 1, 0, &g->top_k)) ||
        (rc = get_pos(p, "moe_intermediate_size", 1, 0, &g->moe_inter)) ||
        (rc = get_pos(p, "moe_shared_expert_intermediate_size", 1, 0,
                      &g->shared_inter)) ||
        (rc = get_pos(p, "n_group", 0, 1, &g->n_group)) ||
        (rc = get_pos(p, "topk_group", 0, 1, &g->topk_group)) ||
        (rc = loom_cfg_bool(p, "norm_topk_prob", 1, &g->norm_topk)))
        return rc;
    double scale;
    if ((rc = loom_cfg_real(p, "routed_scaling_factor", 1.0, &scale)) !=
        LOOM_OK)
        return rc;
    g->routed_scale = (float)scale;
    g->routed_scale_config = scale;
    const loom_json *lat = p->host->json_get(p->obj, "moe_latent_size");
    if (p->host->json_type(lat) > LOOM_JSON_NULL)
        return loom_err_set(p->err, LOOM_ERR_UNSUPPORTED,
                            "config.json: field moe_latent_size = %lld is not "
                            "supported (latent MoE projections)",
                            (long long)p->host->json_int(lat));
    if (g->n_experts % g->n_group != 0)
        return loom_err_set(p->err, LOOM_ERR_FORMAT,
                            "config.json: field n_group = %d does not divide "
                            "n_routed_experts = %d",
                            g->n_group, g->n_experts);
    if (g->topk_group > g->n_group)
        return loom_err_set(p->err, LOOM_ERR_FORMAT,
                            "config.json: field topk_group = %d exceeds "
                            "n_group = %d",
                            g->topk_group, g->n_group);
    int32_t per_group = g->n_experts / g->n_group;
    if (g->n_group > 1 && per_group < 2)
        return loom_err_set(p->err, LOOM_ERR_FORMAT,
                            "config.json: n_group = %d leaves %d expert per "
                            "group (group scores need 2)",
                            g->n_group, per_group);
    if (g->top_k > g->topk_group * per_group)
        return loom_err_set(p->err, LOOM_ERR_FORMAT,
                            "config.json: field num_experts_per_tok = %d "
                            "exceeds the %d experts of topk_group = %d groups",
                            g->top_k, g->topk_group * per_group, g->topk_group);
    return LOOM_OK;
}

loom_status nem_geometry_parse(const loom_host *host,
                               const loom_checkpoint *ckpt, nem_geometry *g,
                               loom_err *err)
{
    memset(g, 0, sizeof *g);
    loom_cfg p = {host, host->text_config(ckpt), "config.json", "", 1, err};
    if (host->json_type(p.obj) != LOOM_JSON_OBJECT)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "config.json: not a JSON object");
    loom_status rc;
    if ((rc = get_pos(&p, "vocab_size", 1, 0, &g->vocab)) ||
        (rc = get_pos(&p, "hidden_size", 1, 0, &g->hidden)) ||
        (rc = parse_pattern(&p, g)) || (rc = parse_mamba(&p, g)) ||
        (rc = parse_attention(&p, g)) || (rc = parse_ffn(&p, g)))
        return rc;

    /* the norm epsilon: current name, then the aliases some configs carry */
    double eps = 1e-5;
    const char *eps_keys[] = {"norm_eps", "rms_norm_eps", "layer_norm_epsilon"};
    for (int i = 0; i < 3; i++)
        if ((rc = loom_cfg_real(&p, eps_keys[i], eps, &eps)) != LOOM_OK)
            return rc;
    if (!(eps > 0) || eps > 1)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "config.json: field layer_norm_epsilon = %g must "
                            "be in (0, 1]",
                            eps);
    g->eps = (float)eps;
    g->eps_config = eps;

    int conv_bias_legacy;
    if ((rc = loom_cfg_bool(&p, "mamba_conv_bias", 1, &conv_bias_legacy)) ||
        (rc = loom_cfg_bool(&p, "use_conv_bias", conv_bias_legacy,
                            &g->use_conv_bias)) ||
        (rc = loom_cfg_bool(&p, "use_bias", 0, &g->use_bias)) ||
        (rc = loom_cfg_bool(&p, "tie_word_embeddings", 0, &g->tie_embeddings)))
        return rc;
    int32_t maxpos = 0;
    if ((rc = get_pos(&p, "max_position_embeddings", 0, 4096, &maxpos)))
        return rc;
    g->max_context = maxpos;
    int64_t bos;
    if ((rc = loom_cfg_int(&p, "bos_token_id", 0, -1, INT64_MIN, INT64_MAX,
                           &bos)))
        return rc;
    g->bos = (int32_t)bos;
    if ((rc = loom_cfg_eos_ids_check(host, ckpt, g->vocab, err)))
        return rc;
    loom_cfg_eos_ids(host, ckpt, g->vocab, g->eos, &g->n_eos);
    return LOOM_OK;
}

/* ---------------------------------------------------------------- report */

void nem_geometry_report(const nem_geometry *g, const loom_fields *out)
{
    void *c = out->ctx;
    out->str(c, "family", "nemotron_h");
    out->str(c, "hybrid_override_pattern", g->kinds);
    out->i64(c, "num_hidden_layers", g->n_layers);
    out->i64(c, "mamba_layers", g->n_mamba);
    out->i64(c, "attention_layers", g->n_attn);
    out->i64(c, "mlp_layers", g->n_mlp);
    out->i64(c, "moe_layers", g->n_moe);
    out->i64(c, "vocab_size", g->vocab);
    out->i64(c, "hidden_size", g->hidden);
    out->f64(c, "layer_norm_epsilon", g->eps_config);
    out->i64(c, "tie_word_embeddings", g->tie_embeddings);
    out->i64(c, "max_position_embeddings", g->max_context);
    if (g->n_mamba) {
        out->i64(c, "mamba_num_heads", g->m_heads);
        out->i64(c, "mamba_head_dim", g->m_head_dim);
        out->i64(c, "d_inner", g->d_inner);
        out->i64(c, "ssm_state_size", g->ssm_state);
        out->i64(c, "n_groups", g->n_groups);
        out->i64(c, "conv_kernel", g->conv_kernel);
        out->i64(c, "conv_dim", g->conv_dim);
        out->i64(c, "in_proj_dim", g->in_proj_dim);
        out->i64(c, "use_conv_bias", g->use_conv_bias);
        out->i64(c, "use_bias", g->use_bias);
    }
    if (g->n_attn) {
        out->i64(c, "num_attention_heads", g->n_q_heads);
        out->i64(c, "num_key_value_heads", g->n_kv_heads);
        out->i64(c, "head_dim", g->head_dim);
    }
    if (g->n_mlp)
        out->i64(c, "intermediate_size", g->mlp_inter);
    if (g->n_moe) {
        out->i64(c, "n_routed_experts", g->n_experts);
        out->i64(c, "num_experts_per_tok", g->top_k);
        out->i64(c, "moe_intermediate_size", g->moe_inter);
        out->i64(c, "moe_shared_expert_intermediate_size", g->shared_inter);
        out->i64(c, "n_group", g->n_group);
        out->i64(c, "topk_group", g->topk_group);
        out->i64(c, "norm_topk_prob", g->norm_topk);
        out->f64(c, "routed_scaling_factor", g->routed_scale_config);
    }
    loom_cfg_report_ids(out, "eos_token_id", g->eos, g->n_eos);
}
