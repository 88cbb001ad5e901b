/* Status codes and messages for the core (the codes themselves are the ABI's).
 */
#ifndef LOOM_STATUS_H
#define LOOM_STATUS_H

#include <loom/plugin.h>

/* "LOOM_ERR_FORMAT" style name of a code. */
const char *loom_status_name(loom_status s);
/* Short English text of a code. */
const char *loom_strerror(loom_status s);

/* Prepends "context: " to an existing message (keeps the cause). */
void loom_err_prefix(loom_err *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
