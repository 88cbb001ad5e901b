/* The loom_host services table the core hands to plugins, and its thread pool.
 */
#ifndef LOOM_HOST_H
#define LOOM_HOST_H

#include <loom/status.h>

typedef struct loom_pool loom_pool;

/* n_threads <= 0: one per CPU. */
loom_status loom_pool_new(int n_threads, loom_pool **out, loom_err *err);
void loom_pool_free(loom_pool *pool);
int loom_pool_size(const loom_pool *pool);
void loom_pool_run(loom_pool *pool, int64_t n, loom_range_fn fn, void *ctx);

/* A host table bound to a pool (NULL: run on the caller only). The table is
 * owned by the caller and must outlive every plugin object made with it. */
typedef struct loom_host_state {
    loom_host host; /* first: plugins get &state->host */
    loom_pool *pool;
    _Atomic int64_t accounted_bytes;
    const struct loom_cuda *cuda; /* the engine's device, NULL on the CPU */
} loom_host_state;

void loom_host_init(loom_host_state *state, loom_pool *pool);

/* The core's own log sink (stderr, with a level threshold). */
void loom_log(loom_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void loom_log_set_level(loom_log_level level);

/* Kernels behind host->matmul / host->weight_row, also used by the core. */
void loom_matmul(loom_pool *pool, const loom_weight *w, const float *x,
                 float *y, int64_t n_tok);
void loom_weight_row(const loom_weight *w, int64_t row, float *out);
/* Finds base.weight (+ .scales/.biases when config says quantized). */
loom_status loom_weight_find(const loom_checkpoint *ckpt, const char *base,
                             int64_t rows, int64_t cols, loom_weight *out,
                             loom_err *err);

#endif
