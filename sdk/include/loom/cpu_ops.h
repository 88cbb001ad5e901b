/* Float32 building blocks of the CPU reference paths shared by every model
 * family plugin (norms, activations, RoPE, attention over a growable KV
 * store, causal depthwise convolution): single-threaded, allocation-free
 * except for the KV store; the plugin splits work over the host pool.
 *
 * Conventions: vectors are dense float32; `n` counts elements; `out` may
 * alias `x` wherever a function reads x[i] before writing out[i] only (noted
 * per function). Linear weights go through host->matmul, not through here,
 * except into a view (loom_cpu_matmul_view).
 */
#ifndef LOOM_CPU_OPS_H
#define LOOM_CPU_OPS_H

#include <math.h>
#include <stdint.h>

#include <loom/cpu_math.h> /* expf & co., sigmoid, silu, softplus */
#include <loom/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- vectors */

float loom_cpu_dot(const float *a, const float *b, int64_t n);
/* y += a * x */
void loom_cpu_axpy(float *y, float a, const float *x, int64_t n);
/* x *= a */
void loom_cpu_scale(float *x, float a, int64_t n);
/* y += x */
void loom_cpu_add(float *y, const float *x, int64_t n);
/* x[i] = silu(x[i]) */
void loom_cpu_silu_inplace(float *x, int64_t n);
/* o[i] *= sigmoid(gate[i]) (an output gate) */
void loom_cpu_gate_sigmoid(float *o, const float *gate, int64_t n);
/* a[i] = silu(a[i]) * b[i] (SwiGLU: a = gate, b = up) */
void loom_cpu_swiglu(float *a, const float *b, int64_t n);
/* x[i] = max(x[i], 0)^2 (relu², Nemotron-H MLP) */
void loom_cpu_relu2_inplace(float *x, int64_t n);
/* Index of the largest value, ties to the lower index. */
int64_t loom_cpu_argmax(const float *x, int64_t n);

/* ---------------------------------------------------------------- norms */

/* out = x / sqrt(mean(x²) + eps) * w  (w NULL: no weight). out may alias x. */
void loom_cpu_rmsnorm(float *out, const float *x, const float *w, int64_t n,
                      float eps);
/* Zero-centred weight: out = x / sqrt(mean(x²) + eps) * (1 + w).
 * out may alias x. */
void loom_cpu_rmsnorm_1p(float *out, const float *x, const float *w, int64_t n,
                         float eps);
/* Norm before gate (Qwen3.5 linear_attn.norm):
 * out = (x / sqrt(mean(x²) + eps) * w) * silu(gate). out may alias x. */
void loom_cpu_rmsnorm_gated(float *out, const float *x, const float *gate,
                            const float *w, int64_t n, float eps);
/* x *= 1 / sqrt(sum(x²) + eps), in place (eps on the sum, as in FLA/HF). */
void loom_cpu_l2norm(float *x, int64_t n, float eps);
/* Numerically stable softmax in place. */
void loom_cpu_softmax(float *x, int64_t n);

/* ---------------------------------------------------------------- RoPE */

/* inv_freq[i] = 1 / theta^(2i / rot_dim) for i < rot_dim/2, computed in
 * float32 as transformers does. */
void loom_cpu_rope_inv_freq(float *inv_freq, int64_t rot_dim, double theta);
/* NeoX ("rotate_half") RoPE on the first rot_dim dims of each of n_heads
 * heads of x (head h at x + h*head_dim): dim i pairs with i + rot_dim/2.
 * Dims rot_dim..head_dim-1 pass through. angle = (float)pos * inv_freq[i]. */
void loom_cpu_rope_neox(float *x, int64_t n_heads, int64_t head_dim,
                        int64_t rot_dim, const float *inv_freq, int64_t pos);
/* GPT-J (interleaved) RoPE: dims 2i and 2i+1 pair; same arguments. */
void loom_cpu_rope_interleaved(float *x, int64_t n_heads, int64_t head_dim,
                               int64_t rot_dim, const float *inv_freq,
                               int64_t pos);

/* ---------------------------------------------------------------- KV store */

/* One attention layer's cache of one stream: K and V rows of `width` floats
 * (n_kv_heads * head_dim) per position, growing geometrically with no fixed
 * cap. Zero-initialise it (or call loom_cpu_kv_init). */
typedef struct loom_cpu_kv {
    float *k;      /* [cap, width] */
    float *v;      /* [cap, width] */
    int64_t len;   /* positions held */
    int64_t cap;   /* positions allocated */
    int64_t width; /* floats per position */
} loom_cpu_kv;

void loom_cpu_kv_init(loom_cpu_kv *kv, int64_t width);
/* Makes room for n_pos positions in all (keeps the contents). On failure the
 * store is unchanged. */
loom_status loom_cpu_kv_reserve(loom_cpu_kv *kv, int64_t n_pos, loom_err *err);
/* n stores of dst become copies of src's (positions and length); room is
 * made in all first, so a refusal leaves every dst store as it was. */
loom_status loom_cpu_kv_copy(loom_cpu_kv *dst, const loom_cpu_kv *src, int n,
                             loom_err *err);
/* Writes K and V of position pos (< cap); len becomes max(len, pos + 1). */
void loom_cpu_kv_put(loom_cpu_kv *kv, int64_t pos, const float *k,
                     const float *v);
/* Drops positions >= len (no shrinking of the allocation). */
void loom_cpu_kv_truncate(loom_cpu_kv *kv, int64_t len);
/* Frees the rows; the store is empty (width kept) afterwards. */
void loom_cpu_kv_free(loom_cpu_kv *kv);
/* Bytes held. */
uint64_t loom_cpu_kv_bytes(const loom_cpu_kv *kv);

/* ---------------------------------------------------------------- attention */

/* One query head over n_ctx positions (causal: the caller passes the
 * positions the query may see). k/v point at this head's slice of position
 * 0; position p is at k + p*stride. scores: scratch of n_ctx floats.
 * out[d] = sum_p softmax_p(scale * q.k_p) v_p[d], the softmax in float32. */
void loom_cpu_attend_head(float *out, const float *q, const float *k,
                          const float *v, int64_t n_ctx, int64_t stride,
                          int64_t head_dim, float scale, float *scores);
/* The same result without a scratch buffer of n_ctx: the softmax is taken
 * block by block (256 positions) with running max and sum, so any context
 * length fits on the stack. Deterministic: one fixed order of operations. */
void loom_cpu_attend_head_blocked(float *out, const float *q, const float *k,
                                  const float *v, int64_t n_ctx, int64_t stride,
                                  int64_t head_dim, float scale);
/* Attention for n_rows rows of a prompt chunk, one head: row r's query at
 * q + r q_stride, at position pos0 + r, over positions [0, pos0 + r] of k
 * and v (rows `stride` apart), into out + r out_stride. Four rows at a
 * time share each K and V row; sixteen-lane sums, so it agrees with
 * loom_cpu_attend_head_blocked row by row within float32 rounding, not bit
 * for bit (for prompt chunks only). Where its scratch of 4 (pos0 + n_rows)
 * + head_dim floats cannot be had, each row goes through
 * loom_cpu_attend_head_blocked instead. */
void loom_cpu_attend_chunk(float *out, int64_t out_stride, const float *q,
                           int64_t q_stride, int64_t n_rows, int64_t pos0,
                           const float *k, const float *v, int64_t stride,
                           int64_t head_dim, float scale);
/* Item i (below n_blocks x heads) of a parallel loop over the blocks of a
 * prompt chunk's rows and its heads, as (block, head): head-major, within
 * a head the blocks in the order 0, n-1, 1, n-2, ... A later block attends
 * to more keys, so the pool's equal runs of items (one per thread) each
 * take cheap and dear blocks alike instead of one thread the last ones. */
void loom_cpu_chunk_item(int64_t i, int64_t n_blocks, int64_t *block,
                         int64_t *head);
/* All n_heads query heads of one row over positions [0, n_ctx) of kv, GQA:
 * query head h uses kv head h / (n_heads / n_kv_heads). q is
 * [n_heads*head_dim], out the same. scores: scratch of n_ctx floats. */
void loom_cpu_attend_row(float *out, const float *q, const loom_cpu_kv *kv,
                         int64_t n_ctx, int64_t n_heads, int64_t n_kv_heads,
                         int64_t head_dim, float scale, float *scores);

/* ---------------------------------------------------------------- conv */

/* One step of a causal depthwise conv1d over `channels` channels with kernel
 * K (w [channels, K], PyTorch's [C,1,K] or MLX's [C,K,1] flattened):
 *   out[c] = bias[c] + sum_{j<K-1} w[c,j] tail[j][c] + w[c,K-1] x[c]
 * tail is [K-1, channels], oldest first: the last K-1 inputs (pre-activation).
 * Then the tail shifts by one and x becomes its newest entry. bias may be
 * NULL. No activation is applied. out must not alias tail; it may alias x. */
void loom_cpu_conv_step(float *out, const float *x, float *tail, const float *w,
                        const float *bias, int64_t channels, int64_t kernel);
/* The same step over channels [c0, c0 + n) only (out, x, w, bias and tail
 * indexed as above): disjoint ranges may run in parallel. */
void loom_cpu_conv_step_range(float *out, const float *x, float *tail,
                              const float *w, const float *bias, int64_t c0,
                              int64_t n, int64_t channels, int64_t kernel);
/* `rows` such steps at once over channels [c0, c0 + n): input row t at x +
 * t ldx, its output at out + t ldo; each output is the sum the step would
 * take, in its order, so the result is bit-identical to rows calls of
 * loom_cpu_conv_step_range (the loops run across channels, which
 * vectorise). out must not alias x or tail. */
void loom_cpu_conv_rows(float *out, int64_t ldo, const float *x, int64_t ldx,
                        float *tail, const float *w, const float *bias,
                        int64_t c0, int64_t n, int64_t channels, int64_t kernel,
                        int64_t rows);

/* ---------------------------------------------------------------- tensors */

/* Copies n elements of a F32/F16/BF16 tensor as float32 into out. Refuses
 * (LOOM_ERR_FORMAT, naming the tensor) another dtype or a size other than
 * n elements. */
loom_status loom_cpu_tensor_f32(const loom_tensor *t, float *out, int64_t n,
                                loom_err *err);
/* Element i of a F32/F16/BF16 array as float32. */
float loom_cpu_load_f32(const void *data, loom_dtype dtype, int64_t i);

/* ---------------------------------------------------------------- views */

/* y[t] = W x[t] for the n dense rows of x, into rows 0..n of the host
 * float32 view y (checked beforehand, loom_view_check): one host->matmul
 * when y's rows are contiguous, else one per row (the same arithmetic). */
void loom_cpu_matmul_view(const loom_host *host, const loom_weight *w,
                          const float *x, int64_t n, const loom_view *y);

/* ---------------------------------------------------------------- prompts */

struct loom_round_plan;  /* loom/round_plan.h */
struct loom_plan_stream; /* loom/round_plan.h */

/* prompt[t] = 1 for round row t of a prompt chunk (loom_plan_prompt_chunk,
 * round_plan.h), else 0; prompt holds plan->n_rows bytes. */
void loom_cpu_prompt_rows(const struct loom_round_plan *plan, uint8_t *prompt);
/* The round row of stream s's first row when s is a prompt chunk whose rows
 * are consecutive in the round (as the lane gives them), else -1. */
int64_t loom_cpu_chunk_first(const struct loom_round_plan *plan,
                             const struct loom_plan_stream *s);
/* The round row of stream s's first row when its rows are consecutive in
 * the round, else -1. */
int64_t loom_cpu_rows_first(const struct loom_round_plan *plan,
                            const struct loom_plan_stream *s);
/* 1 when every prompt chunk of the round has consecutive rows: its rows
 * may then be left to chunk kernels and skipped by the row kernels. */
int loom_cpu_chunks_consecutive(const struct loom_round_plan *plan);
/* y[t] = W x[t] for t < n: each run of consecutive rows with prompt[t] set
 * through host->matmul_prompt (host->matmul on a host without it), the
 * other runs through host->matmul. Each kernel's rows do not depend on what
 * else is in the call, so neither does a stream's result on what shares
 * its round. prompt NULL: all through host->matmul. */
void loom_cpu_matmul_rows(const loom_host *host, const loom_weight *w,
                          const float *x, float *y, int64_t n,
                          const uint8_t *prompt);
/* loom_cpu_rmsnorm of each of `rows` rows of n (out may alias x) and
 * y += x over rows x n, split by rows over host's pool when there are
 * enough of them (a prompt chunk): each row's bits as the one-thread loop's. */
void loom_cpu_rmsnorm_rows(const loom_host *host, float *out, const float *x,
                           const float *w, int64_t rows, int64_t n, float eps);
void loom_cpu_add_rows(const loom_host *host, float *y, const float *x,
                       int64_t rows, int64_t n);
/* loom_cpu_swiglu (a = gate, b = up) and loom_cpu_relu2_inplace over rows x
 * n, split by rows the same way. */
void loom_cpu_swiglu_rows(const loom_host *host, float *a, const float *b,
                          int64_t rows, int64_t n);
void loom_cpu_relu2_rows(const loom_host *host, float *x, int64_t rows,
                         int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_CPU_OPS_H */
