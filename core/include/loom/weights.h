/* Linear weights: lookup by module path (plain or MLX affine-quantized),
 * the reference row conversion, and y = W x on the CPU (host->weight_find,
 * host->weight_row and host->matmul, also used by the core). */
#ifndef LOOM_WEIGHTS_H
#define LOOM_WEIGHTS_H

#include <loom/pool.h>

/* Finds base.weight (+ .scales/.biases when config says quantized). */
loom_status loom_weight_find(const loom_checkpoint *ckpt, const char *base,
                             int64_t rows, int64_t cols, loom_weight *out,
                             loom_err *err);
void loom_weight_row(const loom_weight *w, int64_t row, float *out);
/* y[n_tok, rows] = x[n_tok, cols] W^T, split over the pool (NULL: caller). */
void loom_matmul(loom_pool *pool, const loom_weight *w, const float *x,
                 float *y, int64_t n_tok);

#endif
