/* The matmul kernel sets (generic, AVX2, AVX-512) against a float64
 * reference on random sizes with ragged edges, the SIMD sets against each
 * other bit for bit (decode rows, windows and prompt chunks alike), and the
 * run-time choice against the CPU's own CPUID bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <loom/pool.h>
#include <loom/weights.h>

#include "matmul_util.h"
#include "testutil.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

/* Every set the CPU runs on one product: near the float64 reference, the
 * SIMD sets equal to each other, and each token's row equal to the same
 * token run alone (as decode runs it). */
static void check(loom_pool *pool, loom_dtype dt, int bits, int64_t rows,
                  int64_t cols, int64_t n_tok, uint32_t *s)
{
    tw t;
    tw_make(&t, dt, bits, rows, cols, s);
    float *x = malloc((size_t)(n_tok * cols) * sizeof(float));
    for (int64_t i = 0; i < n_tok * cols; i++)
        x[i] = mm_rnd(s);
    size_t ny = (size_t)(n_tok * rows);
    float *y[3], *one = malloc((size_t)rows * sizeof(float));
    loom_mm_isa best = loom_matmul_isa();
    for (int isa = 0; isa <= (int)best; isa++) {
        y[isa] = malloc(ny * sizeof(float));
        loom_matmul_on(pool, (loom_mm_isa)isa, &t.w, x, y[isa], n_tok);
        for (int64_t k = 0; k < n_tok; k++)
            for (int64_t r = 0; r < rows; r++) {
                double ref = 0, mag = 0;
                for (int64_t c = 0; c < cols; c++) {
                    double p = (double)t.ref[r * cols + c] * x[k * cols + c];
                    ref += p;
                    mag += fabs(p);
                }
                ck_assert_msg(
                    fabs(y[isa][k * rows + r] - ref) <= 1e-5 * mag + 1e-6,
                    "%s dtype %d bits %d [%lld x %lld] tok %lld/%lld "
                    "row %lld: %g vs %g",
                    loom_matmul_isa_name((loom_mm_isa)isa), dt, bits,
                    (long long)rows, (long long)cols, (long long)k,
                    (long long)n_tok, (long long)r, y[isa][k * rows + r], ref);
            }
        if (isa >= LOOM_MM_AVX2) {
            for (int64_t k = 0; k < n_tok; k++) {
                loom_matmul_on(pool, (loom_mm_isa)isa, &t.w, x + k * cols, one,
                               1);
                ck_assert_msg(memcmp(one, y[isa] + k * rows,
                                     (size_t)rows * sizeof(float)) == 0,
                              "%s [%lld x %lld]: token %lld of %lld differs "
                              "from the token alone",
                              loom_matmul_isa_name((loom_mm_isa)isa),
                              (long long)rows, (long long)cols, (long long)k,
                              (long long)n_tok);
            }
        }
        if (isa > LOOM_MM_AVX2)
            ck_assert_msg(memcmp(y[isa], y[LOOM_MM_AVX2], ny * sizeof(float)) ==
                              0,
                          "%s differs from avx2 [%lld x %lld] x %lld tokens",
                          loom_matmul_isa_name((loom_mm_isa)isa),
                          (long long)rows, (long long)cols, (long long)n_tok);
    }
    for (int isa = 0; isa <= (int)best; isa++)
        free(y[isa]);
    free(one);
    free(x);
    tw_free(&t);
}

START_TEST(kernels_match_reference_on_edges)
{
    loom_pool *pool = NULL;
    loom_err err;
    ck_assert_int_eq(loom_pool_new(3, &pool, &err), LOOM_OK);
    uint32_t s = 777;
    const loom_dtype dts[] = {LOOM_DTYPE_F32, LOOM_DTYPE_BF16, LOOM_DTYPE_F16};
    /* column counts around the 16-lane step and the 512-column block */
    const int64_t cols[] = {1, 15, 16, 17, 33, 511, 512, 513, 1031};
    const int64_t toks[] = {1, 2, 3, 4, 5, 6, 7, 12, 13};
    for (int d = 0; d < 3; d++)
        for (size_t c = 0; c < sizeof cols / sizeof *cols; c++)
            for (size_t k = 0; k < sizeof toks / sizeof *toks; k++) {
                int64_t rows = 1 + (int64_t)(mm_next(&s) % 70);
                check(pool, dts[d], 0, rows, cols[c], toks[k], &s);
            }
    /* random shapes, and enough rows that the pool splits them */
    for (int i = 0; i < 12; i++) {
        int64_t rows = 1 + (int64_t)(mm_next(&s) % 300);
        int64_t cc = 1 + (int64_t)(mm_next(&s) % 1500);
        int64_t nt = 1 + (int64_t)(mm_next(&s) % 20);
        check(pool, dts[i % 3], 0, rows, cc, nt, &s);
    }
    check(NULL, LOOM_DTYPE_BF16, 0, 67, 700, 9, &s);
    loom_pool_free(pool);
}
END_TEST

START_TEST(quantized_weights_on_every_set)
{
    loom_pool *pool = NULL;
    loom_err err;
    ck_assert_int_eq(loom_pool_new(2, &pool, &err), LOOM_OK);
    uint32_t s = 4242;
    const int64_t toks[] = {1, 3, 4, 5, 8};
    for (size_t k = 0; k < sizeof toks / sizeof *toks; k++) {
        check(pool, LOOM_DTYPE_U32, 4, 37, 64, toks[k], &s);
        check(pool, LOOM_DTYPE_U32, 4, 50, 544, toks[k], &s);
    }
    loom_pool_free(pool);
}
END_TEST

#if defined(__x86_64__)
/* What CPUID and XCR0 say, read here without the compiler's helpers. */
static loom_mm_isa cpuid_isa(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return LOOM_MM_GENERIC;
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, f16c = (c >> 29) & 1;
    int avx = (c >> 28) & 1;
    if (!osxsave || !avx)
        return LOOM_MM_GENERIC;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo & 6) != 6)
        return LOOM_MM_GENERIC;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return LOOM_MM_GENERIC;
    int avx2 = (b >> 5) & 1;
    int f512 = (b >> 16) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    if (!(avx2 && fma && f16c))
        return LOOM_MM_GENERIC;
    if (f512 && bw && vl && (lo & 0xe0) == 0xe0)
        return LOOM_MM_AVX512;
    return LOOM_MM_AVX2;
}
#endif

START_TEST(dispatch_follows_cpuid)
{
#if defined(__x86_64__)
    ck_assert_int_eq(loom_matmul_isa(), cpuid_isa());
#else
    ck_assert_int_eq(loom_matmul_isa(), LOOM_MM_GENERIC);
#endif
    ck_assert_str_eq(loom_matmul_isa_name(LOOM_MM_GENERIC), "generic");
    ck_assert_str_eq(loom_matmul_isa_name(LOOM_MM_AVX2), "avx2");
    ck_assert_str_eq(loom_matmul_isa_name(LOOM_MM_AVX512), "avx512");
    /* asking for more than the CPU runs gives the best it runs */
    uint32_t s = 99;
    tw t;
    tw_make(&t, LOOM_DTYPE_BF16, 0, 40, 300, &s);
    float x[2 * 300], y0[80], y1[80];
    for (int i = 0; i < 600; i++)
        x[i] = mm_rnd(&s);
    loom_matmul(NULL, &t.w, x, y0, 2);
    loom_matmul_on(NULL, (loom_mm_isa)(LOOM_MM_AVX512 + 1), &t.w, x, y1, 2);
    ck_assert_int_eq(memcmp(y0, y1, sizeof y0), 0);
    tw_free(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("matmul");
    TCase *tc = tcase_create("matmul");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, kernels_match_reference_on_edges);
    tcase_add_test(tc, quantized_weights_on_every_set);
    tcase_add_test(tc, dispatch_follows_cpuid);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
