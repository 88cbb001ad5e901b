/* The loom.target/1 extension of a Nemotron-H model on the CPU: what a
 * drafter reaches of it. embed is the forward's embedding lookup, head its
 * final norm (norm_f) and lm_head, and set_taps chooses the layers whose
 * outputs rows flagged LOOM_ROW_TAP copy (tap_layer in cpu.c). */
#include "nemotron.h"

#include <stdlib.h>
#include <string.h>

static loom_status LOOM_ABI nem_embed(loom_model *m, const int32_t *tokens,
                                      int32_t n, const loom_view *hidden,
                                      loom_err *err)
{
    const nem_geometry *g = &m->g;
    if (n <= 0)
        return LOOM_OK;
    if (!tokens)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "nemotron embed: %d tokens but no token array", n);
    loom_status rc = loom_view_check(hidden, LOOM_MEM_HOST, n, g->hidden,
                                     "nemotron embed", "hidden", err);
    if (rc != LOOM_OK)
        return rc;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= g->vocab)
            return loom_err_set(err, LOOM_ERR_RANGE,
                                "nemotron embed: token %d (index %d) is "
                                "outside the vocabulary of %d",
                                tokens[i], i, g->vocab);
    for (int32_t i = 0; i < n; i++)
        m->host->weight_row(&m->embed, tokens[i], loom_view_row_f32(hidden, i));
    return LOOM_OK;
}

/* lm_head of the rows, after the final norm when `normed` (head) or as
 * they are (lm_head, for drafters that norm their own output). */
static loom_status nem_project(loom_model *m, const loom_view *hidden,
                               int32_t n, const loom_view *logits, int normed,
                               loom_err *err)
{
    const nem_geometry *g = &m->g;
    int64_t H = g->hidden;
    if (n <= 0)
        return LOOM_OK;
    loom_status rc = loom_view_check(hidden, LOOM_MEM_HOST, n, H,
                                     "nemotron head", "hidden", err);
    if (rc == LOOM_OK)
        rc = loom_view_check(logits, LOOM_MEM_HOST, n, g->vocab,
                             "nemotron head", "logits", err);
    if (rc != LOOM_OK)
        return rc;
    /* the normed rows, dense, as the forward hands them to lm_head */
    float *xn = malloc((size_t)n * (size_t)H * sizeof *xn);
    if (!xn)
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "nemotron head: no memory for %d rows", n);
    for (int32_t i = 0; i < n; i++) {
        if (normed)
            loom_cpu_rmsnorm(xn + (int64_t)i * H, loom_view_row_f32(hidden, i),
                             m->norm_f, H, g->eps);
        else
            memcpy(xn + (int64_t)i * H, loom_view_row_f32(hidden, i),
                   (size_t)H * sizeof *xn);
    }
    loom_cpu_matmul_view(m->host, &m->lm_head, xn, n, logits);
    free(xn);
    return LOOM_OK;
}

static loom_status LOOM_ABI nem_head(loom_model *m, const loom_view *hidden,
                                     int32_t n, const loom_view *logits,
                                     loom_err *err)
{
    return nem_project(m, hidden, n, logits, 1, err);
}

static loom_status LOOM_ABI nem_lm_head(loom_model *m, const loom_view *hidden,
                                        int32_t n, const loom_view *logits,
                                        loom_err *err)
{
    return nem_project(m, hidden, n, logits, 0, err);
}

static loom_status LOOM_ABI nem_set_taps(loom_model *m, const int32_t *layers,
                                         int32_t n, loom_err *err)
{
    if (n < 0 || (n > 0 && !layers))
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "nemotron set_taps: %d layers%s", n,
                            n < 0 ? "" : " but no layer array");
    for (int32_t i = 0; i < n; i++)
        if (layers[i] < 0 || layers[i] >= m->g.n_layers)
            return loom_err_set(err, LOOM_ERR_RANGE,
                                "nemotron set_taps: tapped layer %d is not "
                                "one of the %d layers",
                                layers[i], m->g.n_layers);
    int32_t *taps = NULL;
    if (n > 0) {
        taps = malloc((size_t)n * sizeof *taps);
        if (!taps)
            return loom_err_set(err, LOOM_ERR_NOMEM,
                                "nemotron set_taps: out of memory");
        memcpy(taps, layers, (size_t)n * sizeof *taps);
    }
    free(m->taps);
    m->taps = taps;
    m->n_taps = n;
    m->rules.n_taps = n;
    return LOOM_OK;
}

static const loom_target_i nem_target = {
    .struct_size = sizeof(loom_target_i),
    .embed = nem_embed,
    .head = nem_head,
    .set_taps = nem_set_taps,
    .lm_head = nem_lm_head,
};

const void *LOOM_ABI nem_get_extension(const loom_model *m, const char *id)
{
    (void)m;
    if (id && strcmp(id, LOOM_TARGET_ID) == 0)
        return &nem_target;
    return NULL;
}
