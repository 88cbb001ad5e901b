/* The lane's life and its any-thread entry points: making and freeing it,
 * adding and cancelling streams, and the thread (or the caller's steps)
 * that runs its rounds. */
#include <stdlib.h>
#include <string.h>

#include "lane_impl.h"

const char *loom_finish_name(loom_finish f)
{
    switch (f) {
    case LOOM_FINISH_STOP:
        return "stop";
    case LOOM_FINISH_LENGTH:
        return "length";
    case LOOM_FINISH_CONTEXT:
        return "context";
    case LOOM_FINISH_CANCELLED:
        return "cancelled";
    case LOOM_FINISH_ERROR:
        return "error";
    default:
        return "";
    }
}

/* splitmix64: spreads a counter into a seed */
static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

int32_t loom_lane_pending(loom_lane *lane)
{
    loom_mutex_lock(lane->mu);
    int32_t n = lane->n_active + lane->n_queued;
    loom_mutex_unlock(lane->mu);
    return n;
}

loom_status loom_lane_new(const loom_lane_params *p, loom_lane **out,
                          loom_err *err)
{
    if (!p || !p->engine || !p->engine->family.vt || !p->engine->model)
        return loom_err_set(err, LOOM_ERR_INVALID, "lane: no engine");
    const loom_model_info *info = &p->engine->info;
    if (info->vocab <= 0)
        return loom_err_set(err, LOOM_ERR_INVALID, "lane: vocab %d",
                            info->vocab);
    if (p->max_streams < 0 || p->max_queued < 0 || p->round_tokens < 0 ||
        p->prefill_chunk < 0 || p->max_context < 0)
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "lane: negative limit (max_streams %d, "
                            "max_queued %d, round_tokens %d, prefill_chunk "
                            "%d)",
                            p->max_streams, p->max_queued, p->round_tokens,
                            p->prefill_chunk);
    loom_lane *lane = (loom_lane *)calloc(1, sizeof *lane);
    if (!lane)
        return loom_err_set(err, LOOM_ERR_NOMEM, "lane: out of memory");
    lane->eng = p->engine;
    lane->fam = &p->engine->family;
    lane->model = p->engine->model;
    lane->vocab = info->vocab;
    /* the family merged config.json's and generation_config.json's ids */
    lane->n_eos = info->n_eos < 0              ? 0
                  : info->n_eos > LOOM_MAX_EOS ? LOOM_MAX_EOS
                                               : info->n_eos;
    memcpy(lane->eos, info->eos, sizeof(int32_t) * (size_t)lane->n_eos);

    int32_t max_rows = info->max_rows > 0 ? info->max_rows : 512;
    lane->round_tokens = p->round_tokens > 0 ? p->round_tokens : max_rows;
    if (lane->round_tokens > max_rows)
        lane->round_tokens = max_rows;
    int32_t ms = p->max_streams;
    if (ms == 0) {
        ms = lane->round_tokens / 2;
        if (ms > 64)
            ms = 64;
    }
    /* decode rows go first; leave at least one row a round for prompts */
    if (lane->round_tokens >= 2 && ms > lane->round_tokens - 1)
        ms = lane->round_tokens - 1;
    lane->max_streams = ms > 0 ? ms : 1;
    lane->max_queued = p->max_queued > 0 ? p->max_queued : 4096;
    lane->prefill_chunk =
        p->prefill_chunk > 0 ? p->prefill_chunk : lane->round_tokens;
    lane->max_context =
        info->max_context > 0 ? info->max_context : ((int64_t)1 << 30);
    if (p->max_context > 0 && p->max_context < lane->max_context)
        lane->max_context = p->max_context;
    lane->next_id = 1;
    lane->seed_state = mix64(loom_now_ns() ^ (uint64_t)(uintptr_t)lane);

    lane->mu = loom_mutex_new();
    lane->cv = loom_cond_new();
    lane->act = (stream **)malloc(sizeof(stream *) * (size_t)lane->max_streams);
    lane->rows =
        (loom_row *)malloc(sizeof(loom_row) * (size_t)lane->round_tokens);
    lane->row_stream =
        (stream **)malloc(sizeof(stream *) * (size_t)lane->round_tokens);
    lane->jobs =
        (draw_job *)malloc(sizeof(draw_job) * (size_t)lane->max_streams);
    loom_status rc = loom__spec_init(lane, p, err);
    if (rc != LOOM_OK) {
        loom_lane_free(lane);
        return rc;
    }
    /* one logits row per active stream, and what windows may add */
    lane->logit_rows = lane->max_streams + loom__spec_extra_rows(lane);
    lane->logits = (float *)malloc(sizeof(float) * (size_t)lane->vocab *
                                   (size_t)lane->logit_rows);
    lane->draws = (loom_sample_result *)malloc(sizeof(loom_sample_result) *
                                               (size_t)lane->logit_rows);
    if (!lane->mu || !lane->cv || !lane->act || !lane->rows ||
        !lane->row_stream || !lane->logits || !lane->jobs || !lane->draws) {
        loom_lane_free(lane);
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "lane: out of memory (%d streams x vocab %d)",
                            lane->max_streams, lane->vocab);
    }
    rc = loom__map_init(&lane->map, err);
    if (rc == LOOM_OK)
        rc = loom__pool_init(&lane->pool, lane, lane->max_streams, err);
    if (rc == LOOM_OK)
        rc = loom__out_init(lane, p, err);
    if (rc == LOOM_OK && !p->host_sampling)
        rc = loom__dev_init(lane, p->time_device, err);
    if (rc != LOOM_OK) {
        loom_lane_free(lane);
        return rc;
    }
    loom__stats_init(&lane->stats);
    *out = lane;
    return LOOM_OK;
}

/* The stream loom_lane_add queues: every parameter checked and copied. */
static loom_status stream_new(loom_lane *lane, const loom_stream_params *p,
                              stream **out, loom_err *err)
{
    if (!p->cb)
        return loom_err_set(err, LOOM_ERR_INVALID, "stream: no callback");
    if (p->n_prompt <= 0 || !p->prompt)
        return loom_err_set(err, LOOM_ERR_INVALID, "stream: empty prompt");
    if ((int64_t)p->n_prompt >= lane->max_context)
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "stream: prompt of %d tokens fills the context "
                            "of %lld",
                            p->n_prompt, (long long)lane->max_context);
    for (int32_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= lane->vocab)
            return loom_err_set(err, LOOM_ERR_RANGE,
                                "stream: prompt token %d at %d is outside "
                                "the vocabulary of %d",
                                p->prompt[i], i, lane->vocab);
    if (p->n_stop < 0 || (p->n_stop > 0 && !p->stop))
        return loom_err_set(err, LOOM_ERR_INVALID, "stream: %d stop strings",
                            p->n_stop);
    for (int32_t i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "stream: stop string %d is empty", i);
    if (p->n_stop > 0 && !lane->has_text)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "stream: stop strings need a tokenizer, and "
                            "this lane has none");
    /* the one check of the sampling parameters: the sampler made at
     * admission takes them as they are */
    loom_status rc = loom_sample_params_check(&p->sample, lane->vocab, err);
    if (rc)
        return rc;

    stream *s = (stream *)calloc(1, sizeof *s);
    if (!s)
        return loom_err_set(err, LOOM_ERR_NOMEM, "stream: out of memory");
    s->prompt = (int32_t *)malloc(sizeof(int32_t) * (size_t)p->n_prompt);
    s->stop =
        p->n_stop ? (char **)calloc((size_t)p->n_stop, sizeof(char *)) : NULL;
    s->stop_len =
        p->n_stop ? (size_t *)calloc((size_t)p->n_stop, sizeof(size_t)) : NULL;
    if (!s->prompt || (p->n_stop && (!s->stop || !s->stop_len)))
        goto nomem;
    memcpy(s->prompt, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
    s->n_prompt = p->n_prompt;
    for (int32_t i = 0; i < p->n_stop; i++) {
        s->stop_len[i] = strlen(p->stop[i]);
        s->stop[i] = (char *)malloc(s->stop_len[i] + 1);
        s->n_stop = i + 1;
        if (!s->stop[i])
            goto nomem;
        memcpy(s->stop[i], p->stop[i], s->stop_len[i] + 1);
    }
    s->max_tokens = p->max_tokens;
    s->ignore_eos = p->ignore_eos;
    s->no_speculation = p->no_speculation;
    s->cb = p->cb;
    s->user = p->user;
    s->n_logprobs = p->sample.n_logprobs;
    s->prompt_lp = p->prompt_logprobs && p->sample.n_logprobs >= 0;
    rc = loom__out_stream_init(lane, s, err);
    if (rc) {
        loom__stream_free(s);
        return rc;
    }

    /* the one copy of the sampling parameters, bias included */
    s->sp = p->sample;
    if (p->sample.n_bias > 0) {
        size_t nb = sizeof(loom_logit_bias) * (size_t)p->sample.n_bias;
        s->bias = (loom_logit_bias *)malloc(nb);
        if (!s->bias)
            goto nomem;
        memcpy(s->bias, p->sample.bias, nb);
    }
    s->sp.bias = s->bias;
    s->state = ST_QUEUED;
    s->t_add = loom_now_ns();
    *out = s;
    return LOOM_OK;
nomem:
    loom__stream_free(s);
    return loom_err_set(err, LOOM_ERR_NOMEM, "stream: out of memory");
}

/* Whether members a and b can share a prefill: the same prompt, and the
 * same prompt logprobs asked. */
static int same_prompt(const loom_stream_params *a, const loom_stream_params *b)
{
    return a->n_prompt == b->n_prompt &&
           !memcmp(a->prompt, b->prompt,
                   sizeof(int32_t) * (size_t)a->n_prompt) &&
           !a->prompt_logprobs == !b->prompt_logprobs;
}

loom_status loom_lane_add_group(loom_lane *lane, const loom_stream_params *p,
                                int32_t n, uint64_t *ids, loom_err *err)
{
    if (n < 1 || !p)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "lane: a group of %d streams", (int)n);
    stream **s = (stream **)calloc((size_t)n, sizeof *s);
    if (!s)
        return loom_err_set(err, LOOM_ERR_NOMEM, "lane: out of memory");
    loom_status rc = LOOM_OK;
    for (int32_t i = 0; i < n && rc == LOOM_OK; i++) {
        if (i > 0 && p[i].prompt && !same_prompt(&p[0], &p[i]))
            rc = loom_err_set(err, LOOM_ERR_INVALID,
                              "stream %d of a group: its prompt (or prompt "
                              "logprobs) differs from the first's",
                              (int)i);
        else
            rc = stream_new(lane, &p[i], &s[i], err);
        if (rc != LOOM_OK && n > 1)
            loom_err_prefix(err, "group member %d", (int)i);
    }
    if (rc != LOOM_OK) {
        for (int32_t i = 0; i < n; i++)
            loom__stream_free(s[i]);
        free(s);
        return rc;
    }

    loom_mutex_lock(lane->mu);
    if (lane->closing) {
        rc = loom_err_set(err, LOOM_ERR_STATE, "lane: closing");
    } else if (lane->n_queued + n > lane->max_queued) {
        rc =
            loom_err_set(err, LOOM_ERR_FULL, "lane: %d streams already waiting",
                         (int)lane->n_queued);
    }
    int32_t put = 0;
    for (; put < n && rc == LOOM_OK; put++) {
        s[put]->id = lane->next_id + (uint64_t)put;
        rc = loom__map_put(&lane->map, s[put], err);
    }
    if (rc != LOOM_OK) {
        /* all or none: the members already in the map come out */
        for (int32_t i = 0; i + 1 < put; i++)
            loom__map_del(&lane->map, s[i]->id);
        loom_mutex_unlock(lane->mu);
        for (int32_t i = 0; i < n; i++)
            loom__stream_free(s[i]);
        free(s);
        return rc;
    }
    lane->next_id += (uint64_t)n;
    /* without cache_copy the members prefill alone, as lone streams */
    uint64_t group =
        n > 1 && loom_family_has_cache_copy(lane->fam) ? s[0]->id : 0;
    for (int32_t i = 0; i < n; i++) {
        stream *m = s[i];
        m->group = group;
        if (m->sp.has_seed) {
            m->seed = m->sp.seed;
        } else {
            lane->seed_state = mix64(lane->seed_state ^ loom_now_ns());
            m->seed = lane->seed_state;
        }
        m->sp.seed = m->seed;
        m->sp.has_seed = 1;
        m->queued = 1;
        m->prev = lane->q_tail;
        if (lane->q_tail)
            lane->q_tail->next = m;
        else
            lane->q_head = m;
        lane->q_tail = m;
        lane->n_queued++;
        lane->stats.st.streams_added++;
        if (ids)
            ids[i] = m->id;
    }
    loom_cond_signal(lane->cv);
    loom_mutex_unlock(lane->mu);
    free(s);
    return LOOM_OK;
}

loom_status loom_lane_add(loom_lane *lane, const loom_stream_params *p,
                          uint64_t *id, loom_err *err)
{
    if (!p)
        return loom_err_set(err, LOOM_ERR_INVALID, "stream: no parameters");
    return loom_lane_add_group(lane, p, 1, id, err);
}

void loom_lane_cancel(loom_lane *lane, uint64_t id)
{
    loom_mutex_lock(lane->mu);
    stream *s = loom__map_get(&lane->map, id);
    if (s && !s->cancel) {
        s->cancel = 1;
        if (s->queued) {
            /* out of the queue, so admission never meets it; the next
             * round gives it its final event */
            if (s->prev)
                s->prev->next = s->next;
            else
                lane->q_head = s->next;
            if (s->next)
                s->next->prev = s->prev;
            else
                lane->q_tail = s->prev;
            s->queued = 0;
            s->prev = NULL;
            s->next = lane->cancelled;
            lane->cancelled = s;
        }
        loom_cond_signal(lane->cv);
    }
    loom_mutex_unlock(lane->mu);
}

loom_status loom_lane_step(loom_lane *lane, int32_t *n_rows, loom_err *err)
{
    loom_mutex_lock(lane->mu);
    int running = lane->running;
    loom_mutex_unlock(lane->mu);
    if (running)
        return loom_err_set(err, LOOM_ERR_STATE,
                            "lane: step while the lane thread runs");
    return loom__lane_round(lane, n_rows, err);
}

static void lane_thread(void *arg)
{
    loom_lane *lane = (loom_lane *)arg;
    for (;;) {
        loom_mutex_lock(lane->mu);
        while (!lane->stopping && lane->n_active + lane->n_queued == 0)
            loom_cond_wait(lane->cv, lane->mu);
        int stop = lane->stopping;
        loom_mutex_unlock(lane->mu);
        if (stop)
            break;
        loom_err err;
        /* a failed forward has already ended its streams with ERROR */
        (void)loom__lane_round(lane, NULL, &err);
    }
}

loom_status loom_lane_start(loom_lane *lane, loom_err *err)
{
    loom_mutex_lock(lane->mu);
    if (lane->running || lane->closing) {
        loom_mutex_unlock(lane->mu);
        return loom_err_set(err, LOOM_ERR_STATE,
                            "lane: already running or closing");
    }
    lane->running = 1;
    lane->stopping = 0;
    loom_mutex_unlock(lane->mu);
    loom_status rc = loom_thread_start(&lane->thread, lane_thread, lane, err);
    if (rc) {
        loom_mutex_lock(lane->mu);
        lane->running = 0;
        loom_mutex_unlock(lane->mu);
    }
    return rc;
}

void loom_lane_stop(loom_lane *lane)
{
    loom_mutex_lock(lane->mu);
    if (!lane->running) {
        loom_mutex_unlock(lane->mu);
        return;
    }
    lane->stopping = 1;
    loom_cond_broadcast(lane->cv);
    loom_mutex_unlock(lane->mu);
    loom_thread_join(lane->thread);
    lane->thread = NULL;
    loom_mutex_lock(lane->mu);
    lane->running = 0;
    lane->stopping = 0;
    loom_mutex_unlock(lane->mu);
}

void loom_lane_free(loom_lane *lane)
{
    if (!lane)
        return;
    if (lane->mu) {
        loom_lane_stop(lane);
        loom_mutex_lock(lane->mu);
        lane->closing = 1;
        loom_mutex_unlock(lane->mu);
        if (lane->act && lane->map.slot)
            loom__lane_cancel_all(lane);
    }
    loom__dev_free(lane);
    loom__pool_free(&lane->pool);
    loom__map_free(&lane->map);
    loom__out_free(lane);
    free(lane->act);
    free(lane->rows);
    free(lane->row_stream);
    free(lane->logits);
    free(lane->draws);
    free(lane->jobs);
    loom__spec_free(lane);
    if (lane->cv)
        loom_cond_free(lane->cv);
    if (lane->mu)
        loom_mutex_free(lane->mu);
    free(lane);
}

int32_t loom_lane_max_streams(const loom_lane *lane)
{
    return lane->max_streams;
}
