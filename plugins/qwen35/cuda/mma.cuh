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
