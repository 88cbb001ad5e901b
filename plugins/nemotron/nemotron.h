/* The Nemotron-H plugin's internal types: geometry parsed from config.json,
 * the bound weights, the loaded model and the per-stream cache, shared by the
 * plugin's source files (see docs/specs/nemotron-h.md for the maths). */
#ifndef NEMOTRON_H_INTERNAL
#define NEMOTRON_H_INTERNAL

#include <loom/cpu_ops.h>
#include <loom/plugin.h>
#include <loom/round_plan.h>
#include <loom/window.h>

/* Block kinds, one character per layer as in hybrid_override_pattern. */
enum { NEM_MAMBA = 'M', NEM_ATTN = '*', NEM_MLP = '-', NEM_MOE = 'E' };

/* Longest pattern accepted; real models have at most ~120 layers. */
#define NEM_MAX_LAYERS 1024

typedef struct nem_geometry {
    int32_t vocab, hidden, n_layers;
    char kinds[NEM_MAX_LAYERS + 1]; /* pattern, NUL-terminated */
    int32_t n_mamba, n_attn, n_mlp, n_moe;
    float eps;
    double eps_config; /* as written, for reports */
    int tie_embeddings;
    int64_t max_context; /* max_position_embeddings */
    int32_t bos;
    int32_t n_eos, eos[LOOM_MAX_EOS];

    /* Mamba-2 (when n_mamba > 0) */
    int32_t m_heads;    /* nh */
    int32_t m_head_dim; /* P */
    int32_t d_inner;    /* nh * P; `expand` is ignored */
    int32_t ssm_state;  /* N */
    int32_t n_groups;   /* ng: B/C groups and gated-norm groups */
    int32_t conv_kernel;
    int32_t conv_dim;    /* d_inner + 2 ng N */
    int32_t in_proj_dim; /* 2 d_inner + 2 ng N + nh */
    int use_conv_bias, use_bias;

    /* attention (when n_attn > 0): no bias, no positional encoding */
    int32_t n_q_heads, n_kv_heads, head_dim;

    /* relu² MLP (when n_mlp > 0) */
    int32_t mlp_inter;

    /* MoE (when n_moe > 0) */
    int32_t n_experts, top_k, moe_inter, shared_inter;
    int32_t n_group, topk_group;
    int norm_topk;
    float routed_scale;
    double routed_scale_config;
} nem_geometry;

/* Parses config.json (text part) into g; refuses by field name and value. */
loom_status nem_geometry_parse(const loom_host *host,
                               const loom_checkpoint *ckpt, nem_geometry *g,
                               loom_err *err);
/* Reports g field by field (loom inspect). */
void nem_geometry_report(const nem_geometry *g, const loom_fields *out);

typedef struct nem_layer {
    char kind;
    float *norm;  /* [hidden] */
    int32_t slot; /* index among the cache's layers of this kind */

    /* Mamba-2 */
    loom_weight in_proj, out_proj;
    float *in_bias, *out_bias; /* NULL unless use_bias */
    float *conv_w;             /* [conv_dim, K] */
    float *conv_b;             /* [conv_dim] or NULL */
    float *A;                  /* -exp(A_log), [nh] */
    float *D, *dt_bias;        /* [nh] */
    float *gnorm;              /* [d_inner] */

    /* attention */
    loom_weight wq, wk, wv, wo;

    /* MLP (and the MoE shared expert) */
    loom_weight up, down;

    /* MoE */
    loom_weight router;   /* [n_experts, hidden], run in float32 */
    float *score_bias;    /* e_score_correction_bias [n_experts] */
    loom_weight *ex_up;   /* [n_experts] of [moe_inter, hidden] */
    loom_weight *ex_down; /* [n_experts] of [hidden, moe_inter] */
} nem_layer;

struct loom_model {
    const loom_host *host;
    const loom_checkpoint *ckpt;
    nem_geometry g;
    char *layer_kinds; /* describe's letters: M A - E */
    loom_weight embed, lm_head;
    float *norm_f;
    nem_layer *layers;
    int32_t max_rows;
    int64_t max_context;
    int32_t n_taps;        /* layers whose outputs LOOM_ROW_TAP rows copy */
    int32_t *taps;         /* [n_taps] layer ids, set through loom.target/1 */
    loom_plan_rules rules; /* what a round may hold */
    loom_round_plan plan;  /* the round's rows by cache, grown as needed */
};

/* Binds every tensor of the checkpoint into m->layers etc. (m->g set).
 * On failure frees what it bound. */
loom_status nem_weights_bind(loom_model *m, loom_err *err);
void nem_weights_free(loom_model *m);

/* ---------------------------------------------------------------- cache */

/* What one Mamba layer keeps per stream. */
typedef struct nem_mamba_state {
    float *tail; /* [K-1, conv_dim], oldest first, pre-activation */
    float *ssm;  /* [nh, P, N] */
} nem_mamba_state;

struct loom_cache {
    int64_t len;            /* positions fed (and kept) so far */
    nem_mamba_state *mamba; /* [n_mamba] */
    loom_cpu_kv *kv;        /* [n_attn] */
    int accounted;          /* its fixed bytes are in the host's account */
    /* the speculative window (see cache.c): per Mamba slot, the snapshot
     * holds [tail | ssm] and a log row [in | xbc | dt] */
    loom_window win;
};

/* The LOOM_ABI functions fill the family vtable. */
loom_status LOOM_ABI nem_cache_new(loom_model *m, loom_cache **out,
                                   loom_err *err);
void LOOM_ABI nem_cache_reset(loom_model *m, loom_cache *c);
void LOOM_ABI nem_cache_free(loom_model *m, loom_cache *c);
/* dst becomes an exact copy of src (ABI 2.2's cache_copy); LOOM_ERR_STATE
 * when src has an open window. */
loom_status LOOM_ABI nem_cache_copy(loom_model *m, loom_cache *dst,
                                    const loom_cache *src, loom_err *err);
/* Positions fed (the round plan's view of a cache). */
int64_t nem_cache_len(const loom_cache *c);
/* Makes room for a stream's rows of a round: K/V rows and, for its
 * speculative rows, the window's log and snapshot. On failure the cache is
 * unchanged in content. */
loom_status nem_cache_reserve(loom_model *m, const loom_plan_stream *s,
                              loom_err *err);
/* Mamba slot `slot`'s conv tail [K-1, conv_dim] and SSM state [nh, P, N]
 * in the window's snapshot. */
float *nem_cache_snap_tail(const nem_geometry *g, loom_cache *c, int slot);
float *nem_cache_snap_ssm(const nem_geometry *g, loom_cache *c, int slot);
/* Mamba slot `slot`'s part of the log of speculative row i: the conv input
 * xBC [conv_dim], the activated conv output [conv_dim], the softplus'd dt
 * [nh]. */
float *nem_cache_log(const nem_geometry *g, loom_cache *c, int32_t i, int slot);
loom_status LOOM_ABI nem_cache_commit(loom_model *m, loom_cache *c,
                                      int32_t kept, loom_err *err);
uint64_t nem_cache_bytes_fixed(const nem_geometry *g);
uint64_t nem_cache_bytes_per_token(const nem_geometry *g);

/* ---------------------------------------------------------------- forward */

loom_status LOOM_ABI nem_forward(loom_model *m, const loom_round *round,
                                 const loom_output *out, loom_err *err);

/* ---------------------------------------------------------------- target */

/* The loom.target/1 vtable for LOOM_TARGET_ID (target.c), else NULL. */
const void *LOOM_ABI nem_get_extension(const loom_model *m, const char *id);

#endif
