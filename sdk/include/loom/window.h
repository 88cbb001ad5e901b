/* The bookkeeping of a cache's speculative window (LOOM_CAP_WINDOWS), shared
 * by families whose recurrent state cannot simply be truncated: whether a
 * window is open and how many rows it holds, a snapshot of the family's
 * state (opaque bytes) just before its first row, a log of what each of its
 * rows fed, and what commit(kept) leaves to do (restore the snapshot and
 * replay the kept rows, then truncate to the kept length; or nothing).
 *
 * ABI 2's one window rule: a forward gives a cache at most one window (its
 * rows flagged SPECULATIVE, after its plain rows); the next call on that
 * cache is commit(kept). A forward on a cache whose window is open is
 * refused with LOOM_ERR_STATE, and so is a commit on a cache without one.
 *
 * In a forward, per cache (s: its loom_plan_stream):
 *   loom_window_reserve(w, s)   before anything changes (may fail)
 *   i = loom_window_index(s, k) for each of its rows k: -1 plain; when 0,
 *       copy the state to w->snapshot first; log into loom_window_row(w, i)
 *   loom_window_end(w, s)       after the rows were fed: opens the window
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

typedef struct loom_window {
    const char *who;    /* message prefix: "qwen35" */
    size_t snap_bytes;  /* the family's state just before the window */
    size_t row_bytes;   /* what one speculative row logs for the replay */
    int32_t pending;    /* rows of the open window; 0: no window */
    int64_t start;      /* the cache's length before the window; -1: none */
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

/* No window open; nothing is allocated until the first. */
void loom_window_init(loom_window *w, const char *who, size_t snap_bytes,
                      size_t row_bytes);
void loom_window_free(loom_window *w);
/* Closes the window without a commit (a cache reset); keeps the
 * allocations. */
void loom_window_reset(loom_window *w);

/* Before a forward changes anything: LOOM_ERR_STATE when the cache's window
 * is still open (the one window rule), naming its rows; then room for the
 * log of s's speculative rows and, with the first window, the snapshot.
 * A refusal leaves the window as it was. */
loom_status loom_window_reserve(loom_window *w, const loom_plan_stream *s,
                                loom_err *err);

/* A cache may be copied (cache_copy) only with no window open:
 * LOOM_ERR_STATE naming the open window's rows, else LOOM_OK. */
loom_status loom_window_check_copy(const loom_window *w, loom_err *err);

/* The log index of s's k-th row in this forward: -1 for a plain row; 0 for
 * the window's first row, whose state just before it the family copies to
 * w->snapshot. */
static inline int32_t loom_window_index(const loom_plan_stream *s, int32_t k)
{
    if (s->first_spec < 0 || k < s->first_spec)
        return -1;
    return k - s->first_spec;
}

/* The log of speculative row i (0-based from the window's start). */
static inline void *loom_window_row(const loom_window *w, int32_t i)
{
    return w->log + (size_t)i * w->row_bytes;
}

/* After the forward fed s's rows: opens the window of its speculative rows,
 * if it had any. */
void loom_window_end(loom_window *w, const loom_plan_stream *s);

/* Keeps the first `kept` rows of the open window (0..its rows) and closes
 * it; *keep says what the family must then do. LOOM_ERR_STATE when no
 * window is open; LOOM_ERR_RANGE for another `kept`, naming it and the
 * window's rows (the window stays open). */
loom_status loom_window_commit(loom_window *w, int32_t kept,
                               loom_window_keep *keep, loom_err *err);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_WINDOW_H */
