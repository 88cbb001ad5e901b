/* The float32 CPU forward of Qwen3.5 / Qwen3-Next over a round of rows
 * (docs/specs/qwen35.md section 2): rows of several streams, each stream's
 * rows in position order. Linear layers run over all rows of the round at
 * once through host->matmul (a prompt chunk's rows: host->matmul_prompt,
 * loom_cpu_matmul_rows); what is sequential in a stream (the conv tail,
 * the delta-rule recurrence) runs per stream, in parallel across streams and
 * value heads (a prompt chunk's recurrence in its chunkwise form,
 * q35_gdn_chunk); attention runs in parallel across (row, head). */
#include "qwen35.h"

#include <stdlib.h>

/* ---------------------------------------------------------------- scratch */

void q35_scratch_free(q35_scratch *s)
{
    free(s->h);
    free(s->xn);
    free(s->proj);
    free(s->big0);
    free(s->big1);
    free(s->big2);
    free(s->conv_out);
    free(s->o);
    free(s->z);
    free(s->b);
    free(s->a);
    free(s->decay);
    free(s->beta);
    free(s->prompt);
    free(s->chunk_work);
    q35_moe_scratch_free(&s->moe);
    memset(s, 0, sizeof *s);
}

static int64_t q35_max(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* Grows the activation buffers to `rows` rows (grow-only). */
static loom_status q35_scratch_reserve(loom_model *m, int64_t rows,
                                       loom_err *err)
{
    q35_scratch *s = &m->s;
    if (rows <= s->rows)
        return LOOM_OK;
    const q35_geometry *g = &m->g;
    int64_t kd = q35_key_dim(g), vd = q35_value_dim(g);
    int64_t big = q35_max(2 * g->n_heads * g->head_dim, q35_conv_dim(g));
    big = q35_max(big, 2 * kd + 2 * vd);
    big = q35_max(big, g->ffn);
    big = q35_max(big, g->n_kv_heads * g->head_dim);
    big = q35_max(big, q35_max(g->moe_ffn, g->shared_ffn));
    big = q35_max(big, g->hidden);
    int64_t ow = q35_max(vd, g->n_heads * g->head_dim);
    q35_scratch n = {0};
    size_t r = (size_t)rows, f = sizeof(float);
    n.rows = rows;
    n.big = big;
    n.h = malloc(r * (size_t)g->hidden * f);
    n.xn = malloc(r * (size_t)g->hidden * f);
    n.proj = malloc(r * (size_t)g->hidden * f);
    n.big0 = malloc(r * (size_t)big * f);
    n.big1 = malloc(r * (size_t)big * f);
    n.big2 = malloc(r * (size_t)big * f);
    n.conv_out = malloc(r * (size_t)q35_conv_dim(g) * f);
    n.o = malloc(r * (size_t)ow * f);
    n.z = malloc(r * (size_t)vd * f);
    n.b = malloc(r * (size_t)g->lin_v_heads * f);
    n.a = malloc(r * (size_t)g->lin_v_heads * f);
    n.decay = malloc(r * (size_t)g->lin_v_heads * f);
    n.beta = malloc(r * (size_t)g->lin_v_heads * f);
    n.prompt = malloc(r);
    n.n_slots = m->host->n_threads(m->host);
    if (n.n_slots < 1)
        n.n_slots = 1;
    n.chunk_work =
        malloc((size_t)n.n_slots *
               (size_t)q35_gdn_chunk_floats(g->lin_dk, g->lin_dv) * f);
    if (!n.h || !n.xn || !n.proj || !n.big0 || !n.big1 || !n.big2 ||
        !n.conv_out || !n.o || !n.z || !n.b || !n.a || !n.decay || !n.beta ||
        !n.prompt || !n.chunk_work) {
        q35_scratch_free(&n);
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "qwen35: no memory for %lld rows of activations",
                            (long long)rows);
    }
    loom_status st = q35_moe_reserve(&n.moe, g, rows, err);
    if (st != LOOM_OK) {
        q35_scratch_free(&n);
        return st;
    }
    q35_scratch_free(s);
    *s = n;
    return LOOM_OK;
}

/* ---------------------------------------------------------------- attention */

typedef struct q35_attn_job {
    const loom_model *m;
    const loom_round *round;
    int slot;
    const float *qg; /* [T, 2*nh*hd]: per head [q | gate] */
    float *o;        /* [T, nh*hd] */
    int chunks;      /* prompt chunks' rows are q35_attn_chunk_task's */
} q35_attn_job;

/* Per (row, query head) of the rows that are not a prompt chunk's. */
static void LOOM_ABI q35_attn_task(void *ctx, int64_t begin, int64_t end)
{
    const q35_attn_job *j = ctx;
    const q35_geometry *g = &j->m->g;
    int64_t nh = g->n_heads, hd = g->head_dim;
    int64_t group = nh / g->n_kv_heads;
    float scale = 1.0f / sqrtf((float)hd);
    for (int64_t i = begin; i < end; i++) {
        int64_t t = i / nh, h = i % nh;
        if (j->chunks && j->m->s.prompt[t])
            continue; /* q35_attn_chunk_task's */
        const loom_row *r = loom_round_row(j->round, (int32_t)t);
        const loom_cpu_kv *kv = &r->cache->kv[j->slot];
        const float *q = j->qg + t * 2 * nh * hd + h * 2 * hd;
        float *o = j->o + t * nh * hd + h * hd;
        int64_t kvh = h / group;
        loom_cpu_attend_head_blocked(o, q, kv->k + kvh * hd, kv->v + kvh * hd,
                                     (int64_t)r->position + 1, kv->width, hd,
                                     scale);
        /* output gate: o *= sigmoid(gate) */
        loom_cpu_gate_sigmoid(o, q + hd, hd);
    }
}

/* A prompt chunk's rows (consecutive in the round, from round row t0) in
 * blocks of Q35_ATTN_BLOCK per query head: loom_cpu_attend_chunk (whose
 * AVX-512 form takes 32 rows at a time), then the output gates. */
#define Q35_ATTN_BLOCK 32
typedef struct q35_chunk_job {
    const loom_model *m;
    const loom_round *round;
    int slot;
    const float *qg;
    float *o;
    int64_t t0, count;
} q35_chunk_job;

static void LOOM_ABI q35_attn_chunk_task(void *ctx, int64_t begin, int64_t end)
{
    const q35_chunk_job *j = ctx;
    const q35_geometry *g = &j->m->g;
    int64_t nh = g->n_heads, hd = g->head_dim;
    int64_t kvh_of = nh / g->n_kv_heads;
    float scale = 1.0f / sqrtf((float)hd);
    int64_t nb = (j->count + Q35_ATTN_BLOCK - 1) / Q35_ATTN_BLOCK;
    for (int64_t i = begin; i < end; i++) {
        int64_t b, h;
        loom_cpu_chunk_item(i, nb, &b, &h);
        int64_t k0 = b * Q35_ATTN_BLOCK;
        int64_t n =
            j->count - k0 < Q35_ATTN_BLOCK ? j->count - k0 : Q35_ATTN_BLOCK;
        int64_t t = j->t0 + k0, kvh = h / kvh_of;
        const loom_row *r = loom_round_row(j->round, (int32_t)t);
        const loom_cpu_kv *kv = &r->cache->kv[j->slot];
        const float *q = j->qg + t * 2 * nh * hd + h * 2 * hd;
        float *o = j->o + t * nh * hd + h * hd;
        loom_cpu_attend_chunk(o, nh * hd, q, 2 * nh * hd, n, r->position,
                              kv->k + kvh * hd, kv->v + kvh * hd, kv->width, hd,
                              scale);
        for (int64_t a = 0; a < n; a++)
            loom_cpu_gate_sigmoid(o + a * nh * hd, q + a * 2 * nh * hd + hd,
                                  hd);
    }
}

/* Per row: q's and k's heads RMS-normed and rotated in place (q and its
 * gate interleaved per head in big0, k in big1). */
typedef struct q35_qk_job {
    const loom_model *m;
    const loom_round *round;
    const q35_layer *L;
} q35_qk_job;

static void LOOM_ABI q35_qk_task(void *ctx, int64_t begin, int64_t end)
{
    const q35_qk_job *j = ctx;
    const q35_geometry *g = &j->m->g;
    const q35_scratch *s = &j->m->s;
    int64_t nh = g->n_heads, nkv = g->n_kv_heads, hd = g->head_dim;
    float eps = (float)g->eps;
    for (int64_t t = begin; t < end; t++) {
        int64_t pos = loom_round_row(j->round, (int32_t)t)->position;
        float *qg = s->big0 + t * 2 * nh * hd;
        float *k = s->big1 + t * nkv * hd;
        for (int64_t h = 0; h < nh; h++) {
            float *q = qg + h * 2 * hd;
            loom_cpu_rmsnorm(q, q, j->L->q_norm, hd, eps);
            loom_cpu_rope_neox(q, 1, hd, g->rot_dim, j->m->inv_freq, pos);
        }
        for (int64_t h = 0; h < nkv; h++)
            loom_cpu_rmsnorm(k + h * hd, k + h * hd, j->L->k_norm, hd, eps);
        loom_cpu_rope_neox(k, nkv, hd, g->rot_dim, j->m->inv_freq, pos);
    }
}

static void q35_attention(loom_model *m, const loom_round *round,
                          const q35_layer *L, int slot)
{
    const loom_host *host = m->host;
    const q35_geometry *g = &m->g;
    q35_scratch *s = &m->s;
    int64_t T = round->n_rows, nh = g->n_heads, nkv = g->n_kv_heads;
    int64_t hd = g->head_dim;
    loom_cpu_matmul_rows(host, &L->q_proj, s->xn, s->big0, T, s->prompt);
    loom_cpu_matmul_rows(host, &L->k_proj, s->xn, s->big1, T, s->prompt);
    loom_cpu_matmul_rows(host, &L->v_proj, s->xn, s->big2, T, s->prompt);
    /* a decode round is not worth a wake-up */
    q35_qk_job qk = {m, round, L};
    if (T < 8)
        q35_qk_task(&qk, 0, T);
    else
        host->parallel_for(host, T, q35_qk_task, &qk);
    /* every row's K/V first: later rows of a stream attend to earlier */
    for (int64_t t = 0; t < T; t++) {
        const loom_row *r = loom_round_row(round, (int32_t)t);
        loom_cpu_kv_put(&r->cache->kv[slot], r->position,
                        s->big1 + t * nkv * hd, s->big2 + t * nkv * hd);
    }
    /* prompt chunks attend in blocks of rows, the rest row by row (all of
     * them when a prompt chunk's rows are not consecutive) */
    int chunks = loom_cpu_chunks_consecutive(&m->plan);
    for (int32_t i = 0; chunks && i < m->plan.n_streams; i++) {
        const loom_plan_stream *sm = &m->plan.streams[i];
        int64_t t0 = loom_cpu_chunk_first(&m->plan, sm);
        if (t0 < 0)
            continue;
        q35_chunk_job cj = {m, round, slot, s->big0, s->o, t0, sm->count};
        host->parallel_for(
            host, (sm->count + Q35_ATTN_BLOCK - 1) / Q35_ATTN_BLOCK * nh,
            q35_attn_chunk_task, &cj);
    }
    q35_attn_job job = {m, round, slot, s->big0, s->o, chunks};
    host->parallel_for(host, T * nh, q35_attn_task, &job);
    loom_cpu_matmul_rows(host, &L->o_proj, s->o, s->proj, T, s->prompt);
}

/* ---------------------------------------------------------------- GDN */

typedef struct q35_gdn_job {
    loom_model *m;
    const loom_round *round;
    const q35_layer *L;
    int slot;
} q35_gdn_job;

/* Channel blocks of the conv: one per q head, k head and v head, so that a
 * block holds whole heads for the l2 norms and the blocks of a stream run
 * in parallel (a prompt chunk is one stream). */
static int64_t q35_conv_blocks(const q35_geometry *g)
{
    return 2 * g->lin_k_heads + g->lin_v_heads;
}

/* Per (stream, channel block), rows in order: the block's part of the conv
 * tail's snapshot at a window's first row, the causal conv over the tail,
 * SiLU, and the l2 norms of q and k heads. */
static void LOOM_ABI q35_gdn_conv_task(void *ctx, int64_t begin, int64_t end)
{
    const q35_gdn_job *j = ctx;
    loom_model *m = j->m;
    const q35_geometry *g = &m->g;
    q35_scratch *s = &m->s;
    int64_t cd = q35_conv_dim(g), kd = q35_key_dim(g);
    int64_t Hk = g->lin_k_heads, dk = g->lin_dk, dv = g->lin_dv;
    int64_t K1 = g->conv_kernel - 1, tail = K1 * cd, nb = q35_conv_blocks(g);
    float qscale = 1.0f / sqrtf((float)dk);
    for (int64_t i = begin; i < end; i++) {
        const loom_plan_stream *st = &m->plan.streams[i / nb];
        int64_t b = i % nb;
        int64_t c0 = b < 2 * Hk ? b * dk : 2 * kd + (b - 2 * Hk) * dv;
        int64_t n = b < 2 * Hk ? dk : dv;
        loom_cache *c = st->cache;
        float *tl = c->conv + (size_t)j->slot * (size_t)tail;
        /* a stream without a window, its rows consecutive: the conv over
         * all its rows at once (the same sums as row by row) */
        int64_t t0 =
            st->first_spec < 0 ? loom_cpu_rows_first(&m->plan, st) : -1;
        if (t0 >= 0)
            loom_cpu_conv_rows(s->conv_out + t0 * cd, cd, s->big0 + t0 * cd, cd,
                               tl, j->L->conv_w, NULL, c0, n, cd,
                               g->conv_kernel, st->count);
        for (int32_t k = 0; k < st->count; k++) {
            int64_t t = loom_plan_row(&m->plan, st, k);
            float *y = s->conv_out + t * cd;
            if (loom_window_index(st, k) == 0) {
                /* the state's snapshot is taken per head by
                 * q35_gdn_rec_task, after the plain rows before it */
                float *snap = q35_cache_snap_conv(m, c, j->slot);
                for (int64_t r = 0; r < K1; r++)
                    memcpy(snap + r * cd + c0, tl + r * cd + c0,
                           (size_t)n * sizeof(float));
            }
            if (t0 < 0)
                loom_cpu_conv_step_range(y, s->big0 + t * cd, tl, j->L->conv_w,
                                         NULL, c0, n, cd, g->conv_kernel);
            loom_cpu_silu_inplace(y + c0, n);
            if (b < Hk) {
                loom_cpu_l2norm(y + c0, dk, 1e-6f);
                loom_cpu_scale(y + c0, qscale, dk);
            } else if (b < 2 * Hk) {
                loom_cpu_l2norm(y + c0, dk, 1e-6f);
            }
        }
    }
}

/* Per round row: beta and the decay of each value head. */
static void LOOM_ABI q35_gdn_gate_task(void *ctx, int64_t begin, int64_t end)
{
    const q35_gdn_job *j = ctx;
    q35_scratch *s = &j->m->s;
    int64_t Hv = j->m->g.lin_v_heads;
    for (int64_t t = begin; t < end; t++)
        for (int64_t h = 0; h < Hv; h++) {
            float a = s->a[t * Hv + h] + j->L->dt_bias[h];
            s->decay[t * Hv + h] =
                loom_cpu_expf(j->L->neg_a[h] * loom_cpu_softplus(a));
            s->beta[t * Hv + h] = loom_cpu_sigmoid(s->b[t * Hv + h]);
        }
}

/* Per stream, rows in order: the log a window's rows keep for the commit
 * replay. */
static void LOOM_ABI q35_gdn_log_task(void *ctx, int64_t begin, int64_t end)
{
    const q35_gdn_job *j = ctx;
    loom_model *m = j->m;
    const q35_geometry *g = &m->g;
    q35_scratch *s = &m->s;
    int64_t cd = q35_conv_dim(g), kd = q35_key_dim(g), vd = q35_value_dim(g);
    int64_t Hv = g->lin_v_heads;
    for (int64_t si = begin; si < end; si++) {
        const loom_plan_stream *st = &m->plan.streams[si];
        loom_cache *c = st->cache;
        for (int32_t k = 0; k < st->count; k++) {
            int64_t t = loom_plan_row(&m->plan, st, k);
            int32_t li = loom_window_index(st, k);
            if (li < 0)
                continue;
            const float *y = s->conv_out + t * cd;
            float *log = q35_cache_log(m, c, li, j->slot);
            memcpy(log + m->log.conv, s->big0 + t * cd,
                   (size_t)cd * sizeof(float));
            memcpy(log + m->log.k, y + kd, (size_t)kd * sizeof(float));
            memcpy(log + m->log.v, y + 2 * kd, (size_t)vd * sizeof(float));
            memcpy(log + m->log.decay, s->decay + t * Hv,
                   (size_t)Hv * sizeof(float));
            memcpy(log + m->log.beta, s->beta + t * Hv,
                   (size_t)Hv * sizeof(float));
        }
    }
}

/* Where a stream's recurrence takes q35_gdn_chunk: a prompt chunk whose rows
 * are consecutive, its first row's index; else -1 (row steps). */
static int64_t q35_gdn_chunk_first(const loom_model *m,
                                   const loom_plan_stream *st)
{
    return q35_gdn_chunk_fast() ? loom_cpu_chunk_first(&m->plan, st) : -1;
}

/* Per work slot: the (prompt chunk whose rows are consecutive, value head)
 * pairs dealt round-robin over the n_slots slots (a slot's work buffer
 * serves one pair at a time), each through q35_gdn_chunk, then the gated
 * RMSNorm of each of its rows. */
static void LOOM_ABI q35_gdn_chunk_task(void *ctx, int64_t begin, int64_t end)
{
    const q35_gdn_job *j = ctx;
    loom_model *m = j->m;
    const q35_geometry *g = &m->g;
    q35_scratch *s = &m->s;
    int64_t cd = q35_conv_dim(g), kd = q35_key_dim(g), vd = q35_value_dim(g);
    int64_t Hv = g->lin_v_heads, dk = g->lin_dk, dv = g->lin_dv;
    int64_t group = Hv / g->lin_k_heads, sf = Hv * dk * dv;
    for (int64_t slot = begin; slot < end; slot++) {
        float *work = s->chunk_work + slot * q35_gdn_chunk_floats(dk, dv);
        int64_t pair = 0;
        for (int32_t si = 0; si < m->plan.n_streams; si++) {
            const loom_plan_stream *st = &m->plan.streams[si];
            int64_t t0 = q35_gdn_chunk_first(m, st);
            for (int64_t h = 0; t0 >= 0 && h < Hv; h++, pair++) {
                if (pair % s->n_slots != slot)
                    continue;
                int64_t kh = h / group;
                const float *y = s->conv_out + t0 * cd;
                float *S = st->cache->state + (size_t)j->slot * (size_t)sf +
                           (size_t)(h * dk * dv);
                float *o = s->o + t0 * vd + h * dv;
                q35_gdn_rows rows = {.n = st->count,
                                     .q = y + kh * dk,
                                     .k = y + kd + kh * dk,
                                     .v = y + 2 * kd + h * dv,
                                     .ld_qkv = cd,
                                     .decay = s->decay + t0 * Hv + h,
                                     .beta = s->beta + t0 * Hv + h,
                                     .ld_db = Hv,
                                     .o = o,
                                     .ld_o = vd};
                q35_gdn_chunk(S, &rows, dk, dv, work);
                for (int32_t k = 0; k < st->count; k++)
                    loom_cpu_rmsnorm_gated(o + k * vd, o + k * vd,
                                           s->z + (t0 + k) * vd + h * dv,
                                           j->L->gnorm, dv, (float)g->eps);
            }
        }
    }
}

/* Per (stream, value head) of the streams q35_gdn_chunk_task leaves, rows
 * in order: the delta rule, then the gated RMSNorm of that head's output. */
static void LOOM_ABI q35_gdn_rec_task(void *ctx, int64_t begin, int64_t end)
{
    const q35_gdn_job *j = ctx;
    loom_model *m = j->m;
    const q35_geometry *g = &m->g;
    q35_scratch *s = &m->s;
    int64_t cd = q35_conv_dim(g), kd = q35_key_dim(g), vd = q35_value_dim(g);
    int64_t Hv = g->lin_v_heads, dk = g->lin_dk, dv = g->lin_dv;
    int64_t group = Hv / g->lin_k_heads;
    int64_t sf = Hv * dk * dv;
    float tmp[1024];
    for (int64_t i = begin; i < end; i++) {
        const loom_plan_stream *st = &m->plan.streams[i / Hv];
        loom_cache *c = st->cache;
        int64_t h = i % Hv, kh = h / group;
        if (q35_gdn_chunk_first(m, st) >= 0)
            continue; /* q35_gdn_chunk_task's */
        size_t off = (size_t)(h * dk * dv);
        float *S = c->state + (size_t)j->slot * (size_t)sf + off;
        for (int32_t k = 0; k < st->count; k++) {
            int64_t t = loom_plan_row(&m->plan, st, k);
            if (loom_window_index(st, k) == 0)
                memcpy(q35_cache_snap_state(m, c, j->slot) + off, S,
                       (size_t)(dk * dv) * sizeof(float));
            const float *y = s->conv_out + t * cd;
            float *o = s->o + t * vd + h * dv;
            q35_gdn_step(S, y + kh * dk, y + kd + kh * dk, y + 2 * kd + h * dv,
                         s->decay[t * Hv + h], s->beta[t * Hv + h], o, dk, dv,
                         tmp);
            loom_cpu_rmsnorm_gated(o, o, s->z + t * vd + h * dv, j->L->gnorm,
                                   dv, (float)g->eps);
        }
    }
}

/* Qwen3-Next's fused projections, grouped by key head, to Qwen3.5's
 * [Q all | K all | V all], z, b, a (spec 2.7). */
static void q35_next_split(loom_model *m, int64_t T)
{
    const q35_geometry *g = &m->g;
    q35_scratch *s = &m->s;
    int64_t Hk = g->lin_k_heads, Hv = g->lin_v_heads, dk = g->lin_dk;
    int64_t dv = g->lin_dv, r = Hv / Hk;
    int64_t kd = q35_key_dim(g), vd = q35_value_dim(g), cd = q35_conv_dim(g);
    int64_t gw = 2 * dk + 2 * r * dv; /* one key head's group in qkvz */
    size_t f = sizeof(float);
    for (int64_t t = 0; t < T; t++) {
        const float *src = s->big1 + t * (2 * kd + 2 * vd);
        const float *ba = s->big2 + t * 2 * Hv;
        float *qkv = s->big0 + t * cd;
        for (int64_t gi = 0; gi < Hk; gi++) {
            const float *grp = src + gi * gw;
            memcpy(qkv + gi * dk, grp, (size_t)dk * f);
            memcpy(qkv + kd + gi * dk, grp + dk, (size_t)dk * f);
            memcpy(qkv + 2 * kd + gi * r * dv, grp + 2 * dk,
                   (size_t)(r * dv) * f);
            memcpy(s->z + t * vd + gi * r * dv, grp + 2 * dk + r * dv,
                   (size_t)(r * dv) * f);
            memcpy(s->b + t * Hv + gi * r, ba + gi * 2 * r, (size_t)r * f);
            memcpy(s->a + t * Hv + gi * r, ba + gi * 2 * r + r, (size_t)r * f);
        }
    }
}

static void q35_gdn(loom_model *m, const loom_round *round, const q35_layer *L,
                    int slot, int32_t n_streams)
{
    const loom_host *host = m->host;
    q35_scratch *s = &m->s;
    int64_t T = round->n_rows;
    if (m->g.variant == Q35_VARIANT_NEXT) {
        loom_cpu_matmul_rows(host, &L->in_qkvz, s->xn, s->big1, T, s->prompt);
        loom_cpu_matmul_rows(host, &L->in_ba, s->xn, s->big2, T, s->prompt);
        q35_next_split(m, T);
    } else {
        loom_cpu_matmul_rows(host, &L->in_qkv, s->xn, s->big0, T, s->prompt);
        loom_cpu_matmul_rows(host, &L->in_z, s->xn, s->z, T, s->prompt);
        loom_cpu_matmul_rows(host, &L->in_b, s->xn, s->b, T, s->prompt);
        loom_cpu_matmul_rows(host, &L->in_a, s->xn, s->a, T, s->prompt);
    }
    q35_gdn_job job = {m, round, L, slot};
    host->parallel_for(host, (int64_t)n_streams * q35_conv_blocks(&m->g),
                       q35_gdn_conv_task, &job);
    /* a decode round is not worth a wake-up */
    if (T < 8)
        q35_gdn_gate_task(&job, 0, T);
    else
        host->parallel_for(host, T, q35_gdn_gate_task, &job);
    int logs = 0;
    for (int32_t i = 0; i < n_streams; i++)
        logs += m->plan.streams[i].first_spec >= 0;
    if (logs > 0)
        host->parallel_for(host, n_streams, q35_gdn_log_task, &job);
    /* prompt chunks in the chunkwise form, the rest row by row */
    int chunks = 0;
    for (int32_t i = 0; i < n_streams; i++)
        chunks += loom_cpu_chunk_first(&m->plan, &m->plan.streams[i]) >= 0;
    if (chunks > 0)
        host->parallel_for(host, s->n_slots, q35_gdn_chunk_task, &job);
    host->parallel_for(host, (int64_t)n_streams * m->g.lin_v_heads,
                       q35_gdn_rec_task, &job);
    loom_cpu_matmul_rows(host, &L->out_proj, s->o, s->proj, T, s->prompt);
}

/* ---------------------------------------------------------------- MLP */

static void q35_mlp(loom_model *m, const q35_layer *L, int64_t T)
{
    const loom_host *host = m->host;
    q35_scratch *s = &m->s;
    loom_cpu_matmul_rows(host, &L->gate, s->xn, s->big0, T, s->prompt);
    loom_cpu_matmul_rows(host, &L->up, s->xn, s->big1, T, s->prompt);
    loom_cpu_swiglu_rows(host, s->big0, s->big1, T, m->g.ffn);
    loom_cpu_matmul_rows(host, &L->down, s->big0, s->proj, T, s->prompt);
}

/* ---------------------------------------------------------------- forward */

/* Copies layer `layer`'s output (the residual stream after it, before the
 * final norm) of each row flagged LOOM_ROW_TAP to row k of out->taps
 * [k, n_taps * hidden], at slot j * hidden for every tap slot j naming that
 * layer. */
static void q35_tap(loom_model *m, const loom_round *round,
                    const loom_output *out, int64_t layer)
{
    int64_t H = m->g.hidden;
    for (int32_t j = 0; j < m->n_taps; j++) {
        if (m->taps[j] != layer)
            continue;
        int64_t k = 0;
        for (int32_t t = 0; t < round->n_rows; t++)
            if (loom_round_row(round, t)->flags & LOOM_ROW_TAP)
                memcpy(loom_view_row_f32(&out->taps, k++) + j * H,
                       m->s.h + (int64_t)t * H, (size_t)H * sizeof(float));
    }
}

loom_status LOOM_ABI q35_forward(loom_model *m, const loom_round *round,
                                 const loom_output *out, loom_err *err)
{
    const loom_host *host = m->host;
    const q35_geometry *g = &m->g;
    int64_t T = round->n_rows, H = g->hidden;
    float eps = (float)g->eps;
    if (T <= 0)
        return LOOM_OK;
    loom_round_plan *p = &m->plan;
    loom_status st = loom_round_plan_make(p, round, out, &m->rules, err);
    if (st == LOOM_OK)
        st = q35_scratch_reserve(m, T, err);
    for (int32_t i = 0; st == LOOM_OK && i < p->n_streams; i++)
        st = q35_cache_prepare(m, &p->streams[i], err);
    if (st != LOOM_OK)
        return st;

    /* nothing can fail from here on: the caches start to change */
    q35_scratch *s = &m->s;
    loom_cpu_prompt_rows(p, s->prompt);
    for (int64_t t = 0; t < T; t++)
        host->weight_row(&m->w.embed, loom_round_row(round, (int32_t)t)->token,
                         s->h + t * H);
    for (int64_t i = 0; i < g->n_layers; i++) {
        const q35_layer *L = &m->w.layers[i];
        loom_cpu_rmsnorm_rows(host, s->xn, s->h, L->in_norm, T, H, eps);
        if (L->kind == 'A')
            q35_attention(m, round, L, m->slot[i]);
        else
            q35_gdn(m, round, L, m->slot[i], p->n_streams);
        loom_cpu_add_rows(host, s->h, s->proj, T, H);
        loom_cpu_rmsnorm_rows(host, s->xn, s->h, L->post_norm, T, H, eps);
        if (L->moe)
            q35_moe_forward(m, L, s->xn, s->proj, T);
        else
            q35_mlp(m, L, T);
        loom_cpu_add_rows(host, s->h, s->proj, T, H);
        q35_tap(m, round, out, i);
    }
    if (p->n_logits > 0) {
        int64_t k = 0;
        for (int64_t t = 0; t < T; t++)
            if (loom_round_row(round, (int32_t)t)->flags & LOOM_ROW_LOGITS)
                loom_cpu_rmsnorm(s->xn + (k++) * H, s->h + t * H, m->w.norm, H,
                                 eps);
        loom_cpu_matmul_view(host, &m->w.lm_head, s->xn, p->n_logits,
                             &out->logits);
    }

    for (int32_t i = 0; i < p->n_streams; i++) {
        const loom_plan_stream *sm = &p->streams[i];
        loom_window_end(&sm->cache->win, sm);
        sm->cache->len = sm->len0 + sm->count;
    }
    return LOOM_OK;
}
