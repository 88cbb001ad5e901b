/* The engine's device on a real GPU, with the toy test family: --device
 * auto and cuda open the runtime and host->cuda() hands plugins its table,
 * --device cpu opens none, --gpu-memory sets the budget, and engine close
 * gives back every byte (cuMemGetInfo in a held context). Skipped (77)
 * where there is no driver or device. */
#include <stdio.h>
#include <string.h>

#include <loom/engine.h>

#include "gpuutil.h"
#include "testutil.h"

#define MiB (1024.0 * 1024.0)

static loom_engine *open_toy(int device, double gpu_memory)
{
    const char *dirs[1] = {LOOM_TEST_PLUGIN_DIR};
    loom_engine_params p;
    memset(&p, 0, sizeof p);
    p.model = fixture("models/toy");
    p.plugin_dirs = dirs;
    p.n_plugin_dirs = 1;
    p.device = device;
    p.n_threads = 1;
    p.gpu_memory = gpu_memory;
    loom_engine *e = NULL;
    loom_err err;
    ck_assert_msg(loom_engine_open(&p, &e, &err) == LOOM_OK, "%s", err.msg);
    return e;
}

START_TEST(auto_and_cuda_hand_plugins_the_table)
{
    const int kinds[2] = {LOOM_DEVICE_AUTO, LOOM_DEVICE_CUDA};
    for (int i = 0; i < 2; i++) {
        loom_engine *e = open_toy(kinds[i], 0);
        ck_assert_ptr_nonnull(e->cuda);
        const loom_host *h = &e->hs.host;
        const loom_cuda *cu = h->cuda(h);
        ck_assert_ptr_eq(cu, loom_cuda_table(e->cuda));
        ck_assert_uint_eq(cu->struct_size, sizeof *cu);
        /* the table lent to the family plugin answers the same */
        const loom_host *ph = e->plugin->host;
        ck_assert_ptr_ne(ph, h);
        ck_assert_ptr_eq(ph->cuda(ph), cu);
        /* the table works from the plugin's side of the host */
        loom_err err;
        loom_cu_ptr p = 0;
        ck_assert_int_eq(cu->alloc(cu, LOOM_MEM_CACHE, 1 << 20, &p, &err), 0);
        ck_assert_int_eq(cu->memsetD8Async(p, 0, 1 << 20, cu->stream), 0);
        ck_assert_int_eq(cu->streamSynchronize(cu->stream), 0);
        cu->free(cu, LOOM_MEM_CACHE, p, 1 << 20);
        ck_assert_uint_eq(cu->used(cu, LOOM_MEM_USE_COUNT), 0);
        loom_engine_close(e);
    }
}
END_TEST

START_TEST(cpu_opens_no_device)
{
    loom_engine *e = open_toy(LOOM_DEVICE_CPU, 0);
    ck_assert_ptr_null(e->cuda);
    ck_assert_ptr_null(e->hs.host.cuda(&e->hs.host));
    ck_assert_str_eq(e->device_why, "--device cpu");
    ck_assert_int_eq(e->info.device, LOOM_DEVICE_CPU);
    loom_engine_close(e);
}
END_TEST

START_TEST(gpu_memory_sets_the_budget)
{
    loom_engine *e = open_toy(LOOM_DEVICE_AUTO, 0.5);
    const loom_cuda *cu = loom_cuda_table(e->cuda);
    ck_assert_uint_eq(loom_cuda_budget(e->cuda),
                      (uint64_t)(0.5 * (double)cu->total_bytes));
    loom_engine_close(e);
    e = open_toy(LOOM_DEVICE_AUTO, 64.0 * MiB);
    cu = loom_cuda_table(e->cuda);
    ck_assert_uint_eq(loom_cuda_budget(e->cuda), 64u << 20);
    loom_err err;
    loom_cu_ptr p = 0;
    ck_assert_int_eq(cu->alloc(cu, LOOM_MEM_WEIGHTS, 65u << 20, &p, &err),
                     LOOM_ERR_FULL);
    ck_assert_msg(strstr(err.msg, "weights") && strstr(err.msg, "68157440"),
                  "%s", err.msg);
    loom_engine_close(e);
}
END_TEST

START_TEST(engine_close_gives_back_every_byte)
{
    loom_cuda_runtime *keep = NULL;
    loom_err err;
    ck_assert(loom_cuda_open(0, &keep, &err) == LOOM_OK);
    const loom_cuda *kc = loom_cuda_table(keep);
    /* one engine first: the context's lazily made driver state stays */
    loom_engine_close(open_toy(LOOM_DEVICE_AUTO, 0));
    size_t free0 = 0, free_i = 0, total = 0;
    ck_assert_int_eq(kc->ctxSetCurrent(kc->context), 0);
    ck_assert_int_eq(kc->memGetInfo(&free0, &total), 0);
    double worst = 0;
    for (int cycle = 0; cycle < 10; cycle++) {
        loom_engine *e = open_toy(LOOM_DEVICE_AUTO, 0);
        const loom_cuda *cu = e->hs.host.cuda(&e->hs.host);
        loom_cu_ptr p = 0;
        ck_assert_int_eq(cu->alloc(cu, LOOM_MEM_WEIGHTS, 32 << 20, &p, &err),
                         0);
        cu->free(cu, LOOM_MEM_WEIGHTS, p, 32 << 20);
        loom_engine_close(e);
        ck_assert_int_eq(kc->ctxSetCurrent(kc->context), 0);
        ck_assert_int_eq(kc->memGetInfo(&free_i, &total), 0);
        double drop = ((double)free0 - (double)free_i) / MiB;
        if (drop > worst)
            worst = drop;
        ck_assert_msg(drop < 1.0, "engine %d: %.3f MiB less free", cycle, drop);
    }
    printf("10 engines opened and closed: free memory at most %.3f MiB below "
           "the start\n",
           worst);
    loom_cuda_close(keep);
}
END_TEST

int main(void)
{
    loom_cuda_facts f;
    if (!gpu_probe(&f))
        return GPU_SKIP;
    Suite *s = suite_create("cuda_engine");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, auto_and_cuda_hand_plugins_the_table);
    tcase_add_test(tc, cpu_opens_no_device);
    tcase_add_test(tc, gpu_memory_sets_the_budget);
    tcase_add_test(tc, engine_close_gives_back_every_byte);
    suite_add_tcase(s, tc);
    return gpu_run_suite(s);
}
