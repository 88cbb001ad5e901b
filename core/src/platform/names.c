/* A sorted list of directory entry names, shared by both platform halves of
 * loom_dir_list (it makes no OS call itself). */
#include "names.h"

#include <stdlib.h>
#include <string.h>

loom_status loom__names_add(loom__names *l, const char *name, const char *dir,
                            loom_err *err)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 16;
        char **nv = realloc(l->v, nc * sizeof *nv);
        if (!nv)
            return loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", dir);
        l->v = nv;
        l->cap = nc;
    }
    size_t len = strlen(name) + 1;
    char *copy = malloc(len);
    if (!copy)
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", dir);
    memcpy(copy, name, len);
    l->v[l->n++] = copy;
    return LOOM_OK;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void loom__names_each(loom__names *l, void (*fn)(void *ctx, const char *name),
                      void *ctx)
{
    if (l->n)
        qsort(l->v, l->n, sizeof *l->v, cmp_names);
    for (size_t i = 0; i < l->n; i++)
        fn(ctx, l->v[i]);
}

void loom__names_free(loom__names *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}
