/* The Nemotron-H forward on the CPU: one round of rows (several streams,
 * each a run of consecutive positions) through the M / * / - / E blocks, in
 * float32 with weights converted as host->matmul reads them.
 *
 *   h = E[token];  for each layer: h += Mixer(RMSNorm(h));
 *   logits = lm_head . RMSNorm_f(h)        (only for rows that ask)
 *
 * Linear layers run over all rows of the round at once (host->matmul; a
 * prompt chunk's rows through host->matmul_prompt, loom_cpu_matmul_rows);
 * what is sequential in time (the conv tail, the SSM scan, K/V appends)
 * runs per stream in row order, with the SSM scan parallel over
 * (stream, head) pairs (a prompt chunk's in chunks of rows, its state-space
 * dual form) and attention over (row, head) pairs. Rows flagged
 * LOOM_ROW_TAP copy the outputs of the tapped layers. Every row's
 * arithmetic depends only on its own stream, so a stream's logits are the
 * same whatever shares its round. Nothing in a cache changes before every
 * check and allocation has succeeded. */
#include "nemotron.h"

#include <loom/cpu_ssm.h>

#include <stdlib.h>
#include <string.h>

typedef struct fwd {
    loom_model *m;
    const loom_host *host;
    const nem_geometry *g;
    const loom_round *round; /* its rows through loom_round_row */
    int32_t n;               /* rows */

    /* the rows grouped by stream, each stream's in position order */
    const loom_round_plan *p;

    float *x;       /* [n, H] residual stream */
    float *xn;      /* [n, H] normed block input */
    float *mix;     /* [n, H] block output */
    float *a;       /* [n, wide]: in_proj / q / up / router outputs */
    float *b;       /* [n, wide2]: conv outputs / k / shared expert */
    float *c;       /* [n, wide3]: scan outputs / v / attention outputs */
    float *dt;      /* [n, nh] */
    float *ex;      /* [n, H + moe_inter + H]: an expert's gathered rows */
    int32_t *sel;   /* [n, top_k] chosen experts */
    float *selw;    /* [n, top_k] their weights */
    int32_t *erows; /* [n] rows that chose the current expert */
    float *ewts;    /* [n] and their weights for it */
    float *scores;  /* [n_slots, max_ctx] attention scratch */
    int64_t max_ctx;
    int32_t n_slots;

    uint8_t *prompt; /* [n] rows of prompt chunks (loom_cpu_prompt_rows) */
    float *ssd;      /* [n_slots, ssd_work] the chunked scan's work, NULL
                        when no prompt chunk's rows are consecutive */
    int64_t ssd_work;
} fwd;

/* Rows a chunk of a prompt chunk's scan holds (loom_cpu_ssm_chunk): its
 * 2 N P products a row do not shrink with longer chunks and the C B^T
 * ones grow, so on the 2-core Zen 4 it was measured on 8 to 16 rows were
 * the fastest (16: 0.45 of the row step's time, 32: 0.5, 64: 0.6). */
#define NEM_SSD_ROWS 16

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* ---------------------------------------------------------------- setup */

static void fwd_free(fwd *f)
{
    free(f->x);
    free(f->xn);
    free(f->mix);
    free(f->a);
    free(f->b);
    free(f->c);
    free(f->dt);
    free(f->ex);
    free(f->sel);
    free(f->selw);
    free(f->erows);
    free(f->ewts);
    free(f->scores);
    free(f->prompt);
    free(f->ssd);
}

static loom_status fwd_alloc(fwd *f, loom_err *err)
{
    const nem_geometry *g = f->g;
    size_t n = (size_t)f->n;
    int64_t q = (int64_t)g->n_q_heads * g->head_dim;
    int64_t kv = (int64_t)g->n_kv_heads * g->head_dim;
    int64_t wa =
        max64(max64(g->in_proj_dim, q), max64(g->mlp_inter, g->n_experts));
    int64_t wb = max64(max64(g->conv_dim, kv), g->shared_inter);
    int64_t wc = max64(max64(g->d_inner, kv), max64(q, g->hidden));
    f->max_ctx = f->p->max_len;
    f->n_slots = f->host->n_threads(f->host);
    if (f->n_slots < 1)
        f->n_slots = 1;
    f->x = malloc(n * g->hidden * sizeof(float));
    f->xn = malloc(n * g->hidden * sizeof(float));
    f->mix = malloc(n * g->hidden * sizeof(float));
    f->a = malloc(n * (size_t)max64(wa, 1) * sizeof(float));
    f->b = malloc(n * (size_t)max64(wb, 1) * sizeof(float));
    f->c = malloc(n * (size_t)max64(wc, 1) * sizeof(float));
    f->dt = malloc(n * (size_t)max64(g->m_heads, 1) * sizeof(float));
    f->ex = malloc(n * (size_t)(2 * g->hidden + g->moe_inter) * sizeof(float));
    f->sel = malloc(n * (size_t)max64(g->top_k, 1) * sizeof(int32_t));
    f->selw = malloc(n * (size_t)max64(g->top_k, 1) * sizeof(float));
    f->erows = malloc(n * sizeof(int32_t));
    f->ewts = malloc(n * sizeof(float));
    f->prompt = malloc(n);
    f->scores = malloc((size_t)f->n_slots * (size_t)max64(f->max_ctx, 1) *
                       sizeof(float));
    if (!f->x || !f->xn || !f->mix || !f->a || !f->b || !f->c || !f->dt ||
        !f->ex || !f->sel || !f->selw || !f->erows || !f->ewts || !f->scores ||
        !f->prompt)
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "forward: out of memory for %d rows", f->n);
    /* the chunked scan's work, when a prompt chunk can take it (heads past
     * its bounds keep the row step) */
    int chunked = 0;
    for (int32_t s = 0; s < f->p->n_streams; s++)
        chunked |= loom_cpu_chunk_first(f->p, &f->p->streams[s]) >= 0;
    if (chunked && g->m_heads > 0 && g->m_head_dim <= LOOM_SSM_CHUNK_DIM_MAX &&
        g->ssm_state <= LOOM_SSM_CHUNK_DIM_MAX) {
        f->ssd_work =
            loom_cpu_ssm_chunk_work(g->m_head_dim, g->ssm_state, NEM_SSD_ROWS);
        f->ssd =
            malloc((size_t)f->n_slots * (size_t)f->ssd_work * sizeof(float));
        if (!f->ssd)
            return loom_err_set(err, LOOM_ERR_NOMEM,
                                "forward: out of memory for the scan of %d "
                                "rows",
                                f->n);
    }
    return LOOM_OK;
}

/* ---------------------------------------------------------------- helpers */

static void add_bias(float *y, const float *bias, int32_t n, int64_t width)
{
    if (!bias)
        return;
    for (int32_t r = 0; r < n; r++)
        loom_cpu_add(y + r * width, bias, width);
}

/* ---------------------------------------------------------------- Mamba-2 */

/* dt = softplus(dt + dt_bias) with no clamp, as the mamba_ssm kernels, vLLM
 * and ggml do; transformers' pure-torch path also clamps dt below at
 * time_step_min (1e-3), which only matters for dt + dt_bias < -6.9. */

struct scan_job {
    fwd *f;
    const nem_layer *L;
};

/* Head h of stream s through the stream's rows in order: a prompt chunk
 * with consecutive rows in chunks (loom_cpu_ssm_chunk, work: its slot's),
 * every other stream row by row (loom_cpu_ssm_step, whose rows windows and
 * one-row steps share bit for bit). */
static void scan_head(const struct scan_job *j, int64_t s, int64_t h,
                      float *work)
{
    fwd *f = j->f;
    const nem_geometry *g = f->g;
    const nem_layer *L = j->L;
    int64_t nh = g->m_heads, P = g->m_head_dim, N = g->ssm_state;
    int64_t cd = g->conv_dim, grp = h / (nh / g->n_groups);
    size_t hs = (size_t)(P * N);
    const loom_plan_stream *ps = &f->p->streams[s];
    loom_cache *c = ps->cache;
    float *state = c->mamba[L->slot].ssm + h * hs;
    int64_t t0 = work ? loom_cpu_chunk_first(f->p, ps) : -1;
    if (t0 >= 0) {
        const float *xbc = f->b + t0 * cd;
        loom_ssm_rows rows = {
            .x = xbc + h * P,
            .B = xbc + g->d_inner + grp * N,
            .C = xbc + g->d_inner + (g->n_groups + grp) * N,
            .dt = f->dt + t0 * nh + h,
            .y = f->c + t0 * g->d_inner + h * P,
            .ldx = cd,
            .ldbc = cd,
            .lddt = nh,
            .ldy = g->d_inner,
            .n = ps->count,
        };
        if (loom_cpu_ssm_chunk(state, &rows, L->A[h], L->D[h], P, N,
                               NEM_SSD_ROWS, work) == LOOM_OK)
            return;
    }
    for (int32_t k = 0; k < ps->count; k++) {
        int32_t r = loom_plan_row(f->p, ps, k);
        if (loom_window_index(ps, k) == 0)
            memcpy(nem_cache_snap_ssm(g, c, L->slot) + h * hs, state,
                   hs * sizeof(float));
        const float *xbc = f->b + (size_t)r * cd;
        loom_cpu_ssm_step(state, xbc + h * P, xbc + g->d_inner + grp * N,
                          xbc + g->d_inner + (g->n_groups + grp) * N,
                          f->dt[(size_t)r * nh + h], L->A[h], L->D[h],
                          f->c + (size_t)r * g->d_inner + h * P, P, N);
    }
}

/* Items are slots, each owning one work area of the chunked scan: slot k
 * takes the k-th of n_slots runs of (stream, head) pairs (neighbouring
 * heads on one thread: their y rows share cache lines). */
static void LOOM_ABI scan_slots(void *ctx, int64_t s0, int64_t s1)
{
    const struct scan_job *j = ctx;
    fwd *f = j->f;
    int64_t nh = f->g->m_heads, total = (int64_t)f->p->n_streams * nh;
    for (int64_t slot = s0; slot < s1; slot++) {
        float *work = f->ssd ? f->ssd + slot * f->ssd_work : NULL;
        int64_t i0 = total * slot / f->n_slots;
        int64_t i1 = total * (slot + 1) / f->n_slots;
        for (int64_t it = i0; it < i1; it++)
            scan_head(j, it / nh, it % nh, work);
    }
}

/* Channels per item of the conv: blocks of a stream run in parallel (a
 * prompt chunk is one stream), each block's rows in order. */
#define NEM_CONV_BLOCK 256

static int64_t conv_blocks(const nem_geometry *g)
{
    return (g->conv_dim + NEM_CONV_BLOCK - 1) / NEM_CONV_BLOCK;
}

/* Items are (stream, channel block) pairs: the block's part of the tail's
 * snapshot at a window's first row, the causal conv, SiLU. */
static void LOOM_ABI conv_blocks_task(void *ctx, int64_t begin, int64_t end)
{
    const struct scan_job *j = ctx;
    fwd *f = j->f;
    const nem_geometry *g = f->g;
    const nem_layer *L = j->L;
    int64_t W = g->in_proj_dim, cd = g->conv_dim, nb = conv_blocks(g);
    int64_t K1 = g->conv_kernel - 1;
    for (int64_t it = begin; it < end; it++) {
        const loom_plan_stream *ps = &f->p->streams[it / nb];
        int64_t c0 = it % nb * NEM_CONV_BLOCK;
        int64_t n = cd - c0 < NEM_CONV_BLOCK ? cd - c0 : NEM_CONV_BLOCK;
        loom_cache *c = ps->cache;
        nem_mamba_state *st = &c->mamba[L->slot];
        /* a stream without a window, its rows consecutive: the conv over
         * all its rows at once (the same sums as row by row) */
        int64_t t0 = ps->first_spec < 0 ? loom_cpu_rows_first(f->p, ps) : -1;
        if (t0 >= 0)
            loom_cpu_conv_rows(f->b + t0 * cd, cd, f->a + t0 * W + g->d_inner,
                               W, st->tail, L->conv_w, L->conv_b, c0, n, cd,
                               g->conv_kernel, ps->count);
        for (int32_t k = 0; k < ps->count; k++) {
            int32_t r = loom_plan_row(f->p, ps, k);
            const float *xBC = f->a + (size_t)r * W + g->d_inner;
            float *conv = f->b + (size_t)r * cd;
            if (loom_window_index(ps, k) == 0) {
                float *snap = nem_cache_snap_tail(g, c, L->slot);
                for (int64_t q = 0; q < K1; q++)
                    memcpy(snap + q * cd + c0, st->tail + q * cd + c0,
                           (size_t)n * sizeof(float));
            }
            if (t0 < 0)
                loom_cpu_conv_step_range(conv, xBC, st->tail, L->conv_w,
                                         L->conv_b, c0, n, cd, g->conv_kernel);
            loom_cpu_silu_inplace(conv + c0, n);
        }
    }
}

/* Per row: y * silu(z), then RMS over each of the n_groups groups. */
static void LOOM_ABI gate_rows(void *ctx, int64_t begin, int64_t end)
{
    const struct scan_job *j = ctx;
    fwd *f = j->f;
    const nem_geometry *g = f->g;
    for (int64_t r = begin; r < end; r++) {
        float *y = f->c + (size_t)r * g->d_inner;
        loom_cpu_rmsnorm_group_gated(y, y, f->a + (size_t)r * g->in_proj_dim,
                                     j->L->gnorm, g->d_inner,
                                     g->d_inner / g->n_groups, g->eps);
    }
}

static void mamba_block(fwd *f, const nem_layer *L)
{
    const nem_geometry *g = f->g;
    const loom_host *host = f->host;
    int64_t W = g->in_proj_dim, cd = g->conv_dim, nh = g->m_heads;
    loom_cpu_matmul_rows(host, &L->in_proj, f->xn, f->a, f->n, f->prompt);
    add_bias(f->a, L->in_bias, f->n, W);

    struct scan_job job = {f, L};
    host->parallel_for(host, (int64_t)f->p->n_streams * conv_blocks(g),
                       conv_blocks_task, &job);
    /* dt, and the window rows' log [in | xbc | dt] */
    for (int32_t s = 0; s < f->p->n_streams; s++) {
        const loom_plan_stream *ps = &f->p->streams[s];
        loom_cache *c = ps->cache;
        for (int32_t k = 0; k < ps->count; k++) {
            int32_t r = loom_plan_row(f->p, ps, k);
            const float *xBC = f->a + (size_t)r * W + g->d_inner;
            const float *dtr = xBC + cd;
            float *dt = f->dt + (size_t)r * nh;
            for (int64_t h = 0; h < nh; h++)
                dt[h] = loom_cpu_softplus(dtr[h] + L->dt_bias[h]);
            int32_t sp = loom_window_index(ps, k);
            if (sp < 0)
                continue;
            float *log = nem_cache_log(g, c, sp, L->slot);
            memcpy(log, xBC, cd * sizeof(float));
            memcpy(log + cd, f->b + (size_t)r * cd, cd * sizeof(float));
            memcpy(log + 2 * cd, dt, nh * sizeof(float));
        }
    }

    host->parallel_for(host, f->n_slots, scan_slots, &job);
    host->parallel_for(host, f->n, gate_rows, &job);
    loom_cpu_matmul_rows(host, &L->out_proj, f->c, f->mix, f->n, f->prompt);
    add_bias(f->mix, L->out_bias, f->n, g->hidden);
}

/* ---------------------------------------------------------------- attention */

struct attn_job {
    fwd *f;
    const nem_layer *L;
    float scale;
    int chunks; /* prompt chunks attend in blocks (attend_chunk) */
};

/* Items are (row, query head) pairs, dealt round-robin over n_slots slots
 * so each slot owns one scores row and later rows (longer contexts) spread
 * evenly. */
static void LOOM_ABI attend_slots(void *ctx, int64_t s0, int64_t s1)
{
    const struct attn_job *j = ctx;
    fwd *f = j->f;
    const nem_geometry *g = f->g;
    int64_t nq = g->n_q_heads, hd = g->head_dim;
    int64_t group = nq / g->n_kv_heads, q_w = nq * hd;
    int64_t total = (int64_t)f->n * nq;
    for (int64_t slot = s0; slot < s1; slot++) {
        float *scores = f->scores + slot * max64(f->max_ctx, 1);
        for (int64_t it = slot; it < total; it += f->n_slots) {
            int64_t r = it / nq, h = it % nq;
            if (j->chunks && f->prompt[r])
                continue; /* attend_chunk's */
            const loom_row *row = loom_round_row(f->round, (int32_t)r);
            const loom_cpu_kv *kv = &row->cache->kv[j->L->slot];
            loom_cpu_attend_head(
                f->c + r * q_w + h * hd, f->a + r * q_w + h * hd,
                kv->k + (h / group) * hd, kv->v + (h / group) * hd,
                (int64_t)row->position + 1, kv->width, hd, j->scale, scores);
        }
    }
}

/* A prompt chunk's rows (consecutive in the round, from round row t0) in
 * blocks of NEM_ATTN_BLOCK per query head: loom_cpu_attend_chunk (whose
 * AVX-512 form takes 32 rows at a time). */
#define NEM_ATTN_BLOCK 32
struct chunk_job {
    fwd *f;
    const nem_layer *L;
    float scale;
    int32_t t0, count;
};

static void LOOM_ABI attend_chunk(void *ctx, int64_t begin, int64_t end)
{
    const struct chunk_job *j = ctx;
    fwd *f = j->f;
    const nem_geometry *g = f->g;
    int64_t nq = g->n_q_heads, hd = g->head_dim;
    int64_t group = nq / g->n_kv_heads, q_w = nq * hd;
    int64_t nb = (j->count + NEM_ATTN_BLOCK - 1) / NEM_ATTN_BLOCK;
    for (int64_t i = begin; i < end; i++) {
        int64_t b, h;
        loom_cpu_chunk_item(i, nb, &b, &h);
        int64_t k0 = b * NEM_ATTN_BLOCK;
        int64_t n =
            j->count - k0 < NEM_ATTN_BLOCK ? j->count - k0 : NEM_ATTN_BLOCK;
        int64_t r = j->t0 + k0;
        const loom_row *row = loom_round_row(f->round, (int32_t)r);
        const loom_cpu_kv *kv = &row->cache->kv[j->L->slot];
        const float *kk = kv->k + (h / group) * hd;
        const float *vv = kv->v + (h / group) * hd;
        float *o = f->c + r * q_w + h * hd;
        const float *q = f->a + r * q_w + h * hd;
        loom_cpu_attend_chunk(o, q_w, q, q_w, n, row->position, kk, vv,
                              kv->width, hd, j->scale);
    }
}

static void attention_block(fwd *f, const nem_layer *L)
{
    const nem_geometry *g = f->g;
    const loom_host *host = f->host;
    int64_t kvw = (int64_t)g->n_kv_heads * g->head_dim;
    loom_cpu_matmul_rows(host, &L->wq, f->xn, f->a, f->n, f->prompt);
    loom_cpu_matmul_rows(host, &L->wk, f->xn, f->b, f->n, f->prompt);
    loom_cpu_matmul_rows(host, &L->wv, f->xn, f->c, f->n, f->prompt);
    /* no positional encoding: K/V go in as they are */
    for (int32_t r = 0; r < f->n; r++) {
        const loom_row *row = loom_round_row(f->round, r);
        loom_cpu_kv_put(&row->cache->kv[L->slot], row->position, f->b + r * kvw,
                        f->c + r * kvw);
    }
    float scale = (float)(1.0 / sqrt((double)g->head_dim));
    /* prompt chunks attend in blocks of rows, the rest row by row (all of
     * them when a prompt chunk's rows are not consecutive) */
    int chunks = loom_cpu_chunks_consecutive(f->p);
    for (int32_t i = 0; chunks && i < f->p->n_streams; i++) {
        const loom_plan_stream *ps = &f->p->streams[i];
        int64_t t0 = loom_cpu_chunk_first(f->p, ps);
        if (t0 < 0)
            continue;
        struct chunk_job cj = {f, L, scale, (int32_t)t0, ps->count};
        host->parallel_for(host,
                           (ps->count + NEM_ATTN_BLOCK - 1) / NEM_ATTN_BLOCK *
                               g->n_q_heads,
                           attend_chunk, &cj);
    }
    struct attn_job job = {f, L, scale, chunks};
    host->parallel_for(host, f->n_slots, attend_slots, &job);
    loom_cpu_matmul_rows(host, &L->wo, f->c, f->mix, f->n, f->prompt);
}

/* ---------------------------------------------------------------- MLP */

static void mlp_block(fwd *f, const nem_layer *L)
{
    const nem_geometry *g = f->g;
    loom_cpu_matmul_rows(f->host, &L->up, f->xn, f->a, f->n, f->prompt);
    loom_cpu_relu2_rows(f->host, f->a, f->n, g->mlp_inter);
    loom_cpu_matmul_rows(f->host, &L->down, f->a, f->mix, f->n, f->prompt);
}

/* ---------------------------------------------------------------- MoE */

/* Picks row r's experts: sigmoid scores, plus the correction bias for the
 * choice only; group-limited (best topk_group groups by the sum of their two
 * best choices) and then the top_k; ties go to the lower index. The weights
 * are the plain sigmoid scores, normalised and scaled. */
static void route(const nem_geometry *g, const float *logits, const float *bias,
                  int32_t *sel, float *w)
{
    int32_t E = g->n_experts, per = E / g->n_group;
    float score[E], choice[E];
    unsigned char allowed[E];
    for (int32_t e = 0; e < E; e++) {
        score[e] = loom_cpu_sigmoid(logits[e]);
        choice[e] = score[e] + bias[e];
        allowed[e] = 1;
    }
    if (g->n_group > 1 && g->topk_group < g->n_group) {
        float gs[g->n_group];
        unsigned char keep[g->n_group];
        for (int32_t k = 0; k < g->n_group; k++) {
            float b1 = -INFINITY, b2 = -INFINITY;
            for (int32_t e = k * per; e < (k + 1) * per; e++) {
                if (choice[e] > b1) {
                    b2 = b1;
                    b1 = choice[e];
                } else if (choice[e] > b2) {
                    b2 = choice[e];
                }
            }
            gs[k] = b1 + b2;
            keep[k] = 0;
        }
        for (int32_t t = 0; t < g->topk_group; t++) {
            int32_t best = -1;
            for (int32_t k = 0; k < g->n_group; k++)
                if (!keep[k] && (best < 0 || gs[k] > gs[best]))
                    best = k;
            keep[best] = 1;
        }
        for (int32_t e = 0; e < E; e++)
            allowed[e] = keep[e / per];
    }
    double sum = 0.0;
    for (int32_t t = 0; t < g->top_k; t++) {
        int32_t best = -1;
        for (int32_t e = 0; e < E; e++)
            if (allowed[e] && (best < 0 || choice[e] > choice[best]))
                best = e;
        allowed[best] = 0;
        sel[t] = best;
        w[t] = score[best];
        sum += w[t];
    }
    float denom = (float)sum + 1e-20f;
    for (int32_t t = 0; t < g->top_k; t++) {
        if (g->norm_topk)
            w[t] /= denom;
        w[t] *= g->routed_scale;
    }
}

static void moe_block(fwd *f, const nem_layer *L)
{
    const nem_geometry *g = f->g;
    const loom_host *host = f->host;
    int64_t H = g->hidden, K = g->top_k;
    /* the router in float32 (transformers casts it up, too) */
    host->matmul(host, &L->router, f->xn, f->a, f->n);
    for (int32_t r = 0; r < f->n; r++)
        route(g, f->a + (size_t)r * g->n_experts, L->score_bias, f->sel + r * K,
              f->selw + r * K);

    /* routed experts, each over the rows that chose it, summed in expert
     * order as transformers accumulates them */
    memset(f->mix, 0, (size_t)f->n * H * sizeof(float));
    float *xg = f->ex;
    float *hg = xg + (size_t)f->n * H;
    float *og = hg + (size_t)f->n * g->moe_inter;
    int32_t *rows = f->erows;
    float *wts = f->ewts;
    for (int32_t e = 0; e < g->n_experts; e++) {
        int32_t cnt = 0;
        for (int32_t r = 0; r < f->n; r++)
            for (int64_t t = 0; t < K; t++)
                if (f->sel[r * K + t] == e) {
                    rows[cnt] = r;
                    wts[cnt] = f->selw[r * K + t];
                    memcpy(xg + (size_t)cnt * H, f->xn + (size_t)r * H,
                           (size_t)H * sizeof(float));
                    cnt++;
                }
        if (!cnt)
            continue;
        host->matmul(host, &L->ex_up[e], xg, hg, cnt);
        loom_cpu_relu2_rows(host, hg, cnt, g->moe_inter);
        host->matmul(host, &L->ex_down[e], hg, og, cnt);
        for (int32_t i = 0; i < cnt; i++)
            loom_cpu_axpy(f->mix + (size_t)rows[i] * H, wts[i],
                          og + (size_t)i * H, H);
    }
    /* plus the shared expert */
    loom_cpu_matmul_rows(host, &L->up, f->xn, f->b, f->n, f->prompt);
    loom_cpu_relu2_rows(host, f->b, f->n, g->shared_inter);
    loom_cpu_matmul_rows(host, &L->down, f->b, f->c, f->n, f->prompt);
    loom_cpu_add(f->mix, f->c, (int64_t)f->n * H);
}

/* ---------------------------------------------------------------- forward */

/* Copies layer `layer`'s output (the residual stream after it, before the
 * final norm) of each row flagged LOOM_ROW_TAP to row k of out->taps
 * [k, n_taps * hidden], at slot j * hidden for every tap slot j naming that
 * layer. */
static void tap_layer(fwd *f, const loom_output *out, int32_t layer)
{
    const loom_model *m = f->m;
    int64_t H = f->g->hidden;
    for (int32_t j = 0; j < m->n_taps; j++) {
        if (m->taps[j] != layer)
            continue;
        int64_t k = 0;
        for (int32_t r = 0; r < f->n; r++)
            if (loom_round_row(f->round, r)->flags & LOOM_ROW_TAP)
                memcpy(loom_view_row_f32(&out->taps, k++) + j * H,
                       f->x + (size_t)r * H, (size_t)H * sizeof(float));
    }
}

loom_status LOOM_ABI nem_forward(loom_model *m, const loom_round *round,
                                 const loom_output *out, loom_err *err)
{
    if (!round || round->n_rows <= 0)
        return LOOM_OK;
    const nem_geometry *g = &m->g;
    loom_status rc = loom_round_plan_make(&m->plan, round, out, &m->rules, err);
    if (rc != LOOM_OK)
        return rc;
    fwd f = {.m = m,
             .host = m->host,
             .g = g,
             .round = round,
             .n = round->n_rows,
             .p = &m->plan};
    rc = fwd_alloc(&f, err);
    for (int32_t s = 0; rc == LOOM_OK && s < f.p->n_streams; s++)
        rc = nem_cache_reserve(m, &f.p->streams[s], err);
    if (rc != LOOM_OK) {
        fwd_free(&f);
        return rc;
    }

    /* from here on nothing fails */
    int64_t H = g->hidden;
    loom_cpu_prompt_rows(f.p, f.prompt);
    for (int32_t r = 0; r < f.n; r++)
        f.host->weight_row(&m->embed, loom_round_row(round, r)->token,
                           f.x + (size_t)r * H);
    for (int32_t i = 0; i < g->n_layers; i++) {
        const nem_layer *L = &m->layers[i];
        loom_cpu_rmsnorm_rows(f.host, f.xn, f.x, L->norm, f.n, H, g->eps);
        switch (L->kind) {
        case NEM_MAMBA:
            mamba_block(&f, L);
            break;
        case NEM_ATTN:
            attention_block(&f, L);
            break;
        case NEM_MLP:
            mlp_block(&f, L);
            break;
        default:
            moe_block(&f, L);
            break;
        }
        loom_cpu_add_rows(f.host, f.x, f.mix, f.n, H);
        tap_layer(&f, out, i);
    }

    /* the final norm and the head, only for the rows that ask */
    int32_t k = 0;
    for (int32_t r = 0; r < f.n; r++)
        if (loom_round_row(round, r)->flags & LOOM_ROW_LOGITS)
            loom_cpu_rmsnorm(f.xn + (size_t)(k++) * H, f.x + (size_t)r * H,
                             m->norm_f, H, g->eps);
    if (k)
        loom_cpu_matmul_view(f.host, &m->lm_head, f.xn, k, &out->logits);

    for (int32_t s = 0; s < f.p->n_streams; s++) {
        const loom_plan_stream *ps = &f.p->streams[s];
        loom_window_end(&ps->cache->win, ps);
        ps->cache->len = ps->len0 + ps->count;
    }
    fwd_free(&f);
    return LOOM_OK;
}
