/* What the lane's files share: the stream and lane layouts and the
 * loom__ functions one file gives the others (streams by id, the cache
 * pool, per-stream output, the statistics windows, the sampler's checked
 * constructor). */
#ifndef LOOM_LANE_IMPL_H
#define LOOM_LANE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <loom/cuda_sample.h>
#include <loom/lane.h>
#include <loom/platform.h>
#include <loom/tokenizer.h>

/* ST_FOLLOW: admitted, waiting for the prefill of its group's leader
 * (group.c) */
enum stream_state { ST_QUEUED, ST_PREFILL, ST_FOLLOW, ST_DECODE, ST_DONE };

typedef struct stream {
    uint64_t id;

    /* fixed at add */
    int32_t *prompt;
    int32_t n_prompt;
    char **stop;
    size_t *stop_len;
    int32_t n_stop;
    int32_t max_tokens;
    int32_t ignore_eos;
    int32_t no_speculation;
    loom_lane_cb cb;
    void *user;
    loom_sample_params sp; /* the one copy; bias points at `bias` */
    loom_logit_bias *bias;
    loom_sampler *sampler; /* made at admission: queued streams hold none */
    uint64_t seed;
    int32_t n_logprobs;
    int32_t prompt_lp; /* prompt tokens' logprobs asked */
    /* the group of streams of one prompt it was added with (group.c): the
     * first member's id; 0 alone, or when the family cannot copy caches */
    uint64_t group;

    /* under mu */
    int cancel;                 /* written by loom_lane_cancel */
    int queued;                 /* in the waiting queue */
    int counted_active;         /* counted in n_active (else n_queued) */
    struct stream *prev, *next; /* the waiting queue, or the cancelled list */

    /* lane-thread state */
    int state;
    int cancel_local; /* cancelled: by the callback or loom_lane_cancel */
    int stopped_by_string;
    struct stream *gone; /* finished outside the active list, to be freed */
    loom_cache *cache;
    /* ST_FOLLOW: the stream of its group whose prefill it shares (in act,
     * not yet freed: group.c re-leads followers before reap frees it) */
    struct stream *lead;
    /* a follower's first draw, from its leader's last prompt row */
    loom_sample_result first;
    int32_t n_fed; /* prompt tokens fed */
    int32_t pos;   /* rows in the cache = the next row's position */
    int32_t last;  /* the token the next decode row feeds */
    int32_t n_gen;
    loom_detok *detok;
    char *held; /* decoded text not yet released (stop-string prefixes,
                   and without a tokenizer a partial UTF-8 character) */
    size_t n_held, cap_held;
    uint64_t t_add, t_first, t_admit; /* t_admit: when it got a cache */

    /* speculation (spec.c): the drafter's stream, NULL when this stream
     * decodes plainly */
    loom_draft_stream *ds;
    float accept_avg;               /* recent accepted drafts per window */
    int32_t rest;                   /* plain rounds before the next window */
    int32_t n_draft;                /* this round's drafts (0: a plain row) */
    int32_t draft[LOOM_MAX_WINDOW]; /* draft[0..n_draft) */
    int32_t pos0;                   /* this round's first row position */
    int32_t n_round_rows;           /* rows this round (0: none) */
    int32_t tap0;                   /* its first tapped row in the round */
    int32_t row0;                   /* its first row in the round */
    int32_t n_kept;                 /* rows kept after the round */
} stream;

/* Streams by id: open addressing, linear probing, deletion by backward
 * shift; ids are never 0 (under mu). */
typedef struct stream_map {
    stream **slot;
    uint32_t mask; /* capacity - 1, capacity a power of two */
    uint32_t n;
} stream_map;

/* Caches not in use, so a stream's admission seldom allocates one. */
typedef struct cache_pool {
    const loom_family *fam;
    loom_model *model;
    loom_mutex *mu; /* the lane's: the counts are read for stats */
    loom_cache **idle;
    int32_t n_idle, n_total;
} cache_pool;

/* The statistics (under mu). */
typedef struct lane_stats_state {
    loom_lane_stats st;
    double ttft_sum;
    uint64_t ttft_n;
    uint64_t win_t0, win_prefill, win_decode;
    uint64_t t_last_round;
} lane_stats_state;

/* One stream's draws in a round: one row's, or a verify window's (the
 * pending token's row, then one row per draft). */
typedef struct lane_device lane_device;

typedef struct draw_job {
    stream *s;
    const float *logits; /* n rows of vocab, host */
    int32_t vocab;
    int32_t position;        /* of the first drawn token */
    int32_t n;               /* rows with logits */
    const int32_t *drafts;   /* n - 1 drafts (a window), else NULL */
    loom_sample_result *res; /* n results; the first n_emit are kept */
    int32_t n_emit;
    int32_t logits_row; /* of the first row, in the round's logits */
} draw_job;

/* The drafter the lane speculates with (spec.c); ref NULL: none. */
typedef struct spec_state {
    const loom_drafter_ref *ref;
    loom_drafter *drafter;
    int32_t max_draft; /* drafts per window at most */
    int32_t fixed;     /* loom_lane_params.draft_window */
    int32_t tap_width; /* n_taps * hidden; 0: the drafter taps nothing */
    float *taps;       /* [round_tokens, tap_width] */
    int32_t *tap_pos;  /* positions of absorbed rows, [round_tokens] */
    int32_t *tap_tok;  /* their tokens, [round_tokens] */
    /* one draft call's arguments and answers, max_streams each */
    loom_draft_stream **streams;
    stream **who;
    int32_t *last, *n_out;
    int32_t *tokens, *parents; /* [max_streams, max_draft] */
} spec_state;

/* Without a tokenizer: every token's bytes from the piece function, asked
 * once at loom_lane_new. */
typedef struct piece_table {
    char *bytes;
    size_t *off; /* vocab + 1 offsets into bytes */
} piece_table;

struct loom_lane {
    loom_engine *eng;
    const loom_family *fam; /* the engine's dispatcher */
    loom_model *model;
    int32_t vocab;
    int32_t n_eos;
    int32_t eos[LOOM_MAX_EOS];
    const loom_tokenizer *tok;
    piece_table pieces; /* when tok is NULL and a piece function was given */
    int has_text;
    int32_t max_streams, max_queued, round_tokens, prefill_chunk;
    int64_t max_context;

    loom_mutex *mu;
    loom_cond *cv;
    stream_map map;             /* every stream not yet freed */
    stream *q_head, *q_tail;    /* waiting, arrival order */
    stream *cancelled;          /* taken out of the queue by cancel */
    int32_t n_queued, n_active; /* published counts (see reap) */
    /* of those, streams whose final event is out but not yet reaped: the
     * stats leave them out, so a client that has its final event never
     * sees its stream still counted */
    int32_t n_ending_queued, n_ending_active;
    uint64_t next_id;
    uint64_t seed_state;
    int running, stopping, closing;
    loom_thread *thread;

    cache_pool pool;

    /* round state (lane thread) */
    stream **act; /* streams holding a cache, arrival order; max_streams */
    int32_t n_act;
    stream *gone; /* finished streams not in act, freed at the round's end */
    /* the round's rows; a window's cache is committed (spec.c) before
     * the next round, so no forward meets an uncommitted window */
    loom_row *rows;
    stream **row_stream;
    float *logits;             /* [logit_rows, vocab] */
    int32_t logit_rows;        /* max_streams, plus window rows */
    loom_sample_result *draws; /* [logit_rows] */
    draw_job *jobs;            /* max_streams */
    spec_state spec;
    char *text; /* the current event's text */
    size_t n_text, cap_text;

    lane_stats_state stats;

    /* the device path (engines on CUDA), NULL elsewhere: logits stay in
     * d_logits, the device sampler draws there */
    lane_device *dev;
};

/* ---- stream_map.c */
loom_status loom__map_init(stream_map *m, loom_err *err);
void loom__map_free(stream_map *m);
/* Adds s under s->id; LOOM_ERR_NOMEM when the table cannot grow. */
loom_status loom__map_put(stream_map *m, stream *s, loom_err *err);
stream *loom__map_get(const stream_map *m, uint64_t id);
void loom__map_del(stream_map *m, uint64_t id);

/* ---- cache_pool.c */
loom_status loom__pool_init(cache_pool *p, loom_lane *lane, int32_t cap,
                            loom_err *err);
/* An idle cache, or a new one from the family. */
loom_status loom__pool_get(cache_pool *p, loom_cache **out, loom_err *err);
/* Resets c and keeps it (the pool holds every cache ever made). */
void loom__pool_put(cache_pool *p, loom_cache *c);
void loom__pool_free(cache_pool *p);

/* ---- output.c */
loom_status loom__out_init(loom_lane *lane, const loom_lane_params *p,
                           loom_err *err);
void loom__out_free(loom_lane *lane);
/* The stream's detokenizer (lanes with a tokenizer). */
loom_status loom__out_stream_init(loom_lane *lane, stream *s, loom_err *err);
/* A token sampled for s: the stop conditions, its text, its event. */
void loom__out_deliver(loom_lane *lane, stream *s,
                       const loom_sample_result *res, uint64_t now);
/* Delivers s's final event (flushing held text for STOP / LENGTH /
 * CONTEXT), returns its cache to the pool, marks it done. */
void loom__out_finish(loom_lane *lane, stream *s, loom_finish why);
/* The logprobs event of prompt token INDEX from the logits of the row
 * before it. */
void loom__out_prompt_logprob(loom_lane *lane, stream *s, int32_t index,
                              const float *logits, uint64_t now);
void loom__out_error(loom_lane *lane, stream *s, const char *msg);

/* ---- stats.c */
void loom__stats_init(lane_stats_state *st);
/* The stream's first token came at `now` (takes mu). */
void loom__stats_first_token(loom_lane *lane, const stream *s, uint64_t now);
/* A round's counts and timing (takes mu). */
/* One decode round's device times (time_device): forward, draw, and the
 * host's time before it. */
void loom__stats_device(loom_lane *lane, double forward_s, double draw_s,
                        double between_s);
void loom__stats_round(loom_lane *lane, int32_t n_prompt_rows,
                       int32_t n_generated, uint64_t t0, uint64_t t1);
/* A verify window of n_drafted drafts kept n_accepted of them (takes mu). */
void loom__stats_window(loom_lane *lane, int32_t n_drafted, int32_t n_accepted);

/* ---- schedule.c */
/* One round: cancellations, admissions, rows, forward, draws, delivery. */
loom_status loom__lane_round(loom_lane *lane, int32_t *n_rows, loom_err *err);
/* Frees the round's finished streams and publishes the counts. */
void loom__lane_reap(loom_lane *lane);
/* Ends every stream still held (loom_lane_free). */
void loom__lane_cancel_all(loom_lane *lane);
void loom__stream_free(stream *s);

/* ---- group.c */
/* An admitted stream of a group: follows the member of its group that is
 * prefilling, when there is one it can share (ST_FOLLOW), else stays to
 * prefill the prompt itself. */
void loom__group_join(loom_lane *lane, stream *s);
/* Followers whose leader ended before its prompt did: each joins another
 * member still prefilling or prefills itself. Before reap frees leaders. */
void loom__group_orphans(loom_lane *lane);
/* Leader s's prompt is done (its last row's logits are row k, at lg on the
 * host): each follower gets a copy of its cache and a job in jobs[] (from
 * index nj) drawing its first token from the same row; `drawn`: the row is
 * drawn on the device (the followers too, by loom__dev_round). A copy that
 * fails ends its follower. Returns the new job count. */
int32_t loom__group_release(loom_lane *lane, stream *s, const float *lg,
                            int32_t k, int drawn, draw_job *jobs, int32_t nj);
/* Whether f waits for s's prefill. */
static inline int loom__follows(const stream *f, const stream *s)
{
    return f->state == ST_FOLLOW && f->lead == s;
}

/* ---- spec.c */
/* The lane's drafter, from its engine (nothing when it has none). */
loom_status loom__spec_init(loom_lane *lane, const loom_lane_params *p,
                            loom_err *err);
void loom__spec_free(loom_lane *lane);
/* Extra logits rows windows may take in one round (for the buffers). */
int32_t loom__spec_extra_rows(const loom_lane *lane);
/* An admitted stream's drafter stream, unless it decodes plainly. */
loom_status loom__spec_stream_new(loom_lane *lane, stream *s, loom_err *err);
void loom__spec_stream_free(loom_lane *lane, stream *s);
/* Plans this round's windows within `rows` spare rows and asks the
 * drafter for their drafts (s->n_draft); a failed draft ends its streams. */
void loom__spec_draft(loom_lane *lane, int32_t rows);
/* Flags every row of s carries beyond LOGITS (TAP when its drafter taps). */
uint32_t loom__spec_row_flags(const loom_lane *lane, const stream *s);
/* A decoding stream's rows this round into rows[]: its pending token, then
 * its drafts as a window; returns how many (1 + s->n_draft). */
int32_t loom__spec_rows(const loom_lane *lane, stream *s, loom_row *rows);
/* A job's draws: one row's token, or a window's accepted drafts and the
 * bonus token, each recorded in the sampler before the next is drawn. */
void loom__spec_draw(draw_job *j);
/* After the draws: commits windows to their kept rows, moves positions,
 * gives the drafter the kept rows' taps; a failure ends its stream. */
void loom__spec_keep(loom_lane *lane);

/* ---- sample.c */
/* loom_sampler_new for parameters that already passed
 * loom_sample_params_check: no second check, and params->bias is borrowed
 * (it must outlive the sampler), not copied. */
/* OUT's logprob of out->token and its top logprobs (the sampler's count)
 * under the raw LOGITS. */
void loom__sampler_logprobs(const loom_sampler *s, const float *logits,
                            loom_sample_result *out);
loom_status loom__sampler_new(const loom_sample_params *checked, int32_t vocab,
                              uint64_t random_seed, loom_sampler **out,
                              loom_err *err);

/* The sampler's parameters with the seed in use (has_seed set). */
const loom_sample_params *loom__sampler_params(const loom_sampler *s);
/* The sampler's penalty counts as a sparse list (each token once) into
 * out; returns the entries, 0 without penalties, -1 when they exceed cap
 * or were not all tracked (out of memory). */
int32_t loom__sampler_pen_list(loom_sampler *s, loom_cuda_penalty *out,
                               int32_t cap);

/* ---- device.c */
/* The device path when the engine's model runs on CUDA (lane->dev stays
 * NULL otherwise): logits view, device sampler, penalty staging. */
loom_status loom__dev_init(loom_lane *lane, int time_device, loom_err *err);
void loom__dev_free(loom_lane *lane);
/* The device logits view of `rows` rows for forward. */
loom_view loom__dev_logits_view(const loom_lane *lane, int32_t rows);
/* Draws jobs[0..nj) from their rows of the device logits (jobs[j].res),
 * and verifies windows there when n_win > 0 (loom_cuda_verify's emit
 * layout); one synchronisation, only ids and asked-for logprobs come
 * back. The one entry point for plain rounds and speculative ones. */
loom_status loom__dev_draw(loom_lane *lane, draw_job *jobs, int32_t nj,
                           const loom_cuda_window *win, int32_t n_win,
                           int32_t *n_emit, int32_t *emit, loom_err *err);
/* After a forward of nr rows: plain one-row draws are drawn on the device
 * (lane->draws at their logits rows, accepted by their samplers); the rows
 * of windows and prompt logprobs come back to lane->logits at their rows
 * for the host code. One synchronisation. */
loom_status loom__dev_round(loom_lane *lane, int32_t nr, loom_err *err);
/* time_device's marks: a round's start, its forward issued, its draw back
 * (`decode`: a round without prompt rows, the ones counted). No-ops on a
 * lane that does not time. */
void loom__dev_mark_start(loom_lane *lane);
void loom__dev_mark_forward(loom_lane *lane);
void loom__dev_mark_end(loom_lane *lane, int decode);
/* Whether logits row k was drawn by loom__dev_round this round. */
int loom__dev_drawn(const loom_lane *lane, int32_t k);

#endif
