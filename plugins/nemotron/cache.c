/* The Nemotron-H stream cache: per Mamba layer the conv tail and the SSM
 * state, per attention layer the K/V rows, and the log that lets `commit`
 * drop the rejected rows of a speculative window.
 *
 * Layout. Conv tail: the last K-1 pre-activation conv inputs, stored
 * [K-1, conv_dim] oldest first (loom_cpu_conv_step's layout; the spec's
 * [conv_dim, K-1] transposed). SSM state: [nh, P, N] float32. K/V: float32
 * rows of n_kv_heads * head_dim per position, growing geometrically with no
 * fixed cap (loom_cpu_kv).
 *
 * Windows (LOOM_CAP_WINDOWS). A forward whose last rows for a cache are
 * flagged LOOM_ROW_SPECULATIVE copies, just before the first of them, each
 * Mamba layer's conv tail and SSM state (one snapshot, whatever the window's
 * length), and logs per speculative row the conv input, the activated conv
 * output (x, B, C) and the softplus'd dt. commit(kept) restores the
 * snapshot and replays the first `kept` logged rows through the same
 * loom_cpu_ssm_step the forward used (state only, no output), so the state
 * ends bit for bit as if only those rows had been fed; the conv tail is
 * rebuilt from the snapshot and the logged inputs (copies, so exact); K/V and
 * the length are truncated. The snapshot costs one SSM state per Mamba layer,
 * allocated on a cache's first window. A cache holds one window at a time:
 * the forward after it is refused until it is committed (ABI 2's one
 * window rule). The SDK's loom_window (loom/window.h) keeps that state, the
 * buffers and what commit(kept) must do; this file lays out what goes in
 * them. */
#include "nemotron.h"

#include <loom/cpu_ssm.h>

#include <stdlib.h>
#include <string.h>

static size_t tail_floats(const nem_geometry *g)
{
    return (size_t)(g->conv_kernel - 1) * (size_t)g->conv_dim;
}

static size_t ssm_floats(const nem_geometry *g)
{
    return (size_t)g->m_heads * (size_t)g->m_head_dim * (size_t)g->ssm_state;
}

/* floats per Mamba slot in one window log row: in, xbc, dt */
static size_t log_floats(const nem_geometry *g)
{
    return 2 * (size_t)g->conv_dim + (size_t)g->m_heads;
}

uint64_t nem_cache_bytes_fixed(const nem_geometry *g)
{
    return (uint64_t)g->n_mamba * (tail_floats(g) + ssm_floats(g)) *
           sizeof(float);
}

uint64_t nem_cache_bytes_per_token(const nem_geometry *g)
{
    return (uint64_t)g->n_attn * 2u * (uint64_t)g->n_kv_heads *
           (uint64_t)g->head_dim * sizeof(float);
}

loom_status LOOM_ABI nem_cache_new(loom_model *m, loom_cache **out,
                                   loom_err *err)
{
    const nem_geometry *g = &m->g;
    loom_cache *c = calloc(1, sizeof *c);
    if (!c)
        return loom_err_set(err, LOOM_ERR_NOMEM, "cache: out of memory");
    c->mamba = calloc((size_t)g->n_mamba + 1, sizeof *c->mamba);
    c->kv = calloc((size_t)g->n_attn + 1, sizeof *c->kv);
    if (!c->mamba || !c->kv)
        goto nomem;
    for (int i = 0; i < g->n_mamba; i++) {
        /* K == 1 has no tail; keep a valid pointer all the same */
        c->mamba[i].tail = calloc(tail_floats(g) + 1, sizeof(float));
        c->mamba[i].ssm = calloc(ssm_floats(g), sizeof(float));
        if (!c->mamba[i].tail || !c->mamba[i].ssm)
            goto nomem;
    }
    for (int i = 0; i < g->n_attn; i++)
        loom_cpu_kv_init(&c->kv[i], (int64_t)g->n_kv_heads * g->head_dim);
    loom_window_init(&c->win, "nemotron",
                     (size_t)g->n_mamba * (tail_floats(g) + ssm_floats(g)) *
                         sizeof(float),
                     (size_t)g->n_mamba * log_floats(g) * sizeof(float));
    loom_status rc = m->host->account(m->host, LOOM_MEM_HOST, LOOM_MEM_CACHE,
                                      (int64_t)nem_cache_bytes_fixed(g), err);
    if (rc != LOOM_OK) {
        /* not counted (c->accounted is 0): nothing to give back */
        nem_cache_free(m, c);
        return rc;
    }
    c->accounted = 1;
    *out = c;
    return LOOM_OK;
nomem:
    nem_cache_free(m, c);
    return loom_err_set(err, LOOM_ERR_NOMEM,
                        "cache: out of memory (%llu bytes of Mamba state)",
                        (unsigned long long)nem_cache_bytes_fixed(g));
}

void LOOM_ABI nem_cache_reset(loom_model *m, loom_cache *c)
{
    const nem_geometry *g = &m->g;
    if (!c)
        return;
    for (int i = 0; i < g->n_mamba; i++) {
        memset(c->mamba[i].tail, 0, tail_floats(g) * sizeof(float));
        memset(c->mamba[i].ssm, 0, ssm_floats(g) * sizeof(float));
    }
    for (int i = 0; i < g->n_attn; i++)
        loom_cpu_kv_truncate(&c->kv[i], 0);
    c->len = 0;
    loom_window_reset(&c->win);
}

void LOOM_ABI nem_cache_free(loom_model *m, loom_cache *c)
{
    const nem_geometry *g = &m->g;
    if (!c)
        return;
    if (c->mamba)
        for (int i = 0; i < g->n_mamba; i++) {
            nem_mamba_state *s = &c->mamba[i];
            free(s->tail);
            free(s->ssm);
        }
    loom_window_free(&c->win);
    if (c->kv)
        for (int i = 0; i < g->n_attn; i++)
            loom_cpu_kv_free(&c->kv[i]);
    /* giving bytes back is never refused */
    if (c->accounted)
        (void)m->host->account(m->host, LOOM_MEM_HOST, LOOM_MEM_CACHE,
                               -(int64_t)nem_cache_bytes_fixed(g), NULL);
    free(c->mamba);
    free(c->kv);
    free(c);
}

loom_status LOOM_ABI nem_cache_copy(loom_model *m, loom_cache *dst,
                                    const loom_cache *src, loom_err *err)
{
    const nem_geometry *g = &m->g;
    loom_status rc = loom_window_check_copy(&src->win, err);
    if (rc != LOOM_OK || dst == src)
        return rc;
    /* a refusal leaves dst's contents as they were */
    rc = loom_cpu_kv_copy(dst->kv, src->kv, (int)g->n_attn, err);
    if (rc != LOOM_OK)
        return rc;
    for (int i = 0; i < g->n_mamba; i++) {
        memcpy(dst->mamba[i].tail, src->mamba[i].tail,
               tail_floats(g) * sizeof(float));
        memcpy(dst->mamba[i].ssm, src->mamba[i].ssm,
               ssm_floats(g) * sizeof(float));
    }
    dst->len = src->len;
    loom_window_reset(&dst->win);
    return LOOM_OK;
}

int64_t nem_cache_len(const loom_cache *c)
{
    return c->len;
}

float *nem_cache_snap_tail(const nem_geometry *g, loom_cache *c, int slot)
{
    return (float *)c->win.snapshot +
           (size_t)slot * (tail_floats(g) + ssm_floats(g));
}

float *nem_cache_snap_ssm(const nem_geometry *g, loom_cache *c, int slot)
{
    return nem_cache_snap_tail(g, c, slot) + tail_floats(g);
}

float *nem_cache_log(const nem_geometry *g, loom_cache *c, int32_t i, int slot)
{
    return (float *)loom_window_row(&c->win, i) + (size_t)slot * log_floats(g);
}

loom_status nem_cache_reserve(loom_model *m, const loom_plan_stream *s,
                              loom_err *err)
{
    const nem_geometry *g = &m->g;
    loom_cache *c = s->cache;
    for (int i = 0; i < g->n_attn; i++) {
        loom_status rc = loom_cpu_kv_reserve(&c->kv[i], c->len + s->count, err);
        if (rc != LOOM_OK)
            return rc;
    }
    return loom_window_reserve(&c->win, s, err);
}

struct replay {
    const loom_model *m;
    loom_cache *c;
    int32_t kept;
    int32_t *slot_layer; /* Mamba slot -> layer index */
};

/* Items are (Mamba slot, head) pairs. */
static void LOOM_ABI replay_heads(void *ctx, int64_t begin, int64_t end)
{
    const struct replay *r = ctx;
    const nem_geometry *g = &r->m->g;
    int64_t nh = g->m_heads, P = g->m_head_dim, N = g->ssm_state;
    int64_t heads_per_group = nh / g->n_groups;
    size_t hs = (size_t)(P * N);
    for (int64_t it = begin; it < end; it++) {
        int64_t slot = it / nh, h = it % nh, grp = h / heads_per_group;
        const nem_layer *L = &r->m->layers[r->slot_layer[slot]];
        float *state = r->c->mamba[slot].ssm + h * hs;
        memcpy(state, nem_cache_snap_ssm(g, r->c, (int)slot) + h * hs,
               hs * sizeof(float));
        for (int32_t j = 0; j < r->kept; j++) {
            const float *e = nem_cache_log(g, r->c, j, (int)slot);
            const float *xbc = e + g->conv_dim;
            const float *dt = e + 2 * g->conv_dim;
            loom_cpu_ssm_step(state, xbc + h * P, xbc + g->d_inner + grp * N,
                              xbc + g->d_inner + (g->n_groups + grp) * N, dt[h],
                              L->A[h], L->D[h], NULL, P, N);
        }
    }
}

loom_status LOOM_ABI nem_cache_commit(loom_model *m, loom_cache *c,
                                      int32_t kept, loom_err *err)
{
    const nem_geometry *g = &m->g;
    loom_window_keep keep;
    loom_status rc = loom_window_commit(&c->win, kept, &keep, err);
    if (rc != LOOM_OK || !keep.rollback)
        return rc;
    c->len = keep.len;
    for (int i = 0; i < g->n_attn; i++)
        loom_cpu_kv_truncate(&c->kv[i], c->len);
    if (g->n_mamba == 0)
        return LOOM_OK;

    /* conv tails: the snapshot, then the kept inputs pushed in order */
    size_t K1 = (size_t)(g->conv_kernel - 1), cd = (size_t)g->conv_dim;
    for (int i = 0; i < g->n_mamba; i++) {
        nem_mamba_state *s = &c->mamba[i];
        memcpy(s->tail, nem_cache_snap_tail(g, c, i), K1 * cd * sizeof(float));
        for (int32_t j = 0; j < keep.kept && K1 > 0; j++) {
            memmove(s->tail, s->tail + cd, (K1 - 1) * cd * sizeof(float));
            memcpy(s->tail + (K1 - 1) * cd, nem_cache_log(g, c, j, i),
                   cd * sizeof(float));
        }
    }
    /* SSM states: the snapshot, then the kept rows replayed */
    int32_t slot_layer[NEM_MAX_LAYERS];
    for (int i = 0; i < g->n_layers; i++)
        if (m->layers[i].kind == NEM_MAMBA)
            slot_layer[m->layers[i].slot] = i;
    struct replay r = {m, c, keep.kept, slot_layer};
    m->host->parallel_for(m->host, (int64_t)g->n_mamba * g->m_heads,
                          replay_heads, &r);
    return LOOM_OK;
}
