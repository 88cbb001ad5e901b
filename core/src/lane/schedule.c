/* The lane's rounds: cancellations end streams, waiting streams are
 * admitted from the queue's head while there is a cache slot, and only the
 * active streams' decode rows and prompt chunks go through the one forward
 * whose draws are delivered in row order. */
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
    if (rc != LOOM_OK)
        return rc;
    for (int32_t j = 0; j < s->n_prompt; j++)
        loom_sampler_accept(s->sampler, s->prompt[j], 0);
    s->state = ST_PREFILL;
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
}

static void LOOM_ABI draw_range(void *ctx, int64_t begin, int64_t end)
{
    draw_job *jobs = (draw_job *)ctx;
    for (int64_t j = begin; j < end; j++)
        loom_sampler_sample(jobs[j].s->sampler, jobs[j].logits,
                            jobs[j].position, &jobs[j].res);
}

/* After a forward: positions advance, and each logits row becomes a draw
 * job (row k of the logits, host or device); returns the jobs. */
static int32_t take_draws(loom_lane *lane, int32_t nr)
{
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
        if (s->state == ST_PREFILL)
            s->state = ST_DECODE;
        lane->jobs[nj++] = (draw_job){s, lg, k, row->position + 1, {0}};
        k++;
    }
    return nj;
}

loom_status loom__lane_round(loom_lane *lane, int32_t *n_rows_out,
                             loom_err *err)
{
    round_begin(lane);

    /* the round: decode rows first, then prompt chunks */
    int32_t nr = 0, n_logit_rows = 0, n_prompt_rows = 0;
    for (int32_t i = 0; i < lane->n_act; i++) {
        stream *s = lane->act[i];
        if (s->state != ST_DECODE)
            continue;
        lane->rows[nr] =
            (loom_row){s->cache, s->last, s->pos, -1, LOOM_ROW_LOGITS};
        lane->row_stream[nr++] = s;
        n_logit_rows++;
    }
    for (int32_t i = 0; i < lane->n_act && nr < lane->round_tokens; i++) {
        stream *s = lane->act[i];
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
        loom__lane_reap(lane);
        return LOOM_OK;
    }

    /* one forward */
    loom_round round = {sizeof round, sizeof(loom_row), lane->rows, nr};
    loom_output outp;
    memset(&outp, 0, sizeof outp);
    outp.struct_size = sizeof outp;
    /* on a device the logits stay there: forward is stream-ordered and the
     * draws' one synchronisation ends the round */
    outp.logits =
        lane->dev ? loom__dev_logits_view(lane, n_logit_rows)
                  : loom_view_host_f32(lane->logits, n_logit_rows, lane->vocab);
    uint64_t t0 = loom_now_ns();
    loom_status rc =
        loom_family_forward(lane->fam, lane->model, &round, &outp, err);
    uint64_t t1 = loom_now_ns();
    if (rc != LOOM_OK)
        loom_err_prefix(err, "forward of %d rows", nr);
    int32_t nj = 0;
    if (rc == LOOM_OK)
        nj = take_draws(lane, nr);
    if (rc == LOOM_OK && lane->dev) {
        rc = loom__dev_draw(lane, lane->jobs, nj, NULL, 0, NULL, NULL, err);
        if (rc != LOOM_OK)
            loom_err_prefix(err, "sampling %d rows on the device", nj);
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

    /* the streams' draws are independent, so on the host they run over the
     * thread pool; delivery stays in row order */
    if (!lane->dev) {
        if (nj > 1 && lane->eng->pool)
            loom_pool_run(lane->eng->pool, nj, draw_range, lane->jobs);
        else
            draw_range(lane->jobs, 0, nj);
    }
    for (int32_t j = 0; j < nj; j++)
        loom__out_deliver(lane, lane->jobs[j].s, &lane->jobs[j].res, t1);

    loom__stats_round(lane, n_prompt_rows, n_logit_rows, t0, t1);
    loom__lane_reap(lane);
    return LOOM_OK;
}
