/* The gated delta rule over the rows of a prompt chunk in its chunkwise (WY)
 * form: per block of Q35_GDN_CHUNK rows, small matrix products in place of
 * two passes over the state per row (for prompt chunks only: its sums run
 * in another order than q35_gdn_step's, so it agrees with it within
 * rounding, not bit for bit).
 *
 * With S the state [dk][dv] at a block's start, G_i the running sum of the
 * log decays over the block's rows up to i, and (the row form's
 * S_i = e^(g_i) S_(i-1) + k_i d_i^T unrolled)
 *   S_i = e^(G_i) S + sum_(j <= i) e^(G_i - G_j) k_j d_j^T,
 * the deltas d_i solve the lower triangular system (forward substitution,
 * no inverse formed)
 *   d_i + sum_(j < i) A_ij d_j = beta_i (v_i - e^(G_i) S^T k_i),
 *   A_ij = beta_i e^(G_i - G_j) k_i.k_j;
 * then
 *   o_i = e^(G_i) S^T q_i + sum_(j <= i) M_ij d_j,
 *   M_ij = e^(G_i - G_j) q_i.k_j,
 *   S <- e^(G_n) S + sum_j e^(G_n - G_j) k_j d_j^T.
 * Every exponent is a sum of log decays (<= 0): nothing overflows. */
#include "qwen35.h"

/* One binary for every x86-64: the products in sixteen lanes where the CPU
 * has AVX-512 (tiles of 8 rows: 16 accumulators of its 32 registers), eight
 * where it has AVX2 (4 rows, of 16), four elsewhere; q35_mm chooses per
 * call (cpu_supports is a load and a test), as a vector wider than the
 * target's registers would live in memory. Every width sums each element
 * in the same order, so they give the same bits. The few other loops are
 * four lanes of plain SSE2 (or NEON) code, calling into the wider kernels,
 * each of which leaves the upper registers clean. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) &&         \
    !defined(_WIN32)
#define Q35_CHUNK_X86 1
#endif

#if defined(__GNUC__) || defined(__clang__)
typedef float q35_v4 __attribute__((vector_size(16)));
typedef float q35_v8 __attribute__((vector_size(32)));
typedef float q35_v16 __attribute__((vector_size(64)));
#define Q35_CHUNK_INLINE __attribute__((always_inline)) static inline

#ifdef Q35_CHUNK_X86
#define Q35_MM        q35_mm16
#define Q35_MM_VEC    q35_v16
#define Q35_MM_LANES  16
#define Q35_MM_ROWS   8
#define Q35_MM_TARGET __attribute__((target("avx512f")))
#include "gdn_chunk_mm.h"
#undef Q35_MM
#undef Q35_MM_VEC
#undef Q35_MM_LANES
#undef Q35_MM_ROWS
#undef Q35_MM_TARGET

#define Q35_MM        q35_mm8
#define Q35_MM_VEC    q35_v8
#define Q35_MM_LANES  8
#define Q35_MM_ROWS   4
#define Q35_MM_TARGET __attribute__((target("avx2")))
#include "gdn_chunk_mm.h"
#undef Q35_MM
#undef Q35_MM_VEC
#undef Q35_MM_LANES
#undef Q35_MM_ROWS
#undef Q35_MM_TARGET
#endif

#define Q35_MM       q35_mm4
#define Q35_MM_VEC   q35_v4
#define Q35_MM_LANES 4
#define Q35_MM_ROWS  4
#define Q35_MM_TARGET
#include "gdn_chunk_mm.h"
#else
#define Q35_CHUNK_INLINE static inline
#define Q35_MM           q35_mm4
#define Q35_MM_VEC       float
#define Q35_MM_LANES     1
#define Q35_MM_ROWS      4
#define Q35_MM_TARGET
#include "gdn_chunk_mm.h"
#endif

/* out = keep out + a b (gdn_chunk_mm.h), in the widest lanes the CPU has */
static void q35_mm(float *out, int64_t ldo, float keep, const float *a,
                   int64_t lda, const float *b, int64_t ldb, int64_t rows,
                   int64_t inner, int64_t cols)
{
#ifdef Q35_CHUNK_X86
    if (__builtin_cpu_supports("avx512f")) {
        q35_mm16(out, ldo, keep, a, lda, b, ldb, rows, inner, cols);
        return;
    }
    if (__builtin_cpu_supports("avx2")) {
        q35_mm8(out, ldo, keep, a, lda, b, ldb, rows, inner, cols);
        return;
    }
#endif
    q35_mm4(out, ldo, keep, a, lda, b, ldb, rows, inner, cols);
}

int q35_gdn_chunk_fast(void)
{
#ifdef Q35_CHUNK_X86
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

int64_t q35_gdn_chunk_floats(int64_t dk, int64_t dv)
{
    int64_t C = Q35_GDN_CHUNK;
    return dk * C + 2 * C * C + C * dv;
}

/* y = a y + b x over n (x may be y). */
Q35_CHUNK_INLINE void q35_axpby(float *y, float a, const float *x, float b,
                                int64_t n)
{
    int64_t c = 0;
#if defined(__GNUC__) || defined(__clang__)
    /* bounded by a multiple of 4: with c + 4 <= n, GCC 12 at -O3 took the
     * scalar tail of inlined copies for unbounded and warned */
    for (int64_t nv = n - n % 4; c < nv; c += 4) {
        q35_v4 yv, xv;
        memcpy(&yv, y + c, sizeof yv);
        memcpy(&xv, x + c, sizeof xv);
        yv = a * yv + b * xv;
        memcpy(y + c, &yv, sizeof yv);
    }
#endif
    for (; c < n; c++)
        y[c] = a * y[c] + b * x[c];
}

/* y *= x elementwise over n */
Q35_CHUNK_INLINE void q35_mul(float *y, const float *x, int64_t n)
{
    int64_t c = 0;
#if defined(__GNUC__) || defined(__clang__)
    for (int64_t nv = n - n % 4; c < nv; c += 4) {
        q35_v4 yv, xv;
        memcpy(&yv, y + c, sizeof yv);
        memcpy(&xv, x + c, sizeof xv);
        yv = yv * xv;
        memcpy(y + c, &yv, sizeof yv);
    }
#endif
    for (; c < n; c++)
        y[c] *= x[c];
}

/* A decay product below 2^-60 is taken as 0: a term it scales is then
 * under 2^-36 of an ulp of the terms beside it (q and k are unit vectors),
 * and left as it was it soon turns subnormal, in itself and in the
 * products it scales, which cost an Intel core a microcode assist each
 * (1 in 16 of K^T's scaled entries on a random-weight checkpoint). */
Q35_CHUNK_INLINE float q35_decayed(float e)
{
    return e < 0x1p-60f ? 0.0f : e;
}

/* Rows of a block solved (and output) as one product: a tile of rows of
 * the widest q35_mm. */
#define Q35_SUB 8

/* The rows r0 .. r0 + n of x (n <= Q35_GDN_CHUNK) from state S, S advanced
 * past them. */
static void q35_gdn_block(float *S, const q35_gdn_rows *x, int64_t r0,
                          int64_t n, int64_t dk, int64_t dv, float *work)
{
    enum { C = Q35_GDN_CHUNK };
    float *kt = work;       /* [dk][C] K^T */
    float *A = kt + dk * C; /* [C][C] -A below the diagonal */
    float *M = A + C * C;   /* [C][C] M on and below it */
    float *d = M + C * C;   /* [C][dv] the deltas */
    const float *q = x->q + r0 * x->ld_qkv, *k = x->k + r0 * x->ld_qkv;
    const float *v = x->v + r0 * x->ld_qkv;
    float *o = x->o + r0 * x->ld_o;
    int64_t ld = x->ld_qkv, ldo = x->ld_o;

    for (int64_t e = 0; e < dk; e++)
        for (int64_t j = 0; j < n; j++)
            kt[e * C + j] = k[j * ld + e];
    /* k_i.k_j and q_i.k_j, all (i, j), then scaled by the decay between
     * the rows, e^(G_i - G_j): row i's factors are row i-1's times row i's
     * decay, as the row form decays its state (A negated: the substitution
     * below subtracts it) */
    q35_mm(A, C, 0.0f, k, ld, kt, C, n, dk, n);
    q35_mm(M, C, 0.0f, q, ld, kt, C, n, dk, n);
    float E[C], eg[C], beta[C], p = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        float di = x->decay[(r0 + i) * x->ld_db];
        beta[i] = x->beta[(r0 + i) * x->ld_db];
        for (int64_t j = 0; j < i; j++)
            E[j] = q35_decayed(E[j] * di);
        E[i] = 1.0f;
        p = q35_decayed(p * di);
        eg[i] = p; /* e^(G_i) */
        for (int64_t j = 0; j < i; j++)
            A[i * C + j] *= -beta[i] * E[j];
        for (int64_t j = 0; j <= i; j++)
            M[i * C + j] *= E[j];
        for (int64_t j = i + 1; j < n; j++)
            M[i * C + j] = 0.0f;
    }

    /* d_i = beta_i (v_i - e^(G_i) S^T k_i) - sum_(j < i) A_ij d_j, Q35_SUB
     * rows at a time: the rows before them as one product, then the
     * Q35_SUB in order */
    q35_mm(d, dv, 0.0f, k, ld, S, dv, n, dk, dv);
    for (int64_t i = 0; i < n; i++)
        q35_axpby(d + i * dv, -beta[i] * eg[i], v + i * ld, beta[i], dv);
    for (int64_t i0 = 0; i0 < n; i0 += Q35_SUB) {
        int64_t nb = n - i0 < Q35_SUB ? n - i0 : Q35_SUB;
        q35_mm(d + i0 * dv, dv, 1.0f, A + i0 * C, C, d, dv, nb, i0, dv);
        for (int64_t i = i0 + 1; i < i0 + nb; i++)
            for (int64_t j = i0; j < i; j++)
                q35_axpby(d + i * dv, 1.0f, d + j * dv, A[i * C + j], dv);
    }

    /* o_i = e^(G_i) S^T q_i + sum_(j <= i) M_ij d_j, Q35_SUB rows at a
     * time (M is zero above its diagonal within their span) */
    q35_mm(o, ldo, 0.0f, q, ld, S, dv, n, dk, dv);
    for (int64_t i = 0; i < n; i++)
        q35_axpby(o + i * ldo, eg[i], o + i * ldo, 0.0f, dv);
    for (int64_t i0 = 0; i0 < n; i0 += Q35_SUB) {
        int64_t nb = n - i0 < Q35_SUB ? n - i0 : Q35_SUB;
        q35_mm(o + i0 * ldo, ldo, 1.0f, M + i0 * C, C, d, dv, nb, i0 + nb, dv);
    }

    /* S = e^(G_n) S + sum_j (e^(G_n - G_j) k_j) d_j^T */
    for (int64_t e = 0; e < dk; e++)
        q35_mul(kt + e * C, E, n);
    q35_mm(S, dv, eg[n - 1], kt, C, d, dv, dk, n, dv);
}

void q35_gdn_chunk(float *S, const q35_gdn_rows *x, int64_t dk, int64_t dv,
                   float *work)
{
    for (int64_t r0 = 0; r0 < x->n; r0 += Q35_GDN_CHUNK) {
        int64_t n = x->n - r0 < Q35_GDN_CHUNK ? x->n - r0 : Q35_GDN_CHUNK;
        q35_gdn_block(S, x, r0, n, dk, dv, work);
    }
}
