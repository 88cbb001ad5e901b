/* Helpers the fuzz targets share: a scratch directory per process and a
 * file written into it, for the loaders that read checkpoints from disk. */
#ifndef LOOM_FUZZ_UTIL_H
#define LOOM_FUZZ_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <loom/platform.h>

/* The process's scratch directory (made on first use; NULL if it cannot
 * be). */
static const char *fuzz_dir(void)
{
    static char dir[512];
    if (!dir[0]) {
        loom_err err;
        if (loom_mkdtemp(dir, sizeof dir, &err) != LOOM_OK) {
            dir[0] = 0;
            return NULL;
        }
    }
    return dir;
}

/* Writes DATA to fuzz_dir()/NAME; the path, or NULL. */
static const char *fuzz_write(const char *name, const void *data, size_t n)
{
    static char path[768];
    const char *dir = fuzz_dir();
    if (!dir)
        return NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return NULL;
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    fclose(f);
    return w == n ? path : NULL;
}

#endif
