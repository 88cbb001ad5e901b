// The gated delta rule of the Gated DeltaNet layers (spec 2.5-2.6): the
// per-row preparation (l2-normalised q and k, beta, the decay), the
// recurrence with the gated RMSNorm of its output, and the replay of logged
// rows that commit uses. The state is float32 throughout.
#include "common.cuh"

// Per row, one block of 128 threads: q and k heads l2-normalised in place
// (q also scaled by dk^-0.5), decay = exp(-exp(A_log) softplus(a + dt_bias)),
// beta = sigmoid(b); a speculative row logs k, v, decay and beta.
// Rounding: the sum of squares in float32 over a warp (fixed butterfly),
// r = 1 / sqrtf(ss + 1e-6); q = (q * r) * dk^-0.5 rounded twice as on the CPU.
extern "C" __global__ void q35_gdn_prep(
    float *y, const float *a, const float *b, float *decay, float *beta,
    const float *neg_a, const float *dt_bias, const q35_gpu_stream *streams,
    const q35_gpu_row *rows, int slot, int Hk, int Hv, int dk, int dv,
    int n_lin, q35_gpu_log lay)
{
    int t = blockIdx.x;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int nw = blockDim.x >> 5;
    int kd = Hk * dk, cd = 2 * kd + Hv * dv;
    float *yr = y + (int64_t)t * cd;
    float qscale = 1.0f / sqrtf((float)dk);
    for (int v = warp; v < 2 * Hk; v += nw) {
        float *x = yr + (int64_t)v * dk; // q heads, then k heads
        float ss = 0.0f;
        for (int i = lane; i < dk; i += 32)
            ss = fmaf(x[i], x[i], ss);
        ss = q35_warp_sum(ss);
        float r = 1.0f / sqrtf(ss + 1e-6f);
        for (int i = lane; i < dk; i += 32) {
            float n = __fmul_rn(x[i], r);
            x[i] = v < Hk ? __fmul_rn(n, qscale) : n;
        }
    }
    for (int h = threadIdx.x; h < Hv; h += blockDim.x) {
        float av = __fadd_rn(a[(int64_t)t * Hv + h], dt_bias[h]);
        decay[(int64_t)t * Hv + h] = expf(__fmul_rn(neg_a[h], q35_softplus(av)));
        beta[(int64_t)t * Hv + h] = q35_sigmoid(b[(int64_t)t * Hv + h]);
    }
    int li = rows[t].log;
    if (li < 0)
        return;
    __syncthreads();
    const q35_gpu_stream st = streams[rows[t].stream];
    float *log = reinterpret_cast<float *>(st.log) +
                 ((int64_t)li * n_lin + slot) * lay.size;
    for (int i = threadIdx.x; i < kd; i += blockDim.x)
        log[lay.k + i] = yr[kd + i];
    for (int i = threadIdx.x; i < Hv * dv; i += blockDim.x)
        log[lay.v + i] = yr[2 * kd + i];
    for (int h = threadIdx.x; h < Hv; h += blockDim.x) {
        log[lay.decay + h] = decay[(int64_t)t * Hv + h];
        log[lay.beta + h] = beta[(int64_t)t * Hv + h];
    }
}

// One delta-rule step on this thread's column j of the state S [dk, dv]:
// S *= decay; kv = S^T k; d = (v - kv) * beta; S += k d^T. Every operation
// is an explicitly rounded intrinsic, so the forward and the commit replay
// (separate kernels) change the state bit for bit alike.
template <int DK>
__device__ __forceinline__ void q35_gdn_step(float *s, const float *k, float v,
                                             float dec, float bet, int dk)
{
    float kv = 0.0f;
#pragma unroll
    for (int i = 0; i < DK; i++) {
        if (i < dk) {
            s[i] = __fmul_rn(s[i], dec);
            kv = __fmaf_rn(k[i], s[i], kv);
        }
    }
    float d = __fmul_rn(__fsub_rn(v, kv), bet);
#pragma unroll
    for (int i = 0; i < DK; i++)
        if (i < dk)
            s[i] = __fmaf_rn(k[i], d, s[i]);
}

// The recurrence over each stream's rows in order: block (value head h,
// stream), thread j holds column j of the head's state in registers
// (DK >= dk). Output o_j = S^T q, then the gated RMSNorm over the head's dv
// outputs: (w_j * (o_j * r)) * silu(z_j), r = 1 / sqrtf(mean(o^2) + eps),
// the mean from q35_block_sum (fixed order).
template <int DK>
__device__ void q35_gdn_rec_body(const float *y, const float *z, float *o,
                                 const float *decay, const float *beta,
                                 const float *gnorm,
                                 const q35_gpu_stream *streams, int slot,
                                 int Hk, int Hv, int dk, int dv, float eps)
{
    __shared__ float sq[DK], sk[DK], red[32];
    int h = blockIdx.x, j = threadIdx.x;
    bool on = j < dv;
    const q35_gpu_stream st = streams[blockIdx.y];
    int kh = h / (Hv / Hk);
    int kd = Hk * dk, vd = Hv * dv, cd = 2 * kd + vd;
    int64_t hoff = ((int64_t)slot * Hv + h) * dk * dv;
    float *S = reinterpret_cast<float *>(st.state) + hoff;
    float s[DK];
#pragma unroll
    for (int i = 0; i < DK; i++)
        s[i] = on && i < dk ? S[(int64_t)i * dv + j] : 0.0f;
    for (int k = 0; k < st.count; k++) {
        int row = st.first + k;
        if (k == st.snap_row && on) {
            float *snap = reinterpret_cast<float *>(st.snap_state) + hoff;
#pragma unroll
            for (int i = 0; i < DK; i++)
                if (i < dk)
                    snap[(int64_t)i * dv + j] = s[i];
        }
        const float *yr = y + (int64_t)row * cd;
        __syncthreads();
        for (int i = j; i < dk; i += blockDim.x) {
            sq[i] = yr[kh * dk + i];
            sk[i] = yr[kd + kh * dk + i];
        }
        __syncthreads();
        float v = on ? yr[2 * kd + h * dv + j] : 0.0f;
        q35_gdn_step<DK>(s, sk, v, decay[(int64_t)row * Hv + h],
                         beta[(int64_t)row * Hv + h], dk);
        float oj = 0.0f;
#pragma unroll
        for (int i = 0; i < DK; i++)
            if (i < dk)
                oj = __fmaf_rn(s[i], sq[i], oj);
        float ss = q35_block_sum(on ? oj * oj : 0.0f, red);
        float r = 1.0f / sqrtf(ss / (float)dv + eps);
        if (on) {
            int64_t at = (int64_t)row * vd + h * dv + j;
            o[at] = __fmul_rn(__fmul_rn(gnorm[j], __fmul_rn(oj, r)),
                              q35_silu(z[at]));
        }
    }
    if (on) {
#pragma unroll
        for (int i = 0; i < DK; i++)
            if (i < dk)
                S[(int64_t)i * dv + j] = s[i];
    }
}

// commit(kept) on one cache: each GDN layer's state restarts from its
// snapshot and takes the first `kept` logged steps. Block (value head,
// layer), thread j the column j.
template <int DK>
__device__ void q35_gdn_replay_body(float *state, const float *snap,
                                    const float *log, int kept, int Hk, int Hv,
                                    int dk, int dv, int n_lin, q35_gpu_log lay)
{
    __shared__ float sk[DK];
    int h = blockIdx.x, l = blockIdx.y, j = threadIdx.x;
    bool on = j < dv;
    int kh = h / (Hv / Hk);
    int64_t hoff = ((int64_t)l * Hv + h) * dk * dv;
    float s[DK];
#pragma unroll
    for (int i = 0; i < DK; i++)
        s[i] = on && i < dk ? snap[hoff + (int64_t)i * dv + j] : 0.0f;
    for (int r = 0; r < kept; r++) {
        const float *e = log + ((int64_t)r * n_lin + l) * lay.size;
        __syncthreads();
        for (int i = j; i < dk; i += blockDim.x)
            sk[i] = e[lay.k + kh * dk + i];
        __syncthreads();
        float v = on ? e[lay.v + h * dv + j] : 0.0f;
        q35_gdn_step<DK>(s, sk, v, e[lay.decay + h], e[lay.beta + h], dk);
    }
    if (on) {
#pragma unroll
        for (int i = 0; i < DK; i++)
            if (i < dk)
                state[hoff + (int64_t)i * dv + j] = s[i];
    }
}

#define Q35_GDN(DK)                                                            \
    extern "C" __global__ void q35_gdn_rec_##DK(                               \
        const float *y, const float *z, float *o, const float *decay,          \
        const float *beta, const float *gnorm, const q35_gpu_stream *streams,  \
        int slot, int Hk, int Hv, int dk, int dv, float eps)                   \
    {                                                                          \
        q35_gdn_rec_body<DK>(y, z, o, decay, beta, gnorm, streams, slot, Hk,   \
                             Hv, dk, dv, eps);                                 \
    }                                                                          \
    extern "C" __global__ void q35_gdn_replay_##DK(                            \
        float *state, const float *snap, const float *log, int kept, int Hk,   \
        int Hv, int dk, int dv, int n_lin, q35_gpu_log lay)                    \
    {                                                                          \
        q35_gdn_replay_body<DK>(state, snap, log, kept, Hk, Hv, dk, dv, n_lin, \
                                lay);                                          \
    }

Q35_GDN(16)
Q35_GDN(32)
Q35_GDN(64)
Q35_GDN(128)
Q35_GDN(256)
