/* The lane on the device: forward writes logits into one device buffer the
 * lane owns, the core's device sampler draws there (penalties as sparse
 * per-stream lists), and only ids and asked-for logprobs come back, with one
 * synchronisation a round. */
#include <stdlib.h>
#include <string.h>

#include <loom/cuda_runtime.h>

#include "lane_impl.h"

/* Penalty entries staged per stream a round; a stream with more is drawn
 * on the host from its one copied row (rare: long penalised streams). */
#define DEV_PEN_PER_STREAM 4096

struct lane_device {
    const loom_cuda *cu;
    loom_cuda_sampler *samp;
    int32_t max_rows, pen_cap; /* rows the sampler draws a call */
    int32_t logit_rows;        /* rows of the logits buffer (windows too) */
    loom_cu_ptr logits; /* logit_rows x vocab float32, LOOM_MEM_SCRATCH */
    uint64_t logits_bytes;
    loom_cuda_sample_req *reqs; /* max_rows */
    loom_sample_result *res;    /* max_rows */
    int32_t *req_of;            /* job -> request, -1: drawn on the host */
    loom_cuda_penalty *pen;     /* pen_cap */
    draw_job *jobs;             /* a round's plain draws, max_rows */
    uint8_t *drawn;             /* logit_rows: drawn here this round */
    /* time_device: a round's start, forward issued, draw back; the end of
     * the round before (swapped with end each round) */
    loom_cu_event ev[4];
    int timing, have_prev;
};

enum { EV_START, EV_FORWARD, EV_END, EV_PREV };

loom_status loom__dev_init(loom_lane *lane, int time_device, loom_err *err)
{
    const loom_engine *e = lane->eng;
    if (!e->cuda || e->info.device != LOOM_DEVICE_CUDA)
        return LOOM_OK;
    const loom_cuda *cu = loom_cuda_table(e->cuda);
    lane_device *d = (lane_device *)calloc(1, sizeof *d);
    if (!d)
        return loom_err_set(err, LOOM_ERR_NOMEM, "lane: no memory");
    lane->dev = d;
    d->cu = cu;
    /* the sampler draws one row per stream; the logits buffer holds the
     * windows' and prompt logprobs' rows too */
    d->max_rows = lane->max_streams;
    d->logit_rows = lane->logit_rows;
    d->pen_cap = DEV_PEN_PER_STREAM * d->max_rows;
    d->reqs =
        (loom_cuda_sample_req *)calloc((size_t)d->max_rows, sizeof *d->reqs);
    d->res = (loom_sample_result *)calloc((size_t)d->max_rows, sizeof *d->res);
    d->req_of = (int32_t *)calloc((size_t)d->max_rows, sizeof *d->req_of);
    d->pen = (loom_cuda_penalty *)calloc((size_t)d->pen_cap, sizeof *d->pen);
    d->jobs = (draw_job *)calloc((size_t)d->max_rows, sizeof *d->jobs);
    d->drawn = (uint8_t *)calloc((size_t)d->logit_rows, 1);
    if (!d->reqs || !d->res || !d->req_of || !d->pen || !d->jobs || !d->drawn)
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "lane: no memory for the device sampler's %d rows",
                            d->max_rows);
    loom_status st = loom_cuda_make_current(e->cuda, err);
    if (st != LOOM_OK)
        return st;
    d->logits_bytes =
        (uint64_t)d->logit_rows * (uint64_t)lane->vocab * sizeof(float);
    st = cu->alloc(cu, LOOM_MEM_SCRATCH, d->logits_bytes, &d->logits, err);
    if (st != LOOM_OK) {
        d->logits_bytes = 0;
        loom_err_prefix(err, "lane: device logits (%d rows x %d)",
                        d->logit_rows, lane->vocab);
        return st;
    }
    /* the list limit covers bias entries too: both are per call */
    st = loom_cuda_sampler_new(cu, lane->vocab, d->max_rows, d->pen_cap,
                               &d->samp, err);
    for (int i = 0; st == LOOM_OK && time_device && i < 4; i++) {
        loom_cu_result r = cu->eventCreate(&d->ev[i], 0);
        if (r != 0)
            st = loom_cuda_check(cu, r, "lane: cuEventCreate (time_device)",
                                 err);
    }
    d->timing = st == LOOM_OK && time_device;
    return st;
}

static void mark(lane_device *d, int which)
{
    d->cu->eventRecord(d->ev[which], d->cu->stream);
}

void loom__dev_mark_start(loom_lane *lane)
{
    if (lane->dev && lane->dev->timing)
        mark(lane->dev, EV_START);
}

void loom__dev_mark_forward(loom_lane *lane)
{
    if (lane->dev && lane->dev->timing)
        mark(lane->dev, EV_FORWARD);
}

static double between(lane_device *d, int a, int b)
{
    float ms = 0;
    return d->cu->eventElapsedTime(&ms, d->ev[a], d->ev[b]) == 0 ? ms * 1e-3
                                                                 : 0;
}

void loom__dev_mark_end(loom_lane *lane, int decode)
{
    lane_device *d = lane->dev;
    if (!d || !d->timing)
        return;
    /* the stream is idle once the draw is back: the end is this moment */
    mark(d, EV_END);
    if (d->cu->eventSynchronize(d->ev[EV_END]) != 0)
        return;
    if (decode) {
        double f = between(d, EV_START, EV_FORWARD);
        double w = between(d, EV_FORWARD, EV_END);
        double h = d->have_prev ? between(d, EV_PREV, EV_START) : 0;
        loom__stats_device(lane, f, w, h);
    }
    loom_cu_event t = d->ev[EV_PREV];
    d->ev[EV_PREV] = d->ev[EV_END];
    d->ev[EV_END] = t;
    d->have_prev = 1;
}

void loom__dev_free(loom_lane *lane)
{
    lane_device *d = lane->dev;
    if (!d)
        return;
    const loom_cuda *cu = d->cu;
    cu->ctxSetCurrent(cu->context);
    /* the round's kernels may still read the buffer */
    cu->streamSynchronize(cu->stream);
    loom_cuda_sampler_free(d->samp);
    for (int i = 0; i < 4; i++)
        if (d->ev[i])
            cu->eventDestroy(d->ev[i]);
    if (d->logits_bytes)
        cu->free(cu, LOOM_MEM_SCRATCH, d->logits, d->logits_bytes);
    free(d->reqs);
    free(d->res);
    free(d->req_of);
    free(d->pen);
    free(d->jobs);
    free(d->drawn);
    free(d);
    lane->dev = NULL;
}

loom_view loom__dev_logits_view(const loom_lane *lane, int32_t rows)
{
    loom_view v = loom_view_host_f32(NULL, rows, lane->vocab);
    v.kind = LOOM_MEM_DEVICE;
    v.device_ptr = lane->dev->logits;
    return v;
}

/* A stream whose lists do not fit the staging: its row comes back (to its
 * own row of the host logits) and the host sampler draws it (the same
 * rule). */
static loom_status host_draw(loom_lane *lane, draw_job *j, loom_err *err)
{
    const loom_cuda *cu = lane->dev->cu;
    size_t row = (size_t)lane->vocab * sizeof(float);
    float *to = lane->logits + (size_t)j->logits_row * (size_t)lane->vocab;
    loom_cu_result r = cu->memcpyDtoHAsync(
        to, lane->dev->logits + (uint64_t)j->logits_row * row, row, cu->stream);
    if (r == 0)
        r = cu->streamSynchronize(cu->stream);
    if (r != 0)
        return loom_cuda_check(cu, r, "lane: copying a logits row back", err);
    loom_sampler_sample(j->s->sampler, to, j->position, j->res);
    return LOOM_OK;
}

loom_status loom__dev_draw(loom_lane *lane, draw_job *jobs, int32_t nj,
                           const loom_cuda_window *win, int32_t n_win,
                           int32_t *n_emit, int32_t *emit, loom_err *err)
{
    lane_device *d = lane->dev;
    if (nj <= 0)
        return LOOM_OK;
    if (nj > d->max_rows)
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "lane: %d rows to draw on the device (at most %d)",
                            nj, d->max_rows);
    loom_status st = loom_cuda_make_current(lane->eng->cuda, err);
    if (st != LOOM_OK)
        return st;
    int32_t n = 0, np = 0, nb = 0;
    for (int32_t j = 0; j < nj; j++) {
        const loom_sample_params *p = loom__sampler_params(jobs[j].s->sampler);
        int32_t k = -1;
        if (nb + p->n_bias <= d->pen_cap)
            k = loom__sampler_pen_list(jobs[j].s->sampler, d->pen + np,
                                       d->pen_cap - np);
        if (k < 0) {
            /* a window's rows must all be drawn where it is verified */
            if (n_win > 0)
                return loom_err_set(err, LOOM_ERR_FULL,
                                    "lane: stream %llu's penalty and bias "
                                    "lists pass the device sampler's %d "
                                    "entries in a speculative round",
                                    (unsigned long long)jobs[j].s->id,
                                    d->pen_cap);
            d->req_of[j] = -1;
            continue;
        }
        d->req_of[j] = n;
        d->reqs[n++] = (loom_cuda_sample_req){
            p, jobs[j].position, jobs[j].logits_row, d->pen + np, k};
        np += k;
        nb += p->n_bias;
    }
    if (n > 0) {
        int64_t ld = lane->vocab;
        st = n_win > 0 ? loom_cuda_verify(d->samp, d->logits, ld, d->reqs, n,
                                          win, n_win, n_emit, emit, d->res, err)
                       : loom_cuda_sample(d->samp, d->logits, ld, d->reqs, n,
                                          d->res, err);
        if (st != LOOM_OK)
            return st;
    }
    for (int32_t j = 0; j < nj; j++) {
        if (d->req_of[j] >= 0)
            jobs[j].res[0] = d->res[d->req_of[j]];
        else if ((st = host_draw(lane, &jobs[j], err)) != LOOM_OK)
            return st;
    }
    return LOOM_OK;
}

/* A stream drawn on the host this round: a verify window, or prompt rows
 * whose logprobs it asked for. */
static int host_group(const loom_lane *lane, int32_t r0, int32_t r1)
{
    const stream *s = lane->row_stream[r0];
    if (s->n_draft > 0 && s->state == ST_DECODE)
        return 1;
    for (int32_t r = r0; r < r1; r++) {
        const loom_row *row = &lane->rows[r];
        if ((row->flags & LOOM_ROW_LOGITS) && s->state == ST_PREFILL &&
            row->position < s->n_prompt - 1)
            return 1;
    }
    return 0;
}

loom_status loom__dev_round(loom_lane *lane, int32_t nr, loom_err *err)
{
    lane_device *d = lane->dev;
    const loom_cuda *cu = d->cu;
    loom_status st = loom_cuda_make_current(lane->eng->cuda, err);
    if (st != LOOM_OK)
        return st;
    size_t row_bytes = (size_t)lane->vocab * sizeof(float);
    int32_t k = 0, nj = 0, copied = 0;
    /* a stream's rows are contiguous in the round */
    for (int32_t r0 = 0, r1; r0 < nr; r0 = r1) {
        stream *s = lane->row_stream[r0];
        int32_t n = 0, last = 0;
        for (r1 = r0; r1 < nr && lane->row_stream[r1] == s; r1++)
            if (lane->rows[r1].flags & LOOM_ROW_LOGITS) {
                n++;
                last = lane->rows[r1].position;
            }
        if (n == 0)
            continue;
        int host = n > 1 || host_group(lane, r0, r1);
        memset(d->drawn + k, !host, (size_t)n);
        if (host) {
            /* into its rows of the host logits; the round's one
             * synchronisation (the draws') waits for it */
            loom_cu_result cr = cu->memcpyDtoHAsync(
                lane->logits + (size_t)k * (size_t)lane->vocab,
                d->logits + (uint64_t)k * row_bytes, (size_t)n * row_bytes,
                cu->stream);
            if (cr != 0)
                return loom_cuda_check(cu, cr, "lane: copying logits rows back",
                                       err);
            copied = 1;
        } else {
            d->jobs[nj++] = (draw_job){
                s, NULL, lane->vocab, last + 1, 1, NULL, lane->draws + k, 1, k};
            /* the followers of a prompt done here draw from its row too
             * (group.c hands them their first draws) */
            if (s->state == ST_PREFILL && last == s->n_prompt - 1)
                for (int32_t i = 0; i < lane->n_act; i++)
                    if (loom__follows(lane->act[i], s))
                        d->jobs[nj++] = (draw_job){lane->act[i],
                                                   NULL,
                                                   lane->vocab,
                                                   last + 1,
                                                   1,
                                                   NULL,
                                                   &lane->act[i]->first,
                                                   1,
                                                   k};
        }
        k += n;
    }
    if (nj > 0)
        st = loom__dev_draw(lane, d->jobs, nj, NULL, 0, NULL, NULL, err);
    else if (copied)
        st = loom_cuda_check(cu, cu->streamSynchronize(cu->stream),
                             "lane: copying logits rows back", err);
    if (st != LOOM_OK)
        return st;
    /* the next draw sees this token in its penalties, as on the host */
    for (int32_t j = 0; j < nj; j++)
        loom_sampler_accept(d->jobs[j].s->sampler, d->jobs[j].res[0].token, 1);
    return LOOM_OK;
}

int loom__dev_drawn(const loom_lane *lane, int32_t k)
{
    return lane->dev->drawn[k];
}
