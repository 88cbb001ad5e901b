/* The Mamba-2 scan over the rows of a prompt chunk in its state-space-dual
 * (SSD) form, declared in loom/cpu_ssm.h: chunk by chunk, the recurrence
 * of loom_cpu_ssm_step rewritten as small matrix products.
 *
 * Within a chunk of l rows, with dA_t = exp(dt_t A) and the decay from
 * row s to row t E(s,t) = dA_{s+1} ... dA_t (E(t,t) = 1):
 *
 *   y_t   = din_t C_t . S_in + D x_t + sum_{s<=t} (C_t . B_s) E(s,t) dt_s x_s
 *   S_out = din_{l-1} S_in + sum_s dout_s dt_s x_s B_s^T
 *
 * where din_t = dA_0 ... dA_t (S_in's decay up to row t) and dout_s =
 * E(s, l-1). The decays are running products of the dA, as the row step
 * takes them, never differences of cumulative sums of dt A, which lose
 * digits once those sums are large (strong decays). The state is held
 * transposed ([N, P]) for the call, so every product runs along P, the
 * rows of x and y. */
#include <loom/cpu_ssm.h>

#include <float.h>
#include <string.h>

#include <loom/cpu_math.h>
#include <loom/cpu_ops.h>

#include "cpu_lanes.h"

/* One block of sums held in lanes: MR rows by NR columns (two v8). */
enum { MR = 4, NR = 16 };

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* c[i*ldc + j] = beta c[i*ldc + j] + sum_{k<K} a[i*ai + k*ak] b[k*ldb + j]
 * over one full MR x NR block (beta 0: c is not read). */
static inline void mac_block(float *c, int64_t ldc, float beta, const float *a,
                             int64_t ai, int64_t ak, const float *b,
                             int64_t ldb, int64_t K)
{
#ifdef LOOM_CPU_LANES
    /* written out so the eight sums stay in registers at -O2 */
    loom_v8 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0};
    loom_v8 c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
    if (beta != 0.0f) {
        memcpy(&c00, c, sizeof c00);
        memcpy(&c01, c + 8, sizeof c01);
        memcpy(&c10, c + ldc, sizeof c10);
        memcpy(&c11, c + ldc + 8, sizeof c11);
        memcpy(&c20, c + 2 * ldc, sizeof c20);
        memcpy(&c21, c + 2 * ldc + 8, sizeof c21);
        memcpy(&c30, c + 3 * ldc, sizeof c30);
        memcpy(&c31, c + 3 * ldc + 8, sizeof c31);
        c00 *= beta, c01 *= beta, c10 *= beta, c11 *= beta;
        c20 *= beta, c21 *= beta, c30 *= beta, c31 *= beta;
    }
    const float *a0 = a, *a1 = a + ai, *a2 = a + 2 * ai, *a3 = a + 3 * ai;
    for (int64_t k = 0; k < K; k++) {
        loom_v8 b0, b1;
        memcpy(&b0, b + k * ldb, sizeof b0);
        memcpy(&b1, b + k * ldb + 8, sizeof b1);
        float x0 = a0[k * ak], x1 = a1[k * ak];
        float x2 = a2[k * ak], x3 = a3[k * ak];
        c00 += x0 * b0;
        c01 += x0 * b1;
        c10 += x1 * b0;
        c11 += x1 * b1;
        c20 += x2 * b0;
        c21 += x2 * b1;
        c30 += x3 * b0;
        c31 += x3 * b1;
    }
    memcpy(c, &c00, sizeof c00);
    memcpy(c + 8, &c01, sizeof c01);
    memcpy(c + ldc, &c10, sizeof c10);
    memcpy(c + ldc + 8, &c11, sizeof c11);
    memcpy(c + 2 * ldc, &c20, sizeof c20);
    memcpy(c + 2 * ldc + 8, &c21, sizeof c21);
    memcpy(c + 3 * ldc, &c30, sizeof c30);
    memcpy(c + 3 * ldc + 8, &c31, sizeof c31);
#else
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            float s = beta != 0.0f ? beta * c[i * ldc + j] : 0.0f;
            for (int64_t k = 0; k < K; k++)
                s += a[i * ai + k * ak] * b[k * ldb + j];
            c[i * ldc + j] = s;
        }
#endif
}

/* c = beta c + a b for i < m, j < n: c(i, j) at c[i*ldc + j], a(i, k) at
 * a[i*ai + k*ak] (a row-major or transposed), b(k, j) at b[k*ldb + j];
 * beta 0: c is not read (a decay flushed to 0 drops the old state). Each
 * sum runs in order of k, so its bits do not depend on the blocking.
 * a_lower: a(i, k) = 0 for k > i, so each block's sums stop at its last
 * row. */
LOOM_CPU_MULTIVERSION
static void mac(float *c, int64_t ldc, float beta, const float *a, int64_t ai,
                int64_t ak, const float *b, int64_t ldb, int64_t m, int64_t n,
                int64_t K, int a_lower)
{
    for (int64_t i0 = 0; i0 < m; i0 += MR) {
        int64_t mr = min64(MR, m - i0);
        int64_t kn = a_lower ? min64(K, i0 + mr) : K;
        for (int64_t j0 = 0; j0 < n; j0 += NR) {
            int64_t nr = min64(NR, n - j0);
            float *cb = c + i0 * ldc + j0;
            const float *ab = a + i0 * ai, *bb = b + j0;
            if (mr == MR && nr == NR) {
                mac_block(cb, ldc, beta, ab, ai, ak, bb, ldb, kn);
                continue;
            }
            /* the edges: few, and only for shapes off the blocks */
            for (int64_t i = 0; i < mr; i++)
                for (int64_t j = 0; j < nr; j++) {
                    float s = beta != 0.0f ? beta * cb[i * ldc + j] : 0.0f;
                    for (int64_t k = 0; k < kn; k++)
                        s += ab[i * ai + k * ak] * bb[k * ldb + j];
                    cb[i * ldc + j] = s;
                }
        }
    }
}

/* G[t*ldg + s] = C_t . B_s for s <= t < l (rows of C and B n floats),
 * four s at a time over each C row; each dot's eight lanes are summed in
 * one fixed order. */
LOOM_CPU_MULTIVERSION
static void dots_lower(float *G, int64_t ldg, const float *C, const float *B,
                       int64_t l, int64_t n)
{
    for (int64_t t = 0; t < l; t++) {
        const float *c = C + t * n;
        for (int64_t s0 = 0; s0 <= t; s0 += 4) {
            int64_t ns = min64(4, t + 1 - s0);
            /* past row t, row t again: computed, not stored */
            const float *b[4];
            for (int64_t q = 0; q < 4; q++)
                b[q] = B + min64(s0 + q, t) * n;
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            int64_t i = 0;
#ifdef LOOM_CPU_LANES
            loom_v8 acc0 = {0}, acc1 = {0}, acc2 = {0}, acc3 = {0};
            for (; i + 8 <= n; i += 8) {
                loom_v8 cv, b0, b1, b2, b3;
                memcpy(&cv, c + i, sizeof cv);
                memcpy(&b0, b[0] + i, sizeof b0);
                memcpy(&b1, b[1] + i, sizeof b1);
                memcpy(&b2, b[2] + i, sizeof b2);
                memcpy(&b3, b[3] + i, sizeof b3);
                acc0 += cv * b0;
                acc1 += cv * b1;
                acc2 += cv * b2;
                acc3 += cv * b3;
            }
            for (int q = 0; q < 8; q++) {
                d[0] += acc0[q];
                d[1] += acc1[q];
                d[2] += acc2[q];
                d[3] += acc3[q];
            }
#endif
            for (; i < n; i++)
                for (int q = 0; q < 4; q++)
                    d[q] += c[i] * b[q][i];
            for (int64_t q = 0; q < ns; q++)
                G[t * ldg + s0 + q] = d[q];
        }
    }
}

/* y = a y + b x over n floats. */
LOOM_CPU_MULTIVERSION
static void scale_add(float *y, float a, const float *x, float b, int64_t n)
{
    int64_t i = 0;
#ifdef LOOM_CPU_LANES
    for (; i + 8 <= n; i += 8) {
        loom_v8 yv, xv;
        memcpy(&yv, y + i, sizeof yv);
        memcpy(&xv, x + i, sizeof xv);
        yv = a * yv + b * xv;
        memcpy(y + i, &yv, sizeof yv);
    }
#endif
    for (; i < n; i++)
        y[i] = a * y[i] + b * x[i];
}

/* dst[j*ldd + i] = src[i*lds + j] for i < rows, j < cols, in tiles of 8
 * by 8 so both sides stay within a few cache lines. */
static void transpose(float *dst, int64_t ldd, const float *src, int64_t lds,
                      int64_t rows, int64_t cols)
{
    for (int64_t i0 = 0; i0 < rows; i0 += 8)
        for (int64_t j0 = 0; j0 < cols; j0 += 8) {
            int64_t i1 = min64(i0 + 8, rows), j1 = min64(j0 + 8, cols);
            for (int64_t j = j0; j < j1; j++)
                for (int64_t i = i0; i < i1; i++)
                    dst[j * ldd + i] = src[i * lds + j];
        }
}

/* A decay product, subnormals flushed to zero: a term that small is past
 * float32's precision next to the row's own (E = 1) term, and subnormal
 * products are slow on some CPUs. */
static float flush(float e)
{
    return e < FLT_MIN ? 0.0f : e;
}

int64_t loom_cpu_ssm_chunk_work(int64_t P, int64_t N, int64_t L)
{
    return N * P + L * (2 * N + P + L);
}

/* Rows [t0, t0 + l) of the head, l <= L, from ST (the state transposed,
 * [N, P]) into ST. */
static void chunk(float *ST, const loom_ssm_rows *r, int64_t t0, int64_t l,
                  float A, float D, int64_t P, int64_t N, int64_t L,
                  float *work)
{
    float *M = work;      /* [L, L] C B^T ∘ E dt, lower triangle */
    float *x = M + L * L; /* [L, P] the rows' x */
    float *C = x + L * P; /* [L, N] their C */
    float *B = C + L * N; /* [L, N] their B, then times dout dt */
    float *y = r->y + t0 * r->ldy;
    float dt[LOOM_SSM_CHUNK_MAX], dA[LOOM_SSM_CHUNK_MAX];
    float din[LOOM_SSM_CHUNK_MAX], dout[LOOM_SSM_CHUNK_MAX];
    float in = 1.0f, out = 1.0f; /* running din_t, dout_s */

    /* the rows side by side: rows a multiple of 4 KiB apart (as
     * Nemotron-H's are) would all fall into one set of the L1 cache */
    for (int64_t t = 0; t < l; t++) {
        int64_t i = t0 + t;
        memcpy(x + t * P, r->x + i * r->ldx, (size_t)P * sizeof(float));
        memcpy(C + t * N, r->C + i * r->ldbc, (size_t)N * sizeof(float));
        memcpy(B + t * N, r->B + i * r->ldbc, (size_t)N * sizeof(float));
        dt[t] = r->dt[i * r->lddt];
        dA[t] = loom_cpu_expf(dt[t] * A);
        in = flush(in * dA[t]);
        din[t] = in;
    }
    for (int64_t t = l - 1; t >= 0; t--) {
        dout[t] = out;
        out = flush(out * dA[t]);
    }

    /* M[t][s] = (C_t . B_s) E(s, t) dt_s for s <= t, zero above */
    dots_lower(M, L, C, B, l, N);
    for (int64_t t = 0; t < l; t++) {
        float *row = M + t * L, e = 1.0f;
        for (int64_t s = t; s >= 0; s--) {
            row[s] *= e * dt[s];
            e = flush(e * dA[s]);
        }
        for (int64_t s = t + 1; s < l; s++)
            row[s] = 0.0f;
    }

    /* the state before the chunk: y_t = din_t C_t . S_in + D x_t */
    mac(y, r->ldy, 0.0f, C, N, 1, ST, P, l, P, N, 0);
    for (int64_t t = 0; t < l; t++)
        scale_add(y + t * r->ldy, din[t], x + t * P, D, P);
    /* the chunk's own rows: y_t += sum_{s<=t} M[t][s] x_s */
    mac(y, r->ldy, 1.0f, M, L, 1, x, P, l, P, l, 1);

    /* the state after it: S^T = din_{l-1} S^T + sum_s (dout_s dt_s B_s)
     * x_s^T, B read down its columns (in is din_{l-1} by now) */
    for (int64_t s = 0; s < l; s++)
        loom_cpu_scale(B + s * N, dout[s] * dt[s], N);
    mac(ST, P, in, B, 1, N, x, P, N, P, l, 0);
}

loom_status loom_cpu_ssm_chunk(float *state, const loom_ssm_rows *rows, float A,
                               float D, int64_t P, int64_t N, int64_t L,
                               float *work)
{
    if (L < 1 || L > LOOM_SSM_CHUNK_MAX || P < 1 ||
        P > LOOM_SSM_CHUNK_DIM_MAX || N < 1 || N > LOOM_SSM_CHUNK_DIM_MAX)
        return LOOM_ERR_RANGE;
    if (!state || !rows || !work)
        return LOOM_ERR_INVALID;
    if (rows->n <= 0)
        return LOOM_OK;
    float *ST = work;
    transpose(ST, P, state, N, P, N);
    for (int64_t t0 = 0; t0 < rows->n; t0 += L)
        chunk(ST, rows, t0, min64(L, rows->n - t0), A, D, P, N, L,
              work + N * P);
    transpose(state, N, ST, P, N, P);
    return LOOM_OK;
}
