/* The Mamba-2 float32 building blocks declared in loom/cpu_ssm.h. */
#include <loom/cpu_ssm.h>

#include <math.h>
#include <string.h>

#include <loom/cpu_ops.h>

/* As loom/cpu_ops.c's loops: one binary for every x86-64, the AVX2 clone
 * where the CPU has it, plain float lanes moved with memcpy. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) &&         \
    !defined(_WIN32)
#define SSM_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define SSM_MULTIVERSION
#endif
#if defined(__GNUC__) || defined(__clang__)
typedef float ssm_v4 __attribute__((vector_size(16)));
#define SSM_LANES 1
#endif

/* Each state row is updated and read by C in one pass: y's sum keeps
 * loom_cpu_dot's four partial sums (element i into sum i % 4, in order,
 * then (s0 + s1) + (s2 + s3)), and dt * B[n] is rounded once a token as it
 * was once a row, so the bits are those of the update followed by
 * loom_cpu_dot. */
SSM_MULTIVERSION
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
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
        int64_t n = 0;
#ifdef SSM_LANES
        if (N <= 256) {
            ssm_v4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
            for (; n + 4 <= N; n += 4) {
                ssm_v4 sv, bv, cv;
                memcpy(&sv, s + n, sizeof sv);
                memcpy(&bv, dtB + n, sizeof bv);
                memcpy(&cv, C + n, sizeof cv);
                sv = sv * dA + bv * xp;
                memcpy(s + n, &sv, sizeof sv);
                acc += cv * sv;
            }
            s0 = acc[0], s1 = acc[1], s2 = acc[2], s3 = acc[3];
        }
#endif
        for (; n < N; n++) {
            float b = n < nb ? dtB[n] : dt * B[n];
            s[n] = s[n] * dA + b * xp;
            float c = C[n] * s[n];
            /* the lanes' sums for whole groups of 4, the first for the
             * tail, as loom_cpu_dot */
            if (n < (N & ~(int64_t)3)) {
                int l = (int)(n & 3);
                if (l == 0)
                    s0 += c;
                else if (l == 1)
                    s1 += c;
                else if (l == 2)
                    s2 += c;
                else
                    s3 += c;
            } else {
                s0 += c;
            }
        }
        if (y)
            y[p] = ((s0 + s1) + (s2 + s3)) + D * xp;
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
