/* The lane's rounds: cancellations end streams, waiting streams are
 * admitted from the queue's head while there is a cache slot, and only the
 * active streams' decode rows (or verify windows, spec.c) and prompt chunks
 * go through the one forward whose draws are delivered in row order. */
#include <stdlib.h>
#include <string.h>

#include "lane_impl.h"

void loom__stream_free(stream *s)
{
    if (!s)
        return;
    free(s->prompt);
    for (int32_t i = 0; i < s->n_stop; i++)
        free(s->stop[i]);
    free(s->stop);
    free(s->stop_len);
    loom_sampler_free(s->sampler); /* before the bias it borrows */
    free(s->bias);
    if (s->detok)
        loom_detok_free(s->detok);
    free(s->held);
    free(s);
}

/* Takes the queue's first stream [under mu]. */
static stream *queue_pop(loom_lane *lane)
{
    stream *s = lane->q_head;
    if (!s)
        return NULL;
    lane->q_head = s->next;
    if (lane->q_head)
        lane->q_head->prev = NULL;
    else
        lane->q_tail = NULL;
    s->next = s->prev = NULL;
    s->queued = 0;
    return s;
}

void loom__lane_reap(loom_lane *lane)
{
    stream *dead = lane->gone;
    lane->gone = NULL;
    int32_t k = 0;
    for (int32_t i = 0; i < lane->n_act; i++) {
        stream *s = lane->act[i];
        if (s->state == ST_DONE) {
            s->gone = dead;
            dead = s;
        } else {
            lane->act[k++] = s;
        }
    }
    lane->n_act = k;
    /* before the leaders that ended are freed */
    loom__group_orphans(lane);
    /* the counts drop only now, after the final events: a caller that sees
     * nothing pending has every final event */
    loom_mutex_lock(lane->mu);
    for (stream *s = dead; s; s = s->gone) {
        loom__map_del(&lane->map, s->id);
        if (s->counted_active) {
            lane->n_active--;
            lane->n_ending_active--;
        } else {
            lane->n_queued--;
            lane->n_ending_queued--;
        }
        lane->stats.st.streams_finished++;
    }
    loom_mutex_unlock(lane->mu);
    while (dead) {
        stream *n = dead->gone;
        loom__stream_free(dead);
        dead = n;
    }
}

/* Ends a stream that holds no slot in act (freed at reap). */
static void finish_gone(loom_lane *lane, stream *s, loom_finish why,
                        const char *msg)
{
    if (why == LOOM_FINISH_ERROR)
        loom__out_error(lane, s, msg);
    else
        loom__out_finish(lane, s, why);
    s->gone = lane->gone;
    lane->gone = s;
}

void loom__lane_cancel_all(loom_lane *lane)
{
    loom_mutex_lock(lane->mu);
    stream *waiting = lane->cancelled, *s;
    lane->cancelled = NULL;
    while ((s = queue_pop(lane))) {
        s->next = waiting;
        waiting = s;
    }
    loom_mutex_unlock(lane->mu);
    for (int32_t i = 0; i < lane->n_act; i++)
        if (lane->act[i]->state != ST_DONE)
            loom__out_finish(lane, lane->act[i], LOOM_FINISH_CANCELLED);
    while (waiting) {
        stream *n = waiting->next;
        finish_gone(lane, waiting, LOOM_FINISH_CANCELLED, NULL);
        waiting = n;
    }
    loom__lane_reap(lane);
}

/* Gives an admitted stream its sampler and cache. */
static loom_status admit(loom_lane *lane, stream *s, loom_err *err)
{
    loom_status rc =
        loom__sampler_new(&s->sp, lane->vocab, s->seed, &s->sampler, err);
    if (rc == LOOM_OK)
        rc = loom__pool_get(&lane->pool, &s->cache, err);
    if (rc == LOOM_OK)
        rc = loom__spec_stream_new(lane, s, err);
    if (rc != LOOM_OK)
        return rc;
    for (int32_t j = 0; j < s->n_prompt; j++)
        loom_sampler_accept(s->sampler, s->prompt[j], 0);
    s->state = ST_PREFILL;
    s->t_admit = loom_now_ns();
    loom__group_join(lane, s);
    return LOOM_OK;
}

/* Cancellations and admissions, before the round takes its rows. */
static void round_begin(loom_lane *lane)
{
    loom_mutex_lock(lane->mu);
    stream *cancelled = lane->cancelled;
    lane->cancelled = NULL;
    for (int32_t i = 0; i < lane->n_act; i++)
        if (lane->act[i]->cancel)
            lane->act[i]->cancel_local = 1;
    loom_mutex_unlock(lane->mu);

    /* cancelled streams end here, before they take rows */
    while (cancelled) {
        stream *n = cancelled->next;
        finish_gone(lane, cancelled, LOOM_FINISH_CANCELLED, NULL);
        cancelled = n;
    }
    int32_t k = 0;
    for (int32_t i = 0; i < lane->n_act; i++) {
        stream *s = lane->act[i];
        if (s->cancel_local && s->state != ST_DONE)
            loom__out_finish(lane, s, LOOM_FINISH_CANCELLED);
        if (s->state == ST_DONE) {
            s->gone = lane->gone;
            lane->gone = s;
        } else {
            lane->act[k++] = s;
        }
    }
    lane->n_act = k;

    /* admissions, in arrival order, while there is a cache slot */
    while (lane->n_act < lane->max_streams) {
        loom_mutex_lock(lane->mu);
        stream *s = queue_pop(lane);
        if (s) {
            s->counted_active = 1;
            lane->n_queued--;
            lane->n_active++;
        }
        loom_mutex_unlock(lane->mu);
        if (!s)
            break;
        loom_err err;
        if (admit(lane, s, &err) != LOOM_OK)
            finish_gone(lane, s, LOOM_FINISH_ERROR, err.msg);
        else
            lane->act[lane->n_act++] = s;
    }
    /* followers of a leader cancelled above */
    loom__group_orphans(lane);
}

static void LOOM_ABI draw_range(void *ctx, int64_t begin, int64_t end)
{
    draw_job *jobs = (draw_job *)ctx;
    for (int64_t j = begin; j < end; j++)
        if (jobs[j].n_emit == 0) /* else drawn on the device */
            loom__spec_draw(&jobs[j]);
}

loom_status loom__lane_round(loom_lane *lane, int32_t *n_rows_out,
                             loom_err *err)
{
    round_begin(lane);

    /* windows take what rows and logits rows the round spares beyond one
     * row per decoding stream and one for prompts */
    int32_t n_dec = 0, n_pre = 0;
    for (int32_t i = 0; i < lane->n_act; i++) {
        n_dec += lane->act[i]->state == ST_DECODE;
        n_pre += lane->act[i]->state == ST_PREFILL;
    }
    int32_t spare = lane->round_tokens - n_dec - (n_pre > 0);
    if (spare > lane->logit_rows - lane->max_streams)
        spare = lane->logit_rows - lane->max_streams;
    loom__spec_draft(lane, spare);

    /* the round: decode rows and windows first, then prompt chunks */
    int32_t nr = 0, n_logit_rows = 0, n_prompt_rows = 0, n_tap = 0;
    for (int32_t i = 0; i < lane->n_act; i++) {
        stream *s = lane->act[i];
        if (s->state != ST_DECODE)
            continue;
        int32_t n = loom__spec_rows(lane, s, lane->rows + nr);
        s->pos0 = s->pos;
        s->n_round_rows = n;
        s->row0 = nr;
        s->tap0 = n_tap;
        if (lane->rows[nr].flags & LOOM_ROW_TAP)
            n_tap += n;
        for (int32_t j = 0; j < n; j++)
            lane->row_stream[nr++] = s;
        n_logit_rows += n;
    }
    /* logits rows the decode rows and windows left, beyond one for each
     * prompt's last row: for streams that asked for their prompt's
     * logprobs */
    int32_t lp_spare = lane->logit_rows - n_logit_rows - n_pre;
    for (int32_t i = 0; i < lane->n_act && nr < lane->round_tokens; i++) {
        stream *s = lane->act[i];
        if (s->state != ST_PREFILL)
            continue;
        int32_t chunk = s->n_prompt - s->n_fed;
        if (chunk > lane->prefill_chunk)
            chunk = lane->prefill_chunk;
        if (chunk > lane->round_tokens - nr)
            chunk = lane->round_tokens - nr;
        if (s->prompt_lp) {
            if (chunk > lp_spare + 1)
                chunk = lp_spare + 1;
            lp_spare -= chunk - 1;
        }
        uint32_t tap = loom__spec_row_flags(lane, s);
        s->pos0 = s->n_fed;
        s->n_round_rows = chunk;
        s->row0 = nr;
        s->tap0 = n_tap;
        if (tap)
            n_tap += chunk;
        for (int32_t j = 0; j < chunk; j++) {
            int32_t at = s->n_fed + j;
            uint32_t fl =
                at == s->n_prompt - 1 || s->prompt_lp ? LOOM_ROW_LOGITS : 0;
            lane->rows[nr] =
                (loom_row){s->cache, s->prompt[at], at, -1, fl | tap};
            lane->row_stream[nr++] = s;
            if (fl)
                n_logit_rows++;
        }
        n_prompt_rows += chunk;
    }
    if (n_rows_out)
        *n_rows_out = nr;
    if (nr == 0) {
        loom__lane_reap(lane);
        return LOOM_OK;
    }

    /* one forward */
    loom_round round = {sizeof round, sizeof(loom_row), lane->rows, nr};
    loom_output outp;
    memset(&outp, 0, sizeof outp);
    outp.struct_size = sizeof outp;
    /* on a device the logits stay there: forward is stream-ordered and the
     * round's one synchronisation (loom__dev_round) ends it */
    outp.logits =
        lane->dev ? loom__dev_logits_view(lane, n_logit_rows)
                  : loom_view_host_f32(lane->logits, n_logit_rows, lane->vocab);
    if (n_tap > 0)
        outp.taps =
            loom_view_host_f32(lane->spec.taps, n_tap, lane->spec.tap_width);
    uint64_t t0 = loom_now_ns();
    loom__dev_mark_start(lane);
    loom_status rc =
        loom_family_forward(lane->fam, lane->model, &round, &outp, err);
    uint64_t t1 = loom_now_ns();
    if (rc != LOOM_OK) {
        loom_err_prefix(err, "forward of %d rows", nr);
    } else if (lane->dev) {
        loom__dev_mark_forward(lane);
        rc = loom__dev_round(lane, nr, err);
        if (rc != LOOM_OK)
            loom_err_prefix(err, "drawing %d logits rows on the device",
                            n_logit_rows);
        else
            loom__dev_mark_end(lane, n_prompt_rows == 0);
        t1 = loom_now_ns();
    }
    if (rc != LOOM_OK) {
        for (int32_t r = 0; r < nr; r++) {
            stream *s = lane->row_stream[r];
            if (s->state != ST_DONE)
                loom__out_error(lane, s, err->msg);
        }
        loom__lane_reap(lane);
        return rc;
    }

    /* positions advance; a stream's logits rows make one job (a window's
     * rows are contiguous); the streams' draws are independent, so they
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
        if (s->state == ST_PREFILL && row->position < s->n_prompt - 1) {
            /* a prompt row's logits: the next prompt token's logprobs */
            k++;
            if (!s->cancel_local)
                loom__out_prompt_logprob(lane, s, row->position + 1, lg, t1);
            continue;
        }
        if (nj > 0 && lane->jobs[nj - 1].s == s) {
            lane->jobs[nj - 1].n++;
        } else {
            int prompt_done = s->state == ST_PREFILL;
            if (prompt_done)
                s->state = ST_DECODE;
            /* n_emit 1: drawn on the device already */
            int32_t done = lane->dev && loom__dev_drawn(lane, k);
            lane->jobs[nj++] = (draw_job){s,
                                          lg,
                                          lane->vocab,
                                          row->position + 1,
                                          1,
                                          s->n_draft > 0 ? s->draft : NULL,
                                          lane->draws + k,
                                          done,
                                          k};
            /* the members of its group that waited draw from this row */
            if (prompt_done)
                nj = loom__group_release(lane, s, lg, k, done, lane->jobs, nj);
        }
        k++;
    }
    if (nj > 1 && lane->eng->pool)
        loom_pool_run(lane->eng->pool, nj, draw_range, lane->jobs);
    else
        draw_range(lane->jobs, 0, nj);
    /* windows commit before anything is delivered: a stream that stops
     * inside its window hands its cache back committed */
    loom__spec_keep(lane);
    int32_t n_gen = 0;
    for (int32_t j = 0; j < nj; j++) {
        draw_job *jb = &lane->jobs[j];
        n_gen += jb->n_emit;
        /* nothing past a stop (eos, stop string, max_tokens, context) or
         * a callback's cancel */
        for (int32_t i = 0; i < jb->n_emit; i++) {
            if (jb->s->state == ST_DONE || jb->s->cancel_local)
                break;
            loom__out_deliver(lane, jb->s, &jb->res[i], t1);
        }
    }

    loom__stats_round(lane, n_prompt_rows, n_gen, t0, t1);
    loom__lane_reap(lane);
    return LOOM_OK;
}
