// Embedding lookup and the RMSNorm of whole rows (input, post-attention and
// final norms; the head's norm picks its rows through a map).
#include "common.cuh"

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
    Q35_PDL_ENTER();
    q35_embed_body(table, rows, h, H);
}
extern "C" __global__ void
q35_embed_f16(const __half *table, const q35_gpu_row *rows, float *h, int H)
{
    Q35_PDL_ENTER();
    q35_embed_body(table, rows, h, H);
}
extern "C" __global__ void
q35_embed_f32(const float *table, const q35_gpu_row *rows, float *h, int H)
{
    Q35_PDL_ENTER();
    q35_embed_body(table, rows, h, H);
}

// out[b] = x[map ? map[b] : b] * rsqrt(mean(x^2) + eps) * w, one block of
// 1024 threads per row. Rounding: the sum of squares in float32 (per-thread
// strided partial sums, then q35_block_sum), r = 1 / sqrtf(ss / n + eps) in
// float32, then (x * r) * w rounded once per multiply as on the CPU.
extern "C" __global__ void q35_rmsnorm(const float *x, const int *map,
                                       float *out, const float *w, int n,
                                       float eps)
{
    Q35_PDL_ENTER();
    __shared__ float red[32];
    int b = blockIdx.x;
    const float *xr = x + (int64_t)(map ? map[b] : b) * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ss = fmaf(xr[i], xr[i], ss);
    ss = q35_block_sum(ss, red);
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    float *o = out + (int64_t)b * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        o[i] = __fmul_rn(__fmul_rn(xr[i], r), w[i]);
}

// h[t] = the token's row of an MLX affine 4-bit table (q35_q4_body's
// layout), w = scale * q + bias.
extern "C" __global__ void q35_embed_q4(const uint32_t *q, const float *sc,
                                        const float *bi,
                                        const q35_gpu_row *rows, float *h,
                                        int H, int gsz)
{
    Q35_PDL_ENTER();
    int t = blockIdx.x;
    int64_t r = rows[t].token;
    const uint32_t *qr = q + r * (H / 8);
    for (int c = threadIdx.x; c < H; c += blockDim.x) {
        int64_t g = r * (H / gsz) + c / gsz;
        float v = (float)((qr[c / 8] >> (4 * (c % 8))) & 15u);
        h[(int64_t)t * H + c] = __fadd_rn(__fmul_rn(sc[g], v), bi[g]);
    }
}
