/* A cache's speculative-window bookkeeping (loom/window.h): whether a window
 * is open, the snapshot and replay log buffers, and what commit(kept) asks. */
#include <loom/window.h>

#include <stdlib.h>
#include <string.h>

void loom_window_init(loom_window *w, const char *who, size_t snap_bytes,
                      size_t row_bytes)
{
    memset(w, 0, sizeof *w);
    w->who = who;
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
}

loom_status loom_window_reserve(loom_window *w, const loom_plan_stream *s,
                                loom_err *err)
{
    if (w->pending > 0)
        return loom_err_set(err, LOOM_ERR_STATE,
                            "%s forward: the cache's window of %d speculative "
                            "rows (from position %lld) is not committed; the "
                            "next call on it must be commit",
                            w->who, w->pending, (long long)w->start);
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
    if (n_spec > w->log_cap && w->row_bytes > 0) {
        /* a window is at most LOOM_MAX_WINDOW rows: one size serves all */
        int32_t cap = n_spec > LOOM_MAX_WINDOW ? n_spec : LOOM_MAX_WINDOW;
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

void loom_window_end(loom_window *w, const loom_plan_stream *s)
{
    int32_t n_spec = loom_plan_n_spec(s);
    if (n_spec == 0)
        return;
    w->start = s->len0 + s->first_spec;
    w->pending = n_spec;
}

loom_status loom_window_commit(loom_window *w, int32_t kept,
                               loom_window_keep *keep, loom_err *err)
{
    if (w->pending == 0)
        return loom_err_set(err, LOOM_ERR_STATE,
                            "%s commit: the cache has no window to commit "
                            "(commit follows a forward with speculative rows)",
                            w->who);
    if (kept < 0 || kept > w->pending)
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "%s commit: kept = %d, but the window holds %d "
                            "rows",
                            w->who, kept, w->pending);
    keep->rollback = kept < w->pending;
    keep->kept = kept;
    keep->len = w->start + kept;
    w->pending = 0;
    w->start = -1;
    return LOOM_OK;
}

loom_status loom_window_check_copy(const loom_window *w, loom_err *err)
{
    if (w->pending > 0)
        return loom_err_set(err, LOOM_ERR_STATE,
                            "cache_copy: the source has a window of %d rows "
                            "not committed yet",
                            (int)w->pending);
    return LOOM_OK;
}
