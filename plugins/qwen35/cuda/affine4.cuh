// The arithmetic of one lane's 32 columns of an MLX affine 4-bit row, shared
// by the register form (linear.cu) and the one-row form through shared
// memory (gemv_q4_stream.cu), so that a row's sum is the same bits in both.
//
// w = s q + b over a group, so a chunk's share of the row's sum is
// s (q . x) + b sum(x). The nibbles are not converted one by one (a
// conversion instruction is a quarter-rate one): v = 1 + q / 16 is exact in
// float32 and its bits are two logic operations per eight nibbles and a
// byte permute per nibble, then
//   d = sum v x (fmaf, columns in order),
//   acc += (16 s) d + (b - 16 s) sx   (two fmaf; sx the 32 x in order),
// which is s (q . x) + b sx exactly before rounding. The sums round in
// another order than the CPU path's (s q + b, then the product), within
// the CPU-vs-GPU tolerance of the tests.
#ifndef QWEN35_CUDA_AFFINE4_CUH
#define QWEN35_CUDA_AFFINE4_CUH

#include <stdint.h>

// One word's 8 columns (column i in nibble i) as v = 1 + q / 16: byte b of
// e holds 0x80 | q[2b] << 3, of o 0x80 | q[2b + 1] << 3, each as byte 2
// under 0x3f the float 1 + q / 16.
// (a & m) | c in one logic operation (the compiler splits it in two when
// both constants are immediates).
__device__ __forceinline__ uint32_t q35_andor(uint32_t a, uint32_t m,
                                              uint32_t c)
{
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(a), "r"(m), "r"(c));
    return d;
}

__device__ __forceinline__ void q35_q4_v8(uint32_t wd, float *v)
{
    uint32_t e = q35_andor(wd << 3, 0x78787878u, 0x80808080u);
    uint32_t o = q35_andor(wd >> 1, 0x78787878u, 0x80808080u);
#pragma unroll
    for (int b = 0; b < 4; b++) {
        unsigned sel = 0x7044u | ((unsigned)b << 8);
        v[2 * b] = __uint_as_float(__byte_perm(e, 0x3f000000u, sel));
        v[2 * b + 1] = __uint_as_float(__byte_perm(o, 0x3f000000u, sel));
    }
}

// d += v x over 8 columns, in order.
__device__ __forceinline__ float q35_q4_dot8(const float *v, const float *xv,
                                             float d)
{
#pragma unroll
    for (int i = 0; i < 8; i++)
        d = fmaf(v[i], xv[i], d);
    return d;
}

// Both, for one word.
__device__ __forceinline__ float q35_q4_word(uint32_t wd, const float *xv,
                                             float d)
{
    float v[8];
    q35_q4_v8(wd, v);
    return q35_q4_dot8(v, xv, d);
}

// The end of a chunk: acc + (16 s) d + (b - 16 s) sx, pr = (s, b).
__device__ __forceinline__ float q35_q4_end(float2 pr, float d, float sx,
                                            float acc)
{
    float s16 = __fmul_rn(pr.x, 16.0f);
    acc = fmaf(s16, d, acc);
    return fmaf(__fsub_rn(pr.y, s16), sx, acc);
}

// A whole chunk: column c + i is nibble i % 8 of word i / 8 of u; xv its 32
// activations, sx their sum.
__device__ __forceinline__ float q35_q4_chunk(uint4 u, float2 pr,
                                              const float *xv, float sx,
                                              float acc)
{
    float d = q35_q4_word(u.x, xv, 0.0f);
    d = q35_q4_word(u.y, xv + 8, d);
    d = q35_q4_word(u.z, xv + 16, d);
    d = q35_q4_word(u.w, xv + 24, d);
    return q35_q4_end(pr, d, sx, acc);
}

// The running sum of a chunk's activations in column order: word k's 8
// added to s (the first one starts it).
__device__ __forceinline__ float q35_q4_xsum8(const float *xv, int k, float s)
{
#pragma unroll
    for (int i = 0; i < 8; i++)
        s = k == 0 && i == 0 ? xv[0] : __fadd_rn(s, xv[i]);
    return s;
}

#endif
