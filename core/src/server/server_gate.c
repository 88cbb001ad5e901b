/* The server's front door: one thread accepts connections and keeps each
 * one, without reading it, until its first request head is complete (the
 * bytes stay in the socket for libmicrohttpd) or its deadline passes, so
 * slow clients hold no connection slot and no thread while they trickle.
 * A malformed head gets an OpenAI-shaped JSON error here; libmicrohttpd
 * would answer with an HTML page. */
#include "server_gate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- heads */

static int is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The end of the line starting at P (its '\n'), or NULL. */
static const char *line_end(const char *p, const char *end)
{
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    return nl;
}

static int same_nocase(const char *a, size_t n, const char *b)
{
    if (strlen(b) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((a[i] | 0x20) != (b[i] | 0x20))
            return 0;
    return 1;
}

static int refuse(srv_error *e, int status, const char *code, const char *what)
{
    srv_error_set(e, status, "invalid_request_error", code, NULL, "%s", what);
    return -1;
}

int srv_head_check(const char *buf, size_t len, size_t *head_len, srv_error *e)
{
    const char *p = buf, *end = buf + len;
    const char *nl = line_end(p, end);
    if (!nl)
        return len > SRV_URI_MAX + 64
                   ? refuse(e, 414, "uri_too_long",
                            "the request line is over the limit")
                   : 1;
    /* METHOD SP TARGET SP HTTP/D.D, CR optional before LF */
    const char *le = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
    const char *q = p;
    while (q < le && is_tchar((unsigned char)*q))
        q++;
    if (q == p || q - p > 32 || q >= le || *q != ' ')
        return refuse(e, 400, "bad_request", "malformed request line");
    const char *t = ++q;
    while (q < le && *q != ' ' && (unsigned char)*q > 0x20 &&
           (unsigned char)*q != 0x7f)
        q++;
    if (q - t > SRV_URI_MAX)
        return refuse(e, 414, "uri_too_long",
                      "the request target is over "
                      "the 8192 byte limit");
    if (q == t || q >= le || *q != ' ')
        return refuse(e, 400, "bad_request", "malformed request line");
    q++;
    if (le - q != 8 || memcmp(q, "HTTP/", 5) != 0 || q[5] < '0' || q[5] > '9' ||
        q[6] != '.' || q[7] < '0' || q[7] > '9')
        return refuse(e, 400, "bad_request", "malformed HTTP version");
    if (q[5] != '1' || (q[7] != '0' && q[7] != '1'))
        return refuse(e, 505, "http_version_not_supported",
                      "only HTTP/1.0 and HTTP/1.1 are served");

    int n_length = 0, chunked = 0;
    for (p = nl + 1;;) {
        nl = line_end(p, end);
        if (!nl)
            return (size_t)(end - buf) >= SRV_HEAD_MAX
                       ? refuse(e, 431, "headers_too_large",
                                "the request head is over the 16384 byte "
                                "limit")
                       : 1;
        if ((size_t)(nl + 1 - buf) > SRV_HEAD_MAX)
            return refuse(e, 431, "headers_too_large",
                          "the request head is over the 16384 byte limit");
        le = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
        if (le == p)
            break; /* the blank line */
        if (*p == ' ' || *p == '\t')
            return refuse(e, 400, "bad_request",
                          "folded header lines are not accepted");
        q = p;
        while (q < le && is_tchar((unsigned char)*q))
            q++;
        if (q == p || q >= le || *q != ':')
            return refuse(e, 400, "bad_request", "malformed header line");
        size_t name_len = (size_t)(q - p);
        const char *v = q + 1;
        for (const char *c = v; c < le; c++)
            if (((unsigned char)*c < 0x20 && *c != '\t') ||
                (unsigned char)*c == 0x7f)
                return refuse(e, 400, "bad_request",
                              "a control character in a header value");
        while (v < le && (*v == ' ' || *v == '\t'))
            v++;
        const char *ve = le;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        if (same_nocase(p, name_len, "content-length")) {
            n_length++;
            size_t k = 0;
            while (v + k < ve && v[k] >= '0' && v[k] <= '9')
                k++;
            if (k == 0 || v + k != ve || k > 18)
                return refuse(e, 400, "bad_request",
                              "Content-Length is not a decimal length");
        } else if (same_nocase(p, name_len, "transfer-encoding")) {
            if (!same_nocase(v, (size_t)(ve - v), "chunked"))
                return refuse(e, 400, "bad_request",
                              "only Transfer-Encoding: chunked is accepted");
            chunked++;
        }
        p = nl + 1;
    }
    if (n_length > 1)
        return refuse(e, 400, "bad_request",
                      "more than one Content-Length header");
    if (chunked > 1 || (chunked && n_length))
        return refuse(e, 400, "bad_request",
                      "Transfer-Encoding with Content-Length (or twice)");
    *head_len = (size_t)(nl + 1 - buf);
    return 0;
}

/* ---------------------------------------------------------------- gate */

enum { AT_HEAD, AT_DRAIN };

typedef struct pend {
    loom_socket fd;
    int state;
    uint64_t due;        /* deadline (monotonic ns) */
    size_t peeked;       /* bytes seen at the last look */
    uint64_t idle_until; /* no look before this (no new bytes yet) */
    unsigned char addr[128];
    size_t addr_len;
} pend;

struct srv_gate {
    loom_socket listener;
    uint64_t head_ns;
    srv_gate_pass_fn pass;
    srv_gate_refused_fn refused;
    void *ctx;
    loom_thread *thread;
    loom_mutex *mu;
    int stop;
    pend *v;
    size_t n, cap;
    char *buf; /* SRV_HEAD_MAX + 1 */
};

/* At most this many connections wait at the gate; past it the oldest
 * trickling one makes room. */
#define GATE_MAX 8192
/* A refused connection is read and dropped this long, so that the error
 * reaches a client that is still sending. */
#define GATE_DRAIN_NS 2000000000ull

static const char *reason(int status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 408:
        return "Request Timeout";
    case 414:
        return "URI Too Long";
    case 431:
        return "Request Header Fields Too Large";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Service Unavailable";
    }
}

/* Answers E on P's socket and starts draining it. */
static void answer(srv_gate *g, pend *p, const srv_error *e)
{
    char *body = srv_error_json(e);
    char head[256];
    size_t bl = body ? strlen(body) : 0;
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      e->status, reason(e->status), bl);
    if (loom_socket_send_all(p->fd, head, (size_t)hl) == 0 && body)
        loom_socket_send_all(p->fd, body, bl);
    free(body);
    loom_socket_shutdown_send(p->fd);
    loom_socket_set_rcvlowat(p->fd, 1);
    p->state = AT_DRAIN;
    p->due = loom_now_ns() + GATE_DRAIN_NS;
    p->idle_until = 0;
    if (g->refused)
        g->refused(g->ctx, e->status);
}

static void drop(srv_gate *g, size_t i)
{
    g->v[i] = g->v[--g->n];
}

/* Looks at P's waiting bytes; 1 when P leaves the gate (handed over or
 * closed). */
static int look(srv_gate *g, pend *p, uint64_t now)
{
    if (p->state == AT_DRAIN) {
        long r = loom_socket_recv(p->fd, g->buf, SRV_HEAD_MAX, 0);
        if (r == 0 || r == -1) {
            loom_socket_close(p->fd);
            return 1;
        }
        return 0;
    }
    long r = loom_socket_peek(p->fd, g->buf, SRV_HEAD_MAX + 1);
    if (r == -2)
        return 0;
    if (r <= 0) {
        loom_socket_close(p->fd); /* gone before a whole head */
        return 1;
    }
    srv_error e;
    size_t head_len = 0;
    int rc = srv_head_check(g->buf, (size_t)r, &head_len, &e);
    if (rc < 0) {
        answer(g, p, &e);
        return 0;
    }
    if (rc == 0) {
        loom_socket_set_rcvlowat(p->fd, 1);
        g->pass(g->ctx, p->fd, p->addr, p->addr_len);
        return 1;
    }
    /* wake again only when more than what is here has come */
    if ((size_t)r == p->peeked)
        p->idle_until = now + 20000000ull;
    p->peeked = (size_t)r;
    loom_socket_set_rcvlowat(p->fd, (int)r + 1);
    return 0;
}

static void accept_all(srv_gate *g, uint64_t now)
{
    for (int k = 0; k < 256; k++) {
        pend p;
        memset(&p, 0, sizeof p);
        p.addr_len = sizeof p.addr;
        if (loom_socket_accept(g->listener, &p.fd, p.addr, &p.addr_len) != 1)
            return;
        p.state = AT_HEAD;
        p.due = now + g->head_ns;
        if (g->n == GATE_MAX) {
            /* the oldest waiting connection makes room */
            size_t old = 0;
            for (size_t i = 1; i < g->n; i++)
                if (g->v[i].due < g->v[old].due)
                    old = i;
            loom_socket_close(g->v[old].fd);
            drop(g, old);
        }
        if (g->n == g->cap) {
            size_t cap = g->cap ? g->cap * 2 : 64;
            pend *v = realloc(g->v, cap * sizeof *v);
            if (!v) {
                loom_socket_close(p.fd);
                return;
            }
            g->v = v;
            g->cap = cap;
        }
        g->v[g->n++] = p;
    }
}

static void gate_main(void *arg)
{
    srv_gate *g = arg;
    loom_socket *fds = NULL;
    unsigned char *ready = NULL;
    size_t *which = NULL, cap = 0;
    for (;;) {
        loom_mutex_lock(g->mu);
        int stop = g->stop;
        loom_mutex_unlock(g->mu);
        if (stop)
            break;
        uint64_t now = loom_now_ns();
        if (g->n + 1 > cap) {
            size_t nc = (g->n + 1) * 2;
            loom_socket *f = realloc(fds, nc * sizeof *f);
            if (f)
                fds = f;
            unsigned char *r = realloc(ready, nc);
            if (r)
                ready = r;
            size_t *w = realloc(which, nc * sizeof *w);
            if (w)
                which = w;
            if (!f || !r || !w) {
                loom_sleep_ms(10);
                continue;
            }
            cap = nc;
        }
        size_t n = 0;
        fds[n++] = g->listener;
        for (size_t i = 0; i < g->n; i++)
            if (g->v[i].idle_until <= now) {
                which[n] = i;
                fds[n++] = g->v[i].fd;
            }
        int got = loom_socket_poll(fds, n, ready, 50);
        now = loom_now_ns();
        if (got > 0) {
            /* pending ones first (their indexes hold until accept_all) */
            for (size_t k = n; k-- > 1;) {
                size_t i = which[k];
                if (ready[k] && look(g, &g->v[i], now))
                    drop(g, i);
            }
            if (ready[0])
                accept_all(g, now);
        }
        for (size_t i = g->n; i-- > 0;) {
            pend *p = &g->v[i];
            if (now <= p->due)
                continue;
            if (p->state == AT_DRAIN) {
                loom_socket_close(p->fd);
                drop(g, i);
            } else {
                srv_error e;
                srv_error_set(&e, 408, "invalid_request_error",
                              "request_timeout", NULL,
                              "the request head did not arrive in time");
                answer(g, p, &e);
            }
        }
    }
    free(fds);
    free(ready);
    free(which);
}

loom_status srv_gate_start(loom_socket listener, uint32_t head_ms,
                           srv_gate_pass_fn pass, srv_gate_refused_fn refused,
                           void *ctx, srv_gate **out, loom_err *err)
{
    srv_gate *g = calloc(1, sizeof *g);
    if (!g || !(g->mu = loom_mutex_new()) ||
        !(g->buf = malloc(SRV_HEAD_MAX + 1))) {
        if (g) {
            loom_mutex_free(g->mu);
            free(g);
        }
        return loom_err_set(err, LOOM_ERR_NOMEM, "server: out of memory");
    }
    if (loom_socket_set_nonblocking(listener) != 0) {
        free(g->buf);
        loom_mutex_free(g->mu);
        free(g);
        return loom_err_set(err, LOOM_ERR_IO,
                            "server: cannot make the listening socket "
                            "non-blocking");
    }
    g->listener = listener;
    g->head_ns = (uint64_t)head_ms * 1000000ull;
    g->pass = pass;
    g->refused = refused;
    g->ctx = ctx;
    loom_status st = loom_thread_start(&g->thread, gate_main, g, err);
    if (st != LOOM_OK) {
        free(g->buf);
        loom_mutex_free(g->mu);
        free(g);
        return st;
    }
    *out = g;
    return LOOM_OK;
}

void srv_gate_stop(srv_gate *g)
{
    if (!g)
        return;
    loom_mutex_lock(g->mu);
    g->stop = 1;
    loom_mutex_unlock(g->mu);
    loom_thread_join(g->thread);
    for (size_t i = 0; i < g->n; i++)
        loom_socket_close(g->v[i].fd);
    free(g->v);
    free(g->buf);
    loom_mutex_free(g->mu);
    free(g);
}
