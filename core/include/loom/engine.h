/* An opened model: checkpoint + the family plugin chosen for it + its loaded
 * weights, with the host table and thread pool they use, and the drafter
 * that speculates for it when one is asked for. What the CLI, the lane and
 * the server hold. */
#ifndef LOOM_ENGINE_H
#define LOOM_ENGINE_H

#include <loom/checkpoint.h>
#include <loom/cuda_runtime.h>
#include <loom/drafter.h>
#include <loom/family.h>
#include <loom/host.h>
#include <loom/pool.h>
#include <loom/registry.h>

typedef struct loom_engine_params {
    const char *model;              /* directory or hub id */
    const char *family;             /* force a family by name, or NULL */
    const char *const *plugin_dirs; /* --plugin-path, searched first */
    int n_plugin_dirs;
    int device;          /* loom_device_kind */
    int n_threads;       /* <= 0: one per CPU */
    int64_t max_context; /* 0: the model's */
    int32_t max_rows;    /* 0: 512 */
    /* streams alive at once (--parallel), for the model's cache pool; 0:
     * the family's default */
    int32_t max_streams;
    /* --gpu-memory: 0 default (90%), (0, 1] a fraction, > 1 bytes */
    double gpu_memory;
    /* a drafter checkpoint directory, or a drafter plugin's name with its
     * options ("ngram", "ngram:n=3,k=8"); NULL: none */
    const char *drafter;
    const char *drafter_plugin; /* force a drafter plugin by name, or NULL */
    /* When set, the weights are read in once before the family opens the
     * model, with progress (bytes read of the total) reported as they are. */
    void (*progress)(void *user, uint64_t done, uint64_t total);
    void *progress_user;
} loom_engine_params;

/* engine->pin when the family copied its weights out of the mapping. */
#define LOOM_ENGINE_PIN_FAMILY_COPY (-1)

typedef struct loom_engine {
    loom_pool *pool;
    loom_host_state hs;
    loom_registry *registry;
    loom_checkpoint *ckpt;
    const loom_plugin_ref *plugin;
    /* The family's dispatcher: every call into the plugin goes through it. */
    loom_family family;
    loom_model *model;
    loom_model_info info;
    loom_cuda_runtime *cuda; /* NULL: the CPU path, device_why says why */
    char device_why[512];

    /* The drafter opened for the model (params.drafter), else all NULL:
     * opened with the family's loom.target/1, closed before the model. */
    loom_checkpoint *drafter_ckpt;
    const loom_plugin_ref *drafter_plugin;
    loom_drafter_ref drafter_ref; /* the drafter's dispatcher */
    loom_drafter *drafter;
    loom_drafter_needs needs; /* taps, block size, mask token */
    loom_target target;       /* what the drafter was opened with */
    /* How the weights were kept resident (a loom_pin_kind, or
     * LOOM_ENGINE_PIN_FAMILY_COPY), and the bytes pinned. */
    int pin;
    uint64_t pin_bytes;
} loom_engine;

loom_status loom_engine_open(const loom_engine_params *params,
                             loom_engine **out, loom_err *err);
void loom_engine_close(loom_engine *engine);

#endif
