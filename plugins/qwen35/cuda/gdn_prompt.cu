// The gated delta rule over a prompt chunk (no speculative row, so no log
// and no snapshot): each row's preparation for all rows at once, the
// recurrence with a head's value columns split over many blocks (a column
// of the state needs only itself), and the gated RMSNorm of the outputs
// for all rows at once. Sums run in another order than q35_gdn_rec's, so a
// chunk agrees with one-row steps within rounding, not bit for bit.
#include "common.cuh"


// Block (row, 0) of 32 * (2 Hk) threads: warp u < Hk normalises q of key
// head u, warp Hk + u its k (as q35_gdn_rec: r = 1 / sqrtf(ss + 1e-6), q
// then scaled by dk^-0.5), into qk[row][2][Hk][dk]; then thread h < Hv
// writes decay and beta into db[row][2][Hv].
extern "C" __global__ void
q35_gdnc_prep(const float *y, const float *a, const float *b, int ldab,
              const float *neg_a, const float *dt_bias,
              const q35_gpu_stream *streams, int si, int Hk, int Hv, int dk,
              int cd, float *qk, float *db)
{
    Q35_PDL_ENTER();
    const q35_gpu_stream st = streams[si];
    int k = blockIdx.x, row = st.first + k;
    int lane = threadIdx.x & 31, u = threadIdx.x >> 5;
    int kd = Hk * dk;
    if (u < 2 * Hk) {
        int which = u / Hk, kh = u % Hk;
        const float *x = y + (int64_t)row * cd + (int64_t)which * kd +
                         (int64_t)kh * dk;
        float ss = 0.0f;
        for (int i = lane; i < dk; i += 32)
            ss = fmaf(x[i], x[i], ss);
        ss = q35_warp_sum(ss);
        float r = 1.0f / sqrtf(ss + 1e-6f);
        float qscale = 1.0f / sqrtf((float)dk);
        float *o = qk + ((int64_t)k * 2 + which) * kd + (int64_t)kh * dk;
        for (int i = lane; i < dk; i += 32) {
            float n = __fmul_rn(x[i], r);
            o[i] = which == 0 ? __fmul_rn(n, qscale) : n;
        }
    }
    for (int h = threadIdx.x; h < Hv; h += blockDim.x) {
        float av = __fadd_rn(a[(int64_t)row * ldab + h], dt_bias[h]);
        db[((int64_t)k * 2) * Hv + h] =
            expf(__fmul_rn(neg_a[h], q35_softplus(av)));
        db[((int64_t)k * 2 + 1) * Hv + h] =
            q35_sigmoid(b[(int64_t)row * ldab + h]);
    }
}

#define Q35_GDNC_TR 32 // rows staged in shared memory at a time

// The recurrence of one prompt chunk. Block (value head h, column block)
// of Q35_GDNC_WARPS warps; in a warp lane = p * cpw + jj holds rows [16p,
// 16p + 16) of column j of the head's state (P = ceil(dk / 16) parts, cpw
// = 32 / P columns a warp: small blocks, many warps, since a row's steps
// are a chain of dependent sums). Per row: S *= decay; kv = S^T k; d = (v - kv)
// beta; S += k d^T; o_j = S^T q, raw (q35_gdnc_norm follows). A thread's
// sums in four partial sums, the part sums by a butterfly over the part
// lanes. The rows' q, k, v, decay and beta come in tiles of Q35_GDNC_TR
// rows through shared memory (dk a multiple of 4, at most 128).
extern "C" __global__ void __launch_bounds__(32 * Q35_GDNC_WARPS)
    q35_gdnc_rec(const float *qk, const float *db, const float *y, float *o,
                 const q35_gpu_stream *streams, int si, int slot, int Hk,
                 int Hv, int dk, int dv, int cd)
{
    Q35_PDL_ENTER();
    __shared__ float4 sqk[Q35_GDNC_TR * 2 * 32];
    __shared__ float sv[Q35_GDNC_TR][32 * Q35_GDNC_WARPS];
    __shared__ float sdb[Q35_GDNC_TR][2];
    const q35_gpu_stream st = streams[si];
    int P = (dk + Q35_GDNC_PART - 1) / Q35_GDNC_PART, cpw = 32 / P;
    int cpb = cpw * Q35_GDNC_WARPS, nb = (dv + cpb - 1) / cpb;
    int h = blockIdx.x / nb, cb = blockIdx.x % nb;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int p = lane / cpw, jj = lane % cpw;
    int j = cb * cpb + warp * cpw + jj, i0 = p * Q35_GDNC_PART;
    bool on = j < dv;
    int kh = h / (Hv / Hk), kd = Hk * dk, vd = Hv * dv, d4 = dk / 4;
    int64_t hoff = ((int64_t)slot * Hv + h) * dk * dv;
    float *S = reinterpret_cast<float *>(st.state) + hoff;
    float s[Q35_GDNC_PART];
#pragma unroll
    for (int ii = 0; ii < Q35_GDNC_PART; ii++)
        s[ii] = on && i0 + ii < dk ? S[(int64_t)(i0 + ii) * dv + j] : 0.0f;
    for (int t0 = 0; t0 < st.count; t0 += Q35_GDNC_TR) {
        int nt = min(Q35_GDNC_TR, st.count - t0);
        __syncthreads();
        // q then k of each row, float4s [row][2][d4]
        for (int x = threadIdx.x; x < nt * 2 * d4; x += blockDim.x) {
            int r = x / (2 * d4), w = (x / d4) % 2, c = x % d4;
            sqk[(r * 2 + w) * 32 + c] = reinterpret_cast<const float4 *>(
                qk + ((int64_t)(t0 + r) * 2 + w) * kd + (int64_t)kh * dk)[c];
        }
        for (int x = threadIdx.x; x < nt * cpb; x += blockDim.x) {
            int r = x / cpb, c = x % cpb, jc = cb * cpb + c;
            sv[r][c] = jc < dv ? y[(int64_t)(st.first + t0 + r) * cd +
                                   2 * kd + h * dv + jc]
                               : 0.0f;
        }
        for (int x = threadIdx.x; x < nt * 2; x += blockDim.x)
            sdb[x / 2][x % 2] = db[((int64_t)(t0 + x / 2) * 2 + x % 2) * Hv + h];
        __syncthreads();
        for (int r = 0; r < nt; r++) {
            float kc[Q35_GDNC_PART], qc[Q35_GDNC_PART];
#pragma unroll
            for (int c = 0; c < Q35_GDNC_PART / 4; c++) {
                bool in = i0 + 4 * c < dk;
                float4 q4 = in ? sqk[(r * 2) * 32 + i0 / 4 + c]
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                float4 k4 = in ? sqk[(r * 2 + 1) * 32 + i0 / 4 + c]
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                qc[4 * c] = q4.x;
                qc[4 * c + 1] = q4.y;
                qc[4 * c + 2] = q4.z;
                qc[4 * c + 3] = q4.w;
                kc[4 * c] = k4.x;
                kc[4 * c + 1] = k4.y;
                kc[4 * c + 2] = k4.z;
                kc[4 * c + 3] = k4.w;
            }
            float v = sv[r][warp * cpw + jj], dec = sdb[r][0], bet = sdb[r][1];
            // four partial sums (rows ii mod 4), then (0 + 1) + (2 + 3)
            float kv4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int ii = 0; ii < Q35_GDNC_PART; ii++) {
                s[ii] = __fmul_rn(s[ii], dec);
                kv4[ii & 3] = __fmaf_rn(kc[ii], s[ii], kv4[ii & 3]);
            }
            float kv =
                __fadd_rn(__fadd_rn(kv4[0], kv4[1]), __fadd_rn(kv4[2], kv4[3]));
            for (int off = cpw; off < 32; off <<= 1)
                kv = __fadd_rn(kv, __shfl_xor_sync(0xffffffffu, kv, off));
            float d = __fmul_rn(__fsub_rn(v, kv), bet);
            float o4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int ii = 0; ii < Q35_GDNC_PART; ii++) {
                s[ii] = __fmaf_rn(kc[ii], d, s[ii]);
                o4[ii & 3] = __fmaf_rn(qc[ii], s[ii], o4[ii & 3]);
            }
            float oj =
                __fadd_rn(__fadd_rn(o4[0], o4[1]), __fadd_rn(o4[2], o4[3]));
            for (int off = cpw; off < 32; off <<= 1)
                oj = __fadd_rn(oj, __shfl_xor_sync(0xffffffffu, oj, off));
            if (on && p == 0)
                o[(int64_t)(st.first + t0 + r) * vd + h * dv + j] = oj;
        }
    }
    if (on)
#pragma unroll
        for (int ii = 0; ii < Q35_GDNC_PART; ii++)
            if (i0 + ii < dk)
                S[(int64_t)(i0 + ii) * dv + j] = s[ii];
}

// The gated RMSNorm of a chunk's outputs, in place: block (row, value
// head) of dv threads (up to 1024), o_j = (w_j * (o_j * r)) * silu(z_j), r
// = 1 / sqrtf(mean(o^2) + eps), as q35_gdn_rec.
extern "C" __global__ void q35_gdnc_norm(float *o, const float *z, int ldz,
                                         const float *gnorm,
                                         const q35_gpu_stream *streams,
                                         int si, int Hv, int dv, float eps)
{
    Q35_PDL_ENTER();
    __shared__ float red[32];
    const q35_gpu_stream st = streams[si];
    int row = st.first + blockIdx.x, h = blockIdx.y, j = threadIdx.x;
    int64_t at = (int64_t)row * Hv * dv + h * dv + j;
    float oj = j < dv ? o[at] : 0.0f;
    float ss = q35_block_sum(__fmul_rn(oj, oj), red);
    float r = 1.0f / sqrtf(ss / (float)dv + eps);
    if (j < dv)
        o[at] = __fmul_rn(__fmul_rn(gnorm[j], __fmul_rn(oj, r)),
                          q35_silu(z[(int64_t)row * ldz + h * dv + j]));
}
