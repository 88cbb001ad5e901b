/* The tensor listing behind `loom inspect MODEL --tensors`: every tensor of a
 * checkpoint with its dtype, shape and bytes, and the total. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include <loom/checkpoint.h>
#include <loom/safetensors.h>

#include "commands.h"

static void shape_str(const loom_tensor *t, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int32_t i = 0; i < t->ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld",
                                 i ? ", " : "", (long long)t->shape[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
}

static int print_table(const loom_st *st, const char *dir)
{
    size_t n = loom_st_count(st), width = 4;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(loom_st_at(st, i)->name);
        if (len > width)
            width = len;
    }
    printf("%-*s  %-7s  %-20s  %12s\n", (int)width, "name", "dtype", "shape",
           "bytes");
    for (size_t i = 0; i < n; i++) {
        const loom_tensor *t = loom_st_at(st, i);
        char shape[200];
        shape_str(t, shape, sizeof shape);
        printf("%-*s  %-7s  %-20s  %12llu\n", (int)width, t->name,
               loom_dtype_name(t->dtype), shape, (unsigned long long)t->nbytes);
        total += t->nbytes;
    }
    printf("%zu tensors, %llu bytes (%.2f MiB) in %s\n", n,
           (unsigned long long)total, (double)total / (1024.0 * 1024.0), dir);
    return 0;
}

json_t *loom_cli_tensors_json(const loom_st *st, const char *dir)
{
    json_t *root = json_object();
    json_t *arr = json_array();
    uint64_t total = 0;
    int bad = !root || !arr;
    for (size_t i = 0; !bad && i < loom_st_count(st); i++) {
        const loom_tensor *t = loom_st_at(st, i);
        json_t *shape = json_array();
        json_t *o = json_object();
        bad = !shape || !o;
        for (int32_t d = 0; !bad && d < t->ndim; d++)
            bad = json_array_append_new(shape, json_integer(t->shape[d]));
        if (!bad)
            bad = json_object_set_new(o, "name", json_string(t->name)) ||
                  json_object_set_new(o, "dtype",
                                      json_string(loom_dtype_name(t->dtype))) ||
                  json_object_set(o, "shape", shape) ||
                  json_object_set_new(o, "bytes",
                                      json_integer((json_int_t)t->nbytes)) ||
                  json_array_append(arr, o);
        json_decref(shape);
        json_decref(o);
        total += t->nbytes;
    }
    if (!bad)
        bad = json_object_set_new(root, "model", json_string(dir)) ||
              json_object_set_new(
                  root, "count", json_integer((json_int_t)loom_st_count(st))) ||
              json_object_set_new(root, "total_bytes",
                                  json_integer((json_int_t)total)) ||
              json_object_set(root, "tensors", arr);
    json_decref(arr);
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return root;
}

static int print_json(const loom_st *st, const char *dir)
{
    json_t *root = loom_cli_tensors_json(st, dir);
    int bad =
        !root || json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (bad) {
        fprintf(stderr, "loom: out of memory listing tensors\n");
        return 1;
    }
    printf("\n");
    return 0;
}

int loom_cli_print_tensors(const char *model, int json)
{
    loom_err err;
    loom_checkpoint *ckpt = NULL;
    loom_status s = loom_checkpoint_open(model, &ckpt, &err);
    if (s == LOOM_OK)
        s = loom_checkpoint_load_tensors(ckpt, &err);
    if (s != LOOM_OK) {
        fprintf(stderr, "loom: %s\n", err.msg);
        loom_checkpoint_close(ckpt);
        return 1;
    }
    const loom_st *st = loom_checkpoint_tensors(ckpt);
    const char *dir = loom_checkpoint_dir(ckpt);
    int rc = json ? print_json(st, dir) : print_table(st, dir);
    loom_checkpoint_close(ckpt);
    return rc;
}
