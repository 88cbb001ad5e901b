/* The core's log sink: stderr, one line per message, above a level
 * threshold (the only global it keeps). */
#ifndef LOOM_LOG_H
#define LOOM_LOG_H

#include <stdarg.h>

#include <loom/plugin.h>

/* A message of the core itself: "loom: LEVEL: MESSAGE". */
void loom_log(loom_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A message written by WHO (a plugin's name; NULL: the core):
 * "WHO: LEVEL: MESSAGE". A message that already opens with "WHO: " keeps
 * the name once. */
void loom_log_v(const char *who, loom_log_level level, const char *fmt,
                va_list ap);
void loom_log_set_level(loom_log_level level);

#endif
