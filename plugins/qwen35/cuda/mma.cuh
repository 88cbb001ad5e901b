// The warp-level tensor-core steps the decode products share (sm_80):
// four 8x8 matrices of 16-bit elements from shared memory, and one BF16
// m16n8k16 product added into float32.
#ifndef QWEN35_CUDA_MMA_CUH
#define QWEN35_CUDA_MMA_CUH

#include <stdint.h>

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

#endif
