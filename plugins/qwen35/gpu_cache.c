/* The device half of a qwen35 stream cache and the pool it comes from: the
 * model makes at open K/V pages of Q35_KV_PAGE positions (every attention
 * layer's K and V) handed out as streams grow, and one slot per stream for
 * the Gated DeltaNet layers' conv tails, float32 states and their window
 * snapshots, with the stream's page table; speculative rows' replay log
 * grows with the longest window. The rollback is the CPU path's (cache.c):
 * snapshot at the window's first row, log what each speculative row fed,
 * and commit(kept) restores and replays the kept rows through the same
 * delta-rule step (cuda/gdn.cu), on the device. */
#include "gpu.h"

#include <stdlib.h>

#define Q35_POOL_DEFAULT_SLOTS 16

static int64_t q35_tail_n(const loom_model *m)
{
    return (m->g.conv_kernel - 1) * q35_conv_dim(&m->g);
}

static int64_t q35_state_n(const loom_model *m)
{
    return m->g.lin_v_heads * q35_gdn_head((int)m->g.lin_dk, (int)m->g.lin_dv);
}

static int64_t q35_kv_width(const loom_model *m)
{
    return m->g.n_kv_heads * m->g.head_dim;
}

static uint64_t q35_up256(uint64_t n)
{
    return (n + 255) & ~(uint64_t)255;
}

loom_status q35_gpu_pool_open(loom_model *m, int32_t max_streams, loom_err *err)
{
    q35_gpu *g = m->gpu;
    const loom_cuda *cu = g->cu;
    q35_gpu_pool *p = &g->pool;
    uint64_t lin = (uint64_t)m->n_lin, f = sizeof(float);
    p->ptab_len = (int32_t)((m->max_context + Q35_KV_PAGE - 1) / Q35_KV_PAGE);
    p->state_bytes =
        q35_up256(2 * lin * (uint64_t)(q35_tail_n(m) + q35_state_n(m)) * f);
    p->slot_bytes = p->state_bytes + q35_up256((uint64_t)p->ptab_len * 4);
    p->n_slots = max_streams > 0 ? max_streams : Q35_POOL_DEFAULT_SLOTS;
    p->page_bytes =
        (uint64_t)m->n_attn * 2u * Q35_KV_PAGE * (uint64_t)q35_kv_width(m) * f;
    /* every stream at the full context, or half the free memory */
    int64_t want = (int64_t)p->n_slots * p->ptab_len;
    size_t free_b = 0, total_b = 0;
    if (p->page_bytes > 0 && cu->memGetInfo(&free_b, &total_b) == 0) {
        int64_t room = (int64_t)(free_b / 2 / p->page_bytes);
        if (want > room)
            want = room > 1 ? room : 1;
    }
    if (p->page_bytes == 0)
        want = 0;
    p->free_pages = malloc(sizeof(int32_t) * (size_t)(want > 0 ? want : 1));
    p->free_slots = malloc(sizeof(int32_t) * (size_t)p->n_slots);
    if (!p->free_pages || !p->free_slots)
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "qwen35 cache pool: no memory");
    loom_status st =
        cu->alloc(cu, LOOM_MEM_CACHE, (uint64_t)p->n_slots * p->slot_bytes,
                  &p->slots, err);
    if (st != LOOM_OK)
        return st;
    /* a budget below the worst case: fewer pages, halved until they fit */
    st = LOOM_ERR_FULL;
    while (want > 0) {
        st = cu->alloc(cu, LOOM_MEM_CACHE, (uint64_t)want * p->page_bytes,
                       &p->pages, err);
        if (st != LOOM_ERR_FULL || want <= p->ptab_len)
            break;
        want /= 2;
    }
    if (want > 0 && st != LOOM_OK) {
        cu->free(cu, LOOM_MEM_CACHE, p->slots,
                 (uint64_t)p->n_slots * p->slot_bytes);
        p->slots = 0;
        return st;
    }
    p->n_pages = (int32_t)want;
    /* handed out lowest first */
    for (int32_t i = 0; i < p->n_pages; i++)
        p->free_pages[i] = p->n_pages - 1 - i;
    p->n_free_pages = p->n_pages;
    for (int32_t i = 0; i < p->n_slots; i++)
        p->free_slots[i] = p->n_slots - 1 - i;
    p->n_free_slots = p->n_slots;
    m->host->log(m->host, LOOM_LOG_INFO,
                 "qwen35: cache pool of %d slots and %d K/V pages of %d "
                 "positions (%llu bytes)",
                 p->n_slots, p->n_pages, Q35_KV_PAGE,
                 (unsigned long long)((uint64_t)p->n_pages * p->page_bytes +
                                      (uint64_t)p->n_slots * p->slot_bytes));
    return LOOM_OK;
}

void q35_gpu_pool_close(loom_model *m)
{
    q35_gpu *g = m->gpu;
    const loom_cuda *cu = g->cu;
    q35_gpu_pool *p = &g->pool;
    if (p->slots)
        cu->free(cu, LOOM_MEM_CACHE, p->slots,
                 (uint64_t)p->n_slots * p->slot_bytes);
    if (p->n_pages > 0)
        cu->free(cu, LOOM_MEM_CACHE, p->pages,
                 (uint64_t)p->n_pages * p->page_bytes);
    free(p->free_pages);
    free(p->free_slots);
    memset(p, 0, sizeof *p);
}

void q35_gpu_cache_view(const loom_model *m, const loom_cache *c,
                        q35_gpu_stream *out)
{
    const q35_gpu_cache *d = c->gpu;
    const q35_gpu_pool *p = &m->gpu->pool;
    uint64_t lin = (uint64_t)m->n_lin, f = sizeof(float);
    uint64_t tail = lin * (uint64_t)q35_tail_n(m) * f;
    uint64_t state = lin * (uint64_t)q35_state_n(m) * f;
    memset(out, 0, sizeof *out);
    out->kv = p->pages;
    out->ptab = d->fixed + p->state_bytes;
    out->n_attn = m->n_attn;
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
    q35_gpu_pool *p = &m->gpu->pool;
    const loom_cuda *cu = g->cu;
    loom_cache *c = calloc(1, sizeof *c);
    q35_gpu_cache *d = calloc(1, sizeof *d);
    int32_t *pages = malloc(sizeof(int32_t) * (size_t)(p->ptab_len + 1));
    if (!c || !d || !pages) {
        free(c);
        free(d);
        free(pages);
        return loom_err_set(err, LOOM_ERR_NOMEM, "qwen35 cache: no memory");
    }
    c->gpu = d;
    /* the snapshot and the log are device memory (d->fixed, d->log) */
    loom_window_init(&c->win, "qwen35", 0, 0);
    d->pages = pages;
    d->slot = -1;
    cu->ctxSetCurrent(cu->context);
    loom_status st = LOOM_OK;
    if (p->n_free_slots > 0) {
        d->slot = p->free_slots[--p->n_free_slots];
        d->fixed = p->slots + (uint64_t)d->slot * p->slot_bytes;
    } else {
        /* more caches than --parallel said: a slot of its own */
        st = cu->alloc(cu, LOOM_MEM_CACHE, p->slot_bytes, &d->fixed, err);
    }
    if (st == LOOM_OK)
        st = q35_gpu_check(
            g, cu->memsetD8Async(d->fixed, 0, p->state_bytes, cu->stream),
            "clearing a cache", err);
    if (st != LOOM_OK) {
        q35_gpu_cache_free(m, c);
        return st;
    }
    *out = c;
    return LOOM_OK;
}

/* Gives the cache's pages back to the pool. */
static void q35_pages_release(q35_gpu_pool *p, q35_gpu_cache *d)
{
    while (d->n_pages > 0)
        p->free_pages[p->n_free_pages++] = d->pages[--d->n_pages];
}

void q35_gpu_cache_reset(loom_model *m, loom_cache *c)
{
    const loom_cuda *cu = m->gpu->cu;
    cu->ctxSetCurrent(cu->context);
    cu->memsetD8Async(c->gpu->fixed, 0, m->gpu->pool.state_bytes, cu->stream);
    q35_pages_release(&m->gpu->pool, c->gpu);
    c->len = 0;
    loom_window_reset(&c->win);
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
        q35_gpu_pool *p = &m->gpu->pool;
        const loom_cuda *cu = m->gpu->cu;
        cu->ctxSetCurrent(cu->context);
        /* kernels in flight may still read it */
        cu->streamSynchronize(cu->stream);
        q35_pages_release(p, d);
        if (d->slot >= 0)
            p->free_slots[p->n_free_slots++] = d->slot;
        else
            cu->free(cu, LOOM_MEM_CACHE, d->fixed, p->slot_bytes);
        cu->free(cu, LOOM_MEM_CACHE, d->log, q35_log_bytes(m, d->log_cap));
        free(d->pages);
        free(d);
    }
    loom_window_free(&c->win);
    free(c);
}

/* Pages for `need` positions, from the pool; their page-table entries go
 * up in one stream-ordered copy (no synchronisation). */
static loom_status q35_pages_take(loom_model *m, loom_cache *c, int64_t need,
                                  loom_err *err)
{
    q35_gpu_cache *d = c->gpu;
    q35_gpu_pool *p = &m->gpu->pool;
    if (m->n_attn == 0)
        return LOOM_OK;
    int32_t want = (int32_t)((need + Q35_KV_PAGE - 1) / Q35_KV_PAGE);
    int32_t more = want - d->n_pages;
    if (more <= 0)
        return LOOM_OK;
    if (more > p->n_free_pages)
        return loom_err_set(err, LOOM_ERR_FULL,
                            "qwen35 cache pool: a stream needs %d more K/V "
                            "pages of %d positions, %d of %d are free (lower "
                            "--ctx or --parallel, or raise --gpu-memory)",
                            more, Q35_KV_PAGE, p->n_free_pages, p->n_pages);
    int32_t first = d->n_pages;
    for (int32_t i = 0; i < more; i++)
        d->pages[d->n_pages++] = p->free_pages[--p->n_free_pages];
    const loom_cuda *cu = m->gpu->cu;
    loom_cu_ptr at = d->fixed + p->state_bytes + (uint64_t)first * 4;
    loom_status st = q35_gpu_check(
        m->gpu,
        cu->memcpyHtoDAsync(at, d->pages + first, (size_t)more * 4, cu->stream),
        "uploading a page table", err);
    if (st != LOOM_OK) {
        while (d->n_pages > first)
            p->free_pages[p->n_free_pages++] = d->pages[--d->n_pages];
    }
    return st;
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
    loom_status st = q35_pages_take(m, c, need, err);
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

loom_status q35_gpu_cache_copy(loom_model *m, loom_cache *dst,
                               const loom_cache *src, loom_err *err)
{
    loom_status wst = loom_window_check_copy(&src->win, err);
    if (wst != LOOM_OK || dst == src)
        return wst;
    const q35_gpu *g = m->gpu;
    const loom_cuda *cu = g->cu;
    q35_gpu_pool *p = &m->gpu->pool;
    const q35_gpu_cache *s = src->gpu;
    q35_gpu_cache *d = dst->gpu;
    cu->ctxSetCurrent(cu->context);
    /* dst's pages go back first, so a pool that fits src's fits the copy;
     * q35_pages_take then uploads dst's whole page table */
    q35_pages_release(p, d);
    dst->len = 0;
    loom_window_reset(&dst->win);
    loom_status st = q35_pages_take(m, dst, src->len, err);
    /* conv tails and states (the snapshots only matter inside a window) */
    uint64_t fixed = (uint64_t)m->n_lin *
                     (uint64_t)(q35_tail_n(m) + q35_state_n(m)) * sizeof(float);
    if (st == LOOM_OK && fixed > 0)
        st = q35_gpu_check(
            g, cu->memcpyDtoDAsync(d->fixed, s->fixed, fixed, cu->stream),
            "copying a cache's states", err);
    /* the K/V pages that hold src's positions, page by page */
    int32_t n = m->n_attn > 0
                    ? (int32_t)((src->len + Q35_KV_PAGE - 1) / Q35_KV_PAGE)
                    : 0;
    for (int32_t i = 0; i < n && st == LOOM_OK; i++)
        st = q35_gpu_check(g,
                           cu->memcpyDtoDAsync(
                               p->pages + (uint64_t)d->pages[i] * p->page_bytes,
                               p->pages + (uint64_t)s->pages[i] * p->page_bytes,
                               p->page_bytes, cu->stream),
                           "copying a cache's K/V pages", err);
    if (st != LOOM_OK) {
        q35_gpu_cache_reset(m, dst);
        return st;
    }
    dst->len = src->len;
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
