/* Attention for the rows of a prompt chunk: four query rows of one head at
 * a time over the same K and V, the scores as sixteen-lane sums, each K
 * and V row read once for the four. Its sums run in another order than
 * loom_cpu_attend_head_blocked's (the rows' kernel), so it agrees with it
 * within float32 rounding, not bit for bit: for prompt chunks only, as
 * host->matmul_prompt. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <loom/cpu_math.h>
#include <loom/cpu_ops.h>

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

void loom_cpu_attend_chunk(float *out, int64_t out_stride, const float *q,
                           int64_t q_stride, int64_t n_rows, int64_t pos0,
                           const float *k, const float *v, int64_t stride,
                           int64_t head_dim, float scale)
{
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
