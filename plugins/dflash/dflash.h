/* DFlash drafter plugin: internal declarations shared by its files. */
#ifndef DFLASH_H
#define DFLASH_H

#include <loom/cpu_ops.h>
#include <loom/plugin.h>

#define DFLASH_MAX_TAPS   64
#define DFLASH_MAX_LAYERS 64

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
    int32_t n_taps;          /* 0: not given, the default comes at open */
    int32_t taps[DFLASH_MAX_TAPS];
    /* per layer: block rows see only earlier positions / a window (0: none) */
    uint8_t causal[DFLASH_MAX_LAYERS];
    int32_t window[DFLASH_MAX_LAYERS];
    double rms_eps;
    double rope_theta;
    int64_t max_position;
} dflash_geometry;

/* One decoder layer's weights: linear ones point into the checkpoint's
 * mapping, the norms are float32 copies. */
typedef struct dflash_layer {
    float *in_norm, *post_norm; /* [hidden] */
    float *q_norm, *k_norm;     /* [head_dim] */
    loom_weight q, k, v, o;
    loom_weight gate, up, down;
} dflash_layer;

typedef struct dflash_weights {
    loom_weight fc;     /* [hidden, n_taps * target_hidden] */
    float *hidden_norm; /* [hidden] */
    float *norm;        /* [hidden] */
    dflash_layer layers[DFLASH_MAX_LAYERS];
} dflash_weights;

/* An opened drafter, bound to the target it drafts for. */
struct loom_drafter {
    const loom_host *host;
    dflash_geometry g;
    dflash_weights w;
    loom_model *target;       /* the target model, through ext only */
    const loom_target_i *ext; /* its loom.target/1 */
    float *inv_freq;          /* [head_dim / 2] */
    char path[512];           /* the drafter checkpoint, for messages */
};

/* One stream's context: each layer's K/V of the absorbed target features,
 * at their positions (0..len). Block rows never stay here. */
struct loom_draft_stream {
    loom_cpu_kv kv[DFLASH_MAX_LAYERS];
    int64_t len;
    int64_t accounted; /* bytes reported to the host (LOOM_MEM_DRAFTER) */
};

int32_t LOOM_ABI dflash_probe(const loom_host *host,
                              const loom_checkpoint *ckpt);
/* The config's geometry; without target_layer_ids the default taps come from
 * num_target_layers, or, when that is absent too, from n_target_layers (0:
 * left for open). */
loom_status dflash_parse_geometry(const loom_host *host,
                                  const loom_checkpoint *ckpt,
                                  int32_t n_target_layers, dflash_geometry *g,
                                  loom_err *err);

/* Binds the tensors of ckpt to w, every shape checked against g. */
loom_status dflash_weights_bind(const loom_host *host,
                                const loom_checkpoint *ckpt,
                                const dflash_geometry *g, dflash_weights *w,
                                loom_err *err);
void dflash_weights_free(dflash_weights *w, const dflash_geometry *g);

/* c[i] = hidden_norm(fc(features[i])) for n rows of n_taps*target_hidden. */
void dflash_fuse(const loom_drafter *d, const float *features, int64_t n,
                 float *c);
/* Layer l's context K and V of fused rows c[0..n) at positions pos[0..n):
 * k = RoPE(k_norm(k_proj(c))), v = v_proj(c), each [n, n_kv_heads*head_dim]. */
void dflash_context_kv(const loom_drafter *d, int32_t l, const float *c,
                       const int32_t *pos, int64_t n, float *k, float *v);
/* The block forward of n_streams streams: x [n_streams*B, hidden] holds the
 * embedded blocks, stream i's at positions streams[i]->len .. + B; on return
 * x holds the final-normed hidden rows. Each store must have room for
 * len + B positions. */
loom_status dflash_block_forward(const loom_drafter *d,
                                 loom_draft_stream *const *streams,
                                 int32_t n_streams, float *x, loom_err *err);

/* Streams (stream.c). */
loom_status dflash_stream_new(loom_drafter *d, loom_draft_stream **s,
                              loom_err *err);
void dflash_stream_free(loom_drafter *d, loom_draft_stream *s);
loom_status dflash_absorb(loom_drafter *d, loom_draft_stream *s,
                          const loom_view *features, const int32_t *positions,
                          int32_t n, loom_err *err);
loom_status dflash_draft(loom_drafter *d, loom_draft_stream *const *streams,
                         const int32_t *last, int32_t n_streams,
                         const loom_proposals *out, loom_err *err);

extern const loom_drafter_i dflash_drafter_i;

#endif
