/* The CUDA runtime on a real device: the table is filled, an embedded
 * fatbin runs, the budget refuses with LOOM_ERR_FULL, and 20 open/close
 * cycles leave the account at zero and the device's free memory where it
 * was. Skipped (77) where there is no driver or device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/cuda_runtime.h>
#include <loom/fatbin.h>

#include "gpuutil.h"
#include "testutil.h"

#define MiB (1024.0 * 1024.0)

static loom_cuda_runtime *open_or_fail(double memory)
{
    loom_cuda_runtime *rt = NULL;
    loom_err err;
    loom_status st = loom_cuda_open(memory, &rt, &err);
    ck_assert_msg(st == LOOM_OK, "open: %s", err.msg);
    return rt;
}

START_TEST(table_is_filled)
{
    loom_cuda_runtime *rt = open_or_fail(0);
    const loom_cuda *cu = loom_cuda_table(rt);
    ck_assert_uint_eq(cu->struct_size, sizeof *cu);
    ck_assert_uint_eq(cu->version, LOOM_CUDA_DRIVER_VERSION);
    ck_assert(cu->name[0] != 0);
    ck_assert_int_ge(cu->cc_major, 7);
    ck_assert_int_gt(cu->sm_count, 0);
    ck_assert_int_ge(cu->driver_version, LOOM_CUDA_DRIVER_VERSION);
    ck_assert(cu->total_bytes > ((uint64_t)1 << 30));
    ck_assert(cu->l2_bytes > 0);
    ck_assert(cu->smem_per_block_optin >= 48 * 1024);
    ck_assert_ptr_nonnull(cu->context);
    ck_assert_ptr_nonnull(cu->stream);
    /* budget: 90% by default */
    ck_assert_uint_eq(loom_cuda_budget(rt), cu->total_bytes / 10 * 9);
    /* the driver's error names come through */
    ck_assert_str_eq(cu->error_name(cu, 2), "CUDA_ERROR_OUT_OF_MEMORY");
    ck_assert_str_eq(cu->error_name(cu, 0), "CUDA_SUCCESS");
    size_t free_b = 0, total_b = 0;
    ck_assert_int_eq(cu->memGetInfo(&free_b, &total_b), 0);
    ck_assert_uint_eq(total_b, cu->total_bytes);
    printf("device: %s, cc %d.%d, %d SMs, %.0f MiB, L2 %.0f MiB, smem optin "
           "%llu, driver %d\n",
           cu->name, cu->cc_major, cu->cc_minor, cu->sm_count,
           (double)cu->total_bytes / MiB, (double)cu->l2_bytes / MiB,
           (unsigned long long)cu->smem_per_block_optin, cu->driver_version);
    loom_cuda_close(rt);
}
END_TEST

START_TEST(embedded_fatbin_runs)
{
#if LOOM_HAVE_CUDA
    loom_cuda_runtime *rt = open_or_fail(0);
    const loom_cuda *cu = loom_cuda_table(rt);
    loom_err err;
    loom_cu_module mod = NULL;
    loom_cu_function fn = NULL;
    ck_assert_int_eq(cu->moduleLoadData(&mod, LOOM_FATBIN), 0);
    ck_assert_int_eq(cu->moduleGetFunction(&fn, mod, "loom_test_axpy"), 0);
    enum { N = 100000 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = (float)(N - i);
    }
    loom_cu_ptr dx = 0, dy = 0;
    ck_assert_int_eq(cu->alloc(cu, LOOM_MEM_SCRATCH, N * 4, &dx, &err), 0);
    ck_assert_int_eq(cu->alloc(cu, LOOM_MEM_SCRATCH, N * 4, &dy, &err), 0);
    ck_assert_uint_eq(cu->used(cu, LOOM_MEM_SCRATCH), 2 * N * 4);
    ck_assert_int_eq(cu->memcpyHtoDAsync(dx, x, N * 4, cu->stream), 0);
    ck_assert_int_eq(cu->memcpyHtoDAsync(dy, y, N * 4, cu->stream), 0);
    float a = 2.0f;
    int n = N;
    void *params[] = {&a, &dx, &dy, &n};
    ck_assert_int_eq(cu->launchKernel(fn, (N + 255) / 256, 1, 1, 256, 1, 1, 0,
                                      cu->stream, params, NULL),
                     0);
    ck_assert_int_eq(cu->memcpyDtoHAsync(y, dy, N * 4, cu->stream), 0);
    ck_assert_int_eq(cu->streamSynchronize(cu->stream), 0);
    /* exact in float: 2i + (N - i) = N + i < 2^24 */
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(y[i], (float)(N + i));
    cu->free(cu, LOOM_MEM_SCRATCH, dx, N * 4);
    cu->free(cu, LOOM_MEM_SCRATCH, dy, N * 4);
    ck_assert_uint_eq(cu->used(cu, LOOM_MEM_USE_COUNT), 0);
    ck_assert_int_eq(cu->moduleUnload(mod), 0);
    free(x);
    free(y);
    loom_cuda_close(rt);
#else
    ck_abort_msg("built without nvcc: no fatbin to run");
#endif
}
END_TEST

START_TEST(budget_refuses_with_full)
{
    /* a byte budget of 3 MiB */
    loom_cuda_runtime *rt = open_or_fail(3 * MiB);
    const loom_cuda *cu = loom_cuda_table(rt);
    ck_assert_uint_eq(loom_cuda_budget(rt), 3 * 1024 * 1024);
    loom_err err;
    loom_cu_ptr a = 0, b = 0, c = 7;
    ck_assert_int_eq(cu->alloc(cu, LOOM_MEM_WEIGHTS, 2 << 20, &a, &err), 0);
    ck_assert(a != 0);
    ck_assert_int_eq(cu->alloc(cu, LOOM_MEM_CACHE, 2 << 20, &c, &err),
                     LOOM_ERR_FULL);
    ck_assert_uint_eq(c, 7); /* untouched on failure */
    ck_assert_msg(strstr(err.msg, "cache") && strstr(err.msg, "2097152"),
                  "message names the use and bytes: %s", err.msg);
    ck_assert_int_eq(cu->alloc(cu, LOOM_MEM_CACHE, 1 << 20, &b, &err), 0);
    ck_assert_uint_eq(cu->used(cu, LOOM_MEM_WEIGHTS), 2 << 20);
    ck_assert_uint_eq(cu->used(cu, LOOM_MEM_CACHE), 1 << 20);
    ck_assert_uint_eq(cu->used(cu, LOOM_MEM_USE_COUNT), 3 << 20);
    cu->free(cu, LOOM_MEM_WEIGHTS, a, 2 << 20);
    cu->free(cu, LOOM_MEM_CACHE, b, 1 << 20);
    cu->free(cu, LOOM_MEM_CACHE, 0, 0); /* a no-op */
    ck_assert_uint_eq(cu->used(cu, LOOM_MEM_USE_COUNT), 0);
    loom_cuda_close(rt);

    /* a fraction of the device */
    rt = open_or_fail(0.25);
    cu = loom_cuda_table(rt);
    ck_assert_uint_eq(loom_cuda_budget(rt),
                      (uint64_t)(0.25 * (double)cu->total_bytes));
    ck_assert_int_eq(
        cu->alloc(cu, LOOM_MEM_SCRATCH, cu->total_bytes / 4 + 4096, &a, &err),
        LOOM_ERR_FULL);
    loom_cuda_close(rt);
}
END_TEST

/* One engine's life: open, allocate by every use, load the fatbin, record
 * an event, free, close; the account reads zero before close. */
static void one_cycle(void)
{
    loom_cuda_runtime *rt = open_or_fail(0);
    const loom_cuda *cu = loom_cuda_table(rt);
    loom_err err;
    loom_cu_ptr p[4] = {0};
    const uint64_t sz[4] = {64 << 20, 16 << 20, 1 << 20, 4096};
    const loom_mem_use use[4] = {LOOM_MEM_WEIGHTS, LOOM_MEM_CACHE,
                                 LOOM_MEM_SCRATCH, LOOM_MEM_DRAFTER};
    for (int i = 0; i < 4; i++)
        ck_assert_msg(cu->alloc(cu, use[i], sz[i], &p[i], &err) == 0, "%s",
                      err.msg);
    ck_assert_uint_eq(cu->used(cu, LOOM_MEM_USE_COUNT),
                      sz[0] + sz[1] + sz[2] + sz[3]);
#if LOOM_HAVE_CUDA
    loom_cu_module mod = NULL;
    ck_assert_int_eq(cu->moduleLoadData(&mod, LOOM_FATBIN), 0);
    ck_assert_int_eq(cu->moduleUnload(mod), 0);
#endif
    loom_cu_event ev = NULL;
    ck_assert_int_eq(cu->eventCreate(&ev, 0), 0);
    ck_assert_int_eq(cu->eventRecord(ev, cu->stream), 0);
    ck_assert_int_eq(cu->eventSynchronize(ev), 0);
    ck_assert_int_eq(cu->eventDestroy(ev), 0);
    for (int i = 0; i < 4; i++)
        cu->free(cu, use[i], p[i], sz[i]);
    for (int u = 0; u <= LOOM_MEM_USE_COUNT; u++)
        ck_assert_uint_eq(cu->used(cu, (loom_mem_use)u), 0);
    loom_cuda_close(rt);
}

START_TEST(twenty_cycles_release_everything)
{
    /* A runtime held throughout keeps the (shared, primary) context alive,
     * so what a cycle leaks shows in the free memory it reads. One cycle
     * first: the driver keeps what a context's first stream, event or
     * module sets up (2 MiB seen on an H200) for the context's lifetime. */
    loom_cuda_runtime *keep = open_or_fail(0);
    const loom_cuda *kc = loom_cuda_table(keep);
    size_t free_pre = 0, free0 = 0, total = 0, free_i = 0;
    ck_assert_int_eq(kc->memGetInfo(&free_pre, &total), 0);
    one_cycle();
    ck_assert_int_eq(kc->ctxSetCurrent(kc->context), 0);
    ck_assert_int_eq(kc->memGetInfo(&free0, &total), 0);
    double worst = 0;
    for (int cycle = 0; cycle < 20; cycle++) {
        one_cycle();
        ck_assert_int_eq(kc->ctxSetCurrent(kc->context), 0);
        ck_assert_int_eq(kc->memGetInfo(&free_i, &total), 0);
        double drop = ((double)free0 - (double)free_i) / MiB;
        if (drop > worst)
            worst = drop;
        ck_assert_msg(drop < 1.0, "cycle %d: %.3f MiB less free than before",
                      cycle, drop);
    }
    printf("20 cycles in a held context: free memory at most %.3f MiB below "
           "its value before them (the first cycle kept %.3f MiB)\n",
           worst, ((double)free_pre - (double)free0) / MiB);
    loom_cuda_close(keep);
}
END_TEST

START_TEST(twenty_fresh_contexts_release_everything)
{
    /* nothing held between cycles: each open makes the context anew, and
     * reads the free memory the last close left */
    size_t first = 0, free_i = 0, total = 0;
    double worst = 0;
    for (int cycle = 0; cycle < 20; cycle++) {
        loom_cuda_runtime *rt = open_or_fail(0);
        const loom_cuda *cu = loom_cuda_table(rt);
        ck_assert_int_eq(cu->memGetInfo(&free_i, &total), 0);
        loom_cuda_close(rt);
        if (cycle == 0)
            first = free_i;
        double drop = ((double)first - (double)free_i) / MiB;
        if (drop > worst)
            worst = drop;
        ck_assert_msg(drop < 1.0, "cycle %d: %.3f MiB less free than cycle 0",
                      cycle, drop);
        one_cycle();
    }
    printf("20 fresh contexts: free memory at open at most %.3f MiB below the "
           "first\n",
           worst);
}
END_TEST

int main(void)
{
    loom_cuda_facts f;
    if (!gpu_probe(&f))
        return GPU_SKIP;
    Suite *s = suite_create("cuda_runtime");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, table_is_filled);
    tcase_add_test(tc, embedded_fatbin_runs);
    tcase_add_test(tc, budget_refuses_with_full);
    tcase_add_test(tc, twenty_cycles_release_everything);
    tcase_add_test(tc, twenty_fresh_contexts_release_everything);
    suite_add_tcase(s, tc);
    return gpu_run_suite(s);
}
