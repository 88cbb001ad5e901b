// Affine-4 decode products on tensor cores, y[t] = W x[t] for MLX affine
// 4-bit weights and any number of rows. The nibbles become BF16 operands
// without a conversion instruction: a word's eight columns as four pairs
// 128 + q (a logic operation and a shift each), multiplied on the MMA by
// the row's activations, each split into BF16 halves x = hi + lo (hi and
// lo two columns of the MMA's 8, so one MMA carries 4 rows of x to about
// 2^-17 relative). Per group of columns the MMA gives d = sum (128 + q) x,
// and the row's sum takes s d + (b - 128 s) sx with sx = sum x: the same
// s (q . x) + b sx the other affine kernels take, rounded elsewhere.
//
// Block of 288 threads: warps 0..7 consume, warp 8 produces a ring of
// tensor-map boxes (a stage: a 1024-column chunk of two 16-row tiles,
// their words under the 128-byte swizzle, then their pairs). Consumer warp
// w takes the chunk's columns 128 w .. 128 w + 127 for both tiles; at a
// group's end the 8 warps' partial sums are added in warp order. Each
// block stages its rows of x (normed, split, in the MMA's column order)
// in shared memory itself.
//
// Rounding and order: a row's sum is the 8 warps' partials in order, each
// its units (min(gsz, 128) columns) in column order, each unit one MMA
// chain over its columns from zero, whose result for a (row, column)
// depends on that row of W and that column of x alone. Nothing depends on
// how many rows a launch carries or which tile a row lands in, so a row
// gets the same bits in every launch.
#include "affine4.cuh"
#include "bulk.cuh"
#include "common.cuh"
#include "mma.cuh"

#include <cuda_bf16.h>

// A word's 8 columns (column i in nibble i) as four BF16 pairs 128 + q:
// pair j holds columns j (low half) and j + 4 (high half).
__device__ __forceinline__ void q35_q4m_bf(uint32_t w, uint32_t *p)
{
#pragma unroll
    for (int j = 0; j < 4; j++)
        p[j] = q35_andor(w >> (4 * j), 0x000f000fu, 0x43004300u);
}

// One BF16 pair (lo column in the low half).
__device__ __forceinline__ uint32_t q35_q4m_pack(__nv_bfloat16 a,
                                                 __nv_bfloat16 b)
{
    return (uint32_t)__bfloat16_as_ushort(a) |
           ((uint32_t)__bfloat16_as_ushort(b) << 16);
}

// The consumers' copy of nt rows of x: for each 32-column piece P and
// each row's half n (2 t + 0 hi, 2 t + 1 lo), 4 slots of 16 bytes, slot j
// the columns 8 j .. 8 j + 7 as the pairs (0, 4), (1, 5), (2, 6), (3, 7)
// (the B operand of the MMA steps of q35_q4m_bf's pairs); then per piece
// the sums of hi + lo (a slot's in column order, the 4 in slot order:
// sxp), and per unit of upg pieces
// their sum in piece order (sxu, at the unit's first piece). With nw a
// row is normed as q35_stage_row norms it.
__device__ __forceinline__ void q35_q4m_stage(const float *x, int ldx, int nt,
                                              int tb, int cols, int upg,
                                              const float *nw, float eps,
                                              uint4 *xs, float *sxp, float *sxu,
                                              float (*bred)[8])
{
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int ncg = cols / 32;
    for (int t = 0; t < nt; t++) {
        const float *xr = x + (int64_t)t * ldx;
        float r = 1.0f;
        if (nw) {
            float ss = q35_ss4(reinterpret_cast<const float4 *>(xr), cols / 4);
            ss = q35_warp_sum(ss);
            if (lane == 0)
                bred[t][warp] = ss;
            q35_consumers_sync();
            float s2 = lane < 8 ? bred[t][lane] : 0.0f;
            s2 = q35_warp_sum(s2);
            r = 1.0f / sqrtf(s2 / (float)cols + eps);
        }
        // a lane a slot (8 columns), 4 lanes a piece
        for (int S0 = warp * 32; S0 < 4 * ncg; S0 += 256) {
            int S = S0 + lane, P = S >> 2, j = S & 3;
            float s = 0.0f;
            if (S < 4 * ncg) {
                const float4 *src =
                    reinterpret_cast<const float4 *>(xr + 8 * S);
                float4 a = src[0], b = src[1];
                float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
                if (nw) {
                    const float4 *gw =
                        reinterpret_cast<const float4 *>(nw + 8 * S);
                    float4 ga = __ldg(gw), gb = __ldg(gw + 1);
                    float g[8] = {ga.x, ga.y, ga.z, ga.w,
                                  gb.x, gb.y, gb.z, gb.w};
#pragma unroll
                    for (int i = 0; i < 8; i++)
                        v[i] = __fmul_rn(__fmul_rn(v[i], r), g[i]);
                }
                __nv_bfloat16 h[8], l[8];
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    h[i] = __float2bfloat16_rn(v[i]);
                    l[i] = __float2bfloat16_rn(
                        __fsub_rn(v[i], __bfloat162float(h[i])));
                    // hi + lo is exact in float32
                    float e = __fadd_rn(__bfloat162float(h[i]),
                                        __bfloat162float(l[i]));
                    s = i == 0 ? e : __fadd_rn(s, e);
                }
                uint4 *o = xs + ((int64_t)P * 2 * tb + 2 * t) * 4 + j;
                o[0] = make_uint4(
                    q35_q4m_pack(h[0], h[4]), q35_q4m_pack(h[1], h[5]),
                    q35_q4m_pack(h[2], h[6]), q35_q4m_pack(h[3], h[7]));
                o[4] = make_uint4(
                    q35_q4m_pack(l[0], l[4]), q35_q4m_pack(l[1], l[5]),
                    q35_q4m_pack(l[2], l[6]), q35_q4m_pack(l[3], l[7]));
            }
            // the piece's sum: its 4 slots' in slot order
            float s1 = __shfl_down_sync(0xffffffffu, s, 1);
            float s2 = __shfl_down_sync(0xffffffffu, s, 2);
            float s3 = __shfl_down_sync(0xffffffffu, s, 3);
            if (j == 0 && S < 4 * ncg)
                sxp[t * ncg + P] =
                    __fadd_rn(__fadd_rn(__fadd_rn(s, s1), s2), s3);
        }
    }
    q35_consumers_sync();
    for (int i = tid; i < nt * ncg; i += 256) {
        int P = i % ncg;
        if (P % upg)
            continue;
        float s = sxp[i];
        for (int q = 1; q < upg && P + q < ncg; q++)
            s = __fadd_rn(s, sxp[i + q]);
        sxu[i] = s;
    }
    q35_consumers_sync();
}

template <bool GLU>
__device__ __forceinline__ void
q35_q4m_body(const q35_tmap *qm, const q35_tmap *pm, const q35_tmap *qm2,
             const q35_tmap *pm2, const float *x, int ldx, float *y, int ldy,
             int rows, int cols, int T, int gsz, int mode, const float *nw,
             float eps, int ns, int tb)
{
    constexpr int OR = GLU ? 16 : 32; // output rows of a group
    extern __shared__ unsigned char q35_q4mdyn[];
    // the ring on a 1024-byte boundary (the swizzle's), the host asked
    // for 1024 bytes more
    unsigned char *ring =
        q35_q4mdyn + ((1024u - (q35_smem_addr(q35_q4mdyn) & 1023u)) & 1023u);
    int sb = q35_q4m_stage(gsz), pp = q35_q4m_pitch(gsz), pc = 1024 / gsz;
    int ncg = cols / 32, U = gsz < 128 ? gsz : 128, upg = U / 32;
    float *red = reinterpret_cast<float *>(ring + (int64_t)ns * sb);
    uint4 *xs = reinterpret_cast<uint4 *>(red + 2 * 8 * 32 * 4);
    float *sxp = reinterpret_cast<float *>(xs + (int64_t)ncg * 2 * tb * 4);
    float *sxu = sxp + tb * ncg;
    __shared__ __align__(8) uint64_t full[Q35_Q4M_NS], empty[Q35_Q4M_NS];
    __shared__ float bred[Q35_Q4M_TOK][8];
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int nun = (rows + 15) / 16;
    int ua = (int)((int64_t)nun * blockIdx.x / gridDim.x);
    int ub = (int)((int64_t)nun * (blockIdx.x + 1) / gridDim.x);
    int ra = ua * 16, rb = min(ub * 16, rows);
    int ng = (ub - ua + OR / 16 - 1) / (OR / 16);
    int nch = (cols + 1023) / 1024;
    int nu = ng * nch;
    int t0 = blockIdx.y * tb, nt = min(tb, T - t0);
    q35_pdl_allow();
    q35_ring_init(full, empty, ns, 8);
    if (warp == 8) {
        // weights only: no wait for the kernel before
        if (lane != 0)
            return;
        q35_tmap_prefetch(qm);
        q35_tmap_prefetch(pm);
        // the unit's stage, chunk and group, counted rather than divided
        int st = -1, k = nch - 1, g = -1;
        uint32_t ph = 0u; // flips before the second lap's first wait
        for (int i = 0; i < nu; i++) {
            if (++st == ns)
                st = 0, ph ^= 1u;
            if (++k == nch)
                k = 0, g++;
            int r0 = ra + g * OR;
            int nbox = min(4, (cols - k * 1024 + 255) / 256);
            int live = GLU ? 2 : (r0 + 16 < rb ? 2 : 1);
            unsigned char *sg = ring + (int64_t)st * sb;
            if (i >= ns)
                q35_bar_wait(&empty[st], ph ^ 1u);
            q35_bar_expect(&full[st],
                           (uint32_t)(live * (nbox * 2048 + 16 * pp)));
            for (int u = 0; u < live; u++) {
                const q35_tmap *wm = GLU && u ? qm2 : qm;
                const q35_tmap *wp = GLU && u ? pm2 : pm;
                int r = GLU ? r0 : r0 + 16 * u;
                for (int b = 0; b < nbox; b++)
                    q35_tma2d(sg + (u * 4 + b) * 2048, wm, k * 128 + b * 32, r,
                              &full[st]);
                q35_tma2d(sg + 16384 + u * 16 * pp, wp, 2 * k * pc, r,
                          &full[st]);
            }
        }
        return;
    }
    q35_pdl_wait();
    q35_q4m_stage(x + (int64_t)t0 * ldx, ldx, nt, tb, cols, upg, nw, eps, xs,
                  sxp, sxu, bred);
    int g8 = lane >> 2, t = lane & 3;
    // this lane's B column: row t0 + g8 / 2 of x, its hi or lo half
    bool bin = (g8 >> 1) < nt;
    // its ldmatrix row and 16-byte piece within a tile's box
    int mi = lane >> 3, ro = (lane & 7) + 8 * (mi & 1);
    float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    // the unit's stage, chunk and group, counted rather than divided
    int st = -1, k = nch - 1, g = -1;
    uint32_t ph = 0u;
    for (int i = 0; i < nu; i++) {
        if (++st == ns)
            st = 0, ph ^= 1u;
        if (++k == nch)
            k = 0, g++;
        int r0 = ra + g * OR;
        int live = GLU ? 2 : (r0 + 16 < rb ? 2 : 1);
        int cw = k * 1024 + 128 * warp;
        q35_bar_wait(&full[st], ph);
        if (cw < cols) {
            const unsigned char *sg = ring + (int64_t)st * sb;
            uint32_t sa = q35_smem_addr(sg);
            // B of the warp's 4 pieces
            uint32_t bx[4][4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int P = cw / 32 + j;
                uint4 v = make_uint4(0u, 0u, 0u, 0u);
                if (bin && P < ncg)
                    v = xs[((int64_t)P * 2 * tb + g8) * 4 + t];
                bx[j][0] = v.x, bx[j][1] = v.y, bx[j][2] = v.z, bx[j][3] = v.w;
            }
#pragma unroll
            for (int u = 0; u < 2; u++) {
                if (u >= live)
                    break;
                float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                uint32_t box = sa + (u * 4 + (warp >> 1)) * 2048 + ro * 128;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    int piece = 4 * (warp & 1) + 2 * h + (mi >> 1);
                    uint32_t r4[4];
                    q35_ldsm4(box + ((piece ^ (ro & 7)) << 4), r4);
#pragma unroll
                    for (int jj = 0; jj < 2; jj++) {
                        int j = 2 * h + jj;
                        uint32_t p[4], q[4];
                        q35_q4m_bf(r4[2 * jj], p);
                        q35_q4m_bf(r4[2 * jj + 1], q);
                        uint32_t a0[4] = {p[0], q[0], p[1], q[1]};
                        uint32_t a1[4] = {p[2], q[2], p[3], q[3]};
                        q35_mma(c, a0, bx[j][0], bx[j][1]);
                        q35_mma(c, a1, bx[j][2], bx[j][3]);
                        if ((j + 1) % upg)
                            continue;
                        // the unit's end: its pieces j + 1 - upg .. j
                        int j0 = j + 1 - upg, P0 = cw / 32 + j0;
                        if (P0 < ncg) {
                            int pj = (128 * warp + 32 * j0) / gsz;
                            const float2 *pr = reinterpret_cast<const float2 *>(
                                sg + 16384 + (u * 16 + g8) * pp + pj * 8);
                            float2 e0 = pr[0], e1 = pr[pp];
                            float sx = t < nt ? sxu[t * ncg + P0] : 0.0f;
                            float d0 = __fadd_rn(c[0], c[1]);
                            float d1 = __fadd_rn(c[2], c[3]);
                            acc[u][0] = fmaf(e0.x, d0, acc[u][0]);
                            acc[u][0] =
                                fmaf(fmaf(-128.0f, e0.x, e0.y), sx, acc[u][0]);
                            acc[u][1] = fmaf(e1.x, d1, acc[u][1]);
                            acc[u][1] =
                                fmaf(fmaf(-128.0f, e1.x, e1.y), sx, acc[u][1]);
                        }
                        c[0] = c[1] = c[2] = c[3] = 0.0f;
                    }
                }
            }
        }
        __syncwarp();
        if (lane == 0)
            q35_bar_arrive(&empty[st]);
        if (k < nch - 1)
            continue;
        // the group's end: the warps' partials, then the rows in warp order
        float *rb2 = red + (g & 1) * 8 * 32 * 4 + warp * 32 * 4;
#pragma unroll
        for (int u = 0; u < 2; u++) {
            rb2[(u * 16 + g8) * 4 + t] = acc[u][0];
            rb2[(u * 16 + g8 + 8) * 4 + t] = acc[u][1];
            acc[u][0] = acc[u][1] = 0.0f;
        }
        q35_consumers_sync();
        const float *rd = red + (g & 1) * 8 * 32 * 4;
        int on = min(OR, rb - r0);
        for (int j = tid; j < on * nt; j += 256) {
            int tk = j / on, r = j % on;
            float v = rd[r * 4 + tk];
            for (int w = 1; w < 8; w++)
                v = __fadd_rn(v, rd[w * 32 * 4 + r * 4 + tk]);
            float *o = y + (int64_t)(t0 + tk) * ldy + r0 + r;
            if (GLU) {
                float v2 = rd[(16 + r) * 4 + tk];
                for (int w = 1; w < 8; w++)
                    v2 = __fadd_rn(v2, rd[w * 32 * 4 + (16 + r) * 4 + tk]);
                *o = __fmul_rn(q35_silu(v), v2);
            } else if (mode == 1) {
                *o = __fadd_rn(*o, v);
            } else {
                *o = v;
            }
        }
    }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define Q35_Q4M_SM90(...)
#else
#define Q35_Q4M_SM90(...) __VA_ARGS__
#endif

#define Q35_Q4M(name, GLU)                                                     \
    extern "C" __global__ void __launch_bounds__(288, 2)                       \
        name(const __grid_constant__ q35_tmap qm,                              \
             const __grid_constant__ q35_tmap pm,                              \
             const __grid_constant__ q35_tmap qm2,                             \
             const __grid_constant__ q35_tmap pm2, const float *x, int ldx,    \
             float *y, int ldy, int rows, int cols, int T, int gsz, int mode,  \
             const float *nw, float eps, int ns, int tb)                       \
    {                                                                          \
        Q35_Q4M_SM90(q35_q4m_body<GLU>(&qm, &pm, &qm2, &pm2, x, ldx, y, ldy,   \
                                       rows, cols, T, gsz, mode, nw, eps, ns,  \
                                       tb));                                   \
    }

Q35_Q4M(q35_q4m, false)
Q35_Q4M(q35_q4m_glu, true)
