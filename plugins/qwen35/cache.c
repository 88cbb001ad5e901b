/* The per-stream cache of the Qwen3.5 family: K/V rows of every full-attention
 * layer (loom_cpu_kv, growing with the stream, no fixed cap), and for every
 * Gated DeltaNet layer the conv tail (the last K-1 pre-activation conv inputs,
 * oldest first) and the fp32 recurrent state [Hv, dk, dv].
 *
 * Rollback of speculative rows (commit): when the first row flagged
 * LOOM_ROW_SPECULATIVE reaches a GDN layer, that layer's conv tail and state
 * are copied aside (one snapshot per window, ~state size, allocated once per
 * stream and reused), and each speculative row appends to a replay log what
 * it fed that layer: the conv input and the recurrence inputs (normalised k,
 * v, exp(g), beta). commit(kept) restores the snapshot and replays the first
 * `kept` logged rows through the same code the forward uses (q35_gdn_step,
 * the tail shift), so the state ends bit for bit as if only those rows had
 * been fed; attention layers just truncate their K/V rows. This costs one
 * state copy per window plus ~(conv_dim + key_dim + value_dim) floats per
 * row and layer, instead of a full state snapshot per row. A cache holds
 * one window at a time: the forward after it is refused until it is
 * committed (ABI 2's one window rule). The SDK's loom_window
 * (loom/window.h) keeps that state, the buffers and what commit(kept) must
 * do; this file lays out what goes in them. */
#include "qwen35.h"

#include <stdlib.h>

static int64_t q35_tail_floats(const loom_model *m)
{
    return (m->g.conv_kernel - 1) * q35_conv_dim(&m->g);
}

static int64_t q35_state_floats(const loom_model *m)
{
    return m->g.lin_v_heads * m->g.lin_dk * m->g.lin_dv;
}

uint64_t q35_cache_fixed_bytes(const loom_model *m)
{
    return (uint64_t)m->n_lin *
           (uint64_t)(q35_tail_floats(m) + q35_state_floats(m)) * sizeof(float);
}

uint64_t q35_cache_token_bytes(const loom_model *m)
{
    return (uint64_t)m->n_attn * 2u *
           (uint64_t)(m->g.n_kv_heads * m->g.head_dim) * sizeof(float);
}

loom_status LOOM_ABI q35_cache_new(loom_model *m, loom_cache **out,
                                   loom_err *err)
{
    loom_cache *c = calloc(1, sizeof *c);
    if (!c)
        return loom_err_set(err, LOOM_ERR_NOMEM, "qwen35 cache: no memory");
    size_t lin = (size_t)m->n_lin;
    c->kv = calloc((size_t)m->n_attn + 1, sizeof *c->kv);
    c->conv = calloc(lin * (size_t)q35_tail_floats(m) + 1, sizeof(float));
    c->state = calloc(lin * (size_t)q35_state_floats(m) + 1, sizeof(float));
    if (!c->kv || !c->conv || !c->state) {
        q35_cache_free(m, c);
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "qwen35 cache: no memory for %llu bytes",
                            (unsigned long long)q35_cache_fixed_bytes(m));
    }
    for (int i = 0; i < m->n_attn; i++)
        loom_cpu_kv_init(&c->kv[i], m->g.n_kv_heads * m->g.head_dim);
    loom_window_init(&c->win, "qwen35",
                     lin * (size_t)(q35_tail_floats(m) + q35_state_floats(m)) *
                         sizeof(float),
                     lin * (size_t)m->log.size * sizeof(float));
    loom_status st = m->host->account(m->host, LOOM_MEM_HOST, LOOM_MEM_CACHE,
                                      (int64_t)q35_cache_fixed_bytes(m), err);
    if (st != LOOM_OK) {
        /* not counted (c->accounted is 0): nothing to give back */
        q35_cache_free(m, c);
        return st;
    }
    c->accounted = 1;
    *out = c;
    return LOOM_OK;
}

void LOOM_ABI q35_cache_reset(loom_model *m, loom_cache *c)
{
    /* keep the allocations: the next stream will need them again */
    for (int i = 0; i < m->n_attn; i++)
        loom_cpu_kv_truncate(&c->kv[i], 0);
    memset(c->conv, 0,
           (size_t)m->n_lin * (size_t)q35_tail_floats(m) * sizeof(float));
    memset(c->state, 0,
           (size_t)m->n_lin * (size_t)q35_state_floats(m) * sizeof(float));
    c->len = 0;
    loom_window_reset(&c->win);
}

void LOOM_ABI q35_cache_free(loom_model *m, loom_cache *c)
{
    if (!c)
        return;
    /* giving bytes back is never refused */
    if (c->accounted)
        (void)m->host->account(m->host, LOOM_MEM_HOST, LOOM_MEM_CACHE,
                               -(int64_t)q35_cache_fixed_bytes(m), NULL);
    if (c->kv)
        for (int i = 0; i < m->n_attn; i++)
            loom_cpu_kv_free(&c->kv[i]);
    free(c->kv);
    free(c->conv);
    free(c->state);
    loom_window_free(&c->win);
    free(c);
}

loom_status LOOM_ABI q35_cache_copy(loom_model *m, loom_cache *dst,
                                    const loom_cache *src, loom_err *err)
{
    loom_status st = loom_window_check_copy(&src->win, err);
    if (st != LOOM_OK || dst == src)
        return st;
    /* a refusal leaves dst's contents as they were */
    st = loom_cpu_kv_copy(dst->kv, src->kv, m->n_attn, err);
    if (st != LOOM_OK)
        return st;
    memcpy(dst->conv, src->conv,
           (size_t)m->n_lin * (size_t)q35_tail_floats(m) * sizeof(float));
    memcpy(dst->state, src->state,
           (size_t)m->n_lin * (size_t)q35_state_floats(m) * sizeof(float));
    dst->len = src->len;
    loom_window_reset(&dst->win);
    return LOOM_OK;
}

int64_t q35_cache_len(const loom_cache *c)
{
    return c->len;
}

float *q35_cache_log(const loom_model *m, loom_cache *c, int32_t i, int l)
{
    return (float *)loom_window_row(&c->win, i) +
           (size_t)l * (size_t)m->log.size;
}

float *q35_cache_snap_conv(const loom_model *m, loom_cache *c, int l)
{
    return (float *)c->win.snapshot + (size_t)l * (size_t)q35_tail_floats(m);
}

float *q35_cache_snap_state(const loom_model *m, loom_cache *c, int l)
{
    return (float *)c->win.snapshot +
           (size_t)m->n_lin * (size_t)q35_tail_floats(m) +
           (size_t)l * (size_t)q35_state_floats(m);
}

loom_status q35_cache_prepare(loom_model *m, const loom_plan_stream *s,
                              loom_err *err)
{
    loom_cache *c = s->cache;
    for (int i = 0; i < m->n_attn; i++) {
        loom_status st = loom_cpu_kv_reserve(&c->kv[i], c->len + s->count, err);
        if (st != LOOM_OK)
            return st;
    }
    return loom_window_reserve(&c->win, s, err);
}

loom_status LOOM_ABI q35_commit(loom_model *m, loom_cache *c, int32_t kept,
                                loom_err *err)
{
    const q35_geometry *g = &m->g;
    int64_t cd = q35_conv_dim(g), tail = q35_tail_floats(m);
    int64_t sf = q35_state_floats(m), kt = g->conv_kernel - 1;
    int64_t dk = g->lin_dk, dv = g->lin_dv, Hv = g->lin_v_heads;
    int64_t group = Hv / g->lin_k_heads;
    float tmp[1024];
    /* before the window closes: a failed commit changes nothing */
    float *tmpp = dv <= 1024 ? tmp : malloc((size_t)dv * sizeof(float));
    if (!tmpp)
        return loom_err_set(err, LOOM_ERR_NOMEM, "qwen35: no memory");
    loom_window_keep keep;
    loom_status st = loom_window_commit(&c->win, kept, &keep, err);
    if (st == LOOM_OK && keep.rollback) {
        for (int l = 0; l < m->n_lin; l++) {
            float *tl = c->conv + (size_t)l * (size_t)tail;
            float *S = c->state + (size_t)l * (size_t)sf;
            memcpy(tl, q35_cache_snap_conv(m, c, l),
                   (size_t)tail * sizeof(float));
            memcpy(S, q35_cache_snap_state(m, c, l),
                   (size_t)sf * sizeof(float));
            for (int32_t r = 0; r < keep.kept; r++) {
                const float *e = q35_cache_log(m, c, r, l);
                /* the tail shift of loom_cpu_conv_step */
                if (kt > 0) {
                    memmove(tl, tl + cd,
                            (size_t)(kt - 1) * (size_t)cd * sizeof(float));
                    memcpy(tl + (kt - 1) * cd, e + m->log.conv,
                           (size_t)cd * sizeof(float));
                }
                for (int64_t h = 0; h < Hv; h++)
                    q35_gdn_step(S + h * dk * dv, NULL,
                                 e + m->log.k + (h / group) * dk,
                                 e + m->log.v + h * dv, e[m->log.decay + h],
                                 e[m->log.beta + h], NULL, dk, dv, tmpp);
            }
        }
        for (int i = 0; i < m->n_attn; i++)
            loom_cpu_kv_truncate(&c->kv[i], keep.len);
        c->len = keep.len;
    }
    if (tmpp != tmp)
        free(tmpp);
    return st;
}
