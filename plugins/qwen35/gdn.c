/* The gated delta rule for one value head and one token: the only place the
 * recurrent state is updated, so the forward and the commit replay (cache.c)
 * change it with the very same operations. */
#include "qwen35.h"

void q35_gdn_step(float *S, const float *q, const float *k, const float *v,
                  float decay, float beta, float *o, int64_t dk, int64_t dv,
                  float *tmp)
{
    /* S *= exp(g); tmp = S^T k (the state's current reading of k) */
    memset(tmp, 0, (size_t)dv * sizeof(float));
    for (int64_t i = 0; i < dk; i++) {
        float *row = S + i * dv;
        loom_cpu_scale(row, decay, dv);
        loom_cpu_axpy(tmp, k[i], row, dv);
    }
    /* delta = (v - S^T k) * beta */
    for (int64_t j = 0; j < dv; j++)
        tmp[j] = (v[j] - tmp[j]) * beta;
    /* S += k delta^T */
    for (int64_t i = 0; i < dk; i++)
        loom_cpu_axpy(S + i * dv, k[i], tmp, dv);
    if (!q)
        return;
    /* o = S^T q */
    memset(o, 0, (size_t)dv * sizeof(float));
    for (int64_t i = 0; i < dk; i++)
        loom_cpu_axpy(o, q[i], S + i * dv, dv);
}
