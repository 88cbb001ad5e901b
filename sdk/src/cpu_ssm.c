/* The Mamba-2 float32 building blocks declared in loom/cpu_ssm.h. */
#include <loom/cpu_ssm.h>

#include <math.h>

#include <loom/cpu_ops.h>

void loom_cpu_ssm_step(float *state, const float *x, const float *B,
                       const float *C, float dt, float A, float D, float *y,
                       int64_t P, int64_t N)
{
    float dA = loom_cpu_expf(dt * A);
    for (int64_t p = 0; p < P; p++) {
        float *s = state + p * N;
        float xp = x[p];
        for (int64_t n = 0; n < N; n++)
            s[n] = s[n] * dA + (dt * B[n]) * xp;
        if (y)
            y[p] = loom_cpu_dot(C, s, N) + D * xp;
    }
}

void loom_cpu_rmsnorm_group_gated(float *out, const float *x, const float *z,
                                  const float *w, int64_t n, int64_t group,
                                  float eps)
{
    for (int64_t g0 = 0; g0 < n; g0 += group) {
        double ss = 0.0;
        for (int64_t i = g0; i < g0 + group; i++) {
            float zi = z[i];
            float h = x[i] * loom_cpu_silu(zi);
            out[i] = h;
            ss += (double)h * h;
        }
        /* mean in float32 as torch does, the rest in double once */
        float r =
            (float)(1.0 / sqrt((double)(float)(ss / (double)group) + eps));
        for (int64_t i = g0; i < g0 + group; i++)
            out[i] = w[i] * (out[i] * r);
    }
}
