// The one-row product y = W x for BF16 and F16 weights (rows a multiple of
// 8 long), the weights streamed through shared memory by bulk copies
// (cp.async.bulk, sm_90): a producer warp keeps a ring of slabs in flight
// for the block's 8 consumer warps, so each SM has tens of kilobytes of
// weights on the way without a register holding them. Each block takes an
// equal run of output rows. A row is summed in the order of q35_gemv_body
// for the same wpr (warps per row, from the weight's shape alone): each
// lane's 256-column chunks of its part in order, the 8 of a chunk in order,
// the butterfly, the parts in part order. So a one-row step and the rows of
// a window (q35_gemv8) give the same bits.
#include "bulk.cuh"
#include "common.cuh"

// A slab: 8 chunks of 256 columns of a group of rows, one stage of the ring.
#define Q35_SLAB Q35_GEMVS_SLAB

// The unit of group g of RPW rows (of w, then of w2 for GLU) and slab s:
// thread 0 loads it into its stage.
template <typename W, int RPW, bool GLU>
__device__ __forceinline__ void
q35_slab_issue(const W *w, const W *w2, int64_t ra, int64_t rb, int cols, int g,
               int s, W *stage, uint64_t *bar)
{
    int64_t r0 = ra + (int64_t)g * RPW;
    int live = (int)min((int64_t)RPW, rb - r0);
    int c0 = s * Q35_SLAB;
    int n = min(Q35_SLAB, cols - c0);
    uint32_t bytes = (uint32_t)n * (uint32_t)sizeof(W);
    q35_bar_expect(bar, bytes * (uint32_t)live * (GLU ? 2u : 1u));
    for (int j = 0; j < live; j++) {
        int64_t off = (r0 + j) * cols + c0;
        q35_bulk_load(stage + (int64_t)j * Q35_SLAB, w + off, bytes, bar);
        if (GLU)
            q35_bulk_load(stage + (int64_t)(RPW + j) * Q35_SLAB, w2 + off,
                          bytes, bar);
    }
}

// Block of 288 threads: warps 0..7 consume, warp 8 produces. A stage holds S
// = RPW rows (SwiGLU: RPW of w, then RPW of w2) by Q35_SLAB columns; ns of
// them (at most NS) lie in dynamic shared memory, then the row's cols
// activations. In a slab, consumer warp w takes part w % WPR (the slab's
// chunks p, p + WPR, ...) of the stage rows w / WPR, w / WPR + 8 / WPR, ...
// With nw, x is the residual stream and the RMSNorm is applied as
// q35_gemv_body applies it (q35_stage_row, q35_norm_rs).
//
// The GDN input product's conv runs in its own kernel after it (q35_conv):
// in this kernel's epilogue (removed, 2026-12-04) a one-row step read 222.1-
// 223.7 tok/s on 9B against 224.8-225.6, 2B 679.8-694.8 against 701.6-709.8.
template <typename W, int RPW, bool GLU, int NS, int WPR>
__device__ __forceinline__ void
q35_gemvs_body(const W *w, const W *w2, const float *x, int ldx, float *y,
               int ldy, int rows, int cols, int mode, const float *nw,
               float eps, int ns)
{
    constexpr int S = GLU ? 2 * RPW : RPW;
    constexpr int G = 8 / WPR; // rows a slab's chunks serve at once
    constexpr int M = S / G;   // stage rows per warp
    constexpr int K = 8 / WPR; // chunks per warp and row in a slab
    extern __shared__ __align__(128) unsigned char q35_dyn[];
    W *ring = reinterpret_cast<W *>(q35_dyn);
    // the activations: every slab reads them, and a load from L2 on each
    // slab's path would stall the ring
    float *xs = reinterpret_cast<float *>(ring + (int64_t)ns * S * Q35_SLAB);
    __shared__ __align__(8) uint64_t full[NS], empty[NS];
    // double: a group's part sums are read while the next group's are
    // written
    __shared__ float red[2][S][WPR];
    __shared__ float bred[8];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t ra = (int64_t)rows * blockIdx.x / gridDim.x;
    int64_t rb = (int64_t)rows * (blockIdx.x + 1) / gridDim.x;
    int nsl = (cols + Q35_SLAB - 1) / Q35_SLAB;
    int ng = (int)((rb - ra + RPW - 1) / RPW);
    int nu = ng * nsl;
    int t = blockIdx.y;
    q35_pdl_allow();
    q35_ring_init(full, empty, ns, 8);
    if (warp == 8) {
        // the producer reads weights only, never a forward's writes, so it
        // does not wait for the kernel before
        if (lane == 0) {
            int st = 0, s = 0, g = 0;
            uint32_t ph = 1u; // the first lap's stages are free
            for (int i = 0; i < nu; i++) {
                if (i >= ns)
                    q35_bar_wait(&empty[st], ph);
                q35_slab_issue<W, RPW, GLU>(w, w2, ra, rb, cols, g, s,
                                            ring + (int64_t)st * S * Q35_SLAB,
                                            &full[st]);
                if (++st == ns)
                    st = 0, ph ^= 1u;
                if (++s == nsl)
                    s = 0, g++;
            }
        }
        return;
    }
    q35_pdl_wait();
    q35_stage_row(x + (int64_t)t * ldx, xs, cols, nw, eps, bred, q35_flat());
    int part = warp % WPR, row0 = warp / WPR;
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; m++)
        acc[m] = 0.0f;
    // the unit's stage, slab and group, counted rather than divided
    int st = 0, s = 0, g = 0;
    uint32_t ph = 0;
    for (int i = 0; i < nu; i++) {
        int64_t r0 = ra + (int64_t)g * RPW;
        int live = (int)min((int64_t)RPW, rb - r0);
        q35_bar_wait(&full[st], ph);
        const W *sg = ring + (int64_t)st * S * Q35_SLAB;
#pragma unroll
        for (int k = 0; k < K; k++) {
            int cs = (part + k * WPR) * 256 + lane * 8;
            int c = s * Q35_SLAB + cs;
            if (c < cols) {
                float4 a = *reinterpret_cast<const float4 *>(xs + c);
                float4 b = *reinterpret_cast<const float4 *>(xs + c + 4);
                float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
                auto row = [&](int m) {
                    int j = row0 + m * G;
                    float wv[8];
                    q35_cvt8(*reinterpret_cast<const uint4 *>(
                                 sg + (int64_t)j * Q35_SLAB + cs),
                             sg, wv);
#pragma unroll
                    for (int e = 0; e < 8; e++)
                        acc[m] = fmaf(wv[e], xv[e], acc[m]);
                };
                q35_rows_live<M, G, RPW, GLU>(row0, live, row);
            }
        }
        __syncwarp();
        if (lane == 0)
            q35_bar_arrive(&empty[st]);
        // the group's last slab: each row's parts in order
        float yv;
        if (s == nsl - 1)
            q35_ring_rows<M, G, WPR, RPW, GLU>(acc, red[g & 1], row0, part,
                                               live, y + (int64_t)t * ldy + r0,
                                               mode, &yv);
        if (++st == ns)
            st = 0, ph ^= 1u;
        if (++s == nsl)
            s = 0, g++;
    }
}

// Bulk copies and transaction barriers are sm_90's; the host launches these
// kernels only there, and older targets compile them empty.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define Q35_GEMVS_SM90(...)
#else
#define Q35_GEMVS_SM90(...) __VA_ARGS__
#endif

#define Q35_GEMVS(name, W, RPW, GLU, WPR)                                      \
    extern "C" __global__ void __launch_bounds__(288) name(                    \
        const W *w, const W *w2, const float *x, int ldx, float *y, int ldy,   \
        int rows, int cols, int mode, const float *nw, float eps, int ns)      \
    {                                                                          \
        Q35_GEMVS_SM90(q35_gemvs_body<W, RPW, GLU, Q35_GEMVS_NS, WPR>(         \
            w, w2, x, ldx, y, ldy, rows, cols, mode, nw, eps, ns));            \
    }
#define Q35_GEMVS_ALL(W, tag)                                                  \
    Q35_GEMVS(q35_gemvs1_##tag, W, Q35_GEMVS_RPW, false, 1)                    \
    Q35_GEMVS(q35_gemvs2_##tag, W, Q35_GEMVS_RPW, false, 2)                    \
    Q35_GEMVS(q35_gemvs4_##tag, W, Q35_GEMVS_RPW, false, 4)                    \
    Q35_GEMVS(q35_gemvs8_##tag, W, Q35_GEMVS_RPW, false, 8)                    \
    Q35_GEMVS(q35_gemvs1_glu_##tag, W, Q35_GEMVS_RPW / 2, true, 1)             \
    Q35_GEMVS(q35_gemvs2_glu_##tag, W, Q35_GEMVS_RPW / 2, true, 2)             \
    Q35_GEMVS(q35_gemvs4_glu_##tag, W, Q35_GEMVS_RPW / 2, true, 4)             \
    Q35_GEMVS(q35_gemvs8_glu_##tag, W, Q35_GEMVS_RPW / 2, true, 8)

Q35_GEMVS_ALL(uint16_t, bf16)
Q35_GEMVS_ALL(__half, f16)
