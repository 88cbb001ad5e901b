/* The Mamba-2 float32 building blocks declared in loom/cpu_ssm.h. */
#include <loom/cpu_ssm.h>

#include <math.h>

void loom_cpu_ssm_step(float *state, const float *x, const float *B,
                       const float *C, float dt, float A, float D, float *y,
                       int64_t P, int64_t N)
{
    float dA = expf(dt * A);
    for (int64_t p = 0; p < P; p++) {
        float *s = state + p * N;
        float xp = x[p];
        for (int64_t n = 0; n < N; n++)
            s[n] = s[n] * dA + (dt * B[n]) * xp;
        if (y) {
            /* four partial sums, as loom_cpu_dot: vectorises without
             * reassociation flags */
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
            int64_t n = 0;
            for (; n + 4 <= N; n += 4) {
                a0 += C[n] * s[n];
                a1 += C[n + 1] * s[n + 1];
                a2 += C[n + 2] * s[n + 2];
                a3 += C[n + 3] * s[n + 3];
            }
            for (; n < N; n++)
                a0 += C[n] * s[n];
            y[p] = ((a0 + a1) + (a2 + a3)) + D * xp;
        }
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
            float h = x[i] * (zi / (1.0f + expf(-zi)));
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
