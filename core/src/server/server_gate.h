/* The server's front door (server_gate.c): it accepts connections, reads
 * (without consuming) each one's request head, and a chunked body's
 * framing (a small body whole), within a deadline, refuses malformed ones with
 * OpenAI JSON errors, and hands the rest to libmicrohttpd, whose own refusals
 * are HTML pages. */
#ifndef LOOM_SERVER_GATE_H
#define LOOM_SERVER_GATE_H

#include <stddef.h>
#include <stdint.h>

#include <loom/platform.h>

#include "server_openai.h"

/* Limits on a request head: the target, and the whole head. */
#define SRV_URI_MAX  8192
#define SRV_HEAD_MAX 16384
/* At most this many header (or trailer) fields. */
#define SRV_FIELDS_MAX 100
/* A body of up to this size waits whole at the gate; a chunked one over
 * it is refused (411: send a Content-Length). */
#define SRV_GATE_BODY_MAX 65536

/* Checks the start of a request head (LEN bytes of BUF): 0 when the whole
 * head is there and well formed (*head_len gets its length), 1 when more
 * bytes are needed to tell, -1 when it is refused (E says why, with 400,
 * 414, 431 or 505). */
int srv_head_check(const char *buf, size_t len, size_t *head_len, srv_error *e);
/* What srv_head_parse reads of a well formed head. */
typedef struct srv_head {
    size_t len;          /* of the head, blank line included */
    int chunked;         /* Transfer-Encoding: chunked */
    int64_t length;      /* Content-Length; -1: none */
    int expect_continue; /* Expect: 100-continue */
} srv_head;
/* srv_head_check, telling what the gate needs of the head in *OUT. */
int srv_head_parse(const char *buf, size_t len, srv_head *out, srv_error *e);
/* Checks the framing of a chunked body (LEN bytes of BUF from its first
 * size line): 0 when the whole body, trailers included, is there and well
 * formed (*body_len gets its length), 1 when more bytes are needed, -1 when
 * it is refused (E: 400, or 413 past MAX_BODY bytes of data). */
int srv_chunked_check(const char *buf, size_t len, uint64_t max_body,
                      size_t *body_len, srv_error *e);

typedef struct srv_gate srv_gate;
/* A connection whose head (and chunked or small body) passed: the callee
 * owns FD. */
typedef void (*srv_gate_pass_fn)(void *ctx, loom_socket fd, const void *addr,
                                 size_t addr_len);
/* A connection refused with STATUS (already answered and being closed). */
typedef void (*srv_gate_refused_fn)(void *ctx, int status);

/* Starts the gate's thread on LISTENER (made non-blocking; the caller
 * keeps and closes it). HEAD_MS bounds the time to the end of the head
 * (and of a body that waits at the gate); MAX_BODY is the body limit. */
loom_status srv_gate_start(loom_socket listener, uint32_t head_ms,
                           uint64_t max_body, srv_gate_pass_fn pass,
                           srv_gate_refused_fn refused, void *ctx,
                           srv_gate **out, loom_err *err);
/* Stops accepting, closes connections still at the gate and joins. */
void srv_gate_stop(srv_gate *g);

#endif
