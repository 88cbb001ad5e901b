/* The lane: the scheduler that packs many streams' prompt chunks and decode
 * rows into one forward per round, samples, detokenizes, applies the stop
 * conditions and delivers tokens to each stream's callback. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/checkpoint.h>
#include <loom/lane.h>
#include <loom/platform.h>
#include <loom/tokenizer.h>

enum stream_state { ST_QUEUED, ST_PREFILL, ST_DECODE, ST_DONE };

struct stream;
/* One stream's draw in a round. */
typedef struct draw_job {
    struct stream *s;
    const float *logits;
    int32_t position; /* of the drawn token */
    loom_sample_result res;
} draw_job;

typedef struct stream {
    uint64_t id;
    struct stream *next; /* the lane's list, arrival order (under mu) */

    /* fixed at add */
    int32_t *prompt;
    int32_t n_prompt;
    char **stop;
    size_t *stop_len;
    int32_t n_stop;
    int32_t max_tokens;
    int32_t ignore_eos;
    loom_lane_cb cb;
    void *user;
    loom_sample_params sp; /* bias points at `bias` */
    loom_logit_bias *bias;
    loom_sampler *sampler; /* made at admission: queued streams hold none */
    uint64_t seed;
    int32_t n_logprobs;

    /* under mu: written by loom_lane_cancel, read at the round's start */
    int cancel;
    /* lane-thread state */
    int state;
    int cancel_local; /* the callback asked to stop */
    int stopped_by_string;
    loom_cache *cache;
    int32_t n_fed; /* prompt tokens fed */
    int32_t pos;   /* rows in the cache = the next row's position */
    int32_t last;  /* the token the next decode row feeds */
    int32_t n_gen;
    loom_detok *detok;
    char *held; /* decoded text not yet released (stop-string prefixes,
                   and without a tokenizer a partial UTF-8 character) */
    size_t n_held, cap_held;
    uint64_t t_add, t_first;
} stream;

struct loom_lane {
    loom_engine *eng;
    const loom_family_i *fam;
    loom_model *model;
    int32_t vocab;
    int32_t n_eos;
    int32_t eos[2 * LOOM_MAX_EOS];
    const loom_tokenizer *tok;
    loom_lane_piece_fn piece;
    void *piece_ctx;
    int32_t max_streams, max_queued, round_tokens, prefill_chunk;
    int64_t max_context;

    loom_mutex *mu;
    loom_cond *cv;
    stream *head, *tail;
    int32_t n_queued, n_active;
    uint64_t next_id;
    uint64_t seed_state;
    int running, stopping, closing;
    loom_thread *thread;

    /* the cache pool (lane thread; counts under mu for stats) */
    loom_cache **pool;
    int32_t n_pool_free, n_pool_total;

    /* round scratch (lane thread) */
    stream **snap;
    int32_t cap_snap;
    loom_row *rows;
    stream **row_stream;
    float *logits;
    draw_job *jobs; /* max_streams */
    char *text;     /* the current event's text */
    size_t n_text, cap_text;

    /* stats (under mu) */
    loom_lane_stats st;
    double ttft_sum;
    uint64_t ttft_n;
    uint64_t win_t0, win_prefill, win_decode;
    uint64_t t_last_round;
};

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

/* ---------------------------------------------------------------- text */

static int reserve(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    char *b = (char *)realloc(*buf, c);
    if (!b)
        return -1;
    *buf = b;
    *cap = c;
    return 0;
}

static int held_append(stream *s, const char *p, size_t n)
{
    if (reserve(&s->held, &s->cap_held, s->n_held + n + 1))
        return -1;
    memcpy(s->held + s->n_held, p, n);
    s->n_held += n;
    return 0;
}

/* Bytes at the end of buf[0..n) that start a UTF-8 character still missing
 * continuation bytes (0 when the text ends on a character boundary). */
static size_t utf8_partial_tail(const char *buf, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)buf[n - back];
        if ((c & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back */
        size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return want > back ? back : 0;
    }
    return 0;
}

/* Longest suffix of buf[0..n) that is a proper prefix of a stop string. */
static size_t stop_prefix_tail(const stream *s, const char *buf, size_t n)
{
    size_t best = 0;
    for (int32_t i = 0; i < s->n_stop; i++) {
        size_t L = s->stop_len[i];
        for (size_t k = (L - 1 < n ? L - 1 : n); k > best; k--)
            if (memcmp(buf + n - k, s->stop[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

/* First stop string occurrence in buf[0..n): its offset, or -1. */
static long stop_find(const stream *s, const char *buf, size_t n)
{
    long first = -1;
    for (int32_t i = 0; i < s->n_stop; i++) {
        size_t L = s->stop_len[i];
        for (size_t at = 0; at + L <= n; at++) {
            if (first >= 0 && (long)at >= first)
                break;
            if (memcmp(buf + at, s->stop[i], L) == 0) {
                first = (long)at;
                break;
            }
        }
    }
    return first;
}

/* Feeds a sampled token's text into s->held. Returns -1 when out of memory. */
static int text_push(loom_lane *lane, stream *s, int32_t token, loom_err *err)
{
    if (lane->tok) {
        const char *t;
        size_t n;
        loom_status rc = loom_detok_push(s->detok, token, &t, &n, err);
        /* models pad their vocabulary past the tokenizer's (Qwen: 151936
         * logits, 151669 tokens): such an id has no text */
        if (rc == LOOM_ERR_INVALID)
            return 0;
        if (rc != LOOM_OK)
            return -1;
        return held_append(s, t, n);
    }
    char small[64];
    size_t n = lane->piece(lane->piece_ctx, token, small, sizeof small);
    if (n <= sizeof small)
        return held_append(s, small, n);
    char *big = (char *)malloc(n);
    if (!big)
        return -1;
    lane->piece(lane->piece_ctx, token, big, n);
    int rc = held_append(s, big, n);
    free(big);
    return rc;
}

/* Starts an event's text empty. */
static void text_reset(loom_lane *lane)
{
    lane->n_text = 0;
    lane->text[0] = '\0';
}

/* Moves the first n held bytes to the end of the event's text. */
static void text_release(loom_lane *lane, stream *s, size_t n)
{
    if (n == 0)
        return; /* held may still be NULL */
    if (!reserve(&lane->text, &lane->cap_text, lane->n_text + n + 1)) {
        memcpy(lane->text + lane->n_text, s->held, n);
        lane->n_text += n;
    } /* else out of memory: the piece is lost, the stream goes on */
    lane->text[lane->n_text] = '\0';
    memmove(s->held, s->held + n, s->n_held - n);
    s->n_held -= n;
}

/* Ends a stream's text: what is held is released (a partial character as
 * U+FFFD). */
static void text_flush(loom_lane *lane, stream *s)
{
    if (lane->tok) {
        const char *t;
        size_t n;
        loom_detok_flush(s->detok, &t, &n);
        held_append(s, t, n);
    } else {
        size_t part = utf8_partial_tail(s->held, s->n_held);
        if (part) {
            s->n_held -= part;
            held_append(s, "\xEF\xBF\xBD", 3);
        }
    }
    text_release(lane, s, s->n_held);
}

/* ---------------------------------------------------------------- pool */

static loom_status cache_get(loom_lane *lane, loom_cache **out, loom_err *err)
{
    loom_mutex_lock(lane->mu);
    if (lane->n_pool_free > 0) {
        *out = lane->pool[--lane->n_pool_free];
        loom_mutex_unlock(lane->mu);
        return LOOM_OK;
    }
    loom_mutex_unlock(lane->mu);
    loom_cache *c = NULL;
    loom_status rc = lane->fam->cache_new(lane->model, &c, err);
    if (rc != LOOM_OK)
        return rc;
    loom_mutex_lock(lane->mu);
    lane->n_pool_total++;
    loom_mutex_unlock(lane->mu);
    *out = c;
    return LOOM_OK;
}

/* The pool has room for every cache ever made (its array holds
 * max_streams, the most that can be out at once). */
static void cache_put(loom_lane *lane, loom_cache *c)
{
    lane->fam->cache_reset(lane->model, c);
    loom_mutex_lock(lane->mu);
    lane->pool[lane->n_pool_free++] = c;
    loom_mutex_unlock(lane->mu);
}

/* ---------------------------------------------------------------- streams */

static void stream_free(stream *s)
{
    if (!s)
        return;
    free(s->prompt);
    for (int32_t i = 0; i < s->n_stop; i++)
        free(s->stop[i]);
    free(s->stop);
    free(s->stop_len);
    loom_sampler_free(s->sampler);
    free(s->bias);
    if (s->detok)
        loom_detok_free(s->detok);
    free(s->held);
    free(s);
}

/* Delivers the final event and releases the stream's cache. The stream is
 * unlinked and freed at the end of the round. */
static void finish(loom_lane *lane, stream *s, loom_finish why, int32_t token,
                   const loom_sample_result *res, const char *error)
{
    loom_lane_event ev;
    memset(&ev, 0, sizeof ev);
    ev.stream = s->id;
    ev.token = token;
    ev.finish = why;
    ev.error = error;
    ev.seed = s->seed;
    ev.n_prompt = s->n_prompt;
    ev.n_generated = s->n_gen;
    uint64_t now = loom_now_ns();
    ev.ttft_s = s->t_first ? (double)(s->t_first - s->t_add) * 1e-9 : 0.0;
    ev.elapsed_s = (double)(now - s->t_add) * 1e-9;
    if (res && s->n_logprobs >= 0) {
        ev.logprob = res->logprob;
        ev.n_top = res->n_top;
        ev.top = res->top;
    }
    if (lane->tok || lane->piece) {
        /* a stop string already dropped the rest; cancelled and failed
         * streams have no consumer left for what was held */
        if ((why == LOOM_FINISH_LENGTH || why == LOOM_FINISH_CONTEXT ||
             why == LOOM_FINISH_STOP) &&
            !s->stopped_by_string)
            text_flush(lane, s);
        ev.text = lane->text;
        ev.text_len = lane->n_text;
    }
    if (s->cache) {
        cache_put(lane, s->cache);
        s->cache = NULL;
    }
    s->state = ST_DONE;
    s->cb(s->user, &ev);
}

static void stream_error(loom_lane *lane, stream *s, const char *msg)
{
    text_reset(lane);
    finish(lane, s, LOOM_FINISH_ERROR, -1, NULL, msg);
}

/* ---------------------------------------------------------------- lane */

void loom_lane_get_stats(loom_lane *lane, loom_lane_stats *out)
{
    loom_mutex_lock(lane->mu);
    *out = lane->st;
    out->active = lane->n_active;
    out->queued = lane->n_queued;
    out->pool_total = lane->n_pool_total;
    out->pool_free = lane->n_pool_free;
    out->ttft_avg_s = lane->ttft_n ? lane->ttft_sum / (double)lane->ttft_n : 0;
    if (loom_now_ns() - lane->t_last_round > 2000000000ull)
        out->prefill_tok_s = out->decode_tok_s = 0; /* idle: no rate */
    loom_mutex_unlock(lane->mu);
}

int32_t loom_lane_pending(loom_lane *lane)
{
    loom_mutex_lock(lane->mu);
    int32_t n = lane->n_active + lane->n_queued;
    loom_mutex_unlock(lane->mu);
    return n;
}

static void add_eos(loom_lane *lane, json_t *v)
{
    if (!json_is_integer(v))
        return;
    int32_t id = (int32_t)json_integer_value(v);
    for (int32_t i = 0; i < lane->n_eos; i++)
        if (lane->eos[i] == id)
            return;
    if (lane->n_eos < 2 * LOOM_MAX_EOS)
        lane->eos[lane->n_eos++] = id;
}

/* generation_config.json may name eos ids that config.json does not (chat
 * models often end turns with a second one). */
static void add_generation_eos(loom_lane *lane, const loom_engine *e)
{
    json_t *gc = e->ckpt ? loom_checkpoint_generation_config(e->ckpt) : NULL;
    json_t *v = gc ? json_object_get(gc, "eos_token_id") : NULL;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            add_eos(lane, json_array_get(v, i));
    } else {
        add_eos(lane, v);
    }
}

loom_status loom_lane_new(const loom_lane_params *p, loom_lane **out,
                          loom_err *err)
{
    if (!p || !p->engine || !p->engine->family || !p->engine->model)
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
    lane->fam = p->engine->family;
    lane->model = p->engine->model;
    lane->vocab = info->vocab;
    lane->n_eos = info->n_eos < 0              ? 0
                  : info->n_eos > LOOM_MAX_EOS ? LOOM_MAX_EOS
                                               : info->n_eos;
    memcpy(lane->eos, info->eos, sizeof(int32_t) * (size_t)lane->n_eos);
    add_generation_eos(lane, p->engine);
    lane->tok = p->tokenizer;
    lane->piece = p->piece;
    lane->piece_ctx = p->piece_ctx;

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
    lane->pool =
        (loom_cache **)calloc((size_t)lane->max_streams, sizeof(loom_cache *));
    lane->rows =
        (loom_row *)malloc(sizeof(loom_row) * (size_t)lane->round_tokens);
    lane->row_stream =
        (stream **)malloc(sizeof(stream *) * (size_t)lane->round_tokens);
    lane->jobs =
        (draw_job *)malloc(sizeof(draw_job) * (size_t)lane->max_streams);
    /* one logits row per active stream at most (no windows yet) */
    lane->logits = (float *)malloc(sizeof(float) * (size_t)lane->vocab *
                                   (size_t)lane->max_streams);
    if (!lane->mu || !lane->cv || !lane->pool || !lane->rows ||
        !lane->row_stream || !lane->logits || !lane->jobs ||
        reserve(&lane->text, &lane->cap_text, 256)) {
        loom_lane_free(lane);
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "lane: out of memory (%d streams x vocab %d)",
                            lane->max_streams, lane->vocab);
    }
    lane->text[0] = '\0';
    lane->win_t0 = loom_now_ns();
    *out = lane;
    return LOOM_OK;
}

loom_status loom_lane_add(loom_lane *lane, const loom_stream_params *p,
                          uint64_t *id, loom_err *err)
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
    if (p->n_stop > 0 && !lane->tok && !lane->piece)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "stream: stop strings need a tokenizer, and "
                            "this lane has none");
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
    if (!s->prompt || (p->n_stop && (!s->stop || !s->stop_len))) {
        stream_free(s);
        return loom_err_set(err, LOOM_ERR_NOMEM, "stream: out of memory");
    }
    memcpy(s->prompt, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
    s->n_prompt = p->n_prompt;
    for (int32_t i = 0; i < p->n_stop; i++) {
        s->stop_len[i] = strlen(p->stop[i]);
        s->stop[i] = (char *)malloc(s->stop_len[i] + 1);
        s->n_stop = i + 1;
        if (!s->stop[i]) {
            stream_free(s);
            return loom_err_set(err, LOOM_ERR_NOMEM, "stream: out of memory");
        }
        memcpy(s->stop[i], p->stop[i], s->stop_len[i] + 1);
    }
    s->max_tokens = p->max_tokens;
    s->ignore_eos = p->ignore_eos;
    s->cb = p->cb;
    s->user = p->user;
    s->n_logprobs = p->sample.n_logprobs;
    if (lane->tok) {
        rc = loom_detok_new(lane->tok, 1, &s->detok, err);
        if (rc) {
            stream_free(s);
            return rc;
        }
    }

    s->sp = p->sample;
    if (p->sample.n_bias > 0) {
        size_t nb = sizeof(loom_logit_bias) * (size_t)p->sample.n_bias;
        s->bias = (loom_logit_bias *)malloc(nb);
        if (!s->bias) {
            stream_free(s);
            return loom_err_set(err, LOOM_ERR_NOMEM, "stream: out of memory");
        }
        memcpy(s->bias, p->sample.bias, nb);
    }
    s->sp.bias = s->bias;
    s->state = ST_QUEUED;
    s->t_add = loom_now_ns();

    loom_mutex_lock(lane->mu);
    if (lane->closing) {
        loom_mutex_unlock(lane->mu);
        stream_free(s);
        return loom_err_set(err, LOOM_ERR_STATE, "lane: closing");
    }
    if (lane->n_queued >= lane->max_queued) {
        int32_t q = lane->n_queued;
        loom_mutex_unlock(lane->mu);
        stream_free(s);
        return loom_err_set(err, LOOM_ERR_FULL,
                            "lane: %d streams already waiting", q);
    }
    if (s->sp.has_seed) {
        s->seed = s->sp.seed;
    } else {
        lane->seed_state = mix64(lane->seed_state ^ loom_now_ns());
        s->seed = lane->seed_state;
    }
    s->sp.seed = s->seed;
    s->sp.has_seed = 1;
    s->id = lane->next_id++;
    if (lane->tail)
        lane->tail->next = s;
    else
        lane->head = s;
    lane->tail = s;
    lane->n_queued++;
    lane->st.streams_added++;
    if (id)
        *id = s->id;
    loom_cond_signal(lane->cv);
    loom_mutex_unlock(lane->mu);
    return LOOM_OK;
}

void loom_lane_cancel(loom_lane *lane, uint64_t id)
{
    loom_mutex_lock(lane->mu);
    for (stream *s = lane->head; s; s = s->next)
        if (s->id == id) {
            s->cancel = 1;
            loom_cond_signal(lane->cv);
            break;
        }
    loom_mutex_unlock(lane->mu);
}

static int is_eos(const loom_lane *lane, int32_t token)
{
    for (int32_t i = 0; i < lane->n_eos; i++)
        if (lane->eos[i] == token)
            return 1;
    return 0;
}

/* A token sampled for stream s: stop conditions, text, delivery. */
static void deliver(loom_lane *lane, stream *s, const loom_sample_result *res,
                    uint64_t now)
{
    int32_t tok = res->token;
    s->n_gen++;
    if (!s->t_first) {
        s->t_first = now;
        loom_mutex_lock(lane->mu);
        lane->st.ttft_last_s = (double)(now - s->t_add) * 1e-9;
        lane->ttft_sum += lane->st.ttft_last_s;
        lane->ttft_n++;
        loom_mutex_unlock(lane->mu);
    }
    loom_sampler_accept(s->sampler, tok, 1);
    s->last = tok;

    text_reset(lane);
    if (!s->ignore_eos && is_eos(lane, tok)) {
        finish(lane, s, LOOM_FINISH_STOP, tok, res, NULL);
        return;
    }
    loom_finish why = LOOM_FINISH_NONE;
    int has_text = lane->tok || lane->piece;
    if (has_text) {
        loom_err err;
        snprintf(err.msg, sizeof err.msg, "out of memory");
        if (text_push(lane, s, tok, &err)) {
            loom_err_prefix(&err, "detokenizing token %d", tok);
            stream_error(lane, s, err.msg);
            return;
        }
        long at = s->n_stop ? stop_find(s, s->held, s->n_held) : -1;
        if (at >= 0) {
            text_release(lane, s, (size_t)at);
            s->n_held = 0; /* the stop string and what follows: dropped */
            s->stopped_by_string = 1;
            why = LOOM_FINISH_STOP;
        } else {
            size_t keep = stop_prefix_tail(s, s->held, s->n_held);
            size_t part = lane->tok ? 0 : utf8_partial_tail(s->held, s->n_held);
            if (part > keep)
                keep = part;
            text_release(lane, s, s->n_held - keep);
        }
    }
    if (why == LOOM_FINISH_NONE && s->max_tokens > 0 &&
        s->n_gen >= s->max_tokens)
        why = LOOM_FINISH_LENGTH;
    if (why == LOOM_FINISH_NONE &&
        (int64_t)s->n_prompt + s->n_gen >= lane->max_context)
        why = LOOM_FINISH_CONTEXT;
    if (why != LOOM_FINISH_NONE) {
        finish(lane, s, why, tok, res, NULL);
        return;
    }

    loom_lane_event ev;
    memset(&ev, 0, sizeof ev);
    ev.stream = s->id;
    ev.token = tok;
    if (has_text) {
        ev.text = lane->text;
        ev.text_len = lane->n_text;
    }
    if (s->n_logprobs >= 0) {
        ev.logprob = res->logprob;
        ev.n_top = res->n_top;
        ev.top = res->top;
    }
    ev.seed = s->seed;
    ev.n_prompt = s->n_prompt;
    ev.n_generated = s->n_gen;
    ev.ttft_s = (double)(s->t_first - s->t_add) * 1e-9;
    ev.elapsed_s = (double)(now - s->t_add) * 1e-9;
    if (s->cb(s->user, &ev))
        s->cancel_local = 1;
}

/* Unlinks the finished streams and frees them; updates the counts. */
static void reap(loom_lane *lane)
{
    stream *dead = NULL;
    loom_mutex_lock(lane->mu);
    stream **pp = &lane->head, *prev = NULL;
    while (*pp) {
        stream *s = *pp;
        if (s->state == ST_DONE) {
            *pp = s->next;
            if (lane->tail == s)
                lane->tail = prev;
            s->next = dead;
            dead = s;
            lane->st.streams_finished++;
        } else {
            prev = s;
            pp = &s->next;
        }
    }
    int32_t q = 0, a = 0;
    for (stream *s = lane->head; s; s = s->next)
        if (s->state == ST_QUEUED)
            q++;
        else
            a++;
    lane->n_queued = q;
    lane->n_active = a;
    loom_mutex_unlock(lane->mu);
    while (dead) {
        stream *n = dead->next;
        stream_free(dead);
        dead = n;
    }
}

static void LOOM_ABI draw_range(void *ctx, int64_t begin, int64_t end)
{
    draw_job *jobs = (draw_job *)ctx;
    for (int64_t j = begin; j < end; j++)
        loom_sampler_sample(jobs[j].s->sampler, jobs[j].logits,
                            jobs[j].position, &jobs[j].res);
}

static loom_status step(loom_lane *lane, int32_t *n_rows_out, loom_err *err)
{
    /* 1. snapshot under the lock: cancellations, admissions */
    loom_mutex_lock(lane->mu);
    int32_t n = 0, n_active = 0;
    for (stream *s = lane->head; s; s = s->next)
        n++;
    if (n > lane->cap_snap) {
        stream **sn =
            (stream **)realloc(lane->snap, sizeof(stream *) * (size_t)n * 2);
        if (!sn) {
            loom_mutex_unlock(lane->mu);
            return loom_err_set(err, LOOM_ERR_NOMEM, "lane: out of memory");
        }
        lane->snap = sn;
        lane->cap_snap = n * 2;
    }
    n = 0;
    for (stream *s = lane->head; s; s = s->next) {
        if (s->cancel)
            s->cancel_local = 1;
        if (s->state != ST_QUEUED)
            n_active++;
        lane->snap[n++] = s;
    }
    loom_mutex_unlock(lane->mu);

    stream **snap = lane->snap;
    /* 2. cancelled streams end here, before they take rows */
    for (int32_t i = 0; i < n; i++) {
        stream *s = snap[i];
        if (s->cancel_local && s->state != ST_DONE) {
            if (s->state != ST_QUEUED)
                n_active--;
            text_reset(lane);
            finish(lane, s, LOOM_FINISH_CANCELLED, -1, NULL, NULL);
        }
    }
    /* 3. admissions, in arrival order, while there is a cache slot */
    for (int32_t i = 0; i < n && n_active < lane->max_streams; i++) {
        stream *s = snap[i];
        if (s->state != ST_QUEUED)
            continue;
        loom_err cerr;
        if (loom_sampler_new(&s->sp, lane->vocab, s->seed, &s->sampler,
                             &cerr) != LOOM_OK ||
            cache_get(lane, &s->cache, &cerr) != LOOM_OK) {
            stream_error(lane, s, cerr.msg);
            continue;
        }
        for (int32_t j = 0; j < s->n_prompt; j++)
            loom_sampler_accept(s->sampler, s->prompt[j], 0);
        s->state = ST_PREFILL;
        n_active++;
    }

    /* 4. the round: decode rows first, then prompt chunks */
    int32_t nr = 0, n_logit_rows = 0, n_prompt_rows = 0, n_decode = 0;
    for (int32_t i = 0; i < n; i++) {
        stream *s = snap[i];
        if (s->state != ST_DECODE)
            continue;
        lane->rows[nr] =
            (loom_row){s->cache, s->last, s->pos, -1, LOOM_ROW_LOGITS};
        lane->row_stream[nr++] = s;
        n_logit_rows++;
        n_decode++;
    }
    for (int32_t i = 0; i < n && nr < lane->round_tokens; i++) {
        stream *s = snap[i];
        if (s->state != ST_PREFILL)
            continue;
        int32_t chunk = s->n_prompt - s->n_fed;
        if (chunk > lane->prefill_chunk)
            chunk = lane->prefill_chunk;
        if (chunk > lane->round_tokens - nr)
            chunk = lane->round_tokens - nr;
        for (int32_t j = 0; j < chunk; j++) {
            int32_t at = s->n_fed + j;
            uint32_t fl = at == s->n_prompt - 1 ? LOOM_ROW_LOGITS : 0;
            lane->rows[nr] = (loom_row){s->cache, s->prompt[at], at, -1, fl};
            lane->row_stream[nr++] = s;
            if (fl)
                n_logit_rows++;
        }
        n_prompt_rows += chunk;
    }
    if (n_rows_out)
        *n_rows_out = nr;
    if (nr == 0) {
        reap(lane);
        return LOOM_OK;
    }

    /* 5. one forward */
    loom_round round = {lane->rows, nr};
    loom_output outp = {lane->logits, NULL};
    uint64_t t0 = loom_now_ns();
    loom_status rc = lane->fam->forward(lane->model, &round, &outp, err);
    uint64_t t1 = loom_now_ns();
    if (rc != LOOM_OK) {
        loom_err_prefix(err, "forward of %d rows", nr);
        for (int32_t r = 0; r < nr; r++) {
            stream *s = lane->row_stream[r];
            if (s->state != ST_DONE)
                stream_error(lane, s, err->msg);
        }
        reap(lane);
        return rc;
    }

    /* 6. positions advance; the streams' draws are independent, so they
     * run over the thread pool; delivery stays in row order */
    int32_t k = 0, nj = 0;
    for (int32_t r = 0; r < nr; r++) {
        stream *s = lane->row_stream[r];
        const loom_row *row = &lane->rows[r];
        s->pos = row->position + 1;
        if (s->state == ST_PREFILL)
            s->n_fed = row->position + 1;
        if (!(row->flags & LOOM_ROW_LOGITS))
            continue;
        const float *lg = lane->logits + (size_t)k * (size_t)lane->vocab;
        k++;
        if (s->state == ST_PREFILL)
            s->state = ST_DECODE;
        lane->jobs[nj++] = (draw_job){s, lg, row->position + 1, {0}};
    }
    if (nj > 1 && lane->eng->pool)
        loom_pool_run(lane->eng->pool, nj, draw_range, lane->jobs);
    else
        draw_range(lane->jobs, 0, nj);
    for (int32_t j = 0; j < nj; j++)
        deliver(lane, lane->jobs[j].s, &lane->jobs[j].res, t1);

    loom_mutex_lock(lane->mu);
    lane->st.rounds++;
    lane->st.prompt_tokens += (uint64_t)n_prompt_rows;
    lane->st.generated_tokens += (uint64_t)n_logit_rows;
    lane->st.forward_s += (double)(t1 - t0) * 1e-9;
    if (t0 - lane->t_last_round > 2000000000ull) {
        /* after an idle spell the rate window starts with this round */
        lane->win_t0 = t0;
        lane->win_prefill = lane->win_decode = 0;
    }
    lane->win_prefill += (uint64_t)n_prompt_rows;
    lane->win_decode += (uint64_t)n_logit_rows;
    uint64_t now = loom_now_ns();
    lane->t_last_round = now;
    if (now - lane->win_t0 >= 1000000000ull) {
        double dt = (double)(now - lane->win_t0) * 1e-9;
        lane->st.prefill_tok_s = (double)lane->win_prefill / dt;
        lane->st.decode_tok_s = (double)lane->win_decode / dt;
        lane->win_t0 = now;
        lane->win_prefill = lane->win_decode = 0;
    }
    loom_mutex_unlock(lane->mu);
    (void)n_decode;
    reap(lane);
    return LOOM_OK;
}

loom_status loom_lane_step(loom_lane *lane, int32_t *n_rows, loom_err *err)
{
    loom_mutex_lock(lane->mu);
    int running = lane->running;
    loom_mutex_unlock(lane->mu);
    if (running)
        return loom_err_set(err, LOOM_ERR_STATE,
                            "lane: step while the lane thread runs");
    return step(lane, n_rows, err);
}

static void lane_thread(void *arg)
{
    loom_lane *lane = (loom_lane *)arg;
    for (;;) {
        loom_mutex_lock(lane->mu);
        while (!lane->stopping && !lane->head)
            loom_cond_wait(lane->cv, lane->mu);
        int stop = lane->stopping;
        loom_mutex_unlock(lane->mu);
        if (stop)
            break;
        loom_err err;
        /* a failed forward has already ended its streams with ERROR */
        (void)step(lane, NULL, &err);
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
        for (stream *s = lane->head; s; s = s->next)
            if (s->state != ST_DONE) {
                text_reset(lane);
                finish(lane, s, LOOM_FINISH_CANCELLED, -1, NULL, NULL);
            }
        reap(lane);
    }
    for (int32_t i = 0; i < lane->n_pool_free; i++)
        lane->fam->cache_free(lane->model, lane->pool[i]);
    free(lane->pool);
    free(lane->snap);
    free(lane->rows);
    free(lane->row_stream);
    free(lane->logits);
    free(lane->jobs);
    free(lane->text);
    if (lane->cv)
        loom_cond_free(lane->cv);
    if (lane->mu)
        loom_mutex_free(lane->mu);
    free(lane);
}
