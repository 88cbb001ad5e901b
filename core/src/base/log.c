/* The core's log sink: stderr, one line per message, above a level. */
#include <loom/log.h>

#include <stdio.h>
#include <string.h>

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

void loom_log_v(const char *who, loom_log_level level, const char *fmt,
                va_list ap)
{
    if (level > log_threshold)
        return;
    if (!who)
        who = "loom";
    char line[2048];
    vsnprintf(line, sizeof line, fmt, ap);
    /* a plugin that names itself in the message is named once */
    const char *msg = line;
    size_t n = strlen(who);
    if (strncmp(msg, who, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
        msg += n + 2;
    /* one fputs per line so concurrent messages do not interleave */
    char out[2200];
    snprintf(out, sizeof out, "%s: %s: %s\n", who, level_name(level), msg);
    fputs(out, stderr);
}

void loom_log(loom_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    loom_log_v(NULL, level, fmt, ap);
    va_end(ap);
}
