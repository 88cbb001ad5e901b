/* The GPU-suite helpers declared in gpuutil.h. */
#define _POSIX_C_SOURCE 200809L /* setenv: test-only */
#include "gpuutil.h"

#include <stdio.h>
#include <stdlib.h>

#include "testmodel.h"

int gpu_probe(loom_cuda_facts *facts)
{
    loom_err err;
    if (loom_cuda_probe(facts, &err) != LOOM_OK) {
        printf("skipped: %s\n", err.msg);
        return 0;
    }
    /* the CPU path is the GPU's reference: its prompt chunks on float32
     * sums (AVX-512F where the CPU has it), not the AMX / AVX512-BF16
     * tiles that round x to BF16 as the GPU's own prompt path does */
    setenv("LOOM_PROMPT_ISA", "avx512", 1);
    return 1;
}

int gpu_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

loom_engine *gpu_open(const char *dir, int device, int32_t max_streams,
                      const char *plugin)
{
    loom_err err = {{0}};
    loom_engine *e = tm_open_on(dir, device, 0, max_streams, NULL, &err);
    ck_assert_msg(e != NULL, "open %s: %s", dir, err.msg);
    if (plugin)
        ck_assert_str_eq(e->plugin->plugin->name, plugin);
    ck_assert_int_eq(e->info.device, device);
    return e;
}
