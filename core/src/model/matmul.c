/* y = W x for the CPU path: every family's linear layers go through here
 * (host->matmul), for F32, F16, BF16 and MLX affine-quantized weights.
 *
 * One row's result is bit-identical whatever the number of tokens in the
 * call: each token has its own accumulators, filled in the same order by
 * the same instructions, and the weight conversions used are exact. The
 * families' window/commit checks compare logits byte for byte and rely on
 * this. */
#include <loom/weights.h>

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define LOOM_HAVE_AVX2_PATH 1
#endif

/* Rows converted to float32 together when several tokens share a call, so
 * the tokens are read once per tile rather than once per row. */
#define TILE_ROWS 16
/* Tokens that share one pass over a weight row (registers per token: 2). */
#define TOK_BLOCK 4
/* Up to this many tokens (a verify window) read typed rows in place. */
#define FEW_TOK 16

enum { W_F32, W_BF16, W_F16 };

static int plain_type(const loom_weight *w)
{
    if (w->bits != 0)
        return -1;
    switch (w->dtype) {
    case LOOM_DTYPE_F32:
        return W_F32;
    case LOOM_DTYPE_BF16:
        return W_BF16;
    case LOOM_DTYPE_F16:
        return W_F16;
    default:
        return -1;
    }
}

static float w_scalar(const void *w, int64_t i, int type)
{
    switch (type) {
    case W_F32:
        return ((const float *)w)[i];
    case W_BF16:
        return loom_bf16_to_f32(((const uint16_t *)w)[i]);
    default:
        return loom_f16_to_f32(((const uint16_t *)w)[i]);
    }
}

/* ---------------------------------------------------------------- generic */

/* out[t * ostride] = dot(w, x + t * cols) for t < nt, sixteen partial sums
 * per token. */
static void kern_generic(const float *w, const float *x, int64_t cols, int nt,
                         float *out, int64_t ostride)
{
    for (int t = 0; t < nt; t++) {
        const float *xt = x + (int64_t)t * cols;
        float s[16] = {0};
        int64_t i = 0;
        for (; i + 16 <= cols; i += 16)
            for (int k = 0; k < 16; k++)
                s[k] += w[i + k] * xt[i + k];
        float tail = 0;
        for (; i < cols; i++)
            tail += w[i] * xt[i];
        float a[8];
        for (int k = 0; k < 8; k++)
            a[k] = s[k] + s[k + 8];
        out[t * ostride] = (((a[0] + a[4]) + (a[1] + a[5])) +
                            ((a[2] + a[6]) + (a[3] + a[7]))) +
                           tail;
    }
}

/* ---------------------------------------------------------------- AVX2 */

#ifdef LOOM_HAVE_AVX2_PATH
#define AVX2        __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE AVX2 __attribute__((always_inline)) static inline

AVX2_INLINE __m256 load_w8(const void *w, int64_t i, int type)
{
    if (type == W_F32)
        return _mm256_loadu_ps((const float *)w + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    if (type == W_BF16)
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* Accumulates token T's products into its two accumulators. */
#define ACC(T)                                                                 \
    if (nt > T) {                                                              \
        const float *xt = x + (int64_t)(T)*cols + i;                           \
        a##T = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xt), a##T);                 \
        b##T = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xt + 8), b##T);             \
    }

/* Sums token T's accumulators and tail into out[T * ostride]. */
#define FINISH(T)                                                              \
    if (nt > T) {                                                              \
        const float *xt = x + (int64_t)(T)*cols;                               \
        float tail = 0, s[8];                                                  \
        for (int64_t j = i; j < cols; j++)                                     \
            tail += w_scalar(w, j, type) * xt[j];                              \
        _mm256_storeu_ps(s, _mm256_add_ps(a##T, b##T));                        \
        out[(T)*ostride] = (((s[0] + s[4]) + (s[1] + s[5])) +                  \
                            ((s[2] + s[6]) + (s[3] + s[7]))) +                 \
                           tail;                                               \
    }

/* The AVX2 twin of kern_generic for a typed row; `type` and `nt` are
 * constants at every call, and the accumulators are named variables (not an
 * array) so that they stay in registers. */
AVX2_INLINE void kern_avx2(const void *w, int type, const float *x,
                           int64_t cols, int nt, float *out, int64_t ostride)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    int64_t i = 0;
    for (; i + 16 <= cols; i += 16) {
        __m256 w0 = load_w8(w, i, type), w1 = load_w8(w, i + 8, type);
        ACC(0)
        ACC(1)
        ACC(2)
        ACC(3)
    }
    FINISH(0)
    FINISH(1)
    FINISH(2)
    FINISH(3)
}
#undef ACC
#undef FINISH

#define KERN_NT(type)                                                          \
    AVX2 static void kern_##type(const void *w, const float *x, int64_t cols,  \
                                 int nt, float *out, int64_t ostride)          \
    {                                                                          \
        switch (nt) {                                                          \
        case 1:                                                                \
            kern_avx2(w, type, x, cols, 1, out, ostride);                      \
            break;                                                             \
        case 2:                                                                \
            kern_avx2(w, type, x, cols, 2, out, ostride);                      \
            break;                                                             \
        case 3:                                                                \
            kern_avx2(w, type, x, cols, 3, out, ostride);                      \
            break;                                                             \
        default:                                                               \
            kern_avx2(w, type, x, cols, 4, out, ostride);                      \
            break;                                                             \
        }                                                                      \
    }
KERN_NT(W_F32)
KERN_NT(W_BF16)
KERN_NT(W_F16)

static int have_avx2(void)
{
    /* F16C from CPUID leaf 1 (ECX bit 29): clang before 16 does not know
     * "f16c" in __builtin_cpu_supports */
    unsigned a = 0, b = 0, c = 0, d = 0;
    int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u);
    return f16c && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma");
}
#endif

/* ---------------------------------------------------------------- driver */

struct mm_job {
    const loom_weight *w;
    const float *x;
    float *y;
    int64_t n_tok;
    int avx2;
};

/* Dot products of one float32 (or, on the AVX2 path, typed) row with up to
 * TOK_BLOCK tokens. */
static void kern(const struct mm_job *j, const void *row, int type,
                 const float *x, int nt, float *out)
{
    const int64_t cols = j->w->cols, rows = j->w->rows;
#ifdef LOOM_HAVE_AVX2_PATH
    if (j->avx2) {
        if (type == W_BF16)
            kern_W_BF16(row, x, cols, nt, out, rows);
        else if (type == W_F16)
            kern_W_F16(row, x, cols, nt, out, rows);
        else
            kern_W_F32(row, x, cols, nt, out, rows);
        return;
    }
#endif
    (void)type;
    kern_generic(row, x, cols, nt, out, rows);
}

static size_t elem_size(int type)
{
    return type == W_F32 ? 4 : 2;
}

static void LOOM_ABI mm_rows(void *ctx, int64_t r0, int64_t r1)
{
    const struct mm_job *j = ctx;
    const loom_weight *w = j->w;
    const int64_t cols = w->cols;
    const int type = plain_type(w);

    /* Few tokens (a decode row, a verify window) on the AVX2 path read
     * typed rows in place: decode is bound by how fast the weights stream
     * in, and converting tiles would cost more than the products. */
    if (j->n_tok <= FEW_TOK && j->avx2 && type >= 0) {
        size_t es = elem_size(type);
        for (int64_t r = r0; r < r1; r++)
            for (int64_t t = 0; t < j->n_tok; t += TOK_BLOCK) {
                int nt =
                    (int)(j->n_tok - t < TOK_BLOCK ? j->n_tok - t : TOK_BLOCK);
                kern(j, (const char *)w->data + (size_t)r * cols * es, type,
                     j->x + t * cols, nt, j->y + t * w->rows + r);
            }
        return;
    }

    float *buf = NULL;
    if (type != W_F32) {
        buf = malloc(sizeof(float) * (size_t)cols * TILE_ROWS);
        if (!buf) {
            /* No scratch: go row by row through a stack row instead. */
            float row[cols];
            for (int64_t r = r0; r < r1; r++) {
                loom_weight_row(w, r, row);
                for (int64_t t = 0; t < j->n_tok; t += TOK_BLOCK) {
                    int nt = (int)(j->n_tok - t < TOK_BLOCK ? j->n_tok - t
                                                            : TOK_BLOCK);
                    kern(j, row, W_F32, j->x + t * cols, nt,
                         j->y + t * w->rows + r);
                }
            }
            return;
        }
    }
    for (int64_t t0 = r0; t0 < r1; t0 += TILE_ROWS) {
        int nr = (int)(r1 - t0 < TILE_ROWS ? r1 - t0 : TILE_ROWS);
        const float *rowp[TILE_ROWS];
        for (int k = 0; k < nr; k++) {
            if (type == W_F32) {
                rowp[k] = (const float *)w->data + (size_t)(t0 + k) * cols;
            } else {
                float *dst = buf + (size_t)k * cols;
                loom_weight_row(w, t0 + k, dst);
                rowp[k] = dst;
            }
        }
        for (int64_t t = 0; t < j->n_tok; t += TOK_BLOCK) {
            int nt = (int)(j->n_tok - t < TOK_BLOCK ? j->n_tok - t : TOK_BLOCK);
            for (int k = 0; k < nr; k++)
                kern(j, rowp[k], W_F32, j->x + t * cols, nt,
                     j->y + t * w->rows + t0 + k);
        }
    }
    free(buf);
}

void loom_matmul(loom_pool *pool, const loom_weight *w, const float *x,
                 float *y, int64_t n_tok)
{
    struct mm_job j = {w, x, y, n_tok, 0};
#ifdef LOOM_HAVE_AVX2_PATH
    j.avx2 = have_avx2();
#endif
    int64_t n = w->rows;
    /* Small products are not worth waking the pool for. */
    if (n * w->cols * n_tok < 32768 || loom_pool_size(pool) == 1) {
        mm_rows(&j, 0, n);
        return;
    }
    loom_pool_run(pool, n, mm_rows, &j);
}
