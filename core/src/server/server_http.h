/* The HTTP side's byte strings (server_buf.c): response bodies and
 * server-sent events are built in them. */
#ifndef LOOM_SERVER_HTTP_H
#define LOOM_SERVER_HTTP_H

#include <stddef.h>

/* A growable byte string, always NUL-terminated once non-empty. */
typedef struct srv_buf {
    char *data;
    size_t len, cap;
} srv_buf;

int srv_buf_add(srv_buf *b, const void *data, size_t n); /* 0 ok, -1 nomem */
int srv_buf_addf(srv_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void srv_buf_free(srv_buf *b);

#endif
