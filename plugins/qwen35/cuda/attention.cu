// Gated full attention with partial RoPE (spec 2.3-2.4) over a stream's
// float32 K/V rows in the model's paged pool (read through its page table): the per-head preparation (zero-centred
// RMSNorm of q and k, NeoX RoPE on the first rot_dim dims, K/V written at the
// row's position) and the attention itself with its sigmoid output gate.
#include "common.cuh"

// Position pos of K (which 0) or V (1) of attention layer `slot` in the
// stream's pages.
__device__ __forceinline__ float *q35_kv_at(const q35_gpu_stream &st, int slot,
                                            int which, int pos, int kvw)
{
    const int32_t *pt = reinterpret_cast<const int32_t *>(st.ptab);
    int64_t page = pt[pos / Q35_KV_PAGE];
    int64_t blk = (page * st.n_attn + slot) * 2 + which;
    return reinterpret_cast<float *>(st.kv) +
           (blk * Q35_KV_PAGE + pos % Q35_KV_PAGE) * (int64_t)kvw;
}

// Block (head slot, row), 128 threads: slots [0, nh) are query heads (in
// place in qg, per head [q | gate]), [nh, nh + nkv) key heads (k from kb, v
// from vb, both stored in the stream's cache). Rounding: as q35_rmsnorm;
// then angle = (float)pos * inv_freq[i] and the rotation a*cos - b*sin,
// b*cos + a*sin in float32 (accurate cosf/sinf).
extern "C" __global__ void
q35_attn_prep(float *qg, const float *kb, const float *vb, const float *q_norm,
              const float *k_norm, const float *inv_freq,
              const q35_gpu_stream *streams, const q35_gpu_row *rows, int slot,
              int nh, int nkv, int hd, int rot, float eps)
{
    extern __shared__ float sm[]; // hd floats
    __shared__ float red[32];
    int hs = blockIdx.x, t = blockIdx.y;
    int pos = rows[t].pos;
    bool is_q = hs < nh;
    int kvw = nkv * hd;
    const q35_gpu_stream st = streams[rows[t].stream];
    float *src = is_q
                     ? qg + (int64_t)t * 2 * nh * hd + (int64_t)hs * 2 * hd
                     : (float *)kb + (int64_t)t * kvw + (int64_t)(hs - nh) * hd;
    const float *w = is_q ? q_norm : k_norm;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        ss = fmaf(src[i], src[i], ss);
    ss = q35_block_sum(ss, red);
    float r = 1.0f / sqrtf(ss / (float)hd + eps);
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        sm[i] = __fmul_rn(__fmul_rn(src[i], r), w[i]);
    __syncthreads();
    float *dst;
    if (is_q) {
        dst = src;
    } else {
        int kvh = hs - nh;
        dst = q35_kv_at(st, slot, 0, pos, kvw) + (int64_t)kvh * hd;
        float *vd = q35_kv_at(st, slot, 1, pos, kvw) + (int64_t)kvh * hd;
        const float *vs = vb + (int64_t)t * kvw + (int64_t)kvh * hd;
        for (int i = threadIdx.x; i < hd; i += blockDim.x)
            vd[i] = vs[i];
    }
    int half = rot / 2;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float out;
        if (i < rot) {
            int f = i < half ? i : i - half;
            float ang = __fmul_rn((float)pos, inv_freq[f]);
            float c = cosf(ang), s = sinf(ang);
            float a = sm[f], b = sm[f + half];
            out = i < half ? __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s))
                           : __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
        } else {
            out = sm[i];
        }
        dst[i] = out;
    }
}

#define Q35_ATTN_WARPS 4
#define Q35_ATTN_ND    8 // head_dim up to 256

// Block (query head, row), 4 warps: warp w takes positions w, w+4, ... of
// [0, pos] with a running max and sum (online softmax, float32, accurate
// expf), lane l the dims l, l+32, ...; the warps then merge in warp order.
// The order depends only on the row's position, never on the launch. Score
// = (q . k) * hd^-0.5, the dot as a fixed butterfly over the lanes. Output
// o = (sum_p e_p v_p) * (1 / sum_p e_p) * sigmoid(gate).
extern "C" __global__ void q35_attention(const float *qg, float *o,
                                         const q35_gpu_stream *streams,
                                         const q35_gpu_row *rows, int slot,
                                         int nh, int nkv, int hd)
{
    __shared__ float sq[Q35_ATTN_ND * 32];
    __shared__ float wm[Q35_ATTN_WARPS], wl[Q35_ATTN_WARPS];
    __shared__ float wacc[Q35_ATTN_WARPS][Q35_ATTN_ND * 32];
    int h = blockIdx.x, t = blockIdx.y;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const q35_gpu_stream st = streams[rows[t].stream];
    int n_ctx = rows[t].pos + 1;
    int kvw = nkv * hd, kvh = h / (nh / nkv);
    const float *q = qg + (int64_t)t * 2 * nh * hd + (int64_t)h * 2 * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        sq[i] = q[i];
    __syncthreads();
    float scale = 1.0f / sqrtf((float)hd);
    float m = -INFINITY, l = 0.0f, acc[Q35_ATTN_ND];
#pragma unroll
    for (int k = 0; k < Q35_ATTN_ND; k++)
        acc[k] = 0.0f;
    for (int p = warp; p < n_ctx; p += Q35_ATTN_WARPS) {
        const float *kp = q35_kv_at(st, slot, 0, p, kvw) + kvh * hd;
        float d = 0.0f;
#pragma unroll
        for (int k = 0; k < Q35_ATTN_ND; k++) {
            int i = lane + 32 * k;
            if (i < hd)
                d = fmaf(sq[i], kp[i], d);
        }
        float sc = __fmul_rn(q35_warp_sum(d), scale);
        if (sc > m) {
            float corr = expf(m - sc);
            l = __fmul_rn(l, corr);
#pragma unroll
            for (int k = 0; k < Q35_ATTN_ND; k++)
                acc[k] = __fmul_rn(acc[k], corr);
            m = sc;
        }
        float e = expf(sc - m);
        l = __fadd_rn(l, e);
        const float *vp = q35_kv_at(st, slot, 1, p, kvw) + kvh * hd;
#pragma unroll
        for (int k = 0; k < Q35_ATTN_ND; k++) {
            int i = lane + 32 * k;
            if (i < hd)
                acc[k] = fmaf(e, vp[i], acc[k]);
        }
    }
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
#pragma unroll
    for (int k = 0; k < Q35_ATTN_ND; k++) {
        int i = lane + 32 * k;
        if (i < hd)
            wacc[warp][i] = acc[k];
    }
    __syncthreads();
    float M = wm[0];
    for (int w = 1; w < Q35_ATTN_WARPS; w++)
        M = fmaxf(M, wm[w]);
    float L = 0.0f, f[Q35_ATTN_WARPS];
    for (int w = 0; w < Q35_ATTN_WARPS; w++) {
        f[w] = wl[w] > 0.0f ? expf(wm[w] - M) : 0.0f;
        L = fmaf(wl[w], f[w], L);
    }
    float inv = 1.0f / L;
    float *orow = o + (int64_t)t * nh * hd + (int64_t)h * hd;
    const float *gate = q + hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float s = 0.0f;
        for (int w = 0; w < Q35_ATTN_WARPS; w++)
            s = fmaf(wacc[w][i], f[w], s);
        orow[i] = __fmul_rn(__fmul_rn(s, inv), q35_sigmoid(gate[i]));
    }
}
