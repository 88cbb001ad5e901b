/* The lane: turns many independent streams into few forward rounds over one
 * engine. Streams are added and cancelled from any thread; one thread (the
 * lane thread, or the caller of loom_lane_step) builds each round, runs the
 * family's forward once, samples and delivers tokens to the streams'
 * callbacks. */
#ifndef LOOM_LANE_H
#define LOOM_LANE_H

#include <stddef.h>
#include <stdint.h>

#include <loom/engine.h>
#include <loom/sample.h>

/* The tokenizer (core/include/loom/tokenizer.h); a lane without one
 * delivers token ids only. */
typedef struct loom_tokenizer loom_tokenizer;

typedef struct loom_lane loom_lane;

/* Why a stream ended. */
typedef enum loom_finish {
    LOOM_FINISH_NONE = 0,  /* still running: not a final event */
    LOOM_FINISH_STOP,      /* an eos id or a stop string */
    LOOM_FINISH_LENGTH,    /* max_tokens reached */
    LOOM_FINISH_CONTEXT,   /* prompt + generated reached the context size */
    LOOM_FINISH_CANCELLED, /* loom_lane_cancel, the callback, or lane freed */
    LOOM_FINISH_ERROR      /* the forward failed; see event.error */
} loom_finish;

/* "stop", "length", "context", "cancelled", "error" ("" for NONE). */
const char *loom_finish_name(loom_finish f);

/* One delivery to a stream. Every pointer is valid only during the
 * callback. Each sampled token gives one event (token >= 0); the last event
 * of a stream has finish != NONE (it may carry the last token, or token -1
 * when it carries none: cancelled, error). Exactly one final event per
 * stream, after which the callback is never called for it again. */
typedef struct loom_lane_event {
    uint64_t stream; /* the id loom_lane_add gave */
    int32_t token;   /* -1: no token in this event */
    /* Decoded text this event releases (NUL-terminated; may be empty). Text
     * that could still become a stop string is held back, a stop string and
     * what follows it are never delivered, and the final event flushes what
     * was held. NULL when the lane has no tokenizer. */
    const char *text;
    size_t text_len;
    /* Logprobs of the token (n_logprobs >= 0 in the request), else 0. */
    float logprob;
    int32_t n_top;
    const loom_token_logprob *top;

    loom_finish finish;
    const char *error; /* LOOM_FINISH_ERROR: the cause; else NULL */

    /* > 0: a prompt token's event (token = prompt[prompt_index]), sent
     * before the stream's first token when the stream asked for
     * prompt_logprobs: its logprobs under the model given the tokens
     * before it, no text, never final. 0: a generated token's event. */
    int32_t prompt_index;

    uint64_t seed;       /* the sampling seed in use (reported back) */
    int32_t n_prompt;    /* prompt tokens */
    int32_t n_generated; /* tokens sampled so far, this one included */
    double ttft_s;       /* add -> first token; 0 before it */
    double elapsed_s;    /* add -> this event */
    double queue_s;      /* add -> a cache for it (so far, while waiting) */
} loom_lane_event;

/* Called on the lane thread, without the lane's lock held (it may call
 * loom_lane_add / loom_lane_cancel). Nonzero cancels the stream: it gets no
 * more tokens, only its final CANCELLED event at the next round. */
typedef int (*loom_lane_cb)(void *user, const loom_lane_event *ev);

typedef struct loom_stream_params {
    const int32_t *prompt; /* copied; at least one token */
    int32_t n_prompt;
    loom_sample_params sample; /* copied, bias included */
    int32_t max_tokens;        /* <= 0: until eos or the context is full */
    const char *const *stop;   /* stop strings, copied; may be NULL */
    int32_t n_stop;
    int32_t ignore_eos; /* nonzero: eos ids do not stop the stream */
    /* nonzero: plain decoding even when the engine has a drafter */
    int32_t no_speculation;
    /* nonzero (with sample.n_logprobs >= 0): an event for every prompt
     * token after the first with its logprob and sample.n_logprobs top
     * logprobs, from the raw model distribution (see prompt_index). Such
     * a stream feeds fewer prompt rows per round. */
    int32_t prompt_logprobs;
    loom_lane_cb cb;
    void *user;
} loom_stream_params;

/* Maps token id -> its bytes for lanes without a tokenizer (tests, tools):
 * writes at most cap bytes, returns the full length. Used only when
 * `tokenizer` is NULL, and only inside loom_lane_new, which asks it for
 * every token of the vocabulary once and keeps the bytes. */
typedef size_t (*loom_lane_piece_fn)(void *ctx, int32_t token, char *buf,
                                     size_t cap);

typedef struct loom_lane_params {
    loom_engine *engine;             /* not owned; must outlive the lane */
    const loom_tokenizer *tokenizer; /* not owned; NULL: ids only */
    loom_lane_piece_fn piece;        /* text without a tokenizer; or NULL */
    void *piece_ctx;
    /* Most streams holding a cache at once; more wait in the queue. 0: the
     * smaller of 64 and half the engine's max_rows. At most round_tokens - 1,
     * so every round has room for a prompt row. */
    int32_t max_streams;
    /* Most streams waiting; loom_lane_add answers LOOM_ERR_FULL beyond
     * it. 0: 4096. */
    int32_t max_queued;
    /* Rows per round (decode rows first, then prompt chunks). 0: the
     * engine's max_rows. */
    int32_t round_tokens;
    /* Most prompt rows one stream feeds per round. 0: round_tokens. */
    int32_t prefill_chunk;
    /* The context size streams are held to. 0: the engine's. */
    int64_t max_context;
    /* Streams of an engine with a drafter speculate (core/src/lane/spec.c).
     * Drafts per verify window: 0 lets the planner pick from each stream's
     * recent acceptance; > 0 fixes it (capped by the drafter's block). */
    int32_t draft_window;
    /* Nonzero: on a device engine too, logits come back to the host and the
     * host sampler draws (tests hold the device path to it). */
    int32_t host_sampling;
    /* Nonzero on a device engine: each decode round is timed on the device
     * by events (loom_lane_stats' device_*_s); a measuring aid, since the
     * events cost the host a few microseconds a round. */
    int32_t time_device;
} loom_lane_params;

loom_status loom_lane_new(const loom_lane_params *params, loom_lane **out,
                          loom_err *err);
/* Stops the thread, ends every remaining stream with a CANCELLED final
 * event (callbacks called on the caller's thread) and frees the caches.
 * NULL is accepted. */
void loom_lane_free(loom_lane *lane);

/* Adds a stream [any-thread]. It starts at a later round. The id is never
 * reused by this lane. Refuses (LOOM_ERR_INVALID / LOOM_ERR_RANGE with a
 * message) an empty prompt, a token out of the vocabulary, a prompt that
 * fills the context, bad sampling parameters; LOOM_ERR_UNSUPPORTED stop
 * strings on a lane without text; LOOM_ERR_FULL when the queue is full;
 * LOOM_ERR_STATE while the lane is being freed. */
loom_status loom_lane_add(loom_lane *lane, const loom_stream_params *params,
                          uint64_t *id, loom_err *err);
/* Adds n streams of one prompt as a group [any-thread]: params[i] is member
 * i's (its own sampling parameters and seed, stop strings, length and
 * callback); every member has the same prompt and the same
 * prompt_logprobs. The first member admitted prefills the prompt; the
 * members admitted while it does take a copy of its cache when its prompt
 * is done and draw their first tokens from the same logits, so the prompt
 * is forwarded (and counted in the stats' prompt_tokens) once. Each member
 * emits exactly what it would emit as a lone stream with its parameters.
 * Members that cannot share prefill themselves: all of them when the
 * family cannot copy caches (cache_copy, ABI 2.2), a member admitted after
 * the prompt is done, one with a drafter stream or prompt logprobs. ids[i]
 * gets member i's id. All or none are added; the refusals are
 * loom_lane_add's, and LOOM_ERR_INVALID for members whose prompts
 * differ. */
loom_status loom_lane_add_group(loom_lane *lane,
                                const loom_stream_params *params, int32_t n,
                                uint64_t *ids, loom_err *err);
/* Cancels a stream [any-thread]: at the next round it gets its final
 * CANCELLED event and its cache goes back to the pool. An unknown or
 * finished id is ignored. */
void loom_lane_cancel(loom_lane *lane, uint64_t id);

/* Runs rounds on a thread of the lane until loom_lane_stop [any-thread]. */
loom_status loom_lane_start(loom_lane *lane, loom_err *err);
/* Stops and joins the lane thread after its current round; streams stay
 * and resume on the next start or step. */
void loom_lane_stop(loom_lane *lane);

/* One round on the caller's thread (tests, the CLI; one caller at a time).
 * *n_rows (may be NULL) gets the rows forwarded, 0 when there was nothing
 * to do. LOOM_ERR_STATE while the lane thread runs. A failed forward ends the
 * round's streams with ERROR events and is returned here as well. */
loom_status loom_lane_step(loom_lane *lane, int32_t *n_rows, loom_err *err);
/* The most streams holding a cache at once, as the lane settled it. */
int32_t loom_lane_max_streams(const loom_lane *lane);
/* Streams not yet finished (active + queued) [any-thread]. */
int32_t loom_lane_pending(loom_lane *lane);

/* The bytes of a token from the source the lane's streams get their text
 * from (the bytes the tokenizer's detokenizer reads, or the piece
 * function's), for logprobs [thread-safe]. Special tokens have their bytes
 * here though the stream's text leaves them out. *len is set; NULL (and 0)
 * for an id without bytes or a lane without text. Valid while the lane and
 * its tokenizer are. */
const char *loom_lane_token_bytes(const loom_lane *lane, int32_t token,
                                  size_t *len);

/* Counters for /metrics and --stats [any-thread]. */
typedef struct loom_lane_stats {
    int32_t active;     /* streams holding a cache */
    int32_t queued;     /* streams waiting for one */
    int32_t pool_total; /* caches made */
    int32_t pool_free;  /* caches idle in the pool */
    uint64_t streams_added, streams_finished;
    uint64_t rounds;
    uint64_t prompt_tokens;    /* prompt rows forwarded */
    uint64_t generated_tokens; /* tokens sampled */
    double forward_s;          /* time inside forward */
    double prefill_tok_s;      /* over the last second or so of rounds; 0 */
    double decode_tok_s;       /* once the lane has been idle for 2 s */
    double ttft_last_s, ttft_avg_s; /* over finished first tokens */
    /* time_device, over the rounds without prompt rows: by device events
     * recorded at a round's start, when its forward is issued and when its
     * draw has come back, the device's time through the forward, through
     * the draw (the copy back and the host waking included), and from the
     * round before's end to this one's start (the host between rounds,
     * where the device waits). 0 otherwise. */
    double device_forward_s, device_draw_s, device_between_s;
    uint64_t device_rounds;
    /* Speculation: verify windows, drafts verified in them and accepted;
     * spec_hist[k] counts windows that kept k tokens (accepted drafts plus
     * the bonus token, 1..LOOM_MAX_WINDOW). Mean acceptance length is
     * (spec_accepted + spec_windows) / spec_windows. */
    uint64_t spec_windows, spec_drafted, spec_accepted;
    uint64_t spec_hist[LOOM_MAX_WINDOW + 1];
} loom_lane_stats;

void loom_lane_get_stats(loom_lane *lane, loom_lane_stats *out);

#endif
