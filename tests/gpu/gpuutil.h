/* Helpers shared by the GPU suites: the probe that skips them where no
 * driver or device answers, an engine on a device, and the suite run in
 * this process. */
#ifndef LOOM_GPUUTIL_H
#define LOOM_GPUUTIL_H

#include <check.h>
#include <stdint.h>

#include <loom/cuda_runtime.h>
#include <loom/engine.h>

/* setenv / unsetenv where the C library has neither (the suites build on
 * Windows too; define _POSIX_C_SOURCE before any header for the others). */
#ifdef _WIN32
#define setenv(k, v, o) _putenv_s(k, v)
#define unsetenv(k)     _putenv_s(k, "")
#endif

/* The exit code ctest reads as "skipped" (SKIP_RETURN_CODE). */
#define GPU_SKIP 77

/* Probes the driver and a device: 1 with its facts in *facts (and the CPU
 * path, the suites' reference, set to its float32 prompt products), else 0
 * after printing "skipped: " and the cause. */
int gpu_probe(loom_cuda_facts *facts);

/* Runs s in this process: the probe initialised the driver here, and a
 * forked child could not use it. Returns the process exit code. */
int gpu_run_suite(Suite *s);

/* Opens an engine over checkpoint `dir` with this build's plugins on
 * `device`, two threads, `max_streams` (0: the default); the test fails
 * unless it opens, with plugin `plugin` claiming the model (NULL: any),
 * on `device`. */
loom_engine *gpu_open(const char *dir, int device, int32_t max_streams,
                      const char *plugin);

#endif
