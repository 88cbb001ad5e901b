/* The CUDA path of the Qwen3.5 / Qwen3-Next family: weights uploaded once at
 * open, per-stream device caches, and the forward as launches of the
 * kernels in cuda/ (.cu files) on the host's stream (loom.cuda/1). Plain C: the
 * kernels come from the fatbin embedded in the plugin. */
#ifndef QWEN35_GPU_H
#define QWEN35_GPU_H

#include <loom/cuda.h>

#include "gpu_kernels.h"
#include "qwen35.h"

/* A linear weight on the device: [rows, cols] of dtype, or for experts
 * `n` of them, `rows * cols` elements apart. */
typedef struct q35_gpu_lin {
    loom_cu_ptr p;
    loom_dtype dtype;
    int32_t rows, cols;
    /* MLX affine: bits 4, p the words, `pairs` the float32 (scale, bias)
     * pairs per group of `group` columns (gpu_kernels.h, q35_q4_gp); bits
     * 0 for plain weights */
    int32_t bits, group;
    loom_cu_ptr pairs;
    /* BF16 with cols a multiple of 16, when the mma kernels run: the
     * tensor map (CUtensorMap) their bulk copies read it through */
    int32_t mapped;
    uint64_t map[16];
    /* affine-4, when q35_q4s runs: map the words' and pmap the pairs'
     * (boxes of a 1024-column chunk of Q35_Q4S_BOX rows) */
    int32_t q4mapped;
    uint64_t pmap[16];
    /* affine-4, when q35_q4m runs: its maps of the words and the pairs
     * (gpu_kernels.h, q35_q4m_stage) */
    int32_t q4m_mapped;
    uint64_t q4m_map[16], q4m_pmap[16];
} q35_gpu_lin;

typedef struct q35_gpu_layer {
    q35_gpu_lin q, k, v, o;                  /* attention */
    q35_gpu_lin qkv, z, b, a, qkvz, ba, out; /* Gated DeltaNet */
    /* the input products back to back (one product), or p 0 when they
     * differ in type or width: qkv, z, b, a (Gated DeltaNet) or q, k, v
     * (attention), which are views into it */
    q35_gpu_lin in;
    q35_gpu_lin gate, up, down;                  /* dense MLP */
    q35_gpu_lin router, ex_gate, ex_up, ex_down; /* MoE, experts contiguous */
    q35_gpu_lin sh_gate, sh_up, sh_down, sh_gate_w;
    loom_cu_ptr in_norm, post_norm, q_norm, k_norm; /* float multipliers */
    loom_cu_ptr conv_w, neg_a, dt_bias, gnorm;
} q35_gpu_layer;

/* The kernels, by name in the fatbin. */
typedef struct q35_gpu_fns {
    loom_cu_function embed[3]; /* by weight dtype: bf16, f16, f32 */
    loom_cu_function linear[3];
    /* the streaming form (linear.cu): [bf16, f16][1 row, 8 rows][SwiGLU] */
    loom_cu_function gemv[2][2][2];
    /* one row through shared memory (gemv_stream.cu): [bf16, f16][SwiGLU]
     * [wpr 1, 2, 4, 8] */
    loom_cu_function gemvs[2][2][4];
    /* on tensor cores (gemv_mma.cu): [SwiGLU][tiles of 4, 8, 16, 32
     * rows]; their activations split into BF16 halves */
    loom_cu_function mma[2][Q35_MMA_TILES], split;
    loom_cu_function mmar[2]; /* ... one row, split in the kernel */
    /* affine 4-bit (linear.cu): [1 row, 8 rows][SwiGLU]; its embedding */
    loom_cu_function q4[2][2], embed_q4;
    /* ... one row through shared memory (gemv_q4_stream.cu): [SwiGLU][wpr
     * 1, 2, 4, 8] */
    loom_cu_function q4s[2][4];
    /* ... with the GDN conv in the epilogue (q35_conv_epilogue) */
    loom_cu_function q4s_conv[4];
    /* ... on tensor cores, any number of rows (gemv_q4_mma.cu): [SwiGLU] */
    loom_cu_function q4m[2];
    loom_cu_function rmsnorm, conv, conv_restore;
    loom_cu_function gdn_rec, gdn_rec4, gdn_rec4s, gdn_replay;
    /* q35_gdn_rec4 with the conv: [value heads per key head - 1][one warp] */
    loom_cu_function gdn_rec4cv[2][2];
    loom_cu_function attn_prep, attention;
    loom_cu_function gather, add, next_split, moe_route, moe_axpy;
    loom_cu_function to_bf16, swiglu, q4_bf16; /* prompt chunks (prompt.cu) */
    loom_cu_function conv_chunk, gdnc_prep, gdnc_wy, gdnc_apply, gdnc_norm;
    loom_cu_function attn_chunk;
    loom_cu_function attn_mma[5]; /* ... on tensor cores, head_dim 16 << i */
} q35_gpu_fns;

/* Device activations for max_rows rows. */
typedef struct q35_gpu_scratch {
    loom_cu_ptr block; /* everything below, one allocation */
    uint64_t bytes;
    loom_cu_ptr h, xn, big0, big1, big2, conv_out, o, z, b, a;
    loom_cu_ptr prob, sel, wsel, gout, proj, shg;
    loom_cu_ptr rows, streams;
    loom_cu_ptr part; /* attention's splits: [R][n_heads][splits][hd + 2] */
    loom_cu_ptr cnt;  /* ... and the splits done of each [R][n_heads] */
    loom_cu_ptr xb;   /* a prompt chunk's product input as BF16 */
    loom_cu_ptr gup;  /* its SwiGLU's second product */
    loom_cu_ptr wy;   /* its delta rule's chunk records (gdn_prompt.cu) */
    loom_cu_ptr xs;   /* decode rows' product input as BF16 hi, lo halves */
    loom_cu_ptr xs2;  /* ... the next product's, written by a kernel before */
    loom_cu_ptr xs3;  /* ... a normed product's (x nw), and its rows' */
    loom_cu_ptr ssp;  /* sums of squares in parts: [R][q35_ss_ld(hidden)] */
    loom_cu_ptr logits, taps, maps; /* grown on demand */
    uint64_t logits_bytes, taps_bytes, maps_bytes;
    /* an affine-4 weight as BF16 for a prompt chunk's product, grown on
     * demand */
    loom_cu_ptr wdq;
    uint64_t wdq_bytes;
} q35_gpu_scratch;

/* A forward's launches captured as a CUDA graph, for one shape: rows,
 * streams, logits rows, tapped rows. Everything else a launch reads (the
 * row and stream tables, the caches they point to) lives in device memory
 * the graph reads at replay. */
#define Q35_GRAPHS 32
typedef struct q35_graph {
    int32_t T, ns, n_logits, n_tap;
    int seen; /* ran uncaptured once: capture on the next */
    loom_cu_graph_exec exec;
} q35_graph;

/* The cache pool made at open, sized from max_context and max_streams:
 * K/V pages handed out as streams grow, and per-stream slots (conv tails,
 * states, their snapshots and the stream's page table). */
typedef struct q35_gpu_pool {
    loom_cu_ptr pages; /* n_pages x page_bytes */
    uint64_t page_bytes;
    int32_t n_pages, n_free_pages;
    int32_t *free_pages;
    loom_cu_ptr slots; /* n_slots x slot_bytes */
    uint64_t slot_bytes;
    uint64_t state_bytes; /* a slot's first part; the page table follows */
    int32_t n_slots, n_free_slots;
    int32_t *free_slots;
    int32_t ptab_len; /* a page table's entries: ceil(max_context / page) */
} q35_gpu_pool;

typedef struct q35_gpu {
    const loom_cuda *cu;
    loom_cu_module module;
    q35_gpu_fns fn;
    loom_cu_ptr weights; /* one allocation holding every weight */
    uint64_t weights_bytes;
    q35_gpu_lin embed, lm_head;
    loom_cu_ptr norm, inv_freq;
    q35_gpu_layer *layers;
    unsigned gdn_threads; /* q35_gdn_rec's block: ceil(dk/32) * dv/32 warps */
    int64_t big;          /* widest projection output, floats */
    int attn_splits;      /* key splits of attention launches (fixed) */
    q35_gpu_scratch s;
    q35_gpu_log lay; /* the replay log's layout */
    q35_graph graphs[Q35_GRAPHS];
    int n_graphs;
    int no_graphs;  /* capture failed once: run uncaptured from then on */
    int pdl;        /* launches may overlap their predecessor's tail (sm_90) */
    int gemm;       /* prompt chunks take cu->gemm_bf16 */
    int gdn_chunk;  /* ... and the chunk kernels of conv and the delta rule */
    int attn_chunk; /* ... and of attention (q35_attn_chunk) */
    unsigned wy_smem, apply_smem; /* the delta rule's chunk kernels' */
    unsigned attn_chunk_smem;     /* its dynamic shared memory */
    /* the chunk attention's tensor-core form (or 0) and its shared memory */
    loom_cu_function attn_mma;
    unsigned attn_mma_smem;
    int gemvs;     /* one-row products take the gemvs kernels */
    int q4s;       /* ... and the affine-4 ones q35_q4s, with tensor maps */
    int q4m;       /* affine-4 products of any rows take q35_q4m */
    int gdn_rec4;  /* the recurrence takes q35_gdn_rec4 */
    int gdn_rec4s; /* and may take q35_gdn_rec4s (its state a bulk copy) */
    /* decode products of BF16 weights take the mma kernels: their ring
     * stages by [ring][tile] (ring 0 one block per SM, 1 two) and the
     * clusters the device holds at once by [ring][SwiGLU][tile][cluster of
     * 1, 2]; mma_wg: the kinds of 128-row stages are warpgroup products
     * (the device runs the sm_90a code) */
    int mma, mma_wg;
    int mma_ns[2][Q35_MMA_TILES];
    int mma_clusters[2][2][Q35_MMA_TILES][2];
    /* the round's prompt chunks (loom_plan_prompt_chunk): their streams,
     * placed after every other row */
    int32_t *pc, n_pc, pc_row0;
    /* what s.xb holds: BF16 of the float rows at xb_src (xb_cols wide,
     * xb_ld apart), or xb_src 0; a product of those rows skips its
     * conversion */
    loom_cu_ptr xb_src;
    int xb_cols, xb_ld;
    /* set by the caller of a SwiGLU product when the product after it
     * reads xb (a prompt chunk's tensor cores): the SwiGLU may then leave
     * its float rows unwritten */
    int xb_next;
    /* what s.xs2 holds: the split halves (q35_split's layout for xs_T
     * rows) of the float rows at xs_src, written beside them by the kernel
     * that wrote those rows; the tensor-core product of them reads xs2 and
     * launches no q35_split. xs_next: set by a caller when the next
     * product may so read what the kernel it launches now writes. */
    loom_cu_ptr xs_src, xs_pending; /* xs_src as the product now runs */
    int xs_T, xs_next;
    /* what s.ssp holds: the parts of the xn_T rows at xn_src (or xn_src
     * 0), and s.xs3 the halves of those rows times xn_nw (or 0); a normed
     * tensor-core product of them launches no q35_split. nn_next: set by a
     * caller of a residual-adding product when the next product is normed
     * with it on tensor cores (q35_nn_for); nn_post and nn_layer, set per
     * layer, are the MLP's and the next layer's. */
    loom_cu_ptr xn_src, xn_nw, nn_next, nn_post, nn_layer;
    int xn_T;
    /* set by a GDN layer of a one-row step around its merged input
     * product: the conv it asks of that product's epilogue (or NULL), and
     * whether the product took it */
    const q35_conv_epi *conv_epi;
    int conv_done;
    int q4s_conv; /* q35_q4s's epilogue kernels are there */
    /* per-round host tables (the rows by stream are m->plan's) */
    int32_t *dev_of; /* [max_rows] round row -> device row */
    int32_t *maps;   /* the output maps, grown with the taps */
    size_t maps_cap;
    q35_gpu_row *rows;
    q35_gpu_stream *dstreams;
    int64_t host_bytes; /* of these tables, in the host's account */
    q35_gpu_pool pool;
} q35_gpu;

/* A stream's device state (the `gpu` member of its loom_cache). */
typedef struct q35_gpu_cache {
    /* its slot: conv, state, snap_conv, snap_state, then the page table */
    loom_cu_ptr fixed;
    int32_t slot;    /* in the pool, or -1: `fixed` is its own allocation */
    int32_t n_pages; /* pages held, in position order */
    int32_t *pages;  /* [ptab_len], the host copy of its page table */
    loom_cu_ptr log; /* [log_cap][n_lin][log size] */
    int32_t log_cap;
} q35_gpu_cache;

/* gpu.c: the model's device half */
loom_status q35_gpu_open(loom_model *m, const loom_model_options *opt,
                         loom_err *err);
void q35_gpu_close(loom_model *m);
/* Checks a launch's result; every launch goes through it. */
loom_status q35_gpu_launch(const q35_gpu *g, loom_cu_function f, unsigned gx,
                           unsigned gy, unsigned bx, unsigned smem, void **args,
                           const char *what, loom_err *err);
/* The same with a cluster of `cluster` blocks along x (sm_90). */
loom_status q35_gpu_launch_cluster(const q35_gpu *g, loom_cu_function f,
                                   unsigned gx, unsigned gy, unsigned bx,
                                   unsigned smem, unsigned cluster, void **args,
                                   const char *what, loom_err *err);
/* A driver call's result as a loom_status naming `what`. */
loom_status q35_gpu_check(const q35_gpu *g, loom_cu_result r, const char *what,
                          loom_err *err);

/* gpu_cache.c */
/* The cache pool (at open; max_streams 0: 16 slots, more caches get slots
 * of their own), and its release (at close, after every cache). */
loom_status q35_gpu_pool_open(loom_model *m, int32_t max_streams,
                              loom_err *err);
void q35_gpu_pool_close(loom_model *m);
loom_status q35_gpu_cache_new(loom_model *m, loom_cache **out, loom_err *err);
void q35_gpu_cache_reset(loom_model *m, loom_cache *c);
void q35_gpu_cache_free(loom_model *m, loom_cache *c);
loom_status q35_gpu_commit(loom_model *m, loom_cache *c, int32_t kept,
                           loom_err *err);
/* dst becomes a copy of src on the device: pages of its own, the pages'
 * contents, conv tails and states, copied in stream order; LOOM_ERR_STATE
 * when src has an open window. On failure dst is left empty. */
loom_status q35_gpu_cache_copy(loom_model *m, loom_cache *dst,
                               const loom_cache *src, loom_err *err);
/* Room for n_new more positions and a window of n_spec rows (keeps the
 * positions); changes nothing a forward reads when it fails. */
loom_status q35_gpu_cache_prepare(loom_model *m, loom_cache *c, int64_t n_new,
                                  int32_t n_spec, loom_err *err);
/* The device addresses of cache c, for the round's stream table. */
void q35_gpu_cache_view(const loom_model *m, const loom_cache *c,
                        q35_gpu_stream *out);

/* gpu_forward.c */
/* Destroys every captured graph (their buffers are about to move). */
void q35_gpu_graphs_free(q35_gpu *g);
loom_status q35_gpu_forward(loom_model *m, const loom_round *round,
                            const loom_output *out, loom_err *err);
/* loom.target/1's head on the device: the final norm and lm_head of n host
 * rows of hidden into host logits (both views checked by the caller). */
loom_status q35_gpu_head(loom_model *m, const loom_view *hidden, int32_t n,
                         const loom_view *logits, loom_err *err);

#endif
