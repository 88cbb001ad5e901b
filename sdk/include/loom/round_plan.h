/* A forward's plan of its round: the rows grouped by cache (one open-addressing
 * map, O(rows)), each cache's rows in round order, and the checks every
 * family makes before anything changes (the round's and rows' sizes, tokens,
 * chains, positions following the cache's length, speculative rows last and
 * at most LOOM_MAX_WINDOW of them, the context and row limits, the output
 * views). Families link it from the SDK so each need not scan the round
 * once per stream. */
#ifndef LOOM_ROUND_PLAN_H
#define LOOM_ROUND_PLAN_H

#include <stdint.h>

#include <loom/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a family accepts in a round; filled once, at open. */
typedef struct loom_plan_rules {
    const char *who;        /* message prefix: "qwen35 forward" */
    int64_t vocab;          /* tokens in [0, vocab) */
    int64_t max_context;    /* positions in [0, max_context) */
    int32_t max_rows;       /* rows per round */
    int32_t n_taps;         /* tapped layers written for LOOM_ROW_TAP rows */
    int64_t hidden;         /* floats of one tapped layer's row */
    int32_t view_kind;      /* loom_mem_kind of the output views it writes */
    uint32_t refused_flags; /* row flags the family does not provide */
    /* positions a cache holds (the family's cache is opaque to the SDK) */
    int64_t (*cache_len)(const loom_cache *cache);
} loom_plan_rules;

/* One cache's part of a round: its rows are rows[first .. first + count) of
 * the plan, their positions len0, len0 + 1, ... */
typedef struct loom_plan_stream {
    loom_cache *cache;
    int64_t len0; /* the cache's length before the round */
    int32_t first, count;
    int32_t first_spec; /* index among its rows of the first speculative
                           one, -1: none (the rest are speculative too) */
} loom_plan_stream;

typedef struct loom_round_plan {
    loom_plan_stream *streams; /* [n_streams] in order of first appearance */
    int32_t n_streams;
    int32_t *rows; /* [n_rows] round row indices, grouped by stream */
    int32_t n_rows;
    int32_t n_logits; /* rows flagged LOOM_ROW_LOGITS */
    int32_t n_taps;   /* rows flagged LOOM_ROW_TAP */
    int64_t max_len;  /* the most positions a cache holds after the round */
    /* storage, grown as needed */
    int32_t cap;        /* rows the arrays hold */
    int32_t *stream_of; /* [cap] stream of each round row */
    int32_t *map;       /* [2 * cap, rounded up to a power of two] stream index
                           + 1 by cache hash, 0: free */
} loom_round_plan;

/* Zeroes a plan; loom_round_plan_free releases what making plans grew. */
void loom_round_plan_init(loom_round_plan *plan);
void loom_round_plan_free(loom_round_plan *plan);

/* Checks that `v` (named `what` in messages, after `who`) is a float32 2-D
 * view of memory kind `kind` with at least `rows` rows of `cols` elements,
 * each row dense (unit column stride) and the rows apart by at least `cols`.
 * A view of another kind is LOOM_ERR_UNSUPPORTED (a CPU model writes host
 * memory only); an empty view (ndim 0), another dtype or shape, or a view
 * struct smaller than ABI 2.0's is LOOM_ERR_INVALID. */
loom_status loom_view_check(const loom_view *v, int32_t kind, int64_t rows,
                            int64_t cols, const char *who, const char *what,
                            loom_err *err);

/* Groups `round`'s rows by cache and checks them against `rules` and `out`
 * (NULL: no views). Refuses, naming the row index and its position:
 * a round or row size smaller than ABI 2.0's (LOOM_ERR_INVALID); no rows
 * array or more than max_rows (LOOM_ERR_INVALID, LOOM_ERR_RANGE); a
 * row without a cache (INVALID), a token outside the vocabulary (RANGE), a
 * parent other than -1 or a refused flag (LOOM_ERR_UNSUPPORTED); a position
 * other than its cache's length plus the rows of that cache before it in
 * the round, or a plain row after a speculative one of its cache (INVALID);
 * more than LOOM_MAX_WINDOW speculative rows of one cache (RANGE); a
 * position past max_context (LOOM_ERR_FULL); rows asking for logits or taps
 * without a view for them that loom_view_check accepts ([n_logits, vocab],
 * [n_taps rows, n_taps * hidden], of rules->view_kind). Changes no cache;
 * after a refusal the plan holds nothing to use. */
loom_status loom_round_plan_make(loom_round_plan *plan, const loom_round *round,
                                 const loom_output *out,
                                 const loom_plan_rules *rules, loom_err *err);

/* The round row index of stream s's k-th row. */
static inline int32_t loom_plan_row(const loom_round_plan *plan,
                                    const loom_plan_stream *s, int32_t k)
{
    return plan->rows[s->first + k];
}

/* Speculative rows of a stream in this round. */
static inline int32_t loom_plan_n_spec(const loom_plan_stream *s)
{
    return s->first_spec < 0 ? 0 : s->count - s->first_spec;
}

/* A stream's rows of a round are a prompt chunk when it has no speculative
 * row and at least LOOM_PROMPT_MIN_ROWS rows: a family may run them
 * through its prompt kernels (matrix products, chunked attention and
 * recurrences), which agree with its row kernels within a tolerance.
 * Windows, one-row steps and short chunks stay on the row kernels, whose
 * rows are bit-identical to each other. */
#define LOOM_PROMPT_MIN_ROWS 32
static inline int loom_plan_prompt_chunk(const loom_plan_stream *s)
{
    return s->first_spec < 0 && s->count >= LOOM_PROMPT_MIN_ROWS;
}

#ifdef __cplusplus
}
#endif

#endif /* LOOM_ROUND_PLAN_H */
