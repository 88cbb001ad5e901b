// The gated delta rule of the Gated DeltaNet layers (spec 2.5-2.6): the
// recurrence with each row's preparation (l2-normalised q and k, beta, the
// decay) and the gated RMSNorm of its output, and the replay of logged rows
// that commit uses. The state is float32 throughout.
#include "bulk.cuh"
#include "common.cuh"
#include "conv.cuh"
#include "mma.cuh"

#include <cooperative_groups.h>

// The recurrence's block shape: value column j of the head's state S
// [dk, dv] is split over P = ceil(dk / 32) threads, part p holding rows
// [32p, 32p + 32) in registers; thread t is (p = t / vw, j = t % vw) with vw
// = dv rounded up to 32. Sums over the rows (S^T k, S^T q) are each part's
// rows in order (float32 fma), then the P part sums in part order: an order
// fixed by dk alone.
#define Q35_GDN_PART 32

// Rows of a stream whose outputs q35_gdn_rec4 normalises together.
#define Q35_GDN_SEG 16

struct q35_gdn_shape {
    int P, vw, p, j, i0;
    bool on;
};

// Whether this thread's part holds Q35_GDN_PART rows, none past dk: the
// per-row loops then run without a bounds test each (the same operations).
__device__ __forceinline__ bool q35_gdn_full(int dk, const q35_gdn_shape &sh)
{
    return sh.i0 + Q35_GDN_PART <= dk;
}

__device__ __forceinline__ q35_gdn_shape q35_gdn_shape_of(int dk, int dv)
{
    q35_gdn_shape sh;
    sh.P = (dk + Q35_GDN_PART - 1) / Q35_GDN_PART;
    sh.vw = (dv + 31) / 32 * 32;
    sh.p = threadIdx.x / sh.vw;
    sh.j = threadIdx.x % sh.vw;
    sh.i0 = sh.p * Q35_GDN_PART;
    sh.on = sh.j < dv;
    return sh;
}

// A thread's Q35_GDN_PART rows of state s are s[ii * SS]: SS = 1 in
// registers, 32 in shared memory (q35_gdn_rec4s, rows of 32 floats).

// sum over the rows of x[i] * s[i], all parts: every thread of column j
// gets the same value. part: P * vw floats of shared memory.
template <int SS = 1>
__device__ __forceinline__ float q35_gdn_dot(const float *s, const float *x,
                                             int dk, const q35_gdn_shape &sh,
                                             float *part)
{
    float acc = 0.0f;
    if (q35_gdn_full(dk, sh)) {
#pragma unroll
        for (int ii = 0; ii < Q35_GDN_PART; ii++)
            acc = __fmaf_rn(x[sh.i0 + ii], s[ii * SS], acc);
    } else {
#pragma unroll
        for (int ii = 0; ii < Q35_GDN_PART; ii++)
            if (sh.i0 + ii < dk)
                acc = __fmaf_rn(x[sh.i0 + ii], s[ii * SS], acc);
    }
    part[sh.p * sh.vw + sh.j] = acc;
    __syncthreads();
    float tot = 0.0f;
    for (int q = 0; q < sh.P; q++)
        tot = __fadd_rn(tot, part[q * sh.vw + sh.j]);
    __syncthreads(); // part is reused by the next sum
    return tot;
}

// One delta-rule step on this thread's rows of column j: S *= decay;
// kv = S^T k; d = (v - kv) * beta; S += k d^T. Every operation is an
// explicitly rounded intrinsic, so the forward and the commit replay
// (separate kernels) change the state bit for bit alike.
template <int SS = 1>
__device__ __forceinline__ void
q35_gdn_step(float *s, const float *k, float v, float dec, float bet, int dk,
             const q35_gdn_shape &sh, float *part)
{
#pragma unroll
    for (int ii = 0; ii < Q35_GDN_PART; ii++)
        s[ii * SS] = __fmul_rn(s[ii * SS], dec);
    float kv = q35_gdn_dot<SS>(s, k, dk, sh, part);
    float d = __fmul_rn(__fsub_rn(v, kv), bet);
    if (q35_gdn_full(dk, sh)) {
#pragma unroll
        for (int ii = 0; ii < Q35_GDN_PART; ii++)
            s[ii * SS] = __fmaf_rn(k[sh.i0 + ii], d, s[ii * SS]);
    } else {
#pragma unroll
        for (int ii = 0; ii < Q35_GDN_PART; ii++)
            if (sh.i0 + ii < dk)
                s[ii * SS] = __fmaf_rn(k[sh.i0 + ii], d, s[ii * SS]);
    }
}

// This thread's rows of column j of the head's state S (q35_gdn_off);
// rows past dk, and columns past dv, are zeros.
__device__ __forceinline__ void q35_gdn_load(float *s, const float *S, int dk,
                                             int dv, const q35_gdn_shape &sh)
{
    const float *p = S + q35_gdn_off(sh.i0, sh.j, dk);
    if (sh.on && q35_gdn_full(dk, sh)) {
#pragma unroll
        for (int ii = 0; ii < Q35_GDN_PART; ii++)
            s[ii] = p[ii * 32];
        return;
    }
#pragma unroll
    for (int ii = 0; ii < Q35_GDN_PART; ii++)
        s[ii] = sh.on && sh.i0 + ii < dk ? p[ii * 32] : 0.0f;
}

__device__ __forceinline__ void q35_gdn_store(const float *s, float *S, int dk,
                                              int dv, const q35_gdn_shape &sh)
{
    if (!sh.on)
        return;
    float *p = S + q35_gdn_off(sh.i0, sh.j, dk);
    if (q35_gdn_full(dk, sh)) {
#pragma unroll
        for (int ii = 0; ii < Q35_GDN_PART; ii++)
            p[ii * 32] = s[ii];
        return;
    }
#pragma unroll
    for (int ii = 0; ii < Q35_GDN_PART; ii++)
        if (sh.i0 + ii < dk)
            p[ii * 32] = s[ii];
}

// A row's preparation (spec 2.5), by the whole block: q (sqk[0]) and k
// (sqk[1]) of key head kh l2-normalised (q35_qk_norm), db[0] = decay =
// exp(-exp(A_log) * softplus(a + dt_bias)), db[1] = beta = sigmoid(b).
__device__ __forceinline__ void
q35_gdn_prep_row(const float *yr, int kd, int kh, int dk, const float *a,
                 const float *b, int ldab, int row, int h, float na, float dtb,
                 float (*sqk)[256], float *db)
{
    int warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    for (int u = warp; u < 2; u += nw)
        q35_qk_norm(yr + (int64_t)u * kd + (int64_t)kh * dk, dk, u == 0,
                    sqk[u]);
    if (threadIdx.x == 0) {
        float av = __fadd_rn(a[(int64_t)row * ldab + h], dtb);
        db[0] = expf(__fmul_rn(na, q35_softplus(av)));
        db[1] = q35_sigmoid(b[(int64_t)row * ldab + h]);
    }
}

// The recurrence over each stream's rows in order: block (value head h,
// stream) of P * vw threads. Per row first the preparation
// (q35_gdn_prep_row; a, b rows ldab apart); a speculative row logs k, v,
// decay and beta for the commit's replay. Then
// the step, the output o_j = S^T q and the gated RMSNorm over the head's
// dv outputs: (w_j * (o_j * r)) * silu(z_j) (z rows ldz apart), r = 1 /
// sqrtf(mean(o^2) + eps), the mean from q35_block_sum (fixed order).
extern "C" __global__ void __launch_bounds__(512)
    q35_gdn_rec(const float *y, const float *z, float *o, const float *a,
                const float *b, int ldab, const float *neg_a,
                const float *dt_bias, const float *gnorm,
                const q35_gpu_stream *streams, const q35_gpu_row *rows,
                int slot, int Hk, int Hv, int dk, int dv, float eps, int ldz,
                int n_lin, q35_gpu_log lay, uint16_t *xo, int T)
{
    Q35_PDL_ENTER();
    __shared__ float sqk[2][256], part[512], red[32], db[2];
    q35_gdn_shape sh = q35_gdn_shape_of(dk, dv);
    int h = blockIdx.x, j = sh.j;
    const q35_gpu_stream st = streams[blockIdx.y];
    if (st.chunk & 1)
        return; // the chunk kernels' (gdn_prompt.cu)
    int kh = h / (Hv / Hk);
    int kd = Hk * dk, vd = Hv * dv, cd = 2 * kd + vd;
    int64_t hoff = ((int64_t)slot * Hv + h) * q35_gdn_head(dk, dv);
    float *S = reinterpret_cast<float *>(st.state) + hoff;
    float s[Q35_GDN_PART];
    q35_gdn_load(s, S, dk, dv, sh);
    for (int k = 0; k < st.count; k++) {
        int row = st.first + k;
        if (k == st.snap_row)
            q35_gdn_store(s, reinterpret_cast<float *>(st.snap_state) + hoff,
                          dk, dv, sh);
        const float *yr = y + (int64_t)row * cd;
        __syncthreads();
        q35_gdn_prep_row(yr, kd, kh, dk, a, b, ldab, row, h, neg_a[h],
                         dt_bias[h], sqk, db);
        __syncthreads();
        float v = sh.on ? yr[2 * kd + h * dv + j] : 0.0f;
        int li = rows[row].log;
        if (li >= 0) {
            float *log = reinterpret_cast<float *>(st.log) +
                         ((int64_t)li * n_lin + slot) * lay.size;
            if (sh.on && sh.p == 0)
                log[lay.v + h * dv + j] = v;
            if (threadIdx.x == 0) {
                log[lay.decay + h] = db[0];
                log[lay.beta + h] = db[1];
            }
            // one value head of each key head logs its k
            if (h % (Hv / Hk) == 0)
                for (int i = threadIdx.x; i < dk; i += blockDim.x)
                    log[lay.k + kh * dk + i] = sqk[1][i];
        }
        q35_gdn_step(s, sqk[1], v, db[0], db[1], dk, sh, part);
        float oj = q35_gdn_dot(s, sqk[0], dk, sh, part);
        bool out = sh.on && sh.p == 0;
        float ss = q35_block_sum(out ? __fmul_rn(oj, oj) : 0.0f, red);
        float r = 1.0f / sqrtf(ss / (float)dv + eps);
        if (out) {
            int64_t at = (int64_t)row * vd + h * dv + j;
            float u = __fmul_rn(__fmul_rn(gnorm[j], __fmul_rn(oj, r)),
                                q35_silu(z[(int64_t)row * ldz + h * dv + j]));
            o[at] = u;
            if (xo)
                q35_split_put(xo, T, row, h * dv + j, u);
        }
    }
    q35_gdn_store(s, S, dk, dv, sh);
}

// A row's inputs that need nothing computed, which q35_gdn_rec4 loads one
// row ahead: v and z of this thread's column, the raw q and k of the key
// head (warp u < 2 of the block holds q for u = 0, k for u = 1, dk / 32
// values a lane; a one-warp block holds both), a and b (thread 0), the
// row's log index. Rows ldy apart; NQ and QM (at most 2 and 8) bound the
// loops over a lane's q and k at compile time.
struct q35_gdn_in {
    float v, zv, a, b;
    float qk[2][8];
    int li;
};

template <int NQ = 2, int QM = 8>
__device__ __forceinline__ void
q35_gdn_fetch(q35_gdn_in &in, const float *y, int ldy, const float *z, int ldz,
              const float *a, const float *b, int ldab, const q35_gpu_row *rows,
              int row, int kd, int kh, int dk, int dv, int h, int j, bool on,
              bool out)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int nw = (blockDim.x + 31) >> 5;
    const float *yr = y + (int64_t)row * ldy;
    in.v = on ? yr[2 * kd + h * dv + j] : 0.0f;
    in.zv = out ? z[(int64_t)row * ldz + h * dv + j] : 0.0f;
    in.li = rows[row].log;
#pragma unroll
    for (int q = 0; q < NQ; q++) {
        int u = warp + q * nw;
        if (u >= 2)
            break;
        const float *x = yr + (int64_t)u * kd + (int64_t)kh * dk;
#pragma unroll
        for (int m = 0; m < QM; m++) {
            int i = lane + 32 * m;
            in.qk[q][m] = i < dk ? x[i] : 0.0f;
        }
    }
    if (threadIdx.x == 0) {
        in.a = a[(int64_t)row * ldab + h];
        in.b = b[(int64_t)row * ldab + h];
    }
}

// q35_gdn_prep_row from a row's fetched inputs, the same operations in
// the same order (q35_qk_norm's per lane, then the butterfly). NQ, QM:
// q35_gdn_fetch's.
template <int NQ = 2, int QM = 8>
__device__ __forceinline__ void q35_gdn_prep_in(const q35_gdn_in &in, int dk,
                                                float na, float dtb,
                                                float (*sqk)[256], float *db)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int nw = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int q = 0; q < NQ; q++) {
        int u = warp + q * nw;
        if (u >= 2)
            break;
        float ss = 0.0f;
#pragma unroll
        for (int m = 0; m < QM; m++)
            if (lane + 32 * m < dk)
                ss = fmaf(in.qk[q][m], in.qk[q][m], ss);
        ss = q35_warp_sum(ss);
        float r = 1.0f / sqrtf(ss + 1e-6f);
        float qscale = 1.0f / sqrtf((float)dk);
#pragma unroll
        for (int m = 0; m < QM; m++) {
            int i = lane + 32 * m;
            if (i < dk) {
                float n = __fmul_rn(in.qk[q][m], r);
                sqk[u][i] = u == 0 ? __fmul_rn(n, qscale) : n;
            }
        }
    }
    if (threadIdx.x == 0) {
        float av = __fadd_rn(in.a, dtb);
        db[0] = expf(__fmul_rn(na, q35_softplus(av)));
        db[1] = q35_sigmoid(in.b);
    }
}

// The GDN conv of this thread's channels run where q35_gdn_rec4 takes a
// row's raw inputs (its CV forms): the v of its column (every part: the
// same operations) and the q and k values it holds, each with its tail and
// taps in registers (q35_conv_step with K = 4, as q35_conv runs it).
// Blocks of several value heads and columns share a q/k channel: one owns
// its tail, snapshot and log (own_qk), and part 0 owns v's (own_v).
#define Q35_GDN_CV_KT 3
template <int NQ, int QM> struct q35_gdn_cv {
    float vt[Q35_MAX_TAIL], vw[Q35_MAX_TAIL + 1];
    float t[NQ][QM][Q35_MAX_TAIL], w[NQ][QM][Q35_MAX_TAIL + 1];
    const float *cw;
    float *tail;
    int64_t vc, qc; // v's channel; key head kh's first q channel
    int kd, dk, cd;
    bool v_on, own_v, own_qk;

    // Channel of value (q, m), or -1 where this lane holds none.
    __device__ __forceinline__ int64_t ch(int q, int m) const
    {
        int warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
        int u = warp + q * nw, i = (threadIdx.x & 31) + 32 * m;
        return u < 2 && i < dk ? qc + (int64_t)u * kd + i : -1;
    }
    __device__ __forceinline__ void load()
    {
        constexpr int kt = Q35_GDN_CV_KT;
        if (v_on) {
            q35_tail_get(vt, tail, kt, cd, vc);
#pragma unroll
            for (int j = 0; j <= kt; j++)
                vw[j] = cw[vc * (kt + 1) + j];
        }
#pragma unroll
        for (int q = 0; q < NQ; q++)
#pragma unroll
            for (int m = 0; m < QM; m++) {
                int64_t c = ch(q, m);
                if (c < 0)
                    continue;
                q35_tail_get(t[q][m], tail, kt, cd, c);
#pragma unroll
                for (int j = 0; j <= kt; j++)
                    w[q][m][j] = cw[c * (kt + 1) + j];
            }
    }
    // Row k's raw inputs in `in` through the conv, as q35_conv_row_at
    // takes them (the tails into the snapshot, the inputs into the log,
    // by their owners).
    __device__ __forceinline__ void run(q35_gdn_in &in, int k,
                                        const q35_gpu_stream &st, int slot,
                                        int n_lin, const q35_gpu_log &lay)
    {
        constexpr int kt = Q35_GDN_CV_KT;
        if (v_on)
            in.v = q35_conv_row_at(vw, vt, kt, in.v, own_v ? st.snap_row : -1,
                                   st.snap_conv, st.log, own_v ? in.li : -1, k,
                                   slot, cd, vc, n_lin, lay.size, lay.conv);
#pragma unroll
        for (int q = 0; q < NQ; q++)
#pragma unroll
            for (int m = 0; m < QM; m++) {
                int64_t c = ch(q, m);
                if (c >= 0)
                    in.qk[q][m] = q35_conv_row_at(
                        w[q][m], t[q][m], kt, in.qk[q][m],
                        own_qk ? st.snap_row : -1, st.snap_conv, st.log,
                        own_qk ? in.li : -1, k, slot, cd, c, n_lin, lay.size,
                        lay.conv);
            }
    }
    // The tails back, by their owners, once every reader has read them.
    __device__ __forceinline__ void store() const
    {
        constexpr int kt = Q35_GDN_CV_KT;
        if (v_on && own_v)
            q35_tail_put(vt, tail, kt, cd, vc);
        if (!own_qk)
            return;
#pragma unroll
        for (int q = 0; q < NQ; q++)
#pragma unroll
            for (int m = 0; m < QM; m++) {
                int64_t c = ch(q, m);
                if (c >= 0)
                    q35_tail_put(t[q][m], tail, kt, cd, c);
            }
    }
};

// q35_gdn_rec split over a cluster of Q35_GDN_CTAS blocks per value head
// (sm_90): block c of the cluster takes value columns [32c, 32c + 32), so a
// head's 64 KiB of state is read and written by 4 SMs instead of one. The
// columns of the delta rule are independent; only the gated RMSNorm needs
// the whole head, and its sum of squares is taken as q35_block_sum takes it
// in q35_gdn_rec: each 32-column group's butterfly, then the group sums
// (lanes 0..3, zeros above) through the same butterfly, so both kernels
// give the same bits. Block (P * 32 threads), grid (Hv * Q35_GDN_CTAS,
// streams); every per-row load that needs nothing computed is issued a row
// ahead (q35_gdn_fetch).
// Clusters are sm_90's; the host launches this kernel only there, and older
// targets compile it empty.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define Q35_GDN_CLUSTER
#define Q35_GDN_CLUSTER_CV(cv)
#else
#define Q35_GDN_CLUSTER __cluster_dims__(Q35_GDN_CTAS, 1, 1)
#define Q35_GDN_CLUSTER_CV(cv) __cluster_dims__(Q35_GDN_CTAS * (cv), 1, 1)
#endif
// v into block rank's copy of *p (shared memory), counted on its *bar.
__device__ __forceinline__ void q35_gdn_send(float *p, uint64_t *bar,
                                             unsigned rank, float v)
{
    uint32_t ra = q35_cluster_addr(p, rank), rb = q35_cluster_addr(bar, rank);
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 "
                 "[%0], %1, [%2];" ::"r"(ra),
                 "r"(__float_as_uint(v)), "r"(rb)
                 : "memory");
}

// q35_gdn_rec4s's state (q35_gdn_sst) out to dst, one bulk copy issued by
// thread 0 after every thread's writes (has: the block has columns).
__device__ __forceinline__ void q35_gdn_sst_out(float *dst, int dk, bool has)
{
    extern __shared__ float q35_gdn_sst[];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0 && has)
        q35_bulk_store(dst, q35_gdn_sst, (uint32_t)dk * 128u);
}

// CV > 0: the conv runs here (q35_gdn_cv) on raw inputs y (rows ldy
// apart), the cluster CV heads' blocks: every block that reads a key
// head's q and k channels (Hv / Hk = CV). NQ, QM: q35_gdn_fetch's.
template <bool AHEAD, bool SM, int CV = 0, int NQ = 2, int QM = 8>
__device__ __forceinline__ void
q35_gdn_rec4_body(const float *y, const float *z, float *o, const float *a,
                  const float *b, int ldab, const float *neg_a,
                  const float *dt_bias, const float *gnorm,
                  const q35_gpu_stream *streams, const q35_gpu_row *rows,
                  int slot, int Hk, int Hv, int dk, int dv, float eps, int ldz,
                  int n_lin, q35_gpu_log lay, uint16_t *xo, int T,
                  const float *cw, int ldy)
{
    static_assert(CV == 0 || (AHEAD && !SM), "the conv takes the AHEAD form");
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    q35_pdl_allow();
    __shared__ float sqk[2][256], part[8 * 32], db[2];
    // a segment's rows held for their gated RMSNorm, which needs the whole
    // head: warp 0's o and z, and every block's group sums of squares, sent
    // by each block to all (q35_gdn_send) and counted on gbar, by segment
    // parity (a block may send the next segment's while another still
    // reads this one's)
    __shared__ float so[Q35_GDN_SEG][32], sz[Q35_GDN_SEG][32];
    __shared__ float gss[2][Q35_GDN_SEG][Q35_GDN_CTAS];
    // lbar: SM's state copy
    __shared__ __align__(8) uint64_t gbar[2], lbar;
    // c: the column group; the head's blocks are ranks base..base + 3
    // (the plain rank without the conv: its modulo alone made the shared-
    // memory form spill at 64 registers)
    int c = CV > 0 ? (int)cl.block_rank() % Q35_GDN_CTAS
                   : (int)cl.block_rank();
    unsigned base = CV > 0 ? cl.block_rank() - (unsigned)c : 0u;
    if constexpr (CV == 0)
        ldy = 2 * Hk * dk + Hv * dv; // the conv's output rows
    q35_gdn_shape sh;
    sh.P = (dk + Q35_GDN_PART - 1) / Q35_GDN_PART;
    sh.vw = 32;
    sh.p = threadIdx.x / 32;
    sh.j = c * 32 + (int)(threadIdx.x % 32);
    sh.i0 = sh.p * Q35_GDN_PART;
    sh.on = sh.j < dv;
    int h = blockIdx.x / Q35_GDN_CTAS, j = sh.j;
    int lane = threadIdx.x & 31;
    // before the wait: the stream table (uploaded before the forward) and
    // the state, which no kernel of this forward before this one writes
    // (Q35_PDL_FIRST)
    const q35_gpu_stream st = streams[blockIdx.y];
    // the whole cluster takes this branch (one stream)
    if (st.chunk & 1) {
        q35_pdl_wait();
        return;
    }
    if (threadIdx.x == 0) {
        q35_bar_init(&gbar[0], 1);
        q35_bar_init(&gbar[1], 1);
        q35_bar_init(&lbar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    // peers send only once every block's barriers exist (the wait is
    // after q35_pdl_wait)
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    int kh = h / (Hv / Hk);
    int kd = Hk * dk, vd = Hv * dv, cd = 2 * kd + vd;
    int64_t hoff = ((int64_t)slot * Hv + h) * q35_gdn_head(dk, dv);
    float *S = reinterpret_cast<float *>(st.state) + hoff;
    // part-local shape for the dots: column index within the group
    q35_gdn_shape lsh = sh;
    lsh.j = threadIdx.x % 32;
    // SM: the state in shared memory (q35_gdn_sst_bytes), the block's 32
    // columns one contiguous run (q35_gdn_off; the host takes this form
    // only where dk is a multiple of 32): one bulk copy in, one out, no
    // registers held while they fly
    extern __shared__ float q35_gdn_sst[];
    constexpr int SS = SM ? 32 : 1;
    float sreg[Q35_GDN_PART];
    float *s = sreg;
    float *gS = S + (int64_t)c * 32 * dk;
    bool has = c * 32 < dv;
    if constexpr (SM) {
        s = q35_gdn_sst + sh.i0 * 32 + lane;
        if (threadIdx.x == 0 && has) {
            q35_bar_expect(&lbar, (uint32_t)dk * 128u);
            q35_bulk_load(q35_gdn_sst, gS, (uint32_t)dk * 128u, &lbar);
        }
    } else {
        q35_gdn_load(s, S, dk, dv, sh);
    }
    bool out = sh.on && sh.p == 0;
    float gv = out ? gnorm[j] : 0.0f;
    // the head's parameters (thread 0 prepares each row's decay)
    float na = threadIdx.x == 0 ? neg_a[h] : 0.0f;
    float dtb = threadIdx.x == 0 ? dt_bias[h] : 0.0f;
    // the conv's tails and taps: no kernel of this forward before this one
    // writes a tail (the host runs no q35_conv for it)
    q35_gdn_cv<NQ, QM> cv;
    if constexpr (CV > 0) {
        cv.cw = cw;
        cv.tail = q35_conv_tail(st.conv, slot, Q35_GDN_CV_KT, cd);
        cv.vc = 2 * kd + (int64_t)h * dv + j;
        cv.qc = (int64_t)kh * dk;
        cv.kd = kd, cv.dk = dk, cv.cd = cd;
        cv.v_on = sh.on;
        cv.own_v = out;
        cv.own_qk = c == 0 && h % CV == 0;
        if (st.count > 0)
            cv.load();
    }
    q35_pdl_wait();
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    if (SM && has)
        q35_bar_wait(&lbar, 0);
    // AHEAD: each row's inputs are loaded while the row before is computed
    q35_gdn_in cur, nxt;
    if (AHEAD && st.count > 0)
        q35_gdn_fetch<NQ, QM>(cur, y, ldy, z, ldz, a, b, ldab, rows,
                              st.first, kd, kh, dk, dv, h, j, sh.on, out);
    for (int k = 0; k < st.count; k++) {
        int row = st.first + k;
        const float *yr = y + (int64_t)row * ldy;
        float v, zv;
        int li;
        if (AHEAD) {
            if (k + 1 < st.count)
                q35_gdn_fetch<NQ, QM>(nxt, y, ldy, z, ldz, a, b, ldab, rows,
                                      row + 1, kd, kh, dk, dv, h, j, sh.on,
                                      out);
            if constexpr (CV > 0)
                cv.run(cur, k, st, slot, n_lin, lay);
            v = cur.v, zv = cur.zv, li = cur.li;
        } else {
            v = sh.on ? yr[2 * kd + h * dv + j] : 0.0f;
            zv = out ? z[(int64_t)row * ldz + h * dv + j] : 0.0f;
            li = rows[row].log;
        }
        if (k == st.snap_row) {
            float *snap = reinterpret_cast<float *>(st.snap_state) + hoff;
            if constexpr (SM) {
                // read out before the step writes the state again
                q35_gdn_sst_out(snap + (int64_t)c * 32 * dk, dk, has);
                if (threadIdx.x == 0 && has)
                    asm volatile("cp.async.bulk.wait_group.read 0;" ::
                                     : "memory");
                __syncthreads();
            } else {
                q35_gdn_store(s, snap, dk, dv, sh);
            }
        }
        __syncthreads();
        if (AHEAD)
            q35_gdn_prep_in<NQ, QM>(cur, dk, na, dtb, sqk, db);
        else
            q35_gdn_prep_row(yr, kd, kh, dk, a, b, ldab, row, h, na, dtb, sqk,
                             db);
        __syncthreads();
        if (li >= 0) {
            float *log = reinterpret_cast<float *>(st.log) +
                         ((int64_t)li * n_lin + slot) * lay.size;
            if (out)
                log[lay.v + h * dv + j] = v;
            if (c == 0 && threadIdx.x == 0) {
                log[lay.decay + h] = db[0];
                log[lay.beta + h] = db[1];
            }
            if (c == 0 && h % (Hv / Hk) == 0)
                for (int i = threadIdx.x; i < dk; i += blockDim.x)
                    log[lay.k + kh * dk + i] = sqk[1][i];
        }
        q35_gdn_step<SS>(s, sqk[1], v, db[0], db[1], dk, lsh, part);
        // the last row's state is stored at once: its stores drain while
        // the output and the norm are computed
        if (k + 1 == st.count) {
            if constexpr (SM) {
                q35_gdn_sst_out(gS, dk, has);
            } else {
                q35_gdn_store(s, S, dk, dv, sh);
            }
        }
        float oj = q35_gdn_dot<SS>(s, sqk[0], dk, lsh, part);
        // warp 0 holds the group's 32 columns (part 0)
        float ws = q35_warp_sum(out ? __fmul_rn(oj, oj) : 0.0f);
        int e = k % Q35_GDN_SEG, seg = k / Q35_GDN_SEG, par = seg & 1;
        if (threadIdx.x == 0) {
            if (e == 0) {
                int n = min(Q35_GDN_SEG, st.count - k);
                q35_bar_expect(&gbar[par], (uint32_t)(n * Q35_GDN_CTAS * 4));
            }
            for (int rk = 0; rk < Q35_GDN_CTAS; rk++)
                q35_gdn_send(&gss[par][e][c], &gbar[par], base + (unsigned)rk,
                             ws);
        }
        if (threadIdx.x < 32)
            so[e][lane] = oj, sz[e][lane] = zv;
        // the norms of a segment's rows once every block's sums are in: no
        // cluster barrier, whose release would wait for the state's stores
        if (e == Q35_GDN_SEG - 1 || k + 1 == st.count) {
            q35_bar_wait(&gbar[par], (uint32_t)(seg >> 1) & 1u);
            int r0 = k - e;
            for (int q = 0; q <= e; q++) {
                float g4 = lane < Q35_GDN_CTAS ? gss[par][q][lane] : 0.0f;
                float ss = q35_warp_sum(g4);
                float r = 1.0f / sqrtf(ss / (float)dv + eps);
                if (out) {
                    int64_t at = (int64_t)(st.first + r0 + q) * vd + h * dv + j;
                    float u =
                        __fmul_rn(__fmul_rn(gv, __fmul_rn(so[q][lane], r)),
                                  q35_silu(sz[q][lane]));
                    o[at] = u;
                    // the halves out_proj reads (xo: q35_gpu.xs_src)
                    if (xo)
                        q35_split_put(xo, T, st.first + r0 + q, h * dv + j, u);
                }
            }
        }
        if (AHEAD)
            cur = nxt;
    }
    // the state's copy out has read shared memory before the block leaves
    // (its writes are the grid's, seen by the kernels that wait for it)
    if (SM && threadIdx.x == 0 && has && st.count > 0)
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    // no block leaves while a peer's sends to it may be in flight; relaxed:
    // the state's stores need no ordering here. With the conv, every
    // block's reads of the tails come before their owners' writes.
    if constexpr (CV > 0) {
        asm volatile("barrier.cluster.arrive.aligned;\n"
                     "barrier.cluster.wait.aligned;" ::
                         : "memory");
        if (st.count > 0)
            cv.store();
    } else {
        asm volatile("barrier.cluster.arrive.relaxed.aligned;\n"
                     "barrier.cluster.wait.aligned;" ::
                         : "memory");
    }
#endif
}

// Two forms of the same steps, chosen by the host from the round's shape:
// loads a row ahead with registers to spare (for windows, and rounds of one
// or two streams: one wave of blocks), and the state in shared memory in at
// most 64 registers (8 blocks of 128 threads an SM, for many streams of a
// row each: more of the round's state in flight than the register form at
// 4 blocks an SM, measured 2-4% faster over 8 and 32 streams).
#define Q35_GDN_REC4(name, CLUSTER, MINB, ...)                                 \
    extern "C" __global__ void CLUSTER __launch_bounds__(Q35_GDN_PART * 8,     \
                                                         MINB)                 \
        name(const float *y, const float *z, float *o, const float *a,         \
             const float *b, int ldab, const float *neg_a,                     \
             const float *dt_bias, const float *gnorm,                         \
             const q35_gpu_stream *streams, const q35_gpu_row *rows, int slot, \
             int Hk, int Hv, int dk, int dv, float eps, int ldz, int n_lin,    \
             q35_gpu_log lay, uint16_t *xo, int T, const float *cw, int ldy)   \
    {                                                                          \
        q35_gdn_rec4_body<__VA_ARGS__>(y, z, o, a, b, ldab, neg_a, dt_bias,    \
                                       gnorm, streams, rows, slot, Hk, Hv, dk, \
                                       dv, eps, ldz, n_lin, lay, xo, T, cw,    \
                                       ldy);                                   \
    }
Q35_GDN_REC4(q35_gdn_rec4, Q35_GDN_CLUSTER, 1, true, false)
Q35_GDN_REC4(q35_gdn_rec4s, Q35_GDN_CLUSTER, 4, false, true)
// ... with the conv (one stream's rounds, and windows, where its own launch
// is a step's largest gap): clusters of one or two value heads per key
// head, blocks of 2..4 warps (dk 33..128) or of one (dk <= 32)
Q35_GDN_REC4(q35_gdn_rec4cv1, Q35_GDN_CLUSTER_CV(1), 1, true, false, 1, 1, 4)
Q35_GDN_REC4(q35_gdn_rec4cv2, Q35_GDN_CLUSTER_CV(2), 1, true, false, 2, 1, 4)
Q35_GDN_REC4(q35_gdn_rec4cv1w, Q35_GDN_CLUSTER_CV(1), 1, true, false, 1, 2, 1)
Q35_GDN_REC4(q35_gdn_rec4cv2w, Q35_GDN_CLUSTER_CV(2), 1, true, false, 2, 2, 1)

// commit(kept) on one cache: each GDN layer's state restarts from its
// snapshot and takes the first `kept` logged steps. Block (value head,
// layer), the shape of q35_gdn_rec.
extern "C" __global__ void __launch_bounds__(512)
    q35_gdn_replay(float *state, const float *snap, const float *log, int kept,
                   int Hk, int Hv, int dk, int dv, int n_lin, q35_gpu_log lay)
{
    Q35_PDL_ENTER();
    __shared__ float sk[256], part[512];
    q35_gdn_shape sh = q35_gdn_shape_of(dk, dv);
    int h = blockIdx.x, l = blockIdx.y;
    int kh = h / (Hv / Hk);
    int64_t hoff = ((int64_t)l * Hv + h) * q35_gdn_head(dk, dv);
    float s[Q35_GDN_PART];
    q35_gdn_load(s, snap + hoff, dk, dv, sh);
    for (int r = 0; r < kept; r++) {
        const float *e = log + ((int64_t)r * n_lin + l) * lay.size;
        __syncthreads();
        for (int i = threadIdx.x; i < dk; i += blockDim.x)
            sk[i] = e[lay.k + kh * dk + i];
        __syncthreads();
        float v = sh.on ? e[lay.v + h * dv + sh.j] : 0.0f;
        q35_gdn_step(s, sk, v, e[lay.decay + h], e[lay.beta + h], dk, sh, part);
    }
    q35_gdn_store(s, state + hoff, dk, dv, sh);
}
