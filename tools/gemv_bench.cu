// The one-row product kernels of plugins/qwen35 side by side on the GPU:
// q35_gemv1 against q35_gemvs (GB/s of weights per shape, 30 launches a
// shape in one CUDA graph with programmatic dependent launch), after a
// bit-for-bit check of q35_gemvs against q35_gemv8 on 17 shapes. A
// development tool, built by hand (it links the CUDA runtime; loom does not):
//   nvcc -O3 -std=c++17 -arch=sm_90a -Iplugins/qwen35 -Iplugins/qwen35/cuda \
//        -o gemv_bench tools/gemv_bench.cu
#include "linear.cu"
#include "gemv_stream.cu"
#include "bench_cuda.cuh"
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cstring>
__global__ void fill(uint16_t *w, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = bench_mix((uint32_t)i * 2654435761u ^ seed);
    float f = ((h & 0xffff) / 65536.0f - 0.5f) * 0.05f; w[i] = (uint16_t)(__float_as_uint(f) >> 16); } }
static int nsm;
struct Shape { const char *name; int rows, cols; bool glu; };
static uint16_t *W; static size_t WN; static float *X, *Y, *NW; static size_t woff;
static const uint16_t *nextw(size_t n) { if (woff + n > WN) woff = 0; const uint16_t *p = W + woff; woff += (n + 127) / 128 * 128; return p; }
static const void *gs[2][4] = {{(const void *)q35_gemvs1_bf16, (const void *)q35_gemvs2_bf16, (const void *)q35_gemvs4_bf16, (const void *)q35_gemvs8_bf16},
  {(const void *)q35_gemvs1_glu_bf16, (const void *)q35_gemvs2_glu_bf16, (const void *)q35_gemvs4_glu_bf16, (const void *)q35_gemvs8_glu_bf16}};
static const unsigned SM = Q35_GEMVS_SMEM;
// kind 0 gemv1, 1 gemvs, 2 gemv8 (T tokens)
static int bps = Q35_GEMVS_BPS;
static void one(int kind, const Shape &s, const uint16_t *w, const uint16_t *w2, const float *nw, int T, cudaStream_t st) {
  int ldx = s.cols, ldy = s.rows, rows = s.rows, cols = s.cols, mode = s.glu ? 2 : 0; float eps = 1e-6f;
  const int *sel = nullptr; int sel_stride = 0; long long estride = 0; int wpr = q35_wpr(rows, cols);
  if (kind == 1) {
    int k = q35_wpr_kind(wpr); int nb = nsm * bps; if (nb > rows) nb = rows;
    int nsg = q35_gemvs_stages(cols);
    if (nsg < 2) { printf("no gemvs for %s\n", s.name); return; }
    void *a[] = {&w, &w2, &X, &ldx, &Y, &ldy, &rows, &cols, &mode, &nw, &eps, &nsg};
    bench_launch(gs[s.glu][k], dim3(nb, T), dim3(288), nsg * Q35_GEMVS_STAGE + cols * 4, a, st);
  } else {
    int rpw = kind == 2 ? (s.glu ? 2 : 4) : (s.glu ? 2 : 4); long warps = (long)(rows + rpw - 1) / rpw * wpr; int nt = kind == 2 ? 8 : 1;
    void *a[] = {&w, &w2, &X, &ldx, &Y, &ldy, &rows, &cols, &T, &mode, &sel, &sel_stride, &estride, &wpr, &nw, &eps};
    const void *f = kind == 2 ? (s.glu ? (const void *)q35_gemv8_glu_bf16 : (const void *)q35_gemv8_bf16) : (s.glu ? (const void *)q35_gemv1_glu_bf16 : (const void *)q35_gemv1_bf16);
    bench_launch(f, dim3((warps + 7) / 8, (T + nt - 1) / nt), dim3(256), 0, a, st);
  }
}
int main() {
  CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
  WN = (size_t)3 << 30; CK(cudaMalloc(&W, WN * 2)); fill<<<4096, 256>>>(W, WN, 1234);
  CK(cudaMalloc(&X, 65536 * 4 * 8)); CK(cudaMalloc(&Y, 300000 * 4 * 8)); CK(cudaMalloc(&NW, 65536 * 4));
  { std::vector<float> h(65536 * 8); for (size_t i = 0; i < h.size(); i++) h[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f; CK(cudaMemcpy(X, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    std::vector<float> g(65536); for (size_t i = 0; i < g.size(); i++) g[i] = 1.0f + (float)(i % 17) / 40.0f; CK(cudaMemcpy(NW, g.data(), g.size() * 4, cudaMemcpyHostToDevice)); }
  for (int i = 0; i < 2; i++) for (int k = 0; k < 4; k++) CK(cudaFuncSetAttribute(gs[i][k], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SM));
  Shape sh[] = {{"9b in", 12352, 4096, false}, {"9b out", 4096, 4096, false}, {"9b glu", 12288, 4096, true}, {"9b down", 4096, 12288, false},
    {"9b attn", 10240, 4096, false}, {"9b lm", 248320, 4096, false}, {"2b in", 8224, 2048, false}, {"2b out", 2048, 2048, false}, {"2b glu", 6144, 2048, true},
    {"2b down", 2048, 6144, false}, {"2b lm", 248320, 2048, false}, {"odd", 1000, 1000, false}, {"oddg", 333, 520, true}, {"small", 64, 256, false}, {"tiny", 5, 64, true}, {"wide", 40, 8192, false}, {"wide2", 24, 8200, true}};
  int ns = sizeof sh / sizeof sh[0]; int fails = 0;
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int si = 0; si < ns; si++) for (int usenw = 0; usenw < 2; usenw++) {
    Shape s = sh[si]; const float *nw = usenw ? NW : nullptr; size_t n = (size_t)s.rows * s.cols;
    const uint16_t *w = W, *w2 = s.glu ? W + (n + 127) / 128 * 128 : nullptr;
    std::vector<float> ref(s.rows), got(s.rows);
    CK(cudaMemset(Y, 0, s.rows * 4)); one(2, s, w, w2, nw, 1, st); CK(cudaStreamSynchronize(st)); CK(cudaMemcpy(ref.data(), Y, s.rows * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemset(Y, 0xff, s.rows * 4)); one(1, s, w, w2, nw, 1, st); CK(cudaStreamSynchronize(st)); CK(cudaMemcpy(got.data(), Y, s.rows * 4, cudaMemcpyDeviceToHost));
    int bad = 0; for (int r = 0; r < s.rows; r++) if (memcmp(&got[r], &ref[r], 4)) bad++;
    if (bad) { printf("MISMATCH %s nw=%d: %d of %d rows\n", s.name, usenw, bad, s.rows); fails++; }
  }
  printf("bitwise gemvs == gemv8: %s\n", fails ? "FAIL" : "ok");
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  // a decode step's products alone: 24 layers of in, out, glu, down (9b), in one graph, with bps blocks an SM
  for (int b = 1; b <= 3; b++) {
    bps = b; double bytes = 0; cudaGraph_t gr; cudaGraphExec_t ge; CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < 24; l++) for (int k = 0; k < 4; k++) { Shape s = sh[k]; size_t n = (size_t)s.rows * s.cols; const uint16_t *w = nextw(n), *w2 = s.glu ? nextw(n) : nullptr; bytes += (double)n * 2 * (s.glu ? 2 : 1); one(1, s, w, w2, k == 0 || k == 2 ? NW : nullptr, 1, st); }
    CK(cudaStreamEndCapture(st, &gr)); CK(cudaGraphInstantiate(&ge, gr, 0)); CK(cudaGraphLaunch(ge, st)); CK(cudaStreamSynchronize(st));
    int R = 10; cudaEventRecord(e0, st); for (int r = 0; r < R; r++) CK(cudaGraphLaunch(ge, st)); cudaEventRecord(e1, st); CK(cudaEventSynchronize(e1));
    float ms; cudaEventElapsedTime(&ms, e0, e1); printf("chain 9b x24 bps=%d: %.1f us a layer, %.0f GB/s\n", b, ms * 1e3 / R / 24, bytes * R / (ms * 1e-3) / 1e9);
    cudaGraphExecDestroy(ge); cudaGraphDestroy(gr);
  }
  bps = Q35_GEMVS_BPS;
  printf("%-10s %10s %10s  (GB/s)\n", "shape", "gemv1", "gemvs");
  for (int si = 0; si < 11; si++) {
    Shape s = sh[si]; double bytes = (double)s.rows * s.cols * 2 * (s.glu ? 2 : 1); int K = s.rows > 100000 ? 4 : 30;
    printf("%-10s", s.name);
    for (int kind = 0; kind < 2; kind++) {
      cudaGraph_t gr; cudaGraphExec_t ge; CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
      for (int k = 0; k < K; k++) { size_t n = (size_t)s.rows * s.cols; const uint16_t *w = nextw(n), *w2 = s.glu ? nextw(n) : nullptr; one(kind, s, w, w2, k & 1 ? NW : nullptr, 1, st); }
      CK(cudaStreamEndCapture(st, &gr)); CK(cudaGraphInstantiate(&ge, gr, 0)); CK(cudaGraphLaunch(ge, st)); CK(cudaStreamSynchronize(st));
      int R = 10; cudaEventRecord(e0, st); for (int r = 0; r < R; r++) CK(cudaGraphLaunch(ge, st)); cudaEventRecord(e1, st); CK(cudaEventSynchronize(e1));
      float ms; cudaEventElapsedTime(&ms, e0, e1); printf(" %10.0f", bytes * K * R / (ms * 1e-3) / 1e9);
      cudaGraphExecDestroy(ge); cudaGraphDestroy(gr);
    }
    printf("\n");
  }
  CK(cudaDeviceSynchronize()); printf("done\n"); return fails != 0;
}
