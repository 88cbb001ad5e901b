/* The bookkeeping of a cache's speculative window (LOOM_CAP_WINDOWS), shared
 * by families whose recurrent state cannot simply be truncated: how many
 * speculative rows are pending, a snapshot of the family's state (opaque
 * bytes) just before the window's first row, a log of what each speculative
 * row fed, and what commit(kept) leaves to do (restore the snapshot and
 * replay the kept rows, then truncate to the kept length; or nothing).
 *
 * In a forward, per cache (s: its loom_plan_stream):
 *   loom_window_reserve(w, s)   before anything changes (may fail)
 *   loom_window_begin(w, s)     once nothing can fail
 *   i = loom_window_index(w, s, k) for each of its rows k: -1 plain; when
 *       0, copy the state to w->snapshot first; log into loom_window_row(w, i)
 *   loom_window_end(w, s)       after the rows were fed
 * and in commit: loom_window_commit(w, kept, &keep), then when keep.rollback
 * restore, replay log rows [0, keep.kept) and truncate to keep.len. */
#ifndef LOOM_WINDOW_H
#define LOOM_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#include <loom/plugin.h>
#include <loom/round_plan.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a forward does to a cache whose window is still pending. */
typedef enum loom_window_policy {
    /* rows that begin speculative extend the window; any others keep it
     * whole (Qwen3.5) */
    LOOM_WINDOW_EXTEND = 0,
    /* any rows keep it whole; speculative ones open a new window
     * (Nemotron-H) */
    LOOM_WINDOW_RESTART = 1
} loom_window_policy;

typedef struct loom_window {
    const char *who; /* message prefix: "qwen35" */
    loom_window_policy policy;
    size_t snap_bytes;  /* the family's state just before the window */
    size_t row_bytes;   /* what one speculative row logs for the replay */
    int32_t pending;    /* speculative rows fed and not committed */
    int64_t start;      /* the cache's length before the window; -1: none */
    int32_t base;       /* in a forward: the log index of its first speculative
                           row (the rows of the window it extends come before) */
    void *snapshot;     /* [snap_bytes], allocated with the first window */
    unsigned char *log; /* [log_cap][row_bytes] */
    int32_t log_cap;
} loom_window;

/* What commit(kept) leaves to the family. */
typedef struct loom_window_keep {
    int rollback; /* 0: every row stays, nothing to do */
    int32_t kept; /* replay log rows [0, kept) over the snapshot */
    int64_t len;  /* then truncate the cache to this length */
} loom_window_keep;

/* A window with no rows pending; nothing is allocated until the first. */
void loom_window_init(loom_window *w, const char *who,
                      loom_window_policy policy, size_t snap_bytes,
                      size_t row_bytes);
void loom_window_free(loom_window *w);
/* No rows pending (a cache reset); keeps the allocations. */
void loom_window_reset(loom_window *w);

/* Before a forward changes anything: room for the log of s's speculative
 * rows (after those of a window they extend) and, with the first window,
 * the snapshot. LOOM_ERR_NOMEM leaves the window as it was. */
loom_status loom_window_reserve(loom_window *w, const loom_plan_stream *s,
                                loom_err *err);

/* Once nothing in the forward can fail: applies the policy to a pending
 * window and sets w->base. */
void loom_window_begin(loom_window *w, const loom_plan_stream *s);

/* The log index of s's k-th row in this forward (between begin and end): -1
 * for a plain row; 0 for the window's first row, whose state just before it
 * the family copies to w->snapshot. */
static inline int32_t loom_window_index(const loom_window *w,
                                        const loom_plan_stream *s, int32_t k)
{
    if (s->first_spec < 0 || k < s->first_spec)
        return -1;
    return w->base + k - s->first_spec;
}

/* The log of speculative row i (0-based from the window's start). */
static inline void *loom_window_row(const loom_window *w, int32_t i)
{
    return w->log + (size_t)i * w->row_bytes;
}

/* After the forward fed s's rows: counts its speculative rows as pending. */
void loom_window_end(loom_window *w, const loom_plan_stream *s);

/* Keeps the first `kept` pending rows (0..pending) and closes the window;
 * *keep says what the family must then do. LOOM_ERR_RANGE for another
 * `kept`, naming it and the pending count; the window stays as it was. */
loom_status loom_window_commit(loom_window *w, int32_t kept,
                               loom_window_keep *keep, loom_err *err);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_WINDOW_H */
