/* Growable byte strings for the HTTP side: the bodies and server-sent
 * events the server sends are built in them. */
#include "server_http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int srv_buf_add(srv_buf *b, const void *data, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

int srv_buf_addf(srv_buf *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    if ((size_t)n < sizeof small)
        return srv_buf_add(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big)
        return -1;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = srv_buf_add(b, big, (size_t)n);
    free(big);
    return rc;
}

void srv_buf_free(srv_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
