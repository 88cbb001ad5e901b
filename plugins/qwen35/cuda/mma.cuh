// The warp-level tensor-core steps the decode products share (sm_80):
// four 8x8 matrices of 16-bit elements from shared memory, and one BF16
// m16n8k16 product added into float32; and where a value's BF16 halves go
// in the products' split layout (written by q35_split, or by the kernel
// that makes a product's input); and a row's sum of squares in the order
// every normed product takes it.
#ifndef QWEN35_CUDA_MMA_CUH
#define QWEN35_CUDA_MMA_CUH

#include <stdint.h>

#include "common.cuh"

#include <cuda_bf16.h>

__device__ __forceinline__ void q35_ldsm4(uint32_t addr, uint32_t *r)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, "
                 "[%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void q35_mma(float *d, const uint32_t *a,
                                        uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                   "r"(b1));
}

// Warpgroup products (sm_90a's wgmma): 64 weight rows of shared memory by
// N token halves of shared memory, both K-major in the 128-byte swizzle the
// bulk tensor copies write (8-row atoms 1024 bytes apart), added into
// float32 accumulators. Built only where the target has them
// (Q35_HAVE_WGMMA); elsewhere the same tiles take q35_mma.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define Q35_HAVE_WGMMA 1
#else
#define Q35_HAVE_WGMMA 0
#endif

// A matrix descriptor for an operand at shared address addr (1024-aligned,
// plus the step's 32-byte offsets into its 128-byte rows, which the swizzle
// resolves): the 8-row atoms 1024 bytes apart, the 128-byte swizzle.
__device__ __forceinline__ uint64_t q35_wg_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3ffffu) >> 4) | (uint64_t)1 << 16 |
           (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}

__device__ __forceinline__ void q35_wg_fence()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void q35_wg_commit_wait()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n"
                 "wgmma.wait_group.sync.aligned 0;" ::
                     : "memory");
}
// Keeps the compiler from moving the accumulators' other uses across the
// asynchronous products.
template <int ND> __device__ __forceinline__ void q35_wg_hold(float *d)
{
#pragma unroll
    for (int i = 0; i < ND; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

#define Q35_F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
// d += A B for k = 16: A 64 rows at descriptor a, B N token halves at b.
// Thread l of warp w of the group holds, for j < N / 8, rows
// 16 w + l / 4 (+ 8 for d[4j + 2], d[4j + 3]) of columns 8 j + 2 (l % 4)
// and the next (d[4j], d[4j + 1]).
template <int N>
__device__ __forceinline__ void q35_wgmma(float *d, uint64_t a, uint64_t b);
template <>
__device__ __forceinline__ void q35_wgmma<8>(float *d, uint64_t a, uint64_t b)
{
#if Q35_HAVE_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}"
                 : Q35_F4(0)
                 : "l"(a), "l"(b), "r"(1));
#endif
}
template <>
__device__ __forceinline__ void q35_wgmma<16>(float *d, uint64_t a, uint64_t b)
{
#if Q35_HAVE_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}"
                 : Q35_F4(0), Q35_F4(4)
                 : "l"(a), "l"(b), "r"(1));
#endif
}
template <>
__device__ __forceinline__ void q35_wgmma<32>(float *d, uint64_t a, uint64_t b)
{
#if Q35_HAVE_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
                 "%13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}"
                 : Q35_F4(0), Q35_F4(4), Q35_F4(8), Q35_F4(12)
                 : "l"(a), "l"(b), "r"(1));
#endif
}
template <>
__device__ __forceinline__ void q35_wgmma<64>(float *d, uint64_t a, uint64_t b)
{
#if Q35_HAVE_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
                 "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
                 "%24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, "
                 "1, 0, 0;\n}"
                 : Q35_F4(0), Q35_F4(4), Q35_F4(8), Q35_F4(12), Q35_F4(16),
                   Q35_F4(20), Q35_F4(24), Q35_F4(28)
                 : "l"(a), "l"(b), "r"(1));
#endif
}
#undef Q35_F4

// Column i of row t's x' = v as its halves, at their places in the split
// layout of T rows.
__device__ __forceinline__ void q35_split_put(uint16_t *xs, int T, int t, int i,
                                              float v)
{
    __nv_bfloat16 h = __float2bfloat16_rn(v);
    __nv_bfloat16 l = __float2bfloat16_rn(__fsub_rn(v, __bfloat162float(h)));
    int blk = i / 64, j = i % 64;
    for (int e = 0; e < 2; e++) {
        int row = 2 * t + e;
        int col = (((j >> 3) ^ (row & 7)) << 3) | (j & 7);
        xs[((int64_t)blk * 2 * T + row) * 64 + col] =
            __bfloat16_as_ushort(e ? l : h);
    }
}

// A row's sum of squares as every normed product of the tensor-core set
// takes it, so that a row normed by q35_split, by the one-row kernel or by
// the product that wrote it gets the same bits: part p is the pairwise tree
// of x[16p .. 16p + 15]^2 (each square rounded, zeros past the row's end),
// then lane j of a warp adds parts j, j + 32, ... in order and the warp's
// butterfly (q35_warp_sum) adds the lanes (q35_ss_parts).
//
// Part p from 16 lanes of a half-warp, lane i holding x[16p + i] (every
// lane of the warp calls it).
__device__ __forceinline__ float q35_sq16_lanes(float v)
{
    float a = __fmul_rn(v, v);
#pragma unroll
    for (int o = 1; o < 16; o <<= 1)
        a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, o));
    return a;
}

// s plus parts lane, lane + 32, ..., lane + 224 of part[0 .. n), in that
// order, all 8 loads in flight at once (the zeros past n add nothing to a
// sum of squares, not even a sign).
__device__ __forceinline__ float q35_ss_add8(const float *part, int n,
                                            int lane, float s)
{
    float v[8];
#pragma unroll
    for (int u = 0; u < 8; u++)
        v[u] = lane + 32 * u < n ? part[lane + 32 * u] : 0.0f;
#pragma unroll
    for (int u = 0; u < 8; u++)
        s = __fadd_rn(s, v[u]);
    return s;
}

// The row's sum from its P parts, on every lane of one warp.
__device__ __forceinline__ float q35_ss_parts(const float *part, int P,
                                             int lane)
{
    float s = 0.0f;
    for (int p0 = 0; p0 < P; p0 += 256)
        s = q35_ss_add8(part + p0, P - p0, lane, s);
    return q35_warp_sum(s);
}

#endif
