/* Internal declarations shared by the files of the Qwen3.5 / Qwen3-Next
 * family plugin: geometry, bound weights, the stream cache and the model. */
#ifndef QWEN35_H
#define QWEN35_H

#include <loom/cpu_ops.h>
#include <loom/plugin.h>
#include <loom/round_plan.h>
#include <loom/window.h>

#define Q35_MAX_LAYERS 512

typedef enum q35_variant {
    Q35_VARIANT_QWEN35 = 0, /* split in_proj_qkv / z / b / a */
    Q35_VARIANT_NEXT = 1    /* fused in_proj_qkvz / ba, grouped by key head */
} q35_variant;

/* Everything config.json says about the text model. */
typedef struct q35_geometry {
    q35_variant variant;
    int nested; /* text fields under text_config */
    int64_t vocab, hidden, ffn, n_layers;
    int64_t n_heads, n_kv_heads, head_dim, rot_dim;
    double partial_rotary, rope_theta;
    int64_t lin_k_heads, lin_v_heads, lin_dk, lin_dv, conv_kernel;
    double eps;
    int tied;
    int64_t max_pos;
    /* MoE (Qwen3-Next, Qwen3.5-MoE): 0 experts means every layer has a
     * dense MLP */
    int64_t n_experts, top_k, moe_ffn, shared_ffn;
    int norm_topk;
    int qwen35_moe; /* qwen3_5_moe(_text): every layer sparse, renormalised */
    char moe_layer[Q35_MAX_LAYERS]; /* 1: layer i has the MoE block */
    char kinds[Q35_MAX_LAYERS + 1]; /* 'L' linear attention, 'A' attention */
    int32_t n_eos;
    int32_t eos[LOOM_MAX_EOS];
} q35_geometry;

/* derived widths */
static inline int64_t q35_key_dim(const q35_geometry *g)
{
    return g->lin_k_heads * g->lin_dk;
}
static inline int64_t q35_value_dim(const q35_geometry *g)
{
    return g->lin_v_heads * g->lin_dv;
}
static inline int64_t q35_conv_dim(const q35_geometry *g)
{
    return 2 * q35_key_dim(g) + q35_value_dim(g);
}

/* Parses config.json (and generation_config.json for eos ids). Refuses with
 * LOOM_ERR_FORMAT naming the field and its value. */
loom_status q35_geometry_parse(const loom_host *host,
                               const loom_checkpoint *ckpt, q35_geometry *g,
                               loom_err *err);
/* Reports every field of g through `out`. */
void q35_geometry_report(const q35_geometry *g, const loom_fields *out);

typedef struct q35_expert {
    loom_weight gate, up, down;
} q35_expert;

typedef enum q35_expert_layout {
    Q35_EXPERTS_NONE = 0,
    Q35_EXPERTS_PER_EXPERT = 1, /* mlp.experts.N.{gate,up,down}_proj.weight */
    Q35_EXPERTS_FUSED = 2       /* mlp.experts.gate_up_proj [E, 2F, H],
                                 * mlp.experts.down_proj [E, H, F] */
} q35_expert_layout;

typedef struct q35_layer {
    char kind;                  /* 'L' or 'A' */
    float *in_norm, *post_norm; /* [hidden], effective multipliers */
    /* full attention */
    loom_weight q_proj, k_proj, v_proj, o_proj;
    float *q_norm, *k_norm; /* [head_dim], effective multipliers */
    /* Gated DeltaNet */
    loom_weight in_qkv, in_z, in_b, in_a; /* Qwen3.5 */
    loom_weight in_qkvz, in_ba;           /* Qwen3-Next */
    loom_weight out_proj;
    float *conv_w;  /* [conv_dim, K] */
    float *neg_a;   /* [Hv] -exp(A_log) */
    float *dt_bias; /* [Hv] */
    float *gnorm;   /* [dv] plain weight of the gated norm */
    /* dense MLP */
    loom_weight gate, up, down;
    /* MoE */
    int moe;
    q35_expert_layout layout;
    loom_weight router;                             /* [E, hidden] */
    q35_expert *experts;                            /* [E], views when fused */
    loom_weight sh_gate, sh_up, sh_down, sh_gate_w; /* shared expert */
} q35_layer;

typedef struct q35_weights {
    loom_weight embed;   /* [vocab, hidden] */
    loom_weight lm_head; /* == embed when tied */
    float *norm;         /* [hidden], effective multiplier */
    q35_layer *layers;
    int norms_shifted; /* MLX files carry 1 + w already */
    void *resident;    /* the linear weights, copied out of the mapping */
    int64_t resident_bytes;
    size_t resident_alloc; /* bytes from host->alloc_resident, 0: malloc */
    const loom_host *host; /* for the accounting of `resident` */
} q35_weights;

/* Weight bytes one decode step reads (loom_model_info's field). */
uint64_t q35_weight_bytes_per_token(q35_weights *w, const q35_geometry *g);

/* Binds every tensor named by g, checking shapes. On failure nothing is
 * left allocated. */
loom_status q35_weights_bind(const loom_host *host, const loom_checkpoint *ckpt,
                             const q35_geometry *g, q35_weights *w,
                             loom_err *err);
void q35_weights_free(q35_weights *w);

/* What one speculative row leaves in the replay log of one GDN layer:
 * the conv input (pre-activation), and the recurrence inputs. */
typedef struct q35_log_layout {
    int64_t conv;  /* offset of conv input [conv_dim] */
    int64_t k;     /* [Hk*dk], l2-normalised */
    int64_t v;     /* [Hv*dv] */
    int64_t decay; /* [Hv] exp(g) */
    int64_t beta;  /* [Hv] */
    int64_t size;  /* floats per row per layer */
} q35_log_layout;

struct loom_cache {
    int64_t len;     /* positions fed */
    loom_cpu_kv *kv; /* [n_attn] */
    float *conv;     /* [n_lin][(K-1) * conv_dim] oldest first */
    float *state;    /* [n_lin][Hv][dk][dv] fp32 recurrent state */
    int accounted;   /* its fixed bytes are in the host's account */
    /* speculation (see cache.c): the snapshot is conv's then state's
     * [n_lin] copies, a log row is [n_lin][log.size] floats */
    loom_window win;
    struct q35_gpu_cache *gpu; /* the device state (gpu_cache.c), or NULL */
};

/* The MoE block's buffers (moe.c), grown with the other activations. */
typedef struct q35_moe_scratch {
    int64_t rows;     /* capacity in rows */
    float *prob;      /* [R, E] router probabilities */
    int32_t *sel;     /* [R, top_k] chosen experts */
    float *sel_w;     /* [R, top_k] their weights */
    int32_t *start;   /* [E + 1] each expert's first entry in order */
    int32_t *order;   /* [R * top_k] choices grouped by expert */
    int32_t *work;    /* [R, E] top-k scratch */
    float *gx, *gout; /* [R, hidden] gathered rows, expert out */
    float *shg;       /* [R] shared expert gate logit */
} q35_moe_scratch;

typedef struct q35_scratch {
    int64_t rows;              /* capacity in rows */
    float *h, *xn, *proj;      /* [R, hidden] */
    float *big0, *big1, *big2; /* [R, big] */
    float *conv_out;           /* [R, conv_dim] */
    float *o;                  /* [R, max(value_dim, nh*hd)] */
    float *z, *b, *a;          /* [R, value_dim], [R, Hv], [R, Hv] */
    float *decay, *beta;       /* [R, Hv] */
    uint8_t *prompt;           /* [R] rows of prompt chunks (cpu_ops.h) */
    int32_t n_slots;           /* host->n_threads: q35_gdn_chunk's slots */
    float *chunk_work;         /* [n_slots] q35_gdn_chunk work buffers */
    q35_moe_scratch moe;
    int64_t big;
} q35_scratch;

struct loom_model {
    const loom_host *host;
    const loom_checkpoint *ckpt;
    q35_geometry g;
    q35_weights w;
    int n_lin, n_attn;
    int *slot;       /* layer -> index among its kind */
    float *inv_freq; /* [rot_dim / 2] */
    int32_t n_taps;  /* layers whose outputs LOOM_ROW_TAP rows copy */
    int32_t *taps;   /* [n_taps] layer ids, set through loom.target/1 */
    q35_log_layout log;
    int32_t max_rows;
    int64_t max_context;
    q35_scratch s;
    loom_plan_rules rules; /* what a round may hold */
    loom_round_plan plan;  /* the round's rows by cache, grown as needed */
    struct q35_gpu *gpu;   /* the CUDA path (gpu.c), or NULL on the CPU */
};

/* stream cache (cache.c); the LOOM_ABI functions fill the family vtable */
loom_status LOOM_ABI q35_cache_new(loom_model *m, loom_cache **out,
                                   loom_err *err);
void LOOM_ABI q35_cache_reset(loom_model *m, loom_cache *c);
void LOOM_ABI q35_cache_free(loom_model *m, loom_cache *c);
/* dst becomes an exact copy of src (ABI 2.2's cache_copy); LOOM_ERR_STATE
 * when src has an open window. */
loom_status LOOM_ABI q35_cache_copy(loom_model *m, loom_cache *dst,
                                    const loom_cache *src, loom_err *err);
loom_status LOOM_ABI q35_commit(loom_model *m, loom_cache *c, int32_t kept,
                                loom_err *err);
uint64_t q35_cache_fixed_bytes(const loom_model *m);
uint64_t q35_cache_token_bytes(const loom_model *m);
/* Positions fed (the round plan's view of a cache). */
int64_t q35_cache_len(const loom_cache *c);
/* Makes room for a stream's rows of a round (K/V rows, the window's log and
 * snapshot) before a forward changes anything. */
loom_status q35_cache_prepare(loom_model *m, const loom_plan_stream *s,
                              loom_err *err);
/* The replay-log slot of speculative row `i` (0-based since the snapshot)
 * for GDN layer slot `l`. */
float *q35_cache_log(const loom_model *m, loom_cache *c, int32_t i, int l);
/* GDN layer slot `l`'s conv tail and state in the window's snapshot. */
float *q35_cache_snap_conv(const loom_model *m, loom_cache *c, int l);
float *q35_cache_snap_state(const loom_model *m, loom_cache *c, int l);

/* One delta-rule step (gdn.c) of value head state S [dk, dv]:
 * S *= decay; d = (v - S^T k) * beta; S += k d^T; o = S^T q (when q).
 * tmp: dv floats. */
void q35_gdn_step(float *S, const float *q, const float *k, const float *v,
                  float decay, float beta, float *o, int64_t dk, int64_t dv,
                  float *tmp);

/* n consecutive rows of one value head for q35_gdn_chunk: row t's q, k and
 * v (q, k l2-normalised, q scaled by dk^-0.5) at q + t * ld_qkv, ..., its
 * decay exp(g) and beta at decay + t * ld_db, ..., its output at
 * o + t * ld_o. */
typedef struct q35_gdn_rows {
    int64_t n;
    const float *q, *k, *v;
    int64_t ld_qkv;
    const float *decay, *beta;
    int64_t ld_db;
    float *o;
    int64_t ld_o;
} q35_gdn_rows;

/* Rows a block of q35_gdn_chunk (gdn_chunk.c) advances the state by: 32
 * rather than the GPU's 64, as on 128 x 128 heads the terms among a block's
 * rows (C^2 per head and block) cost more than fewer blocks save (2-core
 * AVX-512, 512-row prefill of the 0.8B shapes: 0.216-0.225 s in the
 * recurrences and their norms at 32, 0.231-0.242 s at 64). */
#define Q35_GDN_CHUNK 32
/* Whether q35_gdn_chunk has its wide (AVX2, AVX-512) products here: on four
 * lanes it is slower than row steps (3.8-4.7 against 1.9-2.6 us a row for
 * a 128 x 128 head, one thread of the development machine). */
int q35_gdn_chunk_fast(void);
/* Floats of the work buffer q35_gdn_chunk takes for dk, dv. */
int64_t q35_gdn_chunk_floats(int64_t dk, int64_t dv);
/* The delta rule over x's rows from state S [dk, dv], in blocks of
 * Q35_GDN_CHUNK rows (the chunkwise form: for prompt chunks, within
 * rounding of q35_gdn_step row by row): each row's output o = S^T q, S
 * advanced past the last row. work: q35_gdn_chunk_floats(dk, dv) floats. */
void q35_gdn_chunk(float *S, const q35_gdn_rows *x, int64_t dk, int64_t dv,
                   float *work);

/* the MoE block (moe.c) */
/* Binds layer lp's router, experts (either layout) and shared expert. */
loom_status q35_moe_bind(const loom_host *host, const loom_checkpoint *ckpt,
                         const char *prefix, const q35_geometry *g,
                         const char *lp, q35_layer *L, loom_err *err);
/* Weight bytes one token reads in an MoE layer: router, shared expert and
 * top_k experts. */
uint64_t q35_moe_bytes_per_token(const q35_layer *L, const q35_geometry *g);
/* Grows s to `rows` rows; on failure s is unchanged. */
loom_status q35_moe_reserve(q35_moe_scratch *s, const q35_geometry *g,
                            int64_t rows, loom_err *err);
void q35_moe_scratch_free(q35_moe_scratch *s);
/* proj[T, hidden] = the MoE block of xn[T, hidden]; uses big0 and big1. */
void q35_moe_forward(loom_model *m, const q35_layer *L, const float *xn,
                     float *proj, int64_t T);

/* the forward (cpu.c) */
loom_status LOOM_ABI q35_forward(loom_model *m, const loom_round *round,
                                 const loom_output *out, loom_err *err);
void q35_scratch_free(q35_scratch *s);

/* model lifetime (model.c) */
loom_status LOOM_ABI q35_open(const loom_host *host,
                              const loom_checkpoint *ckpt,
                              const loom_model_options *opt, loom_model **out,
                              loom_err *err);
void LOOM_ABI q35_close(loom_model *m);
void LOOM_ABI q35_describe(const loom_model *m, loom_model_info *info);

/* the loom.target/1 extension (target.c): its vtable for LOOM_TARGET_ID */
const void *LOOM_ABI q35_get_extension(const loom_model *m, const char *id);

/* probe (probe.c) */
int32_t LOOM_ABI q35_probe(const loom_host *host, const loom_checkpoint *ckpt);

#endif
