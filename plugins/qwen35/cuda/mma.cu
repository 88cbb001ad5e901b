// Products with BF16 weights on the tensor cores (mma.sync m16n8k16, float32
// accumulation), for every row count: a warp owns 8 weight rows and 16 * MT
// tokens, streams its rows' weights once for all of them and keeps the next
// superblocks (32 columns) of weights in flight.
//
// Activations are float32 and enter as three BF16 parts (hi + mid + lo = x
// to about 2^-24 of it), three products per k-step accumulated apart, so
// the result is about as accurate as a float32 dot product.
//
// Order: an output (row, token) depends only on its weight row, its token's
// x and the fixed sequence of mma steps over the row's superblocks (part p
// of P takes superblocks p, p + P, ...; P from the weight's shape alone),
// then the parts added in part order. An mma's output element depends on
// its own row and column only, so no other token or row enters: a row gets
// the same bits in a launch of 1 token or of 32 (windows equal steps, a
// stream's logits do not depend on what shares its round).
#include "common.cuh"

#include <cuda_bf16.h>

__device__ __forceinline__ void q35_mma(float *d, const uint32_t *a,
                                        uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                   "r"(b1));
}

__device__ __forceinline__ uint32_t q35_pack(__nv_bfloat16 lo,
                                             __nv_bfloat16 hi)
{
    return (uint32_t)__bfloat16_as_ushort(lo) |
           ((uint32_t)__bfloat16_as_ushort(hi) << 16);
}

// x as hi + mid + lo, each BF16 (the rest is below 2^-24 of x).
__device__ __forceinline__ void q35_split(float x, __nv_bfloat16 *p)
{
    p[0] = __float2bfloat16_rn(x);
    float r = __fsub_rn(x, __bfloat162float(p[0]));
    p[1] = __float2bfloat16_rn(r);
    p[2] = __float2bfloat16_rn(__fsub_rn(r, __bfloat162float(p[1])));
}

// Eight activations of token t at columns c.. (normed when nw), zero past T.
__device__ __forceinline__ void q35_mma_x(const float *x, int ldx, int t,
                                          int T, int c, const float *nw,
                                          const float *gv, float r, float *o)
{
    if (t >= T) {
#pragma unroll
        for (int i = 0; i < 8; i++)
            o[i] = 0.0f;
        return;
    }
    const float *xr = x + (int64_t)t * ldx + c;
    float4 a = __ldg(reinterpret_cast<const float4 *>(xr));
    float4 b = __ldg(reinterpret_cast<const float4 *>(xr + 4));
    float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; i++)
        o[i] = nw ? __fmul_rn(__fmul_rn(v[i], r), gv[i]) : v[i];
}

#define Q35_MMA_SPLIT 3

// One superblock (32 columns) of a warp: lane (g, q) holds 8 weights of row
// r0 + g at columns c = sb * 32 + q * 8 (w[0], and w[1] of w2 for SwiGLU);
// k-step s takes columns c + 4s .. c + 4s + 3 as the mma's k = 2q, 2q + 1,
// 2q + 8, 2q + 9: weights and activations use the same map, so the dot
// product is over the same pairs. Tokens are the mma's rows (g and g + 8 of
// each 16-token tile), weight rows its columns.
// The staged planes: per token, per superblock, per q, the 12 words lane
// (g, q) needs, in the order [step s][part p][j] with j 0 the pair at
// columns c + 4s, c + 4s + 1 and j 1 the pair at c + 4s + 2, c + 4s + 3;
// tokens Q35_XS_PAD words apart beyond that (shared-memory banks).
#define Q35_XS_PAD 4
__device__ __forceinline__ int64_t q35_xs_at(int t, int SB, int sb, int q)
{
    return (int64_t)t * (SB * 48 + Q35_XS_PAD) + (sb * 4 + q) * 12;
}

// Lane (g, q)'s words of token t at superblock sb, or zeros past ntok.
__device__ __forceinline__ void q35_xs_load(const uint32_t *xs, int ntok,
                                            int SB, int t, int sb, int q,
                                            uint32_t *v)
{
    if (t >= ntok) {
#pragma unroll
        for (int i = 0; i < 12; i++)
            v[i] = 0;
        return;
    }
    const uint4 *p = reinterpret_cast<const uint4 *>(xs + q35_xs_at(t, SB, sb, q));
#pragma unroll
    for (int i = 0; i < 3; i++) {
        uint4 u = p[i];
        v[4 * i] = u.x, v[4 * i + 1] = u.y, v[4 * i + 2] = u.z,
                  v[4 * i + 3] = u.w;
    }
}

template <int MT, bool GLU>
__device__ __forceinline__ void
q35_mma_sb(const uint4 *w, const float *x, int ldx, int t0, int T, int c,
           const float *nw, const float *rs, const uint32_t *xs, int ntok,
           int cols, int g, float (*acc)[Q35_MMA_SPLIT][4],
           float (*acc2)[Q35_MMA_SPLIT][4])
{
    const uint32_t *wa = reinterpret_cast<const uint32_t *>(&w[0]);
    const uint32_t *wb = reinterpret_cast<const uint32_t *>(&w[1]);
#pragma unroll
    for (int m = 0; m < MT; m++) {
        int ta = t0 + m * 16 + g;
        // the tile's rows g + 8 hold no token (uniform over the warp)
        bool upper = t0 + m * 16 + 8 < T;
        uint32_t a[2][Q35_MMA_SPLIT][4];
        if (xs) {
            int la = m * 16 + g, SB = cols / 32, sb = c / 32;
            uint32_t lo[12], hi[12];
            q35_xs_load(xs, ntok, SB, la, sb, c % 32 / 8, lo);
            if (upper)
                q35_xs_load(xs, ntok, SB, la + 8, sb, c % 32 / 8, hi);
#pragma unroll
            for (int s = 0; s < 2; s++)
#pragma unroll
                for (int p = 0; p < Q35_MMA_SPLIT; p++) {
                    int k = (s * 3 + p) * 2;
                    a[s][p][0] = lo[k];
                    a[s][p][2] = lo[k + 1];
                    a[s][p][1] = upper ? hi[k] : 0;
                    a[s][p][3] = upper ? hi[k + 1] : 0;
                }
        } else {
            float gv[8] = {1, 1, 1, 1, 1, 1, 1, 1};
            if (nw) {
                float4 ga = __ldg(reinterpret_cast<const float4 *>(nw + c));
                float4 gb = __ldg(reinterpret_cast<const float4 *>(nw + c + 4));
                gv[0] = ga.x, gv[1] = ga.y, gv[2] = ga.z, gv[3] = ga.w;
                gv[4] = gb.x, gv[5] = gb.y, gv[6] = gb.z, gv[7] = gb.w;
            }
            float xa[8], xb[8];
            q35_mma_x(x, ldx, ta, T, c, nw, gv, nw ? rs[m * 16 + g] : 1.0f,
                      xa);
            if (upper)
                q35_mma_x(x, ldx, ta + 8, T, c, nw, gv,
                          nw ? rs[m * 16 + g + 8] : 1.0f, xb);
            __nv_bfloat16 pa[8][3], pb[8][3];
#pragma unroll
            for (int i = 0; i < 8; i++) {
                q35_split(xa[i], pa[i]);
                if (upper)
                    q35_split(xb[i], pb[i]);
                else
                    pb[i][0] = pb[i][1] = pb[i][2] = __float2bfloat16_rn(0.0f);
            }
#pragma unroll
            for (int s = 0; s < 2; s++)
#pragma unroll
                for (int p = 0; p < Q35_MMA_SPLIT; p++) {
                    a[s][p][0] = q35_pack(pa[4 * s][p], pa[4 * s + 1][p]);
                    a[s][p][1] = q35_pack(pb[4 * s][p], pb[4 * s + 1][p]);
                    a[s][p][2] = q35_pack(pa[4 * s + 2][p], pa[4 * s + 3][p]);
                    a[s][p][3] = q35_pack(pb[4 * s + 2][p], pb[4 * s + 3][p]);
                }
        }
#pragma unroll
        for (int s = 0; s < 2; s++)
#pragma unroll
            for (int p = 0; p < Q35_MMA_SPLIT; p++) {
                q35_mma(acc[m][p], a[s][p], wa[2 * s], wa[2 * s + 1]);
                if (GLU)
                    q35_mma(acc2[m][p], a[s][p], wb[2 * s], wb[2 * s + 1]);
            }
    }
}

// y[t, r] for rows r of the weight, tokens t; mode 0 y = s, 1 y += s, GLU
// y = silu(s) * s2. A warp: 8 weight rows, 16 * MT tokens, part `part` of
// P over the superblocks; a block: 8 warps = (8 / P) row tiles x P parts.
// The three parts' products accumulate apart (independent chains) and are
// added as hi + (mid + lo). With nw, x is the residual stream, normed here
// (r[t] summed by one warp per token, lanes strided over the columns, then
// the butterfly: an order fixed by cols alone).
template <int MT, bool GLU>
__device__ __forceinline__ void
q35_mma_body(const uint16_t *w, const uint16_t *w2, const float *x, int ldx,
             float *y, int ldy, int rows, int cols, int T, int mode, int P,
             const float *nw, float eps, int staged)
{
    constexpr int NR = GLU ? 2 : 1;   // weight rows a lane streams
    constexpr int U = GLU ? 4 : 8;    // superblocks in flight
    __shared__ float red[8][MT][NR][4][32];
    __shared__ float rs[16 * MT];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int g = lane >> 2, q = lane & 3;
    int part = warp % P;
    int r0 = (blockIdx.x * (8 / P) + warp / P) * 8;
    int t0 = blockIdx.y * 16 * MT;
    q35_pdl_allow();
    bool ok = r0 + g < rows;
    const uint16_t *wrow[NR];
    wrow[0] = w + (int64_t)(ok ? r0 + g : 0) * cols + q * 8;
    if (GLU)
        wrow[NR - 1] = w2 + (int64_t)(ok ? r0 + g : 0) * cols + q * 8;
    int SB = cols / 32;
    int nsb = part < SB ? (SB - part + P - 1) / P : 0;
    uint4 buf[U][NR];
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int i = 0; i < NR; i++)
            buf[u][i] = u < nsb && ok ? q35_ldw(wrow[i] + (part + u * P) * 32)
                                      : make_uint4(0, 0, 0, 0);
    q35_pdl_wait();
    if (nw) {
        for (int k = warp; k < 16 * MT; k += 8) {
            float ss = 0.0f;
            if (t0 + k < T) {
                const float *xr = x + (int64_t)(t0 + k) * ldx;
                for (int i = lane; i < cols; i += 32)
                    ss = fmaf(xr[i], xr[i], ss);
            }
            ss = q35_warp_sum(ss);
            if (lane == 0)
                rs[k] = 1.0f / sqrtf(ss / (float)cols + eps);
        }
        __syncthreads();
    }
    // staged: the block's tokens split once into shared memory, in the
    // order the lanes read them (q35_xs_at), the values each lane would
    // make itself
    extern __shared__ __align__(16) uint32_t xs_dyn[];
    const uint32_t *xs = nullptr;
    int ntok = min(16 * MT, T - t0);
    if (staged) {
        int SB = cols / 32, nq = cols / 4;
        for (int idx = threadIdx.x; idx < ntok * nq; idx += blockDim.x) {
            int t = idx / nq, c = idx % nq * 4;
            const float *xr = x + (int64_t)(t0 + t) * ldx + c;
            __nv_bfloat16 pp[4][3];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float v = xr[i];
                if (nw)
                    v = __fmul_rn(__fmul_rn(v, rs[t]), __ldg(nw + c + i));
                q35_split(v, pp[i]);
            }
            int sb = c / 32, q = c % 32 / 8, st = c % 8 / 4;
            uint32_t *o = xs_dyn + q35_xs_at(t, SB, sb, q);
#pragma unroll
            for (int p = 0; p < Q35_MMA_SPLIT; p++) {
                o[(st * 3 + p) * 2] = q35_pack(pp[0][p], pp[1][p]);
                o[(st * 3 + p) * 2 + 1] = q35_pack(pp[2][p], pp[3][p]);
            }
        }
        __syncthreads();
        xs = xs_dyn;
    }
    float acc[MT][Q35_MMA_SPLIT][4], acc2[MT][Q35_MMA_SPLIT][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int p = 0; p < Q35_MMA_SPLIT; p++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[m][p][i] = acc2[m][p][i] = 0.0f;
    for (int i0 = 0; i0 < nsb; i0 += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            int i = i0 + u;
            if (i < nsb) {
                uint4 cur[2];
                cur[0] = buf[u][0];
                cur[1] = buf[u][NR - 1];
                int nx = i + U;
#pragma unroll
                for (int k = 0; k < NR; k++)
                    buf[u][k] = nx < nsb && ok
                                    ? q35_ldw(wrow[k] + (part + nx * P) * 32)
                                    : make_uint4(0, 0, 0, 0);
                q35_mma_sb<MT, GLU>(cur, x, ldx, t0, T,
                                    (part + i * P) * 32 + q * 8, nw, rs, xs,
                                    ntok, cols, g, acc, acc2);
            }
        }
    }
    // each lane's four outputs, then the parts in part order
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            red[warp][m][0][i][lane] = __fadd_rn(
                acc[m][0][i], __fadd_rn(acc[m][1][i], acc[m][2][i]));
            if (GLU)
                red[warp][m][NR - 1][i][lane] = __fadd_rn(
                    acc2[m][0][i], __fadd_rn(acc2[m][1][i], acc2[m][2][i]));
        }
    __syncthreads();
    if (part != 0)
        return;
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            // c0, c1: token g, rows 2q, 2q + 1; c2, c3: token g + 8
            int t = t0 + m * 16 + g + (i >> 1) * 8;
            int r = r0 + 2 * q + (i & 1);
            if (r >= rows || t >= T)
                continue;
            float s = red[warp][m][0][i][lane];
            for (int pp = 1; pp < P; pp++)
                s = __fadd_rn(s, red[warp + pp][m][0][i][lane]);
            float *o = y + (int64_t)t * ldy + r;
            if (GLU) {
                float s2 = red[warp][m][NR - 1][i][lane];
                for (int pp = 1; pp < P; pp++)
                    s2 = __fadd_rn(s2, red[warp + pp][m][NR - 1][i][lane]);
                *o = __fmul_rn(q35_silu(s), s2);
            } else if (mode == 1) {
                *o = __fadd_rn(*o, s);
            } else {
                *o = s;
            }
        }
}

#define Q35_MMA(name, MT, GLU)                                                 \
    extern "C" __global__ void __launch_bounds__(256)                          \
        name(const uint16_t *w, const uint16_t *w2, const float *x, int ldx,   \
             float *y, int ldy, int rows, int cols, int T, int mode, int P,    \
             const float *nw, float eps, int staged)                           \
    {                                                                          \
        q35_mma_body<MT, GLU>(w, w2, x, ldx, y, ldy, rows, cols, T, mode, P,   \
                              nw, eps, staged);                                \
    }

Q35_MMA(q35_mma1, 1, false)
Q35_MMA(q35_mma1_glu, 1, true)
Q35_MMA(q35_mma2, 2, false)
Q35_MMA(q35_mma2_glu, 2, true)
