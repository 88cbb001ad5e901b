/* loom_cuda.gemm_bf16 (cuBLASLt opened at run time) against a float64
 * product of the same BF16 inputs on the host: every element within the
 * float32 accumulation bound, on odd shapes, a pitch wider than the row,
 * a misaligned output, accumulation (beta 1), and the same bits when a
 * shape runs again. Skipped (77) without a driver or device; a device
 * without cuBLASLt fails unless LOOM_CUBLASLT names none on purpose. */
#define _POSIX_C_SOURCE 200809L /* setenv, strdup: test-only */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/cuda_runtime.h>
#include <loom/plugin.h>

#include "gpuutil.h"
#include "testutil.h"

static uint32_t rng_state = 12345;
static float uniform(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* D[n][m] (ldd, at element offset `skew`) = A[m][k] B[n][k]^T + beta D0. */
static void check_shape(const loom_cuda *cu, int m, int n, int k, int ldd,
                        int skew, float beta)
{
    size_t na = (size_t)m * k, nb = (size_t)n * k;
    size_t nd = (size_t)n * ldd + (size_t)skew;
    uint16_t *a = malloc(na * 2), *b = malloc(nb * 2);
    float *d0 = malloc(nd * 4), *d = malloc(nd * 4), *d2 = malloc(nd * 4);
    for (size_t i = 0; i < na; i++)
        a[i] = loom_f32_to_bf16(uniform());
    for (size_t i = 0; i < nb; i++)
        b[i] = loom_f32_to_bf16(uniform());
    for (size_t i = 0; i < nd; i++)
        d0[i] = uniform();
    loom_err err = {{0}};
    loom_cu_ptr da = 0, db = 0, dd = 0;
    ck_assert_int_eq(cu->alloc(cu, LOOM_MEM_SCRATCH, na * 2, &da, &err), 0);
    ck_assert_int_eq(cu->alloc(cu, LOOM_MEM_SCRATCH, nb * 2, &db, &err), 0);
    ck_assert_int_eq(cu->alloc(cu, LOOM_MEM_SCRATCH, nd * 4, &dd, &err), 0);
    ck_assert_int_eq(cu->memcpyHtoDAsync(da, a, na * 2, cu->stream), 0);
    ck_assert_int_eq(cu->memcpyHtoDAsync(db, b, nb * 2, cu->stream), 0);
    for (int run = 0; run < 2; run++) {
        ck_assert_int_eq(cu->memcpyHtoDAsync(dd, d0, nd * 4, cu->stream), 0);
        loom_status st = cu->gemm_bf16(
            cu, m, n, k, da, db, dd + (uint64_t)skew * 4, ldd, beta, &err);
        ck_assert_msg(st == LOOM_OK, "gemm %dx%dx%d: %s", m, n, k, err.msg);
        ck_assert_int_eq(
            cu->memcpyDtoHAsync(run ? d2 : d, dd, nd * 4, cu->stream), 0);
        ck_assert_int_eq(cu->streamSynchronize(cu->stream), 0);
    }
    /* the same shape runs the same algorithm: the same bits */
    ck_assert_int_eq(memcmp(d, d2, nd * 4), 0);
    double worst = 0;
    for (int t = 0; t < n; t++)
        for (int r = 0; r < ldd; r++) {
            size_t at = (size_t)skew + (size_t)t * ldd + (size_t)r;
            if (r >= m) {
                /* past the row: untouched */
                ck_assert_float_eq(d[at], d0[at]);
                continue;
            }
            double ref = beta * (double)d0[at], mag = fabs(ref);
            for (int i = 0; i < k; i++) {
                double p = (double)loom_bf16_to_f32(a[(size_t)r * k + i]) *
                           loom_bf16_to_f32(b[(size_t)t * k + i]);
                ref += p;
                mag += fabs(p);
            }
            /* float32 accumulation of k + 1 terms, in any order: each sum
             * rounds once (2^-24 relative), k + 1 of them on |terms| */
            double bound = (double)(k + 2) * ldexp(1.0, -24) * mag + 1e-30;
            double e = fabs((double)d[at] - ref);
            ck_assert_msg(e <= bound, "%dx%dx%d [%d][%d]: %g vs %g (bound %g)",
                          m, n, k, t, r, d[at], ref, bound);
            worst = fmax(worst, e / bound);
        }
    printf("gemm %d x %d x %d (ldd %d, skew %d, beta %g): worst error %.3f "
           "of the bound\n",
           m, n, k, ldd, skew, beta, worst);
    for (size_t i = 0; i < (size_t)skew; i++)
        ck_assert_float_eq(d[i], d0[i]);
    cu->free(cu, LOOM_MEM_SCRATCH, da, na * 2);
    cu->free(cu, LOOM_MEM_SCRATCH, db, nb * 2);
    cu->free(cu, LOOM_MEM_SCRATCH, dd, nd * 4);
    free(a);
    free(b);
    free(d0);
    free(d);
    free(d2);
}

START_TEST(gemm_matches_float64)
{
    loom_cuda_runtime *rt = NULL;
    loom_err err = {{0}};
    ck_assert_int_eq(loom_cuda_open(0, &rt, &err), LOOM_OK);
    const loom_cuda *cu = loom_cuda_table(rt);
    ck_assert(LOOM_HAS_FIELD(cu->struct_size, loom_cuda, gemm_bf16));
    loom_status st = cu->gemm_bf16(cu, 0, 0, 0, 0, 0, 0, 0, 0.0f, &err);
    const char *env = getenv("LOOM_CUBLASLT");
    if (st == LOOM_ERR_UNSUPPORTED && env && *env) {
        printf("LOOM_CUBLASLT=%s: %s (the refusal is what is tested)\n", env,
               err.msg);
        loom_cuda_close(rt);
        return;
    }
    ck_assert_msg(st == LOOM_OK, "no cuBLASLt: %s", err.msg);
    check_shape(cu, 64, 32, 128, 64, 0, 0.0f);
    check_shape(cu, 1000, 37, 520, 1000, 0, 0.0f);
    check_shape(cu, 96, 48, 2048, 100, 1, 1.0f);
    check_shape(cu, 4096, 512, 1024, 4096, 3, 0.0f);
    check_shape(cu, 248, 33, 1024, 256, 0, 1.0f);
    /* bad shapes are refused, naming them */
    st = cu->gemm_bf16(cu, 8, 4, 8, 0, 0, 0, 4, 0.0f, &err);
    ck_assert_int_eq(st, LOOM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "ldd 4"));
    loom_cuda_close(rt);
}
END_TEST

START_TEST(gemm_missing_library_is_unsupported)
{
    /* a name that loads nothing: the call refuses, naming it */
    loom_cuda_runtime *rt = NULL;
    loom_err err = {{0}};
    const char *had = getenv("LOOM_CUBLASLT");
    char *keep = had ? strdup(had) : NULL;
    setenv("LOOM_CUBLASLT", "/nonexistent/libcublasLt.so", 1);
    ck_assert_int_eq(loom_cuda_open(0, &rt, &err), LOOM_OK);
    const loom_cuda *cu = loom_cuda_table(rt);
    loom_status st = cu->gemm_bf16(cu, 0, 0, 0, 0, 0, 0, 0, 0.0f, &err);
    ck_assert_int_eq(st, LOOM_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/libcublasLt.so"));
    /* and keeps refusing, the same way */
    st = cu->gemm_bf16(cu, 8, 8, 8, 0, 0, 0, 8, 0.0f, &err);
    ck_assert_int_eq(st, LOOM_ERR_UNSUPPORTED);
    loom_cuda_close(rt);
    if (keep)
        setenv("LOOM_CUBLASLT", keep, 1);
    else
        unsetenv("LOOM_CUBLASLT");
    free(keep);
}
END_TEST

int main(void)
{
    loom_cuda_facts f;
    if (!gpu_probe(&f))
        return GPU_SKIP;
    Suite *s = suite_create("cuda_gemm");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, gemm_matches_float64);
    tcase_add_test(tc, gemm_missing_library_is_unsupported);
    suite_add_tcase(s, tc);
    return gpu_run_suite(s);
}
