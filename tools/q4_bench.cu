// The affine-4 decode products of plugins/qwen35 on the GPU: q35_q4s (one
// row through shared memory), q35_q4_1 / q35_q4_8 (the register form) and
// q35_q4m (tensor cores) checked against a float64 product (normed rows,
// SwiGLU, residual add), q35_q4s's rows bit for bit against q35_q4_8's and
// q35_q4_1's, and q35_q4m's over 8 rows against its own one row at a time;
// then TB/s of words and pairs per shape for q35_q4s, q35_q4_1 and q35_q4m
// (30 launches a shape in
// one CUDA graph with programmatic dependent launch; the input products
// normed, as in the forward). A development tool,
// built by hand (it links the CUDA runtime; loom does not):
//   nvcc -O3 -std=c++17 -arch=sm_90a -Iplugins/qwen35 -Iplugins/qwen35/cuda \
//        -o q4_bench tools/q4_bench.cu
#include "gemv_q4_mma.cu"
#include "gemv_q4_stream.cu"
#include "linear.cu"
#include "bench_cuda.cuh"
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static uint32_t hash(uint64_t i)
{
    return bench_mix((uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 40503u);
}
__global__ void fill_words(uint32_t *q, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        q[i] = bench_mix((uint32_t)i * 2654435761u ^ seed);
    }
}
__global__ void fill_pairs(float *p, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2246822519u;
        h ^= h >> 15;
        float s = 0.001f + (float)(h & 1023) / 1024.0f * 0.01f;
        p[2 * i] = s;
        p[2 * i + 1] = -8.0f * s + (float)((h >> 10) & 255) / 256.0f * 0.01f;
    }
}

static int nsm;

// As gpu.c's q35_map_q4: the words' map (is_pairs 0) or the pairs'.
static q35_tmap map_of(const void *base, int rows, int cols, int gsz,
                       bool is_pairs)
{
    q35_tmap m;
    cuuint64_t d[2] = {(cuuint64_t)(is_pairs ? q35_q4_gp(cols, gsz) : cols / 8),
                       (cuuint64_t)rows};
    cuuint64_t st[1] = {is_pairs ? d[0] * 8 : (cuuint64_t)cols / 2};
    cuuint32_t box[2] = {is_pairs ? (cuuint32_t)(1024 / gsz) : 128u,
                         Q35_Q4S_BOX},
               one[2] = {1, 1};
    CUresult r = bench_encoder()(
        (CUtensorMap *)&m,
        is_pairs ? CU_TENSOR_MAP_DATA_TYPE_UINT64
                 : CU_TENSOR_MAP_DATA_TYPE_UINT32,
        2, (void *)base, d, st, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        printf("cuTensorMapEncodeTiled: %d\n", (int)r);
        exit(1);
    }
    return m;
}

// As gpu.c's q35_map_q4m: the words in boxes of 32 by 16 rows under the
// 128-byte swizzle, or the pairs as 32-bit elements in boxes of a chunk's
// pairs and 4 more.
static q35_tmap map_q4m(const void *base, int rows, int cols, int gsz,
                        bool is_pairs)
{
    q35_tmap m;
    cuuint64_t d[2] = {
        (cuuint64_t)(is_pairs ? 2 * q35_q4_gp(cols, gsz) : cols / 8),
        (cuuint64_t)rows};
    cuuint64_t st[1] = {is_pairs ? d[0] * 4 : (cuuint64_t)cols / 2};
    cuuint32_t box[2] = {is_pairs ? (cuuint32_t)(2 * 1024 / gsz + 4) : 32u,
                         16u},
               one[2] = {1, 1};
    CUresult r = bench_encoder()(
        (CUtensorMap *)&m, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, (void *)base, d,
        st, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
        is_pairs ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        printf("cuTensorMapEncodeTiled: %d\n", (int)r);
        exit(1);
    }
    return m;
}

struct Shape {
    const char *name;
    int rows, cols, gsz;
    bool glu;
};
static const void *q4s_fn[2][4] = {
    {(const void *)q35_q4s1, (const void *)q35_q4s2, (const void *)q35_q4s4,
     (const void *)q35_q4s8},
    {(const void *)q35_q4s1_glu, (const void *)q35_q4s2_glu,
     (const void *)q35_q4s4_glu, (const void *)q35_q4s8_glu}};
static const void *q4_fn[2][2] = {
    {(const void *)q35_q4_1, (const void *)q35_q4_1_glu},
    {(const void *)q35_q4_8, (const void *)q35_q4_8_glu}};

static const void *q4m_fn[2] = {(const void *)q35_q4m,
                                (const void *)q35_q4m_glu};

// kind 0: q35_q4s on row t; 1: q35_q4_1 on row t; 2: q35_q4_8 on rows
// 0..T-1; 3: q35_q4m on rows 0..T-1
static bool run(int kind, const Shape &s, const uint32_t *q, const float *p,
                const uint32_t *q2, const float *p2, const float *x, float *y,
                int T, int mode, const float *nw, cudaStream_t st)
{
    int rows = s.rows, cols = s.cols, gsz = s.gsz, ldx = cols, ldy = rows;
    int wpr = q35_q4_wpr(rows, cols);
    float eps = 1e-6f;
    if (kind == 3) {
        int tb = q35_q4m_rows(cols, gsz, T);
        if (tb < 1)
            return false;
        int ns = q35_q4m_stages(cols, gsz, tb);
        int nb = nsm * Q35_GEMVS_BPS, units = (rows + 15) / 16;
        if (nb > units)
            nb = units;
        q35_tmap qm = map_q4m(q, rows, cols, gsz, false),
                 pm = map_q4m(p, rows, cols, gsz, true);
        q35_tmap qm2 = q2 ? map_q4m(q2, rows, cols, gsz, false) : qm,
                 pm2 = p2 ? map_q4m(p2, rows, cols, gsz, true) : pm;
        void *a[] = {&qm,   &pm, &qm2, &pm2,  &x,  &ldx, &y,  &ldy, &rows,
                     &cols, &T,  &gsz, &mode, &nw, &eps, &ns, &tb};
        bench_launch(q4m_fn[s.glu], dim3(nb, (T + tb - 1) / tb), dim3(288),
                     q35_q4m_smem(cols, gsz, tb, ns), a, st);
        return true;
    }
    if (kind == 0) {
        int ns = q35_q4s_stages(cols, gsz);
        if (ns < 2)
            return false;
        int k = q35_wpr_kind(wpr);
        int nb = nsm * Q35_GEMVS_BPS,
            boxes = (rows + Q35_Q4S_BOX - 1) / Q35_Q4S_BOX;
        if (nb > boxes)
            nb = boxes;
        q35_tmap qm = map_of(q, rows, cols, gsz, false),
                 pm = map_of(p, rows, cols, gsz, true);
        q35_tmap qm2 = q2 ? map_of(q2, rows, cols, gsz, false) : qm,
                 pm2 = p2 ? map_of(p2, rows, cols, gsz, true) : pm;
        q35_conv_epi cv = {};
        void *a[] = {&qm,   &pm,  &qm2,  &pm2, &x,   &y,  &rows,
                     &cols, &gsz, &mode, &nw,  &eps, &ns, &cv};
        bench_launch(q4s_fn[s.glu][k], dim3(nb), dim3(288),
                     q35_q4s_smem(cols, gsz, ns), a, st);
        return true;
    }
    int many = kind == 2, nt = many ? 8 : 1, rpw = s.glu ? 2 : 4;
    long warps = (long)(rows + rpw - 1) / rpw * wpr;
    void *a[] = {&q,    &p,    &q2, &p2,   &x,   &ldx, &y,  &ldy,
                 &rows, &cols, &T,  &mode, &wpr, &gsz, &nw, &eps};
    bench_launch(q4_fn[many][s.glu], dim3((warps + 7) / 8, (T + nt - 1) / nt),
                 dim3(256), 0, a, st);
    return true;
}

int main()
{
    CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
    bench_encoder(); // before any stream capture
    for (int u = 0; u < 2; u++)
        for (int k = 0; k < 4; k++)
            CK(cudaFuncSetAttribute(q4s_fn[u][k],
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    Q35_GEMVS_SMEM));
    for (int u = 0; u < 2; u++)
        CK(cudaFuncSetAttribute(q4m_fn[u],
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                Q35_GEMVS_SMEM));
    size_t WN = (size_t)1 << 29, PN = (size_t)1 << 27; // 2 GiB, 1 GiB
    uint32_t *Q;
    float *P, *X, *Y, *Y2, *NW;
    CK(cudaMalloc(&Q, WN * 4));
    CK(cudaMalloc(&P, PN * 8));
    fill_words<<<4096, 256>>>(Q, WN, 1234);
    fill_pairs<<<4096, 256>>>(P, PN);
    const int TX = 8, CX = 20000, RY = 260000;
    CK(cudaMalloc(&X, (size_t)TX * CX * 4));
    CK(cudaMalloc(&Y, (size_t)TX * RY * 4));
    CK(cudaMalloc(&Y2, (size_t)TX * RY * 4));
    CK(cudaMalloc(&NW, CX * 4));
    std::vector<float> hx((size_t)TX * CX), hg(CX);
    for (size_t i = 0; i < hx.size(); i++)
        hx[i] = (float)(hash(i + 77) % 2001) / 1000.0f - 1.0f;
    for (int i = 0; i < CX; i++)
        hg[i] = 0.5f + (float)(hash(i + 5) % 100) / 100.0f;
    CK(cudaMemcpy(X, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(NW, hg.data(), hg.size() * 4, cudaMemcpyHostToDevice));
    Shape sh[] = {{"9b in", 12352, 4096, 64, false},
                  {"9b out", 4096, 4096, 64, false},
                  {"9b glu", 12288, 4096, 64, true},
                  {"9b down", 4096, 12288, 64, false},
                  {"9b attn", 10240, 4096, 64, false},
                  {"9b lm", 248320, 4096, 64, false},
                  {"2b in", 8224, 2048, 64, false},
                  {"2b out", 2048, 2048, 64, false},
                  {"2b glu", 6144, 2048, 64, true},
                  {"2b down", 2048, 6144, 64, false},
                  {"2b lm", 248320, 2048, 64, false},
                  {"g32", 1000, 1024, 32, false},
                  {"oddg", 333, 2080, 32, true},
                  {"g128", 300, 4096, 128, false},
                  {"tiny", 5, 64, 64, true},
                  {"wide", 40, 16384, 64, false},
                  {"wide2", 24, 12320, 32, true},
                  {"g96", 64, 4992, 96, false},
                  {"g512", 77, 3072, 512, false},
                  {"part", 1003, 1056, 32, true},
                  {"rows13", 13, 2080, 32, false}};
    int nshape = sizeof sh / sizeof sh[0], fails = 0;
    CK(cudaDeviceSynchronize());
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int T = 8;
    // TIME=1: the timings alone (for a profiler)
    bool check = !getenv("TIME");
    for (int si = 0; check && si < nshape; si++)
        for (int usenw = 0; usenw < 2; usenw++) {
            const Shape &s = sh[si];
            int gp = q35_q4_gp(s.cols, s.gsz);
            const uint32_t *q = Q, *q2 = Q + (size_t)s.rows * s.cols / 8;
            const float *p = P, *p2 = P + (size_t)s.rows * gp * 2;
            if (!s.glu)
                q2 = nullptr, p2 = nullptr;
            const float *nw = usenw ? NW : nullptr;
            int mode = s.glu ? 2 : 0;
            size_t ny = (size_t)T * s.rows;
            std::vector<float> a(ny), b(ny), c(ny);
            // the register form over T rows, then one row at a time
            run(2, s, q, p, q2, p2, X, Y, T, mode, nw, st);
            CK(cudaMemcpyAsync(a.data(), Y, ny * 4, cudaMemcpyDeviceToHost,
                               st));
            for (int t = 0; t < T; t++)
                run(1, s, q, p, q2, p2, X + (size_t)t * s.cols,
                    Y + (size_t)t * s.rows, 1, mode, nw, st);
            CK(cudaMemcpyAsync(b.data(), Y, ny * 4, cudaMemcpyDeviceToHost,
                               st));
            bool has_s = true;
            for (int t = 0; t < T && has_s; t++)
                has_s = run(0, s, q, p, q2, p2, X + (size_t)t * s.cols,
                            Y + (size_t)t * s.rows, 1, mode, nw, st);
            if (has_s)
                CK(cudaMemcpyAsync(c.data(), Y, ny * 4, cudaMemcpyDeviceToHost,
                                   st));
            // q35_q4m over T rows, then one row at a time
            std::vector<float> m(ny), m1(ny);
            bool has_m = run(3, s, q, p, q2, p2, X, Y, T, mode, nw, st);
            if (has_m) {
                CK(cudaMemcpyAsync(m.data(), Y, ny * 4, cudaMemcpyDeviceToHost,
                                   st));
                for (int t = 0; t < T; t++)
                    run(3, s, q, p, q2, p2, X + (size_t)t * s.cols,
                        Y + (size_t)t * s.rows, 1, mode, nw, st);
                CK(cudaMemcpyAsync(m1.data(), Y, ny * 4, cudaMemcpyDeviceToHost,
                                   st));
            }
            CK(cudaStreamSynchronize(st));
            CK(cudaGetLastError());
            int diff1 = 0, diffs = 0, diffm = 0;
            for (size_t i = 0; i < ny; i++) {
                diff1 += memcmp(&a[i], &b[i], 4) != 0;
                diffs += has_s && memcmp(&a[i], &c[i], 4) != 0;
                diffm += has_m && memcmp(&m[i], &m1[i], 4) != 0;
            }
            // float64 reference on rows 0 and T-1, a sample of output rows
            size_t nq = (size_t)s.rows * s.cols / 8 * (s.glu ? 2 : 1);
            std::vector<uint32_t> hq(nq);
            std::vector<float> hp((size_t)s.rows * gp * 2 * (s.glu ? 2 : 1));
            CK(cudaMemcpy(hq.data(), Q, nq * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hp.data(), P, hp.size() * 4, cudaMemcpyDeviceToHost));
            double err = 0, big = 0, errm = 0;
            for (int t : {0, T - 1}) {
                const float *xr = hx.data() + (size_t)t * s.cols;
                std::vector<double> xn(s.cols);
                double ss = 0;
                for (int i = 0; i < s.cols; i++)
                    ss += (double)xr[i] * xr[i];
                double r = 1.0 / std::sqrt(ss / s.cols + 1e-6);
                for (int i = 0; i < s.cols; i++)
                    xn[i] = usenw ? xr[i] * r * hg[i] : xr[i];
                for (int row = 0; row<s.rows; row += s.rows> 4000 ? 97 : 1) {
                    double v[2] = {0, 0};
                    for (int h = 0; h < (s.glu ? 2 : 1); h++) {
                        const uint32_t *qr = hq.data() +
                                             (size_t)h * s.rows * s.cols / 8 +
                                             (size_t)row * s.cols / 8;
                        const float *pr = hp.data() +
                                          (size_t)h * s.rows * gp * 2 +
                                          (size_t)row * gp * 2;
                        for (int i = 0; i < s.cols; i++) {
                            int g = i / s.gsz;
                            double w = (double)pr[2 * g] *
                                           ((qr[i / 8] >> (4 * (i % 8))) & 15) +
                                       pr[2 * g + 1];
                            v[h] += w * xn[i];
                        }
                    }
                    double ref =
                        s.glu ? v[0] / (1 + std::exp(-v[0])) * v[1] : v[0];
                    double got = a[(size_t)t * s.rows + row];
                    err = std::fmax(err, std::fabs(got - ref));
                    if (has_m)
                        errm = std::fmax(
                            errm, std::fabs(m[(size_t)t * s.rows + row] - ref));
                    big = std::fmax(big, std::fabs(ref));
                }
            }
            double rel = err / (big > 0 ? big : 1);
            double relm = errm / (big > 0 ? big : 1);
            // a residual add on top of the one-row result
            int addfail = 0;
            if (has_s && !s.glu) {
                std::vector<float> d(s.rows), e(s.rows);
                for (int i = 0; i < s.rows; i++)
                    d[i] = (float)(hash(i + 999) % 1000) / 500.0f;
                // on the kernels' stream (a non-blocking one)
                CK(cudaMemcpyAsync(Y2, d.data(), s.rows * 4,
                                   cudaMemcpyHostToDevice, st));
                run(0, s, q, p, q2, p2, X, Y2, 1, 1, nw, st);
                CK(cudaMemcpyAsync(e.data(), Y2, s.rows * 4,
                                   cudaMemcpyDeviceToHost, st));
                CK(cudaStreamSynchronize(st));
                for (int i = 0; i < s.rows; i++) {
                    float want = d[i] + c[i];
                    addfail += memcmp(&want, &e[i], 4) != 0;
                }
                if (has_m) {
                    CK(cudaMemcpyAsync(Y2, d.data(), s.rows * 4,
                                       cudaMemcpyHostToDevice, st));
                    run(3, s, q, p, q2, p2, X, Y2, 1, 1, nw, st);
                    CK(cudaMemcpyAsync(e.data(), Y2, s.rows * 4,
                                       cudaMemcpyDeviceToHost, st));
                    CK(cudaStreamSynchronize(st));
                    for (int i = 0; i < s.rows; i++) {
                        float want = d[i] + m1[i];
                        addfail += memcmp(&want, &e[i], 4) != 0;
                    }
                }
            }
            // q35_q4m carries x as BF16 halves (2^-17 relative each), the
            // others as float32: 3e-5 for it
            bool bad =
                diff1 || diffs || diffm || addfail || rel > 1e-5 || relm > 3e-5;
            fails += bad;
            printf("%-8s nw=%d wpr=%d stages=%d: vs float64 %.2e (q4m "
                   "%.2e), q4_1 != q4_8 %d, q4s != q4_8 %d%s, q4m 8 != 1 "
                   "%d%s, add %d%s\n",
                   s.name, usenw, q35_q4_wpr(s.rows, s.cols),
                   q35_q4s_stages(s.cols, s.gsz), rel, relm, diff1, diffs,
                   has_s ? "" : " (no q4s)", diffm, has_m ? "" : " (no q4m)",
                   addfail, bad ? "  FAIL" : "");
        }
    printf("correctness: %d failures\n", fails);
    // speed: 30 launches on distinct weights, one graph
    for (int si = 0; si < 11; si++)
        for (int kind : {0, 1, 3}) {
            const Shape &s = sh[si];
            int gp = q35_q4_gp(s.cols, s.gsz);
            size_t nq = (size_t)s.rows * s.cols / 8 * (s.glu ? 2 : 1);
            size_t np = (size_t)s.rows * gp * (s.glu ? 2 : 1);
            int reps = 30;
            size_t qo = 0, po = 0;
            cudaGraph_t gr;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            for (int r = 0; r < reps; r++) {
                if (qo + nq > WN || po + np > PN)
                    qo = po = 0;
                const uint32_t *q = Q + qo,
                               *q2 = s.glu ? Q + qo + nq / 2 : nullptr;
                const float *p = P + 2 * po,
                            *p2 = s.glu ? P + 2 * (po + np / 2) : nullptr;
                // the input products are normed in the forward, the others not
                bool normed = strstr(s.name, "in") || strstr(s.name, "glu") ||
                              strstr(s.name, "attn");
                run(kind, s, q, p, q2, p2, X, Y, 1, s.glu ? 2 : 0,
                    normed ? NW : nullptr, st);
                qo += (nq + 63) / 64 * 64;
                po += (np + 63) / 64 * 64;
            }
            CK(cudaStreamEndCapture(st, &gr));
            cudaGraphExec_t ge;
            CK(cudaGraphInstantiate(&ge, gr, 0));
            CK(cudaGraphLaunch(ge, st));
            CK(cudaStreamSynchronize(st));
            cudaEvent_t e0, e1;
            CK(cudaEventCreate(&e0));
            CK(cudaEventCreate(&e1));
            CK(cudaEventRecord(e0, st));
            for (int i = 0; i < 5; i++)
                CK(cudaGraphLaunch(ge, st));
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            double us = ms * 1000.0 / (5 * reps);
            double bytes = nq * 4.0 + np * 8.0;
            printf("%-8s %-8s %8.1f us  %.2f TB/s\n", s.name,
                   kind == 3 ? "q4m"
                   : kind    ? "q4_1"
                             : "q4s",
                   us, bytes / us / 1e6);
            CK(cudaGraphExecDestroy(ge));
            CK(cudaGraphDestroy(gr));
        }
    return fails ? 1 : 0;
}
