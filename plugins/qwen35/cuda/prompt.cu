// The helpers of a prompt chunk's tensor-core products (cuBLASLt through
// loom_cuda.gemm_bf16): the rows as BF16, normed first when the product
// reads the residual stream, affine-4 weights as BF16, and the SwiGLU of
// two products' outputs.
#include "common.cuh"

#include <cuda_bf16.h>

// Four floats as four BF16 (round to nearest), 8 bytes.
__device__ __forceinline__ uint2 q35_bf16x4(float4 a)
{
    __nv_bfloat162 lo = __floats2bfloat162_rn(a.x, a.y);
    __nv_bfloat162 hi = __floats2bfloat162_rn(a.z, a.w);
    return make_uint2(*reinterpret_cast<uint32_t *>(&lo),
                      *reinterpret_cast<uint32_t *>(&hi));
}

// xb[b] = bf16(x[b]) over n columns, or bf16(RMSNorm(x[b]) * w) with w:
// block b of 256 threads on row b of x (ldx floats apart), xb dense. The
// norm's sum is per thread over its columns, then the block's
// (q35_block_sum); then (x r) w rounded per multiply and once more to BF16
// (round to nearest). With n and ldx multiples of 4 each thread takes
// float4s, 4 of them in flight (the rows are a round trip to L2 away), and
// the sum is q35_ss4's.
extern "C" __global__ void q35_to_bf16(const float *x, int ldx,
                                       __nv_bfloat16 *xb, int n, const float *w,
                                       float eps)
{
    Q35_PDL_ENTER();
    __shared__ float red[32];
    int b = blockIdx.x, tid = threadIdx.x;
    const float *xr = x + (int64_t)b * ldx;
    __nv_bfloat16 *o = xb + (int64_t)b * n;
    if ((n | ldx) & 3) {
        float r = 1.0f;
        if (w) {
            float ss = 0.0f;
            for (int i = tid; i < n; i += blockDim.x)
                ss = fmaf(xr[i], xr[i], ss);
            ss = q35_block_sum(ss, red);
            r = 1.0f / sqrtf(ss / (float)n + eps);
        }
        for (int i = tid; i < n; i += blockDim.x) {
            float v = w ? __fmul_rn(__fmul_rn(xr[i], r), w[i]) : xr[i];
            o[i] = __float2bfloat16_rn(v);
        }
        return;
    }
    const float4 *x4 = reinterpret_cast<const float4 *>(xr);
    const float4 *w4 = reinterpret_cast<const float4 *>(w);
    int n4 = n / 4;
    float r = 1.0f;
    if (w) {
        float ss = q35_block_sum(q35_ss4(x4, n4), red);
        r = 1.0f / sqrtf(ss / (float)n + eps);
    }
    for (int f0 = tid; f0 < n4; f0 += 4 * 256) {
        float4 v[4], g[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (f0 + u * 256 < n4) {
                v[u] = x4[f0 + u * 256];
                if (w)
                    g[u] = __ldg(w4 + f0 + u * 256);
            }
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (f0 + u * 256 < n4) {
                float4 a = v[u];
                if (w) {
                    a.x = __fmul_rn(__fmul_rn(a.x, r), g[u].x);
                    a.y = __fmul_rn(__fmul_rn(a.y, r), g[u].y);
                    a.z = __fmul_rn(__fmul_rn(a.z, r), g[u].z);
                    a.w = __fmul_rn(__fmul_rn(a.w, r), g[u].w);
                }
                reinterpret_cast<uint2 *>(o)[f0 + u * 256] = q35_bf16x4(a);
            }
    }
}

// y[t][i] = silu(y[t][i]) * u[t][i] for i < n over rows ld floats apart;
// with xb, xb[t][i] = bf16 of that instead (round to nearest, rows n apart:
// what q35_to_bf16 would make of y) and y is left as it was. Block (i /
// 1024, t) with 4 columns a thread when n and ld are multiples of 4, else
// block (i / 256, t).
extern "C" __global__ void q35_swiglu(float *y, const float *u, int n, int ld,
                                      __nv_bfloat16 *xb)
{
    Q35_PDL_ENTER();
    int64_t row = (int64_t)blockIdx.y * ld;
    __nv_bfloat16 *xr = xb + (int64_t)blockIdx.y * n;
    if ((n | ld) & 3) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) {
            float v = __fmul_rn(q35_silu(y[row + i]), u[row + i]);
            if (xb)
                xr[i] = __float2bfloat16_rn(v);
            else
                y[row + i] = v;
        }
        return;
    }
    int f = blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= n / 4)
        return;
    float4 *y4 = reinterpret_cast<float4 *>(y + row);
    float4 a = y4[f], b = reinterpret_cast<const float4 *>(u + row)[f];
    a.x = __fmul_rn(q35_silu(a.x), b.x);
    a.y = __fmul_rn(q35_silu(a.y), b.y);
    a.z = __fmul_rn(q35_silu(a.z), b.z);
    a.w = __fmul_rn(q35_silu(a.w), b.w);
    if (!xb) {
        y4[f] = a;
        return;
    }
    reinterpret_cast<uint2 *>(xr)[f] = q35_bf16x4(a);
}

// wb = bf16(s q + b) for MLX affine-4 weights (gpu_kernels.h's layout: the
// words [rows][cols / 8], the (scale, bias) pairs of each row after them in
// `pairs`), so that a prompt chunk's products take the BF16 tensor-core
// path: rounded to BF16 as MLX itself dequantizes for BF16 activations.
// Thread i on word i (8 columns, one group: gsz is a multiple of 8), its
// 16 bytes of output in one store.
extern "C" __global__ void q35_q4_bf16(const uint32_t *q, const float *pairs,
                                       __nv_bfloat16 *wb, int rows, int cols,
                                       int gsz)
{
    Q35_PDL_ENTER();
    int64_t wpr = cols / 8, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)rows * wpr)
        return;
    int64_t r = i / wpr;
    int c = (int)(i % wpr) * 8;
    const float *pr = pairs + 2 * (r * q35_q4_gp(cols, gsz) + c / gsz);
    float sc = pr[0], bi = pr[1];
    uint32_t w = q[i];
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        v[j] = fmaf(sc, (float)((w >> (4 * j)) & 15u), bi);
    uint2 lo = q35_bf16x4(make_float4(v[0], v[1], v[2], v[3]));
    uint2 hi = q35_bf16x4(make_float4(v[4], v[5], v[6], v[7]));
    reinterpret_cast<uint4 *>(wb)[i] = make_uint4(lo.x, lo.y, hi.x, hi.y);
}
