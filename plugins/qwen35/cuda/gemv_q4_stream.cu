// The one-row product y = W x for MLX affine 4-bit weights (the device
// layout of gpu_kernels.h), the words and group pairs streamed through
// shared memory by tensor-map boxes: a producer warp keeps a ring of stages
// (one 1024-column chunk of 32 rows each) in flight for 8 consumer warps,
// each block an equal run of whole 8-row boxes. Each lane takes its 32
// columns of a chunk for 4 to 32 rows, so one read of the activations
// serves several rows. A row is summed as q35_q4_body sums it for the same
// wpr (each lane's chunks of its part in column order through
// q35_q4_chunk, the butterfly, the parts in part order), and the norm is
// q35_gemv_body's: a one-row step and the rows of a window give the same
// bits.
#include "affine4.cuh"
#include "bulk.cuh"
#include "common.cuh"
#include "conv.cuh"

#define Q35_Q4S_NBOX (Q35_Q4S_ROWS / Q35_Q4S_BOX)

// The unit of row group g (Q35_Q4S_ROWS rows, SwiGLU half of w then half
// of w2) and chunk k: thread 0 loads its live boxes of words (8 rows of 512
// bytes) then of pairs into its stage.
template <bool GLU>
__device__ __forceinline__ void
q35_q4s_issue(const q35_tmap *qm, const q35_tmap *pm, const q35_tmap *qm2,
              const q35_tmap *pm2, int64_t ra, int64_t rb, int pc, int g, int k,
              unsigned char *stage, uint64_t *bar)
{
    constexpr int RPW = GLU ? Q35_Q4S_ROWS / 2 : Q35_Q4S_ROWS;
    int r0 = (int)(ra + (int64_t)g * RPW);
    int live = (int)min((int64_t)RPW, rb - r0);
    int nb = (live + Q35_Q4S_BOX - 1) / Q35_Q4S_BOX;
    uint32_t pbox = (uint32_t)(Q35_Q4S_BOX * pc * 8);
    unsigned char *ps = stage + Q35_Q4S_ROWS * 512;
    q35_bar_expect(bar, (4096u + pbox) * (uint32_t)nb * (GLU ? 2u : 1u));
    for (int b = 0; b < nb; b++) {
        int r = r0 + b * Q35_Q4S_BOX;
        q35_tma2d(stage + b * 4096, qm, k * 128, r, bar);
        q35_tma2d(ps + b * pbox, pm, k * pc, r, bar);
        if (GLU) {
            constexpr int H = Q35_Q4S_NBOX / 2;
            q35_tma2d(stage + (H + b) * 4096, qm2, k * 128, r, bar);
            q35_tma2d(ps + (H + b) * pbox, pm2, k * pc, r, bar);
        }
    }
}

// Block of 288 threads: warps 0..7 consume, warp 8 produces. A stage holds
// S = Q35_Q4S_ROWS rows of one chunk (SwiGLU: RPW of w, then RPW of w2):
// their words (512 bytes a row), then their pairs; ns stages, then the
// row's activations (each 32-column chunk rotated, q35_swz32) and the
// chunks' sums. Chunk k is part k % WPR's: consumer warp w takes it when w
// % WPR is that part, for the stage rows w / WPR, w / WPR + 8 / WPR, ...
// CONV (a one-row step's merged GDN input product, mode 0): thread j of a
// group also runs the conv of its row (q35_conv_epilogue).
template <bool GLU, int NS, int WPR, bool CONV = false>
__device__ __forceinline__ void
q35_q4s_body(const q35_tmap *qm, const q35_tmap *pm, const q35_tmap *qm2,
             const q35_tmap *pm2, const float *x, float *y, int rows, int cols,
             int gsz, int mode, const float *nw, float eps, int ns,
             q35_conv_epi cv = q35_conv_epi())
{
    constexpr int S = Q35_Q4S_ROWS;
    constexpr int RPW = GLU ? S / 2 : S;
    constexpr int G = 8 / WPR; // warps of a part
    constexpr int M = S / G;   // stage rows per warp
    extern __shared__ __align__(128) unsigned char q35_dyn[];
    int sb = q35_q4s_stage(gsz), pc = 1024 / gsz;
    float *xs = reinterpret_cast<float *>(q35_dyn + (int64_t)ns * sb);
    float *sx = xs + cols;
    __shared__ __align__(8) uint64_t full[NS], empty[NS];
    __shared__ float red[2][S][WPR];
    __shared__ float bred[8];
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    // whole boxes per block: 8-row units split evenly
    int64_t units = (rows + Q35_Q4S_BOX - 1) / Q35_Q4S_BOX;
    int64_t ra = units * blockIdx.x / gridDim.x * Q35_Q4S_BOX;
    int64_t rb =
        min((int64_t)rows, units * (blockIdx.x + 1) / gridDim.x * Q35_Q4S_BOX);
    int nch = (cols + 1023) / 1024;
    int ng = (int)((rb - ra + RPW - 1) / RPW);
    int nu = ng * nch;
    q35_pdl_allow();
    q35_ring_init(full, empty, ns, 8);
    if (warp == 8) {
        // weights only: no wait for the kernel before
        if (lane == 0) {
            q35_tmap_prefetch(qm);
            q35_tmap_prefetch(pm);
            int st = 0, k = 0, g = 0;
            uint32_t ph = 1u; // the first lap's stages are free
            for (int i = 0; i < nu; i++) {
                if (i >= ns)
                    q35_bar_wait(&empty[st], ph);
                q35_q4s_issue<GLU>(qm, pm, qm2, pm2, ra, rb, pc, g, k,
                                   q35_dyn + (int64_t)st * sb, &full[st]);
                if (++st == ns)
                    st = 0, ph ^= 1u;
                if (++k == nch)
                    k = 0, g++;
            }
        }
        return;
    }
    q35_pdl_wait();
    q35_conv_epilogue ce;
    float ct[Q35_MAX_TAIL], cw[Q35_MAX_TAIL + 1];
    if (CONV && tid < RPW)
        ce.open(cv, rb, ra + tid, RPW, ct, cw);
    q35_stage_row(x, xs, cols, nw, eps, bred, q35_swz32());
    // each chunk's sum in column order, as q35_q4_xsum8 takes it
    for (int L = tid; L < cols / 32; L += 256) {
        float v = 0.0f;
#pragma unroll
        for (int f = 0; f < 8; f++) {
            float4 a = *reinterpret_cast<const float4 *>(xs + L * 32 +
                                                         ((f ^ (L & 7)) << 2));
            v = f == 0 ? a.x : __fadd_rn(v, a.x);
            v = __fadd_rn(__fadd_rn(__fadd_rn(v, a.y), a.z), a.w);
        }
        sx[L] = v;
    }
    q35_consumers_sync();
    int part = warp % WPR, row0 = warp / WPR;
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; m++)
        acc[m] = 0.0f;
    // Per lane and loop-invariant: chunk k's columns lane * 32 .. are
    // 32-column piece L = 32 k + lane, so its rotation is lane % 8's; and
    // its group's pair.
    int xo[8];
#pragma unroll
    for (int f = 0; f < 8; f++)
        xo[f] = lane * 32 + ((f ^ (lane & 7)) << 2);
    int po = S * 512 + lane * 32 / gsz * 8;
    // the unit's stage, chunk and group, counted rather than divided
    int st = 0, k = 0, g = 0;
    uint32_t ph = 0;
    for (int i = 0; i < nu; i++) {
        int64_t r0 = ra + (int64_t)g * RPW;
        int live = (int)min((int64_t)RPW, rb - r0);
        int c = k * 1024 + lane * 32;
        q35_bar_wait(&full[st], ph);
        if (k % WPR == part && c < cols) {
            const unsigned char *sg = q35_dyn + (int64_t)st * sb;
            const float *xc = xs + k * 1024;
            float xv[32];
#pragma unroll
            for (int f = 0; f < 8; f++) {
                float4 a = *reinterpret_cast<const float4 *>(xc + xo[f]);
                xv[4 * f] = a.x, xv[4 * f + 1] = a.y;
                xv[4 * f + 2] = a.z, xv[4 * f + 3] = a.w;
            }
            float sxv = sx[(c >> 5)];
            auto row = [&](int m) {
                int j = row0 + m * G;
                uint4 u =
                    *reinterpret_cast<const uint4 *>(sg + j * 512 + lane * 16);
                float2 pr =
                    *reinterpret_cast<const float2 *>(sg + po + j * pc * 8);
                acc[m] = q35_q4_chunk(u, pr, xv, sxv, acc[m]);
            };
            q35_rows_live<M, G, RPW, GLU>(row0, live, row);
        }
        __syncwarp();
        if (lane == 0)
            q35_bar_arrive(&empty[st]);
        // the group's last chunk: each row's parts in order, then (CONV)
        // the row's conv
        float yv;
        if (k == nch - 1 &&
            q35_ring_rows<M, G, WPR, RPW, GLU>(acc, red[g & 1], row0, part,
                                               live, y + r0, mode, &yv) &&
            CONV)
            ce.run(r0 + threadIdx.x, yv, ct, cw);
        if (++st == ns)
            st = 0, ph ^= 1u;
        if (++k == nch)
            k = 0, g++;
    }
    if (CONV && tid == 0)
        ce.prefetch_state();
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define Q35_Q4S_SM90(...)
#else
#define Q35_Q4S_SM90(...) __VA_ARGS__
#endif

// Every form takes the conv epilogue's arguments; those without CONV leave
// them unread.
#define Q35_Q4S(name, GLU, WPR, CONV)                                          \
    extern "C" __global__ void __launch_bounds__(288)                          \
        name(const __grid_constant__ q35_tmap qm,                              \
             const __grid_constant__ q35_tmap pm,                              \
             const __grid_constant__ q35_tmap qm2,                             \
             const __grid_constant__ q35_tmap pm2, const float *x, float *y,   \
             int rows, int cols, int gsz, int mode, const float *nw,           \
             float eps, int ns, q35_conv_epi cv)                               \
    {                                                                          \
        Q35_Q4S_SM90(q35_q4s_body<GLU, Q35_Q4S_NS, WPR, CONV>(                 \
            &qm, &pm, &qm2, &pm2, x, y, rows, cols, gsz, mode, nw, eps, ns,    \
            cv));                                                              \
    }

Q35_Q4S(q35_q4s1, false, 1, false)
Q35_Q4S(q35_q4s2, false, 2, false)
Q35_Q4S(q35_q4s4, false, 4, false)
Q35_Q4S(q35_q4s8, false, 8, false)
Q35_Q4S(q35_q4s1_glu, true, 1, false)
Q35_Q4S(q35_q4s2_glu, true, 2, false)
Q35_Q4S(q35_q4s4_glu, true, 4, false)
Q35_Q4S(q35_q4s8_glu, true, 8, false)
Q35_Q4S(q35_q4s1_conv, false, 1, true)
Q35_Q4S(q35_q4s2_conv, false, 2, true)
Q35_Q4S(q35_q4s4_conv, false, 4, true)
Q35_Q4S(q35_q4s8_conv, false, 8, true)
