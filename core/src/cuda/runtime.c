/* The CUDA driver opened at run time: entry points resolved by
 * cuGetProcAddress at LOOM_CUDA_DRIVER_VERSION, device 0's primary context,
 * the engine's stream and device memory accounted by use against a budget. */
#include <loom/cuda_runtime.h>

#include <ctype.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <loom/host.h>
#include <loom/log.h>
#include <loom/platform.h>

#include "gemm.h"

#if defined(_WIN32)
#define DRIVER_LIB "nvcuda.dll"
#else
#define DRIVER_LIB "libcuda.so.1"
#endif

/* CUdevice_attribute values (cuda.h) */
enum {
    ATTR_SM_COUNT = 16,
    ATTR_L2_BYTES = 38,
    ATTR_CC_MAJOR = 75,
    ATTR_CC_MINOR = 76,
    ATTR_SMEM_OPTIN = 97
};
#define CU_STREAM_NON_BLOCKING 1
#define CUDA_ERROR_NO_DEVICE   100

typedef loom_cu_result(LOOM_CUDA_API *get_proc_v2_fn)(const char *sym,
                                                      void **pfn, int version,
                                                      uint64_t flags,
                                                      int *status);
typedef loom_cu_result(LOOM_CUDA_API *get_proc_v1_fn)(const char *sym,
                                                      void **pfn, int version,
                                                      uint64_t flags);

/* The entry points only the core calls. */
typedef struct driver {
    loom_dl *dl;
    get_proc_v2_fn get_proc_v2;
    get_proc_v1_fn get_proc_v1;
    loom_cu_result first_failure; /* of cuGetProcAddress, for the message */
    loom_cu_result(LOOM_CUDA_API *init)(unsigned int flags);
    loom_cu_result(LOOM_CUDA_API *driverGetVersion)(int *v);
    loom_cu_result(LOOM_CUDA_API *deviceGetCount)(int *n);
    loom_cu_result(LOOM_CUDA_API *deviceGet)(loom_cu_device *d, int ordinal);
    loom_cu_result(LOOM_CUDA_API *deviceGetName)(char *name, int len,
                                                 loom_cu_device d);
    loom_cu_result(LOOM_CUDA_API *deviceGetAttribute)(int *v, int attrib,
                                                      loom_cu_device d);
    loom_cu_result(LOOM_CUDA_API *deviceTotalMem)(size_t *bytes,
                                                  loom_cu_device d);
    loom_cu_result(LOOM_CUDA_API *primaryCtxRetain)(loom_cu_context *c,
                                                    loom_cu_device d);
    loom_cu_result(LOOM_CUDA_API *primaryCtxRelease)(loom_cu_device d);
    loom_cu_result(LOOM_CUDA_API *streamCreate)(loom_cu_stream *s,
                                                unsigned int flags);
    loom_cu_result(LOOM_CUDA_API *streamDestroy)(loom_cu_stream s);
    loom_cu_result(LOOM_CUDA_API *memAlloc)(loom_cu_ptr *p, size_t bytes);
    loom_cu_result(LOOM_CUDA_API *memFree)(loom_cu_ptr p);
    loom_cu_result(LOOM_CUDA_API *getErrorName)(loom_cu_result r,
                                                const char **s);
    loom_cu_result(LOOM_CUDA_API *getErrorString)(loom_cu_result r,
                                                  const char **s);
} driver;

struct loom_cuda_runtime {
    loom_cuda t; /* first: the table plugins get is this runtime */
    driver d;
    uint64_t budget;
    _Atomic uint64_t held;
    _Atomic uint64_t used[LOOM_MEM_USE_COUNT];
    int retained;
    loom__gemm *gemm; /* opened by the first gemm_bf16 */
};

static const char *const use_names[LOOM_MEM_USE_COUNT] = {
    "weights", "cache", "scratch", "graphs", "drafter"};

static loom_cuda_runtime *rt_of(const loom_cuda *cu)
{
    return (loom_cuda_runtime *)cu;
}

/* ---------------------------------------------------------------- driver */

static const char *name_of(const driver *d, loom_cu_result r)
{
    const char *s = NULL;
    if (d->getErrorName && d->getErrorName(r, &s) == 0 && s)
        return s;
    return "CUDA_ERROR_UNKNOWN_CODE";
}

static loom_status fail(const driver *d, loom_cu_result r, const char *what,
                        loom_err *err)
{
    const char *text = NULL;
    if (!d->getErrorString || d->getErrorString(r, &text) != 0)
        text = NULL;
    return loom_err_set(err, LOOM_ERR_DEVICE, "%s: %s (%s)", what,
                        name_of(d, r), text ? text : "no description");
}

/* One entry point at LOOM_CUDA_DRIVER_VERSION; NULL when the driver has
 * none by that name. The symbol is copied into the function pointer so no
 * object pointer is cast to a function type. */
static void resolve(driver *d, const char *sym, void *fn_slot, size_t slot_size)
{
    void *p = NULL;
    loom_cu_result r;
    if (d->get_proc_v2) {
        int status = 0;
        r = d->get_proc_v2(sym, &p, LOOM_CUDA_DRIVER_VERSION, 0, &status);
    } else {
        r = d->get_proc_v1(sym, &p, LOOM_CUDA_DRIVER_VERSION, 0);
    }
    if (r != 0) {
        p = NULL;
        if (!d->first_failure)
            d->first_failure = r;
    }
    memcpy(fn_slot, &p, slot_size);
}

#define RESOLVE(d, slot, sym) resolve(d, sym, &(slot), sizeof(slot))

/* Opens the driver library and resolves the core's own entry points;
 * LOOM_ERR_NOT_FOUND when there is no driver. */
static loom_status driver_open(driver *d, loom_err *err)
{
    memset(d, 0, sizeof *d);
    loom_err derr;
    if (loom_dl_open(DRIVER_LIB, &d->dl, &derr) != LOOM_OK)
        return loom_err_set(err, LOOM_ERR_NOT_FOUND, "no CUDA driver: %s",
                            derr.msg);
    void *p = loom_dl_sym(d->dl, "cuGetProcAddress_v2");
    if (p) {
        memcpy(&d->get_proc_v2, &p, sizeof p);
    } else {
        p = loom_dl_sym(d->dl, "cuGetProcAddress");
        if (!p) {
            loom_dl_close(d->dl);
            d->dl = NULL;
            return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                                "the CUDA driver in %s has no "
                                "cuGetProcAddress (older than 11.3)",
                                DRIVER_LIB);
        }
        memcpy(&d->get_proc_v1, &p, sizeof p);
    }
    RESOLVE(d, d->init, "cuInit");
    RESOLVE(d, d->driverGetVersion, "cuDriverGetVersion");
    RESOLVE(d, d->deviceGetCount, "cuDeviceGetCount");
    RESOLVE(d, d->deviceGet, "cuDeviceGet");
    RESOLVE(d, d->deviceGetName, "cuDeviceGetName");
    RESOLVE(d, d->deviceGetAttribute, "cuDeviceGetAttribute");
    RESOLVE(d, d->deviceTotalMem, "cuDeviceTotalMem");
    RESOLVE(d, d->primaryCtxRetain, "cuDevicePrimaryCtxRetain");
    RESOLVE(d, d->primaryCtxRelease, "cuDevicePrimaryCtxRelease");
    RESOLVE(d, d->streamCreate, "cuStreamCreate");
    RESOLVE(d, d->streamDestroy, "cuStreamDestroy");
    RESOLVE(d, d->memAlloc, "cuMemAlloc");
    RESOLVE(d, d->memFree, "cuMemFree");
    RESOLVE(d, d->getErrorName, "cuGetErrorName");
    RESOLVE(d, d->getErrorString, "cuGetErrorString");
    const char *missing = !d->init                 ? "cuInit"
                          : !d->driverGetVersion   ? "cuDriverGetVersion"
                          : !d->deviceGetCount     ? "cuDeviceGetCount"
                          : !d->deviceGet          ? "cuDeviceGet"
                          : !d->deviceGetName      ? "cuDeviceGetName"
                          : !d->deviceGetAttribute ? "cuDeviceGetAttribute"
                          : !d->deviceTotalMem     ? "cuDeviceTotalMem"
                          : !d->primaryCtxRetain   ? "cuDevicePrimaryCtxRetain"
                          : !d->primaryCtxRelease  ? "cuDevicePrimaryCtxRelease"
                          : !d->streamCreate       ? "cuStreamCreate"
                          : !d->streamDestroy      ? "cuStreamDestroy"
                          : !d->memAlloc           ? "cuMemAlloc"
                          : !d->memFree            ? "cuMemFree"
                                                   : NULL;
    if (missing) {
        /* a stub library answers every lookup with an error: name it */
        loom_status st =
            loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                         "the CUDA driver %s gives no %s at API version %d "
                         "(cuGetProcAddress: CUresult %d)",
                         DRIVER_LIB, missing, LOOM_CUDA_DRIVER_VERSION,
                         (int)d->first_failure);
        loom_dl_close(d->dl);
        d->dl = NULL;
        return st;
    }
    return LOOM_OK;
}

/* The driver is not unloaded once initialised: it leaves threads and exit
 * handlers of its own behind, which must not outlive its code. Its handle
 * (a few bytes) stays open with it, to the process's end. */
static void driver_close(driver *d, int initialised)
{
    if (!initialised)
        loom_dl_close(d->dl);
    d->dl = NULL;
}

/* cuInit, the version check and device 0: the facts every open reads. */
static loom_status device_facts(driver *d, loom_cuda_facts *f, loom_err *err)
{
    loom_cu_result r = d->init(0);
    if (r == CUDA_ERROR_NO_DEVICE)
        return loom_err_set(err, LOOM_ERR_NOT_FOUND,
                            "no CUDA device (cuInit: %s)", name_of(d, r));
    if (r != 0)
        return fail(d, r, "cuInit", err);
    if ((r = d->driverGetVersion(&f->driver_version)) != 0)
        return fail(d, r, "cuDriverGetVersion", err);
    if (f->driver_version < LOOM_CUDA_DRIVER_VERSION)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "the CUDA driver is %d.%d; loom needs %d.%d",
                            f->driver_version / 1000,
                            f->driver_version % 1000 / 10,
                            LOOM_CUDA_DRIVER_VERSION / 1000,
                            LOOM_CUDA_DRIVER_VERSION % 1000 / 10);
    int n = 0;
    if ((r = d->deviceGetCount(&n)) != 0)
        return fail(d, r, "cuDeviceGetCount", err);
    if (n < 1)
        return loom_err_set(err, LOOM_ERR_NOT_FOUND, "no CUDA device");
    loom_cu_device dev;
    if ((r = d->deviceGet(&dev, 0)) != 0)
        return fail(d, r, "cuDeviceGet", err);
    if ((r = d->deviceGetName(f->name, (int)sizeof f->name, dev)) != 0)
        return fail(d, r, "cuDeviceGetName", err);
    size_t total = 0;
    if ((r = d->deviceTotalMem(&total, dev)) != 0)
        return fail(d, r, "cuDeviceTotalMem", err);
    f->total_bytes = total;
    if ((r = d->deviceGetAttribute(&f->cc_major, ATTR_CC_MAJOR, dev)) != 0 ||
        (r = d->deviceGetAttribute(&f->cc_minor, ATTR_CC_MINOR, dev)) != 0 ||
        (r = d->deviceGetAttribute(&f->sm_count, ATTR_SM_COUNT, dev)) != 0)
        return fail(d, r, "cuDeviceGetAttribute", err);
    return LOOM_OK;
}

loom_status loom_cuda_probe(loom_cuda_facts *out, loom_err *err)
{
    memset(out, 0, sizeof *out);
    driver d;
    loom_status st = driver_open(&d, err);
    if (st != LOOM_OK)
        return st;
    st = device_facts(&d, out, err);
    if (st != LOOM_OK)
        memset(out, 0, sizeof *out);
    driver_close(&d, 1);
    return st;
}

/* ---------------------------------------------------------------- table */

static const char *LOOM_CUDA_API t_error_name(const loom_cuda *cu,
                                              loom_cu_result r)
{
    return name_of(&rt_of(cu)->d, r);
}

static int LOOM_CUDA_API t_alloc(const loom_cuda *cu, loom_mem_use use,
                                 uint64_t bytes, loom_cu_ptr *ptr,
                                 loom_err *err)
{
    loom_cuda_runtime *rt = rt_of(cu);
    if ((int)use < 0 || use >= LOOM_MEM_USE_COUNT)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "cuda alloc: use %d is not a loom_mem_use",
                            (int)use);
    if (bytes == 0)
        return loom_err_set(err, LOOM_ERR_INVALID, "cuda alloc: 0 bytes for %s",
                            use_names[use]);
    /* reserve against the budget first, so concurrent callers never pass
     * it together */
    uint64_t held = atomic_fetch_add(&rt->held, bytes);
    if (held + bytes > rt->budget || held + bytes < held) {
        atomic_fetch_sub(&rt->held, bytes);
        return loom_err_set(err, LOOM_ERR_FULL,
                            "device memory: %llu bytes for %s would pass the "
                            "budget of %llu bytes (%llu held)",
                            (unsigned long long)bytes, use_names[use],
                            (unsigned long long)rt->budget,
                            (unsigned long long)held);
    }
    loom_cu_ptr p = 0;
    loom_cu_result r = rt->d.memAlloc(&p, (size_t)bytes);
    if (r != 0) {
        atomic_fetch_sub(&rt->held, bytes);
        loom_status st = fail(&rt->d, r, "cuMemAlloc", err);
        loom_err_prefix(err, "device memory: %llu bytes for %s",
                        (unsigned long long)bytes, use_names[use]);
        return st;
    }
    atomic_fetch_add(&rt->used[use], bytes);
    *ptr = p;
    return LOOM_OK;
}

static void LOOM_CUDA_API t_free(const loom_cuda *cu, loom_mem_use use,
                                 loom_cu_ptr ptr, uint64_t bytes)
{
    loom_cuda_runtime *rt = rt_of(cu);
    if (!ptr || (int)use < 0 || use >= LOOM_MEM_USE_COUNT)
        return;
    loom_cu_result r = rt->d.memFree(ptr);
    if (r != 0)
        loom_log(LOOM_LOG_ERROR, "cuda: cuMemFree of %llu bytes for %s: %s",
                 (unsigned long long)bytes, use_names[use], name_of(&rt->d, r));
    atomic_fetch_sub(&rt->used[use], bytes);
    atomic_fetch_sub(&rt->held, bytes);
}

static uint64_t LOOM_CUDA_API t_used(const loom_cuda *cu, loom_mem_use use)
{
    loom_cuda_runtime *rt = rt_of(cu);
    if (use == LOOM_MEM_USE_COUNT)
        return atomic_load(&rt->held);
    if ((int)use < 0 || use > LOOM_MEM_USE_COUNT)
        return 0;
    return atomic_load(&rt->used[use]);
}

static int LOOM_CUDA_API t_gemm_bf16(const loom_cuda *cu, int32_t m, int32_t n,
                                     int32_t k, loom_cu_ptr a, loom_cu_ptr b,
                                     loom_cu_ptr d, int32_t ldd, float beta,
                                     loom_err *err)
{
    return loom__gemm_bf16(&rt_of(cu)->gemm, cu, m, n, k, a, b, d, ldd, beta,
                           err);
}

/* The table's driver entry points; NULL for the optional ones the driver
 * lacks, and then an error for the required ones. */
static loom_status resolve_table(loom_cuda_runtime *rt, loom_err *err)
{
    driver *d = &rt->d;
    loom_cuda *t = &rt->t;
    RESOLVE(d, t->ctxSetCurrent, "cuCtxSetCurrent");
    RESOLVE(d, t->ctxSynchronize, "cuCtxSynchronize");
    RESOLVE(d, t->memGetInfo, "cuMemGetInfo");
    RESOLVE(d, t->memcpyHtoDAsync, "cuMemcpyHtoDAsync");
    RESOLVE(d, t->memcpyDtoHAsync, "cuMemcpyDtoHAsync");
    RESOLVE(d, t->memcpyDtoDAsync, "cuMemcpyDtoDAsync");
    RESOLVE(d, t->memsetD8Async, "cuMemsetD8Async");
    RESOLVE(d, t->memsetD32Async, "cuMemsetD32Async");
    RESOLVE(d, t->memAllocHost, "cuMemAllocHost");
    RESOLVE(d, t->memFreeHost, "cuMemFreeHost");
    RESOLVE(d, t->moduleLoadData, "cuModuleLoadData");
    RESOLVE(d, t->moduleUnload, "cuModuleUnload");
    RESOLVE(d, t->moduleGetFunction, "cuModuleGetFunction");
    RESOLVE(d, t->moduleGetGlobal, "cuModuleGetGlobal");
    RESOLVE(d, t->funcSetAttribute, "cuFuncSetAttribute");
    RESOLVE(d, t->funcGetAttribute, "cuFuncGetAttribute");
    RESOLVE(d, t->launchKernel, "cuLaunchKernel");
    RESOLVE(d, t->launchKernelEx, "cuLaunchKernelEx");
    RESOLVE(d, t->occupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters");
    RESOLVE(d, t->tensorMapEncodeTiled, "cuTensorMapEncodeTiled");
    RESOLVE(d, t->streamSynchronize, "cuStreamSynchronize");
    RESOLVE(d, t->streamWaitEvent, "cuStreamWaitEvent");
    RESOLVE(d, t->eventCreate, "cuEventCreate");
    RESOLVE(d, t->eventDestroy, "cuEventDestroy");
    RESOLVE(d, t->eventRecord, "cuEventRecord");
    RESOLVE(d, t->eventSynchronize, "cuEventSynchronize");
    RESOLVE(d, t->eventElapsedTime, "cuEventElapsedTime");
    RESOLVE(d, t->streamBeginCapture, "cuStreamBeginCapture");
    RESOLVE(d, t->streamEndCapture, "cuStreamEndCapture");
    RESOLVE(d, t->graphInstantiate, "cuGraphInstantiate");
    RESOLVE(d, t->graphLaunch, "cuGraphLaunch");
    RESOLVE(d, t->graphExecDestroy, "cuGraphExecDestroy");
    RESOLVE(d, t->graphDestroy, "cuGraphDestroy");
    /* every member but launchKernelEx, occupancyMaxActiveClusters and
     * tensorMapEncodeTiled is required */
    static const struct {
        size_t off;
        const char *name;
    } req[] = {
#define REQ(m, n) {offsetof(loom_cuda, m), n}
        REQ(ctxSetCurrent, "cuCtxSetCurrent"),
        REQ(ctxSynchronize, "cuCtxSynchronize"),
        REQ(memGetInfo, "cuMemGetInfo"),
        REQ(memcpyHtoDAsync, "cuMemcpyHtoDAsync"),
        REQ(memcpyDtoHAsync, "cuMemcpyDtoHAsync"),
        REQ(memcpyDtoDAsync, "cuMemcpyDtoDAsync"),
        REQ(memsetD8Async, "cuMemsetD8Async"),
        REQ(memsetD32Async, "cuMemsetD32Async"),
        REQ(memAllocHost, "cuMemAllocHost"),
        REQ(memFreeHost, "cuMemFreeHost"),
        REQ(moduleLoadData, "cuModuleLoadData"),
        REQ(moduleUnload, "cuModuleUnload"),
        REQ(moduleGetFunction, "cuModuleGetFunction"),
        REQ(moduleGetGlobal, "cuModuleGetGlobal"),
        REQ(funcSetAttribute, "cuFuncSetAttribute"),
        REQ(funcGetAttribute, "cuFuncGetAttribute"),
        REQ(launchKernel, "cuLaunchKernel"),
        REQ(streamSynchronize, "cuStreamSynchronize"),
        REQ(streamWaitEvent, "cuStreamWaitEvent"),
        REQ(eventCreate, "cuEventCreate"),
        REQ(eventDestroy, "cuEventDestroy"),
        REQ(eventRecord, "cuEventRecord"),
        REQ(eventSynchronize, "cuEventSynchronize"),
        REQ(eventElapsedTime, "cuEventElapsedTime"),
        REQ(streamBeginCapture, "cuStreamBeginCapture"),
        REQ(streamEndCapture, "cuStreamEndCapture"),
        REQ(graphInstantiate, "cuGraphInstantiate"),
        REQ(graphLaunch, "cuGraphLaunch"),
        REQ(graphExecDestroy, "cuGraphExecDestroy"),
        REQ(graphDestroy, "cuGraphDestroy"),
#undef REQ
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        void *p;
        memcpy(&p, (const char *)t + req[i].off, sizeof p);
        if (!p)
            return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                                "the CUDA driver lacks %s at API version %d",
                                req[i].name, LOOM_CUDA_DRIVER_VERSION);
    }
    return LOOM_OK;
}

/* ---------------------------------------------------------------- open */

loom_status loom_cuda_open(double memory, loom_cuda_runtime **out,
                           loom_err *err)
{
    if (!(memory >= 0.0))
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "--gpu-memory %g: must be a fraction in (0, 1] or "
                            "a byte count",
                            memory);
    loom_cuda_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return loom_err_set(err, LOOM_ERR_NOMEM, "cuda: out of memory");
    loom_status st = driver_open(&rt->d, err);
    if (st != LOOM_OK) {
        free(rt);
        return st;
    }
    loom_cuda_facts f;
    memset(&f, 0, sizeof f);
    st = device_facts(&rt->d, &f, err);
    if (st == LOOM_OK)
        st = resolve_table(rt, err);
    if (st != LOOM_OK) {
        driver_close(&rt->d, 1);
        free(rt);
        return st;
    }
    loom_cuda *t = &rt->t;
    t->struct_size = sizeof *t;
    t->version = LOOM_CUDA_DRIVER_VERSION;
    memcpy(t->name, f.name, sizeof t->name);
    t->name[sizeof t->name - 1] = 0;
    t->cc_major = f.cc_major;
    t->cc_minor = f.cc_minor;
    t->sm_count = f.sm_count;
    t->driver_version = f.driver_version;
    t->total_bytes = f.total_bytes;
    t->alloc = t_alloc;
    t->free = t_free;
    t->used = t_used;
    t->error_name = t_error_name;
    t->gemm_bf16 = t_gemm_bf16;
    loom_cu_result r;
    driver *d = &rt->d;
    int l2 = 0, optin = 0;
    if ((r = d->deviceGet(&t->device, 0)) != 0 ||
        (r = d->deviceGetAttribute(&l2, ATTR_L2_BYTES, t->device)) != 0 ||
        (r = d->deviceGetAttribute(&optin, ATTR_SMEM_OPTIN, t->device)) != 0) {
        st = fail(d, r, "cuDeviceGetAttribute", err);
        goto fail;
    }
    t->l2_bytes = (uint64_t)l2;
    t->smem_per_block_optin = (uint64_t)optin;
    if (memory == 0.0)
        rt->budget = t->total_bytes / 10 * 9;
    else if (memory <= 1.0)
        rt->budget = (uint64_t)(memory * (double)t->total_bytes);
    else
        rt->budget = (uint64_t)memory;
    if ((r = d->primaryCtxRetain(&t->context, t->device)) != 0) {
        st = fail(d, r, "cuDevicePrimaryCtxRetain", err);
        goto fail;
    }
    rt->retained = 1;
    if ((r = t->ctxSetCurrent(t->context)) != 0) {
        st = fail(d, r, "cuCtxSetCurrent", err);
        goto fail;
    }
    if ((r = d->streamCreate(&t->stream, CU_STREAM_NON_BLOCKING)) != 0) {
        st = fail(d, r, "cuStreamCreate", err);
        goto fail;
    }
    *out = rt;
    return LOOM_OK;
fail:
    loom_cuda_close(rt);
    return st;
}

void loom_cuda_close(loom_cuda_runtime *rt)
{
    if (!rt)
        return;
    loom_cuda *t = &rt->t;
    uint64_t held = atomic_load(&rt->held);
    if (held)
        loom_log(LOOM_LOG_ERROR,
                 "cuda: closing with %llu device bytes still accounted "
                 "(weights %llu, cache %llu, scratch %llu, graphs %llu, "
                 "drafter %llu)",
                 (unsigned long long)held,
                 (unsigned long long)atomic_load(&rt->used[0]),
                 (unsigned long long)atomic_load(&rt->used[1]),
                 (unsigned long long)atomic_load(&rt->used[2]),
                 (unsigned long long)atomic_load(&rt->used[3]),
                 (unsigned long long)atomic_load(&rt->used[4]));
    if (t->context && t->ctxSetCurrent)
        t->ctxSetCurrent(t->context);
    if (t->stream)
        t->streamSynchronize(t->stream);
    /* once the stream has drained what it launched */
    loom__gemm_close(rt->gemm);
    if (t->stream)
        rt->d.streamDestroy(t->stream);
    if (rt->retained) {
        /* not current anywhere once released */
        t->ctxSetCurrent(NULL);
        rt->d.primaryCtxRelease(t->device);
    }
    driver_close(&rt->d, 1);
    free(rt);
}

const loom_cuda *loom_cuda_table(const loom_cuda_runtime *rt)
{
    return rt ? &rt->t : NULL;
}

uint64_t loom_cuda_budget(const loom_cuda_runtime *rt)
{
    return rt ? rt->budget : 0;
}

loom_status loom_cuda_make_current(const loom_cuda_runtime *rt, loom_err *err)
{
    loom_cu_result r = rt->t.ctxSetCurrent(rt->t.context);
    return r ? fail(&rt->d, r, "cuCtxSetCurrent", err) : LOOM_OK;
}

loom_status loom_cuda_check(const loom_cuda *cu, loom_cu_result r,
                            const char *what, loom_err *err)
{
    if (r == 0)
        return LOOM_OK;
    return fail(&rt_of(cu)->d, r, what, err);
}

int loom_cuda_parse_memory(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v > 0.0))
        return -1;
    if (*end == 0) {
        /* a fraction, or a whole number of bytes */
        if (v > 1.0 && v != (double)(uint64_t)v)
            return -1;
        *out = v;
        return 0;
    }
    double scale = 0.0;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        scale = 1024.0;
        break;
    case 'M':
        scale = 1024.0 * 1024.0;
        break;
    case 'G':
        scale = 1024.0 * 1024.0 * 1024.0;
        break;
    case 'T':
        scale = 1024.0 * 1024.0 * 1024.0 * 1024.0;
        break;
    default:
        return -1;
    }
    end++;
    if (*end == 'i' || *end == 'I')
        end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end)
        return -1;
    v *= scale;
    if (v <= 1.0)
        return -1;
    *out = v;
    return 0;
}
