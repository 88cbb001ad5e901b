/* Attention for the rows of a prompt chunk. Where the CPU has AVX-512, 32
 * query rows of one head at a time as two small matrix products on FMA
 * (scores with the rows across the lanes, then the weighted values with
 * the head's columns across them); elsewhere four rows at a time over the
 * same K and V, the scores as sixteen-lane sums. Either sums in another
 * order than loom_cpu_attend_head_blocked's (the rows' kernel), so it
 * agrees with it within float32 rounding, not bit for bit: for prompt
 * chunks only, as host->matmul_prompt. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <loom/cpu_math.h>
#include <loom/cpu_ops.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) &&        \
    !defined(_WIN32)
#include <immintrin.h>
#define CHUNK_AVX512 1
#endif

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) &&         \
    !defined(_WIN32)
#define CHUNK_MULTIVERSION                                                     \
    __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CHUNK_MULTIVERSION
#endif

enum { ROWS = 4, LANES = 16 };

#if defined(__GNUC__) || defined(__clang__)
typedef float chunk_v16 __attribute__((vector_size(64)));
#define CHUNK_VECTORS 1
#endif

/* s[r] = q[r] . k over n, for the four rows (rows past nq are zeros). */
CHUNK_MULTIVERSION
static void chunk_dots(float *s, const float *const *q, const float *k,
                       int64_t n)
{
    int64_t i = 0;
    float acc[ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
#ifdef CHUNK_VECTORS
    chunk_v16 a[ROWS] = {{0}};
    for (; i + LANES <= n; i += LANES) {
        chunk_v16 kv, qv;
        memcpy(&kv, k + i, sizeof kv);
        for (int r = 0; r < ROWS; r++) {
            memcpy(&qv, q[r] + i, sizeof qv);
            a[r] += qv * kv;
        }
    }
    for (int r = 0; r < ROWS; r++)
        for (int l = 0; l < LANES; l++)
            acc[r] += a[r][l];
#endif
    for (; i < n; i++)
        for (int r = 0; r < ROWS; r++)
            acc[r] += q[r][i] * k[i];
    for (int r = 0; r < ROWS; r++)
        s[r] = acc[r];
}

/* out[r] += p[r] v over n, for the four rows. */
CHUNK_MULTIVERSION
static void chunk_axpys(float *const *out, const float *p, const float *v,
                        int64_t n)
{
    int64_t i = 0;
#ifdef CHUNK_VECTORS
    for (; i + LANES <= n; i += LANES) {
        chunk_v16 vv, o;
        memcpy(&vv, v + i, sizeof vv);
        for (int r = 0; r < ROWS; r++) {
            memcpy(&o, out[r] + i, sizeof o);
            o += p[r] * vv;
            memcpy(out[r] + i, &o, sizeof o);
        }
    }
#endif
    for (; i < n; i++)
        for (int r = 0; r < ROWS; r++)
            out[r][i] += p[r] * v[i];
}

#ifdef CHUNK_AVX512
enum { QB = 32, KT = 8 }; /* query rows a block; keys a score tile */

#define CHUNK_TARGET __attribute__((target("avx512f")))
/* the tiles' loops unrolled, so that their sums stay in registers (at -O2
 * GCC kept them in memory: one core of the development VM, 2,048 rows of
 * hd 256, 29 against 58-69 GFLOP/s) */

/* Rows [r0, r0 + 4) by columns [d0, d0 + 64) of block512's output (full:
 * all 64 columns are the head's, so the loads need no mask). */
CHUNK_TARGET __attribute__((always_inline)) static inline void
pv_tile(float *out, int64_t out_stride, const float *st, const float *inv,
        const float *v, int64_t stride, int64_t nk, int r0, int nr, int64_t d0,
        int64_t hd, int full)
{
    __mmask16 mk[4];
#pragma GCC unroll 8
    for (int i = 0; i < 4; i++) {
        int64_t left = hd - d0 - 16 * i;
        mk[i] = full || left >= 16 ? (__mmask16)0xffff
                : left <= 0        ? (__mmask16)0
                                   : (__mmask16)((1u << left) - 1u);
    }
    __m512 a[4][4];
#pragma GCC unroll 8
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 8
        for (int i = 0; i < 4; i++)
            a[r][i] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nk; j++) {
        const float *vr = v + j * stride + d0;
        __m512 vv[4];
#pragma GCC unroll 8
        for (int i = 0; i < 4; i++)
            vv[i] = full ? _mm512_loadu_ps(vr + 16 * i)
                         : _mm512_maskz_loadu_ps(mk[i], vr + 16 * i);
#pragma GCC unroll 8
        for (int r = 0; r < 4; r++) {
            __m512 pb = _mm512_set1_ps(st[j * QB + r0 + r]);
#pragma GCC unroll 8
            for (int i = 0; i < 4; i++)
                a[r][i] = _mm512_fmadd_ps(pb, vv[i], a[r][i]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < 4; r++) {
        if (r0 + r >= nr)
            break;
        __m512 iv = _mm512_set1_ps(inv[r0 + r]);
        float *o = out + (r0 + r) * out_stride + d0;
#pragma GCC unroll 8
        for (int i = 0; i < 4; i++)
            _mm512_mask_storeu_ps(o + 16 * i, mk[i],
                                  _mm512_mul_ps(a[r][i], iv));
    }
}

/* Block rows [0, nr) of nr <= QB, at positions p + r, over keys [0, p + nr):
 * st [keys rounded up to KT][QB] holds row r's scores in lane r, qt
 * [head_dim][QB] the rows transposed. */
CHUNK_TARGET static void block512(float *out, int64_t out_stride,
                                  const float *q, int64_t q_stride, int nr,
                                  int64_t p, const float *k, const float *v,
                                  int64_t stride, int64_t hd, float scale,
                                  float *qt, float *st)
{
    int64_t nk = p + nr;
    for (int64_t d = 0; d < hd; d++)
        for (int r = 0; r < QB; r++)
            qt[d * QB + r] = r < nr ? q[r * q_stride + d] : 0.0f;
    /* scores: KT keys by 32 rows a tile, k broadcast down the column */
    __m512 sv = _mm512_set1_ps(scale);
    for (int64_t j0 = 0; j0 < nk; j0 += KT) {
        const float *kr[KT];
#pragma GCC unroll 8
        for (int c = 0; c < KT; c++)
            kr[c] = k + (j0 + c < nk ? j0 + c : nk - 1) * stride;
        __m512 a[KT][2];
#pragma GCC unroll 8
        for (int c = 0; c < KT; c++)
            a[c][0] = a[c][1] = _mm512_setzero_ps();
        for (int64_t d = 0; d < hd; d++) {
            __m512 q0 = _mm512_loadu_ps(qt + d * QB);
            __m512 q1 = _mm512_loadu_ps(qt + d * QB + 16);
#pragma GCC unroll 8
            for (int c = 0; c < KT; c++) {
                __m512 kb = _mm512_set1_ps(kr[c][d]);
                a[c][0] = _mm512_fmadd_ps(kb, q0, a[c][0]);
                a[c][1] = _mm512_fmadd_ps(kb, q1, a[c][1]);
            }
        }
#pragma GCC unroll 8
        for (int c = 0; c < KT; c++) {
            _mm512_storeu_ps(st + (j0 + c) * QB, _mm512_mul_ps(a[c][0], sv));
            _mm512_storeu_ps(st + (j0 + c) * QB + 16,
                             _mm512_mul_ps(a[c][1], sv));
        }
    }
    /* row r sees keys [0, p + r]: the rest out of the max, then weigh 0 */
    for (int64_t j = p; j < nk; j++)
        for (int r = 0; r < (int)(j - p); r++)
            st[j * QB + r] = -INFINITY;
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    for (int64_t j = 0; j < nk; j++) {
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(st + j * QB));
        m1 = _mm512_max_ps(m1, _mm512_loadu_ps(st + j * QB + 16));
    }
    for (int64_t j = 0; j < nk; j++) {
        _mm512_storeu_ps(st + j * QB,
                         _mm512_sub_ps(_mm512_loadu_ps(st + j * QB), m0));
        _mm512_storeu_ps(st + j * QB + 16,
                         _mm512_sub_ps(_mm512_loadu_ps(st + j * QB + 16), m1));
    }
    loom_cpu_expf_n(st, st, nk * QB);
    for (int64_t j = p; j < nk; j++)
        for (int r = 0; r < (int)(j - p); r++)
            st[j * QB + r] = 0.0f;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    for (int64_t j = 0; j < nk; j++) {
        s0 = _mm512_add_ps(s0, _mm512_loadu_ps(st + j * QB));
        s1 = _mm512_add_ps(s1, _mm512_loadu_ps(st + j * QB + 16));
    }
    float inv[QB];
    _mm512_storeu_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), s0));
    _mm512_storeu_ps(inv + 16, _mm512_div_ps(_mm512_set1_ps(1.0f), s1));
    /* the weighted values: 4 rows by 64 columns a tile, the weight
     * broadcast along the row */
    for (int r0 = 0; r0 < nr; r0 += 4)
        for (int64_t d0 = 0; d0 < hd; d0 += 64) {
            if (d0 + 64 <= hd)
                pv_tile(out, out_stride, st, inv, v, stride, nk, r0, nr, d0, hd,
                        1);
            else
                pv_tile(out, out_stride, st, inv, v, stride, nk, r0, nr, d0, hd,
                        0);
        }
}

/* The AVX-512 form over every block of 32 rows; 0 where the CPU lacks it
 * or its scratch cannot be had. */
static int chunk512(float *out, int64_t out_stride, const float *q,
                    int64_t q_stride, int64_t n_rows, int64_t pos0,
                    const float *k, const float *v, int64_t stride,
                    int64_t head_dim, float scale)
{
    if (!__builtin_cpu_supports("avx512f"))
        return 0;
    int64_t keys = (pos0 + n_rows + KT - 1) / KT * KT;
    float *qt = malloc((size_t)(head_dim + keys) * QB * sizeof(float));
    if (!qt)
        return 0;
    float *st = qt + head_dim * QB;
    for (int64_t r0 = 0; r0 < n_rows; r0 += QB) {
        int nr = n_rows - r0 < QB ? (int)(n_rows - r0) : QB;
        block512(out + r0 * out_stride, out_stride, q + r0 * q_stride, q_stride,
                 nr, pos0 + r0, k, v, stride, head_dim, scale, qt, st);
    }
    free(qt);
    return 1;
}
#endif

void loom_cpu_attend_chunk(float *out, int64_t out_stride, const float *q,
                           int64_t q_stride, int64_t n_rows, int64_t pos0,
                           const float *k, const float *v, int64_t stride,
                           int64_t head_dim, float scale)
{
#ifdef CHUNK_AVX512
    if (chunk512(out, out_stride, q, q_stride, n_rows, pos0, k, v, stride,
                 head_dim, scale))
        return;
#endif
    int64_t most = pos0 + n_rows;
    /* the four rows' scores, then an output for rows past the chunk */
    float *sc = malloc((size_t)(ROWS * most + head_dim) * sizeof(float));
    if (!sc) {
        /* the rows' kernel needs no scratch: the same within rounding */
        for (int64_t r = 0; r < n_rows; r++)
            loom_cpu_attend_head_blocked(out + r * out_stride, q + r * q_stride,
                                         k, v, pos0 + r + 1, stride, head_dim,
                                         scale);
        return;
    }
    float *spare = sc + ROWS * most;
    for (int64_t r0 = 0; r0 < n_rows; r0 += ROWS) {
        int64_t nr = n_rows - r0 < ROWS ? n_rows - r0 : ROWS;
        /* rows past the chunk repeat its last query, weigh nothing and
         * write into the spare row */
        const float *qr[ROWS];
        float *dst[ROWS];
        for (int r = 0; r < ROWS; r++) {
            int64_t rr = r < nr ? r0 + r : r0 + nr - 1;
            qr[r] = q + rr * q_stride;
            dst[r] = r < nr ? out + rr * out_stride : spare;
            memset(dst[r], 0, (size_t)head_dim * sizeof(float));
        }
        /* row r sees positions [0, pos0 + r0 + r] */
        int64_t n_last = pos0 + r0 + nr;
        for (int64_t j = 0; j < n_last; j++) {
            float s[ROWS];
            chunk_dots(s, qr, k + j * stride, head_dim);
            for (int r = 0; r < ROWS; r++)
                sc[r * most + j] = scale * s[r];
        }
        float inv[ROWS];
        for (int r = 0; r < ROWS; r++) {
            int64_t n = r < nr ? pos0 + r0 + r + 1 : 0;
            float *row = sc + r * most;
            float m = -INFINITY;
            for (int64_t j = 0; j < n; j++)
                m = row[j] > m ? row[j] : m;
            double sum = 0.0;
            for (int64_t j = 0; j < n; j++) {
                row[j] = loom_cpu_expf(row[j] - m);
                sum += row[j];
            }
            for (int64_t j = n; j < n_last; j++)
                row[j] = 0.0f;
            inv[r] = n > 0 ? (float)(1.0 / sum) : 0.0f;
        }
        for (int64_t j = 0; j < n_last; j++) {
            float p[ROWS];
            for (int r = 0; r < ROWS; r++)
                p[r] = sc[r * most + j];
            chunk_axpys(dst, p, v + j * stride, head_dim);
        }
        for (int r = 0; r < nr; r++)
            loom_cpu_scale(dst[r], inv[r], head_dim);
    }
    free(sc);
}

void loom_cpu_chunk_item(int64_t i, int64_t n_blocks, int64_t *block,
                         int64_t *head)
{
    int64_t j = i % n_blocks;
    *head = i / n_blocks;
    *block = j % 2 == 0 ? j / 2 : n_blocks - 1 - j / 2;
}
