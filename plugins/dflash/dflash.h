/* DFlash drafter plugin: internal declarations shared by its files. */
#ifndef DFLASH_H
#define DFLASH_H

#include <loom/plugin.h>

#define DFLASH_MAX_TAPS 64

/* The drafter's blueprint, from config.json. */
typedef struct dflash_geometry {
    int32_t hidden; /* draft hidden size */
    int32_t target_hidden;
    int32_t ffn;
    int32_t n_layers;
    int32_t n_heads, n_kv_heads, head_dim;
    int32_t vocab;
    int32_t block_size;
    int32_t mask_token;
    int32_t n_target_layers; /* 0 when the config does not say */
    int32_t n_taps;
    int32_t taps[DFLASH_MAX_TAPS];
    double rms_eps;
    double rope_theta;
    int64_t max_position;
} dflash_geometry;

int32_t LOOM_ABI dflash_probe(const loom_host *host,
                              const loom_checkpoint *ckpt);
loom_status dflash_parse_geometry(const loom_host *host,
                                  const loom_checkpoint *ckpt,
                                  dflash_geometry *g, loom_err *err);
extern const loom_drafter_i dflash_drafter_i;

#endif
