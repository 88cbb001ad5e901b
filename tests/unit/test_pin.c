/* Pinning a mapped file (the engine's weight policy): mlock or the
 * anonymous copy keeps the bytes and the addresses, and the copy alone
 * (what runs where mlock is refused) does too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/platform.h>

#include "testutil.h"

/* Writes `n` patterned bytes to a temporary file `path` and maps them. */
static void map_pattern(char *path, size_t n, loom_map *m, char *want)
{
    snprintf(path, 1024, "%s/pin.bin", temp_dir());
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    for (size_t i = 0; i < n; i++)
        want[i] = (char)(i * 7 + i / 251);
    ck_assert_uint_eq(fwrite(want, 1, n, f), n);
    fclose(f);
    loom_err err;
    ck_assert_int_eq(loom_map_file(path, m, &err), LOOM_OK);
    ck_assert_uint_eq(m->size, n);
}

START_TEST(pin_keeps_bytes_and_addresses)
{
    /* a bit over 3 MiB: more than one 2 MiB page, not a multiple of it */
    size_t n = (3u << 20) + 12345;
    char *want = malloc(n);
    loom_map m;
    char path[1024];
    map_pattern(path, n, &m, want);
    const uint8_t *at = m.data;
    loom_err err = {{0}};
    loom_pin_kind k = loom_map_pin(&m, &err);
    if (k == LOOM_PIN_NONE)
        ck_assert_msg(err.msg[0] != 0, "no pin and no reason");
    else
        ck_assert(k == LOOM_PIN_MLOCK || k == LOOM_PIN_HUGE_COPY);
    ck_assert_ptr_eq(m.data, at);
    ck_assert_int_eq(memcmp(m.data, want, n), 0);
    ck_assert_str_eq(loom_pin_name(LOOM_PIN_MLOCK), "mlock");
    ck_assert_str_eq(loom_pin_name(LOOM_PIN_NONE), "none");
    loom_unmap(&m);
    free(want);
}
END_TEST

START_TEST(anonymous_copy_keeps_bytes_and_addresses)
{
    size_t n = (5u << 20) + 4097;
    char *want = malloc(n);
    loom_map m;
    char path[1024];
    map_pattern(path, n, &m, want);
    const uint8_t *at = m.data;
    loom_err err = {{0}};
    loom_status st = loom_map_to_anon(&m, &err);
#if defined(__linux__)
    ck_assert_msg(st == LOOM_OK, "%s", err.msg);
#else
    if (st != LOOM_OK)
        ck_assert(err.msg[0] != 0);
#endif
    ck_assert_ptr_eq(m.data, at);
    ck_assert_int_eq(memcmp(m.data, want, n), 0);
#if defined(__linux__)
    /* the addresses are anonymous memory now, not the file */
    FILE *maps = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(maps);
    char line[2048];
    int seen = 0;
    while (fgets(line, sizeof line, maps)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) != 2)
            continue;
        if ((uintptr_t)at + n / 2 >= lo && (uintptr_t)at + n / 2 < hi) {
            seen = 1;
            ck_assert_msg(strstr(line, "pin.bin") == NULL, "%s", line);
        }
    }
    fclose(maps);
    ck_assert(seen);
#endif
    /* unmapped first: Windows refuses to remove a mapped file */
    loom_unmap(&m);
    ck_assert_int_eq(remove(path), 0);
    free(want);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pin");
    TCase *tc = tcase_create("pin");
    tcase_add_test(tc, pin_keeps_bytes_and_addresses);
    tcase_add_test(tc, anonymous_copy_keeps_bytes_and_addresses);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
