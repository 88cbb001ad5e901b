/* A DFlash stream's life: absorbing the target's tapped features of
 * committed rows as context K/V, and drafting a block for each stream:
 * embed [pending token, mask x (B-1)] with the target's table, one block
 * forward, the target's lm_head (no final norm: the drafter norms its own
 * output) on rows 1..B-1 (row j predicts position p+j). */
#include "dflash.h"

#include <stdlib.h>

#include <loom/round_plan.h>

/* Reports the stream's K/V bytes to the host as they change. */
static loom_status account(loom_drafter *d, loom_draft_stream *s, loom_err *err)
{
    int64_t bytes = 0;
    for (int32_t l = 0; l < d->g.n_layers; l++)
        bytes += (int64_t)loom_cpu_kv_bytes(&s->kv[l]);
    loom_status st = d->host->account(d->host, LOOM_MEM_HOST, LOOM_MEM_DRAFTER,
                                      bytes - s->accounted, err);
    if (st == LOOM_OK)
        s->accounted = bytes;
    return st;
}

loom_status dflash_stream_new(loom_drafter *d, loom_draft_stream **out,
                              loom_err *err)
{
    loom_draft_stream *s = calloc(1, sizeof *s);
    if (!s)
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: no memory for a stream",
                            d->path);
    for (int32_t l = 0; l < d->g.n_layers; l++)
        loom_cpu_kv_init(&s->kv[l], (int64_t)d->g.n_kv_heads * d->g.head_dim);
    *out = s;
    return LOOM_OK;
}

void dflash_stream_free(loom_drafter *d, loom_draft_stream *s)
{
    if (!s)
        return;
    for (int32_t l = 0; l < d->g.n_layers; l++)
        loom_cpu_kv_free(&s->kv[l]);
    d->host->account(d->host, LOOM_MEM_HOST, LOOM_MEM_DRAFTER, -s->accounted,
                     NULL);
    free(s);
}

loom_status dflash_absorb(loom_drafter *d, loom_draft_stream *s,
                          const loom_view *features, const int32_t *positions,
                          int32_t n, loom_err *err)
{
    const dflash_geometry *g = &d->g;
    int64_t fw = (int64_t)g->n_taps * g->target_hidden;
    int64_t kvw = (int64_t)g->n_kv_heads * g->head_dim;
    if (n <= 0)
        return LOOM_OK;
    loom_status st = loom_view_check(features, LOOM_MEM_HOST, n, fw,
                                     "dflash absorb", "features", err);
    if (st != LOOM_OK)
        return st;
    if (!positions)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "dflash absorb: %d rows but no positions", n);
    /* rows continue the context, or replace its tail (a re-absorb) */
    int64_t p0 = positions[0];
    if (p0 < 0 || p0 > s->len)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "dflash absorb: row 0 is at position %lld, but the "
                            "stream's context ends at %lld",
                            (long long)p0, (long long)s->len);
    for (int32_t i = 1; i < n; i++)
        if (positions[i] != p0 + i)
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "dflash absorb: row %d is at position %d, not "
                                "%lld (rows must be consecutive)",
                                i, positions[i], (long long)(p0 + i));
    for (int32_t l = 0; l < g->n_layers; l++)
        if ((st = loom_cpu_kv_reserve(&s->kv[l], p0 + n, err)) != LOOM_OK)
            return st;
    st = account(d, s, err);
    if (st != LOOM_OK)
        return st;

    float *dense = malloc((size_t)n * (size_t)fw * sizeof *dense);
    float *c = malloc((size_t)n * (size_t)g->hidden * sizeof *c);
    float *k = malloc((size_t)n * (size_t)kvw * sizeof *k);
    float *v = malloc((size_t)n * (size_t)kvw * sizeof *v);
    if (!dense || !c || !k || !v) {
        st = loom_err_set(err, LOOM_ERR_NOMEM,
                          "dflash absorb: no memory for %d rows", n);
        goto done;
    }
    for (int32_t i = 0; i < n; i++)
        memcpy(dense + (int64_t)i * fw, loom_view_row_f32(features, i),
               (size_t)fw * sizeof *dense);
    dflash_fuse(d, dense, n, c);
    for (int32_t l = 0; l < g->n_layers; l++) {
        dflash_context_kv(d, l, c, positions, n, k, v);
        loom_cpu_kv_truncate(&s->kv[l], p0);
        for (int32_t i = 0; i < n; i++)
            loom_cpu_kv_put(&s->kv[l], p0 + i, k + (int64_t)i * kvw,
                            v + (int64_t)i * kvw);
    }
    s->len = p0 + n;
done:
    free(dense);
    free(c);
    free(k);
    free(v);
    return st;
}

static loom_status check_draft(const loom_drafter *d,
                               loom_draft_stream *const *streams,
                               const int32_t *last, int32_t n_streams,
                               const loom_proposals *out, loom_err *err)
{
    if (!out || out->struct_size < sizeof *out || !out->tokens ||
        !out->parents || !out->n_out || out->max < 1)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "dflash draft: the proposals are not ABI 2.0's "
                            "(struct_size, tokens, parents, n_out, max >= 1)");
    if (n_streams > 0 && (!streams || !last))
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "dflash draft: %d streams but no stream or token "
                            "array",
                            n_streams);
    for (int32_t i = 0; i < n_streams; i++) {
        if (!streams[i])
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "dflash draft: stream %d is NULL", i);
        for (int32_t j = 0; j < i; j++)
            if (streams[j] == streams[i])
                return loom_err_set(err, LOOM_ERR_INVALID,
                                    "dflash draft: streams %d and %d are the "
                                    "same stream",
                                    j, i);
        if (last[i] < 0 || last[i] >= d->g.vocab)
            return loom_err_set(err, LOOM_ERR_RANGE,
                                "stream %d: last token %d is outside the "
                                "vocabulary of %d",
                                i, last[i], d->g.vocab);
    }
    return LOOM_OK;
}

loom_status dflash_draft(loom_drafter *d, loom_draft_stream *const *streams,
                         const int32_t *last, int32_t n_streams,
                         const loom_proposals *out, loom_err *err)
{
    const dflash_geometry *g = &d->g;
    loom_status st = check_draft(d, streams, last, n_streams, out, err);
    if (st != LOOM_OK || n_streams == 0)
        return st;
    int64_t B = g->block_size, H = g->hidden, V = g->vocab;
    int64_t R = (int64_t)n_streams * B;
    int32_t n_prop = out->max < B - 1 ? out->max : (int32_t)(B - 1);
    int64_t P = (int64_t)n_streams * n_prop;
    int want_logits = out->logits.ndim > 0;
    if (want_logits) {
        st = loom_view_check(&out->logits, LOOM_MEM_HOST,
                             (int64_t)n_streams * out->max, V, "dflash draft",
                             "logits", err);
        if (st != LOOM_OK)
            return st;
    }

    /* room for the block's K/V after each context, accounted beforehand */
    for (int32_t i = 0; i < n_streams; i++) {
        for (int32_t l = 0; l < g->n_layers; l++)
            if ((st = loom_cpu_kv_reserve(&streams[i]->kv[l],
                                          streams[i]->len + B, err)) != LOOM_OK)
                return st;
        if ((st = account(d, streams[i], err)) != LOOM_OK)
            return st;
    }

    int32_t *tokens = malloc((size_t)R * sizeof *tokens);
    float *x = malloc((size_t)R * (size_t)H * sizeof *x);
    float *rows = malloc((size_t)P * (size_t)H * sizeof *rows);
    float *logits = malloc((size_t)P * (size_t)V * sizeof *logits);
    if (!tokens || !x || !rows || !logits) {
        st = loom_err_set(err, LOOM_ERR_NOMEM,
                          "dflash draft: no memory for %d streams", n_streams);
        goto done;
    }
    for (int64_t r = 0; r < R; r++)
        tokens[r] = r % B == 0 ? last[r / B] : g->mask_token;
    loom_view xv = loom_view_host_f32(x, R, H);
    st = d->ext->embed(d->target, tokens, (int32_t)R, &xv, err);
    if (st == LOOM_OK)
        st = dflash_block_forward(d, streams, n_streams, x, err);
    if (st != LOOM_OK)
        goto done;
    /* row 0 predicts nothing: rows 1..n_prop of each block go to the head */
    for (int32_t i = 0; i < n_streams; i++)
        memcpy(rows + (int64_t)i * n_prop * H, x + ((int64_t)i * B + 1) * H,
               (size_t)n_prop * (size_t)H * sizeof *rows);
    loom_view hv = loom_view_host_f32(rows, P, H);
    loom_view lv = loom_view_host_f32(logits, P, V);
    st = d->ext->lm_head(d->target, &hv, (int32_t)P, &lv, err);
    if (st != LOOM_OK)
        goto done;
    for (int32_t i = 0; i < n_streams; i++) {
        for (int32_t j = 0; j < n_prop; j++) {
            const float *lg = logits + ((int64_t)i * n_prop + j) * V;
            int64_t at = (int64_t)i * out->max + j;
            out->tokens[at] = (int32_t)loom_cpu_argmax(lg, V);
            out->parents[at] = -1;
            if (want_logits)
                memcpy(loom_view_row_f32(&out->logits, at), lg,
                       (size_t)V * sizeof *lg);
        }
        out->n_out[i] = n_prop;
    }
done:
    free(tokens);
    free(x);
    free(rows);
    free(logits);
    return st;
}
