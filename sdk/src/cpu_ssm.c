/* The Mamba-2 float32 building blocks declared in loom/cpu_ssm.h. */
#include <loom/cpu_ssm.h>

#include <math.h>
#include <string.h>

#include <loom/cpu_ops.h>

#include "cpu_lanes.h"

/* Each state row is updated and read by C in one pass: y's sum keeps
 * loom_cpu_dot's four partial sums (element i into part i % 4, in order,
 * then (p0 + p1) + (p2 + p3)), and dt * B[n] is rounded once a token as it
 * was once a row, so the bits are those of the update followed by
 * loom_cpu_dot. */
LOOM_CPU_MULTIVERSION
void loom_cpu_ssm_step(float *state, const float *x, const float *B,
                       const float *C, float dt, float A, float D, float *y,
                       int64_t P, int64_t N)
{
    float dA = loom_cpu_expf(dt * A);
    float dtB[256];
    int64_t nb = N < 256 ? N : 256;
    for (int64_t n = 0; n < nb; n++)
        dtB[n] = dt * B[n];
    for (int64_t p = 0; p < P; p++) {
        float *s = state + p * N;
        float xp = x[p];
        /* loom_cpu_dot's sums: element n < N4 into part n % 4, the tail
         * into part 0 */
        float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        int64_t n = 0, N4 = N & ~(int64_t)3;
#ifdef LOOM_CPU_LANES
        if (N <= 256) {
            loom_v4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
            for (; n + 4 <= N; n += 4) {
                loom_v4 sv, bv, cv;
                memcpy(&sv, s + n, sizeof sv);
                memcpy(&bv, dtB + n, sizeof bv);
                memcpy(&cv, C + n, sizeof cv);
                sv = sv * dA + bv * xp;
                memcpy(s + n, &sv, sizeof sv);
                acc += cv * sv;
            }
            memcpy(part, &acc, sizeof part);
        }
#endif
        for (; n < N; n++) {
            float b = n < nb ? dtB[n] : dt * B[n];
            s[n] = s[n] * dA + b * xp;
            part[n < N4 ? n & 3 : 0] += C[n] * s[n];
        }
        if (y)
            y[p] = ((part[0] + part[1]) + (part[2] + part[3])) + D * xp;
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
