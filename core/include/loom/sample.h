/* The sampling chain: logits -> logit bias and repetition/presence/frequency
 * penalties -> temperature -> top-k / top-p / min-p masks -> a Gumbel-max
 * draw whose noise is keyed by (seed, position, token id), so the token at a
 * position depends only on that position's logits and the key. */
#ifndef LOOM_SAMPLE_H
#define LOOM_SAMPLE_H

#include <stdint.h>

#include <loom/sample_ref.h>
#include <loom/status.h>

/* Most top logprobs a request may ask for (OpenAI allows 20). */
#define LOOM_MAX_TOP_LOGPROBS 20

typedef struct loom_logit_bias {
    int32_t token;
    float bias; /* added to the raw logit; -INFINITY bans the token */
} loom_logit_bias;

/* One request's sampling parameters. Start from loom_sample_params_default;
 * every field at its default turns its step off. */
typedef struct loom_sample_params {
    float temperature; /* 0: greedy (argmax, lowest id on ties); default 1 */
    int32_t top_k;     /* keep the k best; 0: off */
    float top_p;       /* keep the smallest set of mass >= p; 1: off */
    float min_p;       /* keep p >= min_p * p_max; 0: off */
    /* CTRL-style repetition penalty over prompt and generated tokens: a
     * positive logit is divided by it, a negative one multiplied. 1: off */
    float repeat_penalty;
    /* OpenAI-style, over generated tokens only: logit -= presence * [n > 0]
     * + frequency * n, n = times the token was generated. 0: off */
    float presence_penalty;
    float frequency_penalty;
    /* Only the last N tokens count for the penalties; 0: all of them. */
    int32_t penalty_last_n;
    const loom_logit_bias *bias; /* copied by loom_sampler_new and
                                    loom_lane_add */
    int32_t n_bias;
    uint64_t seed;
    int32_t has_seed; /* 0: a random seed is chosen and reported back */
    /* Top logprobs to report beside the chosen token's (0..20); -1: none,
     * not even the chosen token's. */
    int32_t n_logprobs;
} loom_sample_params;

void loom_sample_params_default(loom_sample_params *p);
/* The one check of sampling parameters, which the server, the CLI (through
 * loom_lane_add) and the lane all use: ranges, and bias ids inside the
 * vocabulary (vocab 0: not known yet, ids only checked >= 0). The message
 * names the field and its value. */
loom_status loom_sample_params_check(const loom_sample_params *p, int32_t vocab,
                                     loom_err *err);
/* The same check; *field (may be NULL) gets the parameter at fault as the
 * OpenAI API spells it ("temperature", "top_p", "repetition_penalty",
 * "logprobs", "logit_bias", ...), or NULL when all is well. */
loom_status loom_sample_params_check_field(const loom_sample_params *p,
                                           int32_t vocab, const char **field,
                                           loom_err *err);

typedef struct loom_token_logprob {
    int32_t token;
    float logprob;
} loom_token_logprob;

/* What one draw gives. Logprobs are log-softmax of the model's raw logits
 * (before bias, penalties, temperature and masks), as vLLM reports them. */
typedef struct loom_sample_result {
    int32_t token;
    float logprob;
    int32_t n_top; /* best first, ties to the lower id */
    loom_token_logprob top[LOOM_MAX_TOP_LOGPROBS];
} loom_sample_result;

/* One stream's sampler: its parameters, the token history the penalties
 * need, and scratch of vocab floats. Not thread-safe; one per stream. */
typedef struct loom_sampler loom_sampler;

/* Checks params (loom_sample_params_check) and copies them, bias included.
 * `random_seed` is used when params->has_seed is 0. */
loom_status loom_sampler_new(const loom_sample_params *params, int32_t vocab,
                             uint64_t random_seed, loom_sampler **out,
                             loom_err *err);
void loom_sampler_free(loom_sampler *s);
/* The seed in use (the request's or the random one). */
uint64_t loom_sampler_seed(const loom_sampler *s);
/* Records a token of the stream: `generated` 0 for prompt tokens. */
void loom_sampler_accept(loom_sampler *s, int32_t token, int generated);
/* Draws the token for absolute position `position` (the position the drawn
 * token will take in the stream) from that position's raw logits. */
void loom_sampler_sample(loom_sampler *s, const float *logits, int32_t position,
                         loom_sample_result *out);

/* ---- the steps, exposed for tests and for device-side samplers that must
 * give the same tokens. */

/* The generator, the keyed draw and the masks: loom/sample_ref.h (SDK). */

/* In place over logits[0..vocab): bias, then penalties from per-token counts
 * (`prompt_count[t]`, `gen_count[t]`; either may be NULL for zero). */
void loom_sample_apply_penalties(const loom_sample_params *p, float *logits,
                                 int32_t vocab, const int32_t *prompt_count,
                                 const int32_t *gen_count);
/* In place: divides by the temperature (> 0) and sets to -INFINITY the
 * tokens that top-k, then top-p, then min-p remove (each computed on the
 * softmax of what the previous step kept). At least the best token always
 * stays. */
void loom_sample_apply_masks(const loom_sample_params *p, float *logits,
                             int32_t vocab);

#endif
