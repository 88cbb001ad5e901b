/* Speculative decoding in the lane: a stream whose engine has a drafter
 * feeds verify windows (its pending token and the drafter's proposals),
 * keeps the longest run of drafts that equal the target's own keyed draws,
 * commits its cache to the kept rows and hands their tapped features to
 * the drafter. The draw at a position depends only on that position's
 * logits and the key, so this emits exactly what plain decoding emits, at
 * any temperature. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lane_impl.h"

/* Weight of the newest window in a stream's acceptance average. */
#define ACCEPT_RATE 0.5f
/* Below this many accepted drafts a window on average, the planner rests a
 * stream for REST_ROUNDS plain rows between one-draft probes. */
#define REST_BELOW  0.3f
#define REST_ROUNDS 4
/* Logits rows a round may give windows beyond one row per stream (the
 * buffer is vocab floats a row). */
#define MAX_EXTRA_ROWS 128

loom_status loom__spec_init(loom_lane *lane, const loom_lane_params *p,
                            loom_err *err)
{
    spec_state *sp = &lane->spec;
    memset(sp, 0, sizeof *sp);
    loom_engine *e = lane->eng;
    if (p->draft_window < 0)
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "lane: draft_window %d: must be >= 0",
                            p->draft_window);
    if (!e->drafter)
        return LOOM_OK;
    int32_t md = e->needs.block_size - 1;
    if (md > LOOM_MAX_WINDOW - 1)
        md = LOOM_MAX_WINDOW - 1;
    sp->max_draft = md;
    sp->fixed = p->draft_window > md ? md : p->draft_window;
    sp->tap_width = e->needs.n_taps * e->info.hidden;
    size_t ms = (size_t)lane->max_streams, rt = (size_t)lane->round_tokens;
    sp->streams = (loom_draft_stream **)calloc(ms, sizeof *sp->streams);
    sp->who = (stream **)calloc(ms, sizeof *sp->who);
    sp->last = (int32_t *)calloc(ms, sizeof(int32_t));
    sp->n_out = (int32_t *)calloc(ms, sizeof(int32_t));
    sp->tokens = (int32_t *)calloc(ms * (size_t)md, sizeof(int32_t));
    sp->parents = (int32_t *)calloc(ms * (size_t)md, sizeof(int32_t));
    sp->tap_pos = (int32_t *)calloc(rt, sizeof(int32_t));
    sp->tap_tok = (int32_t *)calloc(rt, sizeof(int32_t));
    if (sp->tap_width > 0)
        sp->taps = (float *)malloc(sizeof(float) * rt * (size_t)sp->tap_width);
    if (!sp->streams || !sp->who || !sp->last || !sp->n_out || !sp->tokens ||
        !sp->parents || !sp->tap_pos || !sp->tap_tok ||
        (sp->tap_width > 0 && !sp->taps))
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "lane: out of memory for the drafter's taps (%d "
                            "rows x %d)",
                            lane->round_tokens, sp->tap_width);
    sp->ref = &e->drafter_ref;
    sp->drafter = e->drafter;
    return LOOM_OK;
}

void loom__spec_free(loom_lane *lane)
{
    spec_state *sp = &lane->spec;
    free(sp->streams);
    free(sp->who);
    free(sp->last);
    free(sp->n_out);
    free(sp->tokens);
    free(sp->parents);
    free(sp->tap_pos);
    free(sp->tap_tok);
    free(sp->taps);
    memset(sp, 0, sizeof *sp);
}

int32_t loom__spec_extra_rows(const loom_lane *lane)
{
    const spec_state *sp = &lane->spec;
    if (!sp->ref)
        return 0;
    int32_t n = lane->max_streams * sp->max_draft;
    int32_t cap =
        sp->max_draft > MAX_EXTRA_ROWS ? sp->max_draft : MAX_EXTRA_ROWS;
    return n < cap ? n : cap;
}

loom_status loom__spec_stream_new(loom_lane *lane, stream *s, loom_err *err)
{
    spec_state *sp = &lane->spec;
    s->ds = NULL;
    if (!sp->ref || s->no_speculation)
        return LOOM_OK;
    /* optimistic at first: the planner shortens windows that fail */
    s->accept_avg = (float)sp->max_draft;
    return loom_drafter_stream_new(sp->ref, sp->drafter, &s->ds, err);
}

void loom__spec_stream_free(loom_lane *lane, stream *s)
{
    if (s->ds && lane->spec.ref)
        loom_drafter_stream_free(lane->spec.ref, lane->spec.drafter, s->ds);
    s->ds = NULL;
}

/* Drafts a window of this stream should carry: a little past its recent
 * acceptance, none while it rests (a window that mostly fails costs rows
 * for nothing), and never more than could be emitted before max_tokens or
 * the context end it. */
static int32_t plan(const loom_lane *lane, stream *s)
{
    const spec_state *sp = &lane->spec;
    if (sp->fixed == 0 && s->rest > 0) {
        s->rest--;
        return 0;
    }
    int32_t want =
        sp->fixed > 0 ? sp->fixed : (int32_t)ceilf(1.5f * s->accept_avg) + 1;
    if (want > sp->max_draft)
        want = sp->max_draft;
    int64_t left = lane->max_context - ((int64_t)s->n_prompt + s->n_gen);
    if (s->max_tokens > 0 && s->max_tokens - s->n_gen < left)
        left = s->max_tokens - s->n_gen;
    /* a window of `want` drafts emits up to want + 1 tokens */
    if (want > left - 1)
        want = (int32_t)(left - 1);
    return want;
}

/* Takes a stream's proposals (row i of the call), up to its plan: a chain
 * of tokens inside the vocabulary; a proposal with another parent (a
 * tree) ends the chain. 0, or -1 with err set for a bad answer. */
static int32_t take_drafts(loom_lane *lane, int32_t i, int32_t max, stream *s,
                           loom_err *err)
{
    spec_state *sp = &lane->spec;
    int32_t got = sp->n_out[i];
    if (got < 0 || got > max) {
        loom_err_set(err, LOOM_ERR_RANGE,
                     "drafter %s: %d proposals for a stream, at most %d",
                     sp->ref->name, got, max);
        return -1;
    }
    int32_t k = 0;
    for (; k < got && k < s->n_draft; k++) {
        int32_t t = sp->tokens[i * max + k];
        if (sp->parents[i * max + k] != -1)
            break;
        if (t < 0 || t >= lane->vocab) {
            loom_err_set(err, LOOM_ERR_RANGE,
                         "drafter %s: proposal %d is token %d, outside the "
                         "vocabulary of %d",
                         sp->ref->name, k, t, lane->vocab);
            return -1;
        }
        s->draft[k] = t;
    }
    return k;
}

void loom__spec_draft(loom_lane *lane, int32_t rows)
{
    spec_state *sp = &lane->spec;
    int32_t n = 0, max = 0;
    for (int32_t i = 0; i < lane->n_act; i++) {
        stream *s = lane->act[i];
        s->n_draft = 0;
        s->n_round_rows = 0;
        if (!s->ds || s->state != ST_DECODE)
            continue;
        int32_t want = plan(lane, s);
        if (want > rows)
            want = rows;
        if (want <= 0)
            continue;
        rows -= want;
        s->n_draft = want;
        sp->streams[n] = s->ds;
        sp->last[n] = s->last;
        sp->who[n] = s;
        n++;
        if (want > max)
            max = want;
    }
    if (n == 0)
        return;
    for (int32_t i = 0; i < n * max; i++)
        sp->parents[i] = -1;
    memset(sp->n_out, 0, sizeof(int32_t) * (size_t)n);
    loom_proposals out;
    memset(&out, 0, sizeof out);
    out.struct_size = sizeof out;
    out.max = max;
    out.tokens = sp->tokens;
    out.parents = sp->parents;
    out.n_out = sp->n_out;
    loom_err err;
    loom_status rc = loom_drafter_draft(sp->ref, sp->drafter, sp->streams,
                                        sp->last, n, &out, &err);
    for (int32_t i = 0; i < n; i++) {
        stream *s = sp->who[i];
        int32_t k = rc == LOOM_OK ? take_drafts(lane, i, max, s, &err) : -1;
        if (k < 0) {
            s->n_draft = 0;
            loom__out_error(lane, s, err.msg);
            continue;
        }
        s->n_draft = k;
    }
}

uint32_t loom__spec_row_flags(const loom_lane *lane, const stream *s)
{
    return s->ds && lane->spec.tap_width > 0 ? LOOM_ROW_TAP : 0;
}

int32_t loom__spec_rows(const loom_lane *lane, stream *s, loom_row *rows)
{
    uint32_t fl = LOOM_ROW_LOGITS | loom__spec_row_flags(lane, s);
    if (s->n_draft > 0)
        fl |= LOOM_ROW_SPECULATIVE;
    rows[0] = (loom_row){s->cache, s->last, s->pos, -1, fl};
    for (int32_t i = 0; i < s->n_draft; i++)
        rows[1 + i] = (loom_row){s->cache, s->draft[i], s->pos + 1 + i, -1, fl};
    return 1 + s->n_draft;
}

void loom__spec_draw(draw_job *j)
{
    stream *s = j->s;
    int32_t i = 0;
    for (;;) {
        loom_sampler_sample(s->sampler, j->logits + (size_t)i * j->vocab,
                            j->position + i, &j->res[i]);
        /* the next row's draw sees this token in its penalties, as plain
         * decoding's would */
        loom_sampler_accept(s->sampler, j->res[i].token, 1);
        i++;
        /* row i fed draft i-1: its logits count only if that draft is the
         * token drawn before it */
        if (i == j->n || j->res[i - 1].token != j->drafts[i - 1])
            break;
    }
    j->n_emit = i;
    if (j->drafts)
        s->n_kept = i;
}

void loom__spec_keep(loom_lane *lane)
{
    spec_state *sp = &lane->spec;
    for (int32_t i = 0; i < lane->n_act; i++) {
        stream *s = lane->act[i];
        if (s->state == ST_DONE || s->n_round_rows == 0)
            continue;
        int32_t kept = s->n_round_rows;
        loom_err err;
        if (s->n_draft > 0) {
            /* the one window rule: committed before the cache's next
             * forward, which is never in this round */
            kept = s->n_kept;
            loom_status rc = loom_family_commit(lane->fam, lane->model,
                                                s->cache, kept, &err);
            if (rc != LOOM_OK) {
                loom_err_prefix(&err, "commit of %d rows", kept);
                loom__out_error(lane, s, err.msg);
                continue;
            }
            s->pos = s->pos0 + kept;
            loom__stats_window(lane, s->n_draft, kept - 1);
            s->accept_avg = (1.0f - ACCEPT_RATE) * s->accept_avg +
                            ACCEPT_RATE * (float)(kept - 1);
            if (s->accept_avg < REST_BELOW)
                s->rest = REST_ROUNDS;
        }
        if (!s->ds)
            continue;
        loom_view feat;
        memset(&feat, 0, sizeof feat);
        feat.struct_size = sizeof feat;
        if (sp->tap_width > 0)
            feat = loom_view_host_f32(sp->taps + (size_t)s->tap0 *
                                                     (size_t)sp->tap_width,
                                      kept, sp->tap_width);
        for (int32_t r = 0; r < kept; r++) {
            sp->tap_pos[r] = s->pos0 + r;
            sp->tap_tok[r] = lane->rows[s->row0 + r].token;
        }
        loom_status rc = loom_drafter_absorb(sp->ref, sp->drafter, s->ds, &feat,
                                             sp->tap_pos, kept, &err);
        if (rc == LOOM_OK)
            rc = loom_drafter_absorb_tokens(sp->ref, sp->drafter, s->ds,
                                            sp->tap_tok, sp->tap_pos, kept,
                                            &err);
        if (rc != LOOM_OK)
            loom__out_error(lane, s, err.msg);
    }
}
