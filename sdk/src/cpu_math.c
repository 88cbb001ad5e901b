/* The portable elementary functions declared in loom/cpu_math.h: Cody-Waite
 * argument reduction and Taylor polynomials in double, rounded once. Built
 * with -ffp-contract=off (sdk/CMakeLists.txt): no fused multiply-add may
 * change a rounding on one compiler or CPU and not another. */
#include <loom/cpu_math.h>

#include <math.h> /* INFINITY and NAN only: no libm call here */
#include <stdint.h>
#include <string.h>

/* The array forms: one binary for every x86-64, the loader picking the
 * widest clone the CPU has (the same IEEE operations in every clone). PE
 * has no ifunc, so Windows runs the baseline SSE2 form. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) &&         \
    !defined(_WIN32)
#define LOOM_MATH_MULTIVERSION                                                 \
    __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LOOM_MATH_MULTIVERSION
#endif

static inline uint64_t bits_of(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline double double_of(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* 1.5 * 2^52: adding it rounds a double below 2^51 in magnitude to an
 * integer (round to nearest even), held in the low bits of the sum. */
static const double SHIFT = 0x1.8p52;
static const double INV_LN2 = 0x1.71547652b82fep+0;
/* ln 2 = LN2_HI + LN2_LO; LN2_HI has 42 bits, so k * LN2_HI is exact for
 * |k| < 2^11 */
static const double LN2_HI = 0x1.62e42fefa3800p-1;
static const double LN2_LO = 0x1.ef35793c76730p-45;
static const double TWO_OVER_PI = 0x1.45f306dc9c883p-1;
/* pi/2 in 24-bit pieces (the last one the rest, rounded): k * PIO2_1..3 are
 * exact for |k| < 2^29 */
static const double PIO2_1 = 0x1.921fb40000000p+0;
static const double PIO2_2 = 0x1.4442d00000000p-24;
static const double PIO2_3 = 0x1.8469880000000p-48;
static const double PIO2_4 = 0x1.8cc51701b839ap-72;

/* e^r for |r| <= ln2/2 (4.4e-18 relative truncation): Taylor to r^13 */
static inline double exp_poly(double r)
{
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    return p * r + 1.0;
}

/* e^x for x in [-104, 89] (the float range and a little beyond): k = the
 * nearest integer to x/ln2, e^x = 2^k e^(x - k ln2). No branch, so loops
 * over it vectorise. */
static inline double exp_core(double x)
{
    double kd = x * INV_LN2 + SHIFT;
    uint64_t kb = bits_of(kd);
    kd -= SHIFT;
    double r = (x - kd * LN2_HI) - kd * LN2_LO;
    /* SHIFT's low 12 bits are 0: kb + 1023 holds k + 1023 there */
    double scale = double_of((kb + 1023u) << 52);
    return exp_poly(r) * scale;
}

static inline float expf_core(float x)
{
    /* outside [-104, 89] the float result is 0 or inf anyway; NaN passes
     * both comparisons and comes out NaN */
    float xc = x > 89.0f ? 89.0f : x;
    xc = xc < -104.0f ? -104.0f : xc;
    return (float)exp_core((double)xc);
}

float loom_cpu_expf(float x)
{
    return expf_core(x);
}

/* ---------------------------------------------------------------- log */

/* log(1 + f) for 1 + f in [sqrt(1/2), sqrt(2)]: 2 atanh(s), s = f/(2+f),
 * |s| <= 0.1716, the series to s^23 (2.5e-18 truncation) */
static double log1p_reduced(double f)
{
    double s = f / (2.0 + f);
    double z = s * s;
    double p = 1.0 / 23.0;
    p = p * z + 1.0 / 21.0;
    p = p * z + 1.0 / 19.0;
    p = p * z + 1.0 / 17.0;
    p = p * z + 1.0 / 15.0;
    p = p * z + 1.0 / 13.0;
    p = p * z + 1.0 / 11.0;
    p = p * z + 1.0 / 9.0;
    p = p * z + 1.0 / 7.0;
    p = p * z + 1.0 / 5.0;
    p = p * z + 1.0 / 3.0;
    return 2.0 * s + (2.0 * s) * (z * p);
}

double loom_cpu_log(double x)
{
    if (x != x || x == INFINITY)
        return x;
    if (x == 0.0)
        return -INFINITY;
    if (x < 0.0)
        return NAN;
    int e = 0;
    if (x < 0x1p-1022) { /* subnormal: make it normal first */
        x *= 0x1p54;
        e = -54;
    }
    uint64_t u = bits_of(x);
    e += (int)((u >> 52) & 0x7ff) - 1023;
    /* the mantissa in [1, 2), then in [sqrt(1/2), sqrt(2)) */
    double m = double_of((u & 0x000fffffffffffffu) | 0x3ff0000000000000u);
    if (m > 0x1.6a09e667f3bcdp+0) {
        m *= 0.5;
        e += 1;
    }
    double ed = (double)e;
    return ed * LN2_HI + (ed * LN2_LO + log1p_reduced(m - 1.0));
}

float loom_cpu_logf(float x)
{
    return (float)loom_cpu_log((double)x);
}

float loom_cpu_log1pf(float x)
{
    double xd = (double)x;
    /* 1 + x within [sqrt(1/2), sqrt(2)]: straight from x, keeping small
     * x's bits; else 1 + x is exact in double (|x| >= 0.29 has no bits
     * below 2^-26, and above 2^52 rounding it is harmless) */
    if (xd > -0.29289321881345248 && xd < 0.41421356237309503)
        return (float)log1p_reduced(xd);
    return (float)loom_cpu_log(1.0 + xd);
}

/* ---------------------------------------------------------------- exp */

double loom_cpu_exp(double x)
{
    if (x != x)
        return x;
    if (x > 709.8)
        return INFINITY;
    if (x < -745.2)
        return 0.0;
    double kd = x * INV_LN2 + SHIFT;
    kd -= SHIFT;
    double r = (x - kd * LN2_HI) - kd * LN2_LO;
    /* 2^k as two factors, each a normal double: the product rounds once,
     * at the last multiplication, also into the subnormals */
    int k = (int)kd, k1 = k / 2, k2 = k - k1;
    double s1 = double_of((uint64_t)(k1 + 1023) << 52);
    double s2 = double_of((uint64_t)(k2 + 1023) << 52);
    return exp_poly(r) * s1 * s2;
}

/* ---------------------------------------------------------------- tanh */

float loom_cpu_tanhf(float x)
{
    double a = (double)(x < 0.0f ? -x : x);
    double t;
    if (a != a)
        return x;
    if (a < 0x1p-12) {
        /* x - x^3/3: the next term is below 2^-48 relative */
        t = a - a * a * a * (1.0 / 3.0);
    } else {
        /* above 20, tanh rounds to 1 in float; keeps e^2a finite */
        double e = exp_core(2.0 * (a > 20.0 ? 20.0 : a));
        t = (e - 1.0) / (e + 1.0);
    }
    return (float)(x < 0.0f ? -t : t);
}

/* ---------------------------------------------------------------- pow */

float loom_cpu_powf(float x, float y)
{
    if (y == 0.0f || x == 1.0f)
        return 1.0f;
    if (x != x || y != y || x < 0.0f)
        return NAN;
    if (x == 0.0f)
        return y > 0.0f ? 0.0f : INFINITY;
    double l = (double)y * loom_cpu_log((double)x);
    /* beyond the float range the result is 0 or inf; the clamp keeps
     * exp_core inside its domain */
    if (l > 89.0)
        return INFINITY;
    if (l < -104.0)
        return 0.0f;
    return (float)exp_core(l);
}

/* ---------------------------------------------------------------- sin, cos */

/* sin r and cos r for |r| <= pi/4 (+ a little): Taylor to r^15 and r^16 */
static double sin_poly(double r)
{
    double z = r * r;
    double p = -1.0 / 1307674368000.0;
    p = p * z + 1.0 / 6227020800.0;
    p = p * z - 1.0 / 39916800.0;
    p = p * z + 1.0 / 362880.0;
    p = p * z - 1.0 / 5040.0;
    p = p * z + 1.0 / 120.0;
    p = p * z - 1.0 / 6.0;
    return r + r * (z * p);
}

static double cos_poly(double r)
{
    double z = r * r;
    double p = 1.0 / 20922789888000.0;
    p = p * z - 1.0 / 87178291200.0;
    p = p * z + 1.0 / 479001600.0;
    p = p * z - 1.0 / 3628800.0;
    p = p * z + 1.0 / 40320.0;
    p = p * z - 1.0 / 720.0;
    p = p * z + 1.0 / 24.0;
    p = p * z - 0.5;
    return 1.0 + z * p;
}

/* x = k pi/2 + r, |r| <= pi/4; returns r, *quadrant = k mod 4 */
static double reduce_pio2(float x, unsigned *quadrant)
{
    double xd = (double)x;
    double kd = xd * TWO_OVER_PI + SHIFT;
    *quadrant = (unsigned)(bits_of(kd) & 3u);
    kd -= SHIFT;
    return (((xd - kd * PIO2_1) - kd * PIO2_2) - kd * PIO2_3) - kd * PIO2_4;
}

float loom_cpu_sinf(float x)
{
    if (x != x || x - x != 0.0f) /* NaN, inf */
        return x - x;
    unsigned q;
    double r = reduce_pio2(x, &q);
    double v = (q & 1u) ? cos_poly(r) : sin_poly(r);
    return (float)((q & 2u) ? -v : v);
}

float loom_cpu_cosf(float x)
{
    if (x != x || x - x != 0.0f)
        return x - x;
    unsigned q;
    double r = reduce_pio2(x, &q);
    double v = (q & 1u) ? sin_poly(r) : cos_poly(r);
    return (float)(((q + 1u) & 2u) ? -v : v);
}

/* ---------------------------------------------------------------- arrays */

LOOM_MATH_MULTIVERSION
void loom_cpu_expf_n(float *out, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = expf_core(x[i]);
}

LOOM_MATH_MULTIVERSION
void loom_cpu_sigmoid_n(float *out, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = 1.0f / (1.0f + expf_core(-x[i]));
}

LOOM_MATH_MULTIVERSION
void loom_cpu_silu_n(float *out, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = x[i] / (1.0f + expf_core(-x[i]));
}

LOOM_MATH_MULTIVERSION
void loom_cpu_swiglu_n(float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        a[i] = a[i] / (1.0f + expf_core(-a[i])) * b[i];
}
