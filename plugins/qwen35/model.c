/* The Qwen3.5 model's lifetime: open (geometry, weights, RoPE table, replay
 * log layout), close, and describe. */
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
    free(m->streams);
    free(m->stream_rows);
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
    loom_status st = q35_geometry_parse(host, ckpt, &m->g, err);
    if (st != LOOM_OK)
        goto fail;
    if (opt && opt->n_taps > 0) {
        if (!opt->taps) {
            st = loom_err_set(err, LOOM_ERR_INVALID,
                              "qwen35: %d taps asked with no layer list",
                              opt->n_taps);
            goto fail;
        }
        m->taps = malloc((size_t)opt->n_taps * sizeof *m->taps);
        if (!m->taps) {
            st = loom_err_set(err, LOOM_ERR_NOMEM, "qwen35: no memory");
            goto fail;
        }
        for (int32_t i = 0; i < opt->n_taps; i++) {
            if (opt->taps[i] < 0 || opt->taps[i] >= m->g.n_layers) {
                st = loom_err_set(err, LOOM_ERR_RANGE,
                                  "qwen35: tapped layer %d is not one of "
                                  "the %lld layers",
                                  opt->taps[i], (long long)m->g.n_layers);
                goto fail;
            }
            m->taps[i] = opt->taps[i];
        }
        m->n_taps = opt->n_taps;
    }
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
    m->max_rows = opt && opt->max_rows > 0 ? opt->max_rows : 512;
    m->max_context =
        opt && opt->max_context > 0 ? opt->max_context : g->max_pos;
    /* cuda when asked for, or on auto when the engine opened a device */
    int on_cuda =
        opt &&
        (opt->device == LOOM_DEVICE_CUDA ||
         (opt->device == LOOM_DEVICE_AUTO && host->cuda && host->cuda(host)));
    if (on_cuda && (st = q35_gpu_open(m, opt, err)) != LOOM_OK) {
        if (opt->device == LOOM_DEVICE_CUDA || st != LOOM_ERR_UNSUPPORTED)
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

void LOOM_ABI q35_describe(const loom_model *m, loom_model_info *info)
{
    uint32_t size = info->struct_size;
    memset(info, 0, sizeof *info);
    info->struct_size = size ? size : (uint32_t)sizeof *info;
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
}
