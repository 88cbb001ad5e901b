// Gated full attention with partial RoPE (spec 2.3-2.4) over a stream's
// float32 K/V rows in the model's paged pool (read through its page table): the
// per-head preparation (zero-centred RMSNorm of q and k, NeoX RoPE on the first
// rot_dim dims, K/V written at the row's position) and the attention itself
// with its sigmoid output gate.
#include "bulk.cuh"
#include "common.cuh"
#include "mma.cuh"

#include <climits>

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
    float *src =
        is_q ? qg + (int64_t)t * ldq + (int64_t)hs * 2 * hd
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

#define Q35_ATTN_ND 8  // head_dim up to 256
#define Q35_ATTN_T  64 // positions of a tile: scores, then values
#define Q35_ATTN_B  8  // a warp's keys in flight at once

// Positions per split of a row with n_ctx keys when a launch has `splits`
// of them: at least Q35_ATTN_CHUNK, a multiple of it, and few enough that
// the row fits the splits. It depends only on the row's position and the
// model, never on what else the launch carries.
static_assert(Q35_ATTN_CHUNK % Q35_KV_PAGE == 0, "a split is whole pages");
__device__ __forceinline__ int q35_attn_chunk(int n_ctx, int splits)
{
    int per = (n_ctx + splits - 1) / splits;
    return (per + Q35_ATTN_CHUNK - 1) / Q35_ATTN_CHUNK * Q35_ATTN_CHUNK;
}

// Attention of decode rows, split over keys (flash decoding). Block (split
// * nh + query head, row), 4 warps; the split's positions (a multiple of
// a page, Q35_ATTN_CHUNK, short enough that short contexts spread over
// many blocks) in tiles of up to Q35_ATTN_T. Per tile: the scores, warp w
// taking positions w, w + 4, ... Q35_ATTN_B at a time with their loads in
// flight together (lane l the dims l, l + 32, ..., the dot a fixed
// butterfly; score = (q . k) hd^-0.5); the tile's max M (exact whatever
// the order) and the running (m, l, acc) rescaled by expf(m - M); then e_p
// = expf(s_p - M), l += e_p in position order, and thread t's dims t, t +
// 128 take acc += e_p v_p in position order. V is asked into L2 while the
// scores run. The split's (m, l, acc) goes to `part`; the split that
// finishes last (a counter per row and head, reset by it) merges the
// row's splits in split order: o = (sum_s f_s acc_s) * (1 / sum_s f_s l_s)
// * sigmoid(gate), f_s = exp(m_s - max m). Every order is fixed by the
// row's position and the model alone.
extern "C" __global__ void __launch_bounds__(128)
    q35_attention(const float *qg, int ldq, float *part, int *cnt, float *o,
                  const q35_gpu_stream *streams, const q35_gpu_row *rows,
                  int slot, int nh, int nkv, int hd, int splits, uint16_t *xo,
                  int T)
{
    q35_pdl_allow();
    __shared__ float sq[Q35_ATTN_ND * 32], sc[Q35_ATTN_T];
    __shared__ int64_t pg[Q35_ATTN_T / Q35_KV_PAGE];
    __shared__ float fs[Q35_ATTN_SPLITS];
    __shared__ float inv_l;
    __shared__ int last;
    // before the wait: the row and stream tables and page table (uploaded
    // before the forward), and K/V of the positions before the stream's
    // first row in this round, which earlier forwards wrote
    // (Q35_PDL_FIRST)
    int h = blockIdx.x % nh, t = blockIdx.y, sp = blockIdx.x / nh;
    const q35_gpu_stream st = streams[rows[t].stream];
    int n_ctx = rows[t].pos + 1;
    int chunk = q35_attn_chunk(n_ctx, splits);
    int p0 = sp * chunk;
    // q35_attn_chunk's rows, and a split this row does not use
    if ((st.chunk & 2) || p0 >= n_ctx) {
        q35_pdl_wait();
        return;
    }
    int safe = rows[st.first].pos;
    int p1 = min(n_ctx, p0 + chunk);
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int kvw = nkv * hd, kvh = h / (nh / nkv);
    const float *q = qg + (int64_t)t * ldq + (int64_t)h * 2 * hd;
    float scale = 1.0f / sqrtf((float)hd);
    float m = -INFINITY, l = 0.0f, acc[2] = {0.0f, 0.0f};
    const int32_t *pt = reinterpret_cast<const int32_t *>(st.ptab);
    float *kv = reinterpret_cast<float *>(st.kv);
    // position b0 + i of the tile at b0 (its pages in pg) of K (which 0)
    // or V (1), this key head
    auto at = [&](int i, int which) {
        int64_t blk = (pg[i / Q35_KV_PAGE] * st.n_attn + slot) * 2 + which;
        return kv + (blk * Q35_KV_PAGE + i % Q35_KV_PAGE) * (int64_t)kvw +
               (int64_t)kvh * hd;
    };
    // a warp's batch of keys i0, i0 + 4, ... of the tile at b0 (nt
    // positions), those at positions in [lo, hi); V asked into L2
    float kr[Q35_ATTN_B][Q35_ATTN_ND];
    auto kload = [&](int b0, int nt, int i0, int lo, int hi) {
#pragma unroll
        for (int u = 0; u < Q35_ATTN_B; u++) {
            int i = i0 + 4 * u;
            if (i >= nt || b0 + i < lo || b0 + i >= hi)
                continue;
            const float *kp = at(i, 0);
#pragma unroll
            for (int k = 0; k < Q35_ATTN_ND; k++) {
                int d = lane + 32 * k;
                kr[u][k] = d < hd ? kp[d] : 0.0f;
            }
            // a 128-byte line a lane
            if (lane * 32 < hd)
                asm volatile(
                    "prefetch.global.L2 [%0];" ::"l"(at(i, 1) + lane * 32));
        }
    };
#pragma unroll
    for (int u = 0; u < Q35_ATTN_B; u++)
#pragma unroll
        for (int k = 0; k < Q35_ATTN_ND; k++)
            kr[u][k] = 0.0f;
    // the first tile's pages and first batch, as far as they are safe
    if (tid < (min(Q35_ATTN_T, p1 - p0) + Q35_KV_PAGE - 1) / Q35_KV_PAGE)
        pg[tid] = pt[p0 / Q35_KV_PAGE + tid];
    __syncthreads();
    kload(p0, min(Q35_ATTN_T, p1 - p0), warp, 0, safe);
    q35_pdl_wait();
    for (int i = tid; i < hd; i += blockDim.x)
        sq[i] = q[i];
    for (int b0 = p0; b0 < p1; b0 += Q35_ATTN_T) {
        int nt = min(Q35_ATTN_T, p1 - b0);
        if (b0 > p0) {
            __syncthreads(); // the last tile's sc and pg are read
            if (tid < (nt + Q35_KV_PAGE - 1) / Q35_KV_PAGE)
                pg[tid] = pt[b0 / Q35_KV_PAGE + tid];
        }
        __syncthreads(); // and sq is in
        for (int i0 = warp; i0 < nt; i0 += 4 * Q35_ATTN_B) {
            // the first batch's unsafe rest, or a whole later batch
            if (b0 == p0 && i0 == warp)
                kload(b0, nt, i0, safe, INT_MAX);
            else
                kload(b0, nt, i0, INT_MIN, INT_MAX);
#pragma unroll
            for (int u = 0; u < Q35_ATTN_B; u++) {
                float d = 0.0f;
#pragma unroll
                for (int k = 0; k < Q35_ATTN_ND; k++)
                    if (lane + 32 * k < hd)
                        d = fmaf(sq[lane + 32 * k], kr[u][k], d);
                d = __fmul_rn(q35_warp_sum(d), scale);
                if (lane == 0 && i0 + 4 * u < nt)
                    sc[i0 + 4 * u] = d;
            }
        }
        __syncthreads();
        float tm = fmaxf(lane < nt ? sc[lane] : -INFINITY,
                         lane + 32 < nt ? sc[lane + 32] : -INFINITY);
        float M = fmaxf(m, q35_warp_max(tm));
        float corr = m == -INFINITY ? 0.0f : expf(m - M);
        l = __fmul_rn(l, corr);
        acc[0] = __fmul_rn(acc[0], corr);
        acc[1] = __fmul_rn(acc[1], corr);
        m = M;
        __syncthreads(); // every warp has its tile max
        if (tid < nt)
            sc[tid] = expf(sc[tid] - M);
        __syncthreads();
        if (tid == 0)
            for (int i = 0; i < nt; i++)
                l = __fadd_rn(l, sc[i]);
#pragma unroll 16
        for (int i = 0; i < nt; i++) {
            const float *vp = at(i, 1);
            float e = sc[i];
#pragma unroll
            for (int j = 0; j < 2; j++)
                if (tid + 128 * j < hd)
                    acc[j] = fmaf(e, vp[tid + 128 * j], acc[j]);
        }
    }
    int nsp = (n_ctx + chunk - 1) / chunk;
    float *pp = part + ((int64_t)t * nh + h) * splits * (hd + 2);
    float *out = pp + (int64_t)sp * (hd + 2);
    if (tid == 0) {
        out[0] = m;
        out[1] = l;
    }
    for (int j = 0; j < 2; j++)
        if (tid + 128 * j < hd)
            out[2 + tid + 128 * j] = acc[j];
    if (nsp > 1) {
        // the splits' parts are seen by whichever block comes last
        __threadfence();
        __syncthreads();
        if (tid == 0) {
            int *c = cnt + (int64_t)t * nh + h;
            last = atomicAdd(c, 1) == nsp - 1;
            if (last)
                *c = 0;
        }
        __syncthreads();
        if (!last)
            return;
        __threadfence();
    } else {
        __syncthreads();
    }
    if (tid == 0) {
        float Mx = __ldcg(pp);
        for (int s = 1; s < nsp; s++)
            Mx = fmaxf(Mx, __ldcg(pp + (int64_t)s * (hd + 2)));
        float L = 0.0f;
        for (int s = 0; s < nsp; s++) {
            const float *ps = pp + (int64_t)s * (hd + 2);
            float ls = __ldcg(ps + 1);
            fs[s] = ls > 0.0f ? expf(__ldcg(ps) - Mx) : 0.0f;
            L = fmaf(ls, fs[s], L);
        }
        inv_l = 1.0f / L;
    }
    __syncthreads();
    const float *gate = q + hd;
    float *orow = o + (int64_t)t * nh * hd + (int64_t)h * hd;
    for (int i = tid; i < hd; i += blockDim.x) {
        float sum = 0.0f;
        for (int k = 0; k < nsp; k++)
            sum = fmaf(__ldcg(pp + (int64_t)k * (hd + 2) + 2 + i), fs[k], sum);
        float u = __fmul_rn(__fmul_rn(sum, inv_l), q35_sigmoid(gate[i]));
        orow[i] = u;
        // the halves o_proj reads (xo: q35_gpu.xs_src)
        if (xo)
            q35_split_put(xo, T, t, h * hd + i, u);
    }
}

#define Q35_AC_K  32 // keys per tile
#define Q35_AC_C  2  // float4 chunks of a row per lane: head_dim up to 256
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
                   const q35_gpu_stream *streams, const q35_gpu_row *rows,
                   int si, int slot, int nh, int nkv, int hd)
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

// TF32 tensor-core forms (mma.sync, sm_80 and later) of the above.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define Q35_AM_SM80(...) __VA_ARGS__
#else
#define Q35_AM_SM80(...)
#endif

// x = hi + lo as TF32 operands: hi is x with its low 13 mantissa bits
// cleared, lo = x - hi (exact) of which the tensor core reads the top 11
// bits, so the pair carries x to about 2^-21 of its size. Two full-rate
// operations where cvt.rna.tf32 would take two conversions.
__device__ __forceinline__ void q35_tf32_split(float x, uint32_t &hi,
                                               uint32_t &lo)
{
    hi = __float_as_uint(x) & 0xffffe000u;
    lo = __float_as_uint(__fsub_rn(x, __uint_as_float(hi)));
}

__device__ __forceinline__ void q35_mma_tf32(float *d, const uint32_t *a,
                                             const uint32_t *b)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Products of split operands (3xTF32): a b = ah bh + (al bh + ah bl), with
// al bl (2^-20 relative) left out: float32's accuracy on TF32 tensor cores.
// The kernels issue N independent products back to back, each pass over
// all N before the next, so that no product waits on the one before it.
template <int N>
__device__ __forceinline__ void
q35_mma3(float (*d)[4], float (*dc)[4], const uint32_t *ah, const uint32_t *al,
         const uint32_t (*bh)[2], const uint32_t (*bl)[2])
{
#pragma unroll
    for (int j = 0; j < N; j++)
        q35_mma_tf32(d[j], ah, bh[j]);
#pragma unroll
    for (int j = 0; j < N; j++)
        q35_mma_tf32(dc[j], al, bh[j]);
#pragma unroll
    for (int j = 0; j < N; j++)
        q35_mma_tf32(dc[j], ah, bl[j]);
}

__device__ __forceinline__ void q35_cp16(float *dst, const float *src, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(
                     q35_smem_addr(dst)),
                 "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void q35_cp_commit()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N> __device__ __forceinline__ void q35_cp_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// q35_attn_chunk on tensor cores for head_dim 8 ND: block (tile of
// Q35_AM_Q query rows, query head), Q35_AM_W warps of 16 rows. Q, a K tile
// and a V tile lie in shared memory (rows padded by 4 floats, so that the
// fragments' loads meet no bank conflict), filled by cp.async: K of the
// next tile while this one's products with V run, V while the scores run.
// Scores and products with V are m16n8k8 TF32 products of split operands
// (q35_mma3), so they carry float32's accuracy; the online softmax is the
// scalar kernel's (float32, accurate expf), on each row's scores of a tile.
// The products with V take P straight from the scores' accumulators: key
// 2t of an 8-key step is the fragment's column t, 2t + 1 its column t + 4,
// and V's rows are read in that order. Writes o = (acc / sum) *
// sigmoid(gate) as q35_attn_combine.
template <int ND>
__device__ __forceinline__ void
q35_attn_mma_body(const float *qg, int ldq, float *o,
                  const q35_gpu_stream *streams, const q35_gpu_row *rows,
                  int si, int slot, int nh, int nkv)
{
    constexpr int HD = 8 * ND, LD = HD + 4, H4 = HD / 4, NT = Q35_AM_K / 8;
    extern __shared__ float4 q35_am_smem[];
    float *sq = reinterpret_cast<float *>(q35_am_smem);
    float *sk = sq + Q35_AM_Q * LD, *sv = sk + Q35_AM_K * LD;
    const q35_gpu_stream st = streams[si];
    int q0 = blockIdx.x * Q35_AM_Q, h = blockIdx.y;
    int nq = min(Q35_AM_Q, st.count - q0);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int g = lane >> 2, t = lane & 3;
    int kvw = nkv * HD, kvh = h / (nh / nkv);
    for (int x = threadIdx.x; x < Q35_AM_Q * H4; x += 32 * Q35_AM_W) {
        int r = x / H4, c = x % H4;
        q35_cp16(sq + r * LD + 4 * c,
                 qg + (int64_t)(st.first + q0 + min(r, nq - 1)) * ldq +
                     (int64_t)h * 2 * HD + 4 * c,
                 r < nq);
    }
    int last = rows[st.first + q0 + nq - 1].pos;
    int r0 = q0 + 16 * warp + g, r1 = r0 + 8;
    int pos0 = r0 < st.count ? rows[st.first + r0].pos : -1;
    int pos1 = r1 < st.count ? rows[st.first + r1].pos : -1;
    int wr = min(q0 + 16 * warp + 15, st.count - 1);
    int wlast = q0 + 16 * warp < st.count ? rows[st.first + wr].pos : -1;
    // keys k0 .. k0 + 31 of K (which 0) or V (1); past `last` zeros, so
    // that a masked key's V is 0, not stale bits
    auto load = [&](float *dst, int k0, int which) {
        for (int x = threadIdx.x; x < Q35_AM_K * H4; x += 32 * Q35_AM_W) {
            int kk = x / H4, c = x % H4, kp = k0 + kk;
            bool ok = kp <= last;
            q35_cp16(dst + kk * LD + 4 * c,
                     q35_kv_at(st, slot, which, ok ? kp : 0, kvw) + kvh * HD +
                         4 * c,
                     ok);
        }
        q35_cp_commit();
    };
    load(sk, 0, 0); // one group with Q
    load(sv, 0, 1);
    float scale = 1.0f / sqrtf((float)HD);
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    constexpr int NG = ND < 8 ? ND : 8;
    float acc[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    const float *qw = sq + 16 * warp * LD;
    for (int k0 = 0; k0 <= last; k0 += Q35_AM_K) {
        q35_cp_wait<1>(); // Q and this K; V may still be on its way
        __syncthreads();
        bool live = k0 <= wlast;
        float s[NT][4], sc[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[j][e] = sc[j][e] = 0.0f;
        if (live) {
#pragma unroll 4
            for (int ks = 0; ks < ND; ks++) {
                const float *qa = qw + 8 * ks + t;
                float a[4] = {qa[g * LD], qa[(g + 8) * LD], qa[g * LD + 4],
                              qa[(g + 8) * LD + 4]};
                uint32_t ah[4], al[4], bh[NT][2], bl[NT][2];
#pragma unroll
                for (int e = 0; e < 4; e++)
                    q35_tf32_split(a[e], ah[e], al[e]);
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const float *kb = sk + (8 * j + g) * LD + 8 * ks + t;
                    q35_tf32_split(kb[0], bh[j][0], bl[j][0]);
                    q35_tf32_split(kb[4], bh[j][1], bl[j][1]);
                }
                q35_mma3<NT>(s, sc, ah, al, bh, bl);
            }
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s[j][e] = __fadd_rn(s[j][e], sc[j][e]);
            // row g: s[j][0..1], keys k0 + 8j + 2t (+1); row g + 8: s[j][2..3]
            float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int kp = k0 + 8 * j + 2 * t + e;
                    s[j][e] =
                        kp <= pos0 ? __fmul_rn(s[j][e], scale) : -INFINITY;
                    s[j][2 + e] =
                        kp <= pos1 ? __fmul_rn(s[j][2 + e], scale) : -INFINITY;
                    mx0 = fmaxf(mx0, s[j][e]);
                    mx1 = fmaxf(mx1, s[j][2 + e]);
                }
#pragma unroll
            for (int off = 1; off < 4; off <<= 1) {
                mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
                mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
            }
            float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
            float c0 = m0 == -INFINITY ? 0.0f : expf(m0 - mn0);
            float c1 = m1 == -INFINITY ? 0.0f : expf(m1 - mn1);
            float u0 = 0.0f, u1 = 0.0f;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    s[j][e] = s[j][e] == -INFINITY ? 0.0f : expf(s[j][e] - mn0);
                    s[j][2 + e] = s[j][2 + e] == -INFINITY
                                      ? 0.0f
                                      : expf(s[j][2 + e] - mn1);
                    u0 += s[j][e];
                    u1 += s[j][2 + e];
                }
#pragma unroll
            for (int off = 1; off < 4; off <<= 1) {
                u0 += __shfl_xor_sync(0xffffffffu, u0, off);
                u1 += __shfl_xor_sync(0xffffffffu, u1, off);
            }
            l0 = fmaf(l0, c0, u0);
            l1 = fmaf(l1, c1, u1);
            m0 = mn0;
            m1 = mn1;
#pragma unroll
            for (int n = 0; n < ND; n++) {
                acc[n][0] = __fmul_rn(acc[n][0], c0);
                acc[n][1] = __fmul_rn(acc[n][1], c0);
                acc[n][2] = __fmul_rn(acc[n][2], c1);
                acc[n][3] = __fmul_rn(acc[n][3], c1);
            }
        }
        q35_cp_wait<0>(); // this V
        __syncthreads();  // and every warp is done with this K
        if (k0 + Q35_AM_K <= last)
            load(sk, k0 + Q35_AM_K, 0);
        if (live) {
            // dims in groups of NG tiles of 8, each pass over the group's
            // accumulators before the next (the corrections into acc too:
            // a second set would not fit in registers)
#pragma unroll
            for (int ks = 0; ks < NT; ks++) {
                float a[4] = {s[ks][0], s[ks][2], s[ks][1], s[ks][3]};
                uint32_t ah[4], al[4];
#pragma unroll
                for (int e = 0; e < 4; e++)
                    q35_tf32_split(a[e], ah[e], al[e]);
                const float *vb = sv + (8 * ks + 2 * t) * LD + g;
#pragma unroll
                for (int n0 = 0; n0 < ND; n0 += NG) {
                    uint32_t bh[NG][2], bl[NG][2];
#pragma unroll
                    for (int n = 0; n < NG; n++) {
                        q35_tf32_split(vb[8 * (n0 + n)], bh[n][0], bl[n][0]);
                        q35_tf32_split(vb[LD + 8 * (n0 + n)], bh[n][1],
                                       bl[n][1]);
                    }
                    q35_mma3<NG>(acc + n0, acc + n0, ah, al, bh, bl);
                }
            }
        }
        __syncthreads(); // every warp is done with this V
        if (k0 + Q35_AM_K <= last)
            load(sv, k0 + Q35_AM_K, 1);
    }
#pragma unroll
    for (int half = 0; half < 2; half++) {
        int k = half ? r1 : r0;
        if (k >= st.count)
            continue;
        int64_t row = st.first + k;
        const float *gate = qg + row * ldq + (int64_t)h * 2 * HD + HD;
        float *orow = o + row * nh * HD + (int64_t)h * HD;
        float inv = 1.0f / (half ? l1 : l0);
#pragma unroll
        for (int n = 0; n < ND; n++) {
            int d = 8 * n + 2 * t;
            float2 v;
            v.x = __fmul_rn(__fmul_rn(acc[n][2 * half], inv),
                            q35_sigmoid(gate[d]));
            v.y = __fmul_rn(__fmul_rn(acc[n][2 * half + 1], inv),
                            q35_sigmoid(gate[d + 1]));
            *reinterpret_cast<float2 *>(orow + d) = v;
        }
    }
}

#define Q35_ATTN_MMA(hd)                                                       \
    extern "C" __global__ void __launch_bounds__(32 * Q35_AM_W)                \
        q35_attn_mma##hd(                                                      \
            const float *qg, int ldq, float *o, const q35_gpu_stream *streams, \
            const q35_gpu_row *rows, int si, int slot, int nh, int nkv)        \
    {                                                                          \
        Q35_PDL_ENTER();                                                       \
        Q35_AM_SM80(q35_attn_mma_body<hd / 8>(qg, ldq, o, streams, rows, si,   \
                                              slot, nh, nkv));                 \
    }
Q35_ATTN_MMA(16)
Q35_ATTN_MMA(32)
Q35_ATTN_MMA(64)
Q35_ATTN_MMA(128)
Q35_ATTN_MMA(256)
