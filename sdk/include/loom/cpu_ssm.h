/* Float32 building blocks of Mamba-2 (selective state space) layers for CPU
 * reference paths: the recurrent scan step of one head, the same scan over
 * a prompt chunk's rows in chunked (SSD) form, and the gated group-wise
 * RMSNorm that follows it. Single-threaded; plugins split heads
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

/* The rows of one head that loom_cpu_ssm_chunk scans, row t's at
 * x + t ldx ([P]), B + t ldbc and C + t ldbc ([N], the head's group),
 * dt[t lddt] (softplus'd, dt_bias added) and y + t ldy ([P], written). */
typedef struct loom_ssm_rows {
    const float *x;
    const float *B, *C;
    const float *dt;
    float *y;
    int64_t ldx, ldbc, lddt, ldy;
    int64_t n; /* rows */
} loom_ssm_rows;

/* The most rows of one chunk, and the largest P and N, that
 * loom_cpu_ssm_chunk takes. */
#define LOOM_SSM_CHUNK_MAX     64
#define LOOM_SSM_CHUNK_DIM_MAX 256

/* Floats of work loom_cpu_ssm_chunk needs for a P x N head in chunks of L
 * rows: N P + L (2N + P + L) (53 KiB for P 64, N 128, L 16). */
int64_t loom_cpu_ssm_chunk_work(int64_t P, int64_t N, int64_t L);

/* The rows of one head (rows->n of them, in order) as rows->n calls of
 * loom_cpu_ssm_step would run them, worked in chunks of L rows in
 * Mamba-2's state-space-dual form: within a chunk, y = ((C B^T) ∘ decay)
 * (dt x) + decay_in C S_in + D x and S_out = decay_all S_in + sum_t
 * decay_after_t dt_t x_t B_t^T, the sums as matrix products. Its sums run
 * in another order than the step's, so it agrees with it within float32
 * rounding, not bit for bit: for prompt chunks only. work holds
 * loom_cpu_ssm_chunk_work(P, N, L) floats; y must not overlap the rows'
 * x, B, C or dt, nor work the state or rows. Returns LOOM_ERR_RANGE for L
 * outside [1, LOOM_SSM_CHUNK_MAX] or P or N outside [1,
 * LOOM_SSM_CHUNK_DIM_MAX], LOOM_ERR_INVALID for a NULL pointer; either way
 * before touching anything (the caller takes the row step instead). */
loom_status loom_cpu_ssm_chunk(float *state, const loom_ssm_rows *rows, float A,
                               float D, int64_t P, int64_t N, int64_t L,
                               float *work);

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
