/* The CPU thread pool behind host->parallel_for and the core's matmul. */
#ifndef LOOM_POOL_H
#define LOOM_POOL_H

#include <loom/status.h>

typedef struct loom_pool loom_pool;

/* n_threads <= 0: one per CPU. */
loom_status loom_pool_new(int n_threads, loom_pool **out, loom_err *err);
void loom_pool_free(loom_pool *pool);
int loom_pool_size(const loom_pool *pool);
/* Runs fn over [0, n) in contiguous parts on the workers and the caller
 * (pool NULL: on the caller only). */
void loom_pool_run(loom_pool *pool, int64_t n, loom_range_fn fn, void *ctx);

#endif
