// Decode products on tensor cores, y[t] = W x[t] for BF16 weights and any
// number of rows, each weight read once per launch tile of 4 to 32 rows.
// Each activation is split into two BF16 halves, x = hi + lo (q35_split,
// or the one-row kernel itself), and a 16-row MMA tile holds hi of 8 rows
// above lo of the same 8 (a warpgroup's product, sm_90a's wgmma in stages
// of 128 weight rows: hi and lo of each row side by side), so the products
// are those of a float32 x to about 2^-17 relative. A cluster of S blocks
// shares a group of 64 (or 128) weight rows, block s taking the s-th run of
// 128-column slices; the weights
// arrive in a ring of bulk tensor copies (sm_90) from a producer warp, and
// the cluster adds its S partial sums through distributed shared memory in
// rank order.
//
// Rounding and order: a row's result is sum_s (H_s + L_s), H_s and L_s each
// one float32 accumulator carried through block s's columns in order, 16 at
// a time, by the MMA (whose result for a tile row depends on that row
// alone; wgmma's and mma.sync's are the same bits, which
// tools/gemv_mma_bench.cu and tests/gpu check), then added, then the S
// parts added in rank order. S comes from the weight's columns alone, and
// no kernel here orders a row's sum any other way, so a row gets the same bits whatever shares its launch and
// whichever of these kernels runs it.
#include "bulk.cuh"
#include "common.cuh"
#include "mma.cuh"

#include <cuda_bf16.h>

// The cluster: its size, this block's rank, and a float at the same place
// in another block's shared memory.
__device__ __forceinline__ unsigned q35_cluster_size()
{
    unsigned n;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    return n;
}
__device__ __forceinline__ unsigned q35_cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ float q35_dsmem_ld(const float *p, unsigned rank)
{
    uint32_t r = q35_cluster_addr(p, rank);
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];"
                 : "=f"(v)
                 : "r"(r)
                 : "memory");
    return v;
}
// Every thread of every block of the cluster arrives, then waits: writes to
// shared memory before it are visible to the cluster after it.
__device__ __forceinline__ void q35_cluster_arrive()
{
    asm volatile("barrier.cluster.arrive.release;" ::: "memory");
}
__device__ __forceinline__ void q35_cluster_wait()
{
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

// Row t of T rows of x (cols floats) as two BF16 rows hi = bf16(x'),
// lo = bf16(x' - hi), x' = x nw rounded once (with nw; else x), laid out as
// the product's stages read them: for each 64-column block h, the 2T rows
// (row 2t + 1 is t's lo) of 128 bytes at xs + 2T 64 h, each swizzled as a
// tensor copy would (piece p of row r at p ^ (r % 8)); the columns past
// cols up to the 128-column slice's end are zeros. With sso, also the
// row's sum-of-squares parts of these columns (q35_ss_ld(cols) a row),
// from which the product takes the norm's factor. Blocks of 256 threads,
// Q35_SPLIT_COLS columns each.
extern "C" __global__ void __launch_bounds__(256)
    q35_split(const float *x, int ldx, uint16_t *xs, int cols, int T,
              const float *nw, float *sso)
{
    Q35_PDL_ENTER();
    int t = blockIdx.y, tid = threadIdx.x;
    const float *xr = x + (int64_t)t * ldx;
    int padded = (cols + Q35_MMA_KC - 1) / Q35_MMA_KC * Q35_MMA_KC;
    int end = min(padded, (int)(blockIdx.x + 1) * Q35_SPLIT_COLS);
    // (a warp's lanes stay together: the block's columns are whole slices)
#pragma unroll 4
    for (int i = blockIdx.x * Q35_SPLIT_COLS + tid; i < end; i += 256) {
        float xv = i < cols ? xr[i] : 0.0f;
        q35_split_put(xs, T, t, i, nw && i < cols ? __fmul_rn(xv, nw[i]) : xv);
        if (sso) {
            float q = q35_sq16_lanes(xv);
            if ((tid & 15) == 0)
                sso[(int64_t)t * q35_ss_ld(cols) + i / 16] = q;
        }
    }
}

// r = 1 / sqrtf(ss / cols + eps) of the one row x, ss in q35_ss_parts'
// order, into *rs, for threads tid = 0..255 (sync their barrier): 4,096
// columns at a time, thread tid loading columns tid + 256 k (all 16 in
// flight), half-warps making the parts (q35_sq16_lanes) into tmp, and
// each lane of warp 0 adding its own.
template <typename Sync>
__device__ __forceinline__ void q35_row_rs(const float *x, int cols, float eps,
                                           int tid, float *tmp, float *rs,
                                           Sync sync)
{
    int P = q35_ss_n(cols);
    float s = 0.0f;
    for (int c0 = 0; c0 < cols; c0 += 4096) {
        float v[16];
#pragma unroll
        for (int k = 0; k < 16; k++) {
            int c = c0 + tid + 256 * k;
            v[k] = c < cols ? x[c] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < 16; k++) {
            float q = q35_sq16_lanes(v[k]);
            if ((tid & 15) == 0)
                tmp[(tid >> 4) + 16 * k] = q;
        }
        sync();
        if (tid < 32)
            s = q35_ss_add8(tmp, P - c0 / 16, tid, s);
        sync();
    }
    if (tid < 32) {
        s = q35_warp_sum(s);
        if (tid == 0)
            *rs = 1.0f / sqrtf(s / (float)cols + eps);
    }
}

// Block of 288 threads: warps 0..7 consume, warp 8 produces. The cluster
// takes an equal run of output rows in units (16 rows; SwiGLU: 8 rows of
// each weight), in groups of RS / 16 units: a stage holds a group's RS
// weight rows (SwiGLU: RS / 2 of w, then the same of w2) by KS = 16384 /
// RS columns of the block's run, only the boxes holding live rows and
// columns loaded, then those columns of the tile's rows as hi / lo
// (gpu_kernels.h has the layout). Consumer warp w takes stage rows 8 NT w
// .. 8 NT w + 8 NT - 1, NT = RS / 64 tiles of 8 (SwiGLU with NT = 2: rows
// 8w .. 8w + 7 of each weight). At a group's end each block leaves its
// partial sums [8 MT][RS] in shared memory (two buffers: the next group's
// are written while the cluster reads these), and block s of the cluster
// finishes the s-th run of the group's rows: the S partials in rank order,
// then y = v, y += v (mode 1), or y = silu(v) * v2 (SwiGLU).
//
// Normed rows (nw): the halves are those of x nw, and the product's sums
// are multiplied by the row's r = 1 / sqrtf(ss / cols + eps), ss from its
// parts in ssi (q35_ss_parts; the one-row form without ssi sums x itself,
// in the same order). xo: where the halves of the rows the next product
// reads go, u of a SwiGLU, or with nn (mode 1) y nn (or none), and then
// y's parts into sso, so that the next product, normed with nn, launches
// no q35_split.
template <int TOK, bool GLU, int RS, bool RES>
__device__ __forceinline__ void
q35_mma_body(const q35_tmap *wm, const q35_tmap *w2m, const uint16_t *xs,
             float *y, int ldy, int rows, int cols, int T, int mode, int ns,
             const float *x, int ldx, const float *nw, float eps, uint16_t *xo,
             const float *ssi, const float *nn, float *sso)
{
    constexpr int NTOK = TOK;                 // rows of a launch tile
    constexpr int MT = TOK < 8 ? 1 : TOK / 8; // its MMA tiles
    constexpr int KS = 16384 / RS;            // columns of a stage
    constexpr int NQ = KS / 64;               // its 64-column blocks
    constexpr int NT = RS / 64;               // 8-row tiles per warp
    constexpr int UNIT = GLU ? 8 : 16;
    constexpr int OROWS = GLU ? RS / 2 : RS; // output rows of a group
    constexpr int WQ = RS * 128;             // bytes of a block's weights
    constexpr int AQ = 2 * TOK * 128;        // ... and of its activations
    constexpr int BOXB = Q35_MMA_BOX * 128;
    constexpr int NBOX = RS / Q35_MMA_BOX;
    // stages of 128 rows on sm_90a: a warpgroup's product of 64 of them by
    // the tile's 2 NTOK halves (ND accumulators a thread) reads each operand
    // from shared memory once, where the warps' mma.sync each read all the
    // tile's halves
    constexpr bool WG = Q35_HAVE_WGMMA && RS == 128;
    constexpr int ND = WG ? NTOK : 1;
    static_assert(!WG || KS == Q35_MMA_KC, "a warpgroup stage is one slice");
    // the partial sums' buffers (Q35_MMA_NBUF); with one, written again
    // only after a second cluster barrier a group says every block has
    // read it
    constexpr int NBUF = Q35_MMA_NBUF(TOK);
    constexpr bool ONE = NBUF == 1;
    const int sbytes = NQ * (WQ + (RES ? 0 : AQ));
    extern __shared__ __align__(1024) unsigned char q35_mdyn[];
    // the partial sums first (a multiple of 1024 bytes), then the ring,
    // which the swizzle needs on a 1024-byte boundary: the dynamic memory
    // starts on one, after the static barriers' 1024 bytes
    if (q35_smem_addr(q35_mdyn) & 1023u)
        __trap();
    float *part = reinterpret_cast<float *>(q35_mdyn);
    unsigned char *ring = q35_mdyn + NBUF * NTOK * RS * 4;
    __shared__ __align__(8) uint64_t full[Q35_MMA_NS], empty[Q35_MMA_NS];
    __shared__ float rs[NTOK]; // normed rows' factors
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    unsigned S = q35_cluster_size(), rank = q35_cluster_rank();
    int C = (int)(gridDim.x / S), cl = (int)(blockIdx.x / S);
    int nun = (rows + UNIT - 1) / UNIT;
    int ua = (int)((int64_t)nun * cl / C);
    int ub = (int)((int64_t)nun * (cl + 1) / C);
    int oa = ua * UNIT, ob = min(ub * UNIT, rows);
    int ng = (ub - ua + RS / 16 - 1) / (RS / 16);
    // the cluster barriers each thread passes: a group's partials ready
    // (and read, ONE), then the last, that no block leaves while another
    // may read its partials (ONE: the last group's read)
    const int nbar = ONE ? 2 * ng : ng + 1;
    // the block's columns: a run of 128-column slices (the same for every
    // RS), in stages of KS
    int nsl = (cols + Q35_MMA_KC - 1) / Q35_MMA_KC;
    int ca = (int)((int64_t)nsl * rank / S) * Q35_MMA_KC;
    int cb = min((int)((int64_t)nsl * (rank + 1) / S) * Q35_MMA_KC, cols);
    int nk = (cb - ca + KS - 1) / KS;
    int nu = ng * nk;
    int t0 = blockIdx.y * NTOK, nt = min(NTOK, T - t0);
    // a stage's 64-column blocks to load: those holding the run's columns;
    // the warpgroups' stages (one 128-column slice) whole, the weights past
    // cols zeros from the tensor copy, the halves' zeros from the split
    // layout, so that their products add nothing and take no branch
    auto blocks_of = [&](int c0) {
        return WG ? NQ : min(NQ, (cb - c0 + 63) / 64);
    };
    // RES (one row): the block's columns of the row's halves, made here
    unsigned char *resa = ring + (int64_t)ns * sbytes;
    q35_pdl_allow();
    q35_ring_init(full, empty, ns, 8);
    if (warp == 8) {
        if (lane != 0) {
            // the cluster's barriers count every thread
            for (int b = 0; b < nbar; b++) {
                q35_cluster_arrive();
                q35_cluster_wait();
            }
            return;
        }
        // unit i: group i / nk, columns ca + KS (i % nk), into stage i % ns
        auto weights = [&](int i) {
            int st = i % ns;
            int o0 = oa + (i / nk) * OROWS, on = min(OROWS, ob - o0);
            int c0 = ca + (i % nk) * KS, nq = blocks_of(c0);
            unsigned char *sg = ring + (int64_t)st * sbytes;
            if (i >= ns)
                q35_bar_wait(&empty[st], (uint32_t)(i / ns - 1) & 1u);
            int live = 0;
#pragma unroll
            for (int b = 0; b < NBOX; b++) {
                int rb = GLU ? (b % (NBOX / 2)) * Q35_MMA_BOX : b * Q35_MMA_BOX;
                live += rb < on;
            }
            q35_bar_expect(
                &full[st],
                (uint32_t)(nq * (live * BOXB + (RES ? 0 : 2 * nt * 128))));
#pragma unroll
            for (int b = 0; b < NBOX; b++) {
                int rb = GLU ? (b % (NBOX / 2)) * Q35_MMA_BOX : b * Q35_MMA_BOX;
                const q35_tmap *m = GLU && b >= NBOX / 2 ? w2m : wm;
                if (rb < on)
                    for (int q = 0; q < nq; q++)
                        q35_tma2d(sg + q * WQ + b * BOXB, m, c0 + 64 * q,
                                  o0 + rb, &full[st]);
            }
        };
        int pending = 0;
        auto acts = [&](int i) {
            int st = i % ns;
            int c0 = ca + (i % nk) * KS, nq = blocks_of(c0);
            unsigned char *a = ring + (int64_t)st * sbytes + NQ * WQ;
            for (int q = 0; q < (RES ? 0 : nq); q++)
                q35_bulk_load(a + q * AQ,
                              xs + ((int64_t)(c0 / 64 + q) * 2 * T + 2 * t0) *
                                       64,
                              (uint32_t)(2 * nt * 128), &full[st]);
            // the cluster's barrier for a group, once all its stages are
            // on their way (the barrier before is waited for first)
            if (i % nk == nk - 1) {
                if (pending)
                    q35_cluster_wait();
                if (pending && ONE) {
                    // the group before read
                    q35_cluster_arrive();
                    q35_cluster_wait();
                }
                q35_cluster_arrive();
                pending = 1;
            }
        };
        // the first stages' weights (never written by a forward) before
        // the wait for the kernel before, which writes the activations
        q35_tmap_prefetch(wm);
        if (GLU)
            q35_tmap_prefetch(w2m);
        int pre = min(ns, nu);
        for (int i = 0; i < pre; i++)
            weights(i);
        q35_pdl_wait();
        for (int i = 0; i < pre; i++)
            acts(i);
        for (int i = pre; i < nu; i++) {
            weights(i);
            acts(i);
        }
        if (pending)
            q35_cluster_wait();
        q35_cluster_arrive();
        q35_cluster_wait();
        return;
    }
    q35_pdl_wait();
    auto csync = []() { asm volatile("bar.sync 1, 256;" ::: "memory"); };
    // the normed rows' factors, read at the groups' ends (after a cluster
    // barrier)
    if (nw && ssi) {
        int ld = q35_ss_ld(cols), P = q35_ss_n(cols);
        for (int t = warp; t < nt; t += 8) {
            float ss = q35_ss_parts(ssi + (int64_t)(t0 + t) * ld, P, lane);
            if (lane == 0)
                rs[t] = 1.0f / sqrtf(ss / (float)cols + eps);
        }
    } else if (RES && nw) {
        // (the partial sums' buffer is free until the first group's end)
        q35_row_rs(x, cols, eps, tid, part, rs, csync);
    }
    if (RES) {
        // q35_split's arithmetic for the one row, into its layout for T = 1
        int cpad = (cb - ca + Q35_MMA_KC - 1) / Q35_MMA_KC * Q35_MMA_KC;
        uint16_t *ra = reinterpret_cast<uint16_t *>(resa);
        for (int i = tid; i < cpad; i += 256) {
            int c = ca + i;
            float v = 0.0f;
            if (c < cols)
                v = nw ? __fmul_rn(x[c], nw[c]) : x[c];
            q35_split_put(ra, 1, 0, i, v);
        }
        csync();
    }
    // this warp's 8-row tiles, as stage rows
    int jr[NT];
#pragma unroll
    for (int j = 0; j < NT; j++)
        jr[j] = GLU && NT == 2 ? j * (RS / 2) + 8 * warp : 8 * (NT * warp + j);
    int mi = lane >> 3, r8 = lane & 7;
    // this lane's ldmatrix rows: weights (NT = 2: two tiles, one step;
    // NT = 1: one tile, two steps), activations (hi rows even, lo odd)
    int jw = NT == 2 && (mi >> 1) ? jr[NT - 1] : jr[0];
    uint32_t wrow = (uint32_t)(jw + r8) * 128;
    // (a tile of 4 rows: the MMA's rows 4..7 repeat 0..3)
    int arow = 2 * (TOK < 8 ? r8 & 3 : r8) + (mi & 1), ax = arow & 7;
    float acc[MT][NT][4];
    float d[ND];
    int wg = warp >> 2;
    // the warpgroup's products of a stage: 64 rows (wg) by the halves
    auto wrun = [&](uint32_t sb) {
        if constexpr (WG) {
            q35_wg_fence();
#pragma unroll
            for (int s = 0; s < KS / 16; s++) {
                uint32_t off = (uint32_t)(s >> 2), k32 = (uint32_t)(s & 3) * 32;
                q35_wgmma<2 * NTOK>(
                    d,
                    q35_wg_desc(sb + off * WQ + (uint32_t)wg * 64 * 128 + k32),
                    q35_wg_desc(sb + NQ * WQ + off * AQ + k32));
            }
            q35_wg_commit_wait();
            q35_wg_hold<ND>(d);
        }
    };
    auto run = [&](uint32_t sb, int steps, int c0) {
#pragma unroll
        for (int s = 0; s < KS / 16; s += 2) {
            if (s >= steps)
                break;
            // two steps s, s + 1 (s even, so one 64-column block)
            uint32_t wb = sb + (s >> 2) * WQ + wrow;
            uint32_t ab = RES ? q35_smem_addr(resa) +
                                    ((c0 - ca) / 64 + (s >> 2)) * 256 +
                                    arow * 128
                              : sb + NQ * WQ + (s >> 2) * AQ + arow * 128;
            uint32_t b[2][4];
            if (NT == 2) {
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    int p = ((s + u) & 3) * 2 + (mi & 1);
                    q35_ldsm4(wb + ((p ^ r8) << 4), b[u]);
                }
            } else {
                // matrices: step s low, high, step s + 1 low, high
                int p = (s & 3) * 2 + mi;
                uint32_t r4[4];
                q35_ldsm4(wb + ((p ^ r8) << 4), r4);
                b[0][0] = r4[0], b[0][1] = r4[1];
                b[1][0] = r4[2], b[1][1] = r4[3];
            }
#pragma unroll
            for (int u = 0; u < 2; u++) {
                if (s + u >= steps)
                    break;
                int pa = ((s + u) & 3) * 2 + (mi >> 1);
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    uint32_t a[4];
                    q35_ldsm4(ab + m * 16 * 128 + ((pa ^ ax) << 4), a);
                    q35_mma(acc[m][0], a, b[u][0], b[u][1]);
                    if (NT == 2)
                        q35_mma(acc[m][NT - 1], a, b[u][2], b[u][3]);
                }
            }
        }
    };
    // the unit's stage, column slice and group, counted rather than divided
    int st = -1, kk = nk - 1, g = -1;
    uint32_t ph = 0u;
    for (int i = 0; i < nu; i++) {
        if (++st == ns)
            st = 0, ph ^= 1u;
        if (++kk == nk)
            kk = 0, g++;
        if (kk == 0 && WG) {
#pragma unroll
            for (int e = 0; e < ND; e++)
                d[e] = 0.0f;
        } else if (kk == 0) {
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        acc[m][j][e] = 0.0f;
        }
        int c0 = ca + kk * KS;
        int steps = min(KS, cb - c0) / 16;
        uint32_t sb = q35_smem_addr(ring + (int64_t)st * sbytes);
        q35_bar_wait(&full[st], ph);
        if (!WG)
            run(sb, steps, c0);
        else if (GLU || 64 * wg < ob - (oa + g * OROWS)) {
            // (the group's rows past its end: none to make; the warps
            // reconverged after their waits, as wgmma needs)
            __syncwarp();
            wrun(sb);
        }
        __syncwarp();
        if (lane == 0)
            q35_bar_arrive(&empty[st]);
        if (kk < nk - 1)
            continue;
        // the group's end: this block's partial sums, hi + lo (ONE: once
        // the cluster has read the group before's)
        if (ONE && g > 0)
            q35_cluster_wait();
        float *pb = part + (ONE ? 0 : g & 1) * NTOK * RS;
        int q = lane & 3, gr = lane >> 2;
        // (wgmma: token 4 j + q's hi and lo of rows r0 and r0 + 8)
        int r0 = 64 * wg + 16 * (warp & 3) + gr;
#pragma unroll
        for (int j = 0; j < (WG ? NTOK / 4 : 0); j++) {
            float *pr = pb + (4 * j + q) * RS + r0;
            pr[0] = __fadd_rn(d[4 * j], d[4 * j + 1]);
            pr[8] = __fadd_rn(d[4 * j + 2], d[4 * j + 3]);
        }
#pragma unroll
        for (int m = 0; m < (WG ? 0 : MT); m++)
#pragma unroll
            for (int j = 0; j < NT; j++) {
                float *pr = pb + (m * 8 + gr) * RS + jr[j] + 2 * q;
                if (m * 8 + gr < NTOK) {
                    pr[0] = __fadd_rn(acc[m][j][0], acc[m][j][2]);
                    pr[1] = __fadd_rn(acc[m][j][1], acc[m][j][3]);
                }
            }
        q35_cluster_arrive();
        q35_cluster_wait();
        int o0 = oa + g * OROWS, on = min(OROWS, ob - o0);
        // block s's run: whole 16-row units, so that a half-warp holds one
        // sum-of-squares part of a row (the loop is the warp's, for nn)
        int u16 = (on + 15) / 16;
        int ra = min(on, 16 * (int)((int64_t)u16 * rank / S));
        int mine = min(on, 16 * (int)((int64_t)u16 * (rank + 1) / S)) - ra;
        for (int l0 = warp * 32; l0 < mine * nt; l0 += 256) {
            int l = l0 + lane;
            bool in = l < mine * nt;
            int tk = in ? l / mine : 0, r = ra + (in ? l % mine : 0);
            float u = 0.0f;
            if (in) {
                const float *pp = pb + tk * RS + r;
                float v = q35_dsmem_ld(pp, 0u);
                for (unsigned c = 1; c < S; c++)
                    v = __fadd_rn(v, q35_dsmem_ld(pp, c));
                if (nw)
                    v = __fmul_rn(v, rs[tk]);
                float *o = y + (int64_t)(t0 + tk) * ldy + o0 + r;
                if (GLU) {
                    float v2 = q35_dsmem_ld(pp + RS / 2, 0u);
                    for (unsigned c = 1; c < S; c++)
                        v2 = __fadd_rn(v2, q35_dsmem_ld(pp + RS / 2, c));
                    if (nw)
                        v2 = __fmul_rn(v2, rs[tk]);
                    u = __fmul_rn(q35_silu(v), v2);
                    // the halves the next product (down) reads, as
                    // q35_split would make them of u
                    if (xo)
                        q35_split_put(xo, T, t0 + tk, o0 + r, u);
                } else if (mode == 1) {
                    u = __fadd_rn(*o, v);
                } else {
                    u = v;
                }
                *o = u;
            }
            if (!GLU && nn) {
                // the residual row as the next product (normed with nn)
                // reads it: its parts and the halves of y nn
                float q = q35_sq16_lanes(u);
                int c = o0 + r;
                if (in && (lane & 15) == 0)
                    sso[(int64_t)(t0 + tk) * q35_ss_ld(rows) + c / 16] = q;
                if (in && xo)
                    q35_split_put(xo, T, t0 + tk, c, __fmul_rn(u, nn[c]));
            }
        }
        if (ONE)
            q35_cluster_arrive(); // this block has read the group's partials
    }
    // no block leaves while another may read its partial sums
    if (!ONE)
        q35_cluster_arrive();
    q35_cluster_wait();
}

// Bulk copies, clusters and their barriers are sm_90's; the host launches
// these kernels only there, and older targets compile them empty. Two
// blocks an SM is what products of Q35_MMA_ROWS2 rows or more run at;
// saying so lets ptxas keep the main loop in registers (without it, it
// took 40 a thread and spilled).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define Q35_MMA_SM90(...)
#else
#define Q35_MMA_SM90(...) __VA_ARGS__
#endif

#define Q35_MMA(name, TOK, GLU, RS, RES)                                       \
    extern "C" __global__ void __launch_bounds__(288, 2) name(                 \
        const __grid_constant__ q35_tmap wm,                                   \
        const __grid_constant__ q35_tmap w2m, const uint16_t *xs, float *y,    \
        int ldy, int rows, int cols, int T, int mode, int ns, const float *x,  \
        int ldx, const float *nw, float eps, uint16_t *xo, const float *ssi,   \
        const float *nn, float *sso)                                           \
    {                                                                          \
        Q35_MMA_SM90(q35_mma_body<TOK, GLU, RS, RES>(                          \
            &wm, &w2m, xs, y, ldy, rows, cols, T, mode, ns, x, ldx, nw, eps,   \
            xo, ssi, nn, sso));                                                \
    }

Q35_MMA(q35_mma1r, 4, false, 64, true)
Q35_MMA(q35_mma4, 4, false, 64, false)
Q35_MMA(q35_mma8, 8, false, 64, false)
Q35_MMA(q35_mma16, 16, false, 128, false)
Q35_MMA(q35_mma32, 32, false, 128, false)
Q35_MMA(q35_mma4w, 4, false, 128, false)
Q35_MMA(q35_mma8w, 8, false, 128, false)
Q35_MMA(q35_mma1r_glu, 4, true, 64, true)
Q35_MMA(q35_mma4_glu, 4, true, 64, false)
Q35_MMA(q35_mma8_glu, 8, true, 64, false)
Q35_MMA(q35_mma16_glu, 16, true, 128, false)
Q35_MMA(q35_mma32_glu, 32, true, 128, false)
Q35_MMA(q35_mma4w_glu, 4, true, 128, false)
Q35_MMA(q35_mma8w_glu, 8, true, 128, false)
