/* Names and texts of status codes, generated from the one table in plugin.h. */
#include <loom/status.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *loom_status_name(loom_status s)
{
    switch (s) {
#define LOOM_STATUS_NAME(name, value, text)                                    \
    case LOOM_##name:                                                          \
        return "LOOM_" #name;
        LOOM_STATUS_MAP(LOOM_STATUS_NAME)
#undef LOOM_STATUS_NAME
    }
    return "LOOM_ERR_UNKNOWN";
}

const char *loom_strerror(loom_status s)
{
    switch (s) {
#define LOOM_STATUS_TEXT(name, value, text)                                    \
    case LOOM_##name:                                                          \
        return text;
        LOOM_STATUS_MAP(LOOM_STATUS_TEXT)
#undef LOOM_STATUS_TEXT
    }
    return "unknown error";
}

void loom_err_prefix(loom_err *err, const char *fmt, ...)
{
    if (!err)
        return;
    char head[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    old[sizeof old - 1] = '\0';
    /* a message cut at the buffer's end is still worth having */
    if (snprintf(err->msg, sizeof err->msg, "%s: %s", head, old) < 0)
        err->msg[0] = '\0';
}
