// The helpers of a prompt chunk's tensor-core products (cuBLASLt through
// loom_cuda.gemm_bf16): the rows as BF16, normed first when the product
// reads the residual stream, and the SwiGLU of two products' outputs.
#include "common.cuh"

#include <cuda_bf16.h>

// xb[b] = bf16(x[b]) over n columns, or bf16(RMSNorm(x[b]) * w) with w:
// block b of 256 threads on row b of x (ldx floats apart), xb dense. The
// norm rounds as q35_rmsnorm, then once more to BF16 (round to nearest).
extern "C" __global__ void q35_to_bf16(const float *x, int ldx,
                                       __nv_bfloat16 *xb, int n,
                                       const float *w, float eps)
{
    Q35_PDL_ENTER();
    __shared__ float red[32];
    int b = blockIdx.x;
    const float *xr = x + (int64_t)b * ldx;
    float r = 1.0f;
    if (w) {
        float ss = 0.0f;
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            ss = fmaf(xr[i], xr[i], ss);
        ss = q35_block_sum(ss, red);
        r = 1.0f / sqrtf(ss / (float)n + eps);
    }
    __nv_bfloat16 *o = xb + (int64_t)b * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = w ? __fmul_rn(__fmul_rn(xr[i], r), w[i]) : xr[i];
        o[i] = __float2bfloat16_rn(v);
    }
}

// y[t][i] = silu(y[t][i]) * u[t][i] for i < n over rows ld floats apart;
// block (i / 256, t).
extern "C" __global__ void q35_swiglu(float *y, const float *u, int n, int ld)
{
    Q35_PDL_ENTER();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    int64_t at = (int64_t)blockIdx.y * ld + i;
    y[at] = __fmul_rn(q35_silu(y[at]), u[at]);
}
