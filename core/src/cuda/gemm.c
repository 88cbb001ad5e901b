/* Tensor-core products for prompt chunks: cuBLASLt opened at run time (never
 * linked), its BF16 x BF16 -> float32 matmul with float32 accumulation, one
 * algorithm per shape chosen once (the same shape always runs the same
 * algorithm, so a chunk's result does not change between runs). */
#include "gemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/log.h>
#include <loom/platform.h>

/* cuBLASLt's enum values (cublasLt.h, library_types.h). */
enum {
    CUDA_R_32F = 0,
    CUDA_R_16BF = 14,
    COMPUTE_32F = 68,
    DESC_TRANSA = 3,
    DESC_TRANSB = 4,
    OP_N = 0,
    OP_T = 1,
    PREF_MAX_WORKSPACE_BYTES = 1,
    PREF_ALIGN_A = 5 /* B, C, D follow */
};

/* Shapes whose algorithm is kept (past them, each call asks again). */
#define GEMM_SHAPES 128

typedef struct lt_algo {
    uint64_t data[8];
} lt_algo;

typedef struct lt_heuristic {
    lt_algo algo;
    size_t workspace;
    int state;
    float waves;
    int reserved[4];
} lt_heuristic;

typedef void *lt_handle, *lt_desc, *lt_layout, *lt_pref;
typedef int lt_status;

/* The entry points used, resolved from the library. */
typedef struct lt_api {
    lt_status(LOOM_CUDA_API *create)(lt_handle *h);
    lt_status(LOOM_CUDA_API *destroy)(lt_handle h);
    lt_status(LOOM_CUDA_API *desc_create)(lt_desc *d, int compute, int scale);
    lt_status(LOOM_CUDA_API *desc_destroy)(lt_desc d);
    lt_status(LOOM_CUDA_API *desc_set)(lt_desc d, int attr, const void *buf,
                                       size_t size);
    lt_status(LOOM_CUDA_API *layout_create)(lt_layout *l, int type,
                                            uint64_t rows, uint64_t cols,
                                            int64_t ld);
    lt_status(LOOM_CUDA_API *layout_destroy)(lt_layout l);
    lt_status(LOOM_CUDA_API *pref_create)(lt_pref *p);
    lt_status(LOOM_CUDA_API *pref_destroy)(lt_pref p);
    lt_status(LOOM_CUDA_API *pref_set)(lt_pref p, int attr, const void *buf,
                                       size_t size);
    lt_status(LOOM_CUDA_API *heuristic)(lt_handle h, lt_desc d, lt_layout a,
                                        lt_layout b, lt_layout c, lt_layout dd,
                                        lt_pref p, int requested,
                                        lt_heuristic *out, int *returned);
    lt_status(LOOM_CUDA_API *matmul)(lt_handle h, lt_desc d, const void *alpha,
                                     const void *A, lt_layout a, const void *B,
                                     lt_layout b, const void *beta,
                                     const void *C, lt_layout c, void *D,
                                     lt_layout dd, const lt_algo *algo,
                                     void *ws, size_t ws_size,
                                     loom_cu_stream s);
} lt_api;

/* A product's shape and its buffers' alignments (bytes, up to 256: what
 * the algorithm may assume). */
typedef struct lt_shape {
    int32_t m, n, k, ldd, accumulate;
    uint32_t align[3]; /* A, B, D (C is D) */
    lt_algo algo;
} lt_shape;

struct loom__gemm {
    loom_dl *dl;
    lt_api f;
    lt_handle h;
    int failed; /* opening failed: every call answers unsupported */
    char why[sizeof(((loom_err *)0)->msg)];
    lt_shape shapes[GEMM_SHAPES];
    int n_shapes;
};

static const char *const lib_names[] = {
#if defined(_WIN32)
    "cublasLt64_13.dll", "cublasLt64_12.dll"
#else
    "libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"
#endif
};

/* Copies a symbol into a function pointer slot (no object-to-function
 * pointer cast); 0 when the library lacks it. */
static int sym(loom_dl *dl, const char *name, void *slot, size_t size)
{
    void *p = loom_dl_sym(dl, name);
    memcpy(slot, &p, size);
    return p != NULL;
}

#define SYM(g, slot, name) sym((g)->dl, name, &(g)->f.slot, sizeof((g)->f.slot))

static loom_status gemm_open(loom__gemm *g, loom_err *err)
{
    /* LOOM_CUBLASLT names the library when it is not on the search path */
    const char *env = loom_getenv("LOOM_CUBLASLT");
    loom_err derr = {{0}};
    if (env && *env) {
        if (loom_dl_open(env, &g->dl, &derr) != LOOM_OK)
            return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                                "LOOM_CUBLASLT=%s: %s", env, derr.msg);
    } else {
        for (size_t i = 0; !g->dl && i < sizeof lib_names / sizeof *lib_names;
             i++)
            (void)loom_dl_open(lib_names[i], &g->dl, &derr);
        if (!g->dl)
            return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                                "no cuBLASLt library (%s): %s", lib_names[0],
                                derr.msg);
    }
    if (!SYM(g, create, "cublasLtCreate") ||
        !SYM(g, destroy, "cublasLtDestroy") ||
        !SYM(g, desc_create, "cublasLtMatmulDescCreate") ||
        !SYM(g, desc_destroy, "cublasLtMatmulDescDestroy") ||
        !SYM(g, desc_set, "cublasLtMatmulDescSetAttribute") ||
        !SYM(g, layout_create, "cublasLtMatrixLayoutCreate") ||
        !SYM(g, layout_destroy, "cublasLtMatrixLayoutDestroy") ||
        !SYM(g, pref_create, "cublasLtMatmulPreferenceCreate") ||
        !SYM(g, pref_destroy, "cublasLtMatmulPreferenceDestroy") ||
        !SYM(g, pref_set, "cublasLtMatmulPreferenceSetAttribute") ||
        !SYM(g, heuristic, "cublasLtMatmulAlgoGetHeuristic") ||
        !SYM(g, matmul, "cublasLtMatmul"))
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "cuBLASLt lacks an entry point loom uses");
    lt_status s = g->f.create(&g->h);
    if (s != 0) {
        g->h = NULL;
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "cublasLtCreate: status %d", s);
    }
    loom_log(LOOM_LOG_INFO, "cuda: cuBLASLt opened for prompt-chunk products");
    return LOOM_OK;
}

/* The layouts of D[n][m] = A[m][k] B[n][k]^T in cuBLASLt's column-major
 * terms: D^T (m x n, ld ldd) = op_T(A^T (k x m)) * B^T (k x n). */
typedef struct lt_call {
    lt_desc desc;
    lt_layout a, b, d;
} lt_call;

static void call_free(const loom__gemm *g, lt_call *c)
{
    if (c->a)
        g->f.layout_destroy(c->a);
    if (c->b)
        g->f.layout_destroy(c->b);
    if (c->d)
        g->f.layout_destroy(c->d);
    if (c->desc)
        g->f.desc_destroy(c->desc);
}

static lt_status call_make(const loom__gemm *g, lt_call *c, int32_t m,
                           int32_t n, int32_t k, int32_t ldd)
{
    memset(c, 0, sizeof *c);
    int32_t ta = OP_T, tb = OP_N;
    lt_status s = g->f.desc_create(&c->desc, COMPUTE_32F, CUDA_R_32F);
    if (s == 0)
        s = g->f.desc_set(c->desc, DESC_TRANSA, &ta, sizeof ta);
    if (s == 0)
        s = g->f.desc_set(c->desc, DESC_TRANSB, &tb, sizeof tb);
    if (s == 0)
        s = g->f.layout_create(&c->a, CUDA_R_16BF, (uint64_t)k, (uint64_t)m, k);
    if (s == 0)
        s = g->f.layout_create(&c->b, CUDA_R_16BF, (uint64_t)k, (uint64_t)n, k);
    if (s == 0)
        s = g->f.layout_create(&c->d, CUDA_R_32F, (uint64_t)m, (uint64_t)n,
                               ldd);
    return s;
}

/* The shape's algorithm: the heuristic's first, chosen once. */
static loom_status shape_algo(loom__gemm *g, const lt_call *c,
                              const lt_shape *want, lt_algo *out, loom_err *err)
{
    for (int i = 0; i < g->n_shapes; i++) {
        const lt_shape *x = &g->shapes[i];
        if (x->m == want->m && x->n == want->n && x->k == want->k &&
            x->ldd == want->ldd && x->accumulate == want->accumulate &&
            !memcmp(x->align, want->align, sizeof x->align)) {
            *out = x->algo;
            return LOOM_OK;
        }
    }
    int32_t m = want->m, n = want->n, k = want->k;
    lt_pref p = NULL;
    uint64_t ws = 0;
    lt_heuristic h;
    int got = 0;
    lt_status s = g->f.pref_create(&p);
    /* no workspace: the algorithms that need none (no split-K reductions
     * in scratch) are as fast at prompt-chunk shapes, and nothing stays
     * allocated behind the models' backs */
    if (s == 0)
        s = g->f.pref_set(p, PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    /* C and D are one buffer */
    static const int which[4] = {0, 1, 2, 2};
    for (int i = 0; s == 0 && i < 4; i++)
        s = g->f.pref_set(p, PREF_ALIGN_A + i, &want->align[which[i]],
                          sizeof(uint32_t));
    if (s == 0)
        s = g->f.heuristic(g->h, c->desc, c->a, c->b, c->d, c->d, p, 1, &h,
                           &got);
    if (p)
        g->f.pref_destroy(p);
    if (s != 0 || got < 1)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "cuBLASLt has no algorithm for a %d x %d x %d "
                            "BF16 product (status %d)",
                            m, n, k, s);
    *out = h.algo;
    if (g->n_shapes < GEMM_SHAPES) {
        g->shapes[g->n_shapes] = *want;
        g->shapes[g->n_shapes++].algo = h.algo;
    }
    return LOOM_OK;
}

/* The largest power of two up to 256 dividing both the address and the
 * row pitch in bytes. */
static uint32_t align_of(loom_cu_ptr p, uint64_t pitch)
{
    uint64_t x = (p | pitch) & 255u;
    return x ? (uint32_t)(x & (~x + 1)) : 256u;
}

loom_status loom__gemm_bf16(loom__gemm **gp, const loom_cuda *cu, int32_t m,
                            int32_t n, int32_t k, loom_cu_ptr a, loom_cu_ptr b,
                            loom_cu_ptr d, int32_t ldd, float beta,
                            loom_err *err)
{
    if (!*gp) {
        loom__gemm *g = calloc(1, sizeof *g);
        if (!g)
            return loom_err_set(err, LOOM_ERR_NOMEM, "cuda: out of memory");
        *gp = g;
        loom_err oerr = {{0}};
        if (gemm_open(g, &oerr) != LOOM_OK) {
            g->failed = 1;
            snprintf(g->why, sizeof g->why, "%s", oerr.msg);
            loom_log(LOOM_LOG_INFO,
                     "cuda: %s; prompt chunks use loom's own kernels", g->why);
        }
    }
    loom__gemm *g = *gp;
    if (g->failed)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED, "%s", g->why);
    if (n == 0)
        return LOOM_OK;
    if (m <= 0 || n < 0 || k <= 0 || ldd < m)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "gemm_bf16: m %d, n %d, k %d, ldd %d", m, n, k,
                            ldd);
    lt_call c;
    lt_status s = call_make(g, &c, m, n, k, ldd);
    loom_status st = LOOM_OK;
    if (s != 0)
        st = loom_err_set(err, LOOM_ERR_DEVICE,
                          "cuBLASLt descriptors for %d x %d x %d: status %d", m,
                          n, k, s);
    lt_shape want = {m, n, k, ldd, beta != 0.0f, {0, 0, 0}, {{0}}};
    want.align[0] = align_of(a, (uint64_t)k * 2);
    want.align[1] = align_of(b, (uint64_t)k * 2);
    want.align[2] = align_of(d, (uint64_t)ldd * 4);
    lt_algo algo;
    if (st == LOOM_OK)
        st = shape_algo(g, &c, &want, &algo, err);
    if (st == LOOM_OK) {
        float alpha = 1.0f;
        const void *A = (const void *)(uintptr_t)a;
        const void *B = (const void *)(uintptr_t)b;
        void *D = (void *)(uintptr_t)d;
        s = g->f.matmul(g->h, c.desc, &alpha, A, c.a, B, c.b, &beta, D, c.d, D,
                        c.d, &algo, NULL, 0, cu->stream);
        if (s != 0)
            st = loom_err_set(err, LOOM_ERR_DEVICE,
                              "cublasLtMatmul %d x %d x %d: status %d", m, n, k,
                              s);
    }
    call_free(g, &c);
    return st;
}

void loom__gemm_close(loom__gemm *g)
{
    if (!g)
        return;
    if (g->h)
        g->f.destroy(g->h);
    if (g->dl)
        loom_dl_close(g->dl);
    free(g);
}
