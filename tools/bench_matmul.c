/* Times loom_matmul (the decode kernels) and loom_matmul_prompt on a BF16
 * weight of the 0.8B geometry's shapes, one thread, every prompt ISA, and
 * prints GFLOP/s (2 rows cols tokens / s).
 * Build: cc -O2 -Icore/include -Isdk/include tools/bench_matmul.c \
 *   build/core/libloomcore.a -lm -lpthread -o bench_matmul */
#include <loom/weights.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int64_t M = argc > 1 ? atoll(argv[1]) : 3584;
    int64_t K = argc > 2 ? atoll(argv[2]) : 1024;
    int64_t T = argc > 3 ? atoll(argv[3]) : 128;
    uint16_t *wd = malloc(sizeof(uint16_t) * (size_t)(M * K));
    float *x = malloc(sizeof(float) * (size_t)(T * K));
    float *y = malloc(sizeof(float) * (size_t)(T * M));
    uint32_t s = 1;
    for (int64_t i = 0; i < M * K; i++) {
        s = s * 1664525u + 1013904223u;
        wd[i] = loom_f32_to_bf16(((float)(s >> 8) / 16777216.0f - 0.5f));
    }
    for (int64_t i = 0; i < T * K; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    loom_weight w = {sizeof w, LOOM_DTYPE_BF16, M, K, wd, 0, 0, 0, 0, 0};
    double flop = 2.0 * (double)M * (double)K * (double)T;
    for (int isa = -1; isa <= (int)loom_matmul_prompt_isa(); isa++) {
        double best = 1e9;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now();
            if (isa < 0)
                loom_matmul(NULL, &w, x, y, T);
            else
                loom_matmul_prompt_on(NULL, (loom_mm_isa)isa, &w, x, y, T);
            double dt = now() - t0;
            best = dt < best ? dt : best;
        }
        printf("%-18s M %lld K %lld T %lld: %.2f ms, %.1f GFLOP/s\n",
               isa < 0 ? "matmul (decode)"
                       : loom_matmul_isa_name((loom_mm_isa)isa),
               (long long)M, (long long)K, (long long)T, best * 1e3,
               flop / best * 1e-9);
    }
    free(wd);
    free(x);
    free(y);
    return 0;
}
