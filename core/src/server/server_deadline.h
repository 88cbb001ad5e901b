/* Deadlines for reading requests (server_deadline.c): a connection must
 * deliver its headers (under TLS, its handshake too), and then its body,
 * within a bounded time, however slowly it trickles bytes; past the
 * deadline it is shut down. Connections waiting on their client hold at
 * most a set number of slots: past it the oldest is shut. */
#ifndef LOOM_SERVER_DEADLINE_H
#define LOOM_SERVER_DEADLINE_H

#include <stdint.h>

#include <loom/platform.h>

typedef struct srv_deadlines srv_deadlines;
typedef struct srv_peer srv_peer;

/* Starts the sweeper thread; HEADER_MS bounds a request's line and
 * headers, BODY_MS (+ its length at MIN_BPS bytes per second) its body;
 * IDLE_MS is the keep-alive idle time allowed before a next request. At
 * most MAX_WAITING connections wait on their client (reading or idle). */
loom_status srv_deadlines_new(uint32_t header_ms, uint32_t body_ms,
                              uint32_t min_bps, uint32_t idle_ms,
                              uint32_t max_waiting, srv_deadlines **out,
                              loom_err *err);
/* Stops the sweeper. Peers still listed are freed. */
void srv_deadlines_free(srv_deadlines *d);

/* A new connection on FD: its headers are due in HEADER_MS. When
 * MAX_WAITING others wait on their clients, the oldest of them is shut. */
srv_peer *srv_peer_add(srv_deadlines *d, loom_socket fd);
/* The connection closed (before its descriptor is): P is freed. */
void srv_peer_remove(srv_deadlines *d, srv_peer *p);
/* Headers read: the body of BODY_LEN bytes is due (for a chunked body of
 * unknown length, pass the body limit). */
void srv_peer_headers_done(srv_deadlines *d, srv_peer *p, int64_t body_len);
/* The request is read: no deadline while it is answered. */
void srv_peer_request_done(srv_deadlines *d, srv_peer *p);
/* Answered (keep-alive): the next request's headers are due. */
void srv_peer_answered(srv_deadlines *d, srv_peer *p);
/* Connections shut for missing a deadline, so far. */
uint64_t srv_deadlines_shut(srv_deadlines *d);

#endif
