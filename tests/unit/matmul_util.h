/* Helpers shared by the matmul suites (test_matmul, test_matmul_prompt):
 * a seeded generator and random weights with a float32 copy of their rows. */
#ifndef LOOM_MATMUL_UTIL_H
#define LOOM_MATMUL_UTIL_H

#include <stdint.h>

#include <loom/weights.h>

/* The next 24 bits of the linear congruential generator seeded by *s. */
uint32_t mm_next(uint32_t *s);
/* A float in [-1, 1) from the generator of *s. */
float mm_rnd(uint32_t *s);

/* A weight of `rows` x `cols` (plain of dtype dt, or 4-bit MLX affine when
 * bits is 4) with its rows as float32 in ref. */
typedef struct tw {
    loom_weight w;
    float *ref;
    void *data, *scales, *biases;
} tw;

/* Fills t with random values from the generator of *s. */
void tw_make(tw *t, loom_dtype dt, int bits, int64_t rows, int64_t cols,
             uint32_t *s);
void tw_free(tw *t);

#endif
