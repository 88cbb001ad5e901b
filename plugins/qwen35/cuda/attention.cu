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
// place in qg, rows ldq apart, per head [q | gate]), [nh, nh + nkv) key
// heads (k from kb, v from vb, rows ldkv apart, both stored in the stream's
// cache). Rounding: as q35_rmsnorm;
// then angle = (float)pos * inv_freq[i] and the rotation a*cos - b*sin,
// b*cos + a*sin in float32 (accurate cosf/sinf).
extern "C" __global__ void
q35_attn_prep(float *qg, const float *kb, const float *vb, int ldq, int ldkv,
              const float *q_norm, const float *k_norm, const float *inv_freq,
              const q35_gpu_stream *streams, const q35_gpu_row *rows, int slot,
              int nh, int nkv, int hd, int rot, float eps)
{
    Q35_PDL_ENTER();
    extern __shared__ float sm[]; // hd floats
    __shared__ float red[32];
    int hs = blockIdx.x, t = blockIdx.y;
    int pos = rows[t].pos;
    bool is_q = hs < nh;
    int kvw = nkv * hd;
    const q35_gpu_stream st = streams[rows[t].stream];
    float *src = is_q
                     ? qg + (int64_t)t * ldq + (int64_t)hs * 2 * hd
                     : (float *)kb + (int64_t)t * ldkv + (int64_t)(hs - nh) * hd;
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
        const float *vs = vb + (int64_t)t * ldkv + (int64_t)kvh * hd;
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

// Positions per split of a row with n_ctx keys when a launch has `splits`
// of them: at least Q35_ATTN_CHUNK, a multiple of it, and few enough that
// the row fits the splits. It depends only on the row's position and the
// model, never on what else the launch carries.
__device__ __forceinline__ int q35_attn_chunk(int n_ctx, int splits)
{
    int per = (n_ctx + splits - 1) / splits;
    return (per + Q35_ATTN_CHUNK - 1) / Q35_ATTN_CHUNK * Q35_ATTN_CHUNK;
}

// Attention split over keys (flash decoding). Block (split * nh + query
// head, row), 4 warps: warp w takes positions w, w+4, ... of the split's range
// with a running max and sum (online softmax, float32, accurate expf), lane
// l the dims l, l+32, ...; the warps then merge in warp order into the
// split's (max, sum, unnormalised output) in `part`. Score = (q . k) *
// hd^-0.5, the dot as a fixed butterfly over the lanes.
extern "C" __global__ void q35_attention(const float *qg, int ldq, float *part,
                                         const q35_gpu_stream *streams,
                                         const q35_gpu_row *rows, int slot,
                                         int nh, int nkv, int hd, int splits)
{
    Q35_PDL_ENTER();
    __shared__ float sq[Q35_ATTN_ND * 32];
    __shared__ float wm[Q35_ATTN_WARPS], wl[Q35_ATTN_WARPS];
    __shared__ float wacc[Q35_ATTN_WARPS][Q35_ATTN_ND * 32];
    int h = blockIdx.x % nh, t = blockIdx.y, sp = blockIdx.x / nh;
    if (streams[rows[t].stream].chunk & 2)
        return; // q35_attn_chunk's
    int n_ctx = rows[t].pos + 1;
    int chunk = q35_attn_chunk(n_ctx, splits);
    int p0 = sp * chunk;
    if (p0 >= n_ctx)
        return; // a split this row does not use
    int p1 = min(n_ctx, p0 + chunk);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const q35_gpu_stream st = streams[rows[t].stream];
    int kvw = nkv * hd, kvh = h / (nh / nkv);
    const float *q = qg + (int64_t)t * ldq + (int64_t)h * 2 * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        sq[i] = q[i];
    __syncthreads();
    float scale = 1.0f / sqrtf((float)hd);
    float m = -INFINITY, l = 0.0f, acc[Q35_ATTN_ND];
#pragma unroll
    for (int k = 0; k < Q35_ATTN_ND; k++)
        acc[k] = 0.0f;
    for (int p = p0 + warp; p < p1; p += Q35_ATTN_WARPS) {
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
    float *out = part + (((int64_t)t * nh + h) * splits + sp) * (hd + 2);
    if (threadIdx.x == 0) {
        out[0] = M;
        out[1] = L;
    }
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float s = 0.0f;
        for (int w = 0; w < Q35_ATTN_WARPS; w++)
            s = fmaf(wacc[w][i], f[w], s);
        out[2 + i] = s;
    }
}

// Block (query head, row): merges the row's splits in split order, o =
// (sum_s f_s acc_s) * (1 / sum_s f_s l_s) * sigmoid(gate), f_s =
// exp(m_s - max m). One split gives back its own values unchanged.
extern "C" __global__ void q35_attn_combine(const float *qg, int ldq,
                                            const float *part, float *o,
                                            const q35_gpu_stream *streams,
                                            const q35_gpu_row *rows, int nh,
                                            int hd, int splits)
{
    Q35_PDL_ENTER();
    __shared__ float fs[Q35_ATTN_SPLITS];
    __shared__ float inv_l;
    int h = blockIdx.x, t = blockIdx.y;
    if (streams[rows[t].stream].chunk & 2)
        return; // q35_attn_chunk's
    int n_ctx = rows[t].pos + 1;
    int chunk = q35_attn_chunk(n_ctx, splits);
    int n = (n_ctx + chunk - 1) / chunk;
    const float *pp = part + ((int64_t)t * nh + h) * splits * (hd + 2);
    if (threadIdx.x == 0) {
        float M = pp[0];
        for (int s = 1; s < n; s++)
            M = fmaxf(M, pp[(int64_t)s * (hd + 2)]);
        float L = 0.0f;
        for (int s = 0; s < n; s++) {
            const float *ps = pp + (int64_t)s * (hd + 2);
            fs[s] = ps[1] > 0.0f ? expf(ps[0] - M) : 0.0f;
            L = fmaf(ps[1], fs[s], L);
        }
        inv_l = 1.0f / L;
    }
    __syncthreads();
    const float *gate = qg + (int64_t)t * ldq + (int64_t)h * 2 * hd + hd;
    float *orow = o + (int64_t)t * nh * hd + (int64_t)h * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < n; k++)
            s = fmaf(pp[(int64_t)k * (hd + 2) + 2 + i], fs[k], s);
        orow[i] = __fmul_rn(__fmul_rn(s, inv_l), q35_sigmoid(gate[i]));
    }
}

#define Q35_AC_K 32 // keys per tile
#define Q35_AC_C 2  // float4 chunks of a row per lane: head_dim up to 256
#define Q35_AC_NL (Q35_AC_K * 64 / 128) // a thread's float4s of a K tile

// Attention over one prompt chunk (rows whose K/V attn_prep has written),
// its query rows in tiles: block (tile of Q35_AC_Q rows, query head), 4
// warps of Q35_AC_R query rows each; keys in tiles of Q35_AC_K through shared
// memory (K rows padded by 4 floats), read once for the tile's rows. In a
// warp lane `key` scores its key for the warp's four rows (float4 dims);
// the online softmax (float32, accurate expf) keeps each row's max and
// sum; lane l accumulates the float4 chunks l, l + 32 of the four rows.
// Writes o = (acc / sum) * sigmoid(gate) as q35_attn_combine. Dynamic
// shared memory: (Q35_AC_Q hd + Q35_AC_K (hd + 4) + Q35_AC_K hd) floats;
// head_dim a multiple of 4.
extern "C" __global__ void __launch_bounds__(128)
    q35_attn_chunk(const float *qg, int ldq, float *o,
                   const q35_gpu_stream *streams,
                   const q35_gpu_row *rows, int si, int slot, int nh, int nkv,
                   int hd)
{
    Q35_PDL_ENTER();
    extern __shared__ float4 smem4[];
    int h4 = hd / 4, kp4 = h4 + 1;
    float4 *sq = smem4, *sk = sq + Q35_AC_Q * h4, *sv = sk + Q35_AC_K * kp4;
    const q35_gpu_stream st = streams[si];
    int q0 = blockIdx.x * Q35_AC_Q, h = blockIdx.y;
    int nq = min(Q35_AC_Q, st.count - q0);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int kvw = nkv * hd, kvh = h / (nh / nkv);
#pragma unroll 4
    for (int x = threadIdx.x; x < Q35_AC_Q * h4; x += blockDim.x) {
        int r = x / h4, c = x % h4;
        sq[x] = r < nq ? reinterpret_cast<const float4 *>(
                             qg + (int64_t)(st.first + q0 + r) * ldq +
                             (int64_t)h * 2 * hd)[c]
                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    int pos[Q35_AC_R];
#pragma unroll
    for (int r = 0; r < Q35_AC_R; r++) {
        int k = q0 + Q35_AC_R * warp + r;
        pos[r] = k < st.count ? rows[st.first + k].pos : -1;
    }
    int last = rows[st.first + q0 + nq - 1].pos;
    float scale = 1.0f / sqrtf((float)hd);
    float m[Q35_AC_R], l[Q35_AC_R];
    float4 acc[Q35_AC_R][Q35_AC_C];
#pragma unroll
    for (int r = 0; r < Q35_AC_R; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int u = 0; u < Q35_AC_C; u++)
            acc[r][u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    const float4 *qw = sq + Q35_AC_R * warp * h4;
    // K and V of a tile come into registers while the tile before (K: its
    // products with V) or this tile's scores (V) are computed: each load is
    // a round trip to L2 or HBM
    float4 nr[Q35_AC_NL];
    auto fetch = [&](int k0, int which) {
#pragma unroll
        for (int u = 0; u < Q35_AC_NL; u++) {
            int x = threadIdx.x + 128 * u, kk = x / h4, c = x % h4;
            int kp = k0 + kk;
            nr[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (x < Q35_AC_K * h4 && kp <= last)
                nr[u] = reinterpret_cast<const float4 *>(
                    q35_kv_at(st, slot, which, kp, kvw) + kvh * hd)[c];
        }
    };
    auto put = [&](float4 *dst, int stride) {
#pragma unroll
        for (int u = 0; u < Q35_AC_NL; u++) {
            int x = threadIdx.x + 128 * u, kk = x / h4, c = x % h4;
            if (x < Q35_AC_K * h4)
                dst[kk * stride + c] = nr[u];
        }
    };
    fetch(0, 0);
    for (int k0 = 0; k0 <= last; k0 += Q35_AC_K) {
        __syncthreads();
        put(sk, kp4);
        fetch(k0, 1);
        __syncthreads();
        float sc[Q35_AC_R];
#pragma unroll
        for (int r = 0; r < Q35_AC_R; r++)
            sc[r] = 0.0f;
        const float4 *kr = sk + lane * kp4;
        for (int c = 0; c < h4; c++) {
            float4 kk = kr[c];
#pragma unroll
            for (int r = 0; r < Q35_AC_R; r++) {
                float4 q = qw[r * h4 + c];
                sc[r] = fmaf(q.x, kk.x, sc[r]);
                sc[r] = fmaf(q.y, kk.y, sc[r]);
                sc[r] = fmaf(q.z, kk.z, sc[r]);
                sc[r] = fmaf(q.w, kk.w, sc[r]);
            }
        }
        int kp = k0 + lane;
        float p[Q35_AC_R];
#pragma unroll
        for (int r = 0; r < Q35_AC_R; r++) {
            float s = kp <= pos[r] ? __fmul_rn(sc[r], scale) : -INFINITY;
            float t = s;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, off));
            float mn = fmaxf(m[r], t);
            float c = m[r] == -INFINITY ? 0.0f : expf(m[r] - mn);
            p[r] = s == -INFINITY ? 0.0f : expf(s - mn);
            float u = p[r];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                u += __shfl_xor_sync(0xffffffffu, u, off);
            l[r] = fmaf(l[r], c, u);
            m[r] = mn;
#pragma unroll
            for (int v = 0; v < Q35_AC_C; v++) {
                acc[r][v].x = __fmul_rn(acc[r][v].x, c);
                acc[r][v].y = __fmul_rn(acc[r][v].y, c);
                acc[r][v].z = __fmul_rn(acc[r][v].z, c);
                acc[r][v].w = __fmul_rn(acc[r][v].w, c);
            }
        }
        put(sv, h4);
        if (k0 + Q35_AC_K <= last)
            fetch(k0 + Q35_AC_K, 0);
        __syncthreads();
        int n_keys = min(Q35_AC_K, last + 1 - k0);
        for (int kk = 0; kk < n_keys; kk++) {
            float pa[Q35_AC_R];
#pragma unroll
            for (int r = 0; r < Q35_AC_R; r++)
                pa[r] = __shfl_sync(0xffffffffu, p[r], kk);
            const float4 *vr = sv + kk * h4;
#pragma unroll
            for (int u = 0; u < Q35_AC_C; u++) {
                int c = lane + 32 * u;
                if (c < h4) {
                    float4 v = vr[c];
#pragma unroll
                    for (int r = 0; r < Q35_AC_R; r++) {
                        acc[r][u].x = fmaf(pa[r], v.x, acc[r][u].x);
                        acc[r][u].y = fmaf(pa[r], v.y, acc[r][u].y);
                        acc[r][u].z = fmaf(pa[r], v.z, acc[r][u].z);
                        acc[r][u].w = fmaf(pa[r], v.w, acc[r][u].w);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < Q35_AC_R; r++) {
        int k = q0 + Q35_AC_R * warp + r;
        if (k >= st.count)
            continue;
        int64_t row = st.first + k;
        const float *gate = qg + row * ldq + (int64_t)h * 2 * hd + hd;
        float *orow = o + row * nh * hd + (int64_t)h * hd;
        float inv = 1.0f / l[r];
#pragma unroll
        for (int u = 0; u < Q35_AC_C; u++) {
            int c = lane + 32 * u;
            if (c >= h4)
                continue;
            float a[4] = {acc[r][u].x, acc[r][u].y, acc[r][u].z, acc[r][u].w};
            for (int e = 0; e < 4; e++)
                orow[4 * c + e] = __fmul_rn(__fmul_rn(a[e], inv),
                                            q35_sigmoid(gate[4 * c + e]));
        }
    }
}
