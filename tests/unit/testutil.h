/* Helpers shared by the Check suites: fixture paths and reference files. */
#ifndef LOOM_TESTUTIL_H
#define LOOM_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

/* LOOM_FIXTURES "/" rel, in a static rotating buffer (8 slots). */
const char *fixture(const char *rel);
/* Reads a little-endian float32 file; *n gets the element count. */
float *read_f32(const char *path, size_t *n);
/* max |a-b| / max |ref|, the tolerance measure of fixtures/README.md */
double rel_err(const float *got, const float *ref, size_t n);
/* Runs a suite, prints the Check summary, returns the process exit code. */
int run_suite(Suite *s);
/* A fresh temporary directory (removed by the OS's tmp cleaning). */
const char *temp_dir(void);
/* Writes `text` to dir/name (the test fails when it cannot). */
void write_text_in(const char *dir, const char *name, const char *text);

#endif
