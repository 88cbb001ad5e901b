/* y = W x for the CPU path: every family's linear layers go through here
 * (host->matmul), for F32, F16, BF16 and MLX affine-quantized weights. */
#include <loom/host.h>

#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) &&         \
    !defined(_WIN32)
/* One binary for every x86-64: the loader picks the AVX2/FMA clone where the
 * CPU has it. */
#define LOOM_MULTIVERSION __attribute__((target_clones("avx2,fma", "default")))
#else
#define LOOM_MULTIVERSION
#endif

LOOM_MULTIVERSION
static float dot_f32(const float *a, const float *b, int64_t n)
{
    /* eight partial sums so the compiler can keep a vector of them */
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += a[i + k] * b[i + k];
    float t = 0;
    for (; i < n; i++)
        t += a[i] * b[i];
    return t + ((s[0] + s[4]) + (s[1] + s[5])) +
           ((s[2] + s[6]) + (s[3] + s[7]));
}

LOOM_MULTIVERSION
static float dot_bf16(const uint16_t *w, const float *x, int64_t n)
{
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            uint32_t u = (uint32_t)w[i + k] << 16;
            float f;
            memcpy(&f, &u, sizeof f);
            s[k] += f * x[i + k];
        }
    float t = 0;
    for (; i < n; i++)
        t += loom_bf16_to_f32(w[i]) * x[i];
    return t + ((s[0] + s[4]) + (s[1] + s[5])) +
           ((s[2] + s[6]) + (s[3] + s[7]));
}

struct mm_job {
    const loom_weight *w;
    const float *x;
    float *y;
    int64_t n_tok;
};

static void LOOM_ABI mm_rows(void *ctx, int64_t r0, int64_t r1)
{
    const struct mm_job *j = ctx;
    const loom_weight *w = j->w;
    const int64_t cols = w->cols, rows = w->rows;

    /* Decode of a BF16 or F32 weight: read the weight in place. */
    if (j->n_tok == 1 && w->bits == 0 &&
        (w->dtype == LOOM_DTYPE_BF16 || w->dtype == LOOM_DTYPE_F32)) {
        for (int64_t r = r0; r < r1; r++) {
            if (w->dtype == LOOM_DTYPE_BF16)
                j->y[r] =
                    dot_bf16((const uint16_t *)w->data + r * cols, j->x, cols);
            else
                j->y[r] =
                    dot_f32((const float *)w->data + r * cols, j->x, cols);
        }
        return;
    }

    /* Rows are at most a layer's input width (tens of thousands of floats),
     * well inside a thread's stack. */
    float row[cols];
    for (int64_t r = r0; r < r1; r++) {
        const float *wr;
        if (w->bits == 0 && w->dtype == LOOM_DTYPE_F32) {
            wr = (const float *)w->data + r * cols;
        } else {
            loom_weight_row(w, r, row);
            wr = row;
        }
        for (int64_t t = 0; t < j->n_tok; t++)
            j->y[t * rows + r] = dot_f32(wr, j->x + t * cols, cols);
    }
}

void loom_matmul(loom_pool *pool, const loom_weight *w, const float *x,
                 float *y, int64_t n_tok)
{
    struct mm_job j = {w, x, y, n_tok};
    /* Parts of at least 16 rows keep the per-part overhead small. */
    int64_t n = w->rows;
    if (n < 16 || loom_pool_size(pool) == 1) {
        mm_rows(&j, 0, n);
        return;
    }
    loom_pool_run(pool, n, mm_rows, &j);
}
