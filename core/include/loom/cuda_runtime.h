/* The core's CUDA runtime: the driver opened at run time, one device, its
 * context and stream, and the accounted memory behind the loom_cuda table
 * that plugins get from host->cuda(). */
#ifndef LOOM_CUDA_RUNTIME_H
#define LOOM_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include <loom/cuda.h>
#include <loom/status.h>

typedef struct loom_cuda_runtime loom_cuda_runtime;

/* What the device is, read without making a context (`loom plugins`,
 * `loom inspect`). */
typedef struct loom_cuda_facts {
    char name[256];
    int cc_major, cc_minor;
    int sm_count;
    int driver_version;
    uint64_t total_bytes;
} loom_cuda_facts;

/* Reads device 0's facts. On failure (no driver, no device, a driver too
 * old) returns the error with the reason in err and leaves *out zeroed. */
loom_status loom_cuda_probe(loom_cuda_facts *out, loom_err *err);

/* Opens device 0: retains its primary context, makes it current on the
 * calling thread, creates the engine's stream. `memory` is the budget of
 * accounted bytes: 0 for the default (90% of the device), in (0, 1] a
 * fraction of the device's memory, above 1 a byte count. On failure nothing
 * is left open and err says why (no driver, no device, ...). */
loom_status loom_cuda_open(double memory, loom_cuda_runtime **out,
                           loom_err *err);
/* Destroys the stream and releases the context. Every accounted byte must
 * have been freed first (a leak is logged as an error). NULL is accepted. */
void loom_cuda_close(loom_cuda_runtime *rt);

/* The table plugins get; valid until close. */
const loom_cuda *loom_cuda_table(const loom_cuda_runtime *rt);
/* The budget in bytes. */
uint64_t loom_cuda_budget(const loom_cuda_runtime *rt);
/* Makes the engine's context current on the calling thread. */
loom_status loom_cuda_make_current(const loom_cuda_runtime *rt, loom_err *err);
/* LOOM_ERR_DEVICE "what: CUDA_ERROR_NAME (text)" when r is not success. */
loom_status loom_cuda_check(const loom_cuda *cu, loom_cu_result r,
                            const char *what, loom_err *err);

/* Parses --gpu-memory: a byte count (suffixes K, M, G, T: powers of 1024)
 * or a fraction in (0, 1]. Returns 0 on success. */
int loom_cuda_parse_memory(const char *s, double *out);

#endif
