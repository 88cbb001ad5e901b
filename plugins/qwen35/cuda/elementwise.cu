// Row copies and elementwise steps: gathers (taps, the head's rows),
// Qwen3-Next's de-interleave of its fused projections, residual adds, and
// the MoE block's routing and weighted sums. Rounding: one float32 rounding
// per multiply or add, as the CPU path.
#include "common.cuh"

// dst[dmap[b]] = src[smap[b]] for each block b (rows of n floats).
extern "C" __global__ void q35_gather(const float *src, int lds,
                                      const int *smap, float *dst, int ldd,
                                      const int *dmap, int n)
{
    Q35_PDL_ENTER();
    int b = blockIdx.x;
    const float *s = src + (int64_t)smap[b] * lds;
    float *d = dst + (int64_t)dmap[b] * ldd;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        d[i] = s[i];
}

// y += x over n floats.
extern "C" __global__ void q35_add(float *y, const float *x, long long n)
{
    Q35_PDL_ENTER();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = __fadd_rn(y[i], x[i]);
}

// Qwen3-Next (spec 2.7): qkvz [T, Hk * (2dk + 2r dv)] and ba [T, Hk * 2r]
// grouped by key head, to qkv [T, conv_dim] = [Q all | K all | V all],
// z [T, vd], b, a [T, Hv]. One block per row.
extern "C" __global__ void q35_next_split(const float *qkvz, const float *ba,
                                          float *qkv, float *z, float *b,
                                          float *a, int Hk, int Hv, int dk,
                                          int dv)
{
    Q35_PDL_ENTER();
    int t = blockIdx.x;
    int r = Hv / Hk, kd = Hk * dk, vd = Hv * dv, cd = 2 * kd + vd;
    int gw = 2 * dk + 2 * r * dv;
    const float *src = qkvz + (int64_t)t * Hk * gw;
    float *dq = qkv + (int64_t)t * cd;
    for (int i = threadIdx.x; i < Hk * gw; i += blockDim.x) {
        int gi = i / gw, o = i % gw;
        float v = src[i];
        if (o < dk)
            dq[gi * dk + o] = v;
        else if (o < 2 * dk)
            dq[kd + gi * dk + o - dk] = v;
        else if (o < 2 * dk + r * dv)
            dq[2 * kd + gi * r * dv + o - 2 * dk] = v;
        else
            z[(int64_t)t * vd + gi * r * dv + o - 2 * dk - r * dv] = v;
    }
    const float *bs = ba + (int64_t)t * 2 * Hv;
    for (int i = threadIdx.x; i < 2 * Hv; i += blockDim.x) {
        int gi = i / (2 * r), o = i % (2 * r);
        if (o < r)
            b[(int64_t)t * Hv + gi * r + o] = bs[i];
        else
            a[(int64_t)t * Hv + gi * r + o - r] = bs[i];
    }
}

// MoE routing, one thread per row (spec 2.8): softmax over the E router
// logits in float32 (the sum in double, as the CPU path), the top K (ties to
// the lower id), renormalised when norm_topk; then sorted by expert id, the
// order in which a row sums its experts on the CPU path.
extern "C" __global__ void q35_moe_route(const float *logit, int *sel,
                                         float *wsel, int T, int E, int K,
                                         int norm_topk)
{
    Q35_PDL_ENTER();
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T)
        return;
    const float *p = logit + (int64_t)t * E;
    float mx = p[0];
    for (int e = 1; e < E; e++)
        mx = fmaxf(mx, p[e]);
    double sum = 0.0;
    for (int e = 0; e < E; e++)
        sum += (double)expf(p[e] - mx);
    float inv = (float)(1.0 / sum);
    int *id = sel + (int64_t)t * K;
    float *w = wsel + (int64_t)t * K;
    double wsum = 0.0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        float bp = 0.0f;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int j = 0; j < k; j++)
                taken |= id[j] == e;
            float pe = __fmul_rn(expf(p[e] - mx), inv);
            if (!taken && (best < 0 || pe > bp)) {
                best = e;
                bp = pe;
            }
        }
        id[k] = best;
        w[k] = bp;
        wsum += bp;
    }
    if (norm_topk)
        for (int k = 0; k < K; k++)
            w[k] = (float)(w[k] / wsum);
    for (int k = 1; k < K; k++) // insertion sort by id, weights alongside
        for (int j = k; j > 0 && id[j - 1] > id[j]; j--) {
            int ti = id[j];
            id[j] = id[j - 1];
            id[j - 1] = ti;
            float tw = w[j];
            w[j] = w[j - 1];
            w[j - 1] = tw;
        }
}

// y[t] += wsel[t * K + k] * x[t] (one selected expert's output), or with
// gate != NULL, y[t] += sigmoid(gate[t]) * x[t] (the shared expert).
// Block per row.
extern "C" __global__ void q35_moe_axpy(float *y, const float *x,
                                        const float *wsel, int k, int K,
                                        const float *gate, int H)
{
    Q35_PDL_ENTER();
    int t = blockIdx.x;
    float a = gate ? q35_sigmoid(gate[t]) : wsel[(int64_t)t * K + k];
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        int64_t at = (int64_t)t * H + i;
        y[at] = __fadd_rn(y[at], __fmul_rn(a, x[at]));
    }
}
