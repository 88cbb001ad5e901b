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

/* Typed rows are prefetched this far ahead of the loads, one line per 32
 * columns: on the 16-core Xeon host one decode thread went from 8.98 to
 * 9.62 GB/s of weights with it at 1024 bytes (loom bench, 0.8B BF16); with
 * pf_off's hand-over to the next pass, 2048 read 25.3-27.0 GB/s against
 * 21.7-25.6 at 1024 and 24.4-25.9 at 4096 on one thread of the 2-core
 * EPYC development VM (0.8B; 2B 27.2-27.3 against 23.8-24.8). */
#define PF_BYTES 2048

/* Where column i's prefetch goes in a pass that streams R rows of rb bytes
 * (16-bit weights) laid out one after another, one stream a row: PF_BYTES
 * ahead in the row, and once that passes the row's end, the same distance
 * into this row's successor in the next pass, since the rows in between
 * are the other streams'. Short rows (0.8B's 2 KiB) otherwise left most of
 * the next pass's rows to demand misses. */
static inline int64_t pf_off(int64_t i, int64_t rb, int R)
{
    int64_t o = 2 * i + PF_BYTES;
    return o < rb ? o : o + (int64_t)(R - 1) * rb;
}
/* Rows converted to float32 together when several tokens share a call, so
 * the tokens are read once per tile rather than once per row. */
#define TILE_ROWS 16
/* Tokens that share one pass over a weight row (registers per token: 2). */
#define TOK_BLOCK 4

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

/* One token over four typed rows at once, each row's a and b filled as
 * kern_avx2 fills them for one token: four rows' loads in flight and eight
 * independent chains. Lanes go to acc[16 r ...] as a then b. */
AVX2_INLINE void dec4_avx2(const void *const *w, int type, const float *x,
                           int64_t c16, int64_t rb, float *acc)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (int64_t i = 0; i < c16; i += 16) {
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
        if (type != W_F32 && (i & 31) == 0)
            for (int r = 0; r < 4; r++)
                _mm_prefetch((const char *)w[r] + pf_off(i, rb, 4),
                             _MM_HINT_T0);
        a0 = _mm256_fmadd_ps(load_w8(w[0], i, type), x0, a0);
        b0 = _mm256_fmadd_ps(load_w8(w[0], i + 8, type), x1, b0);
        a1 = _mm256_fmadd_ps(load_w8(w[1], i, type), x0, a1);
        b1 = _mm256_fmadd_ps(load_w8(w[1], i + 8, type), x1, b1);
        a2 = _mm256_fmadd_ps(load_w8(w[2], i, type), x0, a2);
        b2 = _mm256_fmadd_ps(load_w8(w[2], i + 8, type), x1, b2);
        a3 = _mm256_fmadd_ps(load_w8(w[3], i, type), x0, a3);
        b3 = _mm256_fmadd_ps(load_w8(w[3], i + 8, type), x1, b3);
    }
    _mm256_storeu_ps(acc, a0);
    _mm256_storeu_ps(acc + 8, b0);
    _mm256_storeu_ps(acc + 16, a1);
    _mm256_storeu_ps(acc + 24, b1);
    _mm256_storeu_ps(acc + 32, a2);
    _mm256_storeu_ps(acc + 40, b2);
    _mm256_storeu_ps(acc + 48, a3);
    _mm256_storeu_ps(acc + 56, b3);
}

#define DEC4_FN(type)                                                          \
    AVX2 static void dec4_##type(const void *const *w, const float *x,         \
                                 int64_t c16, int64_t rb, float *acc)          \
    {                                                                          \
        dec4_avx2(w, type, x, c16, rb, acc);                                   \
    }
DEC4_FN(W_F32)
DEC4_FN(W_BF16)
DEC4_FN(W_F16)
#undef DEC4_FN

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

/* ---------------------------------------------------------------- AVX-512 */

/* The same sums as kern_avx2 with one 16-lane register per (row, token):
 * lanes 0-7 are kern_avx2's a, lanes 8-15 its b, each filled by the same
 * fused multiply-adds in the same column order, so every result is
 * bit-identical to the AVX2 path's. What changes is how many rows and tokens
 * share a pass: decode streams four rows at once (eight independent chains,
 * four weight streams in flight) and prompt chunks run a 4-row x 6-token
 * register tile over rows converted once to float32, blocked over columns so
 * that the tile's operands stay in L1. */
#ifdef LOOM_HAVE_AVX2_PATH
#define AVX512                                                                 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define AVX512_INLINE AVX512 __attribute__((always_inline)) static inline

/* Rows of one register tile, tokens of a tile over typed rows (windows) and
 * of one over float32 rows (prompt chunks). */
#define MR      4
#define NT_WIN  4
#define NT_GEMM 6
/* Rows converted to float32 per block, and columns per pass of a tile. */
#define MC 64
#define KC 512

AVX512_INLINE __m512 load_w16(const void *w, int64_t i, int type)
{
    if (type == W_F32)
        return _mm512_loadu_ps((const float *)w + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    if (type == W_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* acc[r * NT + t] (16 floats each) += rows w[r] . tokens x[t] over columns
 * [k0, k1), k1 - k0 a multiple of 16; `first` starts from zero; typed rows
 * of rb bytes are prefetched as pf_off places them. R, NT and type are
 * constants at every call. */
AVX512_INLINE void tile512(const void *const *w, int type, int R,
                           const float *const *x, int NT, int64_t k0,
                           int64_t k1, int64_t rb, float *acc, int first)
{
    __m512 a[MR * NT_GEMM];
#pragma GCC unroll 24
    for (int q = 0; q < R * NT; q++)
        a[q] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + 16 * q);
    for (int64_t i = k0; i < k1; i += 16) {
        __m512 wv[MR];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            if (type != W_F32 && (i & 31) == 0)
                _mm_prefetch((const char *)w[r] + pf_off(i, rb, R),
                             _MM_HINT_T0);
            wv[r] = load_w16(w[r], i, type);
        }
#pragma GCC unroll 6
        for (int t = 0; t < NT; t++) {
            __m512 xv = _mm512_loadu_ps(x[t] + i);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                a[r * NT + t] = _mm512_fmadd_ps(wv[r], xv, a[r * NT + t]);
        }
    }
#pragma GCC unroll 24
    for (int q = 0; q < R * NT; q++)
        _mm512_storeu_ps(acc + 16 * q, a[q]);
}

#define TILE_FN(name, type, NT)                                                \
    AVX512 static void name(const void *const *w, const float *const *x,       \
                            int64_t k0, int64_t k1, int64_t rb, float *acc,    \
                            int first)                                         \
    {                                                                          \
        tile512(w, type, MR, x, NT, k0, k1, rb, acc, first);                   \
    }
TILE_FN(tile_bf16_1, W_BF16, 1)
TILE_FN(tile_bf16_2, W_BF16, 2)
TILE_FN(tile_bf16_3, W_BF16, 3)
TILE_FN(tile_bf16_4, W_BF16, 4)
TILE_FN(tile_f16_1, W_F16, 1)
TILE_FN(tile_f16_2, W_F16, 2)
TILE_FN(tile_f16_3, W_F16, 3)
TILE_FN(tile_f16_4, W_F16, 4)
TILE_FN(tile_f32_1, W_F32, 1)
TILE_FN(tile_f32_2, W_F32, 2)
TILE_FN(tile_f32_3, W_F32, 3)
TILE_FN(tile_f32_4, W_F32, 4)
TILE_FN(tile_f32_6, W_F32, NT_GEMM)
#undef TILE_FN

/* A typed row to float32 (exact), as loom_weight_row does it. */
AVX512 static void row_to_f32(const void *w, int type, int64_t cols, float *out)
{
    int64_t i = 0;
    for (; i + 16 <= cols; i += 16)
        _mm512_storeu_ps(out + i, load_w16(w, i, type));
    for (; i < cols; i++)
        out[i] = w_scalar(w, i, type);
}

typedef void (*tile_fn)(const void *const *w, const float *const *x, int64_t k0,
                        int64_t k1, int64_t rb, float *acc, int first);

static tile_fn tile_for(int type, int nt)
{
    static const tile_fn fns[3][NT_WIN] = {
        {tile_f32_1, tile_f32_2, tile_f32_3, tile_f32_4},
        {tile_bf16_1, tile_bf16_2, tile_bf16_3, tile_bf16_4},
        {tile_f16_1, tile_f16_2, tile_f16_3, tile_f16_4},
    };
    return fns[type][nt - 1];
}

static int have_avx512(void)
{
    return have_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}
#endif

#ifdef LOOM_HAVE_AVX2_PATH
/* The row total kern_avx2's FINISH forms from a (row, token) pair's 16
 * lanes, with the same operations in the same order, in registers: lane j +
 * lane j + 8 (one 8-wide add), s0+s4 .. s3+s7 (one 4-wide add), two
 * horizontal adds for (t0 + t1) + (t2 + t3), then the scalar tail over
 * columns [c16, cols). */
AVX2 static float row_total(const float *lane, const void *w, int type,
                            const float *x, int64_t c16, int64_t cols)
{
    float tail = 0;
    for (int64_t j = c16; j < cols; j++)
        tail += w_scalar(w, j, type) * x[j];
    __m256 s = _mm256_add_ps(_mm256_loadu_ps(lane), _mm256_loadu_ps(lane + 8));
    __m128 t =
        _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    t = _mm_hadd_ps(t, t);
    t = _mm_hadd_ps(t, t);
    return _mm_cvtss_f32(t) + tail;
}
#endif

/* ---------------------------------------------------------------- driver */

struct mm_job {
    const loom_weight *w;
    const float *x;
    float *y;
    int64_t n_tok;
    loom_mm_isa isa;
};

/* Dot products of one float32 (or, on the AVX2 path, typed) row with up to
 * TOK_BLOCK tokens. */
static void kern(const struct mm_job *j, const void *row, int type,
                 const float *x, int nt, float *out)
{
    const int64_t cols = j->w->cols, rows = j->w->rows;
#ifdef LOOM_HAVE_AVX2_PATH
    if (j->isa >= LOOM_MM_AVX2) {
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

/* Rows [r0, r1) on the generic and AVX2 kernels. */
static void mm_rows_avx2(const struct mm_job *j, int64_t r0, int64_t r1)
{
    const loom_weight *w = j->w;
    const int64_t cols = w->cols;
    const int type = plain_type(w);

    /* One token on the AVX2 path reads typed rows in place: decode is bound
     * by how fast the weights stream in. */
#ifdef LOOM_HAVE_AVX2_PATH
    if (j->n_tok == 1 && j->isa >= LOOM_MM_AVX2 && type >= 0) {
        const size_t rb = (size_t)cols * elem_size(type);
        const int64_t c16 = cols & ~(int64_t)15;
        float acc[4 * 16];
        for (int64_t r = r0; r < r1; r += 4) {
            int nr = (int)(r1 - r < 4 ? r1 - r : 4);
            /* a short last pass repeats its last row; the copies are
             * dropped */
            const void *wr[4];
            for (int k = 0; k < 4; k++)
                wr[k] = (const char *)w->data +
                        (size_t)(r + (k < nr ? k : nr - 1)) * rb;
            if (type == W_BF16)
                dec4_W_BF16(wr, j->x, c16, (int64_t)rb, acc);
            else if (type == W_F16)
                dec4_W_F16(wr, j->x, c16, (int64_t)rb, acc);
            else
                dec4_W_F32(wr, j->x, c16, (int64_t)rb, acc);
            for (int k = 0; k < nr; k++)
                j->y[r + k] =
                    row_total(acc + 16 * k, wr[k], type, j->x, c16, cols);
        }
        return;
    }
#endif
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

#ifdef LOOM_HAVE_AVX2_PATH
static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Up to NT_WIN tokens (a decode step, a window) over typed rows read in
 * place, MR rows a pass. */
static void mm_rows_typed512(const struct mm_job *j, int type, int64_t r0,
                             int64_t r1)
{
    const loom_weight *w = j->w;
    const int64_t cols = w->cols, rows = w->rows, c16 = cols & ~(int64_t)15;
    const size_t rb = (size_t)cols * elem_size(type);
    float acc[MR * NT_WIN * 16];
    for (int64_t t0 = 0; t0 < j->n_tok; t0 += NT_WIN) {
        int nt = (int)min64(NT_WIN, j->n_tok - t0);
        const float *xt[NT_WIN];
        for (int t = 0; t < nt; t++)
            xt[t] = j->x + (t0 + t) * cols;
        tile_fn fn = tile_for(type, nt);
        for (int64_t r = r0; r < r1; r += MR) {
            int nr = (int)min64(MR, r1 - r);
            /* a short last pass repeats its last row; the copies are
             * dropped */
            const void *wr[MR];
            for (int k = 0; k < MR; k++)
                wr[k] = (const char *)w->data +
                        (size_t)(r + (k < nr ? k : nr - 1)) * rb;
            fn(wr, xt, 0, c16, (int64_t)rb, acc, 1);
            for (int k = 0; k < nr; k++)
                for (int t = 0; t < nt; t++)
                    j->y[(t0 + t) * rows + r + k] = row_total(
                        acc + (k * nt + t) * 16, wr[k], type, xt[t], c16, cols);
        }
    }
}

/* Prompt chunks: MC rows converted to float32 once, then MR x NT_GEMM
 * register tiles over KC columns at a time, the partial lanes kept in acc
 * between column blocks. */
static void mm_rows_gemm512(const struct mm_job *j, int type, int64_t r0,
                            int64_t r1)
{
    const loom_weight *w = j->w;
    const int64_t cols = w->cols, rows = w->rows, c16 = cols & ~(int64_t)15;
    const int64_t T = j->n_tok;
    float *buf = NULL;
    if (type != W_F32) {
        buf = malloc(sizeof(float) * (size_t)cols * MC);
        if (!buf) {
            mm_rows_avx2(j, r0, r1);
            return;
        }
    }
    float acc[MC * NT_GEMM * 16];
    for (int64_t rb = r0; rb < r1; rb += MC) {
        int nr = (int)min64(MC, r1 - rb);
        const float *rp[MC];
        for (int k = 0; k < nr; k++) {
            if (type == W_F32) {
                rp[k] = (const float *)w->data + (size_t)(rb + k) * cols;
            } else {
                float *dst = buf + (size_t)k * cols;
                if (type >= 0)
                    row_to_f32((const char *)w->data +
                                   (size_t)(rb + k) * cols * elem_size(type),
                               type, cols, dst);
                else
                    loom_weight_row(w, rb + k, dst);
                rp[k] = dst;
            }
        }
        for (int64_t t0 = 0; t0 < T; t0 += NT_GEMM) {
            int nt = (int)min64(NT_GEMM, T - t0);
            const float *xt[NT_GEMM];
            for (int t = 0; t < NT_GEMM; t++)
                xt[t] = j->x + (t0 + (t < nt ? t : nt - 1)) * cols;
            for (int64_t k0 = 0;; k0 += KC) {
                int64_t k1 = min64(k0 + KC, c16);
                for (int m = 0; m < nr; m += MR) {
                    const void *wr[MR];
                    for (int k = 0; k < MR; k++)
                        wr[k] = rp[m + k < nr ? m + k : nr - 1];
                    tile_f32_6(wr, xt, k0, k1, 0, acc + m * NT_GEMM * 16,
                               k0 == 0);
                }
                if (k1 >= c16)
                    break;
            }
            for (int k = 0; k < nr; k++)
                for (int t = 0; t < nt; t++)
                    j->y[(t0 + t) * rows + rb + k] =
                        row_total(acc + (k * NT_GEMM + t) * 16, rp[k], W_F32,
                                  xt[t], c16, cols);
        }
    }
    free(buf);
}
#endif

/* The pool's items are blocks of TILE_ROWS rows, so that no thread's share
 * splits a block. */
static void LOOM_ABI mm_blocks(void *ctx, int64_t b0, int64_t b1)
{
    const struct mm_job *j = ctx;
    int64_t r0 = b0 * TILE_ROWS, r1 = b1 * TILE_ROWS;
    if (r1 > j->w->rows)
        r1 = j->w->rows;
#ifdef LOOM_HAVE_AVX2_PATH
    if (j->isa >= LOOM_MM_AVX512) {
        int type = plain_type(j->w);
        if (type >= 0 && j->n_tok <= NT_WIN)
            mm_rows_typed512(j, type, r0, r1);
        else
            mm_rows_gemm512(j, type, r0, r1);
        return;
    }
#endif
    mm_rows_avx2(j, r0, r1);
}

loom_mm_isa loom_matmul_isa(void)
{
#ifdef LOOM_HAVE_AVX2_PATH
    if (have_avx512())
        return LOOM_MM_AVX512;
    if (have_avx2())
        return LOOM_MM_AVX2;
#endif
    return LOOM_MM_GENERIC;
}

const char *loom_matmul_isa_name(loom_mm_isa isa)
{
    switch (isa) {
    case LOOM_MM_AMX:
        return "amx";
    case LOOM_MM_AVX512BF16:
        return "avx512bf16";
    case LOOM_MM_AVX512:
        return "avx512";
    case LOOM_MM_AVX2:
        return "avx2";
    default:
        return "generic";
    }
}

void loom_matmul_on(loom_pool *pool, loom_mm_isa isa, const loom_weight *w,
                    const float *x, float *y, int64_t n_tok)
{
    loom_mm_isa best = loom_matmul_isa();
    loom__matmul_run(pool, isa < best ? isa : best, w, x, y, n_tok);
}

void loom__matmul_run(loom_pool *pool, loom_mm_isa isa, const loom_weight *w,
                      const float *x, float *y, int64_t n_tok)
{
    struct mm_job j = {w, x, y, n_tok, isa};
    int64_t n = (w->rows + TILE_ROWS - 1) / TILE_ROWS;
    /* Small products are not worth waking the pool for. */
    if (w->rows * w->cols * n_tok < 32768 || loom_pool_size(pool) == 1) {
        mm_blocks(&j, 0, n);
        return;
    }
    loom_pool_run(pool, n, mm_blocks, &j);
}

void loom_matmul(loom_pool *pool, const loom_weight *w, const float *x,
                 float *y, int64_t n_tok)
{
    loom_matmul_on(pool, loom_matmul_isa(), w, x, y, n_tok);
}
