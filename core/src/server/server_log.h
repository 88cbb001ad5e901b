/* The request log (server_log.c): one JSON line per request. */
#ifndef LOOM_SERVER_LOG_H
#define LOOM_SERVER_LOG_H

#include <stdint.h>

#include <loom/status.h>

/* One request as the log records it. */
typedef struct srv_log_entry {
    double time; /* wall clock at arrival, seconds since the epoch */
    const char *method;
    const char *route; /* the path as requested */
    int status;
    const char *key; /* the key's label, or NULL */
    int stream;
    int32_t prompt_tokens, completion_tokens;
    const char *finish; /* finish reason, or NULL */
    double duration_s;  /* arrival -> response complete */
    double ttft_s;      /* arrival -> first token; < 0 when none */
    int client_gone;    /* the client left before the end */
    const char *error;  /* the error message sent, or NULL */
} srv_log_entry;

typedef struct srv_log srv_log;
loom_status srv_log_open(const char *path, srv_log **out, loom_err *err);
/* Appends one JSON line with a single write (whole under concurrency). */
loom_status srv_log_write(srv_log *log, const srv_log_entry *e, loom_err *err);
void srv_log_close(srv_log *log);
/* The line srv_log_write appends (malloc'd, ends with '\n'). */
char *srv_log_format(const srv_log_entry *e);

#endif
