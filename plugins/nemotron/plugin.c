/* The nemotron plugin's entry point: its descriptor, the probe that claims
 * Nemotron-H checkpoints, and the loom.family/2 vtable (open, close,
 * describe, caches, forward, commit, the loom.target/1 extension) over the
 * CPU path. */
#include "nemotron.h"

#include <stdlib.h>
#include <string.h>

#include <loom/config.h>
#include <loom/entry.h>

/* ---------------------------------------------------------------- probe */

static int32_t LOOM_ABI nem_probe(const loom_host *host,
                                  const loom_checkpoint *ckpt)
{
    static const char *const archs[] = {"NemotronHForCausalLM"};
    static const char *const types[] = {"nemotron_h"};
    return loom_cfg_probe(host, ckpt, archs, 1, types, 1);
}

/* ---------------------------------------------------------------- family */

static loom_status LOOM_ABI nem_geometry_fn(const loom_host *host,
                                            const loom_checkpoint *ckpt,
                                            const loom_fields *out,
                                            loom_err *err)
{
    nem_geometry *g = malloc(sizeof *g);
    if (!g)
        return loom_err_set(err, LOOM_ERR_NOMEM, "geometry: out of memory");
    loom_status rc = nem_geometry_parse(host, ckpt, g, err);
    if (rc == LOOM_OK && out)
        nem_geometry_report(g, out);
    free(g);
    return rc;
}

static void LOOM_ABI nem_close(loom_model *m)
{
    if (!m)
        return;
    nem_weights_free(m);
    free(m->layer_kinds);
    free(m->taps);
    loom_round_plan_free(&m->plan);
    free(m);
}

static loom_status LOOM_ABI nem_open(const loom_host *host,
                                     const loom_checkpoint *ckpt,
                                     const loom_model_options *opt,
                                     loom_model **model, loom_err *err)
{
    /* an older host's options stop early: the rest take their defaults */
    uint32_t osz = opt ? opt->struct_size : 0;
    if (LOOM_HAS_FIELD(osz, loom_model_options, device) &&
        opt->device == LOOM_DEVICE_CUDA)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "nemotron: no CUDA path yet (use --device cpu)");
    int64_t max_context = LOOM_HAS_FIELD(osz, loom_model_options, max_context)
                              ? opt->max_context
                              : 0;
    int32_t max_rows =
        LOOM_HAS_FIELD(osz, loom_model_options, max_rows) ? opt->max_rows : 0;
    loom_model *m = calloc(1, sizeof *m);
    if (!m)
        return loom_err_set(err, LOOM_ERR_NOMEM, "nemotron: out of memory");
    m->host = host;
    m->ckpt = ckpt;
    loom_round_plan_init(&m->plan);
    loom_status rc = nem_geometry_parse(host, ckpt, &m->g, err);
    if (rc == LOOM_OK)
        rc = nem_weights_bind(m, err);
    if (rc != LOOM_OK) {
        nem_close(m);
        return rc;
    }
    m->layer_kinds = malloc((size_t)m->g.n_layers + 1);
    if (!m->layer_kinds) {
        nem_close(m);
        return loom_err_set(err, LOOM_ERR_NOMEM, "nemotron: out of memory");
    }
    for (int i = 0; i < m->g.n_layers; i++)
        m->layer_kinds[i] = m->g.kinds[i] == NEM_ATTN ? 'A' : m->g.kinds[i];
    m->layer_kinds[m->g.n_layers] = 0;
    m->max_rows = max_rows > 0 ? max_rows : 512;
    m->max_context = max_context > 0 ? max_context : m->g.max_context;
    m->rules = (loom_plan_rules){.who = "nemotron forward",
                                 .vocab = m->g.vocab,
                                 .max_context = m->max_context,
                                 .max_rows = m->max_rows,
                                 .hidden = m->g.hidden,
                                 .view_kind = LOOM_MEM_HOST,
                                 .cache_len = nem_cache_len};
    *model = m;
    return LOOM_OK;
}

static uint64_t nbytes(const loom_weight *w)
{
    return w->data ? loom_weight_nbytes(w) : 0;
}

/* Weight bytes one decode step reads (loom_model_info's field): the head,
 * not the embedding table; top_k of each MoE layer's experts. */
static uint64_t nem_weight_bytes_per_token(const loom_model *m)
{
    const nem_geometry *g = &m->g;
    uint64_t total = nbytes(&m->lm_head);
    for (int32_t i = 0; i < g->n_layers; i++) {
        const nem_layer *L = &m->layers[i];
        const loom_weight *all[] = {&L->in_proj, &L->out_proj, &L->wq,
                                    &L->wk,      &L->wv,       &L->wo,
                                    &L->up,      &L->down,     &L->router};
        for (size_t k = 0; k < sizeof all / sizeof *all; k++)
            total += nbytes(all[k]);
        for (int32_t e = 0; L->ex_up && e < g->top_k && e < g->n_experts; e++)
            total += nbytes(&L->ex_up[e]) + nbytes(&L->ex_down[e]);
    }
    return total;
}

static void LOOM_ABI nem_describe(const loom_model *m, loom_model_info *out)
{
    const nem_geometry *g = &m->g;
    /* filled whole here, then copied only as far as the caller's struct */
    loom_model_info full, *info = &full;
    memset(info, 0, sizeof *info);
    info->vocab = g->vocab;
    info->hidden = g->hidden;
    info->n_layers = g->n_layers;
    info->n_eos = g->n_eos;
    for (int i = 0; i < g->n_eos; i++)
        info->eos[i] = g->eos[i];
    info->max_context = m->max_context;
    info->layer_kinds = m->layer_kinds;
    info->cache_bytes_fixed = nem_cache_bytes_fixed(g);
    info->cache_bytes_per_token = nem_cache_bytes_per_token(g);
    info->max_rows = m->max_rows;
    info->caps = LOOM_CAP_WINDOWS | LOOM_CAP_TAPS;
    info->device = LOOM_DEVICE_CPU;
    info->compute_dtype = LOOM_DTYPE_F32;
    info->weight_bytes_per_token = nem_weight_bytes_per_token(m);
    size_t n = out->struct_size < sizeof full ? out->struct_size : sizeof full;
    if (n < sizeof full.struct_size)
        return;
    full.struct_size = (uint32_t)n;
    memcpy(out, &full, n);
}

static const loom_family_i nem_family = {
    .struct_size = sizeof(loom_family_i),
    .geometry = nem_geometry_fn,
    .open = nem_open,
    .close = nem_close,
    .describe = nem_describe,
    .cache_new = nem_cache_new,
    .cache_reset = nem_cache_reset,
    .cache_free = nem_cache_free,
    .forward = nem_forward,
    .commit = nem_cache_commit,
    .get_extension = nem_get_extension,
    .cache_copy = nem_cache_copy,
};

LOOM_PLUGIN_ENTRY(LOOM_PLUGIN_FAMILY, LOOM_FAMILY_ID, nem_family, "nemotron",
                  "0.1.0",
                  "Nemotron-H hybrids (Mamba-2, attention, relu2 MLP, MoE): "
                  "CPU float32 path",
                  nem_probe)
