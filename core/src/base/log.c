/* The core's log sink: stderr, one line per message, above a level. */
#include <loom/host.h>

#include <stdarg.h>
#include <stdio.h>

/* Logging is one of the two places allowed global state (DESIGN.md). */
static loom_log_level log_threshold = LOOM_LOG_WARN;

void loom_log_set_level(loom_log_level level)
{
    log_threshold = level;
}

static const char *level_name(loom_log_level l)
{
    switch (l) {
    case LOOM_LOG_ERROR:
        return "error";
    case LOOM_LOG_WARN:
        return "warning";
    case LOOM_LOG_INFO:
        return "info";
    default:
        return "debug";
    }
}

static void log_v(loom_log_level level, const char *fmt, va_list ap)
{
    if (level > log_threshold)
        return;
    char line[2048];
    vsnprintf(line, sizeof line, fmt, ap);
    /* one fputs per line so concurrent messages do not interleave */
    char out[2100];
    snprintf(out, sizeof out, "loom: %s: %s\n", level_name(level), line);
    fputs(out, stderr);
}

void loom_log(loom_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_v(level, fmt, ap);
    va_end(ap);
}

void loom__host_log(const loom_host *host, loom_log_level level,
                    const char *fmt, ...)
{
    (void)host;
    va_list ap;
    va_start(ap, fmt);
    log_v(level, fmt, ap);
    va_end(ap);
}
