/* The runtime's tensor-core products: cuBLASLt opened at the first call,
 * behind loom_cuda.gemm_bf16. */
#ifndef LOOM_CUDA_GEMM_H
#define LOOM_CUDA_GEMM_H

#include <loom/cuda.h>
#include <loom/status.h>

typedef struct loom__gemm loom__gemm;

/* loom_cuda.gemm_bf16 (cuda.h) on *g, opened on first use. */
loom_status loom__gemm_bf16(loom__gemm **g, const loom_cuda *cu, int32_t m,
                            int32_t n, int32_t k, loom_cu_ptr a, loom_cu_ptr b,
                            loom_cu_ptr d, int32_t ldd, float beta,
                            loom_err *err);
/* Destroys the handle (the stream is idle); NULL is fine. */
void loom__gemm_close(loom__gemm *g);

#endif
