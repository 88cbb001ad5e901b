/* The prompt-chunk kernels (loom_matmul_prompt) on every set the CPU runs,
 * forced through loom_matmul_prompt_on: against a float64 product within
 * the closed-form bound core/src/model/matmul_prompt.c states, on shapes
 * that are not multiples of the tiles (rows, columns, tokens), each
 * token's row the same bits whatever else is in the call or the pool, and
 * (POSIX) the AMX tiles' reads inside the weights. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef _WIN32
#include <sys/mman.h>
#include <unistd.h>
#endif

#include <loom/pool.h>
#include <loom/weights.h>

#include "matmul_util.h"
#include "testutil.h"

/* The bound on |y - exact| / sum_k |w x| for set `isa` on weights of
 * dtype dt with k columns: g_2k (u = 2^-24) for the float32 chains, plus
 * 2^-8 (1 + g_2k) where x is rounded to BF16 (AVX512-BF16 and AMX on
 * BF16: round to nearest even keeps 8 significant bits, and BF16 x BF16
 * products are exact in float32, so only that rounding and the sums'
 * count). */
static double bound(loom_mm_isa isa, loom_dtype dt, int bits, int64_t k)
{
    double u = ldexp(1.0, -24), g = 2.0 * (double)k * u;
    g = g / (1.0 - g);
    if (isa >= LOOM_MM_AVX512BF16 && dt == LOOM_DTYPE_BF16 && !bits)
        return ldexp(1.0, -8) * (1.0 + g) + g;
    return g;
}

static void check(loom_pool *pool, loom_dtype dt, int bits, int64_t rows,
                  int64_t cols, int64_t n_tok, uint32_t *s)
{
    tw t;
    tw_make(&t, dt, bits, rows, cols, s);
    float *x = malloc((size_t)(n_tok * cols) * sizeof(float));
    for (int64_t i = 0; i < n_tok * cols; i++)
        x[i] = mm_rnd(s);
    size_t ny = (size_t)(n_tok * rows);
    float *y = malloc(ny * sizeof(float)), *y1 = malloc(ny * sizeof(float));
    float *one = malloc((size_t)rows * sizeof(float));
    for (int isa = 0; isa <= (int)loom_matmul_prompt_isa(); isa++) {
        const char *name = loom_matmul_isa_name((loom_mm_isa)isa);
        double b = bound((loom_mm_isa)isa, dt, bits, cols);
        loom_matmul_prompt_on(pool, (loom_mm_isa)isa, &t.w, x, y, n_tok);
        for (int64_t k = 0; k < n_tok; k++)
            for (int64_t r = 0; r < rows; r++) {
                double ref = 0, mag = 0;
                for (int64_t c = 0; c < cols; c++) {
                    double p = (double)t.ref[r * cols + c] * x[k * cols + c];
                    ref += p;
                    mag += fabs(p);
                }
                double got = y[k * rows + r];
                ck_assert_msg(fabs(got - ref) <= b * mag + 1e-30,
                              "%s dtype %d bits %d [%lld x %lld] tok %lld "
                              "row %lld: %.9g vs %.9g (bound %.3g)",
                              name, (int)dt, bits, (long long)rows,
                              (long long)cols, (long long)k, (long long)r, got,
                              ref, b * mag);
            }
        /* alone, and on the caller's thread only: the same bits */
        for (int64_t k = 0; k < n_tok; k += 1 + n_tok / 5) {
            loom_matmul_prompt_on(NULL, (loom_mm_isa)isa, &t.w, x + k * cols,
                                  one, 1);
            ck_assert_msg(
                memcmp(one, y + k * rows, (size_t)rows * sizeof(float)) == 0,
                "%s: token %lld alone differs", name, (long long)k);
        }
        loom_matmul_prompt_on(NULL, (loom_mm_isa)isa, &t.w, x, y1, n_tok);
        ck_assert_msg(memcmp(y, y1, ny * sizeof(float)) == 0,
                      "%s: the pool changes the bits", name);
    }
    free(x);
    free(y);
    free(y1);
    free(one);
    tw_free(&t);
}

/* Says which sets this CPU cannot check (they run as the best it has). */
static void note_skipped(void)
{
    loom_mm_isa p = loom_matmul_prompt_isa();
    for (int isa = (int)p + 1; isa <= (int)LOOM_MM_AMX; isa++)
        printf("matmul_prompt: %s skipped (not on this CPU / OS)\n",
               loom_matmul_isa_name((loom_mm_isa)isa));
}

START_TEST(prompt_kernels_within_bound_on_odd_shapes)
{
    note_skipped();
    loom_pool *pool = NULL;
    loom_err err;
    ck_assert_int_eq(loom_pool_new(3, &pool, &err), LOOM_OK);
    uint32_t s = 7;
    static const int64_t rows[] = {1, 5, 7, 13, 50};
    static const int64_t cols[] = {1, 2, 17, 33, 300};
    static const int64_t toks[] = {1, 3, 17, 40, 70};
    static const loom_dtype dts[] = {LOOM_DTYPE_BF16, LOOM_DTYPE_F16,
                                     LOOM_DTYPE_F32};
    for (int d = 0; d < 3; d++)
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 5; j++)
                check(pool, dts[d], 0, rows[i], cols[j], toks[(i + j) % 5], &s);
    /* past one column block (KC) and one chunk of tiles, odd widths */
    check(pool, LOOM_DTYPE_BF16, 0, 101, 261, 35, &s);
    check(pool, LOOM_DTYPE_F32, 0, 53, 385, 66, &s);
    /* MLX 4-bit: groups of 32 */
    check(pool, LOOM_DTYPE_U32, 4, 29, 96, 19, &s);
    loom_pool_free(pool);
}
END_TEST

/* The AMX tiles (matmul_prompt_amx.c: items of 32 rows, steps of 32
 * columns, passes of 32 tokens in blocks of 16) on shapes at and around
 * those sizes, through the same check: rows and columns not multiples of
 * 16 or 32, token counts not multiples of 16, several items and passes,
 * and long rows (the MLP's down projection width; 150 tokens of those
 * are two token groups of the kernel's 1 MiB). The tolerance is the
 * AVX512-BF16 bound above; the check also runs every lower set. */
START_TEST(prompt_amx_within_bound_on_tile_edges)
{
    note_skipped();
    loom_pool *pool = NULL;
    loom_err err;
    ck_assert_int_eq(loom_pool_new(3, &pool, &err), LOOM_OK);
    uint32_t s = 11;
    static const int64_t shape[][3] = {
        {32, 64, 32},  {16, 32, 16},  {45, 77, 21},    {100, 1000, 33},
        {17, 31, 47},  {64, 96, 130}, {129, 300, 70},  {48, 3584, 40},
        {200, 40, 64}, {8, 1024, 65}, {40, 3584, 150},
    };
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++)
        check(pool, LOOM_DTYPE_BF16, 0, shape[i][0], shape[i][1], shape[i][2],
              &s);
    loom_pool_free(pool);
}
END_TEST

#ifndef _WIN32
/* n bytes that end where a PROT_NONE page begins (NULL when the OS will
 * not map it); *base and *span are for munmap. */
static void *before_guard(size_t n, void **base, size_t *span)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    *span = (n + pg - 1) / pg * pg + pg;
    char *p = mmap(NULL, *span, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    ck_assert_int_eq(mprotect(p + *span - pg, pg, PROT_NONE), 0);
    *base = p;
    return p + *span - pg - n;
}

/* The AMX tiles read the weights in place, as asm the sanitizers do not
 * see: with the weight matrix ending at an unmapped page, a tile load past
 * its last row or column faults. Ragged shapes (a short last item, a
 * ragged last step, both), the same bits as from an ordinary copy. */
START_TEST(prompt_amx_reads_inside_the_weights)
{
    note_skipped();
    static const int64_t shape[][3] = {
        {45, 77, 21},   {17, 31, 47}, {32, 33, 40}, {16, 40, 33},
        {33, 1024, 64}, {1, 1, 40},   {31, 64, 32}, {48, 3584, 40},
    };
    uint32_t s = 3;
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
        int64_t M = shape[i][0], K = shape[i][1], T = shape[i][2];
        tw t;
        tw_make(&t, LOOM_DTYPE_BF16, 0, M, K, &s);
        void *base = NULL;
        size_t span = 0, wn = (size_t)(M * K) * sizeof(uint16_t);
        uint16_t *wg = before_guard(wn, &base, &span);
        ck_assert_ptr_nonnull(wg);
        memcpy(wg, t.w.data, wn);
        loom_weight g = t.w;
        g.data = wg;
        float *x = malloc((size_t)(T * K) * sizeof(float));
        float *y0 = malloc((size_t)(T * M) * sizeof(float));
        float *y1 = malloc((size_t)(T * M) * sizeof(float));
        for (int64_t k = 0; k < T * K; k++)
            x[k] = mm_rnd(&s);
        loom_matmul_prompt_on(NULL, LOOM_MM_AMX, &t.w, x, y0, T);
        loom_matmul_prompt_on(NULL, LOOM_MM_AMX, &g, x, y1, T);
        ck_assert_msg(memcmp(y0, y1, (size_t)(T * M) * sizeof(float)) == 0,
                      "[%lld x %lld] x %lld: the guarded copy differs",
                      (long long)M, (long long)K, (long long)T);
        munmap(base, span);
        free(x);
        free(y0);
        free(y1);
        tw_free(&t);
    }
}
END_TEST
#endif

START_TEST(prompt_isa_follows_the_decode_isa)
{
    loom_mm_isa d = loom_matmul_isa(), p = loom_matmul_prompt_isa();
    /* the prompt kernels add AVX512-BF16 and AMX on top of AVX-512,
     * nothing else */
    ck_assert(p == d || (d == LOOM_MM_AVX512 &&
                         (p == LOOM_MM_AVX512BF16 || p == LOOM_MM_AMX)));
    ck_assert_str_eq(loom_matmul_isa_name(LOOM_MM_AVX512BF16), "avx512bf16");
    ck_assert_str_eq(loom_matmul_isa_name(LOOM_MM_AMX), "amx");
    /* asking for more than the CPU runs gives what the default runs at most */
    uint32_t s = 5;
    tw t;
    tw_make(&t, LOOM_DTYPE_BF16, 0, 20, 64, &s);
    float x[3 * 64], y0[60], y1[60];
    for (int i = 0; i < 3 * 64; i++)
        x[i] = mm_rnd(&s);
    loom_matmul_prompt_on(NULL, p, &t.w, x, y0, 3);
    loom_matmul_prompt_on(NULL, (loom_mm_isa)(LOOM_MM_AMX + 1), &t.w, x, y1, 3);
    ck_assert_int_eq(memcmp(y0, y1, sizeof y0), 0);
    tw_free(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("matmul_prompt");
    TCase *tc = tcase_create("matmul_prompt");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, prompt_kernels_within_bound_on_odd_shapes);
    tcase_add_test(tc, prompt_amx_within_bound_on_tile_edges);
#ifndef _WIN32
    tcase_add_test(tc, prompt_amx_reads_inside_the_weights);
#endif
    tcase_add_test(tc, prompt_isa_follows_the_decode_isa);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
