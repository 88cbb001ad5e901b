/* Per-stream output: a sampled token's bytes (the tokenizer's detokenizer,
 * or the piece table), stop strings and the text held back while it could
 * still become one, the stop conditions, and the events to the callback. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lane_impl.h"

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

/* ---------------------------------------------------------------- bytes */

/* Asks the piece function for every token once, so text and logprobs read
 * the same bytes and the function is never called from two threads. */
static loom_status pieces_init(piece_table *t, loom_lane_piece_fn fn, void *ctx,
                               int32_t vocab, loom_err *err)
{
    t->off = (size_t *)malloc(sizeof(size_t) * ((size_t)vocab + 1));
    if (!t->off)
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "lane: out of memory (pieces of %d tokens)", vocab);
    char probe[1];
    t->off[0] = 0;
    for (int32_t v = 0; v < vocab; v++)
        t->off[v + 1] = t->off[v] + fn(ctx, v, probe, 0);
    t->bytes = (char *)malloc(t->off[vocab] + 1);
    if (!t->bytes)
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "lane: out of memory (pieces of %d tokens)", vocab);
    for (int32_t v = 0; v < vocab; v++)
        fn(ctx, v, t->bytes + t->off[v], t->off[v + 1] - t->off[v]);
    return LOOM_OK;
}

const char *loom_lane_token_bytes(const loom_lane *lane, int32_t token,
                                  size_t *len)
{
    *len = 0;
    if (!lane)
        return NULL;
    if (lane->tok) {
        const char *b = loom_tokenizer_token_bytes(lane->tok, token, len);
        if (!b)
            *len = 0;
        return b;
    }
    if (!lane->pieces.off || token < 0 || token >= lane->vocab)
        return NULL;
    *len = lane->pieces.off[token + 1] - lane->pieces.off[token];
    return lane->pieces.bytes + lane->pieces.off[token];
}

loom_status loom__out_init(loom_lane *lane, const loom_lane_params *p,
                           loom_err *err)
{
    lane->tok = p->tokenizer;
    lane->has_text = p->tokenizer || p->piece;
    if (!p->tokenizer && p->piece) {
        loom_status rc = pieces_init(&lane->pieces, p->piece, p->piece_ctx,
                                     lane->vocab, err);
        if (rc)
            return rc;
    }
    if (reserve(&lane->text, &lane->cap_text, 256))
        return loom_err_set(err, LOOM_ERR_NOMEM, "lane: out of memory");
    lane->text[0] = '\0';
    return LOOM_OK;
}

void loom__out_free(loom_lane *lane)
{
    free(lane->pieces.bytes);
    free(lane->pieces.off);
    free(lane->text);
}

loom_status loom__out_stream_init(loom_lane *lane, stream *s, loom_err *err)
{
    if (!lane->tok)
        return LOOM_OK;
    return loom_detok_new(lane->tok, 1, &s->detok, err);
}

/* ---------------------------------------------------------------- text */

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
    size_t n;
    const char *b = loom_lane_token_bytes(lane, token, &n);
    return b ? held_append(s, b, n) : 0;
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

/* ---------------------------------------------------------------- events */

static void event_init(const stream *s, int32_t token, uint64_t now,
                       loom_lane_event *ev)
{
    memset(ev, 0, sizeof *ev);
    ev->stream = s->id;
    ev->token = token;
    ev->seed = s->seed;
    ev->n_prompt = s->n_prompt;
    ev->n_generated = s->n_gen;
    ev->ttft_s = s->t_first ? (double)(s->t_first - s->t_add) * 1e-9 : 0.0;
    ev->elapsed_s = (double)(now - s->t_add) * 1e-9;
}

static void event_logprobs(const stream *s, const loom_sample_result *res,
                           loom_lane_event *ev)
{
    if (res && s->n_logprobs >= 0) {
        ev->logprob = res->logprob;
        ev->n_top = res->n_top;
        ev->top = res->top;
    }
}

/* The final event, with the token it carries (or -1). */
static void finish_with(loom_lane *lane, stream *s, loom_finish why,
                        int32_t token, const loom_sample_result *res,
                        const char *error)
{
    loom_lane_event ev;
    event_init(s, token, loom_now_ns(), &ev);
    ev.finish = why;
    ev.error = error;
    event_logprobs(s, res, &ev);
    if (lane->has_text) {
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
        loom__pool_put(&lane->pool, s->cache);
        s->cache = NULL;
    }
    loom__spec_stream_free(lane, s);
    s->state = ST_DONE;
    loom_mutex_lock(lane->mu);
    if (s->counted_active)
        lane->n_ending_active++;
    else
        lane->n_ending_queued++;
    loom_mutex_unlock(lane->mu);
    s->cb(s->user, &ev);
}

void loom__out_finish(loom_lane *lane, stream *s, loom_finish why)
{
    text_reset(lane);
    finish_with(lane, s, why, -1, NULL, NULL);
}

void loom__out_error(loom_lane *lane, stream *s, const char *msg)
{
    text_reset(lane);
    finish_with(lane, s, LOOM_FINISH_ERROR, -1, NULL, msg);
}

static int is_eos(const loom_lane *lane, int32_t token)
{
    for (int32_t i = 0; i < lane->n_eos; i++)
        if (lane->eos[i] == token)
            return 1;
    return 0;
}

void loom__out_deliver(loom_lane *lane, stream *s,
                       const loom_sample_result *res, uint64_t now)
{
    int32_t tok = res->token;
    s->n_gen++;
    if (!s->t_first) {
        s->t_first = now;
        loom__stats_first_token(lane, s, now);
    }
    /* the draw already recorded tok in the sampler (spec.c) */
    s->last = tok;

    text_reset(lane);
    if (!s->ignore_eos && is_eos(lane, tok)) {
        finish_with(lane, s, LOOM_FINISH_STOP, tok, res, NULL);
        return;
    }
    loom_finish why = LOOM_FINISH_NONE;
    if (lane->has_text) {
        loom_err err;
        snprintf(err.msg, sizeof err.msg, "out of memory");
        if (text_push(lane, s, tok, &err)) {
            loom_err_prefix(&err, "detokenizing token %d", tok);
            loom__out_error(lane, s, err.msg);
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
        finish_with(lane, s, why, tok, res, NULL);
        return;
    }

    loom_lane_event ev;
    event_init(s, tok, now, &ev);
    if (lane->has_text) {
        ev.text = lane->text;
        ev.text_len = lane->n_text;
    }
    event_logprobs(s, res, &ev);
    if (s->cb(s->user, &ev))
        s->cancel_local = 1;
}
