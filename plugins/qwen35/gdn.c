/* The gated delta rule for one value head and one token: the only place the
 * recurrent state of windows and one-row steps is updated, so the forward
 * and the commit replay (cache.c) change it with the very same operations
 * (prompt chunks take the chunkwise form, gdn_chunk.c). */
#include "qwen35.h"

/* One binary for every x86-64, the AVX2 clone where the CPU has it (as
 * cpu_ops.c's loops). Each element gets a rounded multiply and a rounded
 * add, never a fused one (C11 contracts nothing across statements, and
 * neither clone has FMA), so the bits are those of loom_cpu_scale and
 * loom_cpu_axpy, which this step was written with before. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) &&         \
    !defined(_WIN32)
#define Q35_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define Q35_MULTIVERSION
#endif

#if defined(__GNUC__) || defined(__clang__)
/* Eight lanes of plain float arithmetic (GCC's -O2 does not vectorise
 * these loops itself), moved in and out with memcpy. */
typedef float q35_v8 __attribute__((vector_size(32)));

#define Q35_LANES  8
#define Q35_INLINE __attribute__((always_inline)) static inline
#else
#define Q35_LANES  1
#define Q35_INLINE static inline
#endif

/* tmp += k_i (row decay), the row itself left as it is: the second pass
 * rounds row * decay again, to the same bits, instead of this pass storing
 * it (one pass over the state less to memory). */
Q35_INLINE void q35_decay_read(const float *row, float *tmp, float ki,
                               float decay, int64_t dv)
{
    int64_t j = 0;
#if Q35_LANES == 8
    for (; j + 8 <= dv; j += 8) {
        q35_v8 r, t;
        memcpy(&r, row + j, sizeof r);
        memcpy(&t, tmp + j, sizeof t);
        r = r * decay;
        t = t + ki * r;
        memcpy(tmp + j, &t, sizeof t);
    }
#endif
    for (; j < dv; j++) {
        float r = row[j] * decay;
        tmp[j] += ki * r;
    }
}

/* row = row decay + k_i delta; o += q_i row (o NULL: no output), one pass. */
Q35_INLINE void q35_write_out(float *row, const float *delta, float ki,
                              float decay, float *o, float qi, int64_t dv)
{
    int64_t j = 0;
#if Q35_LANES == 8
    for (; j + 8 <= dv; j += 8) {
        q35_v8 r, d;
        memcpy(&r, row + j, sizeof r);
        memcpy(&d, delta + j, sizeof d);
        r = r * decay;
        r = r + ki * d;
        memcpy(row + j, &r, sizeof r);
        if (o) {
            q35_v8 t;
            memcpy(&t, o + j, sizeof t);
            t = t + qi * r;
            memcpy(o + j, &t, sizeof t);
        }
    }
#endif
    for (; j < dv; j++) {
        float r = row[j] * decay;
        r = r + ki * delta[j];
        row[j] = r;
        if (o)
            o[j] += qi * r;
    }
}

Q35_MULTIVERSION
void q35_gdn_step(float *S, const float *q, const float *k, const float *v,
                  float decay, float beta, float *o, int64_t dk, int64_t dv,
                  float *tmp)
{
    /* tmp = (exp(g) S)^T k (the decayed state's reading of k) */
    memset(tmp, 0, (size_t)dv * sizeof(float));
    for (int64_t i = 0; i < dk; i++)
        q35_decay_read(S + i * dv, tmp, k[i], decay, dv);
    /* delta = (v - S^T k) * beta */
    for (int64_t j = 0; j < dv; j++)
        tmp[j] = (v[j] - tmp[j]) * beta;
    /* S = exp(g) S + k delta^T; o = S^T q over the rows as they are
     * updated */
    if (q)
        memset(o, 0, (size_t)dv * sizeof(float));
    for (int64_t i = 0; i < dk; i++)
        q35_write_out(S + i * dv, tmp, k[i], decay, q ? o : NULL,
                      q ? q[i] : 0.0f, dv);
}
