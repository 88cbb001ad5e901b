/* The records the device sampler (sample.cu) and its C wrapper (sampler.c)
 * share: one per row to draw, the sparse per-row lists, one per window to
 * verify, one result per row. Plain C, read by nvcc and the C compiler. */
#ifndef LOOM_CUDA_SAMPLE_DEV_H
#define LOOM_CUDA_SAMPLE_DEV_H

#include <stdint.h>

#define LOOM__DS_THREADS 1024 /* one block per row */
#define LOOM__DS_TOP     20   /* LOOM_MAX_TOP_LOGPROBS */
#define LOOM__DS_PARTS   128  /* blocks of a plain argmax row, <= threads */

typedef struct loom__ds_row {
    uint64_t seed;
    int32_t position;
    int32_t logits_row; /* row of the logits view */
    int32_t top_k;
    int32_t n_logprobs; /* -1: none */
    int32_t bias_off, n_bias;
    int32_t pen_off, n_pen;
    float temperature, top_p, min_p;
    float repeat_penalty, presence, frequency;
    int32_t pad;
} loom__ds_row;

#ifdef __CUDACC__
#define LOOM__DS_HD __host__ __device__
#else
#define LOOM__DS_HD
#endif

/* A row that is a plain argmax: temperature 0, no bias, no penalty that
 * changes a logit, a vocabulary of 2 * LOOM__DS_PARTS or more (the parts
 * live in the row's mass buffer of V doubles). Its argmax is split over
 * LOOM__DS_PARTS blocks; the host skips that launch when no row is one. */
static inline LOOM__DS_HD int loom__ds_plain_argmax(const loom__ds_row *r,
                                                    int32_t V)
{
    int pen = r->n_pen > 0 && (r->repeat_penalty != 1.0f ||
                               r->presence != 0.0f || r->frequency != 0.0f);
    return V >= 2 * LOOM__DS_PARTS && r->temperature == 0.0f &&
           r->n_bias == 0 && !pen;
}

typedef struct loom__ds_bias {
    int32_t token;
    float bias;
} loom__ds_bias;

typedef struct loom__ds_pen {
    int32_t token, prompt_count, gen_count;
} loom__ds_pen;

typedef struct loom__ds_out {
    int32_t token;
    float logprob;
    int32_t n_top;
    int32_t pad;
    int32_t top_token[LOOM__DS_TOP];
    float top_logprob[LOOM__DS_TOP];
} loom__ds_out;

typedef struct loom__ds_window {
    int32_t first; /* its first row */
    int32_t n_draft;
    int32_t draft_off; /* into the drafts list */
    int32_t emit_off;  /* into the emitted tokens: n_draft + 1 slots */
} loom__ds_window;

#endif
