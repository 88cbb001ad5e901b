// Bulk copies into shared memory and the transaction barriers that count
// them (sm_90), for the kernels that stream weights through a ring: an
// address's shared-window offset, a barrier's init / expected bytes /
// arrival / wait on a phase, one bulk copy.
#ifndef QWEN35_CUDA_BULK_CUH
#define QWEN35_CUDA_BULK_CUH

#include <stdint.h>

__device__ __forceinline__ uint32_t q35_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
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

#endif
