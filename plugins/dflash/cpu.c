/* The float32 CPU forward of the DFlash drafter (docs/specs/dflash.md
 * section 1): the fusion of the target's taps, each layer's context K/V, and
 * the one parallel forward over a block [pending token, mask x (B-1)] whose
 * queries see the stream's whole context and the whole block. Linear layers
 * run over all block rows of all streams at once through host->matmul;
 * attention runs in parallel across (row, head). */
#include "dflash.h"

#include <stdlib.h>

static float *rows_alloc(int64_t rows, int64_t width)
{
    return malloc((size_t)rows * (size_t)width * sizeof(float));
}

void dflash_fuse(const loom_drafter *d, const float *features, int64_t n,
                 float *c)
{
    const dflash_geometry *g = &d->g;
    d->host->matmul(d->host, &d->w.fc, features, c, n);
    for (int64_t i = 0; i < n; i++)
        loom_cpu_rmsnorm(c + i * g->hidden, c + i * g->hidden, d->w.hidden_norm,
                         g->hidden, (float)g->rms_eps);
}

/* Per-head RMSNorm (q_norm / k_norm) then NeoX RoPE at `pos`, in place on
 * one row of n_heads heads. */
static void norm_rope(const loom_drafter *d, float *x, int64_t n_heads,
                      const float *w, int64_t pos)
{
    const dflash_geometry *g = &d->g;
    for (int64_t h = 0; h < n_heads; h++)
        loom_cpu_rmsnorm(x + h * g->head_dim, x + h * g->head_dim, w,
                         g->head_dim, (float)g->rms_eps);
    loom_cpu_rope_neox(x, n_heads, g->head_dim, g->head_dim, d->inv_freq, pos);
}

void dflash_context_kv(const loom_drafter *d, int32_t l, const float *c,
                       const int32_t *pos, int64_t n, float *k, float *v)
{
    const dflash_geometry *g = &d->g;
    const dflash_layer *L = &d->w.layers[l];
    int64_t kvw = (int64_t)g->n_kv_heads * g->head_dim;
    d->host->matmul(d->host, &L->k, c, k, n);
    d->host->matmul(d->host, &L->v, c, v, n);
    for (int64_t i = 0; i < n; i++)
        norm_rope(d, k + i * kvw, g->n_kv_heads, L->k_norm, pos[i]);
}

/* One attention layer over the block rows: the block's K/V sit in each
 * stream's store right after its context (positions len .. len+B), so a
 * query's keys are one contiguous range of the store. */
typedef struct attn_job {
    const loom_drafter *d;
    loom_draft_stream *const *streams;
    int32_t layer;
    const float *q; /* [R, n_heads*head_dim] */
    float *out;     /* [R, n_heads*head_dim] */
} attn_job;

static void LOOM_ABI attn_range(void *ctx, int64_t begin, int64_t end)
{
    const attn_job *j = ctx;
    const dflash_geometry *g = &j->d->g;
    int64_t B = g->block_size, hd = g->head_dim, nh = g->n_heads;
    int64_t group = nh / g->n_kv_heads;
    int32_t causal = g->causal[j->layer], window = g->window[j->layer];
    float scale = 1.0f / sqrtf((float)hd);
    for (int64_t t = begin; t < end; t++) {
        int64_t r = t / nh, h = t % nh;
        const loom_draft_stream *s = j->streams[r / B];
        const loom_cpu_kv *kv = &s->kv[j->layer];
        int64_t qp = s->len + r % B;
        /* keys [lo, hi): all context and block, cut by causality/window */
        int64_t lo = 0, hi = s->len + B;
        if (causal)
            hi = qp + 1;
        if (window > 0) {
            if (qp - window + 1 > lo)
                lo = qp - window + 1;
            if (qp + window < hi)
                hi = qp + window;
        }
        int64_t off = lo * kv->width + (h / group) * hd;
        loom_cpu_attend_head_blocked(
            j->out + r * nh * hd + h * hd, j->q + r * nh * hd + h * hd,
            kv->k + off, kv->v + off, hi - lo, kv->width, hd, scale);
    }
}

loom_status dflash_block_forward(const loom_drafter *d,
                                 loom_draft_stream *const *streams,
                                 int32_t n_streams, float *x, loom_err *err)
{
    const dflash_geometry *g = &d->g;
    const loom_host *host = d->host;
    int64_t B = g->block_size, R = (int64_t)n_streams * B, H = g->hidden;
    int64_t qw = (int64_t)g->n_heads * g->head_dim;
    int64_t kvw = (int64_t)g->n_kv_heads * g->head_dim;
    float eps = (float)g->rms_eps;
    float *xn = rows_alloc(R, H), *q = rows_alloc(R, qw);
    float *k = rows_alloc(R, kvw), *v = rows_alloc(R, kvw);
    float *att = rows_alloc(R, qw), *o = rows_alloc(R, H);
    float *gate = rows_alloc(R, g->ffn), *up = rows_alloc(R, g->ffn);
    loom_status st = LOOM_OK;
    if (!xn || !q || !k || !v || !att || !o || !gate || !up) {
        st = loom_err_set(err, LOOM_ERR_NOMEM,
                          "%s: no memory for %lld block rows", d->path,
                          (long long)R);
        goto done;
    }
    for (int32_t l = 0; l < g->n_layers; l++) {
        const dflash_layer *L = &d->w.layers[l];
        for (int64_t r = 0; r < R; r++)
            loom_cpu_rmsnorm(xn + r * H, x + r * H, L->in_norm, H, eps);
        host->matmul(host, &L->q, xn, q, R);
        host->matmul(host, &L->k, xn, k, R);
        host->matmul(host, &L->v, xn, v, R);
        for (int64_t r = 0; r < R; r++) {
            loom_draft_stream *s = streams[r / B];
            int64_t pos = s->len + r % B;
            norm_rope(d, q + r * qw, g->n_heads, L->q_norm, pos);
            norm_rope(d, k + r * kvw, g->n_kv_heads, L->k_norm, pos);
            loom_cpu_kv_put(&s->kv[l], pos, k + r * kvw, v + r * kvw);
        }
        attn_job job = {d, streams, l, q, att};
        host->parallel_for(host, R * g->n_heads, attn_range, &job);
        host->matmul(host, &L->o, att, o, R);
        for (int64_t r = 0; r < R; r++)
            loom_cpu_add(x + r * H, o + r * H, H);

        for (int64_t r = 0; r < R; r++)
            loom_cpu_rmsnorm(xn + r * H, x + r * H, L->post_norm, H, eps);
        host->matmul(host, &L->gate, xn, gate, R);
        host->matmul(host, &L->up, xn, up, R);
        loom_cpu_swiglu_rows(host, gate, up, R, g->ffn);
        host->matmul(host, &L->down, gate, o, R);
        for (int64_t r = 0; r < R; r++)
            loom_cpu_add(x + r * H, o + r * H, H);
    }
    for (int64_t r = 0; r < R; r++)
        loom_cpu_rmsnorm(x + r * H, x + r * H, d->w.norm, H, eps);
done:
    /* the block's K/V never stay: the store holds the context only */
    for (int32_t i = 0; i < n_streams; i++)
        for (int32_t l = 0; l < g->n_layers; l++)
            loom_cpu_kv_truncate(&streams[i]->kv[l], streams[i]->len);
    free(xn);
    free(q);
    free(k);
    free(v);
    free(att);
    free(o);
    free(gate);
    free(up);
    return st;
}
