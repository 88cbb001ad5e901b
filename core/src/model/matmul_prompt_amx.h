/* The AMX tile path of the prompt-chunk product (matmul_prompt_amx.c), as
 * matmul_prompt.c calls it. */
#ifndef LOOM_MATMUL_PROMPT_AMX_H
#define LOOM_MATMUL_PROMPT_AMX_H

#include <loom/weights.h>

/* LOOM_OK when the CPU has AMX-TILE and AMX-BF16 (CPUID), the OS keeps
 * their state (XCR0) and has granted this process tile data
 * (loom_cpu_amx_enable); else LOOM_ERR_UNSUPPORTED naming which is
 * missing. Call it once before any tile product. */
loom_status loom__matmul_amx_enable(loom_err *err);

/* y[n_tok, rows] = x[n_tok, cols] W^T for plain BF16 weights on AMX tiles,
 * split over the pool (NULL: the caller's thread only). LOOM_ERR_NOMEM,
 * with y untouched, when the packed tokens cannot be allocated (the caller
 * takes another path); LOOM_ERR_UNSUPPORTED for other weights or where the
 * build has no AMX code. loom__matmul_amx_enable must have succeeded. */
loom_status loom__matmul_prompt_amx(loom_pool *pool, const loom_weight *w,
                                    const float *x, float *y, int64_t n_tok,
                                    loom_err *err);

#endif
