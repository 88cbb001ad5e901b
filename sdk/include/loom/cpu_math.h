/* The elementary functions of the CPU reference paths (exp, log, log1p,
 * tanh, pow, sin, cos and the activations built on them), written in plain
 * C with one fixed order of double-precision operations, so that every
 * platform and C library computes the same bits (glibc's, mingw-w64's and
 * Apple's libm each round differently in the last place).
 *
 * The float functions evaluate in double and round once: the error is
 * within 0.5 ulp plus about 2^-50 relative, so under 1 ulp, and the result
 * is the correctly rounded one for all but rare inputs (tests/unit/
 * test_cpu_math.c measures both against long double over dense sweeps).
 * The double functions (for the sampler) are within 2 ulp. Special values
 * follow C99 Annex F where it matters here: NaN in, NaN out; overflow to
 * inf, underflow to 0. The array forms give the same bits as the scalar
 * ones, element by element, whatever vector width the CPU runs them at.
 */
#ifndef LOOM_CPU_MATH_H
#define LOOM_CPU_MATH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- float */

float loom_cpu_expf(float x);
float loom_cpu_logf(float x);
/* log(1 + x), accurate for small x */
float loom_cpu_log1pf(float x);
float loom_cpu_tanhf(float x);
/* x^y for x > 0 (RoPE's theta^e); x == 0: 0 for y > 0, inf for y < 0, 1
 * for y == 0; x < 0 or NaN: NaN. */
float loom_cpu_powf(float x, float y);
/* The argument reduction is exact for |x| < 2^28 (RoPE angles up to
 * position 2^28 at frequency 1); beyond, the error grows with |x|. */
float loom_cpu_sinf(float x);
float loom_cpu_cosf(float x);

/* ---------------------------------------------------------------- double */

double loom_cpu_exp(double x);
double loom_cpu_log(double x);

/* ---------------------------------------------------------------- activations
 */

static inline float loom_cpu_sigmoid(float x)
{
    return 1.0f / (1.0f + loom_cpu_expf(-x));
}

/* x * sigmoid(x), as x / (1 + e^-x) */
static inline float loom_cpu_silu(float x)
{
    return x / (1.0f + loom_cpu_expf(-x));
}

/* log(1 + e^x), with torch's threshold: x itself above 20; e^x rounded to
 * float first, as torch's float32 softplus does. */
static inline float loom_cpu_softplus(float x)
{
    return x > 20.0f ? x : loom_cpu_log1pf(loom_cpu_expf(x));
}

/* ---------------------------------------------------------------- arrays */

/* The same bits as the scalar forms above, vectorised (out may alias x). */
void loom_cpu_expf_n(float *out, const float *x, int64_t n);
void loom_cpu_sigmoid_n(float *out, const float *x, int64_t n);
void loom_cpu_silu_n(float *out, const float *x, int64_t n);
/* a[i] = silu(a[i]) * b[i] (SwiGLU: a = gate, b = up) */
void loom_cpu_swiglu_n(float *a, const float *b, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_CPU_MATH_H */
