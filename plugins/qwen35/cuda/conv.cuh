// The step of the GDN layers' causal depthwise conv1d that its own kernel
// (conv1d.cu), the affine-4 one-row input product's epilogue
// (gemv_q4_stream.cu) and the recurrence's conv forms (q35_gdn_rec4cv*,
// gdn.cu) take, so that all give the same bits.
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

// Row k of a stream, channel c, as every conv of decode rows takes it: the
// tail t into the stream's snapshot (snap_conv) first when k is its
// snapshot row, the input xv into its log when the row logs (li, its
// rows[].log, >= 0), then the step.
__device__ __forceinline__ float
q35_conv_row_at(const float *wc, float *t, int kt, float xv, int snap_row,
                uint64_t snap_conv, uint64_t log_buf, int li, int k, int slot,
                int cd, int64_t c, int n_lin, int log_size, int log_conv)
{
    if (k == snap_row)
        q35_tail_put(t, q35_conv_tail(snap_conv, slot, kt, cd), kt, cd, c);
    if (li >= 0) {
        float *log = reinterpret_cast<float *>(log_buf) +
                     ((int64_t)li * n_lin + slot) * log_size;
        log[log_conv + c] = xv;
    }
    return q35_conv_step(wc, t, kt, xv);
}

// ... for stream st's round row `row` of the row table.
__device__ __forceinline__ float
q35_conv_row(const float *wc, float *t, int kt, float xv,
             const q35_gpu_stream &st, const q35_gpu_row *rows, int row, int k,
             int slot, int cd, int64_t c, int n_lin, int log_size, int log_conv)
{
    return q35_conv_row_at(wc, t, kt, xv, st.snap_row, st.snap_conv, st.log,
                           rows[row].log, k, slot, cd, c, n_lin, log_size,
                           log_conv);
}

// The conv of a one-row step in the epilogue of its merged GDN input
// product (q35_q4s): the thread of row r < cd of a group runs
// it as q35_conv does (the snapshot, the log, the step, the tail), its
// tail and taps loaded a group (`step` rows) ahead, so no load waits at
// the group's end.
struct q35_conv_epilogue {
    // scalars only, so that the object lives in registers
    const float *w;
    float *out, *tail;
    uint64_t snap_conv, log, state;
    int64_t state_bytes;
    int kt, K, cend, li, step, first, snap_row;
    int slot, cd, n_lin, log_size, log_conv;

    // The block's rows end at rb; this thread's first row is r.
    __device__ __forceinline__ void open(const q35_conv_epi &c, int64_t rb,
                                         int64_t r, int rows_apart, float *ct,
                                         float *cw)
    {
        const q35_gpu_stream *sp =
            reinterpret_cast<const q35_gpu_stream *>(c.streams);
        w = reinterpret_cast<const float *>(c.w);
        out = reinterpret_cast<float *>(c.out);
        step = rows_apart;
        K = c.K;
        kt = c.K - 1;
        cd = c.cd;
        slot = c.slot;
        n_lin = c.n_lin;
        log_size = c.log_size;
        log_conv = c.log_conv;
        state_bytes = c.state_bytes;
        cend = (int)min(rb, (int64_t)c.cd);
        first = sp->first;
        snap_row = sp->snap_row;
        snap_conv = sp->snap_conv;
        log = sp->log;
        state = sp->state;
        // the row's log index once: a load at each group's end would hold
        // the warp, and with it the ring, for a round trip to L2
        li = reinterpret_cast<const q35_gpu_row *>(c.rows)[first].log;
        tail = q35_conv_tail(sp->conv, slot, kt, cd);
        load(r, ct, cw);
    }
    __device__ __forceinline__ void load(int64_t r, float *ct, float *cw)
    {
        if (r >= cend)
            return;
        q35_tail_get(ct, tail, kt, cd, r);
#pragma unroll
        for (int j = 0; j <= Q35_MAX_TAIL; j++)
            cw[j] = j <= kt ? w[r * K + j] : 0.0f;
    }
    // Row r's product output xv through the conv, then the next group's
    // loads.
    __device__ __forceinline__ void run(int64_t r, float xv, float *ct,
                                        float *cw)
    {
        if (r >= cend)
            return;
        out[(int64_t)first * cd + r] =
            q35_conv_row_at(cw, ct, kt, xv, snap_row, snap_conv, log, li, 0,
                            slot, cd, r, n_lin, log_size, log_conv);
        q35_tail_put(ct, tail, kt, cd, r);
        load(r + step, ct, cw);
    }
    // This block's share of the layer's recurrent state on its way to L2
    // for the recurrence next (one thread that opened).
    __device__ __forceinline__ void prefetch_state() const
    {
        if (state_bytes % 16)
            return;
        int64_t n16 = state_bytes / 16;
        int64_t a = n16 * blockIdx.x / gridDim.x;
        int64_t b = n16 * (blockIdx.x + 1) / gridDim.x;
        const char *base =
            reinterpret_cast<const char *>(state) + (int64_t)slot * state_bytes;
        if (b > a)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(
                             base + a * 16),
                         "r"((uint32_t)((b - a) * 16))
                         : "memory");
    }
};

#endif
