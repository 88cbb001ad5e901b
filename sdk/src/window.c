/* A cache's speculative-window bookkeeping (loom/window.h): the pending
 * count, the snapshot and replay log buffers, and what commit(kept) asks. */
#include <loom/window.h>

#include <stdlib.h>
#include <string.h>

void loom_window_init(loom_window *w, const char *who,
                      loom_window_policy policy, size_t snap_bytes,
                      size_t row_bytes)
{
    memset(w, 0, sizeof *w);
    w->who = who;
    w->policy = policy;
    w->snap_bytes = snap_bytes;
    w->row_bytes = row_bytes;
    w->start = -1;
}

void loom_window_free(loom_window *w)
{
    free(w->snapshot);
    free(w->log);
    w->snapshot = NULL;
    w->log = NULL;
    w->log_cap = 0;
    loom_window_reset(w);
}

void loom_window_reset(loom_window *w)
{
    w->pending = 0;
    w->start = -1;
    w->base = 0;
}

/* Where this forward's first speculative row of s logs, by the policy. */
static int32_t window_base(const loom_window *w, const loom_plan_stream *s)
{
    /* ABI 2's one window rule (a forward on a cache with a pending window
     * is LOOM_ERR_STATE) becomes one check at the top of
     * loom_window_reserve and retires this policy */
    if (w->policy == LOOM_WINDOW_EXTEND && s->first_spec == 0)
        return w->pending;
    return 0;
}

loom_status loom_window_reserve(loom_window *w, const loom_plan_stream *s,
                                loom_err *err)
{
    int32_t n_spec = loom_plan_n_spec(s);
    if (n_spec == 0)
        return LOOM_OK;
    if (!w->snapshot && w->snap_bytes > 0) {
        w->snapshot = malloc(w->snap_bytes);
        if (!w->snapshot)
            return loom_err_set(err, LOOM_ERR_NOMEM,
                                "%s: no memory for a %zu-byte window "
                                "snapshot",
                                w->who, w->snap_bytes);
    }
    int32_t rows = window_base(w, s) + n_spec;
    if (rows > w->log_cap && w->row_bytes > 0) {
        int32_t cap = w->log_cap ? w->log_cap : 16;
        while (cap < rows)
            cap *= 2;
        unsigned char *log = realloc(w->log, (size_t)cap * w->row_bytes);
        if (!log)
            return loom_err_set(err, LOOM_ERR_NOMEM,
                                "%s: no memory for a %d-row window log", w->who,
                                cap);
        w->log = log;
        w->log_cap = cap;
    }
    return LOOM_OK;
}

void loom_window_begin(loom_window *w, const loom_plan_stream *s)
{
    w->base = window_base(w, s);
    if (w->base == 0) {
        /* the forward's rows keep every pending row */
        w->pending = 0;
        w->start = -1;
    }
}

void loom_window_end(loom_window *w, const loom_plan_stream *s)
{
    int32_t n_spec = loom_plan_n_spec(s);
    if (n_spec == 0)
        return;
    if (w->base == 0)
        w->start = s->len0 + s->first_spec;
    w->pending = w->base + n_spec;
}

loom_status loom_window_commit(loom_window *w, int32_t kept,
                               loom_window_keep *keep, loom_err *err)
{
    if (kept < 0 || kept > w->pending)
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "%s commit: kept = %d, but the cache holds %d "
                            "speculative rows",
                            w->who, kept, w->pending);
    keep->rollback = kept < w->pending;
    keep->kept = kept;
    keep->len = w->start + kept;
    w->pending = 0;
    w->start = -1;
    return LOOM_OK;
}
