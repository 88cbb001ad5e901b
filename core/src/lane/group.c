/* Streams of one prompt that share its prefill (loom_lane_add_group): the
 * first member admitted prefills; members admitted while it does wait
 * (ST_FOLLOW) and, when its prompt is done, take a copy of its cache
 * (the family's cache_copy) and draw their first tokens, each with its own
 * sampler and seed, from the same last-row logits. A stream's draw depends
 * only on its logits and its key, so each member emits what it would emit
 * alone. Members that cannot share (admitted after the prompt is done, a
 * drafter stream, prompt logprobs) prefill themselves, as lone streams
 * do. */
#include "lane_impl.h"

/* Whether f can wait for t's prefill instead of doing its own: f's
 * drafter would need the prompt's taps and its prompt logprobs events
 * the prompt's rows, neither of which a copy gives. */
static int can_follow(const stream *f, const stream *t)
{
    return t != f && t->group == f->group && t->state == ST_PREFILL &&
           !t->cancel_local && !f->ds && !f->prompt_lp;
}

void loom__group_join(loom_lane *lane, stream *s)
{
    if (!s->group)
        return;
    for (int32_t i = 0; i < lane->n_act; i++) {
        stream *t = lane->act[i];
        if (can_follow(s, t)) {
            s->state = ST_FOLLOW;
            s->lead = t;
            return;
        }
    }
}

void loom__group_orphans(loom_lane *lane)
{
    for (int32_t i = 0; i < lane->n_act; i++) {
        stream *f = lane->act[i];
        if (f->state != ST_FOLLOW || f->lead->state != ST_DONE)
            continue;
        /* the leader never fed this cache: it is empty, as at admission */
        f->state = ST_PREFILL;
        f->lead = NULL;
        loom__group_join(lane, f);
    }
}

int32_t loom__group_release(loom_lane *lane, stream *s, const float *lg,
                            int32_t k, int drawn, draw_job *jobs, int32_t nj)
{
    for (int32_t i = 0; i < lane->n_act; i++) {
        stream *f = lane->act[i];
        if (!loom__follows(f, s))
            continue;
        f->lead = NULL;
        loom_err err;
        loom_status rc = loom_family_cache_copy(lane->fam, lane->model,
                                                f->cache, s->cache, &err);
        if (rc != LOOM_OK) {
            loom_err_prefix(&err, "copying the prompt's cache");
            loom__out_error(lane, f, err.msg);
            continue;
        }
        f->n_fed = f->n_prompt;
        f->pos = s->pos;
        f->state = ST_DECODE;
        f->n_draft = 0;
        f->n_round_rows = 0;
        jobs[nj++] = (draw_job){f,    lg,        lane->vocab, s->pos, 1,
                                NULL, &f->first, drawn,       k};
    }
    return nj;
}
