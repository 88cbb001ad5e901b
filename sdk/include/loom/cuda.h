/* The typed CUDA device table the core hands plugins (loom.cuda/1): driver
 * entry points resolved at run time, the engine's context and stream, the
 * device's facts and accounted device memory. Needs plugin.h alone: no CUDA
 * header is needed, so plugin host code stays plain C and links no CUDA
 * library.
 *
 * Every entry point is the driver API function of the same name (without the
 * `cu` prefix, first letter lowered), resolved with cuGetProcAddress at
 * LOOM_CUDA_DRIVER_VERSION; it returns a CUresult (0 = CUDA_SUCCESS).
 * Handles are opaque pointers of the driver's own types.
 *
 * Lifetime: the table is owned by the host and valid from the first plugin
 * call that receives it until the engine closes, after every model and
 * drafter of that engine is closed. Plugins never create or destroy the
 * context or the stream; they load their own modules and free them at close.
 * Thread tags as in plugin.h: all members are [lane-thread] or
 * [load-thread] (never concurrently on one engine) unless marked [any-thread].
 */
#ifndef LOOM_CUDA_H
#define LOOM_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <loom/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define LOOM_CUDA_API __stdcall
#else
#define LOOM_CUDA_API
#endif

/* The driver API version the entry points are resolved at (CUDA 12.0). */
#define LOOM_CUDA_DRIVER_VERSION 12000

#define LOOM_CUDA_ID "loom.cuda/1"

typedef int loom_cu_result;   /* CUresult */
typedef uint64_t loom_cu_ptr; /* CUdeviceptr */
typedef int loom_cu_device;   /* CUdevice */
typedef struct loom_cu_ctx_s *loom_cu_context;
typedef struct loom_cu_stream_s *loom_cu_stream;
typedef struct loom_cu_module_s *loom_cu_module;
typedef struct loom_cu_func_s *loom_cu_function;
typedef struct loom_cu_event_s *loom_cu_event;
typedef struct loom_cu_graph_s *loom_cu_graph;
typedef struct loom_cu_graph_exec_s *loom_cu_graph_exec;

/* loom_mem_use (what memory is for) is plugin.h's. */

/* cuLaunchKernelEx's attribute for programmatic dependent launch (sm_90). */
#define LOOM_CU_LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION 6
/* ... and its cluster shape (sm_90): v.bytes holds three unsigned ints. */
#define LOOM_CU_LAUNCH_ATTR_CLUSTER_DIMENSION 4

typedef struct loom_cu_launch_attr {
    int id;
    int pad;
    union {
        char bytes[64];
        int value;
    } v;
} loom_cu_launch_attr;

/* CUlaunchConfig, field for field. */
typedef struct loom_cu_launch_config {
    unsigned int grid_x, grid_y, grid_z;
    unsigned int block_x, block_y, block_z;
    unsigned int shared_bytes;
    loom_cu_stream stream;
    loom_cu_launch_attr *attrs;
    unsigned int n_attrs;
} loom_cu_launch_config;

struct loom_err;

typedef struct loom_cuda {
    uint32_t struct_size;
    uint32_t version; /* LOOM_CUDA_DRIVER_VERSION the table was resolved at */

    /* Device facts, read once at engine open. [any-thread] */
    loom_cu_device device;
    char name[256];
    int cc_major, cc_minor;
    int sm_count;
    int driver_version;   /* cuDriverGetVersion */
    uint64_t total_bytes; /* cuDeviceTotalMem */
    uint64_t l2_bytes;
    uint64_t smem_per_block_optin; /* most dynamic shared memory a block gets */

    /* The engine's one context and its one stream. The core's family
     * dispatcher makes the context current before every vtable call, on
     * whichever thread makes it (the lane runs on a thread of its own);
     * an extension's entry points (loom.target/1), called directly, start
     * with cu->ctxSetCurrent(cu->context), which is cheap. */
    loom_cu_context context;
    loom_cu_stream stream;

    /* Accounted device memory. alloc refuses with LOOM_ERR_FULL, naming the
     * use and the bytes, when the engine's budget would be passed, and with
     * LOOM_ERR_DEVICE when the driver fails; *ptr is untouched on failure.
     * free(0) is a no-op; bytes must be what was allocated. */
    int(LOOM_CUDA_API *alloc)(const struct loom_cuda *cu, loom_mem_use use,
                              uint64_t bytes, loom_cu_ptr *ptr,
                              struct loom_err *err);
    void(LOOM_CUDA_API *free)(const struct loom_cuda *cu, loom_mem_use use,
                              loom_cu_ptr ptr, uint64_t bytes);
    /* Bytes held now for `use` (LOOM_MEM_USE_COUNT: all). [any-thread] */
    uint64_t(LOOM_CUDA_API *used)(const struct loom_cuda *cu, loom_mem_use use);
    /* The driver's name for a result ("CUDA_ERROR_OUT_OF_MEMORY"), never
     * NULL. [any-thread] */
    const char *(LOOM_CUDA_API *error_name)(const struct loom_cuda *cu,
                                            loom_cu_result r);

    /* Driver entry points. */
    loom_cu_result(LOOM_CUDA_API *ctxSetCurrent)(loom_cu_context ctx);
    loom_cu_result(LOOM_CUDA_API *ctxSynchronize)(void);
    loom_cu_result(LOOM_CUDA_API *memGetInfo)(size_t *free_bytes,
                                              size_t *total_bytes);
    loom_cu_result(LOOM_CUDA_API *memcpyHtoDAsync)(loom_cu_ptr dst,
                                                   const void *src,
                                                   size_t bytes,
                                                   loom_cu_stream s);
    loom_cu_result(LOOM_CUDA_API *memcpyDtoHAsync)(void *dst, loom_cu_ptr src,
                                                   size_t bytes,
                                                   loom_cu_stream s);
    loom_cu_result(LOOM_CUDA_API *memcpyDtoDAsync)(loom_cu_ptr dst,
                                                   loom_cu_ptr src,
                                                   size_t bytes,
                                                   loom_cu_stream s);
    loom_cu_result(LOOM_CUDA_API *memsetD8Async)(loom_cu_ptr dst,
                                                 unsigned char value, size_t n,
                                                 loom_cu_stream s);
    loom_cu_result(LOOM_CUDA_API *memsetD32Async)(loom_cu_ptr dst,
                                                  unsigned int value, size_t n,
                                                  loom_cu_stream s);
    /* Page-locked host memory for staging copies (not accounted). */
    loom_cu_result(LOOM_CUDA_API *memAllocHost)(void **p, size_t bytes);
    loom_cu_result(LOOM_CUDA_API *memFreeHost)(void *p);

    loom_cu_result(LOOM_CUDA_API *moduleLoadData)(loom_cu_module *m,
                                                  const void *image);
    loom_cu_result(LOOM_CUDA_API *moduleUnload)(loom_cu_module m);
    loom_cu_result(LOOM_CUDA_API *moduleGetFunction)(loom_cu_function *f,
                                                     loom_cu_module m,
                                                     const char *name);
    /* A __device__ / __constant__ variable of a module. */
    loom_cu_result(LOOM_CUDA_API *moduleGetGlobal)(loom_cu_ptr *ptr,
                                                   size_t *bytes,
                                                   loom_cu_module m,
                                                   const char *name);
    /* attrib: CUfunction_attribute (8 = max dynamic shared size bytes). */
    loom_cu_result(LOOM_CUDA_API *funcSetAttribute)(loom_cu_function f,
                                                    int attrib, int value);
    /* attrib: CUfunction_attribute (4 = registers per thread). */
    loom_cu_result(LOOM_CUDA_API *funcGetAttribute)(int *value, int attrib,
                                                    loom_cu_function f);
    loom_cu_result(LOOM_CUDA_API *launchKernel)(
        loom_cu_function f, unsigned int gx, unsigned int gy, unsigned int gz,
        unsigned int bx, unsigned int by, unsigned int bz,
        unsigned int shared_bytes, loom_cu_stream s, void **params,
        void **extra);
    /* NULL on drivers without it; then use launchKernel. */
    loom_cu_result(LOOM_CUDA_API *launchKernelEx)(
        const loom_cu_launch_config *config, loom_cu_function f, void **params,
        void **extra);

    loom_cu_result(LOOM_CUDA_API *streamSynchronize)(loom_cu_stream s);
    loom_cu_result(LOOM_CUDA_API *streamWaitEvent)(loom_cu_stream s,
                                                   loom_cu_event e,
                                                   unsigned int flags);
    loom_cu_result(LOOM_CUDA_API *eventCreate)(loom_cu_event *e,
                                               unsigned int flags);
    loom_cu_result(LOOM_CUDA_API *eventDestroy)(loom_cu_event e);
    loom_cu_result(LOOM_CUDA_API *eventRecord)(loom_cu_event e,
                                               loom_cu_stream s);
    loom_cu_result(LOOM_CUDA_API *eventSynchronize)(loom_cu_event e);
    loom_cu_result(LOOM_CUDA_API *eventElapsedTime)(float *ms,
                                                    loom_cu_event start,
                                                    loom_cu_event end);

    /* Graph capture on the engine's stream (mode: 0 global, 1 thread-local,
     * 2 relaxed) and replay. */
    loom_cu_result(LOOM_CUDA_API *streamBeginCapture)(loom_cu_stream s,
                                                      int mode);
    loom_cu_result(LOOM_CUDA_API *streamEndCapture)(loom_cu_stream s,
                                                    loom_cu_graph *g);
    loom_cu_result(LOOM_CUDA_API *graphInstantiate)(loom_cu_graph_exec *e,
                                                    loom_cu_graph g,
                                                    unsigned long long flags);
    loom_cu_result(LOOM_CUDA_API *graphLaunch)(loom_cu_graph_exec e,
                                               loom_cu_stream s);
    loom_cu_result(LOOM_CUDA_API *graphExecDestroy)(loom_cu_graph_exec e);
    loom_cu_result(LOOM_CUDA_API *graphDestroy)(loom_cu_graph g);

    /* Since ABI 2.3 (check struct_size). Tensor-core products through
     * cuBLASLt, opened at the first call: D[n][m] = A[m][k] B[n][k]^T +
     * beta D, row-major, A and B BF16 with rows k elements apart, D float32
     * with rows ldd apart, float32 accumulation; on cu->stream, capturable
     * once opened. A shape runs the same algorithm every time. n == 0 only
     * opens the library. LOOM_ERR_UNSUPPORTED when no cuBLASLt loads (the
     * caller uses its own kernels). */
    int(LOOM_CUDA_API *gemm_bf16)(const struct loom_cuda *cu, int32_t m,
                                  int32_t n, int32_t k, loom_cu_ptr a,
                                  loom_cu_ptr b, loom_cu_ptr d, int32_t ldd,
                                  float beta, struct loom_err *err);

    /* Since ABI 2.4 (check struct_size); NULL on drivers without it.
     * cuOccupancyMaxActiveClusters: how many clusters of the config's shape
     * (its cluster attribute and shared memory) the device holds at once. */
    loom_cu_result(LOOM_CUDA_API *occupancyMaxActiveClusters)(
        int *clusters, loom_cu_function f, const loom_cu_launch_config *config);
    /* Since ABI 2.4; NULL on drivers without it. cuTensorMapEncodeTiled:
     * a tensor map (128 bytes, 64-byte aligned) for bulk tensor copies
     * (sm_90); the enums as ints (CUtensorMapDataType, ...Interleave,
     * ...Swizzle, ...L2promotion, ...FloatOOBfill). */
    loom_cu_result(LOOM_CUDA_API *tensorMapEncodeTiled)(
        void *map, int dtype, uint32_t rank, void *address,
        const uint64_t *dims, const uint64_t *strides, const uint32_t *box,
        const uint32_t *element_strides, int interleave, int swizzle,
        int l2_promotion, int oob_fill);
} loom_cuda;

#ifdef __cplusplus
}
#endif

#endif /* LOOM_CUDA_H */
