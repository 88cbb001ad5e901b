/* The device half of a qwen35 stream cache: K/V rows of every attention
 * layer in one contiguous block that grows with the stream (paged later),
 * and for the Gated DeltaNet layers the conv tails, the float32 states and
 * their window snapshots in one fixed block; speculative rows' replay log
 * grows with the longest window. The rollback is the CPU path's (cache.c):
 * snapshot at the window's first row, log what each speculative row fed,
 * and commit(kept) restores and replays the kept rows through the same
 * delta-rule step (cuda/gdn.cu), on the device. */
#include "gpu.h"

#include <stdlib.h>

static int64_t q35_tail_n(const loom_model *m)
{
    return (m->g.conv_kernel - 1) * q35_conv_dim(&m->g);
}

static int64_t q35_state_n(const loom_model *m)
{
    return m->g.lin_v_heads * m->g.lin_dk * m->g.lin_dv;
}

static int64_t q35_kv_width(const loom_model *m)
{
    return m->g.n_kv_heads * m->g.head_dim;
}

void q35_gpu_cache_view(const loom_model *m, const loom_cache *c,
                        q35_gpu_stream *out)
{
    const q35_gpu_cache *d = c->gpu;
    uint64_t lin = (uint64_t)m->n_lin, f = sizeof(float);
    uint64_t tail = lin * (uint64_t)q35_tail_n(m) * f;
    uint64_t state = lin * (uint64_t)q35_state_n(m) * f;
    memset(out, 0, sizeof *out);
    out->kv = d->kv;
    out->kv_cap = d->kv_cap;
    out->conv = d->fixed;
    out->state = d->fixed + tail;
    out->snap_conv = d->fixed + tail + state;
    out->snap_state = d->fixed + 2 * tail + state;
    out->log = d->log;
    out->snap_row = -1;
}

loom_status q35_gpu_cache_new(loom_model *m, loom_cache **out, loom_err *err)
{
    const q35_gpu *g = m->gpu;
    const loom_cuda *cu = g->cu;
    loom_cache *c = calloc(1, sizeof *c);
    q35_gpu_cache *d = calloc(1, sizeof *d);
    if (!c || !d) {
        free(c);
        free(d);
        return loom_err_set(err, LOOM_ERR_NOMEM, "qwen35 cache: no memory");
    }
    c->gpu = d;
    /* the snapshot and the log are device memory (d->fixed, d->log) */
    loom_window_init(&c->win, "qwen35", 0, 0);
    uint64_t lin = (uint64_t)m->n_lin, f = sizeof(float);
    d->fixed_bytes =
        2 * lin * (uint64_t)(q35_tail_n(m) + q35_state_n(m)) * f + 256;
    cu->ctxSetCurrent(cu->context);
    loom_status st =
        cu->alloc(cu, LOOM_MEM_CACHE, d->fixed_bytes, &d->fixed, err);
    if (st == LOOM_OK)
        st = q35_gpu_check(
            g, cu->memsetD8Async(d->fixed, 0, d->fixed_bytes, cu->stream),
            "clearing a cache", err);
    if (st != LOOM_OK) {
        q35_gpu_cache_free(m, c);
        return st;
    }
    *out = c;
    return LOOM_OK;
}

void q35_gpu_cache_reset(loom_model *m, loom_cache *c)
{
    const loom_cuda *cu = m->gpu->cu;
    cu->ctxSetCurrent(cu->context);
    cu->memsetD8Async(c->gpu->fixed, 0, c->gpu->fixed_bytes, cu->stream);
    c->len = 0;
    loom_window_reset(&c->win);
}

static uint64_t q35_kv_bytes(const loom_model *m, int64_t cap)
{
    return (uint64_t)m->n_attn * 2u * (uint64_t)cap *
           (uint64_t)q35_kv_width(m) * sizeof(float);
}

static uint64_t q35_log_bytes(const loom_model *m, int64_t cap)
{
    return (uint64_t)cap * (uint64_t)m->n_lin * (uint64_t)m->log.size *
           sizeof(float);
}

void q35_gpu_cache_free(loom_model *m, loom_cache *c)
{
    if (!c)
        return;
    q35_gpu_cache *d = c->gpu;
    if (d) {
        const loom_cuda *cu = m->gpu->cu;
        cu->ctxSetCurrent(cu->context);
        /* kernels in flight may still read it */
        cu->streamSynchronize(cu->stream);
        cu->free(cu, LOOM_MEM_CACHE, d->fixed, d->fixed_bytes);
        cu->free(cu, LOOM_MEM_CACHE, d->kv, q35_kv_bytes(m, d->kv_cap));
        cu->free(cu, LOOM_MEM_CACHE, d->log, q35_log_bytes(m, d->log_cap));
        free(d);
    }
    loom_window_free(&c->win);
    free(c);
}

/* Grows the K/V block to hold `need` positions, keeping the first c->len
 * of each layer's K and V. */
static loom_status q35_kv_grow(loom_model *m, loom_cache *c, int64_t need,
                               loom_err *err)
{
    q35_gpu_cache *d = c->gpu;
    const q35_gpu *g = m->gpu;
    const loom_cuda *cu = g->cu;
    if (need <= d->kv_cap || m->n_attn == 0)
        return LOOM_OK;
    int64_t cap = d->kv_cap ? d->kv_cap : 256;
    while (cap < need)
        cap *= 2;
    if (cap > m->max_context)
        cap = m->max_context;
    loom_cu_ptr p = 0;
    loom_status st =
        cu->alloc(cu, LOOM_MEM_CACHE, q35_kv_bytes(m, cap), &p, err);
    if (st != LOOM_OK)
        return st;
    uint64_t row = (uint64_t)q35_kv_width(m) * sizeof(float);
    for (int64_t i = 0; st == LOOM_OK && c->len > 0 && i < 2 * m->n_attn; i++)
        st = q35_gpu_check(
            g,
            cu->memcpyDtoDAsync(p + (uint64_t)i * (uint64_t)cap * row,
                                d->kv + (uint64_t)i * (uint64_t)d->kv_cap * row,
                                (size_t)((uint64_t)c->len * row), cu->stream),
            "growing a K/V cache", err);
    if (st == LOOM_OK)
        st = q35_gpu_check(g, cu->streamSynchronize(cu->stream),
                           "growing a K/V cache", err);
    if (st != LOOM_OK) {
        cu->free(cu, LOOM_MEM_CACHE, p, q35_kv_bytes(m, cap));
        return st;
    }
    cu->free(cu, LOOM_MEM_CACHE, d->kv, q35_kv_bytes(m, d->kv_cap));
    d->kv = p;
    d->kv_cap = cap;
    return LOOM_OK;
}

loom_status q35_gpu_cache_prepare(loom_model *m, loom_cache *c, int64_t n_new,
                                  int32_t n_spec, loom_err *err)
{
    int64_t need = c->len + n_new;
    if (need > m->max_context)
        return loom_err_set(err, LOOM_ERR_FULL,
                            "qwen35: stream would hold %lld positions, over "
                            "the context limit %lld",
                            (long long)need, (long long)m->max_context);
    loom_status st = q35_kv_grow(m, c, need, err);
    if (st != LOOM_OK || n_spec == 0 || m->n_lin == 0)
        return st;
    q35_gpu_cache *d = c->gpu;
    if (n_spec <= d->log_cap)
        return LOOM_OK;
    /* a window holds at most LOOM_MAX_WINDOW rows: one size serves all, and
     * a window's log starts empty, so nothing is kept */
    const loom_cuda *cu = m->gpu->cu;
    int32_t cap = n_spec > LOOM_MAX_WINDOW ? n_spec : LOOM_MAX_WINDOW;
    loom_cu_ptr p = 0;
    st = cu->alloc(cu, LOOM_MEM_CACHE, q35_log_bytes(m, cap), &p, err);
    if (st != LOOM_OK)
        return st;
    cu->free(cu, LOOM_MEM_CACHE, d->log, q35_log_bytes(m, d->log_cap));
    d->log = p;
    d->log_cap = cap;
    return LOOM_OK;
}

loom_status q35_gpu_commit(loom_model *m, loom_cache *c, int32_t kept,
                           loom_err *err)
{
    loom_window_keep keep;
    loom_status st = loom_window_commit(&c->win, kept, &keep, err);
    if (st != LOOM_OK || !keep.rollback)
        return st;
    const q35_gpu *g = m->gpu;
    const q35_geometry *G = &m->g;
    q35_gpu_stream v;
    q35_gpu_cache_view(m, c, &v);
    int cd = (int)q35_conv_dim(G), K = (int)G->conv_kernel;
    int Hk = (int)G->lin_k_heads, Hv = (int)G->lin_v_heads;
    int dk = (int)G->lin_dk, dv = (int)G->lin_dv, n_lin = m->n_lin;
    int log_size = g->lay.size, log_conv = g->lay.conv;
    q35_gpu_log lay = g->lay;
    unsigned lin = (unsigned)n_lin;
    /* restore the snapshot and replay the kept rows, on the device */
    void *ca[] = {&v.conv, &v.snap_conv, &v.log,    &kept,    &cd,
                  &K,      &n_lin,       &log_size, &log_conv};
    st = q35_gpu_launch(g, g->fn.conv_restore, (unsigned)(cd + 127) / 128, lin,
                        128, 0, ca, "q35_conv_restore", err);
    void *ra[] = {&v.state, &v.snap_state, &v.log, &kept,  &Hk,
                  &Hv,      &dk,           &dv,    &n_lin, &lay};
    if (st == LOOM_OK)
        st = q35_gpu_launch(g, g->fn.gdn_replay, (unsigned)Hv, lin,
                            g->gdn_threads, 0, ra, "q35_gdn_replay", err);
    /* the window is closed either way; the K/V rows past keep.len are
     * overwritten by the next rows */
    c->len = keep.len;
    return st;
}
