// What the kernels that stream weights through a ring of shared memory
// share (sm_90): an address's shared-window offset, a transaction barrier's
// init / expected bytes / arrival / wait on a phase, one bulk copy in or
// out or tensor-map box, the ring's barriers, and the consumer warps' copy
// of the row and end of a group of rows.
#ifndef QWEN35_CUDA_BULK_CUH
#define QWEN35_CUDA_BULK_CUH

#include <stdint.h>

#include "common.cuh"

__device__ __forceinline__ uint32_t q35_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

// The shared::cluster address of *p in the block of cluster rank `rank`.
__device__ __forceinline__ uint32_t q35_cluster_addr(const void *p,
                                                     unsigned rank)
{
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(r)
                 : "r"(q35_smem_addr(p)), "r"(rank));
    return r;
}

__device__ __forceinline__ void q35_bar_init(uint64_t *bar, int count)
{
    asm volatile(
        "mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(q35_smem_addr(bar)),
        "r"(count)
        : "memory");
}

__device__ __forceinline__ void q35_bar_expect(uint64_t *bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                     q35_smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void q35_bar_wait(uint64_t *bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(q35_smem_addr(bar)), "r"(parity)
                     : "memory");
    } while (!done);
}

// bytes (a multiple of 16) from global src to shared dst, counted on bar.
__device__ __forceinline__ void q35_bulk_load(void *dst, const void *src,
                                              uint32_t bytes, uint64_t *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
                 "bytes [%0], [%1], %2, [%3];" ::"r"(q35_smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(q35_smem_addr(bar))
                 : "memory");
}

// bytes (a multiple of 16) from shared src to global dst, in a bulk group
// of its own (cp.async.bulk.wait_group before src is written again or the
// block leaves); the caller fences the threads' writes to src
// (fence.proxy.async) and syncs them first.
__device__ __forceinline__ void q35_bulk_store(void *dst, const void *src,
                                               uint32_t bytes)
{
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
                 "cp.async.bulk.commit_group;" ::"l"(dst),
                 "r"(q35_smem_addr(src)), "r"(bytes)
                 : "memory");
}

// A tensor map (a kernel's __grid_constant__ parameter) into the cache
// before its first copy.
__device__ __forceinline__ void q35_tmap_prefetch(const q35_tmap *map)
{
    asm volatile(
        "prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map))
        : "memory");
}

// A box of a 2-D tensor map at columns c, rows r into dst (128-aligned,
// 1024 for the 128-byte swizzle), counted on bar.
__device__ __forceinline__ void q35_tma2d(void *dst, const q35_tmap *map, int c,
                                          int r, uint64_t *bar)
{
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile."
        "mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
            q35_smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c), "r"(r),
        "r"(q35_smem_addr(bar))
        : "memory");
}

__device__ __forceinline__ void q35_bar_arrive(uint64_t *bar)
{
    asm volatile(
        "mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(q35_smem_addr(bar))
        : "memory");
}

// A ring's ns stage barriers: full[k] completed by its copies' bytes after
// one arrival (the producer's), empty[k] by the consumers' `warps`
// arrivals; thread 0 makes them, then the block syncs.
__device__ __forceinline__ void q35_ring_init(uint64_t *full, uint64_t *empty,
                                              int ns, int warps)
{
    if (threadIdx.x == 0) {
        for (int k = 0; k < ns; k++) {
            q35_bar_init(&full[k], 1);
            q35_bar_init(&empty[k], warps);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
}

// The 8 consumer warps' own barrier (the producer warp has left).
__device__ __forceinline__ void q35_consumers_sync()
{
    asm volatile("bar.sync 1, 256;" ::: "memory");
}

// Where column c of the row lies in the consumers' copy: in order, or
// (q35_swz32) each 32-column chunk's 16-byte pieces rotated by the chunk's
// index, so that lanes reading a chunk each hit other banks.
struct q35_flat {
    __device__ int operator()(int c) const
    {
        return c;
    }
};
struct q35_swz32 {
    __device__ int operator()(int c) const
    {
        return (c & ~31) | ((((c >> 2) ^ (c >> 5)) & 7) << 2) | (c & 3);
    }
};

// The consumers' copy xs of row xr (cols floats, cols % 4 == 0), placed by
// at, its loads 4 float4 a thread at a time in flight (the row is the last
// kernel's output, a round trip to L2 away). With nw the row is normed as
// q35_norm_rs norms it: ss as q35_ss4 takes it, the warps' butterfly, the
// 8 warps in order, r = 1 / sqrtf(ss / cols + eps), (x r) nw rounded per
// multiply. bred: 8 floats of shared memory.
template <typename At>
__device__ __forceinline__ void q35_stage_row(const float *xr, float *xs,
                                              int cols, const float *nw,
                                              float eps, float *bred, At at)
{
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int n4 = cols / 4;
    float ss =
        q35_ss4(reinterpret_cast<const float4 *>(xr), n4, [&](int f, float4 v) {
            *reinterpret_cast<float4 *>(xs + at(4 * f)) = v;
        });
    if (nw) {
        ss = q35_warp_sum(ss);
        if (lane == 0)
            bred[warp] = ss;
        q35_consumers_sync();
        float s2 = lane < 8 ? bred[lane] : 0.0f;
        s2 = q35_warp_sum(s2);
        float r = 1.0f / sqrtf(s2 / (float)cols + eps);
        // each thread norms the float4s it stored
        for (int f0 = tid; f0 < n4; f0 += 4 * 256) {
            float4 g[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (f0 + u * 256 < n4)
                    g[u] = __ldg(reinterpret_cast<const float4 *>(nw) + f0 +
                                 u * 256);
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (f0 + u * 256 < n4) {
                    float4 *p =
                        reinterpret_cast<float4 *>(xs + at(4 * (f0 + u * 256)));
                    float4 v = *p;
                    v.x = __fmul_rn(__fmul_rn(v.x, r), g[u].x);
                    v.y = __fmul_rn(__fmul_rn(v.y, r), g[u].y);
                    v.z = __fmul_rn(__fmul_rn(v.z, r), g[u].z);
                    v.w = __fmul_rn(__fmul_rn(v.w, r), g[u].w);
                    *p = v;
                }
        }
    }
    q35_consumers_sync();
}

// A consumer warp's rows of a stage: row(m) for its rows j = row0 + m G
// (m < M) that are live (j < live; with GLU, rows j and j + RPW are a row
// of w and of w2). A whole group, or half or a quarter of one (how blocks
// of a few boxes end), runs as straight-line code, so that the rows' FMA
// chains interleave; any other count one row at a time.
template <int M, typename F>
__device__ __forceinline__ void q35_rows_prefix(int mv, F &&row)
{
    if (mv >= M) {
#pragma unroll
        for (int m = 0; m < M; m++)
            row(m);
    } else if (M >= 2 && mv == M / 2) {
#pragma unroll
        for (int m = 0; m < M / 2; m++)
            row(m);
    } else if (M >= 4 && mv == M / 4) {
#pragma unroll
        for (int m = 0; m < M / 4; m++)
            row(m);
    } else {
#pragma unroll
        for (int m = 0; m < M; m++)
            if (m < mv)
                row(m);
    }
}
template <int M, int G, int RPW, bool GLU, typename F>
__device__ __forceinline__ void q35_rows_live(int row0, int live, F &&row)
{
    if (!GLU) {
        q35_rows_prefix<M>((live - row0 + G - 1) / G, row);
    } else if (live == RPW) {
        q35_rows_prefix<M>(M, row);
    } else {
        // the live rows of w and of w2 are no prefix
#pragma unroll
        for (int m = 0; m < M; m++) {
            int j = row0 + m * G;
            if ((j < RPW ? j : j - RPW) < live)
                row(m);
        }
    }
}

// The end of a group of rows in a ring kernel: each consumer warp's M row
// sums over its lanes (the fixed butterfly) into red[row][part] (rows
// row0, row0 + G, ...), then thread j < live adds row j's WPR parts in
// part order and stores yo[j] = s, yo[j] += s (mode 1), or silu(s) s2
// (GLU, s2 from stage row RPW + j). The accumulators restart at 0. It
// returns whether this thread stored a row with mode 0, that row's s in
// *out (for an epilogue of the caller's).
template <int M, int G, int WPR, int RPW, bool GLU>
__device__ __forceinline__ bool q35_ring_rows(float *acc, float (*red)[WPR],
                                              int row0, int part, int live,
                                              float *yo, int mode, float *out)
{
    int tid = threadIdx.x, lane = tid & 31;
#pragma unroll
    for (int m = 0; m < M; m++) {
        float v = q35_warp_sum(acc[m]);
        if (lane == 0)
            red[row0 + m * G][part] = v;
        acc[m] = 0.0f;
    }
    q35_consumers_sync();
    if (tid >= live)
        return false;
    float v = red[tid][0];
    for (int q = 1; q < WPR; q++)
        v = __fadd_rn(v, red[tid][q]);
    if (GLU) {
        float v2 = red[RPW + tid][0];
        for (int q = 1; q < WPR; q++)
            v2 = __fadd_rn(v2, red[RPW + tid][q]);
        yo[tid] = __fmul_rn(q35_silu(v), v2);
        return false;
    }
    if (mode == 1) {
        yo[tid] = __fadd_rn(yo[tid], v);
        return false;
    }
    yo[tid] = v;
    *out = v;
    return true;
}

#endif
