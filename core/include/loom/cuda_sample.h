/* Sampling on the device (core/src/cuda/sample.cu): the rule of
 * loom/sample.h applied to device-resident logits rows, and window
 * verification; only token ids and asked-for logprobs come back. */
#ifndef LOOM_CUDA_SAMPLE_H
#define LOOM_CUDA_SAMPLE_H

#include <stdint.h>

#include <loom/cuda.h>
#include <loom/sample.h>
#include <loom/status.h>

#define LOOM_CUDA_MAX_WINDOW 16 /* drafts per window */

typedef struct loom_cuda_sampler loom_cuda_sampler;

/* One token in a row's penalty window with its counts there; a row's list
 * names each token once. */
typedef struct loom_cuda_penalty {
    int32_t token;
    int32_t prompt_count;
    int32_t gen_count;
} loom_cuda_penalty;

/* One row to draw. params' seed is the one in use (has_seed set, as
 * loom_sampler keeps it); its bias list is read as is. */
typedef struct loom_cuda_sample_req {
    const loom_sample_params *params;
    int32_t position;   /* the position the drawn token takes */
    int32_t logits_row; /* row of the logits view */
    const loom_cuda_penalty *pen;
    int32_t n_pen;
} loom_cuda_sample_req;

/* A window: rows first .. first + n_draft of the requests, drafts[i] the
 * token proposed after row first + i. */
typedef struct loom_cuda_window {
    int32_t first;
    int32_t n_draft; /* 0 .. LOOM_CUDA_MAX_WINDOW */
    const int32_t *drafts;
} loom_cuda_window;

/* Loads the core's module and takes scratch for max_rows rows of vocab
 * (LOOM_MEM_SCRATCH) and staging for up to max_list bias and penalty
 * entries per call. The table's context must be current. */
loom_status loom_cuda_sampler_new(const loom_cuda *cu, int32_t vocab,
                                  int32_t max_rows, int32_t max_list,
                                  loom_cuda_sampler **out, loom_err *err);
void loom_cuda_sampler_free(loom_cuda_sampler *s);

/* Draws reqs[i] from row reqs[i].logits_row of the float32 logits at
 * `logits` (row stride ld floats) on the table's stream, waits, and fills
 * out[i] as loom_sampler_sample does. */
loom_status loom_cuda_sample(loom_cuda_sampler *s, loom_cu_ptr logits,
                             int64_t ld, const loom_cuda_sample_req *reqs,
                             int32_t n, loom_sample_result *out, loom_err *err);

/* As loom_cuda_sample, then verifies each window on the device: accepts
 * drafts while each equals its row's draw, then that row's draw (the bonus
 * token). emit[w * (LOOM_CUDA_MAX_WINDOW + 1) + k] for k < n_emit[w]. */
loom_status loom_cuda_verify(loom_cuda_sampler *s, loom_cu_ptr logits,
                             int64_t ld, const loom_cuda_sample_req *reqs,
                             int32_t n, const loom_cuda_window *win,
                             int32_t n_win, int32_t *n_emit, int32_t *emit,
                             loom_sample_result *out, loom_err *err);

#endif
