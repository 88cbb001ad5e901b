/* Helpers shared by the Check suites: fixture paths and reference files. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/platform.h>

const char *fixture(const char *rel)
{
    static char bufs[8][1024];
    static int next;
    char *b = bufs[next++ & 7];
    snprintf(b, sizeof bufs[0], "%s/%s", LOOM_FIXTURES, rel);
    return b;
}

float *read_f32(const char *path, size_t *n)
{
    char *data = NULL;
    size_t size = 0;
    loom_err err;
    if (loom_read_file(path, &data, &size, &err) != LOOM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    *n = size / sizeof(float);
    float *out = malloc(size ? size : 1);
    memcpy(out, data, size);
    free(data);
    return out;
}

double rel_err(const float *got, const float *ref, size_t n)
{
    double maxd = 0, maxr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (d > maxd || isnan(d))
            maxd = isnan(d) ? INFINITY : d;
        if (fabs(ref[i]) > maxr)
            maxr = fabs(ref[i]);
    }
    return maxr > 0 ? maxd / maxr : maxd;
}

int run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

const char *temp_dir(void)
{
    static char buf[8][512];
    static int next;
    char *b = buf[next++ & 7];
    loom_err err;
    if (loom_mkdtemp(b, sizeof buf[0], &err) != LOOM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    return b;
}

void write_text_in(const char *dir, const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert_uint_eq(fwrite(text, 1, strlen(text), f), strlen(text));
    ck_assert_int_eq(fclose(f), 0);
}
