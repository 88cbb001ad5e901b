/* The SDK's Mamba-2 building blocks (loom/cpu_ssm.h) against values worked
 * out by hand or in closed form. */
#include <math.h>
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
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
