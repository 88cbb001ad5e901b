/* A sorted list of directory entry names, shared by both platform halves of
 * loom_dir_list (it makes no OS call itself). */
#ifndef LOOM_PLATFORM_NAMES_H
#define LOOM_PLATFORM_NAMES_H

#include <stddef.h>

#include <loom/status.h>

typedef struct loom__names {
    char **v;
    size_t n, cap;
} loom__names;

/* Appends a copy of name; LOOM_ERR_NOMEM (message naming dir) on failure. */
loom_status loom__names_add(loom__names *l, const char *name, const char *dir,
                            loom_err *err);
/* Sorts the names and calls fn on each in order. */
void loom__names_each(loom__names *l, void (*fn)(void *ctx, const char *name),
                      void *ctx);
void loom__names_free(loom__names *l);

#endif
