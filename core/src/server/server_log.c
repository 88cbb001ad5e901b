/* The server's request log: one JSON object a line, each line appended with
 * a single write so that lines from concurrent requests never interleave. */
#include "server_log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <loom/platform.h>

#include "server_openai.h"

struct srv_log {
    loom_file *file;
};

loom_status srv_log_open(const char *path, srv_log **out, loom_err *err)
{
    srv_log *log = calloc(1, sizeof *log);
    if (!log)
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", path);
    loom_status st = loom_append_open(path, &log->file, err);
    if (st != LOOM_OK) {
        free(log);
        loom_err_prefix(err, "request log");
        return st;
    }
    *out = log;
    return LOOM_OK;
}

void srv_log_close(srv_log *log)
{
    if (!log)
        return;
    loom_file_close(log->file);
    free(log);
}

/* Seconds since the epoch as "YYYY-MM-DDTHH:MM:SS.mmmZ" (proleptic
 * Gregorian, UTC), computed here so the log needs no OS time zone call.
 * Days -> civil date after H. Hinnant's "days_from_civil" inverse. */
static void iso8601(double t, char out[64])
{
    if (!(t >= 0))
        t = 0;
    int64_t ms = (int64_t)llround(t * 1000.0);
    int64_t secs = ms / 1000;
    int64_t days = secs / 86400;
    int64_t rem = secs % 86400;
    int64_t z = days + 719468;
    int64_t era = z / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t y = yoe + era * 400;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t d = doy - (153 * mp + 2) / 5 + 1;
    int64_t m = mp < 10 ? mp + 3 : mp - 9;
    if (m <= 2)
        y++;
    snprintf(out, 64, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", (int)y, (int)m,
             (int)d, (int)(rem / 3600), (int)(rem / 60 % 60), (int)(rem % 60),
             (int)(ms % 1000));
}

/* Milliseconds rounded to a microsecond, so the log stays short. */
static double ms_of(double s)
{
    return round(s * 1e6) / 1e3;
}

char *srv_log_format(const srv_log_entry *e)
{
    char when[64];
    iso8601(e->time, when);
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "time", json_string(when));
    json_object_set_new(o, "method", json_string(e->method ? e->method : ""));
    /* a route or message with invalid UTF-8 must not drop the field */
    const char *route = e->route ? e->route : "";
    json_object_set_new(o, "route", srv_json_text(route, strlen(route)));
    json_object_set_new(o, "status", json_integer(e->status));
    if (e->key)
        json_object_set_new(o, "key", json_string(e->key));
    json_object_set_new(o, "stream", json_boolean(e->stream));
    json_object_set_new(o, "prompt_tokens", json_integer(e->prompt_tokens));
    json_object_set_new(o, "completion_tokens",
                        json_integer(e->completion_tokens));
    if (e->finish)
        json_object_set_new(o, "finish", json_string(e->finish));
    json_object_set_new(o, "duration_ms", json_real(ms_of(e->duration_s)));
    if (e->ttft_s >= 0)
        json_object_set_new(o, "ttft_ms", json_real(ms_of(e->ttft_s)));
    if (e->client_gone)
        json_object_set_new(o, "client_gone", json_true());
    if (e->error)
        json_object_set_new(o, "error",
                            srv_json_text(e->error, strlen(e->error)));
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                JSON_REAL_PRECISION(10));
    json_decref(o);
    if (!s)
        return NULL;
    size_t n = strlen(s);
    char *line = malloc(n + 2);
    if (line) {
        memcpy(line, s, n);
        line[n] = '\n';
        line[n + 1] = 0;
    }
    free(s);
    return line;
}

loom_status srv_log_write(srv_log *log, const srv_log_entry *e, loom_err *err)
{
    char *line = srv_log_format(e);
    if (!line)
        return loom_err_set(err, LOOM_ERR_NOMEM, "request log: out of memory");
    loom_status st = loom_append_write(log->file, line, strlen(line), err);
    free(line);
    return st;
}
