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

#endif
