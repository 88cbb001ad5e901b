/* Float32 building blocks of Mamba-2 (selective state space) layers for CPU
 * reference paths: the recurrent scan step of one head and the gated
 * group-wise RMSNorm that follows it. Single-threaded; plugins split heads
 * and rows over the host pool. Any Mamba-2 family (Nemotron-H, Falcon-H1,
 * Zamba2, Granite-4 hybrids) can use them. */
#ifndef LOOM_CPU_SSM_H
#define LOOM_CPU_SSM_H

#include <stdint.h>

#include <loom/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One token of one head of the Mamba-2 scan, in float32:
 *   S[p,n] = exp(dt*A) * S[p,n] + (dt*B[n]) * x[p]
 *   y[p]   = sum_n C[n] * S[p,n] + D * x[p]
 * state is [P, N] row-major; x and y [P]; B and C [N] (the head's B/C group).
 * dt is already softplus'd (and dt_bias added); A = -exp(A_log). y may be
 * NULL to only advance the state (replaying a log): the state's arithmetic
 * is the same either way, so a replay reproduces it bit for bit. */
void loom_cpu_ssm_step(float *state, const float *x, const float *B,
                       const float *C, float dt, float A, float D, float *y,
                       int64_t P, int64_t N);

/* Mamba-2's gated RMSNorm with the gate applied first (norm_before_gate =
 * False): h = x * silu(z); then each of the n / group groups of `group`
 * elements is scaled by 1 / sqrt(mean(h²) + eps); out = h * w.
 * out may alias x. */
void loom_cpu_rmsnorm_group_gated(float *out, const float *x, const float *z,
                                  const float *w, int64_t n, int64_t group,
                                  float eps);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_CPU_SSM_H */
