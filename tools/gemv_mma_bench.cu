// plugins/qwen35's tensor-core decode product (cuda/gemv_mma.cu) on the GPU:
// first its results against a float64 product on the host (normed rows,
// SwiGLU, row counts 1 to 40), and every row of a T-row launch bit for bit
// against a one-row launch of that row alone; then TB/s of weights per
// shape and row count (q35_split + q35_mma, 30 launches a shape in one CUDA
// graph with programmatic dependent launch, one row on q35_mma1r which
// splits its row itself), beside q35_gemvs for one row and q35_gemv8 for 8.
// The launches mirror gpu_forward.c's q35_lin_mma. NOSPLIT=1 leaves the
// split out of the timed graphs (what it costs in the chain), NORES=1 runs
// one row on q35_split + q35_mma4 instead, NOWG=1 keeps 4 and 8 rows of big
// products on mma.sync, R1=1 runs every product as a big one (two blocks
// per SM). A development tool, built by
// hand (it links the CUDA runtime; loom does not):
//   nvcc -O3 -std=c++17 -arch=sm_90a -Iplugins/qwen35 -Iplugins/qwen35/cuda \
//        -o gemv_mma_bench tools/gemv_mma_bench.cu
#include "gemv_mma.cu"
#include "gemv_stream.cu"
#include "linear.cu"
#include "bench_cuda.cuh"
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float f_of(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t hash(uint64_t i, uint32_t seed)
{
    return bench_mix((uint32_t)i * 2654435761u ^ seed ^
                     (uint32_t)(i >> 32) * 97u);
}
__global__ void fill(uint16_t *w, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = bench_mix((uint32_t)i * 2654435761u ^ seed);
        float f = ((h & 0xffff) / 65536.0f - 0.5f) * 0.05f;
        w[i] = (uint16_t)(__float_as_uint(f) >> 16);
    }
}

static int nsm, optin;
static int ns_of[2][Q35_MMA_TILES];
static int clusters[2][2][Q35_MMA_TILES][2];

static const void *mmar_fn[2] = {(const void *)q35_mma1r,
                                 (const void *)q35_mma1r_glu};
static const void *mma_fn[2][Q35_MMA_TILES] = {
    {(const void *)q35_mma4, (const void *)q35_mma8, (const void *)q35_mma16,
     (const void *)q35_mma32, (const void *)q35_mma4w, (const void *)q35_mma8w},
    {(const void *)q35_mma4_glu, (const void *)q35_mma8_glu,
     (const void *)q35_mma16_glu, (const void *)q35_mma32_glu,
     (const void *)q35_mma4w_glu, (const void *)q35_mma8w_glu}};

static bool timing;

// As gpu.c's q35_map_lin.
static q35_tmap map_of(const uint16_t *w, int rows, int cols)
{
    q35_tmap m;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)cols * 2};
    cuuint32_t box[2] = {64, Q35_MMA_BOX}, one[2] = {1, 1};
    CUresult r = bench_encoder()(
        (CUtensorMap *)&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)w, dims,
        strides, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        printf("cuTensorMapEncodeTiled: %d\n", (int)r);
        exit(1);
    }
    return m;
}

// Normed rows' sum-of-squares parts, written by q35_split (s.ssp's role).
static float *ssp;

// As gpu_forward.c's q35_lin_mma.
static void mma(const uint16_t *w, const uint16_t *w2, const float *x,
                uint16_t *xs, float *y, int rows, int cols, int T, bool glu,
                const float *nw, cudaStream_t st)
{
    int ldx = cols, ldy = rows, mode = glu ? 2 : 0;
    float eps = 1e-6f;
    q35_tmap wm = map_of(w, rows, cols),
             w2m = glu ? map_of(w2, rows, cols) : wm;
    int S = q35_mma_splits(cols), c = S - 1;
    long unit = glu ? 8 : 16, units = (rows + unit - 1) / unit;
    // R1=1: every product as those of Q35_MMA_ROWS2 rows or more (two blocks
    // per SM)
    int r = (long)rows * (glu ? 2 : 1) >= Q35_MMA_ROWS2 || getenv("R1");
    int run = q35_mma_run(cols), nsr = q35_mma1r_stages(run, r, optin);
    if (T == 1 && nsr >= 2 && !getenv("NORES")) {
        long C = clusters[r][glu][0][c];
        if (C > units)
            C = units;
        uint16_t *xo = NULL;
        const float *ssi = NULL, *nn = NULL;
        float *sso = NULL;
        void *a[] = {&wm, &w2m, &xs,  &y,   &ldy, &rows, &cols, &T,   &mode,
                     &nsr, &x,  &ldx, &nw,  &eps, &xo,   &ssi,  &nn,  &sso};
        bench_launch(mmar_fn[glu], dim3((unsigned)(C * S), 1), dim3(288),
                     q35_mma1r_smem(run, nsr), a, st, S);
        return;
    }
    float *sso = nw ? ssp : NULL;
    void *sa[] = {&x, &ldx, &xs, &cols, &T, &nw, &sso};
    // NOSPLIT=1: the product alone, on activations split before (what the
    // split costs in the chain)
    if (!(getenv("NOSPLIT") && timing))
        bench_launch((const void *)q35_split,
                     dim3((cols + Q35_SPLIT_COLS - 1) / Q35_SPLIT_COLS, T),
                     dim3(256), 0, sa, st, 0);
    int k = q35_mma_kind(T, r && !getenv("NOWG"));
    int tok = q35_mma_tok(k);
    long C = clusters[r][glu][k][c];
    if (C > units)
        C = units;
    int ns = ns_of[r][k];
    uint16_t *xo = NULL;
    const float *ssi = sso, *nn = NULL;
    float *none = NULL;
    void *a[] = {&wm, &w2m, &xs,  &y,  &ldy, &rows, &cols, &T,   &mode,
                 &ns, &x,   &ldx, &nw, &eps, &xo,   &ssi,  &nn,  &none};
    bench_launch(mma_fn[glu][k], dim3((unsigned)(C * S), (T + tok - 1) / tok),
                 dim3(288), q35_mma_smem(k, ns), a, st, S);
}

static const void *gs[2][4] = {
    {(const void *)q35_gemvs1_bf16, (const void *)q35_gemvs2_bf16,
     (const void *)q35_gemvs4_bf16, (const void *)q35_gemvs8_bf16},
    {(const void *)q35_gemvs1_glu_bf16, (const void *)q35_gemvs2_glu_bf16,
     (const void *)q35_gemvs4_glu_bf16, (const void *)q35_gemvs8_glu_bf16}};

// The kernels of before: q35_gemvs for one row, q35_gemv8 for more.
static void old(const uint16_t *w, const uint16_t *w2, const float *x, float *y,
                int rows, int cols, int T, bool glu, const float *nw,
                cudaStream_t st)
{
    int ldx = cols, ldy = rows, mode = glu ? 2 : 0;
    float eps = 1e-6f;
    int wpr = q35_wpr(rows, cols);
    if (T == 1) {
        int k = q35_wpr_kind(wpr);
        int nb = nsm * Q35_GEMVS_BPS;
        if (nb > rows)
            nb = rows;
        int nsg = q35_gemvs_stages(cols);
        void *a[] = {&w,    &w2,   &x,    &ldx, &y,   &ldy,
                     &rows, &cols, &mode, &nw,  &eps, &nsg};
        bench_launch(gs[glu][k], dim3(nb, 1), dim3(288),
                     nsg * Q35_GEMVS_STAGE + cols * 4, a, st, 0);
        return;
    }
    const int *sel = nullptr;
    int sel_stride = 0;
    long long estride = 0;
    int rpw = Q35_GEMV8_RPW / (glu ? 2 : 1);
    long warps = (long)(rows + rpw - 1) / rpw * wpr;
    void *a[] = {&w, &w2,   &x,   &ldx,        &y,       &ldy, &rows, &cols,
                 &T, &mode, &sel, &sel_stride, &estride, &wpr, &nw,   &eps};
    const void *f =
        glu ? (const void *)q35_gemv8_glu_bf16 : (const void *)q35_gemv8_bf16;
    bench_launch(f, dim3((warps + 7) / 8, (T + 7) / 8), dim3(256), 0, a, st, 0);
}

int main()
{
    CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                              0));
    bench_encoder(); // before any stream capture
    for (int k = 0; k < Q35_MMA_TILES; k++) {
        int tok = q35_mma_tok(k);
        for (int r = 0; r < 2; r++)
            ns_of[r][k] = q35_mma_ring_stages(k, r, optin);
        for (int u = 0; u < 2; u++) {
            CK(cudaFuncSetAttribute(mma_fn[u][k],
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)q35_mma_smem(k, ns_of[0][k])));
            for (int r = 0; r < 2; r++)
                for (int c = 0; c < 2; c++) {
                    cudaLaunchConfig_t lc = {};
                    lc.gridDim = dim3(1u + c);
                    lc.blockDim = dim3(288);
                    lc.dynamicSmemBytes = q35_mma_smem(k, ns_of[r][k]);
                    cudaLaunchAttribute at;
                    at.id = cudaLaunchAttributeClusterDimension;
                    at.val.clusterDim.x = 1u + c;
                    at.val.clusterDim.y = at.val.clusterDim.z = 1;
                    lc.attrs = &at;
                    lc.numAttrs = 1;
                    CK(cudaOccupancyMaxActiveClusters(&clusters[r][u][k][c],
                                                      mma_fn[u][k], &lc));
                }
        }
        printf("tile %2d rows: %d / %d stages; clusters of 1/2: %d %d / "
               "%d %d\n",
               tok, ns_of[0][k], ns_of[1][k], clusters[0][0][k][0],
               clusters[0][0][k][1], clusters[1][0][k][0],
               clusters[1][0][k][1]);
    }
    for (int u = 0; u < 2; u++)
        CK(cudaFuncSetAttribute(mmar_fn[u],
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                optin - 1024));
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++)
            CK(cudaFuncSetAttribute(gs[i][k],
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    Q35_GEMVS_SMEM));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int TMAX = 40;
    CK(cudaMalloc(&ssp, (size_t)TMAX * (65536 / 16 + 8) * 4));

    // correctness and bits, on shapes small enough for the host
    struct Small {
        int rows, cols;
        bool glu;
    } sm[] = {{1000, 1024, false},
              {333, 528, true},
              {5, 64, true},
              {40, 8192, false},
              {300, 4096, true},
              {129, 2064, false},
              {64, 96, false},
              {160, 224, true},
              // past Q35_MMA_ROWS2 weight rows: two blocks per SM, and
              // 32-row tiles in stages of 128 rows
              {8200, 256, false},
              {4100, 512, true}};
    int fails = 0;
    for (const Small &s : sm)
        for (int usenw = 0; usenw < 2; usenw++) {
            size_t n = (size_t)s.rows * s.cols;
            std::vector<uint16_t> hw(n), hw2(n);
            std::vector<float> hx((size_t)TMAX * s.cols), hn(s.cols);
            for (size_t i = 0; i < n; i++) {
                hw[i] =
                    bf16_of(((hash(i, 7) & 0xffff) / 65536.0f - 0.5f) * 0.1f);
                hw2[i] =
                    bf16_of(((hash(i, 9) & 0xffff) / 65536.0f - 0.5f) * 0.1f);
            }
            for (size_t i = 0; i < hx.size(); i++)
                hx[i] = ((hash(i, 11) & 0xffffff) / 16777216.0f - 0.5f) * 3.0f;
            for (int i = 0; i < s.cols; i++)
                hn[i] = 1.0f + (float)(i % 17) / 40.0f;
            uint16_t *w, *w2, *xs;
            float *x, *y, *y1, *nwd;
            CK(cudaMalloc(&w, n * 2));
            CK(cudaMalloc(&w2, n * 2));
            CK(cudaMalloc(&xs, (size_t)TMAX * (s.cols + 128) * 4));
            CK(cudaMalloc(&x, hx.size() * 4));
            CK(cudaMalloc(&nwd, s.cols * 4));
            CK(cudaMalloc(&y, (size_t)TMAX * s.rows * 4));
            CK(cudaMalloc(&y1, (size_t)s.rows * 4));
            CK(cudaMemcpy(w, hw.data(), n * 2, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(w2, hw2.data(), n * 2, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(nwd, hn.data(), s.cols * 4, cudaMemcpyHostToDevice));
            const float *nw = usenw ? nwd : nullptr;
            // float64 reference for every row
            std::vector<double> ref((size_t)TMAX * s.rows);
            double scale = 0;
            for (int t = 0; t < TMAX; t++) {
                const float *xr = &hx[(size_t)t * s.cols];
                double r = 1.0;
                if (nw) {
                    double ss = 0;
                    for (int i = 0; i < s.cols; i++)
                        ss += (double)xr[i] * xr[i];
                    r = 1.0 / sqrt(ss / s.cols + 1e-6);
                }
                for (int o = 0; o < s.rows; o++) {
                    double a = 0, b = 0;
                    for (int i = 0; i < s.cols; i++) {
                        double xv = xr[i] * r * (nw ? hn[i] : 1.0);
                        a += f_of(hw[(size_t)o * s.cols + i]) * xv;
                        b += f_of(hw2[(size_t)o * s.cols + i]) * xv;
                    }
                    double v = s.glu ? a / (1.0 + exp(-a)) * b : a;
                    ref[(size_t)t * s.rows + o] = v;
                    scale = fmax(scale, fabs(v));
                }
            }
            int Ts[] = {1, 3, 4, 5, 8, 9, 16, 17, 32, 40};
            for (int T : Ts) {
                CK(cudaMemset(y, 0xff, (size_t)TMAX * s.rows * 4));
                mma(w, w2, x, xs, y, s.rows, s.cols, T, s.glu, nw, st);
                CK(cudaStreamSynchronize(st));
                CK(cudaGetLastError());
                std::vector<float> hy((size_t)T * s.rows);
                CK(cudaMemcpy(hy.data(), y, hy.size() * 4,
                              cudaMemcpyDeviceToHost));
                double err = 0;
                for (size_t i = 0; i < hy.size(); i++)
                    err = fmax(err, fabs(hy[i] - ref[i]) / scale);
                // each row alone
                int diff = 0;
                for (int t = 0; t < T; t++) {
                    mma(w, w2, x + (size_t)t * s.cols, xs, y1, s.rows, s.cols,
                        1, s.glu, nw, st);
                    CK(cudaStreamSynchronize(st));
                    std::vector<float> h1(s.rows);
                    CK(cudaMemcpy(h1.data(), y1, s.rows * 4,
                                  cudaMemcpyDeviceToHost));
                    diff += memcmp(h1.data(), &hy[(size_t)t * s.rows],
                                   s.rows * 4) != 0;
                }
                // the halves carry x to about 2^-17, and the MMA accumulates in
                // float32
                bool ok = err < 1e-4 && diff == 0;
                fails += !ok;
                if (!ok || T == 40)
                    printf("%s %dx%d%s nw=%d T=%d: max err %.3g of %.3g, rows "
                           "differing from one-row launches: %d\n",
                           ok ? "ok  " : "FAIL", s.rows, s.cols,
                           s.glu ? " glu" : "", usenw, T, err, scale, diff);
            }
            cudaFree(w);
            cudaFree(w2);
            cudaFree(xs);
            cudaFree(x);
            cudaFree(nwd);
            cudaFree(y);
            cudaFree(y1);
        }
    printf("correctness: %d failures\n", fails);

    // speed
    timing = true;
    size_t WN = (size_t)3 << 30;
    uint16_t *W, *XS;
    float *X, *Y, *NW;
    CK(cudaMalloc(&W, WN * 2));
    fill<<<4096, 256>>>(W, WN, 1234);
    CK(cudaMalloc(&X, 65536 * 4 * TMAX));
    CK(cudaMalloc(&XS, (65536 + 128) * 4 * TMAX));
    CK(cudaMalloc(&Y, (size_t)300000 * 4 * TMAX));
    CK(cudaMalloc(&NW, 65536 * 4));
    {
        std::vector<float> h(65536 * TMAX);
        for (size_t i = 0; i < h.size(); i++)
            h[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        CK(cudaMemcpy(X, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
        std::vector<float> g(65536, 1.0f);
        CK(cudaMemcpy(NW, g.data(), g.size() * 4, cudaMemcpyHostToDevice));
    }
    struct Shape {
        const char *name;
        int rows, cols;
        bool glu;
    } sh[] = {{"9b in", 12352, 4096, false},   {"9b out", 4096, 4096, false},
              {"9b glu", 12288, 4096, true},   {"9b down", 4096, 12288, false},
              {"9b attn", 10240, 4096, false}, {"9b lm", 248320, 4096, false},
              {"2b in", 8224, 2048, false},    {"2b out", 2048, 2048, false},
              {"2b glu", 6144, 2048, true},    {"2b down", 2048, 6144, false},
              {"2b lm", 248320, 2048, false}};
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int R = 30;
    for (const Shape &s : sh) {
        size_t n = (size_t)s.rows * s.cols * (s.glu ? 2 : 1);
        double bytes = (double)n * 2;
        int Ts[] = {1, 4, 8, 16, 32};
        printf("%-8s", s.name);
        for (int kind = 0; kind < 2; kind++)
            for (int T : Ts) {
                if (kind == 1 && (T > 8 || T == 4))
                    continue;
                cudaGraph_t gr;
                cudaGraphExec_t ge;
                size_t off = 0;
                CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
                for (int r = 0; r < R; r++) {
                    if (off + n > WN)
                        off = 0;
                    const uint16_t *w = W + off;
                    const uint16_t *w2 = s.glu ? w + n / 2 : nullptr;
                    off += (n + 127) / 128 * 128;
                    if (kind == 0)
                        mma(w, w2, X, XS, Y, s.rows, s.cols, T, s.glu, NW, st);
                    else
                        old(w, w2, X, Y, s.rows, s.cols, T, s.glu, NW, st);
                }
                CK(cudaStreamEndCapture(st, &gr));
                CK(cudaGraphInstantiate(&ge, gr, 0));
                CK(cudaGraphLaunch(ge, st));
                CK(cudaEventRecord(e0, st));
                CK(cudaGraphLaunch(ge, st));
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                double us = ms * 1000.0 / R;
                printf("  %s T=%-2d %6.1f us %5.2f TB/s", kind ? "old" : "mma",
                       T, us, bytes / (us * 1e-6) / 1e12);
                CK(cudaGraphExecDestroy(ge));
                CK(cudaGraphDestroy(gr));
            }
        printf("\n");
    }
    return fails ? 1 : 0;
}
