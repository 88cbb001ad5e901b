/* The nemotron plugin's entry point: its descriptor, the probe that claims
 * Nemotron-H checkpoints, and the loom.family/1 vtable (open, close,
 * describe, caches, forward, commit) over the CPU path. */
#include "nemotron.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- probe */

static int32_t LOOM_ABI nem_probe(const loom_host *host,
                                  const loom_checkpoint *ckpt)
{
    const loom_json *cfg = host->config(ckpt);
    const loom_json *arch = host->json_get(cfg, "architectures");
    for (size_t i = 0; i < host->json_len(arch); i++) {
        const char *a = host->json_str(host->json_at(arch, i));
        if (a && !strcmp(a, "NemotronHForCausalLM"))
            return 100;
    }
    const char *mt = host->json_str(host->json_get(cfg, "model_type"));
    if (mt && !strcmp(mt, "nemotron_h"))
        return 50;
    return 0;
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
    free(m);
}

static loom_status LOOM_ABI nem_open(const loom_host *host,
                                     const loom_checkpoint *ckpt,
                                     const loom_model_options *opt,
                                     loom_model **model, loom_err *err)
{
    if (opt && opt->device == LOOM_DEVICE_CUDA)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "nemotron: no CUDA path yet (use --device cpu)");
    if (opt && opt->n_taps > 0)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "nemotron: tapped layers are not supported");
    loom_model *m = calloc(1, sizeof *m);
    if (!m)
        return loom_err_set(err, LOOM_ERR_NOMEM, "nemotron: out of memory");
    m->host = host;
    m->ckpt = ckpt;
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
    m->max_rows = opt && opt->max_rows > 0 ? opt->max_rows : 512;
    m->max_context =
        opt && opt->max_context > 0 ? opt->max_context : m->g.max_context;
    *model = m;
    return LOOM_OK;
}

static void LOOM_ABI nem_describe(const loom_model *m, loom_model_info *info)
{
    const nem_geometry *g = &m->g;
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
    info->caps = LOOM_CAP_WINDOWS;
    info->device = LOOM_DEVICE_CPU;
    info->compute_dtype = LOOM_DTYPE_F32;
}

static loom_status LOOM_ABI nem_cache_new_fn(loom_model *m, loom_cache **c,
                                             loom_err *err)
{
    return nem_cache_new(m, c, err);
}

static void LOOM_ABI nem_cache_reset_fn(loom_model *m, loom_cache *c)
{
    nem_cache_reset(m, c);
}

static void LOOM_ABI nem_cache_free_fn(loom_model *m, loom_cache *c)
{
    nem_cache_free(m, c);
}

static loom_status LOOM_ABI nem_forward_fn(loom_model *m,
                                           const loom_round *round,
                                           const loom_output *out,
                                           loom_err *err)
{
    return nem_forward(m, round, out, err);
}

static loom_status LOOM_ABI nem_commit_fn(loom_model *m, loom_cache *c,
                                          int32_t kept, loom_err *err)
{
    return nem_cache_commit(m, c, kept, err);
}

static const loom_family_i nem_family = {
    .struct_size = sizeof(loom_family_i),
    .geometry = nem_geometry_fn,
    .open = nem_open,
    .close = nem_close,
    .describe = nem_describe,
    .cache_new = nem_cache_new_fn,
    .cache_reset = nem_cache_reset_fn,
    .cache_free = nem_cache_free_fn,
    .forward = nem_forward_fn,
    .commit = nem_commit_fn,
};

static const void *LOOM_ABI nem_get_interface(const char *id)
{
    if (id && !strcmp(id, LOOM_FAMILY_ID))
        return &nem_family;
    return NULL;
}

static const loom_plugin nem_plugin = {
    .abi_major = LOOM_ABI_MAJOR,
    .abi_minor = LOOM_ABI_MINOR,
    .struct_size = sizeof(loom_plugin),
    .name = "nemotron",
    .version = "0.1.0",
    .kind = LOOM_PLUGIN_FAMILY,
    .description = "Nemotron-H hybrids (Mamba-2, attention, relu2 MLP, MoE): "
                   "CPU float32 path",
    .probe = nem_probe,
    .get_interface = nem_get_interface,
};

LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &nem_plugin;
}
