/* The qwen35 forward on the device: the round's rows regrouped stream by
 * stream (each stream's rows contiguous, in order) into a row table, one
 * upload of that table, then one launch per step on the host's stream; the
 * logits (and taps) come back to the host at the end, the only copy of the
 * forward (an ABI with device views of the output removes it later). */
#include "gpu.h"

#include <stdlib.h>

/* Groups the round's rows by cache and checks them; changes nothing (the
 * same checks and messages as the CPU path's plan). */
static loom_status q35_gpu_plan(loom_model *m, const loom_round *round,
                                int32_t *n_streams, loom_err *err)
{
    q35_gpu *g = m->gpu;
    int32_t n = round->n_rows, ns = 0;
    for (int32_t i = 0; i < n; i++) {
        const loom_row *r = &round->rows[i];
        if (!r->cache)
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "qwen35 forward: row %d has no cache", i);
        if (r->token < 0 || r->token >= m->g.vocab)
            return loom_err_set(err, LOOM_ERR_RANGE,
                                "qwen35 forward: row %d token %d is outside "
                                "the vocabulary of %lld",
                                i, r->token, (long long)m->g.vocab);
        if (r->parent != -1)
            return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                                "qwen35 forward: row %d has parent %d; trees "
                                "are not supported",
                                i, r->parent);
        if (!r->cache->gpu)
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "qwen35 forward: row %d's cache is not a "
                                "device cache",
                                i);
        int32_t s = 0;
        while (s < ns && g->streams[s].cache != r->cache)
            s++;
        if (s == ns)
            g->streams[ns++] =
                (q35_stream){r->cache, 0, 0, -1, 0, r->cache->len};
        g->streams[s].count++;
    }
    int32_t off = 0;
    for (int32_t s = 0; s < ns; s++) {
        g->streams[s].first = off;
        off += g->streams[s].count;
        g->streams[s].count = 0;
    }
    for (int32_t i = 0; i < n; i++) {
        const loom_row *r = &round->rows[i];
        int32_t s = 0;
        while (g->streams[s].cache != r->cache)
            s++;
        q35_stream *st = &g->streams[s];
        int32_t k = st->count++;
        g->stream_rows[st->first + k] = i;
        g->dev_of[i] = st->first + k;
        if (r->position != st->len0 + k)
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "qwen35 forward: row %d has position %d, "
                                "but its stream is at %lld",
                                i, r->position, (long long)(st->len0 + k));
        int spec = (r->flags & LOOM_ROW_SPECULATIVE) != 0;
        if (spec && st->first_spec < 0)
            st->first_spec = k;
        if (!spec && st->first_spec >= 0)
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "qwen35 forward: row %d is not speculative "
                                "but follows a speculative row of its "
                                "stream",
                                i);
    }
    *n_streams = ns;
    return LOOM_OK;
}

void q35_gpu_graphs_free(q35_gpu *g)
{
    for (int i = 0; i < g->n_graphs; i++)
        if (g->graphs[i].exec)
            g->cu->graphExecDestroy(g->graphs[i].exec);
    g->n_graphs = 0;
}

/* Grows a device output buffer (logits, taps) to `bytes`. */
static loom_status q35_gpu_grow(q35_gpu *g, loom_cu_ptr *p, uint64_t *have,
                                uint64_t bytes, loom_err *err)
{
    if (bytes <= *have)
        return LOOM_OK;
    const loom_cuda *cu = g->cu;
    /* the graphs launch into the old buffer */
    q35_gpu_graphs_free(g);
    loom_status st = q35_gpu_check(g, cu->streamSynchronize(cu->stream),
                                   "growing an output buffer", err);
    if (st != LOOM_OK)
        return st;
    cu->free(cu, LOOM_MEM_SCRATCH, *p, *have);
    *p = 0;
    *have = 0;
    st = cu->alloc(cu, LOOM_MEM_SCRATCH, bytes, p, err);
    if (st == LOOM_OK)
        *have = bytes;
    return st;
}

/* The launches of one forward share these. */
typedef struct q35_run {
    loom_model *m;
    q35_gpu *g;
    int T, ns;
    loom_err *err;
} q35_run;

#define Q35_LAUNCH(f, gx, gy, bx, smem, ...)                                   \
    do {                                                                       \
        void *args_[] = {__VA_ARGS__};                                         \
        loom_status st_ = q35_gpu_launch(R->g, R->g->fn.f, (unsigned)(gx),     \
                                         (unsigned)(gy), (unsigned)(bx),       \
                                         (unsigned)(smem), args_, #f, R->err); \
        if (st_ != LOOM_OK)                                                    \
            return st_;                                                        \
    } while (0)

static int q35_dt(loom_dtype t)
{
    return t == LOOM_DTYPE_BF16 ? 0 : t == LOOM_DTYPE_F16 ? 1 : 2;
}

/* y = W x over T rows (mode 0), y += W x (1), or y = silu(W x) * (W2 x)
 * (2); with sel, row t uses expert sel[t * sel_stride] of W (and W2). */
static loom_status q35_lin(const q35_run *R, const q35_gpu_lin *w,
                           const q35_gpu_lin *w2, loom_cu_ptr x, int ldx,
                           loom_cu_ptr y, int ldy, int T, int mode,
                           loom_cu_ptr sel, int sel_stride)
{
    loom_cu_ptr wp = w->p, w2p = w2 ? w2->p : 0;
    int rows = w->rows, cols = w->cols, tile = sel ? 1 : 8;
    long long estride = (long long)rows * cols;
    /* warps per row: enough blocks to fill the chip; the weight's shape
     * alone decides, so a row's summation order never depends on the round */
    int wpr = 1;
    while (wpr < 8 && rows * wpr < 8192 && cols >= 64 * wpr)
        wpr *= 2;
    void *args[] = {&wp,   &w2p,  &x,          &ldx,     &y,
                    &ldy,  &rows, &cols,       &T,       &tile,
                    &mode, &sel,  &sel_stride, &estride, &wpr};
    return q35_gpu_launch(R->g, R->g->fn.linear[q35_dt(w->dtype)],
                          (unsigned)((rows * wpr + 7) / 8),
                          (unsigned)(T + tile - 1) / tile, 256, 0, args,
                          "q35_linear", R->err);
}

#define Q35_LIN(...)                                                           \
    do {                                                                       \
        loom_status st_ = q35_lin(R, __VA_ARGS__);                             \
        if (st_ != LOOM_OK)                                                    \
            return st_;                                                        \
    } while (0)

static loom_status q35_gpu_norm(const q35_run *R, loom_cu_ptr x,
                                loom_cu_ptr map, loom_cu_ptr out, loom_cu_ptr w,
                                int n_rows)
{
    int H = (int)R->m->g.hidden;
    float eps = (float)R->m->g.eps;
    Q35_LAUNCH(rmsnorm, n_rows, 1, 1024, 0, &x, &map, &out, &w, &H, &eps);
    return LOOM_OK;
}

static loom_status q35_gpu_attention(const q35_run *R, q35_gpu_layer *L,
                                     int slot)
{
    const q35_geometry *G = &R->m->g;
    q35_gpu_scratch *s = &R->g->s;
    int T = R->T, H = (int)G->hidden;
    int nh = (int)G->n_heads, nkv = (int)G->n_kv_heads, hd = (int)G->head_dim;
    int rot = (int)G->rot_dim, qw = 2 * nh * hd, kvw = nkv * hd;
    float eps = (float)G->eps;
    Q35_LIN(&L->q, NULL, s->xn, H, s->big0, qw, T, 0, 0, 0);
    Q35_LIN(&L->k, NULL, s->xn, H, s->big1, kvw, T, 0, 0, 0);
    Q35_LIN(&L->v, NULL, s->xn, H, s->big2, kvw, T, 0, 0, 0);
    loom_cu_ptr inv = R->g->inv_freq;
    Q35_LAUNCH(attn_prep, nh + nkv, T, 128, (unsigned)hd * 4, &s->big0,
               &s->big1, &s->big2, &L->q_norm, &L->k_norm, &inv, &s->streams,
               &s->rows, &slot, &nh, &nkv, &hd, &rot, &eps);
    Q35_LAUNCH(attention, nh, T, 128, 0, &s->big0, &s->o, &s->streams, &s->rows,
               &slot, &nh, &nkv, &hd);
    Q35_LIN(&L->o, NULL, s->o, nh * hd, s->h, H, T, 1, 0, 0);
    return LOOM_OK;
}

static loom_status q35_gpu_gdn(const q35_run *R, q35_gpu_layer *L, int slot)
{
    const loom_model *m = R->m;
    const q35_geometry *G = &m->g;
    q35_gpu *g = R->g;
    q35_gpu_scratch *s = &g->s;
    int T = R->T, H = (int)G->hidden;
    int Hk = (int)G->lin_k_heads, Hv = (int)G->lin_v_heads;
    int dk = (int)G->lin_dk, dv = (int)G->lin_dv;
    int kd = Hk * dk, vd = Hv * dv, cd = 2 * kd + vd, K = (int)G->conv_kernel;
    int n_lin = m->n_lin, log_size = g->lay.size, log_conv = g->lay.conv;
    float eps = (float)G->eps;
    if (G->variant == Q35_VARIANT_NEXT) {
        Q35_LIN(&L->qkvz, NULL, s->xn, H, s->big1, 2 * kd + 2 * vd, T, 0, 0, 0);
        Q35_LIN(&L->ba, NULL, s->xn, H, s->big2, 2 * Hv, T, 0, 0, 0);
        Q35_LAUNCH(next_split, T, 1, 256, 0, &s->big1, &s->big2, &s->big0,
                   &s->z, &s->b, &s->a, &Hk, &Hv, &dk, &dv);
    } else {
        Q35_LIN(&L->qkv, NULL, s->xn, H, s->big0, cd, T, 0, 0, 0);
        Q35_LIN(&L->z, NULL, s->xn, H, s->z, vd, T, 0, 0, 0);
        Q35_LIN(&L->b, NULL, s->xn, H, s->b, Hv, T, 0, 0, 0);
        Q35_LIN(&L->a, NULL, s->xn, H, s->a, Hv, T, 0, 0, 0);
    }
    Q35_LAUNCH(conv, (cd + 127) / 128, R->ns, 128, 0, &s->big0, &s->conv_out,
               &L->conv_w, &s->streams, &s->rows, &slot, &cd, &K, &n_lin,
               &log_size, &log_conv);
    q35_gpu_log lay = g->lay;
    unsigned prep = (unsigned)(32 * (2 * Hk < 32 ? 2 * Hk : 32));
    Q35_LAUNCH(gdn_prep, T, 1, prep, 0, &s->conv_out, &s->a, &s->b, &s->decay,
               &s->beta, &L->neg_a, &L->dt_bias, &s->streams, &s->rows, &slot,
               &Hk, &Hv, &dk, &dv, &n_lin, &lay);
    {
        void *a[] = {&s->conv_out, &s->z,       &s->o, &s->decay, &s->beta,
                     &L->gnorm,    &s->streams, &slot, &Hk,       &Hv,
                     &dk,          &dv,         &eps};
        loom_status st =
            q35_gpu_launch(g, g->fn.gdn_rec, (unsigned)Hv, (unsigned)R->ns,
                           g->gdn_threads, 0, a, "q35_gdn_rec", R->err);
        if (st != LOOM_OK)
            return st;
    }
    Q35_LIN(&L->out, NULL, s->o, vd, s->h, H, T, 1, 0, 0);
    return LOOM_OK;
}

static loom_status q35_gpu_mlp(const q35_run *R, q35_gpu_layer *L)
{
    const q35_geometry *G = &R->m->g;
    q35_gpu_scratch *s = &R->g->s;
    int T = R->T, H = (int)G->hidden, F = (int)G->ffn;
    Q35_LIN(&L->gate, &L->up, s->xn, H, s->big0, F, T, 2, 0, 0);
    Q35_LIN(&L->down, NULL, s->big0, F, s->h, H, T, 1, 0, 0);
    return LOOM_OK;
}

/* Qwen3-Next's sparse block: route, then each row's top_k experts in id
 * order into proj, the shared expert behind its sigmoid gate, h += proj. */
static loom_status q35_gpu_moe(const q35_run *R, q35_gpu_layer *L)
{
    const q35_geometry *G = &R->m->g;
    q35_gpu_scratch *s = &R->g->s;
    int T = R->T, H = (int)G->hidden, F = (int)G->moe_ffn;
    int E = (int)G->n_experts, K = (int)G->top_k, nt = G->norm_topk;
    Q35_LIN(&L->router, NULL, s->xn, H, s->prob, E, T, 0, 0, 0);
    Q35_LAUNCH(moe_route, (T + 127) / 128, 1, 128, 0, &s->prob, &s->sel,
               &s->wsel, &T, &E, &K, &nt);
    loom_cu_ptr zero = 0;
    R->g->cu->memsetD32Async(s->proj, 0, (size_t)T * (size_t)H,
                             R->g->cu->stream);
    for (int k = 0; k < K; k++) {
        loom_cu_ptr sel = s->sel + (uint64_t)k * 4;
        Q35_LIN(&L->ex_gate, &L->ex_up, s->xn, H, s->big0, F, T, 2, sel, K);
        Q35_LIN(&L->ex_down, NULL, s->big0, F, s->gout, H, T, 0, sel, K);
        Q35_LAUNCH(moe_axpy, T, 1, 256, 0, &s->proj, &s->gout, &s->wsel, &k, &K,
                   &zero, &H);
    }
    if (G->shared_ffn > 0) {
        int S = (int)G->shared_ffn;
        Q35_LIN(&L->sh_gate, &L->sh_up, s->xn, H, s->big0, S, T, 2, 0, 0);
        Q35_LIN(&L->sh_down, NULL, s->big0, S, s->gout, H, T, 0, 0, 0);
        Q35_LIN(&L->sh_gate_w, NULL, s->xn, H, s->shg, 1, T, 0, 0, 0);
        int k0 = 0;
        Q35_LAUNCH(moe_axpy, T, 1, 256, 0, &s->proj, &s->gout, &s->wsel, &k0,
                   &K, &s->shg, &H);
    }
    long long n = (long long)T * H;
    Q35_LAUNCH(add, (n + 255) / 256, 1, 256, 0, &s->h, &s->proj, &n);
    return LOOM_OK;
}

/* The layers, the taps and the head; every launch on the host's stream. */
static loom_status q35_gpu_layers(const q35_run *R, int32_t n_logits,
                                  int32_t n_tap)
{
    loom_model *m = R->m;
    q35_gpu *g = R->g;
    q35_gpu_scratch *s = &g->s;
    const q35_geometry *G = &m->g;
    int H = (int)G->hidden;
    Q35_LAUNCH(embed[q35_dt(g->embed.dtype)], R->T, 1, 256, 0, &g->embed.p,
               &s->rows, &s->h, &H);
    loom_cu_ptr none = 0;
    for (int64_t i = 0; i < G->n_layers; i++) {
        q35_gpu_layer *L = &g->layers[i];
        loom_status st = q35_gpu_norm(R, s->h, none, s->xn, L->in_norm, R->T);
        if (st == LOOM_OK)
            st = m->w.layers[i].kind == 'A'
                     ? q35_gpu_attention(R, L, m->slot[i])
                     : q35_gpu_gdn(R, L, m->slot[i]);
        if (st == LOOM_OK)
            st = q35_gpu_norm(R, s->h, none, s->xn, L->post_norm, R->T);
        if (st == LOOM_OK)
            st = m->w.layers[i].moe ? q35_gpu_moe(R, L) : q35_gpu_mlp(R, L);
        if (st != LOOM_OK)
            return st;
        for (int32_t j = 0; n_tap > 0 && j < m->n_taps; j++) {
            if (m->taps[j] != i)
                continue;
            /* maps: [logit rows][0..n_logits)[tap rows][tap slot j dests] */
            loom_cu_ptr smap = s->maps + (uint64_t)(2 * n_logits) * 4;
            loom_cu_ptr dmap =
                s->maps + (uint64_t)(2 * n_logits + (1 + j) * n_tap) * 4;
            Q35_LAUNCH(gather, n_tap, 1, 256, 0, &s->h, &H, &smap, &s->taps, &H,
                       &dmap, &H);
        }
    }
    if (n_logits > 0) {
        loom_status st =
            q35_gpu_norm(R, s->h, s->maps, s->xn, g->norm, n_logits);
        if (st != LOOM_OK)
            return st;
        int V = (int)G->vocab;
        Q35_LIN(&g->lm_head, NULL, s->xn, H, s->logits, V, n_logits, 0, 0, 0);
    }
    return LOOM_OK;
}

static void q35_log_no_graphs(const q35_run *R)
{
    R->m->host->log(R->m->host, LOOM_LOG_WARN,
                    "qwen35 cuda: %s; forwards run without graphs",
                    R->err->msg);
}

/* The round's launches: replayed from a graph when this shape was captured,
 * captured when it ran once before, else launched one by one. A replay
 * runs the very kernels with the very arguments of an uncaptured run. */
static loom_status q35_gpu_run(q35_run *R, int32_t n_logits, int32_t n_tap)
{
    q35_gpu *g = R->g;
    const loom_cuda *cu = g->cu;
    q35_graph *gr = NULL;
    for (int i = 0; !g->no_graphs && i < g->n_graphs; i++) {
        q35_graph *x = &g->graphs[i];
        if (x->T == R->T && x->ns == R->ns && x->n_logits == n_logits &&
            x->n_tap == n_tap)
            gr = x;
    }
    if (!gr && !g->no_graphs && g->n_graphs < Q35_GRAPHS) {
        gr = &g->graphs[g->n_graphs++];
        *gr = (q35_graph){R->T, R->ns, n_logits, n_tap, 0, NULL};
    }
    if (gr && gr->exec)
        return q35_gpu_check(g, cu->graphLaunch(gr->exec, cu->stream),
                             "replaying a forward", R->err);
    if (!gr || !gr->seen) {
        if (gr)
            gr->seen = 1;
        return q35_gpu_layers(R, n_logits, n_tap);
    }
    /* thread-local capture: the lane thread alone launches on the stream */
    loom_status st = q35_gpu_check(g, cu->streamBeginCapture(cu->stream, 1),
                                   "capturing a forward", R->err);
    if (st != LOOM_OK) {
        g->no_graphs = 1;
        return q35_gpu_layers(R, n_logits, n_tap);
    }
    st = q35_gpu_layers(R, n_logits, n_tap);
    loom_cu_graph graph = NULL;
    loom_status end =
        q35_gpu_check(g, cu->streamEndCapture(cu->stream, &graph),
                      "capturing a forward", st == LOOM_OK ? R->err : NULL);
    if (st == LOOM_OK)
        st = end;
    if (st == LOOM_OK)
        st = q35_gpu_check(g, cu->graphInstantiate(&gr->exec, graph, 0),
                           "instantiating a forward's graph", R->err);
    if (graph)
        cu->graphDestroy(graph);
    if (st != LOOM_OK) {
        /* run it the plain way, and from now on */
        gr->exec = NULL;
        g->no_graphs = 1;
        q35_log_no_graphs(R);
        return q35_gpu_layers(R, n_logits, n_tap);
    }
    return q35_gpu_check(g, cu->graphLaunch(gr->exec, cu->stream),
                         "replaying a forward", R->err);
}

loom_status q35_gpu_forward(loom_model *m, const loom_round *round,
                            const loom_output *out, loom_err *err)
{
    q35_gpu *g = m->gpu;
    const loom_cuda *cu = g->cu;
    const q35_geometry *G = &m->g;
    int32_t T = round->n_rows;
    if (T <= 0)
        return LOOM_OK;
    if (T > m->max_rows)
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "qwen35 forward: %d rows, more than max_rows %d", T,
                            m->max_rows);
    cu->ctxSetCurrent(cu->context);
    int32_t ns = 0;
    loom_status st = q35_gpu_plan(m, round, &ns, err);
    for (int32_t i = 0; st == LOOM_OK && i < ns; i++) {
        q35_stream *sm = &g->streams[i];
        int32_t n_spec = sm->first_spec >= 0 ? sm->count - sm->first_spec : 0;
        st = q35_gpu_cache_prepare(m, sm->cache, sm->count, n_spec,
                                   sm->first_spec == 0, err);
    }
    if (st != LOOM_OK)
        return st;
    int32_t n_logits = 0, n_tap = 0;
    for (int32_t t = 0; t < T; t++) {
        n_logits += (round->rows[t].flags & LOOM_ROW_LOGITS) != 0;
        n_tap += (round->rows[t].flags & LOOM_ROW_TAP) != 0;
    }
    if (m->n_taps == 0)
        n_tap = 0;
    if (n_logits > 0 && (!out || !out->logits))
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "qwen35 forward: rows ask for logits but the "
                            "output has no logits buffer");
    if (n_tap > 0 && (!out || !out->taps))
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "qwen35 forward: rows ask for taps but the "
                            "output has no taps buffer");
    uint64_t lbytes = (uint64_t)n_logits * (uint64_t)G->vocab * 4;
    uint64_t tbytes =
        (uint64_t)n_tap * (uint64_t)m->n_taps * (uint64_t)G->hidden * 4;
    st = q35_gpu_grow(g, &g->s.logits, &g->s.logits_bytes, lbytes, err);
    if (st == LOOM_OK)
        st = q35_gpu_grow(g, &g->s.taps, &g->s.taps_bytes, tbytes, err);
    if (st != LOOM_OK)
        return st;

    /* nothing but a device fault can fail from here on */
    for (int32_t i = 0; i < ns; i++) {
        q35_stream *sm = &g->streams[i];
        loom_cache *c = sm->cache;
        if (sm->first_spec != 0 && c->spec_n > 0) {
            /* plain rows after an uncommitted window keep all of it */
            c->spec_n = 0;
            c->spec_start = -1;
        }
        sm->spec_base = sm->first_spec >= 0 ? c->spec_n : 0;
        q35_gpu_stream *d = &g->dstreams[i];
        q35_gpu_cache_view(m, c, d);
        d->first = sm->first;
        d->count = sm->count;
        d->snap_row =
            sm->first_spec >= 0 && sm->spec_base == 0 ? sm->first_spec : -1;
        for (int32_t k = 0; k < sm->count; k++) {
            int32_t i0 = g->stream_rows[sm->first + k];
            const loom_row *r = &round->rows[i0];
            g->rows[sm->first + k] =
                (q35_gpu_row){r->token, r->position, i,
                              sm->first_spec >= 0 && k >= sm->first_spec
                                  ? sm->spec_base + k - sm->first_spec
                                  : -1};
        }
    }
    int32_t *mp = g->maps, nl = 0, nt = 0;
    for (int32_t t = 0; t < T; t++)
        if (round->rows[t].flags & LOOM_ROW_LOGITS) {
            mp[nl] = g->dev_of[t];
            mp[n_logits + nl] = nl;
            nl++;
        }
    for (int32_t t = 0; n_tap > 0 && t < T; t++)
        if (round->rows[t].flags & LOOM_ROW_TAP) {
            mp[2 * n_logits + nt] = g->dev_of[t];
            for (int32_t j = 0; j < m->n_taps; j++)
                mp[2 * n_logits + (1 + j) * n_tap + nt] = nt * m->n_taps + j;
            nt++;
        }
    size_t n_maps = (size_t)(2 * n_logits + (1 + m->n_taps) * n_tap);
    st = q35_gpu_check(g,
                       cu->memcpyHtoDAsync(g->s.rows, g->rows,
                                           (size_t)T * sizeof *g->rows,
                                           cu->stream),
                       "uploading the row table", err);
    if (st == LOOM_OK)
        st = q35_gpu_check(g,
                           cu->memcpyHtoDAsync(g->s.streams, g->dstreams,
                                               (size_t)ns * sizeof *g->dstreams,
                                               cu->stream),
                           "uploading the stream table", err);
    if (st == LOOM_OK && n_maps > 0)
        st = q35_gpu_check(g,
                           cu->memcpyHtoDAsync(g->s.maps, g->maps,
                                               n_maps * sizeof *g->maps,
                                               cu->stream),
                           "uploading the output maps", err);
    q35_run run = {m, g, T, ns, err};
    if (st == LOOM_OK)
        st = q35_gpu_run(&run, n_logits, n_tap);
    /* the one copy back: logits (and taps) to the host's buffers */
    if (st == LOOM_OK && n_logits > 0)
        st = q35_gpu_check(g,
                           cu->memcpyDtoHAsync(out->logits, g->s.logits,
                                               (size_t)lbytes, cu->stream),
                           "copying logits back", err);
    if (st == LOOM_OK && n_tap > 0)
        st = q35_gpu_check(g,
                           cu->memcpyDtoHAsync(out->taps, g->s.taps,
                                               (size_t)tbytes, cu->stream),
                           "copying taps back", err);
    if (st == LOOM_OK)
        st =
            q35_gpu_check(g, cu->streamSynchronize(cu->stream), "forward", err);
    if (st != LOOM_OK)
        return st;
    for (int32_t i = 0; i < ns; i++) {
        q35_stream *sm = &g->streams[i];
        loom_cache *c = sm->cache;
        if (sm->first_spec >= 0) {
            if (sm->spec_base == 0)
                c->spec_start = sm->len0 + sm->first_spec;
            c->spec_n = sm->spec_base + (sm->count - sm->first_spec);
        }
        c->len = sm->len0 + sm->count;
    }
    return LOOM_OK;
}
