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

/* The kernel sets behind loom_matmul, chosen at run time by CPUID. The SIMD
 * sets give the same bits (a row's sums are formed in one order by fused
 * multiply-adds); the generic one is the portable fallback. */
typedef enum loom_mm_isa {
    LOOM_MM_GENERIC = 0,
    LOOM_MM_AVX2 = 1,   /* AVX2 + FMA + F16C */
    LOOM_MM_AVX512 = 2, /* AVX-512 F/BW/VL on top */
    /* AVX512-BF16 on top: prompt chunks only (loom_matmul_prompt) */
    LOOM_MM_AVX512BF16 = 3,
    /* AMX-BF16 tiles on top, where the OS grants tile data: prompt chunks
     * with plain BF16 weights only (matmul_prompt_amx.c); other weights
     * take the AVX-512F path */
    LOOM_MM_AMX = 4
} loom_mm_isa;

/* The best set this CPU runs; loom_matmul uses it. */
loom_mm_isa loom_matmul_isa(void);
const char *loom_matmul_isa_name(loom_mm_isa isa);
/* loom_matmul on set `isa`, or on the best the CPU runs if that is lower. */
void loom_matmul_on(loom_pool *pool, loom_mm_isa isa, const loom_weight *w,
                    const float *x, float *y, int64_t n_tok);

/* Prompt chunks (host->matmul_prompt): the same product as loom_matmul as a
 * blocked matrix-matrix kernel (core/src/model/matmul_prompt.c). Each
 * output is one chain of sums over the columns, whatever n_tok, the pool
 * or the tile it falls in, so a row's result does not depend on what
 * shares the call; it differs from loom_matmul's within the bound stated
 * there (BF16 weights on AVX512-BF16 and AMX round x to BF16). */
void loom_matmul_prompt(loom_pool *pool, const loom_weight *w, const float *x,
                        float *y, int64_t n_tok);
/* The best set the prompt kernel runs here (up to LOOM_MM_AMX: the first
 * call asks the OS for AMX tile data, loom_cpu_amx_enable). */
loom_mm_isa loom_matmul_prompt_isa(void);
/* The set loom_matmul_prompt and the host table use: loom_matmul_prompt_isa,
 * AVX-512F where that is AVX512-BF16 (matmul_prompt.c says why). The
 * environment variable LOOM_PROMPT_ISA (a loom_matmul_isa_name: generic,
 * avx2, avx512, avx512bf16, amx) picks another set, for comparing them in
 * `loom bench`; a set above loom_matmul_prompt_isa runs as that. */
loom_mm_isa loom_matmul_prompt_default(void);
/* loom_matmul_prompt on set `isa`, or on the best the CPU runs if lower. */
void loom_matmul_prompt_on(loom_pool *pool, loom_mm_isa isa,
                           const loom_weight *w, const float *x, float *y,
                           int64_t n_tok);
/* loom_matmul_on and loom_matmul_prompt_on on a set the caller read from
 * CPUID before (the host table, once): no CPUID per product, which a
 * virtual machine traps. */
void loom__matmul_run(loom_pool *pool, loom_mm_isa isa, const loom_weight *w,
                      const float *x, float *y, int64_t n_tok);
void loom__matmul_prompt_run(loom_pool *pool, loom_mm_isa isa,
                             const loom_weight *w, const float *x, float *y,
                             int64_t n_tok);

#endif
