// The causal depthwise conv1d of the Gated DeltaNet layers (K taps, no
// bias, SiLU after; input rows ldx apart), one thread per channel, each stream's rows in order
// over its conv tail (the last K-1 pre-activation inputs, oldest first).
// Rounding: s = sum_j w[j] * in[j] in float32, taps oldest first, as the CPU
// path; the tail is copied, never rounded.
#include "common.cuh"
#include "conv.cuh"

extern "C" __global__ void q35_conv(const float *x, float *y, const float *w,
                                    const q35_gpu_stream *streams,
                                    const q35_gpu_row *rows, int slot, int cd,
                                    int K, int n_lin, int log_size,
                                    int log_conv, int ldx)
{
    Q35_PDL_ENTER();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cd)
        return;
    const q35_gpu_stream st = streams[blockIdx.y];
    if (st.chunk & 1)
        return; // q35_conv_chunk's
    int kt = K - 1;
    float *tail = q35_conv_tail(st.conv, slot, kt, cd);
    const float *wc = w + (int64_t)c * K;
    float t[Q35_MAX_TAIL];
    q35_tail_get(t, tail, kt, cd, c);
    for (int k = 0; k < st.count; k++) {
        int row = st.first + k;
        float xv = x[(int64_t)row * ldx + c];
        y[(int64_t)row * cd + c] =
            q35_conv_row(wc, t, kt, xv, st, rows, row, k, slot, cd, c, n_lin,
                         log_size, log_conv);
    }
    q35_tail_put(t, tail, kt, cd, c);
}

// commit(kept) on one cache: every GDN layer's tail becomes the last K-1 of
// (the snapshot's tail, then the first `kept` logged inputs). Grid
// (channels / block, n_lin).
extern "C" __global__ void q35_conv_restore(float *conv, const float *snap,
                                            const float *log, int kept, int cd,
                                            int K, int n_lin, int log_size,
                                            int log_conv)
{
    Q35_PDL_ENTER();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int l = blockIdx.y;
    if (c >= cd)
        return;
    int kt = K - 1;
    int64_t tail_n = (int64_t)kt * cd;
    for (int j = 0; j < kt; j++) {
        int idx = kept + j; // in the sequence snapshot[0..kt) ++ log[0..kept)
        float v = idx < kt ? snap[l * tail_n + (int64_t)idx * cd + c]
                           : log[((int64_t)(idx - kt) * n_lin + l) * log_size +
                                 log_conv + c];
        conv[l * tail_n + (int64_t)j * cd + c] = v;
    }
}

// Channel c of q35_conv_chunk.
__device__ __forceinline__ void
q35_conv_chunk_body(const float *x, float *y, const float *w,
                    const q35_gpu_stream &st, int slot, int cd, int K, int ldx,
                    int seg, int c)
{
    int kt = K - 1;
    float *tail = q35_conv_tail(st.conv, slot, kt, cd);
    const float *wc = w + (int64_t)c * K;
    int r0 = blockIdx.y * seg, r1 = min(st.count, r0 + seg);
    float t[Q35_MAX_TAIL];
#pragma unroll
    for (int j = 0; j < Q35_MAX_TAIL; j++) {
        int at = r0 - kt + j; // the chunk's row, negative: in the tail
        t[j] = j >= kt    ? 0.0f
               : at >= 0 ? x[(int64_t)(st.first + at) * ldx + c]
                         : tail[(int64_t)(kt + at) * cd + c];
    }
    if (blockIdx.y == 0)
        for (int j = 0; j < kt; j++)
            tail[(int64_t)j * cd + c] =
                x[(int64_t)(st.first + st.count - kt + j) * ldx + c];
    // 8 rows' inputs in flight at once (each a round trip to L2), then
    // their outputs in order
    for (int k0 = r0; k0 < r1; k0 += 8) {
        float xv[8];
#pragma unroll
        for (int u = 0; u < 8; u++)
            xv[u] = k0 + u < r1 ? x[(int64_t)(st.first + k0 + u) * ldx + c]
                                : 0.0f;
#pragma unroll
        for (int u = 0; u < 8; u++)
            if (k0 + u < r1)
                y[(int64_t)(st.first + k0 + u) * cd + c] =
                    q35_conv_step(wc, t, kt, xv[u]);
    }
}

// The conv over one prompt chunk (no speculative row: no log, no
// snapshot), its rows in segments of `seg` (at least K - 1) in parallel:
// block (channels / 128, segment). A segment starts from the inputs before
// it (the tail for the first), so every output is the sequential kernel's
// to the bit. The first segment's block, having read the old tail, writes
// the new one: the chunk's last K - 1 inputs (it has at least that many).
extern "C" __global__ void q35_conv_chunk(const float *x, float *y,
                                          const float *w,
                                          const q35_gpu_stream *streams,
                                          int si, int slot, int cd, int K,
                                          int ldx, int seg)
{
    Q35_PDL_ENTER();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < cd)
        q35_conv_chunk_body(x, y, w, streams[si], slot, cd, K, ldx, seg, c);
}
