// What the hand-built CUDA benchmarks of tools/ share (gemv_bench.cu,
// gemv_mma_bench.cu, q4_bench.cu): an exit on the first CUDA error, a launch
// with programmatic dependent launch (and clusters of n blocks along x), the
// random bits they fill weights with, and the driver's tensor-map encoder. They link the CUDA runtime; loom does not.
#ifndef LOOM_TOOLS_BENCH_CUDA_CUH
#define LOOM_TOOLS_BENCH_CUDA_CUH

#include <cuda.h>
#include <stdint.h>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                  \
    do {                                                                       \
        cudaError_t e_ = (x);                                                  \
        if (e_ != cudaSuccess) {                                               \
            printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));  \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

// f on grid g of blocks b, as loom launches its kernels: may start while
// the kernel before drains; cluster > 0 asks for clusters of that size.
static inline void bench_launch(const void *f, dim3 g, dim3 b, size_t smem,
                                void **args, cudaStream_t s, int cluster = 0)
{
    cudaLaunchConfig_t c = {};
    c.gridDim = g;
    c.blockDim = b;
    c.dynamicSmemBytes = smem;
    c.stream = s;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    at[1].id = cudaLaunchAttributeClusterDimension;
    at[1].val.clusterDim.x = cluster > 0 ? cluster : 1;
    at[1].val.clusterDim.y = 1;
    at[1].val.clusterDim.z = 1;
    c.attrs = at;
    c.numAttrs = cluster > 0 ? 2 : 1;
    CK(cudaLaunchKernelExC(&c, f, args));
}

// The benchmarks' random bits: h's bits mixed (xorshift, multiply,
// xorshift), on the host and the device alike.
__host__ __device__ static inline uint32_t bench_mix(uint32_t h)
{
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    return h ^ (h >> 15);
}

typedef CUresult (*bench_encode_fn)(CUtensorMap *, CUtensorMapDataType,
                                    cuuint32_t, void *, const cuuint64_t *,
                                    const cuuint64_t *, const cuuint32_t *,
                                    const cuuint32_t *, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion,
                                    CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled, found once through the runtime.
static inline bench_encode_fn bench_encoder()
{
    static bench_encode_fn fn;
    if (!fn) {
        cudaDriverEntryPointQueryResult qr;
        CK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", (void **)&fn,
                                   cudaEnableDefault, &qr));
    }
    return fn;
}

#endif
