/* The server's front door: one thread accepts connections and keeps each
 * one, without reading it, until its request head (and a chunked or small
 * body) is complete (the bytes stay in the socket for libmicrohttpd) or its
 * deadline passes, so slow clients hold no connection slot and no thread while
 * they trickle. A malformed head or chunked framing gets an OpenAI-shaped JSON
 * error here; libmicrohttpd would answer with an HTML page. The server
 * closes each connection after its answer (server.c), so every request
 * comes through here.
 *
 * The gate looks at a connection again only when it may have more bytes:
 * where the platform has SO_RCVLOWAT, poll wakes only past what was seen;
 * everywhere, a connection whose head is still incomplete is left out of
 * the poll for a time that doubles with each look (up to a quarter
 * second), so a client sending a byte at a time costs a few looks a
 * second, and a platform without SO_RCVLOWAT (Windows) does not spin on
 * sockets that stay readable. */
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

int srv_head_parse(const char *buf, size_t len, srv_head *out, srv_error *e)
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

    int n_length = 0, chunked = 0, n_fields = 0, expect = 0;
    int64_t length = -1;
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
        /* libmicrohttpd keeps each field in a small per-connection pool
         * and answers its own HTML 431 when it runs out */
        if (++n_fields > SRV_FIELDS_MAX)
            return refuse(e, 431, "headers_too_large",
                          "the request head has over 100 header fields");
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
            length = 0;
            for (size_t i = 0; i < k; i++)
                length = length * 10 + (v[i] - '0');
        } else if (same_nocase(p, name_len, "expect")) {
            expect = same_nocase(v, (size_t)(ve - v), "100-continue");
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
    out->len = (size_t)(nl + 1 - buf);
    out->chunked = chunked;
    out->length = length;
    out->expect_continue = expect;
    return 0;
}

int srv_head_check(const char *buf, size_t len, size_t *head_len, srv_error *e)
{
    srv_head h;
    int rc = srv_head_parse(buf, len, &h, e);
    if (rc == 0)
        *head_len = h.len;
    return rc;
}

/* The value of the hexadecimal digits P..END (at most 15: it fits), or -1. */
static int64_t chunk_size(const char *p, const char *end)
{
    uint64_t v = 0;
    if (p == end || end - p > 15)
        return -1;
    for (; p < end; p++) {
        int d = *p >= '0' && *p <= '9'   ? *p - '0'
                : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
                : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10
                                         : -1;
        if (d < 0)
            return -1;
        v = v * 16 + (uint64_t)d;
    }
    return (int64_t)v;
}

int srv_chunked_check(const char *buf, size_t len, uint64_t max_body,
                      size_t *body_len, srv_error *e)
{
    const char *p = buf, *end = buf + len;
    uint64_t total = 0;
    for (;;) {
        const char *nl = line_end(p, end);
        if (!nl)
            return end - p > 1024 ? refuse(e, 400, "bad_request",
                                           "a chunk size line over 1024 bytes")
                                  : 1;
        const char *le = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
        const char *q = p;
        while (q < le && *q != ';')
            q++;
        int64_t size = chunk_size(p, q);
        if (size < 0)
            return refuse(e, 400, "bad_request", "malformed chunk size");
        for (const char *c = q; c < le; c++) /* an extension, ignored */
            if (((unsigned char)*c < 0x20 && *c != '\t') ||
                (unsigned char)*c == 0x7f)
                return refuse(e, 400, "bad_request",
                              "a control character in a chunk extension");
        if ((uint64_t)size > max_body - total) {
            srv_error_set(e, 413, "invalid_request_error", "body_too_large",
                          NULL, "the request body is over the %llu byte limit",
                          (unsigned long long)max_body);
            return -1;
        }
        total += (uint64_t)size;
        p = nl + 1;
        if (size == 0)
            break;
        /* the data, then CRLF (or a bare LF, as libmicrohttpd takes) */
        if ((uint64_t)(end - p) < (uint64_t)size + 1)
            return 1;
        p += size;
        if (*p == '\r') {
            if (end - p < 2)
                return 1;
            p++;
        }
        if (*p != '\n')
            return refuse(e, 400, "bad_request",
                          "a chunk is longer than its size says");
        p++;
    }
    /* trailer fields, then the blank line */
    for (int n = 0;; n++) {
        const char *nl = line_end(p, end);
        if (!nl)
            return 1;
        const char *le = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
        if (le == p) {
            *body_len = (size_t)(nl + 1 - buf);
            return 0;
        }
        const char *q = p;
        while (q < le && is_tchar((unsigned char)*q))
            q++;
        if (n >= SRV_FIELDS_MAX || q == p || q >= le || *q != ':')
            return refuse(e, 400, "bad_request", "malformed chunked trailer");
        for (const char *c = q; c < le; c++)
            if (((unsigned char)*c < 0x20 && *c != '\t') ||
                (unsigned char)*c == 0x7f)
                return refuse(e, 400, "bad_request",
                              "a control character in a chunked trailer");
        p = nl + 1;
    }
}

/* ---------------------------------------------------------------- gate */

enum { AT_HEAD, AT_DRAIN };

typedef struct pend {
    loom_socket fd;
    int state;
    uint64_t due;        /* deadline (monotonic ns) */
    unsigned looks;      /* looks that found the request incomplete */
    int big_buf;         /* its receive buffer was grown for a body */
    size_t want;         /* head and declared body, once the head passed */
    uint64_t idle_until; /* no look before this */
    unsigned char addr[128];
    size_t addr_len;
} pend;

struct srv_gate {
    loom_socket listener;
    uint64_t head_ns;
    uint64_t max_body;
    srv_gate_pass_fn pass;
    srv_gate_refused_fn refused;
    void *ctx;
    loom_thread *thread;
    loom_mutex *mu;
    int stop;
    pend *v;
    size_t n, cap;
    char *buf; /* GATE_PEEK */
};

/* At most this many connections wait at the gate; past it the oldest
 * trickling one makes room. */
#define GATE_MAX 8192
/* A refused connection is read and dropped this long, so that the error
 * reaches a client that is still sending. */
#define GATE_DRAIN_NS 2000000000ull
/* The most a look reads: a head and a body, and one byte more. */
#define GATE_PEEK (SRV_HEAD_MAX + SRV_GATE_BODY_MAX + 1)
/* The first wait after an incomplete look, and the longest. */
#define GATE_BACKOFF_NS     2000000ull
#define GATE_BACKOFF_MAX_NS 250000000ull

static const char *reason(int status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 408:
        return "Request Timeout";
    case 411:
        return "Length Required";
    case 413:
        return "Content Too Large";
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

/* P is still incomplete with HAVE bytes: it is looked at again once more
 * have come, and not too soon. */
static void back_off(pend *p, uint64_t now, long have)
{
    uint64_t wait =
        p->looks < 7 ? GATE_BACKOFF_NS << p->looks : GATE_BACKOFF_MAX_NS;
    if (wait > GATE_BACKOFF_MAX_NS)
        wait = GATE_BACKOFF_MAX_NS;
    p->looks++;
    p->idle_until = now + wait;
    loom_socket_set_rcvlowat(p->fd, (int)have + 1);
}

/* Looks at P's waiting bytes; 1 when P leaves the gate (handed over or
 * closed). */
static int look(srv_gate *g, pend *p, uint64_t now)
{
    if (p->state == AT_DRAIN) {
        long r = loom_socket_recv(p->fd, g->buf, GATE_PEEK, 0);
        if (r == 0 || r == -1) {
            loom_socket_close(p->fd);
            return 1;
        }
        return 0;
    }
    if (p->want) {
        /* the head passed: only the count of a declared body's bytes is
         * needed, not another copy of them (readable with none: its end) */
        long n = loom_socket_pending(p->fd);
        if (n <= 0) {
            loom_socket_close(p->fd);
            return 1;
        }
        if ((size_t)n >= p->want) {
            loom_socket_set_rcvlowat(p->fd, 1);
            g->pass(g->ctx, p->fd, p->addr, p->addr_len);
            return 1;
        }
        back_off(p, now, n);
        return 0;
    }
    long r = loom_socket_peek(p->fd, g->buf, GATE_PEEK);
    if (r == -2)
        return 0;
    if (r <= 0) {
        loom_socket_close(p->fd); /* gone before a whole request */
        return 1;
    }
    srv_error e;
    srv_head h = {0, 0, -1, 0};
    size_t body_len = 0;
    /* the head alone is limited to SRV_HEAD_MAX */
    size_t head_part =
        (size_t)r < SRV_HEAD_MAX + 1 ? (size_t)r : SRV_HEAD_MAX + 1;
    int rc = srv_head_parse(g->buf, head_part, &h, &e);
    size_t have = (size_t)r - h.len; /* of the body, when rc is 0 */
    if (rc == 0 && h.chunked) {
        /* libmicrohttpd answers bad chunk framing with HTML, and cannot be
         * given the bytes another way: the whole body waits here */
        rc =
            srv_chunked_check(g->buf + h.len, have, g->max_body, &body_len, &e);
        if (rc == 1 && have >= SRV_GATE_BODY_MAX) {
            srv_error_set(&e, 411, "invalid_request_error", "length_required",
                          NULL,
                          "a chunked body over %d bytes: send it with a "
                          "Content-Length",
                          SRV_GATE_BODY_MAX);
            rc = -1;
        }
    } else if (rc == 0 && h.length > 0 && !h.expect_continue &&
               (uint64_t)h.length <= g->max_body &&
               h.length <= SRV_GATE_BODY_MAX) {
        /* a small body waits here too: a client trickling it holds no
         * thread of libmicrohttpd's (larger ones, and those a client sends
         * only after libmicrohttpd's 100 Continue, have the read deadlines) */
        if (have < (size_t)h.length) {
            p->want = h.len + (size_t)h.length;
            rc = 1;
        }
    }
    if (rc == 1 && h.len && !p->big_buf) {
        /* room for the whole body without it being read */
        loom_socket_set_rcvbuf(p->fd, GATE_PEEK + GATE_PEEK / 2);
        p->big_buf = 1;
        /* a chunked body is needed here: ask for it (libmicrohttpd says
         * 100 Continue again later; a client takes any number of them) */
        if (h.chunked && h.expect_continue) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            loom_socket_send_all(p->fd, cont, sizeof cont - 1);
        }
    }
    if (rc < 0) {
        answer(g, p, &e);
        return 0;
    }
    if (rc == 0) {
        loom_socket_set_rcvlowat(p->fd, 1);
        g->pass(g->ctx, p->fd, p->addr, p->addr_len);
        return 1;
    }
    back_off(p, now, r);
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
        /* wake for the next connection due a look, or at most 50 ms on */
        uint64_t next = now + 50000000ull;
        for (size_t i = 0; i < g->n; i++) {
            pend *p = &g->v[i];
            if (p->idle_until <= now) {
                which[n] = i;
                fds[n++] = p->fd;
            } else if (p->idle_until < next) {
                next = p->idle_until;
            }
            if (p->due < next)
                next = p->due > now ? p->due : now;
        }
        uint32_t wait_ms = (uint32_t)((next - now + 999999) / 1000000);
        int got = loom_socket_poll(fds, n, ready, wait_ms);
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
                           uint64_t max_body, srv_gate_pass_fn pass,
                           srv_gate_refused_fn refused, void *ctx,
                           srv_gate **out, loom_err *err)
{
    srv_gate *g = calloc(1, sizeof *g);
    if (!g || !(g->mu = loom_mutex_new()) || !(g->buf = malloc(GATE_PEEK))) {
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
    g->max_body = max_body;
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
