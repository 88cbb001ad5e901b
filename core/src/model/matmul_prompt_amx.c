/* y = W x for prompt chunks with plain BF16 weights on AMX tiles (issue 20):
 * the path loom__matmul_prompt_run takes for LOOM_MM_AMX.
 *
 * Layout. TDPBF16PS adds to C (16 x 16 float32) the product of A, 16 rows
 * of 32 BF16, and B, 16 rows of 16 BF16 pairs (VNNI: columns 2i and 2i+1
 * of one output column share a 32-bit lane). The weights [out][in] are A
 * as they lie in the checkpoint (16 rows, the row length as stride), with
 * no conversion; the tokens are rounded to BF16 and packed once a call as
 * B, 16 tokens a block: [column pairs, K/2 rounded up to 16][16 tokens].
 * C is then [16 weight rows][16 tokens] and goes to y [n_tok][out] through
 * a 16 x 16 transpose.
 *
 * Blocking. Four C tiles hold 32 rows x 32 tokens; a step over 32 columns
 * loads two weight tiles and two token tiles and runs four products, so
 * each loaded tile feeds two. A pool item is 32 weight rows: their bytes
 * come from memory once, on the item's first 32 tokens, which also store
 * the tiles into a per-thread copy that the item's later passes read from
 * L2 (32 x K x 2 bytes: 64 KiB at K = 1024; item_run says why); the packed
 * tokens (n_tok x K x 2 bytes) are shared by every item, a group of at most
 * 1 MiB at a time so that it stays in L2 (GROUP_BYTES). The weights stream
 * once per chunk (once per group in chunks of more than one); the token
 * tiles are reused by every item.
 *
 * Numerics. Each output y[t, r] is one accumulator (a C tile element) over
 * the column steps in order, from zero, fed only by row r and token t: the
 * tile, the token count, the other rows and tokens and the threads do not
 * change its bits. x is rounded to BF16 (round to nearest even, relative
 * 2^-8), the products of BF16 values are exact in float32, and the sum of
 * K of them takes at most K roundings in whatever order the hardware adds
 * within one instruction, so with s = sum_k |W[r,k] x[t,k]| and
 * g = 2K u / (1 - 2K u), u = 2^-24, |err| <= (2^-8 (1 + g) + g) s: the
 * bound matmul_prompt.c states for AVX512-BF16. Denormal inputs and
 * results are flushed (AMX does not read MXCSR). */
#include "matmul_prompt_amx.h"

#include <loom/platform.h>

#include <stdlib.h>
#include <string.h>

/* Not on Windows: GCC's tile intrinsics pass the stride as a long, 32 bits
 * there, which the assembler refuses as an index register (and the tile
 * data grant is Linux's: win32.c refuses it). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) &&        \
    !defined(_WIN32)
#include <cpuid.h>
#include <immintrin.h>
#define AMX_X86 1
#endif

enum {
    TR = 16, /* rows of a tile (A and C: weight rows; B: column pairs) */
    TK = 32, /* BF16 columns of a weight tile: 64 bytes */
    BR = 32, /* weight rows of a pool item: two A tiles */
    BT = 32  /* tokens of a pass: two B tiles */
};
/* Packed tokens a group holds at most. tools/bench_matmul.c, one thread,
 * [1024 x 3584] x 512: 631 / 755 / 810 / 684 GFLOP/s at 256 KiB / 512 KiB
 * / 1 MiB / 2 MiB, 595 without groups; [3584 x 1024] x 2048: 584 / 725 /
 * 642 / 460, 402 without (2 MiB of L2 a core). */
#define GROUP_BYTES (1024 * 1024)

struct ajob {
    const loom_weight *w;
    const float *x;
    float *y;
    int64_t T, K, M;
    int64_t K2;   /* column pairs a token block holds: K/2 up to 16 */
    int64_t nb;   /* token blocks of 16, an even number */
    int64_t gb;   /* token blocks of a group, even (GROUP_BYTES) */
    uint32_t *xp; /* packed tokens [nb][K2][16], 64-byte aligned */
};

#ifdef AMX_X86
#define AMX                                                                    \
    __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16")))
#define AMX_INL AMX __attribute__((always_inline)) static inline
/* The tile intrinsics are asm statements that do not all tell the compiler
 * which memory they read: stores to a buffer a tile load or the tile
 * configuration reads must not be moved past them or dropped. */
#define MEM_BARRIER() __asm__ volatile("" ::: "memory")

/* The 64-byte operand of LDTILECFG (palette 1). */
struct tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* r[i] (16 lanes each) becomes column i of the 16 x 16 matrix of 32-bit
 * elements it held as rows: pairs, then quads inside each 128-bit lane,
 * then the 128-bit lanes across registers. */
AMX_INL void transpose16(__m512i r[16])
{
    __m512i t[16], u[16];
    /* fully unrolled, so that the 32 values stay in registers */
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    /* u[4i + c], 128-bit lane L: rows 4i..4i+3 at column 4L + c */
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m512i a = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);
        __m512i b = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xdd);
        __m512i a2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
        __m512i b2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xdd);
        r[c] = _mm512_shuffle_i32x4(a, a2, 0x88);
        r[4 + c] = _mm512_shuffle_i32x4(b, b2, 0x88);
        r[8 + c] = _mm512_shuffle_i32x4(a, a2, 0xdd);
        r[12 + c] = _mm512_shuffle_i32x4(b, b2, 0xdd);
    }
}

/* The first n of 16 lanes (none when n <= 0). */
static __mmask16 mask16(int64_t n)
{
    return n >= 16  ? (__mmask16)0xffff
           : n <= 0 ? (__mmask16)0
                    : (__mmask16)((1u << n) - 1u);
}

/* Token blocks [b0, b1): per 32 columns from c, 16 tokens rounded to BF16
 * pairs, one register a token, transposed into 16 rows of pairs (a row per
 * column pair, a lane per token); tokens past T and columns past K are
 * zero. */
AMX static void LOOM_ABI pack_task(void *ctx, int64_t b0, int64_t b1)
{
    const struct ajob *j = ctx;
    const int64_t K = j->K;
    for (int64_t b = b0; b < b1; b++) {
        uint32_t *out = j->xp + b * j->K2 * 16;
        for (int64_t c = 0; c < 2 * j->K2; c += TK) {
            __m512i v[16];
            __mmask16 lo = mask16(K - c), hi = mask16(K - c - 16);
#pragma GCC unroll 16
            for (int l = 0; l < 16; l++) {
                int64_t t = b * 16 + l;
                if (t >= j->T) {
                    v[l] = _mm512_setzero_si512();
                    continue;
                }
                const float *xt = j->x + t * K + c;
                __m512 a = _mm512_maskz_loadu_ps(lo, xt);
                __m512 h = c + 16 < K ? _mm512_maskz_loadu_ps(hi, xt + 16)
                                      : _mm512_setzero_ps();
                /* the low 16 BF16 from a: columns c..c+15 */
                v[l] = (__m512i)_mm512_cvtne2ps_pbh(h, a);
            }
            transpose16(v);
#pragma GCC unroll 16
            for (int p = 0; p < 16; p++)
                _mm512_store_si512(out + (c / 2 + p) * 16, v[p]);
        }
    }
}

/* Rows [r0, r0 + nr) of the weights, columns [k0, k0 + 32), as a zeroed
 * [BR][TK] copy: the steps where a tile read in place would pass the
 * matrix (a ragged last item, a ragged last step). */
AMX static void pad_fill(const struct ajob *j, int64_t r0, int nr, int64_t k0,
                         uint16_t *pad)
{
    const uint16_t *w = (const uint16_t *)j->w->data;
    int64_t n = j->K - k0 < TK ? j->K - k0 : TK;
    __mmask32 m = n >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << n) - 1);
    for (int q = 0; q < BR; q++)
        _mm512_store_si512(
            pad + q * TK,
            q < nr ? _mm512_maskz_loadu_epi16(m, w + (r0 + q) * j->K + k0)
                   : _mm512_setzero_si512());
    MEM_BARRIER();
}

/* c [BR rows][BT tokens] of tokens from t0 into y: each 16 x 16 quarter
 * transposed so that a token's rows are one store. */
AMX static void store_out(const struct ajob *j, int64_t r0, int nr, int64_t t0,
                          const float *c)
{
    for (int i = 0; i < 2 && i * TR < nr; i++) {
        __mmask16 m = mask16(nr - i * TR);
        for (int h = 0; h < 2 && t0 + h * 16 < j->T; h++) {
            __m512i v[16];
#pragma GCC unroll 16
            for (int q = 0; q < 16; q++)
                v[q] = _mm512_load_si512(c + (i * TR + q) * BT + h * 16);
            transpose16(v);
            for (int q = 0; q < 16 && t0 + h * 16 + q < j->T; q++)
                _mm512_mask_storeu_ps(j->y + (t0 + h * 16 + q) * j->M + r0 +
                                          i * TR,
                                      m, _mm512_castsi512_ps(v[q]));
        }
    }
}

/* One item: rows [r0, r0 + nr), nr <= BR, against the tokens of blocks
 * [g0, g1) (one group), a pass per two blocks. Tiles 0-3
 * are C (row half i, token half h at 2i + h), 4-5 the weight halves, 6-7
 * the token halves; with 16 rows or fewer only the first half runs. The
 * first pass reads the weight tiles in place (or through pad) and stores
 * them into wc, 1 KiB a tile in step order, when there is one; later
 * passes load them from there: rows a power-of-two apart (K = 1024, 2048)
 * fall into a few L1 sets, so in place the later passes ran at 698-746
 * GFLOP/s against 810-910 for rows of K = 1056 or 2080. */
AMX static void item_run(const struct ajob *j, int64_t r0, int nr, int64_t g0,
                         int64_t g1, uint16_t *pad, float *c, uint16_t *wc)
{
    const int64_t K = j->K, steps = j->K2 / 16;
    const uint16_t *w = (const uint16_t *)j->w->data + r0 * K;
    const long ws = (long)(K * 2);
    const int two = nr > TR;
    /* steps whose weight tiles can be read in place: all but a ragged
     * last one, none in a ragged last item */
    const int64_t in_place = nr == BR || nr == TR ? K / TK : 0;
    for (int64_t g = g0; g < g1; g += 2) {
        const uint32_t *x0 = j->xp + g * j->K2 * 16, *x1 = x0 + j->K2 * 16;
        const int copied = wc && g > g0, copy = wc && g == g0;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t s = 0; s < steps; s++) {
            /* the step's two weight tiles, a0 and a1, as rows `as` apart */
            const uint16_t *a0 = pad, *a1 = pad + TR * TK;
            long as = TK * 2;
            if (copied) {
                a0 = wc + s * 2 * TR * TK;
                a1 = a0 + TR * TK;
            } else if (s < in_place) {
                a0 = w + s * TK;
                a1 = a0 + TR * K;
                as = ws;
            } else {
                pad_fill(j, r0, nr, s * TK, pad);
            }
            _tile_loadd(4, a0, as);
            _tile_loadd(6, x0 + s * 256, 64);
            _tile_loadd(7, x1 + s * 256, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            if (two) {
                _tile_loadd(5, a1, as);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            if (copy) {
                _tile_stored(4, wc + s * 2 * TR * TK, TK * 2);
                if (two)
                    _tile_stored(5, wc + (s * 2 + 1) * TR * TK, TK * 2);
            }
        }
        _tile_stored(0, c, BT * 4);
        _tile_stored(1, c + 16, BT * 4);
        if (two) {
            _tile_stored(2, c + TR * BT, BT * 4);
            _tile_stored(3, c + TR * BT + 16, BT * 4);
        }
        store_out(j, r0, nr, g * 16, c);
    }
}

/* Items [i0, i1) of BR rows, group by group. The tile configuration is per
 * thread state: each worker loads it and releases the tiles when done.
 * Without memory for the copy of an item's weight tiles every pass reads
 * them in place. */
AMX static void LOOM_ABI tiles_task(void *ctx, int64_t i0, int64_t i1)
{
    struct ajob *j = ctx;
    struct tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = TR;
        cfg.colsb[t] = 64;
    }
    MEM_BARRIER();
    _tile_loadconfig(&cfg);
    uint16_t pad[BR * TK] __attribute__((aligned(64)));
    float c[BR * BT] __attribute__((aligned(64)));
    void *raw = j->gb > 2 ? malloc((size_t)j->K2 / 16 * 2 * 1024 + 63) : NULL;
    uint16_t *wc =
        raw ? (uint16_t *)(((uintptr_t)raw + 63) & ~(uintptr_t)63) : NULL;
    for (int64_t g0 = 0; g0 < j->nb; g0 += j->gb) {
        int64_t g1 = g0 + j->gb < j->nb ? g0 + j->gb : j->nb;
        for (int64_t i = i0; i < i1; i++) {
            int64_t r0 = i * BR;
            item_run(j, r0, (int)(j->M - r0 < BR ? j->M - r0 : BR), g0, g1, pad,
                     c, wc);
        }
    }
    free(raw);
    _tile_release();
}

/* CPUID leaf 7 EDX: bit 22 AMX-BF16, bit 24 AMX-TILE; leaf 1 ECX bit 27
 * OSXSAVE, and then XCR0 bits 17-18 (XTILECFG, XTILEDATA) set by the OS. */
static const char *amx_missing(void)
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 22 & 1u) ||
        !(d >> 24 & 1u))
        return "the CPU reports no AMX-BF16 / AMX-TILE";
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1u))
        return "the OS does not enable XSAVE";
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo >> 17 & 3u) != 3u)
        return "the OS does not keep AMX tile state (XCR0)";
    return NULL;
}
#endif

loom_status loom__matmul_amx_enable(loom_err *err)
{
#ifdef AMX_X86
    const char *why = amx_missing();
    if (why)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED, "AMX: %s", why);
    return loom_cpu_amx_enable(err);
#else
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "AMX: not an x86-64 build with GCC or clang");
#endif
}

loom_status loom__matmul_prompt_amx(loom_pool *pool, const loom_weight *w,
                                    const float *x, float *y, int64_t n_tok,
                                    loom_err *err)
{
    if (w->bits != 0 || w->dtype != LOOM_DTYPE_BF16)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "AMX prompt product: BF16 weights only (dtype %d, "
                            "%d bits)",
                            (int)w->dtype, w->bits);
#ifdef AMX_X86
    if (n_tok <= 0 || w->rows <= 0)
        return LOOM_OK;
    if (w->cols <= 0) {
        memset(y, 0, sizeof(float) * (size_t)(n_tok * w->rows));
        return LOOM_OK;
    }
    struct ajob j;
    memset(&j, 0, sizeof j);
    j.w = w;
    j.x = x;
    j.y = y;
    j.T = n_tok;
    j.K = w->cols;
    j.M = w->rows;
    j.K2 = (w->cols + TK - 1) / TK * 16;
    j.nb = (n_tok + BT - 1) / BT * 2;
    size_t bytes = sizeof(uint32_t) * 16 * (size_t)j.nb * (size_t)j.K2;
    void *raw = malloc(bytes + 63);
    if (!raw)
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "AMX prompt product: no memory for %zu bytes of "
                            "packed tokens",
                            bytes);
    j.xp = (uint32_t *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    /* Token groups: every item of a thread runs over one group's packed
     * tokens (at most GROUP_BYTES, so that they stay in L2 with the item's
     * weight copy) before the next group, so the weights are read once a
     * group rather than the packed tokens once an item. */
    j.gb = (int64_t)(GROUP_BYTES / ((size_t)j.K2 * 4 * 16)) & ~(int64_t)1;
    j.gb = j.gb < 2 ? 2 : j.gb > j.nb ? j.nb : j.gb;
    int64_t items = (w->rows + BR - 1) / BR;
    /* small products are not worth waking the pool for */
    if (w->rows * w->cols * n_tok < 32768) {
        pack_task(&j, 0, j.nb);
        tiles_task(&j, 0, items);
    } else {
        loom_pool_run(pool, j.nb, pack_task, &j);
        loom_pool_run(pool, items, tiles_task, &j);
    }
    free(raw);
    return LOOM_OK;
#else
    (void)pool, (void)x, (void)y, (void)n_tok;
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "AMX prompt product: not in this build");
#endif
}
