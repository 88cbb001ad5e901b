// Embedding lookup and the RMSNorm of whole rows (input, post-attention and
// final norms; the head's norm picks its rows through a map).
#include "common.cuh"
#include "mma.cuh"

// h[t] = table[rows[t].token] as float32 (exact for BF16 and F16).
template <typename W>
__device__ void q35_embed_body(const W *table, const q35_gpu_row *rows,
                               float *h, int H)
{
    int t = blockIdx.x;
    const W *src = table + (int64_t)rows[t].token * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x)
        h[(int64_t)t * H + i] = q35_ld(src, i);
}

extern "C" __global__ void
q35_embed_bf16(const uint16_t *table, const q35_gpu_row *rows, float *h, int H)
{
    Q35_PDL_FIRST();
    q35_embed_body(table, rows, h, H);
}
extern "C" __global__ void
q35_embed_f16(const __half *table, const q35_gpu_row *rows, float *h, int H)
{
    Q35_PDL_FIRST();
    q35_embed_body(table, rows, h, H);
}
extern "C" __global__ void
q35_embed_f32(const float *table, const q35_gpu_row *rows, float *h, int H)
{
    Q35_PDL_FIRST();
    q35_embed_body(table, rows, h, H);
}

// out[b] = x[map ? map[b] : b] * rsqrt(mean(x^2) + eps) * w, one block of
// 256 threads per row. Rounding: the sum of squares in float32 (q35_ss4's
// order when n % 4 == 0, as the normed products take it, else per-thread
// strided partial sums; then q35_block_sum), r = 1 / sqrtf(ss / n + eps)
// in float32, then (x * r) * w rounded once per multiply as on the CPU.
// With xo (n % 4 == 0), also the rows' halves in q35_split's layout for
// gridDim.x rows, for the tensor-core product that reads out next.
extern "C" __global__ void q35_rmsnorm(const float *x, const int *map,
                                       float *out, const float *w, int n,
                                       float eps, uint16_t *xo)
{
    Q35_PDL_ENTER();
    __shared__ float red[32];
    int b = blockIdx.x;
    const float *xr = x + (int64_t)(map ? map[b] : b) * n;
    float ss = 0.0f;
    if (n % 4 == 0) {
        ss = q35_ss4(reinterpret_cast<const float4 *>(xr), n / 4);
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            ss = fmaf(xr[i], xr[i], ss);
    }
    ss = q35_block_sum(ss, red);
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    float *o = out + (int64_t)b * n;
    if (n % 4 != 0) {
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            o[i] = __fmul_rn(__fmul_rn(xr[i], r), w[i]);
        return;
    }
    for (int f = threadIdx.x; f < n / 4; f += blockDim.x) {
        float4 v = reinterpret_cast<const float4 *>(xr)[f];
        float4 g = __ldg(reinterpret_cast<const float4 *>(w) + f);
        v.x = __fmul_rn(__fmul_rn(v.x, r), g.x);
        v.y = __fmul_rn(__fmul_rn(v.y, r), g.y);
        v.z = __fmul_rn(__fmul_rn(v.z, r), g.z);
        v.w = __fmul_rn(__fmul_rn(v.w, r), g.w);
        reinterpret_cast<float4 *>(o)[f] = v;
        if (xo) {
            q35_split_put(xo, gridDim.x, b, 4 * f, v.x);
            q35_split_put(xo, gridDim.x, b, 4 * f + 1, v.y);
            q35_split_put(xo, gridDim.x, b, 4 * f + 2, v.z);
            q35_split_put(xo, gridDim.x, b, 4 * f + 3, v.w);
        }
    }
}

// h[t] = the token's row of an MLX affine 4-bit table (the device layout
// of gpu_kernels.h), w = scale * q + bias.
extern "C" __global__ void q35_embed_q4(const uint32_t *q, const float *p,
                                        const q35_gpu_row *rows, float *h,
                                        int H, int gsz)
{
    Q35_PDL_FIRST();
    int t = blockIdx.x;
    int64_t r = rows[t].token;
    const uint32_t *qr = q + r * (H / 8);
    const float *pr = p + r * q35_q4_gp(H, gsz) * 2;
    for (int c = threadIdx.x; c < H; c += blockDim.x) {
        int g = c / gsz;
        float v = (float)((qr[c / 8] >> (4 * (c % 8))) & 15u);
        h[(int64_t)t * H + c] = __fadd_rn(__fmul_rn(pr[2 * g], v), pr[2 * g + 1]);
    }
}
