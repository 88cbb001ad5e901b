/* The sampler's reference pieces: the counter-based generator, the keyed
 * Gumbel-max draw and the top-k / top-p / min-p masks, exactly as the
 * core's sampler runs them, so a device sampler can be tested against them
 * (same seed, position and logits: same token). */
#ifndef LOOM_SAMPLE_REF_H
#define LOOM_SAMPLE_REF_H

#include <stddef.h>
#include <stdint.h>

#include <loom/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Philox-4x32-10 (Salmon et al., SC'11): one block of the counter-based
 * generator, ten rounds. */
void loom_philox4x32(const uint32_t ctr[4], const uint32_t key[2],
                     uint32_t out[4]);
/* 64 random bits for (seed, position, token): a pure function, Philox with
 * key = (seed low, seed high), counter = (position, token, 0, 0), the bits
 * out[0] << 32 | out[1]. */
uint64_t loom_sample_bits(uint64_t seed, int32_t position, int32_t token);
/* Gumbel(0,1) noise for the key: -log(-log(u)), u = (b + 0.5) / 2^53 from
 * the top 53 of those bits, so u is never 0 or 1. */
double loom_sample_gumbel(uint64_t seed, int32_t position, int32_t token);
/* argmax_t (logits[t] + gumbel(seed, position, t)) over finite logits, the
 * lower id on ties; -INFINITY (masked) and NaN logits are never drawn.
 * All masked: the plain argmax. */
int32_t loom_sample_draw(const float *logits, int32_t vocab, uint64_t seed,
                         int32_t position);
/* argmax, the lower id on ties. */
int32_t loom_sample_argmax(const float *logits, int32_t vocab);

/* The masks set to -INFINITY, in place, the tokens they remove; "best
 * first" is value descending, the lower id first on ties, and the best
 * token always stays. They take scratch of loom_sample_mask_scratch_size
 * (vocab) bytes, or NULL to allocate it (LOOM_ERR_NOMEM, logits untouched,
 * when that fails). */
size_t loom_sample_mask_scratch_size(int32_t vocab);
/* Keeps the k best; k <= 0 or k >= vocab keeps all. */
loom_status loom_sample_mask_top_k(float *logits, int32_t vocab, int32_t k,
                                   void *scratch);
/* Keeps the smallest best-first prefix whose softmax mass reaches p (of the
 * mass of the finite logits); p >= 1 keeps all. */
loom_status loom_sample_mask_top_p(float *logits, int32_t vocab, float p,
                                   void *scratch);
/* Keeps the tokens whose probability is at least min_p times the best
 * one's: logit >= max + log(min_p); min_p <= 0 keeps all. */
void loom_sample_mask_min_p(float *logits, int32_t vocab, float min_p);

#ifdef __cplusplus
}
#endif

#endif
