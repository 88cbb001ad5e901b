// Device helpers shared by the qwen35 kernels: weight loads as float32,
// activations, and reductions whose order is fixed by the block shape alone
// (never by how many rows a launch carries), so a row's result is the same
// bit for bit whatever shares its launch. All arithmetic is float32; no fast
// math (expf, sinf, cosf are the accurate ones).
#ifndef QWEN35_CUDA_COMMON_CUH
#define QWEN35_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "gpu_kernels.h"

// Programmatic dependent launch (sm_90): every kernel of the plugin is
// launched so that it may start while the one before it drains. It waits
// for that one (and, as each waited for its own, all before it) to finish
// before it touches anything an earlier kernel writes; what it does before
// the wait reads weights only, or (Q35_PDL_FIRST) what only earlier
// forwards write. Every kernel opens with Q35_PDL_ENTER, or with
// q35_pdl_allow and later q35_pdl_wait, on every path.
__device__ __forceinline__ void q35_pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void q35_pdl_allow()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#define Q35_PDL_ENTER()                                                        \
    do {                                                                       \
        q35_pdl_allow();                                                       \
        q35_pdl_wait();                                                        \
    } while (0)
// The first kernel of a forward (the embedding) waits before it lets the
// next start: every kernel after it, even before its own wait, then runs
// once all before the forward (the last forward, a commit, a copy) is done.
#define Q35_PDL_FIRST()                                                        \
    do {                                                                       \
        q35_pdl_wait();                                                        \
        q35_pdl_allow();                                                       \
    } while (0)

// 16 bytes of weights, streamed: not kept in L1, where the activations are.
__device__ __forceinline__ uint4 q35_ldw(const void *p)
{
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

// Eight BF16 or F16 weights from their raw 16 bytes, as float32.
__device__ __forceinline__ void q35_cvt8(uint4 u, const uint16_t *, float *o)
{
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        o[2 * i] = __uint_as_float(w[i] << 16);
        o[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ void q35_cvt8(uint4 u, const __half *, float *o)
{
    const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = __half22float2(h[i]);
        o[2 * i] = f.x;
        o[2 * i + 1] = f.y;
    }
}

// BF16 -> float32 is exact (the upper half of the float's bits).
__device__ __forceinline__ float q35_ld(const uint16_t *p, int64_t i)
{
    return __uint_as_float((uint32_t)p[i] << 16);
}
__device__ __forceinline__ float q35_ld(const __half *p, int64_t i)
{
    return __half2float(p[i]);
}
__device__ __forceinline__ float q35_ld(const float *p, int64_t i)
{
    return p[i];
}

// Eight consecutive weights as float32 from a 16-byte aligned address.
__device__ __forceinline__ void q35_ld8(const uint16_t *p, float *o)
{
    q35_cvt8(*reinterpret_cast<const uint4 *>(p), p, o);
}
__device__ __forceinline__ void q35_ld8(const __half *p, float *o)
{
    q35_cvt8(*reinterpret_cast<const uint4 *>(p), p, o);
}
__device__ __forceinline__ void q35_ld8(const float *p, float *o)
{
    float4 a = *reinterpret_cast<const float4 *>(p);
    float4 b = *reinterpret_cast<const float4 *>(p + 4);
    o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w;
    o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
}

__device__ __forceinline__ float q35_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}
__device__ __forceinline__ float q35_silu(float x)
{
    return x / (1.0f + expf(-x));
}
// torch's threshold: x itself above 20
__device__ __forceinline__ float q35_softplus(float x)
{
    return x > 20.0f ? x : log1pf(expf(x));
}

// Sum over the warp, a fixed butterfly: every lane gets the same value.
__device__ __forceinline__ float q35_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float q35_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (every thread must call it; blockDim a multiple of 32,
// at most 1024): warp sums, then the warp sums in warp order. `red` is 32
// floats of shared memory. Every thread gets the result.
__device__ __forceinline__ float q35_block_sum(float v, float *red)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int nw = (blockDim.x + 31) >> 5;
    v = q35_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float s = lane < nw ? red[lane] : 0.0f;
    s = q35_warp_sum(s);
    return s;
}

// The RMSNorm's sum of squares of a row of n4 float4s as every normed
// product of the plugin takes it, so that a normed row is the same bits in
// each: this thread's part, over the float4s tid, tid + 256, ... (x, y, z,
// w in order; 4 loads in flight), with blocks of 256 threads (and the
// block's sum in q35_block_sum's order after). Each float4 f goes to
// each(f, v) as well (a copy into shared memory, or nothing).
struct q35_none4 {
    __device__ void operator()(int, float4) const {}
};
template <typename Each = q35_none4>
__device__ __forceinline__ float q35_ss4(const float4 *xr, int n4,
                                         Each each = Each())
{
    float ss = 0.0f;
    for (int f0 = threadIdx.x; f0 < n4; f0 += 4 * 256) {
        float4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (f0 + u * 256 < n4)
                v[u] = xr[f0 + u * 256];
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (f0 + u * 256 < n4) {
                ss = fmaf(v[u].x, v[u].x, ss);
                ss = fmaf(v[u].y, v[u].y, ss);
                ss = fmaf(v[u].z, v[u].z, ss);
                ss = fmaf(v[u].w, v[u].w, ss);
                each(f0 + u * 256, v[u]);
            }
    }
    return ss;
}

// q (is_q) or k of one key head, dk floats at x, l2-normalised by one
// warp into o as the CPU path does: r = 1 / sqrtf(ss + 1e-6) (ss over the
// lanes strided, the fixed butterfly), q = (q r) dk^-0.5 rounded twice.
__device__ __forceinline__ void q35_qk_norm(const float *x, int dk, bool is_q,
                                            float *o)
{
    int lane = threadIdx.x & 31;
    float ss = 0.0f;
    for (int i = lane; i < dk; i += 32)
        ss = fmaf(x[i], x[i], ss);
    ss = q35_warp_sum(ss);
    float r = 1.0f / sqrtf(ss + 1e-6f);
    float qscale = 1.0f / sqrtf((float)dk);
    for (int i = lane; i < dk; i += 32) {
        float n = __fmul_rn(x[i], r);
        o[i] = is_q ? __fmul_rn(n, qscale) : n;
    }
}

#endif
