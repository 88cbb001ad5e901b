/* Checkpoints the suites derive from the fixtures (variants.c). */
#ifndef LOOM_TEST_VARIANTS_H
#define LOOM_TEST_VARIANTS_H

#include <stdint.h>

/* MLX affine quantization of BF16 [rows, cols] weights w to `bits` (4 or 8),
 * groups of 64: scale = (max - min) / (2^bits - 1) and bias = min, both
 * BF16, q = round((v - bias) / scale) clamped, packed LSB first into q
 * ([rows, cols * bits / 32] words); `deq` (when not NULL) gets scale * q +
 * bias as float32, exactly what a reader computes. */
void fv_affine(const uint16_t *w, int64_t rows, int64_t cols, int bits,
               uint32_t *q, uint16_t *sc, uint16_t *bi, float *deq);

/* qwen35-tiny as a Qwen3-Next checkpoint in a temporary directory: fused
 * in_proj_qkvz and in_proj_ba grouped by key head; with `moe`, every layer
 * but 1 a sparse block of 4 copies of the dense MLP with halved down
 * projections (top 2, renormalised: half the MLP) plus the dense MLP as a
 * shared expert behind a zero gate (sigmoid 0.5: the other half). It
 * computes qwen35-tiny's function, so transformers' logits still hold.
 * Returns the directory. */
const char *fv_qwen3_next(int moe);

#endif
