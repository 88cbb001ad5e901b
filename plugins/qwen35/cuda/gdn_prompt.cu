// The gated delta rule over a prompt chunk (no speculative row, so no log
// and no snapshot) in its chunkwise (WY) form: each row's preparation for
// all rows at once; per head and chunk of Q35_WY_C rows, in parallel, the
// chunk's own part (T = (I + A)^-1 with A_ij = beta_i e^(G_i - G_j) k_i.k_j
// below the diagonal, W = T (beta e^G K), U = T (beta V), M_ij = e^(G_i -
// G_j) q_i.k_j on and below it, G the chunk's running sum of log decays);
// then, chunk after chunk per head and group of 32 value columns, the part
// that carries the state: V' = U - W S, O = e^G Q S + M V', S = e^(G_n) S
// + (e^(G_n - G) K)^T V'; and the gated RMSNorm for all rows at once. Sums
// run in another order than q35_gdn_rec's, so a chunk agrees with one-row
// steps within rounding, not bit for bit.
#include "common.cuh"


// Block (row, 0) of 32 * (2 Hk) threads: warp u < Hk normalises q of key
// head u, warp Hk + u its k (q35_qk_norm, as q35_gdn_rec), into
// qk[row][2][Hk][dk]; then thread h < Hv
// writes the log of the decay (-exp(A_log) softplus(a + dt_bias)) and beta
// into db[row][2][Hv].
extern "C" __global__ void
q35_gdnc_prep(const float *y, const float *a, const float *b, int ldab,
              const float *neg_a, const float *dt_bias,
              const q35_gpu_stream *streams, int si, int Hk, int Hv, int dk,
              int cd, float *qk, float *db)
{
    Q35_PDL_ENTER();
    const q35_gpu_stream st = streams[si];
    int k = blockIdx.x, row = st.first + k;
    int u = threadIdx.x >> 5, kd = Hk * dk;
    if (u < 2 * Hk) {
        int which = u / Hk, kh = u % Hk;
        q35_qk_norm(y + (int64_t)row * cd + (int64_t)which * kd +
                        (int64_t)kh * dk,
                    dk, which == 0,
                    qk + ((int64_t)k * 2 + which) * kd + (int64_t)kh * dk);
    }
    for (int h = threadIdx.x; h < Hv; h += blockDim.x) {
        float av = __fadd_rn(a[(int64_t)row * ldab + h], dt_bias[h]);
        db[((int64_t)k * 2) * Hv + h] = __fmul_rn(neg_a[h], q35_softplus(av));
        db[((int64_t)k * 2 + 1) * Hv + h] =
            q35_sigmoid(b[(int64_t)row * ldab + h]);
    }
}

// wy[row][head]: W (dk), U (dv), M (Q35_WY_C), G and 3 floats of pad: the
// per-row record of q35_gdnc_wy, Q35_WY_STRIDE(dk, dv) floats (a multiple
// of 4 when dk and dv are: records load as float4).
#define Q35_WY_STRIDE(dk, dv) ((dk) + (dv) + Q35_WY_C + 4)
#define Q35_F4_ZERO           make_float4(0.0f, 0.0f, 0.0f, 0.0f)

// rec(i)[off + e] = sum_j T_ij (s_j X_je) for the chunk's n rows and e <
// width: warp w takes rows w + 8 r, lane l columns l + 32 q (128 a pass),
// each T and X element read once for the warp's 8 rows.
template <typename Rec>
__device__ __forceinline__ void q35_wy_times(const float *sT, const float *sc,
                                             const float *X, int kst,
                                             int width, int n, int off,
                                             int warp, int lane, Rec rec)
{
    const int C = Q35_WY_C;
    for (int q0 = 0; q0 < width; q0 += 128) {
        float w[8][4];
#pragma unroll
        for (int r = 0; r < 8; r++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                w[r][q] = 0.0f;
        for (int j = 0; j < C; j++) {
            float xv[4];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                int e = q0 + lane + 32 * q;
                xv[q] = e < width ? __fmul_rn(sc[j], X[j * kst + e]) : 0.0f;
            }
#pragma unroll
            for (int r = 0; r < 8; r++) {
                float t = sT[(warp + 8 * r) * C + j];
#pragma unroll
                for (int q = 0; q < 4; q++)
                    w[r][q] = fmaf(t, xv[q], w[r][q]);
            }
        }
#pragma unroll
        for (int r = 0; r < 8; r++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                int i = warp + 8 * r, e = q0 + lane + 32 * q;
                if (i < n && e < width)
                    rec(i)[off + e] = w[r][q];
            }
    }
}

// The chunk's own part. Block (value head, chunk) of 8 warps; warp w
// computes rows w + 8 r of A, W, M and U, each operand read once for all
// of its rows (float4 along the shared dimension). Dynamic shared memory:
// K then V rows and Q rows (Q35_WY_C x (max(dk, dv) + 4) each; the pad
// keeps a warp's float4 reads of 8 rows on distinct banks), A and T
// (Q35_WY_C^2 each), G, beta and beta e^G (Q35_WY_C each); dk and dv
// multiples of 4, dk up to 128 and dv up to 256.
extern "C" __global__ void __launch_bounds__(256)
    q35_gdnc_wy(const float *qk, const float *db, const float *y, float *wy,
                const q35_gpu_stream *streams, int si, int Hk, int Hv, int dk,
                int dv, int cd)
{
    Q35_PDL_ENTER();
    extern __shared__ float4 smw[];
    const int C = Q35_WY_C;
    int kst = max(dk, dv) + 4;
    float *sK = reinterpret_cast<float *>(smw), *sQ = sK + C * kst;
    float *sA = sQ + C * kst, *sT = sA + C * C;
    float *sG = sT + C * C, *sB = sG + C, *sBG = sB + C;
    const q35_gpu_stream st = streams[si];
    int h = blockIdx.x, r0 = blockIdx.y * C, n = min(C, st.count - r0);
    int kh = h / (Hv / Hk), kd = Hk * dk, tid = threadIdx.x;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, d4 = dk / 4;
    int64_t ws = Q35_WY_STRIDE(dk, dv);
    auto rec = [&](int i) { return wy + ((int64_t)(r0 + i) * Hv + h) * ws; };
#pragma unroll 4
    for (int x = tid; x < C * d4; x += blockDim.x) {
        int i = x / d4, c = x % d4;
        const float4 *r = reinterpret_cast<const float4 *>(
            qk + ((int64_t)(r0 + i) * 2) * kd + kh * dk);
        reinterpret_cast<float4 *>(sQ + i * kst)[c] = i < n ? r[c] : Q35_F4_ZERO;
        reinterpret_cast<float4 *>(sK + i * kst)[c] =
            i < n ? r[kd / 4 + c] : Q35_F4_ZERO;
    }
    if (tid < C) {
        bool in = tid < n;
        sG[tid] = in ? db[((int64_t)(r0 + tid) * 2) * Hv + h] : 0.0f;
        sB[tid] = in ? db[((int64_t)(r0 + tid) * 2 + 1) * Hv + h] : 0.0f;
    }
    __syncthreads();
    if (tid == 0)
        for (int i = 1; i < C; i++)
            sG[i] = __fadd_rn(sG[i], sG[i - 1]);
    __syncthreads();
    if (tid < C)
        sBG[tid] = __fmul_rn(sB[tid], expf(sG[tid]));
    // A (below the diagonal) and M (on and below it): rows warp + 8 r,
    // columns lane and lane + 32
    float a[8][2], mm[8][2];
#pragma unroll
    for (int r = 0; r < 8; r++)
        a[r][0] = a[r][1] = mm[r][0] = mm[r][1] = 0.0f;
    for (int c = 0; c < d4; c++) {
        float4 kj[2];
#pragma unroll
        for (int u = 0; u < 2; u++)
            kj[u] = reinterpret_cast<const float4 *>(sK + (lane + 32 * u) *
                                                              kst)[c];
#pragma unroll
        for (int r = 0; r < 8; r++) {
            int i = warp + 8 * r;
            float4 ki = reinterpret_cast<const float4 *>(sK + i * kst)[c];
            float4 qi = reinterpret_cast<const float4 *>(sQ + i * kst)[c];
#pragma unroll
            for (int u = 0; u < 2; u++) {
                a[r][u] = fmaf(ki.x, kj[u].x, a[r][u]);
                a[r][u] = fmaf(ki.y, kj[u].y, a[r][u]);
                a[r][u] = fmaf(ki.z, kj[u].z, a[r][u]);
                a[r][u] = fmaf(ki.w, kj[u].w, a[r][u]);
                mm[r][u] = fmaf(qi.x, kj[u].x, mm[r][u]);
                mm[r][u] = fmaf(qi.y, kj[u].y, mm[r][u]);
                mm[r][u] = fmaf(qi.z, kj[u].z, mm[r][u]);
                mm[r][u] = fmaf(qi.w, kj[u].w, mm[r][u]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 8; r++) {
        int i = warp + 8 * r;
#pragma unroll
        for (int u = 0; u < 2; u++) {
            int j = lane + 32 * u;
            float g = expf(sG[i] - sG[j]);
            sA[i * C + j] = j < i && i < n
                                ? __fmul_rn(__fmul_rn(sB[i], g), a[r][u])
                                : 0.0f;
            if (i < n)
                rec(i)[dk + dv + j] = j <= i ? __fmul_rn(g, mm[r][u]) : 0.0f;
        }
    }
    if (tid < n)
        rec(tid)[dk + dv + C] = sG[tid];
    __syncthreads();
    // T row by row: T_i = e_i - sum_{j < i} A_ij T_j
    for (int i = 0; i < C; i++) {
        for (int x = tid; x < C; x += blockDim.x) {
            float t = x == i ? 1.0f : 0.0f;
            for (int j = x; j < i; j++)
                t = fmaf(-sA[i * C + j], sT[j * C + x], t);
            sT[i * C + x] = x <= i ? t : 0.0f;
        }
        __syncthreads();
    }
    // W = T (beta e^G K)
    q35_wy_times(sT, sBG, sK, kst, dk, n, 0, warp, lane, rec);
    __syncthreads();
#pragma unroll 4
    for (int x = tid; x < C * (dv / 4); x += blockDim.x) {
        int i = x / (dv / 4), c = x % (dv / 4);
        const float4 *r = reinterpret_cast<const float4 *>(
            y + (int64_t)(st.first + r0 + i) * cd + 2 * kd + h * dv);
        reinterpret_cast<float4 *>(sK + i * kst)[c] = i < n ? r[c] : Q35_F4_ZERO;
    }
    __syncthreads();
    // U = T (beta V)
    q35_wy_times(sT, sB, sK, kst, dv, n, dk, warp, lane, rec);
}

// The part that carries the state, chunk after chunk. Block (value head,
// group of 32 value columns) of 8 warps, lane l on column 32 g + l; the
// state's columns stay in shared memory. Warp w computes rows w + 8 r of
// V' and O and rows w + 8 r of the new S, each operand read once for all
// of its rows (float4 along the shared dimension). Dynamic shared memory:
// S (dk x 32), V' (Q35_WY_C x 32), W then Q rows (Q35_WY_C x dk), K^T
// scaled by e^(G_n - G) (dk x (Q35_WY_C + 4)), M (Q35_WY_C^2), G and
// e^(G_n - G) (Q35_WY_C each); dk a multiple of 4 up to 128. Writes each
// row's raw output (q35_gdnc_norm follows).
#define Q35_WY_KT (Q35_WY_C + 4)
// A thread's float4 loads of a chunk's W (or Q, K) rows, U columns and M
// (blocks of 256 threads, dk up to 128).
#define Q35_AP_X (Q35_WY_C * 32 / 256)
#define Q35_AP_V (Q35_WY_C * 8 / 256)
#define Q35_AP_M (Q35_WY_C * Q35_WY_C / 4 / 256)
extern "C" __global__ void __launch_bounds__(256)
    q35_gdnc_apply(const float *qk, const float *wy, float *o,
                   const q35_gpu_stream *streams, int si, int slot, int Hk,
                   int Hv, int dk, int dv)
{
    Q35_PDL_ENTER();
    extern __shared__ float4 sm4[];
    const int C = Q35_WY_C;
    float *sS = reinterpret_cast<float *>(sm4), *sV = sS + dk * 32;
    float *sX = sV + C * 32, *sKt = sX + C * dk, *sM = sKt + dk * Q35_WY_KT;
    float *sG = sM + C * C, *sE = sG + C;
    const q35_gpu_stream st = streams[si];
    int ng = (dv + 31) / 32, h = blockIdx.x / ng, x0 = (blockIdx.x % ng) * 32;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    int col = x0 + lane;
    bool on = col < dv;
    int kh = h / (Hv / Hk), kd = Hk * dk, vd = Hv * dv, d4 = dk / 4;
    int64_t ws = Q35_WY_STRIDE(dk, dv);
    float *S = reinterpret_cast<float *>(st.state) +
               ((int64_t)slot * Hv + h) * q35_gdn_head(dk, dv);
    for (int x = tid; x < dk * 32; x += blockDim.x) {
        int e = x / 32, l = x % 32;
        sS[x] = x0 + l < dv ? S[q35_gdn_off(e, x0 + l, dk)] : 0.0f;
    }
    for (int r0 = 0; r0 < st.count; r0 += C) {
        int n = min(C, st.count - r0);
        auto rec = [&](int i) {
            return wy + ((int64_t)(r0 + i) * Hv + h) * ws;
        };
        auto rec4 = [&](int i, int off) {
            return reinterpret_cast<const float4 *>(rec(i) + off);
        };
        __syncthreads();
        // the chunk's records (W, U, M): every load in flight before the
        // first store (each is a round trip to L2)
        {
            float4 rx[Q35_AP_X], rv[Q35_AP_V], rm[Q35_AP_M];
#pragma unroll
            for (int u = 0; u < Q35_AP_X; u++) {
                int x = tid + u * 256, i = x / d4, c = x % d4;
                if (x < C * d4)
                    rx[u] = i < n ? rec4(i, 0)[c] : Q35_F4_ZERO;
            }
#pragma unroll
            for (int u = 0; u < Q35_AP_V; u++) {
                int x = tid + u * 256, i = x / 8, c = x % 8;
                rv[u] = i < n && x0 + 4 * c < dv ? rec4(i, dk + x0)[c]
                                                 : Q35_F4_ZERO;
            }
#pragma unroll
            for (int u = 0; u < Q35_AP_M; u++) {
                int x = tid + u * 256, i = x / (C / 4), c = x % (C / 4);
                rm[u] = i < n ? rec4(i, dk + dv)[c] : Q35_F4_ZERO;
            }
#pragma unroll
            for (int u = 0; u < Q35_AP_X; u++)
                if (tid + u * 256 < C * d4)
                    reinterpret_cast<float4 *>(sX)[tid + u * 256] = rx[u];
#pragma unroll
            for (int u = 0; u < Q35_AP_V; u++)
                reinterpret_cast<float4 *>(sV)[tid + u * 256] = rv[u];
#pragma unroll
            for (int u = 0; u < Q35_AP_M; u++)
                reinterpret_cast<float4 *>(sM)[tid + u * 256] = rm[u];
        }
        if (tid < C)
            sG[tid] = tid < n ? rec(tid)[dk + dv + C] : 0.0f;
        __syncthreads();
        float gn = sG[n - 1];
        if (tid < C)
            sE[tid] = tid < n ? expf(gn - sG[tid]) : 0.0f;
        // V' = U - W S for rows warp + 8 r
        float acc[8];
#pragma unroll
        for (int r = 0; r < 8; r++)
            acc[r] = sV[(warp + 8 * r) * 32 + lane];
        for (int c = 0; c < d4; c++) {
            float s0 = sS[(4 * c) * 32 + lane], s1 = sS[(4 * c + 1) * 32 + lane];
            float s2 = sS[(4 * c + 2) * 32 + lane];
            float s3 = sS[(4 * c + 3) * 32 + lane];
#pragma unroll
            for (int r = 0; r < 8; r++) {
                float4 w4 = reinterpret_cast<const float4 *>(
                    sX + (warp + 8 * r) * dk)[c];
                acc[r] = fmaf(-w4.x, s0, acc[r]);
                acc[r] = fmaf(-w4.y, s1, acc[r]);
                acc[r] = fmaf(-w4.z, s2, acc[r]);
                acc[r] = fmaf(-w4.w, s3, acc[r]);
            }
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < 8; r++)
            sV[(warp + 8 * r) * 32 + lane] = acc[r];
        // Q rows; K^T rows scaled by e^(G_n - G_j) (a lane per key); the
        // loads all in flight first
        {
            float4 rq[Q35_AP_X], rk[Q35_AP_X];
#pragma unroll
            for (int u = 0; u < Q35_AP_X; u++) {
                int x = tid + u * 256;
                int i = x / d4, c = x % d4, j = x % C, ck = x / C;
                if (x < C * d4) {
                    rq[u] = i < n ? reinterpret_cast<const float4 *>(
                                        qk + ((int64_t)(r0 + i) * 2) * kd +
                                        kh * dk)[c]
                                  : Q35_F4_ZERO;
                    rk[u] = j < n ? reinterpret_cast<const float4 *>(
                                        qk + ((int64_t)(r0 + j) * 2 + 1) * kd +
                                        kh * dk)[ck]
                                  : Q35_F4_ZERO;
                }
            }
#pragma unroll
            for (int u = 0; u < Q35_AP_X; u++) {
                int x = tid + u * 256, j = x % C, c = x / C;
                if (x < C * d4) {
                    reinterpret_cast<float4 *>(sX)[x] = rq[u];
                    float4 k = rk[u];
                    float ej = sE[j];
                    sKt[(4 * c) * Q35_WY_KT + j] = __fmul_rn(k.x, ej);
                    sKt[(4 * c + 1) * Q35_WY_KT + j] = __fmul_rn(k.y, ej);
                    sKt[(4 * c + 2) * Q35_WY_KT + j] = __fmul_rn(k.z, ej);
                    sKt[(4 * c + 3) * Q35_WY_KT + j] = __fmul_rn(k.w, ej);
                }
            }
        }
        __syncthreads();
        // O = e^G Q S + M V' (M is zero above its diagonal)
#pragma unroll
        for (int r = 0; r < 8; r++)
            acc[r] = 0.0f;
        for (int c = 0; c < d4; c++) {
            float s0 = sS[(4 * c) * 32 + lane], s1 = sS[(4 * c + 1) * 32 + lane];
            float s2 = sS[(4 * c + 2) * 32 + lane];
            float s3 = sS[(4 * c + 3) * 32 + lane];
#pragma unroll
            for (int r = 0; r < 8; r++) {
                float4 q4 = reinterpret_cast<const float4 *>(
                    sX + (warp + 8 * r) * dk)[c];
                acc[r] = fmaf(q4.x, s0, acc[r]);
                acc[r] = fmaf(q4.y, s1, acc[r]);
                acc[r] = fmaf(q4.z, s2, acc[r]);
                acc[r] = fmaf(q4.w, s3, acc[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < 8; r++)
            acc[r] = __fmul_rn(acc[r], expf(sG[warp + 8 * r]));
        for (int c = 0; c < C / 4; c++) {
            float v0 = sV[(4 * c) * 32 + lane], v1 = sV[(4 * c + 1) * 32 + lane];
            float v2 = sV[(4 * c + 2) * 32 + lane];
            float v3 = sV[(4 * c + 3) * 32 + lane];
#pragma unroll
            for (int r = 0; r < 8; r++) {
                float4 m4 = reinterpret_cast<const float4 *>(
                    sM + (warp + 8 * r) * C)[c];
                acc[r] = fmaf(m4.x, v0, acc[r]);
                acc[r] = fmaf(m4.y, v1, acc[r]);
                acc[r] = fmaf(m4.z, v2, acc[r]);
                acc[r] = fmaf(m4.w, v3, acc[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < 8; r++) {
            int i = warp + 8 * r;
            if (on && i < n)
                o[(int64_t)(st.first + r0 + i) * vd + h * dv + col] = acc[r];
        }
        // S = e^(G_n) S + (e^(G_n - G) K)^T V' for rows warp + 8 r
        float en = expf(gn), sa[16];
#pragma unroll
        for (int r = 0; r < 16; r++)
            sa[r] = warp + 8 * r < dk
                        ? __fmul_rn(en, sS[(warp + 8 * r) * 32 + lane])
                        : 0.0f;
        for (int c = 0; c < C / 4; c++) {
            float v0 = sV[(4 * c) * 32 + lane], v1 = sV[(4 * c + 1) * 32 + lane];
            float v2 = sV[(4 * c + 2) * 32 + lane];
            float v3 = sV[(4 * c + 3) * 32 + lane];
#pragma unroll
            for (int r = 0; r < 16; r++) {
                int e = warp + 8 * r;
                if (e < dk) {
                    float4 k4 = reinterpret_cast<const float4 *>(
                        sKt + e * Q35_WY_KT)[c];
                    sa[r] = fmaf(k4.x, v0, sa[r]);
                    sa[r] = fmaf(k4.y, v1, sa[r]);
                    sa[r] = fmaf(k4.z, v2, sa[r]);
                    sa[r] = fmaf(k4.w, v3, sa[r]);
                }
            }
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < 16; r++)
            if (warp + 8 * r < dk)
                sS[(warp + 8 * r) * 32 + lane] = sa[r];
    }
    __syncthreads();
    for (int x = tid; x < dk * 32; x += blockDim.x) {
        int e = x / 32, l = x % 32;
        if (x0 + l < dv)
            S[q35_gdn_off(e, x0 + l, dk)] = sS[x];
    }
}

// The gated RMSNorm of a chunk's outputs, in place: block (row, group of 8
// value heads) of 8 warps, a warp per head, o_j = (w_j * (o_j * r)) *
// silu(z_j), r = 1 / sqrtf(mean(o^2) + eps) as q35_gdn_rec (its sum over
// the lanes' float4s, then the butterfly: a prompt chunk's own order). dv
// a multiple of 4.
extern "C" __global__ void q35_gdnc_norm(float *o, const float *z, int ldz,
                                         const float *gnorm,
                                         const q35_gpu_stream *streams,
                                         int si, int Hv, int dv, float eps)
{
    Q35_PDL_ENTER();
    const q35_gpu_stream st = streams[si];
    int row = st.first + blockIdx.x, lane = threadIdx.x & 31;
    int h = blockIdx.y * 8 + (threadIdx.x >> 5);
    if (h >= Hv)
        return;
    float4 *o4 = reinterpret_cast<float4 *>(o + ((int64_t)row * Hv + h) * dv);
    const float4 *z4 = reinterpret_cast<const float4 *>(
        z + (int64_t)row * ldz + (int64_t)h * dv);
    // (z4 is read only when ldz % 4 == 0)
    const float4 *g4 = reinterpret_cast<const float4 *>(gnorm);
    int n4 = dv / 4;
    float ss = 0.0f;
    for (int f = lane; f < n4; f += 32) {
        float4 v = o4[f];
        ss = fmaf(v.x, v.x, ss);
        ss = fmaf(v.y, v.y, ss);
        ss = fmaf(v.z, v.z, ss);
        ss = fmaf(v.w, v.w, ss);
    }
    float r = 1.0f / sqrtf(q35_warp_sum(ss) / (float)dv + eps);
    if (ldz & 3) {
        // z rows not 16-byte aligned: a column at a time
        float *of = reinterpret_cast<float *>(o4);
        const float *zf = z + (int64_t)row * ldz + (int64_t)h * dv;
        for (int j = lane; j < dv; j += 32)
            of[j] = __fmul_rn(__fmul_rn(gnorm[j], __fmul_rn(of[j], r)),
                              q35_silu(zf[j]));
        return;
    }
    for (int f = lane; f < n4; f += 32) {
        float4 v = o4[f], zz = z4[f], g = g4[f];
        v.x = __fmul_rn(__fmul_rn(g.x, __fmul_rn(v.x, r)), q35_silu(zz.x));
        v.y = __fmul_rn(__fmul_rn(g.y, __fmul_rn(v.y, r)), q35_silu(zz.y));
        v.z = __fmul_rn(__fmul_rn(g.z, __fmul_rn(v.z, r)), q35_silu(zz.z));
        v.w = __fmul_rn(__fmul_rn(g.w, __fmul_rn(v.w, r)), q35_silu(zz.w));
        o4[f] = v;
    }
}
