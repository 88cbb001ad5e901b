/* A safetensors writer and fixture reader for the Check suites. */
#include "st_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>
#include <loom/platform.h>

#include "testutil.h"

void st_write(const char *path, const st_entry *t, int n)
{
    json_t *h = json_object();
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++)
            json_array_append_new(shape, json_integer(t[i].shape[d]));
        json_object_set_new(h, t[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype",
                                      t[i].dtype, "shape", shape,
                                      "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + t[i].nbytes)));
        off += t[i].nbytes;
    }
    char *hs = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    ck_assert_ptr_nonnull(hs);
    size_t hl = strlen(hs), padded = (hl + 7) / 8 * 8;
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    /* the length is little-endian whatever the host */
    unsigned char l8[8];
    for (int i = 0; i < 8; i++)
        l8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    ck_assert_uint_eq(fwrite(l8, 1, 8, f), 8);
    ck_assert_uint_eq(fwrite(hs, 1, hl, f), hl);
    for (size_t i = hl; i < padded; i++)
        ck_assert_int_eq(fputc(' ', f), ' ');
    for (int i = 0; i < n; i++)
        if (t[i].nbytes)
            ck_assert_uint_eq(fwrite(t[i].data, 1, t[i].nbytes, f),
                              t[i].nbytes);
    ck_assert_int_eq(fclose(f), 0);
    free(hs);
}

int st_read(const char *model, loom_st **st, st_entry *out, int max)
{
    loom_err err;
    ck_assert_int_eq(loom_st_open_dir(fixture(model), st, &err), LOOM_OK);
    int n = (int)loom_st_count(*st);
    ck_assert_int_le(n, max);
    for (int i = 0; i < n; i++) {
        const loom_tensor *t = loom_st_at(*st, (size_t)i);
        memset(&out[i], 0, sizeof out[i]);
        snprintf(out[i].name, sizeof out[i].name, "%s", t->name);
        snprintf(out[i].dtype, sizeof out[i].dtype, "%s",
                 loom_dtype_name(t->dtype));
        out[i].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++)
            out[i].shape[d] = t->shape[d];
        out[i].data = t->data;
        out[i].nbytes = t->nbytes;
    }
    return n;
}

int st_index(const st_entry *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name))
            return i;
    return -1;
}
