/* The sampling chain (bias, penalties, temperature, top-k/top-p/min-p masks,
 * keyed Gumbel-max draw) and the per-stream sampler that holds its state.
 * The generator, the draw and the masks are the SDK's reference pieces
 * (sdk/src/sample_ref.c), so device samplers can be held to the same. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <loom/sample.h>

#include "lane_impl.h"

void loom_sample_params_default(loom_sample_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repeat_penalty = 1.0f;
    p->n_logprobs = -1;
}

/* The one check of a request's sampling parameters; *field gets the
 * parameter at fault as the OpenAI API spells it. */
static loom_status params_check(const loom_sample_params *p, int32_t vocab,
                                const char **field, loom_err *err)
{
#define BAD(name, code, ...)                                                   \
    (*field = (name), loom_err_set(err, code, __VA_ARGS__))
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return BAD("temperature", LOOM_ERR_RANGE,
                   "temperature %g: must be >= 0", (double)p->temperature);
    if (p->top_k < 0)
        return BAD("top_k", LOOM_ERR_RANGE, "top_k %d: must be >= 0", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return BAD("top_p", LOOM_ERR_RANGE, "top_p %g: must be in (0, 1]",
                   (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return BAD("min_p", LOOM_ERR_RANGE, "min_p %g: must be in [0, 1]",
                   (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || !isfinite(p->repeat_penalty))
        return BAD("repetition_penalty", LOOM_ERR_RANGE,
                   "repeat_penalty %g: must be > 0", (double)p->repeat_penalty);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return BAD(isfinite(p->presence_penalty) ? "frequency_penalty"
                                                 : "presence_penalty",
                   LOOM_ERR_RANGE, "presence/frequency penalty must be finite");
    if (p->penalty_last_n < 0)
        return BAD("penalty_last_n", LOOM_ERR_RANGE,
                   "penalty_last_n %d: must be >= 0", p->penalty_last_n);
    if (p->n_logprobs < -1 || p->n_logprobs > LOOM_MAX_TOP_LOGPROBS)
        return BAD("logprobs", LOOM_ERR_RANGE,
                   "logprobs %d: must be in [0, %d]", p->n_logprobs,
                   LOOM_MAX_TOP_LOGPROBS);
    if (p->n_bias < 0 || (p->n_bias > 0 && !p->bias))
        return BAD("logit_bias", LOOM_ERR_INVALID, "logit_bias: %d entries",
                   p->n_bias);
    for (int32_t i = 0; i < p->n_bias; i++) {
        if (p->bias[i].token < 0 || (vocab > 0 && p->bias[i].token >= vocab))
            return BAD("logit_bias", LOOM_ERR_RANGE,
                       "logit_bias token %d: vocabulary is %d",
                       p->bias[i].token, vocab);
        if (isnan(p->bias[i].bias))
            return BAD("logit_bias", LOOM_ERR_RANGE,
                       "logit_bias of token %d is NaN", p->bias[i].token);
    }
    *field = NULL;
    return LOOM_OK;
#undef BAD
}

loom_status loom_sample_params_check(const loom_sample_params *p, int32_t vocab,
                                     loom_err *err)
{
    const char *field;
    return params_check(p, vocab, &field, err);
}

loom_status loom_sample_params_check_field(const loom_sample_params *p,
                                           int32_t vocab, const char **field,
                                           loom_err *err)
{
    const char *f;
    loom_status rc = params_check(p, vocab, &f, err);
    if (field)
        *field = f;
    return rc;
}

void loom_sample_apply_penalties(const loom_sample_params *p, float *logits,
                                 int32_t vocab, const int32_t *prompt_count,
                                 const int32_t *gen_count)
{
    for (int32_t i = 0; i < p->n_bias; i++)
        logits[p->bias[i].token] += p->bias[i].bias;
    int rep = p->repeat_penalty != 1.0f;
    int pf = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    if (!rep && !pf)
        return;
    for (int32_t t = 0; t < vocab; t++) {
        int32_t g = gen_count ? gen_count[t] : 0;
        int32_t n = g + (prompt_count ? prompt_count[t] : 0);
        if (rep && n > 0)
            logits[t] = logits[t] > 0.0f ? logits[t] / p->repeat_penalty
                                         : logits[t] * p->repeat_penalty;
        if (pf && g > 0)
            logits[t] -= p->presence_penalty + p->frequency_penalty * (float)g;
    }
}

void loom_sample_apply_masks(const loom_sample_params *p, float *logits,
                             int32_t vocab)
{
    if (p->temperature > 0.0f && p->temperature != 1.0f) {
        float inv = 1.0f / p->temperature;
        for (int32_t t = 0; t < vocab; t++)
            logits[t] *= inv;
    }
    int need = (p->top_k > 0 && p->top_k < vocab) || p->top_p < 1.0f;
    /* one scratch for both masks; out of memory: the filters are skipped */
    void *scratch = need ? malloc(loom_sample_mask_scratch_size(vocab)) : NULL;
    if (scratch) {
        loom_sample_mask_top_k(logits, vocab, p->top_k, scratch);
        loom_sample_mask_top_p(logits, vocab, p->top_p, scratch);
    }
    loom_sample_mask_min_p(logits, vocab, p->min_p);
    free(scratch);
}

/* ---------------------------------------------------------------- sampler */

struct loom_sampler {
    loom_sample_params p; /* p.bias: owned_bias, or the caller's (borrowed) */
    loom_logit_bias *owned_bias;
    int32_t vocab;
    uint64_t seed;
    int32_t *prompt_count; /* in the penalty window */
    int32_t *gen_count;
    int32_t *hist; /* token | generated << 31 */
    int64_t n_hist, cap_hist;
    /* tokens with counts, for the device sampler's sparse list: listed[t]
     * says t is in `touched` (it may have dropped back to zero since) */
    int32_t *touched;
    int32_t n_touched, cap_touched;
    unsigned char *listed;
    float *work;
};

loom_status loom__sampler_new(const loom_sample_params *checked, int32_t vocab,
                              uint64_t random_seed, loom_sampler **out,
                              loom_err *err)
{
    if (vocab <= 0)
        return loom_err_set(err, LOOM_ERR_INVALID, "sampler: vocab %d", vocab);
    loom_sampler *s = (loom_sampler *)calloc(1, sizeof *s);
    if (!s)
        return loom_err_set(err, LOOM_ERR_NOMEM, "sampler: out of memory");
    s->p = *checked;
    s->vocab = vocab;
    s->seed = checked->has_seed ? checked->seed : random_seed;
    s->p.seed = s->seed;
    s->p.has_seed = 1;
    /* the counts are only read by the penalties: none, no arrays */
    int penal = checked->repeat_penalty != 1.0f ||
                checked->presence_penalty != 0.0f ||
                checked->frequency_penalty != 0.0f;
    if (penal) {
        s->prompt_count = (int32_t *)calloc((size_t)vocab, sizeof(int32_t));
        s->gen_count = (int32_t *)calloc((size_t)vocab, sizeof(int32_t));
        s->listed = (unsigned char *)calloc((size_t)vocab, 1);
    }
    s->work = (float *)malloc(sizeof(float) * (size_t)vocab);
    if ((penal && (!s->prompt_count || !s->gen_count || !s->listed)) ||
        !s->work) {
        loom_sampler_free(s);
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "sampler: out of memory for vocab %d", vocab);
    }
    *out = s;
    return LOOM_OK;
}

loom_status loom_sampler_new(const loom_sample_params *params, int32_t vocab,
                             uint64_t random_seed, loom_sampler **out,
                             loom_err *err)
{
    if (vocab <= 0)
        return loom_err_set(err, LOOM_ERR_INVALID, "sampler: vocab %d", vocab);
    loom_status st = loom_sample_params_check(params, vocab, err);
    if (st)
        return st;
    loom_logit_bias *bias = NULL;
    if (params->n_bias > 0) {
        size_t nb = sizeof(loom_logit_bias) * (size_t)params->n_bias;
        bias = (loom_logit_bias *)malloc(nb);
        if (!bias)
            return loom_err_set(err, LOOM_ERR_NOMEM, "sampler: out of memory");
        memcpy(bias, params->bias, nb);
    }
    loom_sample_params p = *params;
    p.bias = bias;
    st = loom__sampler_new(&p, vocab, random_seed, out, err);
    if (st) {
        free(bias);
        return st;
    }
    (*out)->owned_bias = bias;
    return LOOM_OK;
}

void loom_sampler_free(loom_sampler *s)
{
    if (!s)
        return;
    free(s->owned_bias);
    free(s->prompt_count);
    free(s->gen_count);
    free(s->hist);
    free(s->touched);
    free(s->listed);
    free(s->work);
    free(s);
}

uint64_t loom_sampler_seed(const loom_sampler *s)
{
    return s->seed;
}

void loom_sampler_accept(loom_sampler *s, int32_t token, int generated)
{
    if (token < 0 || token >= s->vocab)
        return;
    if (!s->gen_count)
        return; /* no penalties: nothing to count */
    if (generated)
        s->gen_count[token]++;
    else
        s->prompt_count[token]++;
    if (s->n_touched >= 0 && !s->listed[token]) {
        if (s->n_touched == s->cap_touched) {
            int32_t cap = s->cap_touched ? s->cap_touched * 2 : 256;
            int32_t *t =
                (int32_t *)realloc(s->touched, sizeof(int32_t) * (size_t)cap);
            if (t) {
                s->touched = t;
                s->cap_touched = cap;
            }
        }
        /* out of memory: the sparse list misses it, loom__sampler_pen_list
         * then reports it cannot list this stream */
        if (s->n_touched < s->cap_touched) {
            s->touched[s->n_touched++] = token;
            s->listed[token] = 1;
        } else {
            s->n_touched = -1;
        }
    }
    if (s->p.penalty_last_n == 0)
        return;
    /* a window: remember the order so the oldest can leave it */
    if (s->n_hist == s->cap_hist) {
        int64_t cap = s->cap_hist ? s->cap_hist * 2 : 256;
        int32_t *h = (int32_t *)realloc(s->hist, sizeof(int32_t) * (size_t)cap);
        if (!h)
            return; /* the window then keeps growing: penalties overcount */
        s->hist = h;
        s->cap_hist = cap;
    }
    s->hist[s->n_hist++] = token | (generated ? INT32_MIN : 0);
    if (s->n_hist > s->p.penalty_last_n) {
        int32_t old = s->hist[s->n_hist - 1 - s->p.penalty_last_n];
        int32_t tok = old & INT32_MAX;
        if (old & INT32_MIN)
            s->gen_count[tok]--;
        else
            s->prompt_count[tok]--;
        /* keep the history short: slide once it is twice the window */
        if (s->n_hist >= 2 * (int64_t)s->p.penalty_last_n + 256) {
            int64_t keep = s->p.penalty_last_n;
            memmove(s->hist, s->hist + s->n_hist - keep,
                    sizeof(int32_t) * (size_t)keep);
            s->n_hist = keep;
        }
    }
}

const loom_sample_params *loom__sampler_params(const loom_sampler *s)
{
    return &s->p;
}

int32_t loom__sampler_pen_list(loom_sampler *s, loom_cuda_penalty *out,
                               int32_t cap)
{
    if (!s->gen_count)
        return 0;
    if (s->n_touched < 0)
        return -1;
    /* tokens whose counts went back to zero leave the list here */
    int32_t k = 0, n = 0;
    for (int32_t i = 0; i < s->n_touched; i++) {
        int32_t t = s->touched[i];
        if (s->prompt_count[t] == 0 && s->gen_count[t] == 0) {
            s->listed[t] = 0;
            continue;
        }
        s->touched[k++] = t;
        if (n < cap)
            out[n] =
                (loom_cuda_penalty){t, s->prompt_count[t], s->gen_count[t]};
        n++;
    }
    s->n_touched = k;
    return n <= cap ? n : -1;
}

static float max_finite(const float *logits, int32_t vocab)
{
    float m = -INFINITY;
    for (int32_t t = 0; t < vocab; t++)
        if (logits[t] > m)
            m = logits[t];
    return m;
}

static void fill_logprobs(const loom_sampler *s, const float *logits,
                          loom_sample_result *out)
{
    int32_t V = s->vocab;
    float mx = max_finite(logits, V);
    double z = 0.0;
    for (int32_t t = 0; t < V; t++)
        z += exp((double)logits[t] - mx);
    double lse = (double)mx + log(z);
    out->logprob = (float)((double)logits[out->token] - lse);
    int32_t n = s->p.n_logprobs;
    if (n > V)
        n = V;
    out->n_top = 0;
    if (n <= 0)
        return;
    /* insertion into a best-first list of n (n <= 20) */
    int32_t m = 0;
    for (int32_t t = 0; t < V; t++) {
        float v = logits[t];
        if (m == n && !(v > out->top[m - 1].logprob))
            continue;
        int32_t i = m < n ? m++ : n - 1;
        while (i > 0 && v > out->top[i - 1].logprob) {
            out->top[i] = out->top[i - 1];
            i--;
        }
        out->top[i].token = t;
        out->top[i].logprob = v;
    }
    for (int32_t i = 0; i < m; i++)
        out->top[i].logprob = (float)((double)out->top[i].logprob - lse);
    out->n_top = m;
}

void loom__sampler_logprobs(const loom_sampler *s, const float *logits,
                            loom_sample_result *out)
{
    fill_logprobs(s, logits, out);
}

void loom_sampler_sample(loom_sampler *s, const float *logits, int32_t position,
                         loom_sample_result *out)
{
    int32_t V = s->vocab;
    memcpy(s->work, logits, sizeof(float) * (size_t)V);
    loom_sample_apply_penalties(&s->p, s->work, V, s->prompt_count,
                                s->gen_count);
    if (s->p.temperature == 0.0f) {
        out->token = loom_sample_argmax(s->work, V);
    } else {
        loom_sample_apply_masks(&s->p, s->work, V);
        out->token = loom_sample_draw(s->work, V, s->seed, position);
    }
    out->logprob = 0.0f;
    out->n_top = 0;
    if (s->p.n_logprobs >= 0)
        fill_logprobs(s, logits, out);
}
