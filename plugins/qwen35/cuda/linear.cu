// Linear layers on decode rows: y[t, r] = W[r, :] . x[t, :] with W BF16 (or
// F16/F32) and x, y float32. One warp per output row r, one launch tile of
// up to 8 token rows sharing each weight load; small matrices split each
// row over several warps.
//
// Rounding and order: weights are exact in float32 after the load; each
// lane accumulates its own columns (its 256-column chunks in order, the 8 of
// each in order) with fmaf in float32, the 32 lane sums are added by a
// fixed butterfly, then a row's warp parts in part order. A row's sum
// therefore depends on W[r] and x[t] alone, not on how many rows the launch
// or its tile carries: a window's rows are bit for bit the one-row steps,
// whatever else shares the round.
#include "affine4.cuh"
#include "common.cuh"

#define Q35_TILE 8

// One lane's 8 columns from c, for each token of the tile, in order.
__device__ __forceinline__ void q35_linear_chunk(const float *x, int ldx,
                                                 int t0, int nt, int c,
                                                 const float *wv,
                                                 const float *wv2, bool two,
                                                 float *acc, float *acc2)
{
#pragma unroll
    for (int k = 0; k < Q35_TILE; k++) {
        if (k < nt) {
            const float *xr = x + (int64_t)(t0 + k) * ldx + c;
            float4 a = *reinterpret_cast<const float4 *>(xr);
            float4 b = *reinterpret_cast<const float4 *>(xr + 4);
            float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 8; i++)
                acc[k] = fmaf(wv[i], xv[i], acc[k]);
            if (two) {
#pragma unroll
                for (int i = 0; i < 8; i++)
                    acc2[k] = fmaf(wv2[i], xv[i], acc2[k]);
            }
        }
    }
}

// mode: 0 y = s; 1 y += s (a residual add); 2 y = silu(s) * s2 (SwiGLU,
// s2 from w2). sel (MoE): the block's one row (tile 1) uses expert
// sel[t * sel_stride] of w, w2, whose experts lie `estride` elements apart.
// wpr (1, 2, 4 or 8, chosen from the weight's shape alone): warps per
// output row; warp part q of a row takes the 256-column chunks q, q + wpr,
// ..., and the parts' sums are added in part order.
template <typename W>
__device__ void q35_linear_body(const W *w, const W *w2, const float *x,
                                int ldx, float *y, int ldy, int rows, int cols,
                                int T, int tile, int mode, const int *sel,
                                int sel_stride, int64_t estride, int wpr)
{
    __shared__ float red[8][Q35_TILE][2];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int part = warp % wpr;
    int r = blockIdx.x * (8 / wpr) + warp / wpr;
    int t0 = blockIdx.y * tile;
    int nt = min(tile, T - t0);
    bool live = r < rows && nt > 0;
    float acc[Q35_TILE], acc2[Q35_TILE];
#pragma unroll
    for (int k = 0; k < Q35_TILE; k++)
        acc[k] = acc2[k] = 0.0f;
    const W *wr = nullptr, *wr2 = nullptr;
    if (live) {
        int64_t off = (int64_t)r * cols;
        if (sel)
            off += (int64_t)sel[(int64_t)t0 * sel_stride] * estride;
        wr = w + off;
        wr2 = mode == 2 ? w2 + off : nullptr;
    }
    bool vec = (cols & 7) == 0 && (ldx & 3) == 0;
    int step = 256 * wpr;
    if (live && vec) {
        int c = lane * 8 + part * 256;
        // four chunks per step: their loads are in flight together, the
        // sums still take the chunks in column order
        for (; c + 3 * step < cols; c += 4 * step) {
            float wv[4][8], wv2[4][8];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                q35_ld8(wr + c + u * step, wv[u]);
                if (wr2)
                    q35_ld8(wr2 + c + u * step, wv2[u]);
            }
#pragma unroll
            for (int u = 0; u < 4; u++)
                q35_linear_chunk(x, ldx, t0, nt, c + u * step, wv[u], wv2[u],
                                 wr2 != nullptr, acc, acc2);
        }
        for (; c < cols; c += step) {
            float wv[8], wv2[8];
            q35_ld8(wr + c, wv);
            if (wr2)
                q35_ld8(wr2 + c, wv2);
            q35_linear_chunk(x, ldx, t0, nt, c, wv, wv2, wr2 != nullptr, acc,
                             acc2);
        }
    } else if (live) {
        for (int c = lane + part * 32; c < cols; c += 32 * wpr) {
            float wv = q35_ld(wr, c);
            float wv2 = wr2 ? q35_ld(wr2, c) : 0.0f;
#pragma unroll
            for (int k = 0; k < Q35_TILE; k++) {
                if (k < nt) {
                    float xv = x[(int64_t)(t0 + k) * ldx + c];
                    acc[k] = fmaf(wv, xv, acc[k]);
                    acc2[k] = fmaf(wv2, xv, acc2[k]);
                }
            }
        }
    }
#pragma unroll
    for (int k = 0; k < Q35_TILE; k++) {
        if (k < nt) {
            float s = q35_warp_sum(acc[k]);
            float s2 = q35_warp_sum(acc2[k]);
            if (lane == 0) {
                red[warp][k][0] = s;
                red[warp][k][1] = s2;
            }
        }
    }
    if (wpr > 1)
        __syncthreads();
    if (!live || part != 0 || lane != 0)
        return;
#pragma unroll
    for (int k = 0; k < Q35_TILE; k++) {
        if (k < nt) {
            float s = red[warp][k][0], s2 = red[warp][k][1];
            for (int q = 1; q < wpr; q++) {
                s = __fadd_rn(s, red[warp + q][k][0]);
                s2 = __fadd_rn(s2, red[warp + q][k][1]);
            }
            float *o = y + (int64_t)(t0 + k) * ldy + r;
            if (mode == 0)
                *o = s;
            else if (mode == 1)
                *o = __fadd_rn(*o, s);
            else
                *o = __fmul_rn(q35_silu(s), s2);
        }
    }
}

#define Q35_LINEAR(name, W)                                                    \
    extern "C" __global__ void name(                                           \
        const W *w, const W *w2, const float *x, int ldx, float *y, int ldy,   \
        int rows, int cols, int T, int tile, int mode, const int *sel,         \
        int sel_stride, long long estride, int wpr)                            \
    {                                                                          \
        Q35_PDL_ENTER();                                                       \
        q35_linear_body(w, w2, x, ldx, y, ldy, rows, cols, T, tile, mode, sel, \
                        sel_stride, (int64_t)estride, wpr);                    \
    }

Q35_LINEAR(q35_linear_bf16, uint16_t)
Q35_LINEAR(q35_linear_f16, __half)
Q35_LINEAR(q35_linear_f32, float)

// Eight columns c.. of S weight rows (wv, as float32) against each of the
// tile's nt tokens: acc[j][k] += wv[j][i] * x[t0 + k][c + i], i in order.
// With nw the activations are normed first: (x r[k]) nw, two roundings.
template <int S, int NT>
__device__ __forceinline__ void
q35_tokens8(const float (*wv)[8], const float *x, int ldx, int t0, int nt,
            int c, const float *nw, const float *rs, float (*acc)[NT])
{
#pragma unroll
    for (int k = 0; k < NT; k++) {
        if (k >= nt)
            break;
        const float *xr = x + (int64_t)(t0 + k) * ldx + c;
        float4 a = __ldg(reinterpret_cast<const float4 *>(xr));
        float4 b = __ldg(reinterpret_cast<const float4 *>(xr + 4));
        float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        if (nw) {
            float4 ga = __ldg(reinterpret_cast<const float4 *>(nw + c));
            float4 gb = __ldg(reinterpret_cast<const float4 *>(nw + c + 4));
            float gv[8] = {ga.x, ga.y, ga.z, ga.w, gb.x, gb.y, gb.z, gb.w};
            float r = rs[k];
#pragma unroll
            for (int i = 0; i < 8; i++)
                xv[i] = __fmul_rn(__fmul_rn(xv[i], r), gv[i]);
        }
#pragma unroll
        for (int j = 0; j < S; j++)
#pragma unroll
            for (int i = 0; i < 8; i++)
                acc[j][k] = fmaf(wv[j][i], xv[i], acc[j][k]);
    }
}

// The end of a streaming product: each warp's sums over its lanes (the
// fixed butterfly) into red, then the first warp of each row group adds its
// parts in part order and stores: y = s, y += s (mode 1), or y = silu(s) *
// s2 (GLU, s2 the sum over w2's row).
template <int S, int NT, int RPW, bool GLU>
__device__ __forceinline__ void
q35_rows_finish(float (*acc)[NT], float (*red)[S][NT], int part, int wpr,
                int r0, int rows, int t0, int nt, float *y, int ldy, int mode)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < S; j++)
#pragma unroll
        for (int k = 0; k < NT; k++) {
            float v = q35_warp_sum(acc[j][k]);
            if (lane == 0)
                red[warp][j][k] = v;
        }
    __syncthreads();
    if (part != 0)
        return;
    for (int l = lane; l < RPW * NT; l += 32) {
        int j = l / NT, k = l % NT;
        if (k >= nt || r0 + j >= rows)
            continue;
        float v = red[warp][j][k];
        for (int q = 1; q < wpr; q++)
            v = __fadd_rn(v, red[warp + q][j][k]);
        float *o = y + (int64_t)(t0 + k) * ldy + r0 + j;
        if (GLU) {
            float v2 = red[warp][RPW + j][k];
            for (int q = 1; q < wpr; q++)
                v2 = __fadd_rn(v2, red[warp + q][RPW + j][k]);
            *o = __fmul_rn(q35_silu(v), v2);
        } else if (mode == 1) {
            *o = __fadd_rn(*o, v);
        } else {
            *o = v;
        }
    }
}

// The RMSNorm factors of the tile's rows (cols % 4 == 0, blocks of 256
// threads): r[k] = 1 / sqrtf(ss / cols + eps), ss summed per thread over
// the float4s tid, tid + 256, ... (x, y, z, w in order; 4 loads a thread
// in flight) and then over the block (q35_block_sum): q35_stage_row's
// order.
template <int NT>
__device__ __forceinline__ void q35_norm_rs(const float *x, int ldx, int t0,
                                            int nt, int cols, float eps,
                                            float *rs, float *bred)
{
    for (int k = 0; k < NT; k++) {
        float ss = k < nt ? q35_ss4(reinterpret_cast<const float4 *>(
                                        x + (int64_t)(t0 + k) * ldx),
                                    cols / 4)
                          : 0.0f;
        ss = q35_block_sum(ss, bred);
        if (threadIdx.x == 0)
            rs[k] = 1.0f / sqrtf(ss / (float)cols + eps);
    }
    __syncthreads();
}

// The streaming form for BF16 and F16 weights whose rows are a multiple of
// 8 long: each warp takes RPW consecutive output rows (SwiGLU: RPW rows of
// w and of w2), so each activation load feeds RPW weight rows, and keeps
// the next chunks' weights in flight while it multiplies the current ones.
// The first chunks are loaded before the wait for the kernel before (they
// are weights, never written by a forward). With nw, x is the residual
// stream and the kernel applies the RMSNorm itself: r[t] from q35_norm_rs,
// x' = (x r) nw rounded per multiply.
//
// A row's sum is taken in the order of q35_linear_body for the same wpr
// (wpr is the host's, from the weight's shape alone): lane chunks in column
// order, the 8 of a chunk in order, the butterfly, the parts in order. So
// NT = 1 and NT = 8 launches give a row the same bits.
template <typename W, int NT, int RPW, bool GLU>
__device__ __forceinline__ void
q35_gemv_body(const W *w, const W *w2, const float *x, int ldx, float *y,
              int ldy, int rows, int cols, int T, int mode, const int *sel,
              int sel_stride, int64_t estride, int wpr, const float *nw,
              float eps)
{
    constexpr int S = GLU ? 2 * RPW : RPW; // weight rows a warp streams
    constexpr int U = NT == 1 ? 2 : 1;     // chunks per lane in flight
    __shared__ float red[8][S][NT];
    __shared__ float rs[NT], bred[32];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int part = warp % wpr;
    int r0 = (blockIdx.x * (8 / wpr) + warp / wpr) * RPW;
    int t0 = blockIdx.y * NT;
    int nt = min(NT, T - t0);
    q35_pdl_allow();
    // MoE: the expert comes from the kernel before
    if (sel)
        q35_pdl_wait();
    // rows r0 .. r0 + RPW - 1 of w (then of w2) lie cols apart
    int live = nt > 0 ? max(0, min(RPW, rows - r0)) : 0;
    int64_t off = live > 0 ? (int64_t)r0 * cols : 0;
    if (sel && live > 0)
        off += (int64_t)sel[(int64_t)t0 * sel_stride] * estride;
    const W *wb = w + off, *wb2 = GLU ? w2 + off : nullptr;
#define Q35_WROW(j) ((j) < RPW ? wb + (int64_t)(j) * cols                      \
                               : wb2 + (int64_t)((j) - RPW) * cols)
#define Q35_WOK(j)  (((j) < RPW ? (j) : (j) - RPW) < live)
    int step = 256 * wpr;
    int c0 = part * 256 + lane * 8;
    uint4 cur[U][S];
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int j = 0; j < S; j++)
            cur[u][j] = Q35_WOK(j) && c0 + u * step < cols
                            ? q35_ldw(Q35_WROW(j) + c0 + u * step)
                            : make_uint4(0, 0, 0, 0);
    q35_pdl_wait();
    if (nw)
        q35_norm_rs<NT>(x, ldx, t0, nt, cols, eps, rs, bred);
    float acc[S][NT];
#pragma unroll
    for (int j = 0; j < S; j++)
#pragma unroll
        for (int k = 0; k < NT; k++)
            acc[j][k] = 0.0f;
    for (int c = c0; c < cols; c += U * step) {
        uint4 nxt[U][S];
        bool more = c + U * step < cols;
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int j = 0; j < S; j++) {
                int cc = c + (U + u) * step;
                nxt[u][j] = more && Q35_WOK(j) && cc < cols
                                ? q35_ldw(Q35_WROW(j) + cc)
                                : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
        for (int u = 0; u < U; u++) {
            int cc = c + u * step;
            if (cc >= cols)
                break;
            float wv[S][8];
#pragma unroll
            for (int j = 0; j < S; j++)
                q35_cvt8(cur[u][j], w, wv[j]);
            q35_tokens8<S, NT>(wv, x, ldx, t0, nt, cc, nw, rs, acc);
        }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int j = 0; j < S; j++)
                cur[u][j] = nxt[u][j];
    }
#undef Q35_WROW
#undef Q35_WOK
    q35_rows_finish<S, NT, RPW, GLU>(acc, red, part, wpr, r0, rows, t0, nt, y,
                                     ldy, mode);
}

#define Q35_GEMV(name, W, NT, RPW, GLU)                                        \
    extern "C" __global__ void __launch_bounds__(256) name(                    \
        const W *w, const W *w2, const float *x, int ldx, float *y, int ldy,   \
        int rows, int cols, int T, int mode, const int *sel, int sel_stride,   \
        long long estride, int wpr, const float *nw, float eps)                \
    {                                                                          \
        q35_gemv_body<W, NT, RPW, GLU>(w, w2, x, ldx, y, ldy, rows, cols, T,   \
                                       mode, sel, sel_stride,                  \
                                       (int64_t)estride, wpr, nw, eps);        \
    }

Q35_GEMV(q35_gemv1_bf16, uint16_t, 1, 4, false)
Q35_GEMV(q35_gemv1_glu_bf16, uint16_t, 1, 2, true)
Q35_GEMV(q35_gemv8_bf16, uint16_t, 8, Q35_GEMV8_RPW, false)
Q35_GEMV(q35_gemv8_glu_bf16, uint16_t, 8, Q35_GEMV8_RPW / 2, true)
Q35_GEMV(q35_gemv1_f16, __half, 1, 4, false)
Q35_GEMV(q35_gemv1_glu_f16, __half, 1, 2, true)
Q35_GEMV(q35_gemv8_f16, __half, 8, Q35_GEMV8_RPW, false)
Q35_GEMV(q35_gemv8_glu_f16, __half, 8, Q35_GEMV8_RPW / 2, true)

// MLX affine 4-bit weights (the device layout of gpu_kernels.h: the words,
// then each row's (scale, bias) pairs). A lane takes 32 columns (16 bytes of
// words, inside one group) per chunk, part p of wpr the chunks p, p + wpr,
// ... of its rows; a row's sum is its chunks in column order per lane
// (q35_q4_chunk), the butterfly, the parts in order: the same for any token
// count, and in q35_q4s. With nw, x is the residual stream, normed as
// q35_gemv_body norms it.
template <int NT, int RPW, bool GLU>
__device__ __forceinline__ void
q35_q4_body(const uint32_t *q, const float *p, const uint32_t *q2,
            const float *p2, const float *x, int ldx, float *y, int ldy,
            int rows, int cols, int T, int mode, int wpr, int gsz,
            const float *nw, float eps)
{
    constexpr int S = GLU ? 2 * RPW : RPW;
    __shared__ float red[8][S][NT];
    __shared__ float rs[NT], bred[32];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int part = warp % wpr;
    int r0 = (blockIdx.x * (8 / wpr) + warp / wpr) * RPW;
    int t0 = blockIdx.y * NT;
    int nt = min(NT, T - t0);
    q35_pdl_allow();
    int live = nt > 0 ? max(0, min(RPW, rows - r0)) : 0;
    int wrow = cols / 8, gp = q35_q4_gp(cols, gsz);
    // a dead row reads row 0 (its sums are never stored)
#define Q35_QR(j)  (Q35_QOK(j) ? r0 + ((j) < RPW ? (j) : (j) - RPW) : 0)
#define Q35_QOK(j) (((j) < RPW ? (j) : (j) - RPW) < live)
    int step = 1024 * wpr;
    int c0 = part * 1024 + lane * 32;
    uint4 cur[S];
#pragma unroll
    for (int j = 0; j < S; j++)
        cur[j] = c0 < cols ? q35_ldw((j < RPW ? q : q2) +
                                     (int64_t)Q35_QR(j) * wrow + c0 / 8)
                           : make_uint4(0, 0, 0, 0);
    q35_pdl_wait();
    if (nw)
        q35_norm_rs<NT>(x, ldx, t0, nt, cols, eps, rs, bred);
    float acc[S][NT];
#pragma unroll
    for (int j = 0; j < S; j++)
#pragma unroll
        for (int k = 0; k < NT; k++)
            acc[j][k] = 0.0f;
    for (int c = c0; c < cols; c += step) {
        uint4 nxt[S];
        bool more = c + step < cols;
#pragma unroll
        for (int j = 0; j < S; j++)
            nxt[j] = more ? q35_ldw((j < RPW ? q : q2) +
                                    (int64_t)Q35_QR(j) * wrow + (c + step) / 8)
                          : make_uint4(0, 0, 0, 0);
        float2 pr[S];
#pragma unroll
        for (int j = 0; j < S; j++)
            pr[j] = __ldg(reinterpret_cast<const float2 *>(j < RPW ? p : p2) +
                          (int64_t)Q35_QR(j) * gp + c / gsz);
        float d[S][NT], sx[NT];
        // word by word (8 columns): each row's 8 weights once for the
        // tile's tokens, each token's activations once for the S rows
#pragma unroll
        for (int wd = 0; wd < 4; wd++) {
            float v[S][8];
#pragma unroll
            for (int j = 0; j < S; j++)
                q35_q4_v8(wd == 0   ? cur[j].x
                          : wd == 1 ? cur[j].y
                          : wd == 2 ? cur[j].z
                                    : cur[j].w,
                          v[j]);
#pragma unroll
            for (int k = 0; k < NT; k++) {
                if (k >= nt)
                    break;
                const float *xr = x + (int64_t)(t0 + k) * ldx + c + wd * 8;
                float4 a = __ldg(reinterpret_cast<const float4 *>(xr));
                float4 b = __ldg(reinterpret_cast<const float4 *>(xr + 4));
                float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
                if (nw) {
                    const float *g = nw + c + wd * 8;
                    float4 ga = __ldg(reinterpret_cast<const float4 *>(g));
                    float4 gb = __ldg(reinterpret_cast<const float4 *>(g + 4));
                    float gv[8] = {ga.x, ga.y, ga.z, ga.w,
                                   gb.x, gb.y, gb.z, gb.w};
#pragma unroll
                    for (int i = 0; i < 8; i++)
                        xv[i] = __fmul_rn(__fmul_rn(xv[i], rs[k]), gv[i]);
                }
                sx[k] = q35_q4_xsum8(xv, wd, sx[k]);
#pragma unroll
                for (int j = 0; j < S; j++)
                    d[j][k] =
                        q35_q4_dot8(v[j], xv, wd == 0 ? 0.0f : d[j][k]);
            }
        }
#pragma unroll
        for (int k = 0; k < NT; k++) {
            if (k >= nt)
                break;
#pragma unroll
            for (int j = 0; j < S; j++)
                acc[j][k] = q35_q4_end(pr[j], d[j][k], sx[k], acc[j][k]);
        }
#pragma unroll
        for (int j = 0; j < S; j++)
            cur[j] = nxt[j];
    }
#undef Q35_QR
#undef Q35_QOK
    q35_rows_finish<S, NT, RPW, GLU>(acc, red, part, wpr, r0, rows, t0, nt, y,
                                     ldy, mode);
}

#define Q35_Q4(name, NT, RPW, GLU)                                             \
    extern "C" __global__ void __launch_bounds__(256) name(                    \
        const uint32_t *q, const float *p, const uint32_t *q2,                 \
        const float *p2, const float *x, int ldx, float *y, int ldy, int rows, \
        int cols, int T, int mode, int wpr, int gsz, const float *nw,          \
        float eps)                                                             \
    {                                                                          \
        q35_q4_body<NT, RPW, GLU>(q, p, q2, p2, x, ldx, y, ldy, rows, cols, T, \
                                  mode, wpr, gsz, nw, eps);                    \
    }

Q35_Q4(q35_q4_1, 1, 4, false)
Q35_Q4(q35_q4_1_glu, 1, 2, true)
Q35_Q4(q35_q4_8, 8, 4, false)
Q35_Q4(q35_q4_8_glu, 8, 2, true)
