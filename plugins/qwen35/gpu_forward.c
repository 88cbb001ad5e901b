/* The qwen35 forward on the device: the round's rows regrouped stream by
 * stream (each stream's rows contiguous, in order) into a row table, one
 * upload of that table, then one launch per step on the host's stream; the
 * logits (and taps) go to the output views at the end, the one copy of the
 * forward: back to the host for host views, on the device (stream-ordered,
 * no synchronisation) for device views. */
#include "gpu.h"

#include <stdlib.h>

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

/* Where a kernel writing the T float rows (cols wide) that w takes next
 * also writes their halves (q35_gpu.xs_src): s.xs2 when that product runs
 * on tensor cores for more than one row over whole 128-column slices, else
 * nowhere (0). */
static loom_cu_ptr q35_xs_for(const q35_gpu *g, const q35_gpu_lin *w, int cols,
                              int T)
{
    return g->mma && T > 1 && w->mapped && cols % Q35_MMA_KC == 0 ? g->s.xs2
                                                                  : 0;
}

/* What s.ssp and s.xs3 now hold: the parts of x's T rows, and the halves
 * of x nw (nw 0: none). */
static void q35_xn_set(q35_gpu *g, loom_cu_ptr x, int T, loom_cu_ptr nw)
{
    g->xn_src = x;
    g->xn_T = T;
    g->xn_nw = nw;
}

/* After a launch that wrote the halves of y's T rows into xo (0: none),
 * what xs2 holds; st passes through. */
static loom_status q35_xs_wrote(q35_gpu *g, loom_cu_ptr xo, loom_cu_ptr y,
                                int T, loom_status st)
{
    if (st == LOOM_OK && xo) {
        g->xs_src = y;
        g->xs_T = T;
    }
    return st;
}

/* What xs2 holds serves the product about to launch alone. */
static void q35_xs_take(q35_gpu *g)
{
    g->xs_pending = g->xs_src;
    g->xs_src = 0;
}

/* After a tensor-core product: a residual add that handed nn on (0: none)
 * wrote y's parts, and into xo its halves times nn (xo 0: the parts
 * alone); any other product's xo is the next product's halves in xs2. */
static loom_status q35_mma_wrote(q35_gpu *g, loom_cu_ptr nn, loom_cu_ptr xo,
                                 loom_cu_ptr y, int T, loom_status st)
{
    if (st == LOOM_OK && nn)
        q35_xn_set(g, y, T, xo ? nn : 0);
    return q35_xs_wrote(g, nn ? 0 : xo, y, T, st);
}

/* The norm weight nw of the next product, w, for the residual-adding
 * product before it to hand on (q35_gpu.nn_next): when w runs on tensor
 * cores over whole 128-column slices and the round has no prompt chunk,
 * else 0. */
static loom_cu_ptr q35_nn_for(const q35_gpu *g, const q35_gpu_lin *w,
                              loom_cu_ptr nw)
{
    return g->mma && g->n_pc == 0 && w->mapped && w->cols % Q35_MMA_KC == 0 ? nw
                                                                            : 0;
}

/* The product on tensor cores (BF16 weights, columns a multiple of 16):
 * the rows split into BF16 halves (of x nw with nw, and their sums of
 * squares in parts), then one launch for tiles of up to 32 rows, clusters
 * of q35_mma_splits(cols) blocks, no more clusters than the device holds
 * at once. A residual add (mode 1) given q35_gpu.nn_next writes the halves
 * and parts the next product takes instead. */
static loom_status q35_lin_mma(const q35_run *R, const q35_gpu_lin *w,
                               const q35_gpu_lin *w2, loom_cu_ptr x, int ldx,
                               loom_cu_ptr y, int ldy, int T, int mode,
                               loom_cu_ptr nw)
{
    q35_gpu *g = R->g;
    float eps = (float)R->m->g.eps;
    loom_cu_ptr xs = g->s.xs;
    int rows = w->rows, cols = w->cols;
    int glu = mode == 2;
    /* x's halves written by the kernel before (q35_gpu.xs_src), and this
     * SwiGLU's for the product after */
    int pre = !nw && x == g->xs_pending && T == g->xs_T;
    loom_cu_ptr xo = glu && g->xs_next ? g->s.xs2 : 0;
    /* normed: x's parts (and halves of x nw) as the kernel that wrote x
     * left them */
    loom_cu_ptr ssi = nw && x == g->xn_src && T == g->xn_T ? g->s.ssp : 0;
    int have = ssi && nw == g->xn_nw;
    /* a residual add handing the next product's norm on: whole rows of
     * whole slices, so that its blocks write whole parts (one row: the
     * parts alone, as the one-row form makes its own halves) */
    loom_cu_ptr nn = 0, sso = 0;
    if (mode == 1 && !nw && g->nn_next && rows == (int)R->m->g.hidden &&
        ldy == rows && rows % Q35_MMA_KC == 0) {
        nn = g->nn_next;
        xo = T > 1 ? g->s.xs3 : 0;
        sso = g->s.ssp;
    }
    int S = q35_mma_splits(cols), c = S - 1;
    int64_t unit = glu ? 8 : 16, units = (rows + unit - 1) / unit;
    /* two blocks per SM stream products of many rows faster; one with a
     * deeper ring those of fewer (measured: tools/gemv_mma_bench.cu) */
    int r = (int64_t)rows * (glu ? 2 : 1) >= Q35_MMA_ROWS2;
    /* the kernel's two maps: w2's (SwiGLU) or w's again */
    void *wm = (void *)w->map, *w2m = (void *)(w2 ? w2->map : w->map);
    /* one row: the kernel splits its block's columns itself (one launch
     * less on the step's path), when 2 stages fit beside them */
    int run = q35_mma_run(cols);
    int ns = q35_mma1r_stages(run, r, g->cu->smem_per_block_optin);
    if (T == 1 && ns >= 2) {
        int64_t C = g->mma_clusters[r][glu][0][c];
        if (C > units)
            C = units;
        void *args[] = {wm,  w2m, &xs,  &y,  &ldy, &rows, &cols, &T,  &mode,
                        &ns, &x,  &ldx, &nw, &eps, &xo,   &ssi,  &nn, &sso};
        loom_status st = q35_gpu_launch_cluster(
            g, g->fn.mmar[glu], (unsigned)(C * S), 1, 288,
            q35_mma1r_smem(run, ns), (unsigned)S, args, "q35_mma1r", R->err);
        return q35_mma_wrote(g, nn, xo, y, T, st);
    }
    if (nw && !have) {
        /* the halves of x nw and x's parts, for this product and any other
         * normed with nw before x changes */
        loom_cu_ptr sp = g->s.ssp;
        xs = g->s.xs3;
        Q35_LAUNCH(split, (cols + Q35_SPLIT_COLS - 1) / Q35_SPLIT_COLS, T, 256,
                   0, &x, &ldx, &xs, &cols, &T, &nw, &sp);
        q35_xn_set(g, x, T, nw);
        ssi = sp;
    } else if (nw) {
        xs = g->s.xs3;
    } else if (pre) {
        xs = g->s.xs2;
    } else {
        loom_cu_ptr none = 0;
        Q35_LAUNCH(split, (cols + Q35_SPLIT_COLS - 1) / Q35_SPLIT_COLS, T, 256,
                   0, &x, &ldx, &xs, &cols, &T, &nw, &none);
    }
    int k = q35_mma_kind(T, g->mma_wg && r);
    int tok = q35_mma_tok(k);
    int64_t C = g->mma_clusters[r][glu][k][c];
    if (C > units)
        C = units;
    ns = g->mma_ns[r][k];
    void *args[] = {wm,  w2m, &xs,  &y,  &ldy, &rows, &cols, &T,  &mode,
                    &ns, &x,  &ldx, &nw, &eps, &xo,   &ssi,  &nn, &sso};
    loom_status st = q35_gpu_launch_cluster(
        g, g->fn.mma[glu][k], (unsigned)(C * S),
        (unsigned)((T + tok - 1) / tok), 288, q35_mma_smem(k, ns), (unsigned)S,
        args, "q35_mma", R->err);
    return q35_mma_wrote(g, nn, xo, y, T, st);
}

/* An affine-4 product on tensor cores (q35_q4m), normed in the kernel:
 * up to Q35_Q4M_TOK rows of x a block, the same bits for a row whatever
 * else the launch carries. */
static loom_status q35_lin_q4m(const q35_run *R, const q35_gpu_lin *w,
                               const q35_gpu_lin *w2, loom_cu_ptr x, int ldx,
                               loom_cu_ptr y, int ldy, int T, int mode,
                               loom_cu_ptr nw)
{
    int rows = w->rows, cols = w->cols, gsz = w->group, glu = mode == 2;
    int tb = q35_q4m_rows(cols, gsz, T), ns = q35_q4m_stages(cols, gsz, tb);
    float eps = (float)R->m->g.eps;
    int64_t nb = R->g->cu->sm_count * Q35_GEMVS_BPS, units = (rows + 15) / 16;
    if (nb > units)
        nb = units;
    void *qm2 = (void *)(w2 ? w2->q4m_map : w->q4m_map);
    void *pm2 = (void *)(w2 ? w2->q4m_pmap : w->q4m_pmap);
    void *args[] = {(void *)w->q4m_map,
                    (void *)w->q4m_pmap,
                    qm2,
                    pm2,
                    &x,
                    &ldx,
                    &y,
                    &ldy,
                    &rows,
                    &cols,
                    &T,
                    &gsz,
                    &mode,
                    &nw,
                    &eps,
                    &ns,
                    &tb};
    return q35_gpu_launch(
        R->g, R->g->fn.q4m[glu], (unsigned)nb, (unsigned)((T + tb - 1) / tb),
        288, q35_q4m_smem(cols, gsz, tb, ns), args, "q35_q4m", R->err);
}

/* y = W x over T rows (mode 0), y += W x (1), or y = silu(W x) * (W2 x)
 * (2); with sel, row t uses expert sel[t * sel_stride] of W (and W2); with
 * nw, x is the residual stream and the product reads RMSNorm(x) * nw. The
 * decode kernels: each row's result the same in every launch. */
static loom_status q35_lin_rows(const q35_run *R, const q35_gpu_lin *w,
                                const q35_gpu_lin *w2, loom_cu_ptr x, int ldx,
                                loom_cu_ptr y, int ldy, int T, int mode,
                                loom_cu_ptr sel, int sel_stride, loom_cu_ptr nw)
{
    loom_cu_ptr wp = w->p, w2p = w2 ? w2->p : 0;
    int rows = w->rows, cols = w->cols;
    long long estride = (long long)rows * cols;
    float eps = (float)R->m->g.eps;
    int dt = q35_dt(w->dtype);
    if (R->g->mma && w->mapped && !sel && (!w2 || w2->mapped))
        return q35_lin_mma(R, w, w2, x, ldx, y, ldy, T, mode, nw);
    if (w->bits && R->g->q4m && w->q4m_mapped && !sel && ldx % 4 == 0 &&
        (!w2 || w2->q4m_mapped))
        return q35_lin_q4m(R, w, w2, x, ldx, y, ldy, T, mode, nw);
    /* only one-row (and per-expert) products norm their own input; the
     * rest read a normed copy (the same bits: q35_ss4), so that multi-row
     * kernels spend no multiplies on the norm */
    int stream_ok = dt < 2 && cols % 8 == 0 && ldx % 4 == 0;
    int own_norm = w->bits ? T == 1 : stream_ok && (T == 1 || sel);
    if (nw && !own_norm) {
        loom_cu_ptr none = 0, xn = R->g->s.xn;
        int H = cols;
        void *na[] = {&x, &none, &xn, &nw, &H, &eps, &none};
        loom_status st = q35_gpu_launch(R->g, R->g->fn.rmsnorm, (unsigned)T, 1,
                                        256, 0, na, "q35_rmsnorm", R->err);
        if (st != LOOM_OK)
            return st;
        x = xn;
        ldx = H;
        nw = 0;
    }
    if (w->bits) {
        /* affine 4-bit (q35_gpu_supported let no other through), normed in
         * the kernel */
        int wpr = q35_q4_wpr(rows, cols), glu = mode == 2, gsz = w->group;
        loom_cu_ptr p1 = w->pairs, p2 = w2 ? w2->pairs : 0;
        int ns = q35_q4s_stages(cols, gsz);
        if (T == 1 && R->g->q4s && w->q4mapped && (!w2 || w2->q4mapped) &&
            ns >= 2) {
            /* a step: the words through shared memory, in the same order */
            int k = q35_wpr_kind(wpr);
            int64_t nb = R->g->cu->sm_count * Q35_GEMVS_BPS;
            int64_t boxes = (rows + Q35_Q4S_BOX - 1) / Q35_Q4S_BOX;
            if (nb > boxes)
                nb = boxes;
            void *qm2 = (void *)(w2 ? w2->map : w->map);
            void *pm2 = (void *)(w2 ? w2->pmap : w->pmap);
            q35_conv_epi cv = {0};
            void *args[] = {(void *)w->map,
                            (void *)w->pmap,
                            qm2,
                            pm2,
                            &x,
                            &y,
                            &rows,
                            &cols,
                            &gsz,
                            &mode,
                            &nw,
                            &eps,
                            &ns,
                            &cv};
            loom_cu_function f = R->g->fn.q4s[glu][k];
            /* the conv in the epilogue (Q35_CONV_EPI_ROWS) */
            const q35_conv_epi *ce = R->g->conv_epi;
            if (ce && !glu && mode == 0 && R->g->q4s_conv &&
                (boxes + nb - 1) / nb * Q35_Q4S_BOX <= Q35_CONV_EPI_ROWS) {
                cv = *ce;
                f = R->g->fn.q4s_conv[k];
                R->g->conv_done = 1;
            }
            return q35_gpu_launch(R->g, f, (unsigned)nb, 1, 288,
                                  (unsigned)q35_q4s_smem(cols, gsz, ns), args,
                                  "q35_q4s", R->err);
        }
        int many = T > 1, nt = many ? 8 : 1, rpw = glu ? 2 : 4;
        int64_t warps = ((int64_t)rows + rpw - 1) / rpw * wpr;
        void *args[] = {&wp,   &p1,   &w2p, &p2,   &x,   &ldx, &y,  &ldy,
                        &rows, &cols, &T,   &mode, &wpr, &gsz, &nw, &eps};
        return q35_gpu_launch(
            R->g, R->g->fn.q4[many][glu], (unsigned)((warps + 7) / 8),
            (unsigned)((T + nt - 1) / nt), 256, 0, args, "q35_q4", R->err);
    }
    if (stream_ok) {
        int wpr = q35_wpr(rows, cols);
        /* one token per block for experts (each row its own) and steps */
        int many = T > 1 && !sel, glu = mode == 2;
        /* a step: the weights through shared memory, in the same order */
        int ns = q35_gemvs_stages(cols);
        if (!many && !sel && R->g->gemvs && ns >= 2) {
            int k = q35_wpr_kind(wpr);
            int nb = R->g->cu->sm_count * Q35_GEMVS_BPS;
            if (nb > rows)
                nb = rows;
            unsigned smem = (unsigned)(ns * Q35_GEMVS_STAGE + cols * 4);
            void *args[] = {&wp,   &w2p,  &x,    &ldx, &y,   &ldy,
                            &rows, &cols, &mode, &nw,  &eps, &ns};
            return q35_gpu_launch(R->g, R->g->fn.gemvs[dt][glu][k],
                                  (unsigned)nb, (unsigned)T, 288, smem, args,
                                  "q35_gemvs", R->err);
        }
        int nt = many ? 8 : 1;
        int rpw = many ? Q35_GEMV8_RPW / (glu ? 2 : 1) : (glu ? 2 : 4);
        int64_t warps = ((int64_t)rows + rpw - 1) / rpw * wpr;
        void *args[] = {&wp,      &w2p,  &x,  &ldx,  &y,   &ldy,
                        &rows,    &cols, &T,  &mode, &sel, &sel_stride,
                        &estride, &wpr,  &nw, &eps};
        return q35_gpu_launch(
            R->g, R->g->fn.gemv[dt][many][glu], (unsigned)((warps + 7) / 8),
            (unsigned)((T + nt - 1) / nt), 256, 0, args, "q35_gemv", R->err);
    }
    int tile = sel ? 1 : 8;
    int wpr = 1;
    while (wpr < 8 && rows * wpr < 8192 && cols >= 64 * wpr)
        wpr *= 2;
    void *args[] = {&wp,   &w2p,  &x,          &ldx,     &y,
                    &ldy,  &rows, &cols,       &T,       &tile,
                    &mode, &sel,  &sel_stride, &estride, &wpr};
    return q35_gpu_launch(
        R->g, R->g->fn.linear[dt], (unsigned)((rows * wpr + 7) / 8),
        (unsigned)(T + tile - 1) / tile, 256, 0, args, "q35_linear", R->err);
}

/* A prompt chunk's product reads BF16 weights: an affine-4 weight's copy
 * as BF16 in s.wdq (q35_q4_bf16; q35_gpu_forward grew it to
 * q35_dq_need), else the weight itself. */
static loom_status q35_lin_bf16(const q35_run *R, const q35_gpu_lin *w,
                                loom_cu_ptr *out)
{
    *out = w->p;
    if (!w->bits)
        return LOOM_OK;
    q35_gpu *g = R->g;
    loom_cu_ptr wp = w->p, pr = w->pairs, wb = g->s.wdq;
    int rows = w->rows, cols = w->cols, gsz = w->group;
    int64_t words = (int64_t)rows * cols / 8;
    if ((uint64_t)words * 16 > g->s.wdq_bytes)
        return loom_err_set(R->err, LOOM_ERR_STATE,
                            "qwen35 cuda: an affine-4 product of %d x %d "
                            "past its BF16 buffer (%llu bytes)",
                            rows, cols, (unsigned long long)g->s.wdq_bytes);
    *out = wb;
    Q35_LAUNCH(q4_bf16, (words + 255) / 256, 1, 256, 0, &wp, &pr, &wb, &rows,
               &cols, &gsz);
    return LOOM_OK;
}

/* The same product for one prompt chunk's n rows on tensor cores: the rows
 * as BF16 (normed first with nw), then D = W x (+ D for mode 1) in float32,
 * and for SwiGLU the second product and silu(g) * u. */
static loom_status q35_lin_gemm(const q35_run *R, const q35_gpu_lin *w,
                                const q35_gpu_lin *w2, loom_cu_ptr x, int ldx,
                                loom_cu_ptr y, int ldy, int n, int mode,
                                loom_cu_ptr nw)
{
    q35_gpu *g = R->g;
    const loom_cuda *cu = g->cu;
    int cols = w->cols;
    float eps = (float)R->m->g.eps;
    loom_cu_ptr xb = g->s.xb;
    /* a SwiGLU's output is in xb already when it came just before (and
     * only there: its float rows were not written) */
    int have = !nw && g->xb_src == x && g->xb_cols == cols && g->xb_ld == ldx;
    if (!have && x == g->xb_src)
        return loom_err_set(R->err, LOOM_ERR_STATE,
                            "qwen35 cuda: a SwiGLU's rows read other than "
                            "right after it");
    if (!have)
        Q35_LAUNCH(to_bf16, n, 1, 256, 0, &x, &ldx, &xb, &cols, &nw, &eps);
    g->xb_src = 0;
    float beta = mode == 1 ? 1.0f : 0.0f;
    loom_cu_ptr wp;
    loom_status st = q35_lin_bf16(R, w, &wp);
    if (st == LOOM_OK)
        st = cu->gemm_bf16(cu, w->rows, n, cols, wp, xb, y, ldy, beta, R->err);
    if (st != LOOM_OK || mode != 2)
        return st;
    loom_cu_ptr up = g->s.gup;
    /* the dequantized copy is free again: the stream runs in order */
    st = q35_lin_bf16(R, w2, &wp);
    if (st == LOOM_OK)
        st =
            cu->gemm_bf16(cu, w2->rows, n, cols, wp, xb, up, ldy, 0.0f, R->err);
    if (st != LOOM_OK)
        return st;
    int rows = w->rows;
    /* 4 columns a thread where rows and ldy allow it (q35_swiglu). With one
     * chunk in the round, when the next product (down) takes tensor
     * cores too (xb_next), it reads this chunk's output from xb, where it
     * goes in BF16 alone; else the output goes to y (with more chunks xb
     * is another chunk's by then) */
    int per = (rows | ldy) & 3 ? 256 : 1024;
    loom_cu_ptr xo = g->n_pc == 1 && g->xb_next ? xb : 0;
    Q35_LAUNCH(swiglu, (rows + per - 1) / per, n, 256, 0, &y, &up, &rows, &ldy,
               &xo);
    g->xb_src = xo ? y : 0;
    g->xb_cols = rows;
    g->xb_ld = ldy;
    return LOOM_OK;
}

/* BF16 weights, or affine-4 ones (dequantized to BF16 per product), with
 * rows of whole 16-byte pieces. */
static int q35_gemm_fits(const q35_gpu_lin *w)
{
    if (!w->p || w->cols % 8 != 0)
        return 0;
    if (w->bits)
        return w->bits == 4 && w->group % 8 == 0 && w->cols % w->group == 0;
    return w->dtype == LOOM_DTYPE_BF16;
}

/* Bytes of the largest affine-4 product a prompt chunk dequantizes: the
 * layers' dense products (experts take the decode kernels). */
static uint64_t q35_dq_need(const loom_model *m)
{
    uint64_t need = 0;
    for (int64_t i = 0; i < m->g.n_layers; i++) {
        const q35_gpu_layer *L = &m->gpu->layers[i];
        const q35_gpu_lin *ls[] = {
            &L->q,       &L->k,     &L->v,       &L->o,         &L->qkv,
            &L->z,       &L->b,     &L->a,       &L->qkvz,      &L->ba,
            &L->out,     &L->in,    &L->gate,    &L->up,        &L->down,
            &L->sh_gate, &L->sh_up, &L->sh_down, &L->sh_gate_w, &L->router};
        for (size_t k = 0; k < sizeof ls / sizeof *ls; k++)
            if (ls[k]->bits && q35_gemm_fits(ls[k])) {
                uint64_t b = (uint64_t)ls[k]->rows * (uint64_t)ls[k]->cols * 2;
                need = b > need ? b : need;
            }
    }
    return need;
}

/* A product over the round's rows: each prompt chunk (placed after every
 * other row) on tensor cores, one product per chunk so that no stream's
 * result depends on what shares its round; the other rows (the first
 * pc_row0) through the decode kernels. */
static loom_status q35_lin(const q35_run *R, const q35_gpu_lin *w,
                           const q35_gpu_lin *w2, loom_cu_ptr x, int ldx,
                           loom_cu_ptr y, int ldy, int T, int mode,
                           loom_cu_ptr sel, int sel_stride, loom_cu_ptr nw)
{
    q35_gpu *g = R->g;
    q35_xs_take(g);
    /* a residual add changes the rows s.ssp and s.xs3 were made of */
    if (mode == 1)
        g->xn_src = 0;
    if (!g->gemm || g->n_pc == 0 || sel || !q35_gemm_fits(w) ||
        (w2 && !q35_gemm_fits(w2)))
        return q35_lin_rows(R, w, w2, x, ldx, y, ldy, T, mode, sel, sel_stride,
                            nw);
    int P = g->pc_row0;
    loom_status st = LOOM_OK;
    if (P > 0)
        st = q35_lin_rows(R, w, w2, x, ldx, y, ldy, P, mode, 0, 0, nw);
    for (int32_t i = 0; st == LOOM_OK && i < g->n_pc; i++) {
        const q35_gpu_stream *d = &g->dstreams[g->pc[i]];
        uint64_t r0 = (uint64_t)d->first;
        st = q35_lin_gemm(R, w, w2, x + r0 * (uint64_t)ldx * 4, ldx,
                          y + r0 * (uint64_t)ldy * 4, ldy, d->count, mode, nw);
    }
    return st;
}

#define Q35_LIN(...)                                                           \
    do {                                                                       \
        loom_status st_ = q35_lin(R, __VA_ARGS__);                             \
        if (st_ != LOOM_OK)                                                    \
            return st_;                                                        \
    } while (0)

/* s.h += W x over the round's rows, handing nn on to the next product
 * (q35_gpu.nn_next; 0: none). */
static loom_status q35_lin_add(const q35_run *R, const q35_gpu_lin *w,
                               loom_cu_ptr x, int ldx, loom_cu_ptr nn)
{
    q35_gpu *g = R->g;
    int H = (int)R->m->g.hidden;
    g->nn_next = nn;
    loom_status st = q35_lin(R, w, NULL, x, ldx, g->s.h, H, R->T, 1, 0, 0, 0);
    g->nn_next = 0;
    return st;
}

/* out = RMSNorm(x) * w over n_rows rows (picked by map, or the first);
 * with xo, also their halves for a tensor-core product (q35_xs_for). */
static loom_status q35_gpu_norm(const q35_run *R, loom_cu_ptr x,
                                loom_cu_ptr map, loom_cu_ptr out, loom_cu_ptr w,
                                int n_rows, loom_cu_ptr xo)
{
    int H = (int)R->m->g.hidden;
    float eps = (float)R->m->g.eps;
    Q35_LAUNCH(rmsnorm, n_rows, 1, 256, 0, &x, &map, &out, &w, &H, &eps, &xo);
    return q35_xs_wrote(R->g, xo, out, n_rows, LOOM_OK);
}

/* The final norm of n rows of s.h (picked by map, or the first n), then
 * the head's product of them into s.logits. */
static loom_status q35_gpu_logits(const q35_run *R, loom_cu_ptr map, int n)
{
    q35_gpu *g = R->g;
    int H = (int)R->m->g.hidden, V = (int)R->m->g.vocab;
    loom_status st = q35_gpu_norm(R, g->s.h, map, g->s.xn, g->norm, n,
                                  q35_xs_for(g, &g->lm_head, H, n));
    if (st != LOOM_OK)
        return st;
    /* the head is no prompt chunk's product (q35_lin_rows, not q35_lin) */
    q35_xs_take(g);
    return q35_lin_rows(R, &g->lm_head, NULL, g->s.xn, H, g->s.logits, V, n, 0,
                        0, 0, 0);
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
    /* each product norms the residual stream itself; q | k | v rows ldq
     * apart in one output (merged) or each in its own buffer */
    loom_cu_ptr qp = s->big0, kp = s->big1, vp = s->big2;
    int ldq = qw, ldkv = kvw;
    if (L->in.p) {
        ldq = ldkv = L->in.rows;
        kp = qp + (uint64_t)qw * 4;
        vp = kp + (uint64_t)kvw * 4;
        Q35_LIN(&L->in, NULL, s->h, H, qp, ldq, T, 0, 0, 0, L->in_norm);
    } else {
        Q35_LIN(&L->q, NULL, s->h, H, qp, qw, T, 0, 0, 0, L->in_norm);
        Q35_LIN(&L->k, NULL, s->h, H, kp, kvw, T, 0, 0, 0, L->in_norm);
        Q35_LIN(&L->v, NULL, s->h, H, vp, kvw, T, 0, 0, 0, L->in_norm);
    }
    loom_cu_ptr inv = R->g->inv_freq;
    Q35_LAUNCH(attn_prep, nh + nkv, T, 128, (unsigned)hd * 4, &qp, &kp, &vp,
               &ldq, &ldkv, &L->q_norm, &L->k_norm, &inv, &s->streams, &s->rows,
               &slot, &nh, &nkv, &hd, &rot, &eps);
    int sp = R->g->attn_splits;
    /* the rows before the prompt chunks (all of them without chunks) */
    int Ta = R->g->attn_chunk && R->g->n_pc ? R->g->pc_row0 : T;
    /* the outputs' halves for o_proj (none with prompt chunks: their rows
     * come from other kernels) */
    loom_cu_ptr xo = R->g->n_pc == 0 ? q35_xs_for(R->g, &L->o, nh * hd, T) : 0;
    if (Ta > 0) {
        Q35_LAUNCH(attention, nh * sp, Ta, 128, 0, &qp, &ldq, &s->part, &s->cnt,
                   &s->o, &s->streams, &s->rows, &slot, &nh, &nkv, &hd, &sp,
                   &xo, &Ta);
        q35_xs_wrote(R->g, xo, s->o, Ta, LOOM_OK);
    }
    for (int32_t i = 0; i < R->g->n_pc && R->g->attn_chunk; i++) {
        int si = R->g->pc[i], n = R->g->dstreams[si].count;
        if (R->g->attn_mma) {
            void *a[] = {&qp, &ldq,  &s->o, &s->streams, &s->rows,
                         &si, &slot, &nh,   &nkv};
            loom_status st = q35_gpu_launch(
                R->g, R->g->attn_mma, (unsigned)((n + Q35_AM_Q - 1) / Q35_AM_Q),
                (unsigned)nh, 32 * Q35_AM_W, R->g->attn_mma_smem, a,
                "q35_attn_mma", R->err);
            if (st != LOOM_OK)
                return st;
            continue;
        }
        Q35_LAUNCH(attn_chunk, (n + Q35_AC_Q - 1) / Q35_AC_Q, nh, 128,
                   R->g->attn_chunk_smem, &qp, &ldq, &s->o, &s->streams,
                   &s->rows, &si, &slot, &nh, &nkv, &hd);
    }
    return q35_lin_add(R, &L->o, s->o, nh * hd, R->g->nn_post);
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
    /* qkv | z | b | a: rows ld_in apart in one output (merged) or each in
     * its own buffer */
    loom_cu_ptr qkv = s->big0, zp = s->z, bp = s->b, ap = s->a;
    int ld_in = cd, ldz = vd, ldab = Hv;
    g->conv_done = 0;
    if (L->in.p) {
        ld_in = ldz = ldab = L->in.rows;
        qkv = s->big1;
        zp = qkv + (uint64_t)cd * 4;
        bp = zp + (uint64_t)vd * 4;
        ap = bp + (uint64_t)Hv * 4;
        /* a one-row step (no prompt chunk, no log of a window) may run
         * the conv in the product's epilogue */
        q35_conv_epi cv = {L->conv_w,
                           s->conv_out,
                           s->streams,
                           s->rows,
                           slot,
                           cd,
                           K,
                           n_lin,
                           log_size,
                           log_conv,
                           (int64_t)Hv * q35_gdn_head(dk, dv) * 4};
        g->conv_epi = T == 1 && g->n_pc == 0 ? &cv : NULL;
        loom_status st = q35_lin(R, &L->in, NULL, s->h, H, qkv, ld_in, T, 0, 0,
                                 0, L->in_norm);
        g->conv_epi = NULL;
        if (st != LOOM_OK)
            return st;
    } else {
        loom_cu_ptr none = 0;
        loom_status st = q35_gpu_norm(R, s->h, none, s->xn, L->in_norm, T, 0);
        if (st != LOOM_OK)
            return st;
    }
    if (!L->in.p && G->variant == Q35_VARIANT_NEXT) {
        Q35_LIN(&L->qkvz, NULL, s->xn, H, s->big1, 2 * kd + 2 * vd, T, 0, 0, 0,
                0);
        Q35_LIN(&L->ba, NULL, s->xn, H, s->big2, 2 * Hv, T, 0, 0, 0, 0);
        Q35_LAUNCH(next_split, T, 1, 256, 0, &s->big1, &s->big2, &s->big0,
                   &s->z, &s->b, &s->a, &Hk, &Hv, &dk, &dv);
    } else if (!L->in.p) {
        Q35_LIN(&L->qkv, NULL, s->xn, H, s->big0, cd, T, 0, 0, 0, 0);
        Q35_LIN(&L->z, NULL, s->xn, H, s->z, vd, T, 0, 0, 0, 0);
        Q35_LIN(&L->b, NULL, s->xn, H, s->b, Hv, T, 0, 0, 0, 0);
        Q35_LIN(&L->a, NULL, s->xn, H, s->a, Hv, T, 0, 0, 0, 0);
    }
    /* the recurrence's form: q35_gdn_rec, or split over clusters
     * (q35_gdn_rec4), which loads a row ahead for windows and for rounds
     * whose blocks fit in one wave at 2 an SM; else the form with its
     * state in shared memory, 8 blocks an SM (the same bits either way) */
    unsigned gx = (unsigned)Hv, bx = g->gdn_threads, sm = 0;
    loom_cu_function f = g->fn.gdn_rec;
    if (g->gdn_rec4) {
        gx = (unsigned)(Hv * Q35_GDN_CTAS);
        bx = (unsigned)((dk + 31) / 32 * 32);
        int wave = (int64_t)gx * R->ns <= 2 * (int64_t)g->cu->sm_count;
        f = g->fn.gdn_rec4;
        if (R->T <= R->ns && !wave && g->gdn_rec4s) {
            f = g->fn.gdn_rec4s;
            sm = (unsigned)q35_gdn_sst_bytes(dk);
        }
    }
    /* ... which runs the conv too where its cluster holds every reader of
     * a key head's channels (1 or 2 value heads to one), its registers
     * hold a lane's (K = 4, dk <= 128) and its blocks fit one an SM: its
     * own launch is then a step's largest gap (9B, 16-row window: 6.5
     * against 6.8 ms), where at 2 streams of 9B (2 blocks an SM) the
     * fused form was slower (378 against 392 tok/s) and at a window of 8
     * streams (8 waves) too */
    loom_cu_ptr y = s->conv_out;
    int ldy = cd, hpk = Hv / Hk;
    if (f == g->fn.gdn_rec4 && !g->conv_done && K == 4 && dk <= 128 &&
        hpk * Hk == Hv && hpk <= 2 &&
        (int64_t)gx * R->ns <= (int64_t)g->cu->sm_count) {
        f = g->fn.gdn_rec4cv[hpk - 1][dk <= 32];
        y = qkv, ldy = ld_in;
    } else if (!g->conv_done) {
        Q35_LAUNCH(conv, (cd + 127) / 128, R->ns, 128, 0, &qkv, &s->conv_out,
                   &L->conv_w, &s->streams, &s->rows, &slot, &cd, &K, &n_lin,
                   &log_size, &log_conv, &ld_in);
    }
    /* prompt chunks: the conv in segments of rows */
    for (int32_t i = 0; i < g->n_pc && g->gdn_chunk; i++) {
        int si = g->pc[i], seg = LOOM_PROMPT_MIN_ROWS;
        int nseg = (g->dstreams[si].count + seg - 1) / seg;
        Q35_LAUNCH(conv_chunk, (cd + 127) / 128, nseg, 128, 0, &qkv,
                   &s->conv_out, &L->conv_w, &s->streams, &si, &slot, &cd, &K,
                   &ld_in, &seg);
    }
    q35_gpu_log lay = g->lay;
    {
        /* the outputs' halves for out_proj (none with prompt chunks: their
         * rows come from other kernels) */
        loom_cu_ptr xo = g->n_pc == 0 ? q35_xs_for(g, &L->out, vd, T) : 0;
        void *a[] = {&y,       &zp,       &s->o,       &ap,       &bp,
                     &ldab,    &L->neg_a, &L->dt_bias, &L->gnorm, &s->streams,
                     &s->rows, &slot,     &Hk,         &Hv,       &dk,
                     &dv,      &eps,      &ldz,        &n_lin,    &lay,
                     &xo,      &T,        &L->conv_w,  &ldy};
        loom_status st =
            q35_xs_wrote(g, xo, s->o, T,
                         q35_gpu_launch(g, f, gx, (unsigned)R->ns, bx, sm, a,
                                        "q35_gdn_rec", R->err));
        if (st != LOOM_OK)
            return st;
    }
    /* prompt chunks: the chunkwise delta rule, q k (log decay) beta into
     * big0 and big2 (free once the conv has run) */
    for (int32_t i = 0; i < g->n_pc && g->gdn_chunk; i++) {
        int si = g->pc[i], n = g->dstreams[si].count;
        int nch = (n + Q35_WY_C - 1) / Q35_WY_C;
        Q35_LAUNCH(gdnc_prep, n, 1, 64 * Hk, 0, &s->conv_out, &ap, &bp, &ldab,
                   &L->neg_a, &L->dt_bias, &s->streams, &si, &Hk, &Hv, &dk, &cd,
                   &s->big0, &s->big2);
        Q35_LAUNCH(gdnc_wy, Hv, nch, 256, g->wy_smem, &s->big0, &s->big2,
                   &s->conv_out, &s->wy, &s->streams, &si, &Hk, &Hv, &dk, &dv,
                   &cd);
        Q35_LAUNCH(gdnc_apply, Hv * ((dv + 31) / 32), 1, 256, g->apply_smem,
                   &s->big0, &s->wy, &s->o, &s->streams, &si, &slot, &Hk, &Hv,
                   &dk, &dv);
        Q35_LAUNCH(gdnc_norm, n, (Hv + 7) / 8, 256, 0, &s->o, &zp, &ldz,
                   &L->gnorm, &s->streams, &si, &Hv, &dv, &eps);
    }
    return q35_lin_add(R, &L->out, s->o, vd, g->nn_post);
}

static loom_status q35_gpu_mlp(const q35_run *R, q35_gpu_layer *L)
{
    const q35_geometry *G = &R->m->g;
    q35_gpu_scratch *s = &R->g->s;
    int T = R->T, H = (int)G->hidden, F = (int)G->ffn;
    R->g->xb_next = q35_gemm_fits(&L->down);
    /* the SwiGLU's halves for down (its input is not normed) */
    R->g->xs_next = q35_xs_for(R->g, &L->down, F, T) != 0;
    loom_status st = q35_lin(R, &L->gate, &L->up, s->h, H, s->big0, F, T, 2, 0,
                             0, L->post_norm);
    R->g->xb_next = 0;
    R->g->xs_next = 0;
    if (st != LOOM_OK)
        return st;
    return q35_lin_add(R, &L->down, s->big0, F, R->g->nn_layer);
}

/* Qwen3-Next's sparse block: route, then each row's top_k experts in id
 * order into proj, the shared expert behind its sigmoid gate, h += proj. */
static loom_status q35_gpu_moe(const q35_run *R, q35_gpu_layer *L)
{
    const q35_geometry *G = &R->m->g;
    q35_gpu_scratch *s = &R->g->s;
    int T = R->T, H = (int)G->hidden, F = (int)G->moe_ffn;
    int E = (int)G->n_experts, K = (int)G->top_k, nt = G->norm_topk;
    loom_cu_ptr none = 0;
    loom_status nst = q35_gpu_norm(R, s->h, none, s->xn, L->post_norm, T, 0);
    if (nst != LOOM_OK)
        return nst;
    Q35_LIN(&L->router, NULL, s->xn, H, s->prob, E, T, 0, 0, 0, 0);
    Q35_LAUNCH(moe_route, (T + 127) / 128, 1, 128, 0, &s->prob, &s->sel,
               &s->wsel, &T, &E, &K, &nt);
    loom_cu_ptr zero = 0;
    R->g->cu->memsetD32Async(s->proj, 0, (size_t)T * (size_t)H,
                             R->g->cu->stream);
    for (int k = 0; k < K; k++) {
        loom_cu_ptr sel = s->sel + (uint64_t)k * 4;
        Q35_LIN(&L->ex_gate, &L->ex_up, s->xn, H, s->big0, F, T, 2, sel, K, 0);
        Q35_LIN(&L->ex_down, NULL, s->big0, F, s->gout, H, T, 0, sel, K, 0);
        Q35_LAUNCH(moe_axpy, T, 1, 256, 0, &s->proj, &s->gout, &s->wsel, &k, &K,
                   &zero, &H);
    }
    if (G->shared_ffn > 0) {
        int S = (int)G->shared_ffn;
        R->g->xb_next = q35_gemm_fits(&L->sh_down);
        loom_status sst = q35_lin(R, &L->sh_gate, &L->sh_up, s->xn, H, s->big0,
                                  S, T, 2, 0, 0, 0);
        R->g->xb_next = 0;
        if (sst != LOOM_OK)
            return sst;
        Q35_LIN(&L->sh_down, NULL, s->big0, S, s->gout, H, T, 0, 0, 0, 0);
        Q35_LIN(&L->sh_gate_w, NULL, s->xn, H, s->shg, 1, T, 0, 0, 0, 0);
        int k0 = 0;
        Q35_LAUNCH(moe_axpy, T, 1, 256, 0, &s->proj, &s->gout, &s->wsel, &k0,
                   &K, &s->shg, &H);
    }
    long long n = (long long)T * H;
    Q35_LAUNCH(add, (n + 255) / 256, 1, 256, 0, &s->h, &s->proj, &n);
    R->g->xn_src = 0;
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
    g->xb_src = 0;
    g->xs_src = 0;
    g->xn_src = 0;
    if (g->embed.bits) {
        int gsz = g->embed.group;
        Q35_LAUNCH(embed_q4, R->T, 1, 256, 0, &g->embed.p, &g->embed.pairs,
                   &s->rows, &s->h, &H, &gsz);
    } else {
        Q35_LAUNCH(embed[q35_dt(g->embed.dtype)], R->T, 1, 256, 0, &g->embed.p,
                   &s->rows, &s->h, &H);
    }
    for (int64_t i = 0; i < G->n_layers; i++) {
        q35_gpu_layer *L = &g->layers[i];
        /* the norms the mixer's and the MLP's residual adds hand on: the
         * MLP's, and the next layer's where its input product norms */
        g->nn_post =
            m->w.layers[i].moe ? 0 : q35_nn_for(g, &L->gate, L->post_norm);
        g->nn_layer = 0;
        if (i + 1 < G->n_layers) {
            q35_gpu_layer *N = &g->layers[i + 1];
            if (m->w.layers[i + 1].kind == 'A')
                g->nn_layer =
                    q35_nn_for(g, N->in.p ? &N->in : &N->q, N->in_norm);
            else if (N->in.p)
                g->nn_layer = q35_nn_for(g, &N->in, N->in_norm);
        }
        /* the norms before the mixer and the MLP run inside their products */
        loom_status st = m->w.layers[i].kind == 'A'
                             ? q35_gpu_attention(R, L, m->slot[i])
                             : q35_gpu_gdn(R, L, m->slot[i]);
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
    /* the logit rows, gathered: never a prompt chunk's layout */
    return n_logits > 0 ? q35_gpu_logits(R, s->maps, n_logits) : LOOM_OK;
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
    /* a round with prompt chunks runs uncaptured: its launches depend on
     * more than the shape (and its products are long enough anyway) */
    if (g->n_pc > 0)
        return q35_gpu_layers(R, n_logits, n_tap);
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

/* Copies the forward's dense device rows `src` ([n, cols] floats) to the
 * output view `v`: back to the host (the caller synchronises) or, for a
 * device view, on the device, stream-ordered. The one copy of a forward. */
static loom_status q35_gpu_put_view(q35_gpu *g, loom_cu_ptr src, int32_t n,
                                    int64_t cols, const loom_view *v,
                                    const char *what, loom_err *err)
{
    const loom_cuda *cu = g->cu;
    size_t row = (size_t)cols * sizeof(float);
    size_t pitch = (size_t)v->strides[0] * sizeof(float);
    /* dense rows go in one copy, strided ones a row at a time */
    int32_t copies = pitch == row ? 1 : n;
    size_t bytes = pitch == row ? (size_t)n * row : row;
    for (int32_t i = 0; i < copies; i++) {
        loom_cu_ptr from = src + (uint64_t)i * row;
        loom_cu_result r =
            v->kind == LOOM_MEM_DEVICE
                ? cu->memcpyDtoDAsync(v->device_ptr + (uint64_t)i * pitch, from,
                                      bytes, cu->stream)
                : cu->memcpyDtoHAsync((char *)v->data + (size_t)i * pitch, from,
                                      bytes, cu->stream);
        loom_status st = q35_gpu_check(g, r, what, err);
        if (st != LOOM_OK)
            return st;
    }
    return LOOM_OK;
}

/* The plan's rules for this output: its views may be host memory (copied
 * back, the forward then synchronises) or device memory (written there,
 * stream-ordered), the taps view of the same kind as the logits view. */
static loom_plan_rules q35_gpu_rules(const loom_model *m,
                                     const loom_output *out)
{
    loom_plan_rules r = m->rules;
    r.view_kind = LOOM_MEM_HOST;
    if (out && LOOM_HAS_FIELD(out->struct_size, loom_output, logits) &&
        out->logits.ndim > 0)
        r.view_kind = out->logits.kind;
    else if (out && LOOM_HAS_FIELD(out->struct_size, loom_output, taps) &&
             out->taps.ndim > 0)
        r.view_kind = out->taps.kind;
    if (r.view_kind != LOOM_MEM_DEVICE)
        r.view_kind = LOOM_MEM_HOST;
    return r;
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
    loom_round_plan *p = &m->plan;
    loom_plan_rules rules = q35_gpu_rules(m, out);
    loom_status st = loom_round_plan_make(p, round, out, &rules, err);
    for (int32_t i = 0; st == LOOM_OK && i < p->n_streams; i++) {
        const loom_plan_stream *sm = &p->streams[i];
        if (!sm->cache->gpu)
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "qwen35 forward: row %d's cache is not a "
                                "device cache",
                                loom_plan_row(p, sm, 0));
        /* the one window rule, then room for the rows */
        st = loom_window_reserve(&sm->cache->win, sm, err);
        if (st == LOOM_OK)
            st = q35_gpu_cache_prepare(m, sm->cache, sm->count,
                                       loom_plan_n_spec(sm), err);
    }
    if (st != LOOM_OK)
        return st;
    int32_t ns = p->n_streams, n_logits = p->n_logits;
    int32_t n_tap = m->n_taps > 0 ? p->n_taps : 0;
    uint64_t lbytes = (uint64_t)n_logits * (uint64_t)G->vocab * 4;
    uint64_t tbytes =
        (uint64_t)n_tap * (uint64_t)m->n_taps * (uint64_t)G->hidden * 4;
    size_t n_maps = (size_t)(2 * n_logits + (1 + m->n_taps) * n_tap);
    st = q35_gpu_grow(g, &g->s.logits, &g->s.logits_bytes, lbytes, err);
    if (st == LOOM_OK)
        st = q35_gpu_grow(g, &g->s.taps, &g->s.taps_bytes, tbytes, err);
    if (st == LOOM_OK)
        st = q35_gpu_grow(g, &g->s.maps, &g->s.maps_bytes,
                          (uint64_t)n_maps * sizeof *g->maps, err);
    if (st == LOOM_OK && n_maps > g->maps_cap) {
        int32_t *mp = realloc(g->maps, n_maps * sizeof *mp);
        if (!mp)
            return loom_err_set(err, LOOM_ERR_NOMEM,
                                "qwen35 forward: no memory for %zu output map "
                                "entries",
                                n_maps);
        g->maps = mp;
        g->maps_cap = n_maps;
    }
    /* a prompt chunk's affine-4 products read a BF16 copy of the weight */
    for (int32_t i = 0; st == LOOM_OK && g->gemm && i < p->n_streams; i++)
        if (loom_plan_prompt_chunk(&p->streams[i])) {
            st = q35_gpu_grow(g, &g->s.wdq, &g->s.wdq_bytes, q35_dq_need(m),
                              err);
            break;
        }
    if (st != LOOM_OK)
        return st;

    /* nothing but a device fault can fail from here on; prompt chunks'
     * rows go after every other row */
    g->n_pc = 0;
    int32_t at = 0, n_other = 0;
    for (int32_t i = 0; (g->gemm || g->gdn_chunk || g->attn_chunk) && i < ns;
         i++) {
        const loom_plan_stream *sm = &p->streams[i];
        if (loom_plan_prompt_chunk(sm))
            g->pc[g->n_pc++] = i;
        else
            n_other += sm->count;
    }
    g->pc_row0 = g->n_pc ? n_other : T;
    int32_t at_pc = g->pc_row0;
    for (int32_t i = 0; i < ns; i++) {
        const loom_plan_stream *sm = &p->streams[i];
        q35_gpu_stream *d = &g->dstreams[i];
        q35_gpu_cache_view(m, sm->cache, d);
        int pc = g->n_pc && loom_plan_prompt_chunk(sm);
        int32_t *next = pc ? &at_pc : &at;
        d->first = *next;
        *next += sm->count;
        d->count = sm->count;
        d->chunk = pc ? (g->gdn_chunk ? 1 : 0) | (g->attn_chunk ? 2 : 0) : 0;
        /* a window's first row follows the snapshot of the state */
        d->snap_row = sm->first_spec;
        for (int32_t k = 0; k < sm->count; k++) {
            int32_t t = loom_plan_row(p, sm, k);
            const loom_row *r = loom_round_row(round, t);
            g->rows[d->first + k] = (q35_gpu_row){r->token, r->position, i,
                                                  loom_window_index(sm, k)};
            g->dev_of[t] = d->first + k;
        }
    }
    int32_t *mp = g->maps, nl = 0, nt = 0;
    for (int32_t t = 0; t < T; t++)
        if (loom_round_row(round, t)->flags & LOOM_ROW_LOGITS) {
            mp[nl] = g->dev_of[t];
            mp[n_logits + nl] = nl;
            nl++;
        }
    for (int32_t t = 0; n_tap > 0 && t < T; t++)
        if (loom_round_row(round, t)->flags & LOOM_ROW_TAP) {
            mp[2 * n_logits + nt] = g->dev_of[t];
            for (int32_t j = 0; j < m->n_taps; j++)
                mp[2 * n_logits + (1 + j) * n_tap + nt] = nt * m->n_taps + j;
            nt++;
        }
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
    if (st == LOOM_OK && n_logits > 0)
        st = q35_gpu_put_view(g, g->s.logits, n_logits, G->vocab, &out->logits,
                              "copying logits out", err);
    if (st == LOOM_OK && n_tap > 0)
        st = q35_gpu_put_view(g, g->s.taps, n_tap,
                              (int64_t)m->n_taps * G->hidden, &out->taps,
                              "copying taps out", err);
    /* host views are read when forward returns; device views are not */
    if (st == LOOM_OK && rules.view_kind == LOOM_MEM_HOST &&
        (n_logits > 0 || n_tap > 0))
        st =
            q35_gpu_check(g, cu->streamSynchronize(cu->stream), "forward", err);
    if (st != LOOM_OK)
        return st;
    for (int32_t i = 0; i < ns; i++) {
        const loom_plan_stream *sm = &p->streams[i];
        loom_window_end(&sm->cache->win, sm);
        sm->cache->len = sm->len0 + sm->count;
    }
    return LOOM_OK;
}

loom_status q35_gpu_head(loom_model *m, const loom_view *hidden, int32_t n,
                         const loom_view *logits, loom_err *err)
{
    q35_gpu *g = m->gpu;
    const loom_cuda *cu = g->cu;
    const q35_geometry *G = &m->g;
    int64_t H = G->hidden, V = G->vocab;
    /* the forward's buffers, up to 16 rows at a time: h in, logits out */
    int32_t R = m->max_rows < 16 ? m->max_rows : 16;
    loom_status st = q35_gpu_grow(g, &g->s.logits, &g->s.logits_bytes,
                                  (uint64_t)R * (uint64_t)V * 4, err);
    q35_run run = {m, g, 0, 0, err};
    const q35_run *Rn = &run;
    for (int32_t i0 = 0; st == LOOM_OK && i0 < n; i0 += R) {
        int32_t k = n - i0 < R ? n - i0 : R;
        for (int32_t i = 0; st == LOOM_OK && i < k; i++)
            st = q35_gpu_check(
                g,
                cu->memcpyHtoDAsync(g->s.h + (uint64_t)i * (uint64_t)H * 4,
                                    loom_view_row_f32(hidden, i0 + i),
                                    (size_t)H * 4, cu->stream),
                "copying hidden rows in", err);
        if (st == LOOM_OK)
            st = q35_gpu_logits(Rn, 0, k);
        loom_view part = *logits;
        part.data = (float *)logits->data + (int64_t)i0 * logits->strides[0];
        if (st == LOOM_OK)
            st = q35_gpu_put_view(g, g->s.logits, k, V, &part,
                                  "copying logits out", err);
        /* the next part reuses h and logits */
        if (st == LOOM_OK)
            st = q35_gpu_check(g, cu->streamSynchronize(cu->stream), "head",
                               err);
    }
    return st;
}
