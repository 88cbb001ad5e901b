/* The SDK's portable elementary functions (loom/cpu_math.h) against the C
 * library's long double ones over dense sweeps: the float functions within
 * 1 ulp of the long double value (and correctly rounded for nearly all
 * inputs), the double ones within 2 ulp; special values; the array forms
 * bit for bit equal to the scalar ones. Each sweep prints its worst error. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <loom/cpu_math.h>

#include "testutil.h"

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The distance of got from the exact value ref, in units of the float
 * spacing at ref (the subnormal spacing at least). */
static double ulp_err_f(float got, long double ref)
{
    int e;
    frexpl(ref, &e);
    int ue = e - 24 < -149 ? -149 : e - 24;
    return (double)(fabsl((long double)got - ref) / ldexpl(1.0L, ue));
}

static double ulp_err_d(double got, long double ref)
{
    int e;
    frexpl(ref, &e);
    int ue = e - 53 < -1074 ? -1074 : e - 53;
    return (double)(fabsl((long double)got - ref) / ldexpl(1.0L, ue));
}

struct sweep {
    double max_ulp;
    float worst_x;
    long n, rounded; /* points; of them, equal to the rounded reference */
};

typedef float (*ffun)(float);
typedef long double (*lfun)(long double);

static void check_point(struct sweep *s, ffun f, lfun ref, float x)
{
    long double r = ref((long double)x);
    float got = f(x);
    float want = (float)r;
    s->n++;
    if (isinf(want) || isnan(r)) {
        /* overflow: the rounded result is inf (or the reference is NaN) */
        ck_assert_msg(bits_of(got) == bits_of(want) || (isnan(got) && isnan(r)),
                      "f(%a) = %a, want %a", (double)x, (double)got,
                      (double)want);
        s->rounded++;
        return;
    }
    double u = ulp_err_f(got, r);
    if (got == want)
        s->rounded++;
    if (u > s->max_ulp) {
        s->max_ulp = u;
        s->worst_x = x;
    }
}

/* Every stride-th float of [lo, hi] by bit pattern (both signs as asked),
 * then a linear sweep of n points over [a, b]. */
static struct sweep run_sweep(const char *name, ffun f, lfun ref, float lo,
                              float hi, uint32_t stride, float a, float b,
                              long n)
{
    struct sweep s = {0};
    for (int sign = 0; sign < 2; sign++) {
        for (uint64_t u = 0; u < 0x7f800000u; u += stride) {
            float x = float_of((uint32_t)u | (sign ? 0x80000000u : 0));
            if (x < lo || x > hi)
                continue;
            check_point(&s, f, ref, x);
        }
    }
    for (long i = 0; i <= n; i++)
        check_point(&s, f, ref, a + (b - a) * (float)((double)i / (double)n));
    printf("%s: %ld points, max error %.3f ulp (at %a), correctly rounded "
           "%.5f%%\n",
           name, s.n, s.max_ulp, (double)s.worst_x,
           100.0 * (double)s.rounded / (double)s.n);
    /* under 1 ulp, and not rounded the other way but rarely */
    ck_assert_double_lt(s.max_ulp, 1.0);
    ck_assert_double_ge((double)s.rounded / (double)s.n, 0.9999);
    return s;
}

static long double ref_exp(long double x)
{
    return expl(x);
}
static long double ref_log(long double x)
{
    return logl(x);
}
static long double ref_log1p(long double x)
{
    return log1pl(x);
}
static long double ref_tanh(long double x)
{
    return tanhl(x);
}
static long double ref_sin(long double x)
{
    return sinl(x);
}
static long double ref_cos(long double x)
{
    return cosl(x);
}
/* RoPE's use: theta^e, theta = 1e4, 1e6 */
static long double ref_pow1e4(long double e)
{
    return powl(10000.0L, e);
}
static float pow1e4(float e)
{
    return loom_cpu_powf(10000.0f, e);
}
static long double ref_pow1e6(long double e)
{
    return powl(1000000.0L, e);
}
static float pow1e6(float e)
{
    return loom_cpu_powf(1000000.0f, e);
}

START_TEST(expf_sweep)
{
    run_sweep("expf", loom_cpu_expf, ref_exp, -110.0f, 95.0f, 613, -20.0f,
              20.0f, 200000);
}
END_TEST

START_TEST(logf_sweep)
{
    /* every float from the smallest subnormal to FLT_MAX, stride 977 */
    run_sweep("logf", loom_cpu_logf, ref_log, 0.0f, FLT_MAX, 977, 0.5f, 2.0f,
              200000);
}
END_TEST

START_TEST(log1pf_sweep)
{
    run_sweep("log1pf", loom_cpu_log1pf, ref_log1p, -1.0f, FLT_MAX, 977, -0.5f,
              1.0f, 200000);
}
END_TEST

START_TEST(tanhf_sweep)
{
    run_sweep("tanhf", loom_cpu_tanhf, ref_tanh, -FLT_MAX, FLT_MAX, 977, -4.0f,
              4.0f, 200000);
}
END_TEST

START_TEST(sincosf_sweep)
{
    /* the exact reduction's range: |x| < 2^28 */
    run_sweep("sinf", loom_cpu_sinf, ref_sin, -0x1p28f, 0x1p28f, 977, -10.0f,
              10.0f, 200000);
    run_sweep("cosf", loom_cpu_cosf, ref_cos, -0x1p28f, 0x1p28f, 977, -10.0f,
              10.0f, 200000);
}
END_TEST

START_TEST(powf_sweep)
{
    /* exponents of theta^(2i/d) span [0, 1); negative ones as well */
    run_sweep("powf(1e4, e)", pow1e4, ref_pow1e4, -9.0f, 9.0f, 311, 0.0f, 1.0f,
              200000);
    run_sweep("powf(1e6, e)", pow1e6, ref_pow1e6, -6.0f, 6.0f, 311, 0.0f, 1.0f,
              200000);
    /* other bases, a coarse grid */
    double worst = 0;
    for (float x = 0.01f; x < 1e5f; x *= 1.37f)
        for (float y = -3.0f; y <= 3.0f; y += 0.0625f) {
            long double r = powl((long double)x, (long double)y);
            if (r > FLT_MAX || r < FLT_MIN)
                continue;
            double u = ulp_err_f(loom_cpu_powf(x, y), r);
            worst = u > worst ? u : worst;
        }
    printf("powf(x, y) grid: max error %.3f ulp\n", worst);
    ck_assert_double_lt(worst, 1.0);
}
END_TEST

/* The double functions the sampler uses: exp over the whole range, log
 * over positives (subnormals included). */
START_TEST(double_sweep)
{
    double worst_e = 0, worst_l = 0;
    long n = 0;
    for (double x = -745.0; x <= 709.7; x += 0.00731)
        if (loom_cpu_exp(x) != 0.0) {
            double u = ulp_err_d(loom_cpu_exp(x), expl((long double)x));
            worst_e = u > worst_e ? u : worst_e;
            n++;
        }
    for (double x = 1e-310; x < 1e300; x *= 1.001731) {
        double u = ulp_err_d(loom_cpu_log(x), logl((long double)x));
        worst_l = u > worst_l ? u : worst_l;
        n++;
    }
    /* Gumbel's u in (0, 1) and -log u, near 1 where log is small */
    for (double u0 = 0.5; u0 < 1.0; u0 += 1.0 / 131072.0) {
        double u = ulp_err_d(loom_cpu_log(u0), logl((long double)u0));
        worst_l = u > worst_l ? u : worst_l;
        n++;
    }
    printf("exp, log (double): %ld points, max error %.3f, %.3f ulp\n", n,
           worst_e, worst_l);
    ck_assert_double_lt(worst_e, 2.0);
    ck_assert_double_lt(worst_l, 2.0);
}
END_TEST

START_TEST(special_values)
{
    float inf = INFINITY, nan = NAN;
    ck_assert(loom_cpu_expf(-inf) == 0.0f);
    ck_assert(loom_cpu_expf(inf) == inf);
    ck_assert(isnan(loom_cpu_expf(nan)));
    ck_assert(loom_cpu_expf(0.0f) == 1.0f);
    ck_assert(loom_cpu_expf(89.0f) == inf);    /* e^88.73 > FLT_MAX */
    ck_assert(loom_cpu_expf(-104.0f) == 0.0f); /* below 2^-150 */
    ck_assert(loom_cpu_logf(0.0f) == -inf);
    ck_assert(isnan(loom_cpu_logf(-1.0f)));
    ck_assert(loom_cpu_logf(inf) == inf);
    ck_assert(loom_cpu_logf(1.0f) == 0.0f);
    ck_assert(loom_cpu_log1pf(-1.0f) == -inf);
    ck_assert(isnan(loom_cpu_log1pf(-2.0f)));
    ck_assert(loom_cpu_log1pf(0x1p-140f) == 0x1p-140f);
    ck_assert(loom_cpu_tanhf(inf) == 1.0f);
    ck_assert(loom_cpu_tanhf(-inf) == -1.0f);
    ck_assert(isnan(loom_cpu_tanhf(nan)));
    ck_assert(loom_cpu_tanhf(0x1p-130f) == 0x1p-130f);
    ck_assert(isnan(loom_cpu_sinf(inf)) && isnan(loom_cpu_cosf(-inf)));
    ck_assert(loom_cpu_sinf(0.0f) == 0.0f && loom_cpu_cosf(0.0f) == 1.0f);
    ck_assert(loom_cpu_powf(0.0f, 2.0f) == 0.0f);
    ck_assert(loom_cpu_powf(0.0f, -2.0f) == inf);
    ck_assert(loom_cpu_powf(5.0f, 0.0f) == 1.0f);
    ck_assert(isnan(loom_cpu_powf(-2.0f, 0.5f)));
    ck_assert(loom_cpu_powf(10.0f, 50.0f) == inf);
    ck_assert(isnan(loom_cpu_log(-1.0)));
    ck_assert(loom_cpu_log(0.0) == -INFINITY);
    ck_assert(loom_cpu_exp(710.0) == INFINITY);
    ck_assert(loom_cpu_exp(-746.0) == 0.0);
    ck_assert(loom_cpu_exp(-740.0) > 0.0); /* subnormal */
    /* the activations at their ends */
    ck_assert(loom_cpu_sigmoid(-inf) == 0.0f && loom_cpu_sigmoid(inf) == 1.0f);
    ck_assert(loom_cpu_silu(inf) == inf && loom_cpu_silu(-200.0f) == -0.0f);
    ck_assert(loom_cpu_softplus(30.0f) == 30.0f);
}
END_TEST

/* The vector loops give the scalar bits for every element, aliased or not,
 * at lengths that leave a remainder for any vector width. */
START_TEST(arrays_equal_scalars)
{
    enum { N = 4099 };
    static float x[N], y[N], z[N], b[N];
    uint32_t s = 12345;
    for (int i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        /* mostly in [-30, 30], some anywhere (inf, NaN, subnormals too) */
        x[i] = (i % 7) ? ((float)(s >> 8) / 16777216.0f - 0.5f) * 60.0f
                       : float_of(s);
        b[i] = (float)(i % 13) - 6.0f;
    }
    loom_cpu_expf_n(y, x, N);
    for (int i = 0; i < N; i++)
        ck_assert_uint_eq(bits_of(y[i]), bits_of(loom_cpu_expf(x[i])));
    memcpy(z, x, sizeof z);
    loom_cpu_sigmoid_n(z, z, N);
    for (int i = 0; i < N; i++)
        ck_assert_uint_eq(bits_of(z[i]), bits_of(loom_cpu_sigmoid(x[i])));
    loom_cpu_silu_n(y + 1, x + 1, N - 2);
    for (int i = 1; i < N - 1; i++)
        ck_assert_uint_eq(bits_of(y[i]), bits_of(loom_cpu_silu(x[i])));
    memcpy(z, x, sizeof z);
    loom_cpu_swiglu_n(z, b, N);
    for (int i = 0; i < N; i++) {
        float want = loom_cpu_silu(x[i]) * b[i];
        ck_assert_uint_eq(bits_of(z[i]), bits_of(want));
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cpu_math");
    TCase *t = tcase_create("functions");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, expf_sweep);
    tcase_add_test(t, logf_sweep);
    tcase_add_test(t, log1pf_sweep);
    tcase_add_test(t, tanhf_sweep);
    tcase_add_test(t, sincosf_sweep);
    tcase_add_test(t, powf_sweep);
    tcase_add_test(t, double_sweep);
    tcase_add_test(t, special_values);
    tcase_add_test(t, arrays_equal_scalars);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
