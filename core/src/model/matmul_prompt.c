/* y = W x for prompt chunks on the CPU (host->matmul_prompt): a blocked,
 * register-tiled matrix-matrix product, AVX512-BF16, AVX-512F, AVX2+FMA or
 * portable C, chosen at run time by CPUID; plain BF16 weights on AMX tiles
 * where the CPU and the OS allow them (matmul_prompt_amx.c).
 *
 * The tokens are packed once per call, sixteen (eight on AVX2) to a vector
 * lane block, column-major inside a block; a tile of R weight rows x NT
 * token vectors then runs the whole of k with R x NT accumulators, one
 * broadcast weight per row and one packed load per token vector a step, so
 * no sum is reduced across lanes. The weight rows of a tile stay in L1/L2
 * over the token vectors; the packed tokens are read from L2.
 *
 * Every output y[t, r] is one chain over the columns in order (pairs of
 * columns on AVX512-BF16), started from zero: the tile, the token count and
 * the threads do not change it, so a row's result does not depend on what
 * shares the call.
 *
 * Error against the exact product, with s = sum_k |W[r,k] x[t,k]| and
 * g = 2K u / (1 - 2K u), u = 2^-24 (K columns; at most 2K roundings):
 *   float32 paths (the weights converted exactly, fused multiply-adds or
 *     a plain loop): |err| <= g s;
 *   AVX512-BF16 and AMX on BF16 weights (x rounded to BF16, relative
 *     2^-8; the products exact): |err| <= (2^-8 (1 + g) + g) s.
 * loom_matmul (the decode kernels) is within g s too, so the two differ by
 * at most 2 g s on the float32 paths.
 * Denormal inputs and results are flushed by VDPBF16PS. */
#include <loom/weights.h>

#include "matmul_prompt_amx.h"

#include <loom/platform.h>

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define PROMPT_X86 1
#endif

enum { K_GENERIC, K_AVX2, K_AVX512, K_DP };

/* Rows and token vectors of a tile per kernel, and token lanes a vector. */
#define R512  6
#define NT512 4
#define R256  4
#define NT256 3
/* Tiles that share a pass over the packed tokens (their KC columns of
 * weights as float32 converted together: 32 x 6 x KC floats, 96 KiB, in
 * L2); whole rows at a time (quantized weights, AVX2) only as many as fit
 * in WB_BYTES. And columns a pass over a token group takes (64 tokens x KC
 * floats: 32 KiB, in L1). */
#define MC_SEG   32
#define WB_BYTES (512 * 1024)
#define KC       128

struct pjob {
    const loom_weight *w;
    const float *x;
    float *y;
    int64_t T, K, M;
    int kind;
    int lanes;  /* tokens per packed block */
    int64_t nb; /* packed token blocks */
    void *xp;   /* packed tokens: [nb][K or K/2 rounded up][lanes] */
};

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* ---------------------------------------------------------------- packing */

/* Blocks [b0, b1) of the tokens: BF16 pairs (column 2i low, 2i+1 high) for
 * the dot-product kernel, float32 for the others; missing tokens and a
 * missing last column are zero. */
static void LOOM_ABI pack_task(void *ctx, int64_t b0, int64_t b1)
{
    const struct pjob *j = ctx;
    const int64_t K = j->K, L = j->lanes;
    for (int64_t b = b0; b < b1; b++) {
        if (j->kind == K_DP) {
            int64_t K2 = (K + 1) / 2;
            uint32_t *out = (uint32_t *)j->xp + b * K2 * L;
            for (int64_t l = 0; l < L; l++) {
                int64_t t = b * L + l;
                const float *xt = j->x + t * K;
                for (int64_t p = 0; p < K2; p++) {
                    uint32_t lo = 0, hi = 0;
                    if (t < j->T) {
                        lo = loom_f32_to_bf16(xt[2 * p]);
                        if (2 * p + 1 < K)
                            hi = loom_f32_to_bf16(xt[2 * p + 1]);
                    }
                    out[p * L + l] = lo | hi << 16;
                }
            }
        } else {
            float *out = (float *)j->xp + b * K * L;
            for (int64_t l = 0; l < L; l++) {
                int64_t t = b * L + l;
                const float *xt = j->x + t * K;
                for (int64_t k = 0; k < K; k++)
                    out[k * L + l] = t < j->T ? xt[k] : 0.0f;
            }
        }
    }
}

/* ---------------------------------------------------------------- kernels */

#ifdef PROMPT_X86
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define T512BF                                                                 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))
#define T256 __attribute__((target("avx2,fma")))
#define INL  __attribute__((always_inline)) static inline

/* out[r * NT512 * 16 + n * 16 + l] = sum over column pairs of rows w[r]
 * (BF16) and packed block n (blocks bs uint32 apart). */
T512BF INL void dp_body(const uint16_t *const *w, const uint32_t *xb,
                        int64_t bs, int64_t K, int NT, float *out)
{
    __m512 acc[R512 * NT512];
#pragma GCC unroll 24
    for (int q = 0; q < R512 * NT; q++)
        acc[q] = _mm512_setzero_ps();
    const int64_t K2 = K / 2;
    for (int64_t p = 0; p <= K2; p++) {
        if (p == K2 && !(K & 1))
            break;
        __m512i xv[NT512];
#pragma GCC unroll 4
        for (int n = 0; n < NT; n++)
            xv[n] = _mm512_loadu_si512(xb + n * bs + p * 16);
#pragma GCC unroll 6
        for (int r = 0; r < R512; r++) {
            uint32_t pr = 0;
            if (p < K2)
                memcpy(&pr, w[r] + 2 * p, sizeof pr);
            else
                pr = w[r][2 * p];
            __m512bh wb = (__m512bh)_mm512_set1_epi32((int)pr);
#pragma GCC unroll 4
            for (int n = 0; n < NT; n++)
                acc[r * NT + n] =
                    _mm512_dpbf16_ps(acc[r * NT + n], (__m512bh)xv[n], wb);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R512; r++)
#pragma GCC unroll 4
        for (int n = 0; n < NT; n++)
            _mm512_storeu_ps(out + (r * NT512 + n) * 16, acc[r * NT + n]);
}

/* c[(r * NT512 + n) * 16 + l] (+)= sum over k < kn of rows w + r ws
 * (float32) and packed block n (blocks bs floats apart); `first` starts
 * from zero, else from c. */
T512 INL void f512_body(const float *w, int64_t ws, const float *xb, int64_t bs,
                        int64_t kn, int NT, float *c, int first)
{
    __m512 acc[R512 * NT512];
#pragma GCC unroll 6
    for (int r = 0; r < R512; r++)
#pragma GCC unroll 4
        for (int n = 0; n < NT; n++)
            acc[r * NT + n] = first ? _mm512_setzero_ps()
                                    : _mm512_loadu_ps(c + (r * NT512 + n) * 16);
    for (int64_t k = 0; k < kn; k++) {
        __m512 xv[NT512];
#pragma GCC unroll 4
        for (int n = 0; n < NT; n++)
            xv[n] = _mm512_loadu_ps(xb + n * bs + k * 16);
#pragma GCC unroll 6
        for (int r = 0; r < R512; r++) {
            __m512 wb = _mm512_set1_ps(w[r * ws + k]);
#pragma GCC unroll 4
            for (int n = 0; n < NT; n++)
                acc[r * NT + n] = _mm512_fmadd_ps(wb, xv[n], acc[r * NT + n]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R512; r++)
#pragma GCC unroll 4
        for (int n = 0; n < NT; n++)
            _mm512_storeu_ps(c + (r * NT512 + n) * 16, acc[r * NT + n]);
}

/* Eight-lane twin of f512_body (16 registers: 12 sums, 3 tokens, 1 w). */
T256 INL void f256_body(const float *w, int64_t ws, const float *xb, int64_t bs,
                        int64_t kn, int NT, float *c, int first)
{
    __m256 acc[R256 * NT256];
#pragma GCC unroll 4
    for (int r = 0; r < R256; r++)
#pragma GCC unroll 3
        for (int n = 0; n < NT; n++)
            acc[r * NT + n] = first ? _mm256_setzero_ps()
                                    : _mm256_loadu_ps(c + (r * NT256 + n) * 8);
    for (int64_t k = 0; k < kn; k++) {
        __m256 xv[NT256];
#pragma GCC unroll 3
        for (int n = 0; n < NT; n++)
            xv[n] = _mm256_loadu_ps(xb + n * bs + k * 8);
#pragma GCC unroll 4
        for (int r = 0; r < R256; r++) {
            __m256 wb = _mm256_set1_ps(w[r * ws + k]);
#pragma GCC unroll 3
            for (int n = 0; n < NT; n++)
                acc[r * NT + n] = _mm256_fmadd_ps(wb, xv[n], acc[r * NT + n]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R256; r++)
#pragma GCC unroll 3
        for (int n = 0; n < NT; n++)
            _mm256_storeu_ps(c + (r * NT256 + n) * 8, acc[r * NT + n]);
}

/* One function per token-vector count, so that NT is a constant. */
#define NT_FNS(body, attr, wtype, xtype, name, MAXNT)                          \
    attr static void name(const wtype *const *w, const xtype *xb, int64_t bs,  \
                          int64_t K, int nt, float *out)                       \
    {                                                                          \
        switch (nt) {                                                          \
        case 1:                                                                \
            body(w, xb, bs, K, 1, out);                                        \
            break;                                                             \
        case 2:                                                                \
            body(w, xb, bs, K, 2, out);                                        \
            break;                                                             \
        case 3:                                                                \
            body(w, xb, bs, K, 3, out);                                        \
            break;                                                             \
        default:                                                               \
            body(w, xb, bs, K, MAXNT, out);                                    \
            break;                                                             \
        }                                                                      \
    }
NT_FNS(dp_body, T512BF, uint16_t, uint32_t, dp_tile, NT512)
#undef NT_FNS

#define F_FNS(body, attr, name, MAXNT)                                         \
    attr static void name(const float *w, int64_t ws, const float *xb,         \
                          int64_t bs, int64_t kn, int nt, float *c, int first) \
    {                                                                          \
        switch (nt) {                                                          \
        case 1:                                                                \
            body(w, ws, xb, bs, kn, 1, c, first);                              \
            break;                                                             \
        case 2:                                                                \
            body(w, ws, xb, bs, kn, 2, c, first);                              \
            break;                                                             \
        case 3:                                                                \
            body(w, ws, xb, bs, kn, 3, c, first);                              \
            break;                                                             \
        default:                                                               \
            body(w, ws, xb, bs, kn, MAXNT, c, first);                          \
            break;                                                             \
        }                                                                      \
    }
F_FNS(f512_body, T512, f512_tile, NT512)
F_FNS(f256_body, T256, f256_tile, NT256)
#undef F_FNS

/* Plain BF16 / F16 / F32 rows [k0, k0 + n) to float32 (exact). */
T512 static void cvt512(const void *src, loom_dtype dt, int64_t n, float *dst)
{
    int64_t i = 0;
    if (dt == LOOM_DTYPE_BF16)
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(
                dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(
                             _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                 (const __m256i *)((const uint16_t *)src + i))),
                             16)));
    else if (dt == LOOM_DTYPE_F16)
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(
                dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(
                             (const __m256i *)((const uint16_t *)src + i))));
    for (; i < n; i++)
        dst[i] = dt == LOOM_DTYPE_F32 ? ((const float *)src)[i]
                 : dt == LOOM_DTYPE_F16
                     ? loom_f16_to_f32(((const uint16_t *)src)[i])
                     : loom_bf16_to_f32(((const uint16_t *)src)[i]);
}

/* AVX512-BF16: CPUID leaf 7 subleaf 1, EAX bit 5 (the zmm state is checked
 * with AVX-512F by loom_matmul_isa). */
static int have_bf16(void)
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d))
        return 0;
    return (a >> 5) & 1u;
}
#endif

/* ---------------------------------------------------------------- driver */

static int tile_rows(int kind)
{
    return kind == K_AVX2 ? R256 : kind == K_GENERIC ? 1 : R512;
}

/* AVX512-BF16: the tile's results for rows [r, r + nr) and every token
 * into y, over the whole of k. */
static void dp_run(const struct pjob *j, const void *const *rp, int64_t r,
                   int nr)
{
    const int64_t L = j->lanes, K = j->K;
    const int NT = NT512;
#ifdef PROMPT_X86
    float out[R512 * NT512 * 16];
    for (int64_t b = 0; b < j->nb; b += NT) {
        int nt = (int)min64(NT, j->nb - b);
        dp_tile((const uint16_t *const *)rp,
                (const uint32_t *)j->xp + b * ((K + 1) / 2) * L,
                ((K + 1) / 2) * L, K, nt, out);
        for (int k = 0; k < nr; k++)
            for (int n = 0; n < nt; n++)
                for (int64_t l = 0; l < L; l++) {
                    int64_t t = (b + n) * L + l;
                    if (t < j->T)
                        j->y[t * j->M + r + k] = out[(k * NT + n) * L + l];
                }
    }
#else
    (void)j, (void)rp, (void)r, (void)nr, (void)L, (void)K, (void)NT;
#endif
}

/* Plain C: each output one float32 chain over the columns in order. */
static void generic_rows(const struct pjob *j, int64_t r0, int64_t r1,
                         float *row)
{
    const int64_t K = j->K;
    for (int64_t r = r0; r < r1; r++) {
        loom_weight_row(j->w, r, row);
        const float *rp = row;
        for (int64_t t = 0; t < j->T; t++) {
            const float *xt = j->x + t * K;
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++)
                s += rp[k] * xt[k];
            j->y[t * j->M + r] = s;
        }
    }
}

/* Plain weights on the AVX-512 paths are converted KC columns at a time
 * (wb holds the chunk's rows x KC), others whole rows at a time (rows x K,
 * the reference conversion). */
static int by_segment(const struct pjob *j)
{
    return j->kind == K_AVX512 && j->w->bits == 0;
}

/* Float32 paths, rows [r0, r0 + nr): the rows as float32 into wb (a short
 * last tile repeats its last row: each output's chain is its own), then
 * per KC columns, per token group (its KC columns stay in L1), per tile:
 * the partial sums kept in c between column blocks, stored and reloaded
 * exactly, so each output is still one chain. */
static void f32_chunk(const struct pjob *j, int64_t r0, int nr, float *wb,
                      float *c)
{
    const int R = tile_rows(j->kind), NT = j->kind == K_AVX2 ? NT256 : NT512;
    const int64_t K = j->K, L = j->lanes, ng = (j->nb + NT - 1) / NT;
    const int ntile = (nr + R - 1) / R;
    const int64_t cs = (int64_t)R * NT * L; /* floats of one tile's sums */
    const int seg = by_segment(j);
    const int64_t ws = seg ? KC : K; /* floats between rows of wb */
    if (!seg)
        for (int q = 0; q < ntile * R; q++)
            loom_weight_row(j->w, r0 + (q < nr ? q : nr - 1), wb + q * K);
#ifdef PROMPT_X86
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
        int64_t kn = min64(KC, K - k0);
        const size_t es = j->w->dtype == LOOM_DTYPE_F32 ? 4 : 2;
        for (int q = 0; seg && q < ntile * R; q++)
            cvt512((const char *)j->w->data +
                       ((size_t)(r0 + (q < nr ? q : nr - 1)) * (size_t)K +
                        (size_t)k0) *
                           es,
                   j->w->dtype, kn, wb + q * KC);
        const float *wk = seg ? wb : wb + k0;
        for (int64_t g = 0; g < ng; g++) {
            int nt = (int)min64(NT, j->nb - g * NT);
            const float *xb = (const float *)j->xp + g * NT * K * L + k0 * L;
            for (int i = 0; i < ntile; i++) {
                const float *wt = wk + (int64_t)i * R * ws;
                float *ci = c + (i * ng + g) * cs;
                if (j->kind == K_AVX2)
                    f256_tile(wt, ws, xb, K * L, kn, nt, ci, k0 == 0);
                else
                    f512_tile(wt, ws, xb, K * L, kn, nt, ci, k0 == 0);
            }
        }
    }
#endif
    /* token by token, so that each token's rows are written in order */
    for (int64_t g = 0; g < ng; g++)
        for (int64_t q = 0; q < NT * L && g * NT * L + q < j->T; q++) {
            float *yt = j->y + (g * NT * L + q) * j->M + r0;
            const float *cq = c + g * cs + (q / L) * L + q % L;
            for (int i = 0; i < ntile; i++)
                for (int r = 0; r < R && i * R + r < nr; r++)
                    yt[i * R + r] = cq[i * ng * cs + r * NT * L];
        }
}

/* Tiles [i0, i1) of R rows each (rows, on the generic path). */
static void LOOM_ABI tiles_task(void *ctx, int64_t i0, int64_t i1)
{
    const struct pjob *j = ctx;
    const int R = tile_rows(j->kind);
    const int64_t K = j->K, M = j->M;
    if (j->kind == K_GENERIC) {
        float *row = malloc(sizeof(float) * (size_t)K);
        if (row) {
            generic_rows(j, i0, min64(i1, M), row);
        } else {
            float one[K];
            generic_rows(j, i0, min64(i1, M), one);
        }
        free(row);
        return;
    }
    if (j->kind == K_DP) {
        for (int64_t i = i0; i < i1; i++) {
            int64_t r = i * R;
            int nr = (int)min64(R, M - r);
            const void *rp[R512];
            for (int k = 0; k < R; k++)
                rp[k] = (const uint16_t *)j->w->data +
                        (r + (k < nr ? k : nr - 1)) * K;
            dp_run(j, rp, r, nr);
        }
        return;
    }
    const int NT = j->kind == K_AVX2 ? NT256 : NT512;
    const int64_t ng = (j->nb + NT - 1) / NT;
    const size_t wn = (size_t)R * (size_t)(by_segment(j) ? KC : K),
                 cn = (size_t)(ng * R * NT) * j->lanes;
    int64_t step =
        by_segment(j) ? MC_SEG : (int64_t)(WB_BYTES / (sizeof(float) * wn));
    step = step < 1 ? 1 : step > MC_SEG ? MC_SEG : step;
    float *wb = malloc(sizeof(float) * wn * (size_t)step);
    float *c = malloc(sizeof(float) * cn * (size_t)step);
    if (!wb || !c) {
        /* no scratch: one tile at a time through the stack, the same
         * chains */
        free(wb);
        free(c);
        float wone[wn], cone[cn];
        for (int64_t i = i0; i < i1; i++)
            f32_chunk(j, i * R, (int)min64(R, M - i * R), wone, cone);
        return;
    }
    for (int64_t i = i0; i < i1; i += step) {
        int64_t r0 = i * R, r1 = min64(min64(i + step, i1) * R, M);
        f32_chunk(j, r0, (int)(r1 - r0), wb, c);
    }
    free(wb);
    free(c);
}

/* AMX once per process: CPUID, XCR0 and the OS's grant of tile data
 * (0 not asked yet, 1 granted, -1 not); asking twice at once is harmless. */
static atomic_int amx_state;

static int amx_ready(void)
{
    int st = atomic_load(&amx_state);
    if (st == 0) {
        loom_err err;
        st = loom__matmul_amx_enable(&err) == LOOM_OK ? 1 : -1;
        atomic_store(&amx_state, st);
    }
    return st > 0;
}

loom_mm_isa loom_matmul_prompt_isa(void)
{
    loom_mm_isa isa = loom_matmul_isa();
#ifdef PROMPT_X86
    if (isa == LOOM_MM_AVX512 && have_bf16())
        return amx_ready() ? LOOM_MM_AMX : LOOM_MM_AVX512BF16;
#endif
    return isa;
}

void loom_matmul_prompt_on(loom_pool *pool, loom_mm_isa isa,
                           const loom_weight *w, const float *x, float *y,
                           int64_t n_tok)
{
    loom_mm_isa best = loom_matmul_prompt_isa();
    loom__matmul_prompt_run(pool, isa > best ? best : isa, w, x, y, n_tok);
}

void loom__matmul_prompt_run(loom_pool *pool, loom_mm_isa isa,
                             const loom_weight *w, const float *x, float *y,
                             int64_t n_tok)
{
    if (n_tok <= 0 || w->rows <= 0)
        return;
    if (w->cols <= 0) {
        memset(y, 0, sizeof(float) * (size_t)(n_tok * w->rows));
        return;
    }
    struct pjob j = {w, x, y, n_tok, w->cols, w->rows, K_GENERIC, 1, 0, NULL};
    int plain_bf16 = w->bits == 0 && w->dtype == LOOM_DTYPE_BF16;
    if (isa == LOOM_MM_AMX && plain_bf16) {
        loom_err err;
        if (loom__matmul_prompt_amx(pool, w, x, y, n_tok, &err) == LOOM_OK)
            return;
        /* no memory for the packed tokens: the dot-product kernel, which
         * rounds x the same way (it asks for less) */
        isa = LOOM_MM_AVX512BF16;
    }
    if (isa >= LOOM_MM_AVX512BF16 && plain_bf16)
        j.kind = K_DP;
    else if (isa >= LOOM_MM_AVX512)
        j.kind = K_AVX512;
    else if (isa == LOOM_MM_AVX2)
        j.kind = K_AVX2;
    int64_t R = tile_rows(j.kind);
    int64_t items = j.kind == K_GENERIC ? w->rows : (w->rows + R - 1) / R;
    int small = w->rows * w->cols * n_tok < 32768;
    if (j.kind != K_GENERIC) {
        j.lanes = j.kind == K_AVX2 ? 8 : 16;
        j.nb = (n_tok + j.lanes - 1) / j.lanes;
        int64_t per = j.kind == K_DP ? (w->cols + 1) / 2 : w->cols;
        j.xp = malloc(sizeof(float) * (size_t)(j.nb * j.lanes) *
                      (size_t)(per > 0 ? per : 1));
        if (!j.xp) {
            /* no memory for the packed tokens: the decode kernels */
            loom__matmul_run(pool, isa > LOOM_MM_AVX512 ? LOOM_MM_AVX512 : isa,
                             w, x, y, n_tok);
            return;
        }
        if (small)
            pack_task(&j, 0, j.nb);
        else
            loom_pool_run(pool, j.nb, pack_task, &j);
    }
    if (small)
        tiles_task(&j, 0, items);
    else
        loom_pool_run(pool, items, tiles_task, &j);
    free(j.xp);
}

/* The default skips AVX512-BF16: on the Xeon (Emerald Rapids) this was
 * measured on, VDPBF16PS retires one every two cycles against two FMAs a
 * cycle, so its 32 products an instruction run at half the FMA rate (86 vs
 * 175 GFLOP/s of one core in a register-only loop; 55-68 vs 103-109 GFLOP/s
 * for this file's kernels on [3584 x 1024] x 128 tokens). AMX, where the
 * OS grants it, is the default (matmul_prompt_amx.c). LOOM_PROMPT_ISA
 * names another set for A/B runs of the same build. */
loom_mm_isa loom_matmul_prompt_default(void)
{
    loom_mm_isa isa = loom_matmul_prompt_isa();
    const char *want = loom_getenv("LOOM_PROMPT_ISA");
    for (int i = 0; want && i <= (int)LOOM_MM_AMX; i++)
        if (!strcmp(want, loom_matmul_isa_name((loom_mm_isa)i)))
            return (loom_mm_isa)i < isa ? (loom_mm_isa)i : isa;
    return isa == LOOM_MM_AVX512BF16 ? LOOM_MM_AVX512 : isa;
}

void loom_matmul_prompt(loom_pool *pool, const loom_weight *w, const float *x,
                        float *y, int64_t n_tok)
{
    loom__matmul_prompt_run(pool, loom_matmul_prompt_default(), w, x, y, n_tok);
}
