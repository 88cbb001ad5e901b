// The prompt-chunk attention of plugins/qwen35 on the GPU: q35_attn_mma<hd>
// (TF32 tensor cores, split operands) against q35_attn_chunk (float32 CUDA
// cores) and a float64 reference on the host (sampled rows), over a paged
// K/V pool with its pages shuffled and context before the chunk; then both
// timed on 9B's attention (16 query heads, 4 K/V heads, head_dim 256) for
// a chunk of 2,048 rows. A development tool, built by hand (add
// -DQ35_AM_K=16 for tiles of 16 keys, -DQ35_AM_W=2 for blocks of 2 warps):
//   nvcc -O3 -std=c++17 -arch=sm_90a -Iplugins/qwen35 -Iplugins/qwen35/cuda \
//        -o attn_bench tools/attn_bench.cu
#include "attention.cu"
#include "bench_cuda.cuh"
#include <cmath>
#include <vector>

struct Case {
    int hd, nh, nkv, ctx0, n;
};

static float rnd(uint32_t i, uint32_t seed)
{
    return (bench_mix(i * 2654435761u ^ seed) & 0xffff) / 65536.0f - 0.5f;
}

// the kernel, not the device function of the same name
typedef void (*chunk_fn)(const float *, int, float *, const q35_gpu_stream *,
                         const q35_gpu_row *, int, int, int, int, int);
static const void *scalar_fn = (const void *)(chunk_fn)q35_attn_chunk;

static const void *mma_fn(int hd)
{
    switch (hd) {
    case 16: return (const void *)q35_attn_mma16;
    case 32: return (const void *)q35_attn_mma32;
    case 64: return (const void *)q35_attn_mma64;
    case 128: return (const void *)q35_attn_mma128;
    default: return (const void *)q35_attn_mma256;
    }
}

// Runs case c: returns failures; times when reps > 0.
static int run(const Case &c, int reps, cudaStream_t s)
{
    int hd = c.hd, nh = c.nh, nkv = c.nkv, total = c.ctx0 + c.n;
    int ldq = 2 * nh * hd + 37 * 4, kvw = nkv * hd;
    int pages = (total + Q35_KV_PAGE - 1) / Q35_KV_PAGE;
    // q | gate per head, rows ldq apart; keys and values of every position,
    // K scaled like a normed, rotated k (|k| ~ sqrt(hd)) so that softmax is
    // far from uniform
    std::vector<float> q((size_t)c.n * ldq), kv((size_t)pages * 2 *
                                                Q35_KV_PAGE * kvw);
    for (size_t i = 0; i < q.size(); i++)
        q[i] = 4.0f * rnd((uint32_t)i, 7);
    std::vector<int32_t> pt(pages);
    for (int p = 0; p < pages; p++)
        pt[p] = (p * 7 + 3) % pages; // a permutation when gcd(7, pages) = 1
    if (pages % 7 == 0)
        for (int p = 0; p < pages; p++)
            pt[p] = pages - 1 - p;
    auto at = [&](int which, int pos) {
        return &kv[(((size_t)pt[pos / Q35_KV_PAGE] * 2 + which) * Q35_KV_PAGE +
                    pos % Q35_KV_PAGE) *
                   kvw];
    };
    for (int pos = 0; pos < total; pos++)
        for (int w = 0; w < 2; w++)
            for (int i = 0; i < kvw; i++)
                at(w, pos)[i] =
                    (w ? 2.0f : 4.0f) * rnd((uint32_t)(pos * kvw + i), 11 + w);
    std::vector<q35_gpu_row> rows(c.n);
    for (int r = 0; r < c.n; r++)
        rows[r] = {0, c.ctx0 + r, 0, -1};
    float *dq, *dkv, *o1, *o2;
    int32_t *dpt;
    q35_gpu_row *drows;
    q35_gpu_stream *dst;
    CK(cudaMalloc(&dq, q.size() * 4));
    CK(cudaMalloc(&dkv, kv.size() * 4));
    CK(cudaMalloc(&o1, (size_t)c.n * nh * hd * 4));
    CK(cudaMalloc(&o2, (size_t)c.n * nh * hd * 4));
    CK(cudaMalloc(&dpt, pages * 4));
    CK(cudaMalloc(&drows, c.n * sizeof(q35_gpu_row)));
    CK(cudaMalloc(&dst, sizeof(q35_gpu_stream)));
    CK(cudaMemcpy(dq, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dkv, kv.data(), kv.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dpt, pt.data(), pages * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(drows, rows.data(), c.n * sizeof(q35_gpu_row),
                  cudaMemcpyHostToDevice));
    q35_gpu_stream hs = {};
    hs.kv = (uint64_t)dkv;
    hs.ptab = (uint64_t)dpt;
    hs.first = 0;
    hs.count = c.n;
    hs.snap_row = -1;
    hs.n_attn = 1;
    hs.chunk = 2;
    CK(cudaMemcpy(dst, &hs, sizeof hs, cudaMemcpyHostToDevice));
    int si = 0, slot = 0;
    size_t sm1 = q35_attn_chunk_smem(hd);
    size_t sm2 = q35_attn_mma_smem(hd);
    const void *f2 = mma_fn(hd);
    CK(cudaFuncSetAttribute(scalar_fn,
                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)sm1));
    CK(cudaFuncSetAttribute(f2, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)sm2));
    void *a1[] = {&dq, &ldq, &o1, &dst, &drows, &si, &slot, &nh, &nkv, &hd};
    void *a2[] = {&dq, &ldq, &o2, &dst, &drows, &si, &slot, &nh, &nkv};
    dim3 g1((c.n + Q35_AC_Q - 1) / Q35_AC_Q, nh), g2((c.n + Q35_AM_Q - 1) / Q35_AM_Q, nh);
    auto go = [&](int which) {
        if (which == 0)
            bench_launch(scalar_fn, g1, dim3(128), sm1, a1, s);
        else
            bench_launch(f2, g2, dim3(32 * Q35_AM_W), sm2, a2, s);
    };
    CK(cudaMemset(o2, 0xff, (size_t)c.n * nh * hd * 4));
    go(0);
    go(1);
    CK(cudaStreamSynchronize(s));
    std::vector<float> h1((size_t)c.n * nh * hd), h2(h1.size());
    CK(cudaMemcpy(h1.data(), o1, h1.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h2.data(), o2, h2.size() * 4, cudaMemcpyDeviceToHost));
    double big = 0, d12 = 0, vmax = 0;
    for (int pos = 0; pos < total; pos++)
        for (int i = 0; i < kvw; i++)
            vmax = fmax(vmax, fabs(at(1, pos)[i]));
    for (size_t i = 0; i < h1.size(); i++) {
        big = fmax(big, fabs(h1[i]));
        d12 = fmax(d12, fabs((double)h1[i] - h2[i]));
        if (!std::isfinite(h2[i]))
            d12 = INFINITY;
    }
    // float64 on sampled rows: every head of rows 0, 1, n/2, n-1 and 7 more
    double d1 = 0, d2 = 0;
    int sample[] = {0, 1, c.n / 2, c.n - 1, c.n / 3, c.n / 5, c.n / 7,
                    (c.n * 5) / 6, c.n / 11, c.n - 2 > 0 ? c.n - 2 : 0, 63 % c.n};
    for (int r : sample)
        for (int h = 0; h < nh; h++) {
            int kvh = h / (nh / nkv), pos = c.ctx0 + r;
            const float *qr = &q[(size_t)r * ldq + (size_t)h * 2 * hd];
            std::vector<double> sc(pos + 1), acc(hd, 0.0);
            double mx = -1e300, sum = 0;
            for (int k = 0; k <= pos; k++) {
                const float *kr = at(0, k) + kvh * hd;
                double d = 0;
                for (int i = 0; i < hd; i++)
                    d += (double)qr[i] * kr[i];
                sc[k] = d / sqrt((double)hd);
                mx = fmax(mx, sc[k]);
            }
            for (int k = 0; k <= pos; k++) {
                double p = exp(sc[k] - mx);
                sum += p;
                const float *vr = at(1, k) + kvh * hd;
                for (int i = 0; i < hd; i++)
                    acc[i] += p * vr[i];
            }
            for (int i = 0; i < hd; i++) {
                double gt = qr[hd + i], ref = acc[i] / sum / (1.0 + exp(-gt));
                size_t oi = ((size_t)r * nh + h) * hd + i;
                d1 = fmax(d1, fabs(ref - h1[oi]));
                d2 = fmax(d2, fabs(ref - h2[oi]));
            }
        }
    // the mma form near float32's accuracy against float64: within 1e-5 of
    // the largest |v| (1 here). Split TF32 operands keep about 21 of
    // float32's 24 bits, and a score's error is that fraction of the sum of
    // |q_i k_i| (hundreds here), scaled; the scalar kernel's error and the
    // two kernels' difference are printed beside it
    int bad = !(d2 <= 1e-5 * vmax) || !std::isfinite(d12);
    printf("hd=%3d nh=%2d nkv=%d ctx0=%4d n=%4d: |o| %.3g, scalar vs f64 "
           "%.2e, mma vs f64 %.2e, mma vs scalar %.2e %s\n",
           hd, nh, nkv, c.ctx0, c.n, big, d1, d2, d12, bad ? "FAIL" : "ok");
    for (int which = 0; which < 2 && reps > 0; which++) {
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        go(which);
        cudaEventRecord(e0, s);
        for (int r = 0; r < reps; r++)
            go(which);
        cudaEventRecord(e1, s);
        CK(cudaEventSynchronize(e1));
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        printf("  %-16s %8.1f us a launch\n",
               which ? "q35_attn_mma" : "q35_attn_chunk", ms * 1e3 / reps);
    }
    cudaFree(dq);
    cudaFree(dkv);
    cudaFree(o1);
    cudaFree(o2);
    cudaFree(dpt);
    cudaFree(drows);
    cudaFree(dst);
    return bad;
}

int main()
{
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    Case cs[] = {{256, 16, 4, 0, 2048}, {256, 16, 4, 1536, 512}, {256, 16, 4, 37, 100}, {256, 8, 2, 0, 5},
                 {128, 8, 2, 19, 77},   {64, 6, 2, 0, 48},     {64, 6, 2, 50, 130},
                 {32, 4, 2, 3, 33},     {16, 4, 1, 0, 40},     {256, 8, 2, 600, 64}};
    int fails = 0;
    for (const Case &c : cs)
        fails += run(c, &c - cs < 2 ? 5 : 0, s);
    printf("correctness: %d failures\n", fails);
    return fails != 0;
}
