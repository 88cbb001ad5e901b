/* The Qwen3.5 model's lifetime: open (geometry, weights, RoPE table, replay
 * log layout), close, and describe. Taps come later, through loom.target/1
 * (target.c). */
#include "gpu.h"

#include <stdlib.h>

void LOOM_ABI q35_close(loom_model *m)
{
    if (!m)
        return;
    q35_gpu_close(m);
    q35_weights_free(&m->w);
    q35_scratch_free(&m->s);
    free(m->slot);
    free(m->taps);
    free(m->inv_freq);
    loom_round_plan_free(&m->plan);
    free(m);
}

loom_status LOOM_ABI q35_open(const loom_host *host,
                              const loom_checkpoint *ckpt,
                              const loom_model_options *opt, loom_model **out,
                              loom_err *err)
{
    loom_model *m = calloc(1, sizeof *m);
    if (!m)
        return loom_err_set(err, LOOM_ERR_NOMEM, "qwen35: no memory");
    m->host = host;
    m->ckpt = ckpt;
    loom_round_plan_init(&m->plan);
    loom_status st = q35_geometry_parse(host, ckpt, &m->g, err);
    if (st != LOOM_OK)
        goto fail;
    /* an older host's options stop early: the rest take their defaults */
    uint32_t osz = opt ? opt->struct_size : 0;
    int32_t device = LOOM_HAS_FIELD(osz, loom_model_options, device)
                         ? opt->device
                         : LOOM_DEVICE_CPU;
    int64_t max_context = LOOM_HAS_FIELD(osz, loom_model_options, max_context)
                              ? opt->max_context
                              : 0;
    int32_t max_rows =
        LOOM_HAS_FIELD(osz, loom_model_options, max_rows) ? opt->max_rows : 0;
    st = q35_weights_bind(host, ckpt, &m->g, &m->w, err);
    if (st != LOOM_OK)
        goto fail;
    const q35_geometry *g = &m->g;
    m->slot = calloc((size_t)g->n_layers, sizeof *m->slot);
    m->inv_freq = calloc((size_t)g->rot_dim / 2, sizeof *m->inv_freq);
    if (!m->slot || !m->inv_freq) {
        st = loom_err_set(err, LOOM_ERR_NOMEM, "qwen35: no memory");
        goto fail;
    }
    for (int64_t i = 0; i < g->n_layers; i++)
        m->slot[i] = g->kinds[i] == 'L' ? m->n_lin++ : m->n_attn++;
    loom_cpu_rope_inv_freq(m->inv_freq, g->rot_dim, g->rope_theta);
    m->log.conv = 0;
    m->log.k = m->log.conv + q35_conv_dim(g);
    m->log.v = m->log.k + q35_key_dim(g);
    m->log.decay = m->log.v + q35_value_dim(g);
    m->log.beta = m->log.decay + g->lin_v_heads;
    m->log.size = m->log.beta + g->lin_v_heads;
    m->max_rows = max_rows > 0 ? max_rows : 512;
    m->max_context = max_context > 0 ? max_context : g->max_pos;
    m->rules = (loom_plan_rules){.who = "qwen35 forward",
                                 .vocab = g->vocab,
                                 .max_context = m->max_context,
                                 .max_rows = m->max_rows,
                                 .hidden = g->hidden,
                                 .view_kind = LOOM_MEM_HOST,
                                 .cache_len = q35_cache_len};
    /* cuda when asked for, or on auto when the engine opened a device */
    int on_cuda =
        device == LOOM_DEVICE_CUDA ||
        (device == LOOM_DEVICE_AUTO && host->cuda && host->cuda(host));
    if (on_cuda && (st = q35_gpu_open(m, opt, err)) != LOOM_OK) {
        if (device == LOOM_DEVICE_CUDA || st != LOOM_ERR_UNSUPPORTED)
            goto fail;
        host->log(host, LOOM_LOG_INFO, "%s; running on the CPU",
                  err ? err->msg : "no cuda");
        st = LOOM_OK;
    }
    *out = m;
    return LOOM_OK;
fail:
    q35_close(m);
    return st;
}

void LOOM_ABI q35_describe(const loom_model *m, loom_model_info *out)
{
    /* filled whole here, then copied only as far as the caller's struct */
    loom_model_info full, *info = &full;
    memset(info, 0, sizeof *info);
    info->vocab = (int32_t)m->g.vocab;
    info->hidden = (int32_t)m->g.hidden;
    info->n_layers = (int32_t)m->g.n_layers;
    info->n_eos = m->g.n_eos;
    memcpy(info->eos, m->g.eos, sizeof info->eos);
    info->max_context = m->max_context;
    info->layer_kinds = m->g.kinds;
    info->cache_bytes_fixed = q35_cache_fixed_bytes(m);
    info->cache_bytes_per_token = q35_cache_token_bytes(m);
    info->max_rows = m->max_rows;
    info->caps = LOOM_CAP_WINDOWS | LOOM_CAP_TAPS;
    info->device = m->gpu ? LOOM_DEVICE_CUDA : LOOM_DEVICE_CPU;
    info->compute_dtype = LOOM_DTYPE_F32;
    info->weight_bytes_per_token =
        q35_weight_bytes_per_token((q35_weights *)&m->w, &m->g);
    size_t n = out->struct_size < sizeof full ? out->struct_size : sizeof full;
    if (n < sizeof full.struct_size)
        return;
    full.struct_size = (uint32_t)n;
    memcpy(out, &full, n);
}
