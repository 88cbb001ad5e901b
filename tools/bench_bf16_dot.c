/* Measures BF16 matrix-vector kernels over a weight matrix far larger than
 * the caches (decode reads every weight once per token), against a plain
 * streaming read of the same bytes: the evidence behind the qwen35 report's
 * note on core/src/matmul.c. "auto" is the loop shape of dot_bf16 there (the
 * compiler vectorises it to 128-bit lanes); "avx2" converts 32 BF16 values
 * per step with 256-bit shifts into four FMA accumulators.
 * Build: cc -O2 tools/bench_bf16_dot.c -o bench_bf16_dot (x86-64 only). */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__attribute__((target("avx2,fma"))) static float
dot_auto(const uint16_t *w, const float *x, int64_t n)
{
    float s[8] = {0};
    for (int64_t i = 0; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            uint32_t u = (uint32_t)w[i + k] << 16;
            float f;
            memcpy(&f, &u, sizeof f);
            s[k] += f * x[i + k];
        }
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

__attribute__((target("avx2,fma"))) static __m256 bf16x8(__m128i h)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* n a multiple of 32 */
__attribute__((target("avx2,fma"))) static float
dot_avx2(const uint16_t *w, const float *x, int64_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < n; i += 32) {
        __m256i w0 = _mm256_loadu_si256((const __m256i *)(w + i));
        __m256i w1 = _mm256_loadu_si256((const __m256i *)(w + i + 16));
        a0 = _mm256_fmadd_ps(bf16x8(_mm256_castsi256_si128(w0)),
                             _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(bf16x8(_mm256_extracti128_si256(w0, 1)),
                             _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(bf16x8(_mm256_castsi256_si128(w1)),
                             _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(bf16x8(_mm256_extracti128_si256(w1, 1)),
                             _mm256_loadu_ps(x + i + 24), a3);
    }
    float t[8];
    _mm256_storeu_ps(
        t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    return ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
}

static uint64_t sum_read(const uint64_t *a, size_t n)
{
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        s0 += a[i];
        s1 += a[i + 1];
        s2 += a[i + 2];
        s3 += a[i + 3];
    }
    return s0 + s1 + s2 + s3;
}

int main(void)
{
    const size_t rows = 400000, cols = 1024, n = rows * cols; /* 800 MB */
    uint16_t *w = malloc(n * 2);
    float *x = malloc(cols * 4), *y = malloc(rows * 4);
    if (!w || !x || !y)
        return 1;
    for (size_t i = 0; i < n; i++)
        w[i] = (uint16_t)(0x3c00 + (i & 255));
    for (size_t i = 0; i < cols; i++)
        x[i] = 1e-3f * (float)i;
    volatile uint64_t sink = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        sink += sum_read((const uint64_t *)w, n / 4);
        double tr = now() - t0;
        t0 = now();
        for (size_t r = 0; r < rows; r++)
            y[r] = dot_auto(w + r * cols, x, (int64_t)cols);
        double ta = now() - t0;
        t0 = now();
        for (size_t r = 0; r < rows; r++)
            y[r] = dot_avx2(w + r * cols, x, (int64_t)cols);
        double tv = now() - t0;
        printf("one thread, GB/s: read %.2f  auto %.2f  avx2 %.2f\n",
               n * 2 / tr / 1e9, n * 2 / ta / 1e9, n * 2 / tv / 1e9);
    }
    free(w);
    free(x);
    free(y);
    return 0;
}
