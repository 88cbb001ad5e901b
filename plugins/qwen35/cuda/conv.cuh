// The step of the GDN layers' causal depthwise conv1d that both its own
// kernel (conv1d.cu) and the one-row input product's epilogue
// (gemv_stream.cu) take, so the two give the same bits.
#ifndef QWEN35_CUDA_CONV_CUH
#define QWEN35_CUDA_CONV_CUH

#include "common.cuh"

#define Q35_MAX_TAIL 7 // kernel widths up to 8

// One row of one channel: silu(sum_j w[j] * in[j]) over the tail t (oldest
// first) and the row's input xv, taps oldest first; then xv joins the tail.
__device__ __forceinline__ float q35_conv_step(const float *wc, float *t,
                                               int kt, float xv)
{
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < Q35_MAX_TAIL; j++)
        if (j < kt)
            s = fmaf(wc[j], t[j], s);
    // the last tap by a fixed index, so that wc may be registers
    float wl = 0.0f;
#pragma unroll
    for (int j = 0; j <= Q35_MAX_TAIL; j++)
        if (j == kt)
            wl = wc[j];
    s = fmaf(wl, xv, s);
#pragma unroll
    for (int j = 0; j + 1 < Q35_MAX_TAIL; j++)
        if (j + 1 < kt)
            t[j] = t[j + 1];
    if (kt > 0) {
#pragma unroll
        for (int j = 0; j < Q35_MAX_TAIL; j++)
            if (j == kt - 1)
                t[j] = xv;
    }
    return q35_silu(s);
}

// A slot's tail in a conv buffer (float [n_lin][(K-1) * cd], oldest first).
__device__ __forceinline__ float *q35_conv_tail(uint64_t buf, int slot, int kt,
                                                int cd)
{
    return reinterpret_cast<float *>(buf) + (int64_t)slot * kt * cd;
}

// Channel c of a tail into registers t (zeros past kt), and back.
__device__ __forceinline__ void q35_tail_get(float *t, const float *tail,
                                             int kt, int cd, int64_t c)
{
#pragma unroll
    for (int j = 0; j < Q35_MAX_TAIL; j++)
        t[j] = j < kt ? tail[(int64_t)j * cd + c] : 0.0f;
}
__device__ __forceinline__ void q35_tail_put(const float *t, float *tail,
                                             int kt, int cd, int64_t c)
{
#pragma unroll
    for (int j = 0; j < Q35_MAX_TAIL; j++)
        if (j < kt)
            tail[(int64_t)j * cd + c] = t[j];
}

// Row k of stream st (round row `row`), channel c, as every conv of decode
// rows takes it: the tail t into the stream's snapshot first when k is its
// snapshot row, the input xv into the log when the row logs, then the step.
__device__ __forceinline__ float
q35_conv_row(const float *wc, float *t, int kt, float xv,
             const q35_gpu_stream &st, const q35_gpu_row *rows, int row, int k,
             int slot, int cd, int64_t c, int n_lin, int log_size,
             int log_conv)
{
    if (k == st.snap_row)
        q35_tail_put(t, q35_conv_tail(st.snap_conv, slot, kt, cd), kt, cd, c);
    int li = rows[row].log;
    if (li >= 0) {
        float *log = reinterpret_cast<float *>(st.log) +
                     ((int64_t)li * n_lin + slot) * log_size;
        log[log_conv + c] = xv;
    }
    return q35_conv_step(wc, t, kt, xv);
}

#endif
