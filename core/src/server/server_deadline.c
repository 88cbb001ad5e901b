/* Request read deadlines: a list of open connections, each with the time
 * by which its current request must be read, and a thread that shuts the
 * ones past it. libmicrohttpd's idle timeout restarts with every byte, so a
 * client sending one byte every few seconds would hold its slot forever.
 * Under TLS (the gate cannot read encrypted heads) and for bodies (past the
 * gate) this is what bounds a slow client; and since slow clients could
 * still fill every slot until their deadlines, the oldest waiting one makes
 * room for a new connection past a set count. */
#include "server_deadline.h"

#include <stdlib.h>

struct srv_peer {
    srv_peer *prev, *next;
    loom_socket fd;
    uint64_t due; /* monotonic ns; 0: none */
    int shut;
};

struct srv_deadlines {
    loom_mutex *mu;
    loom_cond *cv;
    loom_thread *sweeper;
    srv_peer *peers;
    uint64_t header_ns, body_ns, idle_ns;
    uint32_t min_bps;
    uint32_t max_waiting;
    uint64_t n_shut;
    int stop;
};

/* Sweeps often enough that a deadline is kept to a fraction of a second. */
#define SWEEP_MS 100

static void sweep(void *arg)
{
    srv_deadlines *d = arg;
    loom_mutex_lock(d->mu);
    while (!d->stop) {
        uint64_t now = loom_now_ns();
        for (srv_peer *p = d->peers; p; p = p->next) {
            if (p->due && !p->shut && now > p->due) {
                /* the descriptor stays open until srv_peer_remove, which
                 * takes this lock: it cannot be another's by now */
                loom_socket_shutdown(p->fd);
                p->shut = 1;
                d->n_shut++;
            }
        }
        loom_cond_timedwait(d->cv, d->mu, SWEEP_MS);
    }
    loom_mutex_unlock(d->mu);
}

loom_status srv_deadlines_new(uint32_t header_ms, uint32_t body_ms,
                              uint32_t min_bps, uint32_t idle_ms,
                              uint32_t max_waiting, srv_deadlines **out,
                              loom_err *err)
{
    srv_deadlines *d = calloc(1, sizeof *d);
    if (!d || !(d->mu = loom_mutex_new()) || !(d->cv = loom_cond_new())) {
        if (d) {
            loom_mutex_free(d->mu);
            free(d);
        }
        return loom_err_set(err, LOOM_ERR_NOMEM, "server: out of memory");
    }
    d->header_ns = (uint64_t)header_ms * 1000000ull;
    d->body_ns = (uint64_t)body_ms * 1000000ull;
    d->idle_ns = (uint64_t)idle_ms * 1000000ull;
    d->min_bps = min_bps ? min_bps : 1;
    d->max_waiting = max_waiting ? max_waiting : UINT32_MAX;
    loom_status st = loom_thread_start(&d->sweeper, sweep, d, err);
    if (st != LOOM_OK) {
        loom_cond_free(d->cv);
        loom_mutex_free(d->mu);
        free(d);
        return st;
    }
    *out = d;
    return LOOM_OK;
}

void srv_deadlines_free(srv_deadlines *d)
{
    if (!d)
        return;
    loom_mutex_lock(d->mu);
    d->stop = 1;
    loom_cond_signal(d->cv);
    loom_mutex_unlock(d->mu);
    loom_thread_join(d->sweeper);
    while (d->peers) {
        srv_peer *p = d->peers;
        d->peers = p->next;
        free(p);
    }
    loom_cond_free(d->cv);
    loom_mutex_free(d->mu);
    free(d);
}

srv_peer *srv_peer_add(srv_deadlines *d, loom_socket fd)
{
    srv_peer *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->fd = fd;
    loom_mutex_lock(d->mu);
    /* the list runs newest first: the last waiting one is the oldest */
    uint32_t waiting = 0;
    srv_peer *oldest = NULL;
    for (srv_peer *q = d->peers; q; q = q->next)
        if (q->due && !q->shut) {
            waiting++;
            oldest = q;
        }
    if (oldest && waiting >= d->max_waiting) {
        loom_socket_shutdown(oldest->fd);
        oldest->shut = 1;
        d->n_shut++;
    }
    p->due = loom_now_ns() + d->header_ns;
    p->next = d->peers;
    if (d->peers)
        d->peers->prev = p;
    d->peers = p;
    loom_mutex_unlock(d->mu);
    return p;
}

void srv_peer_remove(srv_deadlines *d, srv_peer *p)
{
    if (!p)
        return;
    loom_mutex_lock(d->mu);
    if (p->prev)
        p->prev->next = p->next;
    else
        d->peers = p->next;
    if (p->next)
        p->next->prev = p->prev;
    loom_mutex_unlock(d->mu);
    free(p);
}

static void set_due(srv_deadlines *d, srv_peer *p, uint64_t due)
{
    if (!p)
        return;
    loom_mutex_lock(d->mu);
    p->due = due;
    loom_mutex_unlock(d->mu);
}

void srv_peer_headers_done(srv_deadlines *d, srv_peer *p, int64_t body_len)
{
    uint64_t allow = d->body_ns;
    if (body_len > 0)
        allow += (uint64_t)body_len / d->min_bps * 1000000000ull;
    set_due(d, p, loom_now_ns() + allow);
}

void srv_peer_request_done(srv_deadlines *d, srv_peer *p)
{
    set_due(d, p, 0);
}

void srv_peer_answered(srv_deadlines *d, srv_peer *p)
{
    /* a keep-alive connection may idle first (MHD closes it then) */
    set_due(d, p, loom_now_ns() + d->idle_ns + d->header_ns);
}

uint64_t srv_deadlines_shut(srv_deadlines *d)
{
    loom_mutex_lock(d->mu);
    uint64_t n = d->n_shut;
    loom_mutex_unlock(d->mu);
    return n;
}
