/* A safetensors writer for the suites that build checkpoints of their own
 * (broken or altered copies of fixtures), and a reader of a fixture's
 * tensors into the same entries. */
#ifndef LOOM_TEST_ST_WRITE_H
#define LOOM_TEST_ST_WRITE_H

#include <stdint.h>

#include <loom/safetensors.h>

typedef struct st_entry {
    char name[160];
    char dtype[8];
    int ndim;
    int64_t shape[4];
    const void *data;
    uint64_t nbytes;
    void *owned; /* what to free when done with it, or NULL */
} st_entry;

/* Writes a safetensors file: 8-byte header length, JSON header padded to
 * 8 bytes, then the tensors' data back to back, in order. */
void st_write(const char *path, const st_entry *t, int n);

/* The tensors of fixture MODEL, in file order (at most MAX); *st must stay
 * open while they are used. */
int st_read(const char *model, loom_st **st, st_entry *out, int max);

/* The index of tensor NAME in t[n], or -1. */
int st_index(const st_entry *t, int n, const char *name);

#endif
