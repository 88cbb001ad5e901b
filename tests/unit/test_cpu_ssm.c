/* The SDK's Mamba-2 building blocks (loom/cpu_ssm.h) against values worked
 * out by hand, in closed form, or by the row recurrence in float64. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/cpu_ssm.h>

#include "testutil.h"

#define NEAR(a, b, tol) ck_assert_double_le(fabs((double)(a) - (b)), (tol))

/* One step of a 2x2 head by hand: dA = exp(dt A) = e^-1, dB = dt B. */
START_TEST(ssm_step_by_hand)
{
    float S[4] = {1, 2, 3, 4}, x[2] = {1, -1}, B[2] = {0.5f, 1}, C[2] = {1, 2};
    float y[2];
    loom_cpu_ssm_step(S, x, B, C, 0.5f, -2.0f, 0.5f, y, 2, 2);
    double e = exp(-1.0);
    NEAR(S[0], e + 0.25, 1e-6);
    NEAR(S[1], 2 * e + 0.5, 1e-6);
    NEAR(S[2], 3 * e - 0.25, 1e-6);
    NEAR(S[3], 4 * e - 0.5, 1e-6);
    /* y = C . S[p] + D x[p] */
    NEAR(y[0], 5 * e + 1.75, 1e-6);
    NEAR(y[1], 11 * e - 1.75, 1e-6);
}
END_TEST

/* S <- S/2 + 1 from 0 is 2 (1 - 2^-t); with N = 5 (past the unrolled four)
 * every n holds it, and y sums C over n. */
START_TEST(ssm_recurrence_closed_form)
{
    float S[5] = {0}, x[1] = {1}, B[5], C[5], y[1];
    for (int n = 0; n < 5; n++) {
        B[n] = 1.0f;
        C[n] = (float)(n + 1);
    }
    for (int t = 1; t <= 10; t++) {
        loom_cpu_ssm_step(S, x, B, C, 1.0f, (float)-log(2.0), 0.0f, y, 1, 5);
        double want = 2.0 * (1.0 - pow(0.5, t));
        for (int n = 0; n < 5; n++)
            NEAR(S[n], want, 1e-6);
        NEAR(y[0], 15.0 * want, 1e-5);
    }
}
END_TEST

/* Without y the state moves exactly as with it (a replay is bit for bit). */
START_TEST(ssm_state_only)
{
    float S1[12], S2[12], x[3] = {0.3f, -1.7f, 2.2f}, B[4] = {1, -2, 0.5f, 3};
    float C[4] = {0.1f, 0.2f, 0.3f, 0.4f}, y[3] = {7, 7, 7};
    for (int i = 0; i < 12; i++)
        S1[i] = S2[i] = (float)sin(i + 1.0);
    for (int t = 0; t < 3; t++) {
        loom_cpu_ssm_step(S1, x, B, C, 0.37f, -1.3f, 1.1f, y, 3, 4);
        loom_cpu_ssm_step(S2, x, B, C, 0.37f, -1.3f, 1.1f, NULL, 3, 4);
    }
    ck_assert(memcmp(S1, S2, sizeof S1) == 0);
}
END_TEST

/* ---------------------------------------------------------------- chunks */

/* A case of the chunked scan: a head of P x N, chunks of L rows, n rows,
 * A, and dt log-uniform in [dt_lo, dt_hi]. */
struct chunk_case {
    int64_t P, N, L, n;
    double A, dt_lo, dt_hi;
};

static uint64_t rng_state;

/* uniform in [lo, hi) (a 64-bit LCG's top 53 bits) */
static double uniform(double lo, double hi)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (double)(rng_state >> 11) * 0x1p-53;
}

/* loom_cpu_ssm_chunk on random rows (every array strided, y filled with
 * NaN first) against the row recurrence in float64 from the same float32
 * state, with |.|-summed magnitudes alongside:
 *   Sa_t = dA_t Sa_{t-1} + |dt_t x_t B_t^T|,  ya_t = |C_t| . Sa_t + |D x_t|
 * The reference takes exp of the float32 product dt*A, as the row step
 * does: that rounding is the input's, not the scan's.
 *
 * The bound, first order in u = 2^-24 (each operation rounds once; expf
 * is within u of exp): a decay product of k factors is within 2k u, so
 * each of a chunk's new state terms B dout dt x is within (2L + 3) u and
 * their sum of up to L + 1 terms adds (L + 1) u, which with the decayed
 * old state (2L + 1 more) leaves each chunk adding at most (3L + 5) u of
 * Sa to the state's error: after c chunks, c (3L + 5) u Sa. Row t's y adds
 * its own sums, each over its own part of ya: din_t C . S_in (N u + 2L u +
 * u on the state's), and M = (C . B) E dt (the dot's N/8 + 8 lane by lane
 * or N, at most N + 8, then 2L u + 2 u) times x summed over the chunk
 * (L u + u); D x and the three parts' adds 3 u: y within (c (3L + 5) + N +
 * 3L + 14) u ya, with c the call's chunks (a bound for every row). Decay
 * products under FLT_MIN are flushed to zero: their terms are below 1e-30
 * here. */
static void check_chunk(const struct chunk_case *k)
{
    int64_t P = k->P, N = k->N, L = k->L, n = k->n;
    int64_t ldx = P + 3, ldbc = 2 * N + 5, lddt = 3, ldy = P + 1;
    float *x = malloc((size_t)(n * ldx) * sizeof(float));
    float *bc = malloc((size_t)(n * ldbc) * sizeof(float));
    float *dt = malloc((size_t)(n * lddt) * sizeof(float));
    float *y = malloc((size_t)(n * ldy) * sizeof(float));
    float *S = malloc((size_t)(P * N) * sizeof(float));
    double *S64 = malloc((size_t)(P * N) * sizeof(double));
    double *Sa = malloc((size_t)(P * N) * sizeof(double));
    float *work =
        malloc((size_t)loom_cpu_ssm_chunk_work(P, N, L) * sizeof(float));
    ck_assert(x && bc && dt && y && S && S64 && Sa && work);
    rng_state = (uint64_t)(P * 1000003 + N * 1009 + L * 31 + n);
    for (int64_t i = 0; i < n * ldx; i++)
        x[i] = (float)uniform(-2, 2);
    for (int64_t i = 0; i < n * ldbc; i++)
        bc[i] = (float)uniform(-1, 1);
    for (int64_t i = 0; i < n * lddt; i++)
        dt[i] = (float)exp(uniform(log(k->dt_lo), log(k->dt_hi)));
    for (int64_t i = 0; i < n * ldy; i++)
        y[i] = NAN;
    for (int64_t i = 0; i < P * N; i++) {
        S[i] = (float)uniform(-1, 1);
        S64[i] = S[i];
        Sa[i] = fabs(S[i]);
    }
    float A = (float)k->A, D = 0.7f;
    const float *B = bc, *C = bc + N + 2;
    loom_ssm_rows rows = {x, B, C, dt, y, ldx, ldbc, lddt, ldy, n};
    ck_assert_int_eq(loom_cpu_ssm_chunk(S, &rows, A, D, P, N, L, work),
                     LOOM_OK);

    int64_t chunks = (n + L - 1) / L;
    double tol = (double)(chunks * (3 * L + 5) + N + 3 * L + 14) * 0x1p-24;
    double worst = 0;
    for (int64_t t = 0; t < n; t++) {
        double d = dt[t * lddt];
        double dA = exp((double)(float)(dt[t * lddt] * A));
        for (int64_t p = 0; p < P; p++) {
            double xp = x[t * ldx + p], y64 = D * xp, ya = fabs(D * xp);
            for (int64_t j = 0; j < N; j++) {
                double *s = &S64[p * N + j], *sa = &Sa[p * N + j];
                double b = B[t * ldbc + j], c = C[t * ldbc + j];
                *s = dA * *s + d * b * xp;
                *sa = dA * *sa + fabs(d * b * xp);
                y64 += c * *s;
                ya += fabs(c) * *sa;
            }
            double e = fabs(y[t * ldy + p] - y64);
            ck_assert_msg(e <= tol * ya + 1e-30,
                          "P %lld N %lld L %lld: row %lld y[%lld] = %.9g, "
                          "float64 %.9g (bound %.3g)",
                          (long long)P, (long long)N, (long long)L,
                          (long long)t, (long long)p, y[t * ldy + p], y64,
                          tol * ya);
            worst = fmax(worst, e / (tol * ya + 1e-30));
        }
    }
    for (int64_t i = 0; i < P * N; i++) {
        double e = fabs(S[i] - S64[i]);
        double bound = chunks * (3 * L + 5) * 0x1p-24 * Sa[i] + 1e-30;
        ck_assert_msg(e <= bound, "state[%lld] = %.9g, float64 %.9g",
                      (long long)i, S[i], S64[i]);
        worst = fmax(worst, e / bound);
    }
    fprintf(stderr,
            "ssm chunk P %lld N %lld L %lld n %lld A %g: worst error %.3g "
            "of the bound\n",
            (long long)P, (long long)N, (long long)L, (long long)n, k->A,
            worst);
    free(x);
    free(bc);
    free(dt);
    free(y);
    free(S);
    free(S64);
    free(Sa);
    free(work);
}

/* dt: Mamba-2's init range [1e-3, 0.1] and trained heads' larger steps; A
 * from -exp(A_log), A_log in [0, log 16]. */
static const struct chunk_case chunk_cases[] = {
    {64, 128, 16, 77, -4.0, 1e-3, 0.1},  /* Nemotron-H-4B's head, 77 % 16 */
    {64, 128, 64, 200, -1.0, 1e-2, 1.0}, /* the largest chunk */
    {80, 128, 16, 40, -8.0, 1e-3, 0.5},  /* Nemotron-Nano-9B-v2's head */
    {5, 7, 8, 21, -16.0, 0.1, 2.0},      /* strong decay: dt A to -32 */
    {17, 33, 16, 5, -0.01, 1e-3, 0.1},   /* weak decay, n < L, edges */
    {256, 256, 32, 40, -2.0, 1e-3, 0.5}, /* the largest head */
    {8, 16, 1, 9, -1.0, 1e-3, 1.0},      /* chunks of one row */
    {16, 16, 16, 1, -1.0, 1e-3, 1.0},    /* one row */
    {72, 24, 12, 100, -0.5, 1e-3, 0.1},  /* off the 4 x 16 blocks */
};

START_TEST(ssm_chunk_vs_float64)
{
    check_chunk(&chunk_cases[_i]);
}
END_TEST

/* Shapes past the bounds and NULL pointers are refused before anything
 * changes; no rows is nothing to do. */
START_TEST(ssm_chunk_refusals)
{
    float S[4] = {1, 2, 3, 4}, x[2] = {1, 1}, bc[4] = {1, 1, 1, 1};
    float dt[1] = {0.5f}, y[2] = {7, 7}, work[64];
    loom_ssm_rows rows = {x, bc, bc + 2, dt, y, 2, 4, 1, 2, 1};
    ck_assert_int_le(loom_cpu_ssm_chunk_work(2, 2, 4), 64);
    ck_assert_int_eq(loom_cpu_ssm_chunk(S, &rows, -1, 0, 2, 2, 0, work),
                     LOOM_ERR_RANGE);
    ck_assert_int_eq(
        loom_cpu_ssm_chunk(S, &rows, -1, 0, 2, 2, LOOM_SSM_CHUNK_MAX + 1, work),
        LOOM_ERR_RANGE);
    ck_assert_int_eq(loom_cpu_ssm_chunk(S, &rows, -1, 0, 0, 2, 4, work),
                     LOOM_ERR_RANGE);
    ck_assert_int_eq(loom_cpu_ssm_chunk(S, &rows, -1, 0, 2,
                                        LOOM_SSM_CHUNK_DIM_MAX + 1, 4, work),
                     LOOM_ERR_RANGE);
    ck_assert_int_eq(loom_cpu_ssm_chunk(S, &rows, -1, 0, 2, 2, 4, NULL),
                     LOOM_ERR_INVALID);
    ck_assert_int_eq(loom_cpu_ssm_chunk(S, NULL, -1, 0, 2, 2, 4, work),
                     LOOM_ERR_INVALID);
    rows.n = 0;
    ck_assert_int_eq(loom_cpu_ssm_chunk(S, &rows, -1, 0, 2, 2, 4, work),
                     LOOM_OK);
    ck_assert(S[0] == 1 && S[1] == 2 && S[2] == 3 && S[3] == 4);
    ck_assert(y[0] == 7 && y[1] == 7);
}
END_TEST

/* The gate multiplies before the norm: with a uniform gate it cancels. */
START_TEST(group_gated_norm)
{
    float x[4] = {1, 2, 3, 4}, z[4] = {1, 1, 1, 1}, w[4] = {1, 2, 1, 0.5f};
    float out[4];
    loom_cpu_rmsnorm_group_gated(out, x, z, w, 4, 2, 0.0f);
    NEAR(out[0], 1 / sqrt(2.5), 1e-6);
    NEAR(out[1], 2 * 2 / sqrt(2.5), 1e-6);
    NEAR(out[2], 3 / sqrt(12.5), 1e-6);
    NEAR(out[3], 0.5 * 4 / sqrt(12.5), 1e-6);

    /* mixed gates, one group of 4, eps 1e-5, in place */
    float zz[4] = {1, -1, 2, 0};
    double h[4], ss = 0;
    for (int i = 0; i < 4; i++) {
        h[i] = x[i] * zz[i] / (1 + exp(-zz[i]));
        ss += h[i] * h[i];
    }
    double r = 1 / sqrt(ss / 4 + 1e-5);
    float y[4];
    memcpy(y, x, sizeof y);
    loom_cpu_rmsnorm_group_gated(y, y, zz, w, 4, 4, 1e-5f);
    for (int i = 0; i < 4; i++)
        NEAR(y[i], w[i] * h[i] * r, 1e-6);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cpu_ssm");
    TCase *t = tcase_create("mamba2");
    tcase_add_test(t, ssm_step_by_hand);
    tcase_add_test(t, ssm_recurrence_closed_form);
    tcase_add_test(t, ssm_state_only);
    tcase_add_test(t, group_gated_norm);
    tcase_add_loop_test(t, ssm_chunk_vs_float64, 0,
                        sizeof chunk_cases / sizeof chunk_cases[0]);
    tcase_add_test(t, ssm_chunk_refusals);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
