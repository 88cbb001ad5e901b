/* The loom.target/1 extension of a Qwen3.5 model: what a drafter reaches of
 * it. embed is the forward's embedding lookup, head its final norm and
 * lm_head, and set_taps chooses the layers whose outputs rows flagged
 * LOOM_ROW_TAP copy (q35_tap in cpu.c, the gather in gpu_forward.c). On a
 * device model the views are host memory still: embed reads the host's
 * copy of the table, head copies the rows in and the logits out. */
#include "gpu.h"

#include <stdlib.h>

static loom_status LOOM_ABI q35_embed(loom_model *m, const int32_t *tokens,
                                      int32_t n, const loom_view *hidden,
                                      loom_err *err)
{
    const q35_geometry *g = &m->g;
    if (n <= 0)
        return LOOM_OK;
    if (!tokens)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "qwen35 embed: %d tokens but no token array", n);
    loom_status st = loom_view_check(hidden, LOOM_MEM_HOST, n, g->hidden,
                                     "qwen35 embed", "hidden", err);
    if (st != LOOM_OK)
        return st;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= g->vocab)
            return loom_err_set(err, LOOM_ERR_RANGE,
                                "qwen35 embed: token %d (index %d) is outside "
                                "the vocabulary of %lld",
                                tokens[i], i, (long long)g->vocab);
    for (int32_t i = 0; i < n; i++)
        m->host->weight_row(&m->w.embed, tokens[i],
                            loom_view_row_f32(hidden, i));
    return LOOM_OK;
}

/* lm_head of the rows, after the final norm when `normed` (head) or as
 * they are (lm_head, for drafters that norm their own output). */
static loom_status q35_project(loom_model *m, const loom_view *hidden,
                               int32_t n, const loom_view *logits, int normed,
                               loom_err *err)
{
    const q35_geometry *g = &m->g;
    int64_t H = g->hidden;
    if (n <= 0)
        return LOOM_OK;
    loom_status st = loom_view_check(hidden, LOOM_MEM_HOST, n, H, "qwen35 head",
                                     "hidden", err);
    if (st == LOOM_OK)
        st = loom_view_check(logits, LOOM_MEM_HOST, n, g->vocab, "qwen35 head",
                             "logits", err);
    if (st != LOOM_OK)
        return st;
    if (m->gpu) {
        /* extension calls do not pass the dispatcher */
        m->gpu->cu->ctxSetCurrent(m->gpu->cu->context);
        return q35_gpu_head(m, hidden, n, logits, err);
    }
    /* the normed rows, dense, as the forward hands them to lm_head */
    float *xn = malloc((size_t)n * (size_t)H * sizeof *xn);
    if (!xn)
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "qwen35 head: no memory for %d rows", n);
    for (int32_t i = 0; i < n; i++) {
        if (normed)
            loom_cpu_rmsnorm(xn + (int64_t)i * H, loom_view_row_f32(hidden, i),
                             m->w.norm, H, (float)g->eps);
        else
            memcpy(xn + (int64_t)i * H, loom_view_row_f32(hidden, i),
                   (size_t)H * sizeof *xn);
    }
    loom_cpu_matmul_view(m->host, &m->w.lm_head, xn, n, logits);
    free(xn);
    return LOOM_OK;
}

static loom_status LOOM_ABI q35_head(loom_model *m, const loom_view *hidden,
                                     int32_t n, const loom_view *logits,
                                     loom_err *err)
{
    return q35_project(m, hidden, n, logits, 1, err);
}

static loom_status LOOM_ABI q35_lm_head(loom_model *m, const loom_view *hidden,
                                        int32_t n, const loom_view *logits,
                                        loom_err *err)
{
    return q35_project(m, hidden, n, logits, 0, err);
}

static loom_status LOOM_ABI q35_set_taps(loom_model *m, const int32_t *layers,
                                         int32_t n, loom_err *err)
{
    if (n < 0 || (n > 0 && !layers))
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "qwen35 set_taps: %d layers%s", n,
                            n < 0 ? "" : " but no layer array");
    for (int32_t i = 0; i < n; i++)
        if (layers[i] < 0 || layers[i] >= m->g.n_layers)
            return loom_err_set(err, LOOM_ERR_RANGE,
                                "qwen35 set_taps: tapped layer %d is not one "
                                "of the %lld layers",
                                layers[i], (long long)m->g.n_layers);
    int32_t *taps = NULL;
    if (n > 0) {
        taps = malloc((size_t)n * sizeof *taps);
        if (!taps)
            return loom_err_set(err, LOOM_ERR_NOMEM,
                                "qwen35 set_taps: no memory");
        memcpy(taps, layers, (size_t)n * sizeof *taps);
    }
    if (m->gpu) {
        /* the captured forwards gather the old layers */
        const loom_cuda *cu = m->gpu->cu;
        cu->ctxSetCurrent(cu->context);
        loom_status st = q35_gpu_check(
            m->gpu, cu->streamSynchronize(cu->stream), "qwen35 set_taps", err);
        if (st != LOOM_OK) {
            free(taps);
            return st;
        }
        q35_gpu_graphs_free(m->gpu);
    }
    free(m->taps);
    m->taps = taps;
    m->n_taps = n;
    m->rules.n_taps = n;
    return LOOM_OK;
}

static const loom_target_i q35_target = {
    .struct_size = sizeof(loom_target_i),
    .embed = q35_embed,
    .head = q35_head,
    .set_taps = q35_set_taps,
    .lm_head = q35_lm_head,
};

const void *LOOM_ABI q35_get_extension(const loom_model *m, const char *id)
{
    (void)m;
    if (id && strcmp(id, LOOM_TARGET_ID) == 0)
        return &q35_target;
    return NULL;
}
