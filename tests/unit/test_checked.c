/* loom/checked.h against closed-form bounds: every result either exact or
 * reported as overflow, at and around the int64 and size_t limits. */
#include <math.h>
#include <stdint.h>

#include <loom/checked.h>

#include "testutil.h"

START_TEST(add_sub_mul)
{
    int64_t r = 0;
    ck_assert_int_eq(loom_add_i64(INT64_MAX - 1, 1, &r), 0);
    ck_assert_int_eq(r, INT64_MAX);
    ck_assert_int_eq(loom_add_i64(INT64_MAX, 1, &r), 1);
    ck_assert_int_eq(loom_add_i64(INT64_MIN, -1, &r), 1);
    ck_assert_int_eq(loom_add_i64(INT64_MIN, INT64_MAX, &r), 0);
    ck_assert_int_eq(r, -1);
    ck_assert_int_eq(loom_sub_i64(INT64_MIN, 1, &r), 1);
    ck_assert_int_eq(loom_sub_i64(0, INT64_MIN, &r), 1);
    ck_assert_int_eq(loom_sub_i64(-1, INT64_MIN, &r), 0);
    ck_assert_int_eq(r, INT64_MAX);
    ck_assert_int_eq(loom_mul_i64(INT64_MIN, -1, &r), 1);
    ck_assert_int_eq(loom_mul_i64(-1, INT64_MIN, &r), 1);
    ck_assert_int_eq(loom_mul_i64(3037000499LL, 3037000499LL, &r), 0);
    ck_assert_int_eq(r, 9223372030926249001LL);
    ck_assert_int_eq(loom_mul_i64(3037000500LL, 3037000500LL, &r), 1);
    ck_assert_int_eq(loom_mul_i64(-3037000500LL, 3037000500LL, &r), 1);
    ck_assert_int_eq(loom_mul_i64(INT64_MIN / 2, 2, &r), 0);
    ck_assert_int_eq(r, INT64_MIN);
    ck_assert_int_eq(loom_mul_i64(INT64_MIN / 2, -2, &r), 1);
    /* the config: 4 heads of 2^62 + 8 wraps to 32 in int64 */
    ck_assert_int_eq(loom_mul_i64(4, (1LL << 62) + 8, &r), 1);
    ck_assert_int_eq(loom_mul_i64(0, INT64_MIN, &r), 0);
    ck_assert_int_eq(r, 0);
}
END_TEST

START_TEST(div_mod)
{
    int64_t r = 0;
    ck_assert_int_eq(loom_floordiv_i64(INT64_MIN, -1, &r), 1);
    ck_assert_int_eq(loom_floordiv_i64(1, 0, &r), 1);
    ck_assert_int_eq(loom_floordiv_i64(-7, 2, &r), 0);
    ck_assert_int_eq(r, -4); /* Python: -7 // 2 */
    ck_assert_int_eq(loom_floordiv_i64(7, -2, &r), 0);
    ck_assert_int_eq(r, -4);
    ck_assert_int_eq(loom_mod_i64(INT64_MIN, -1, &r), 0);
    ck_assert_int_eq(r, 0);
    ck_assert_int_eq(loom_mod_i64(-7, 2, &r), 0);
    ck_assert_int_eq(r, 1); /* Python: -7 % 2 */
    ck_assert_int_eq(loom_mod_i64(7, -2, &r), 0);
    ck_assert_int_eq(r, -1);
    ck_assert_int_eq(loom_mod_i64(7, 0, &r), 1);
}
END_TEST

START_TEST(sizes_products_casts)
{
    size_t z = 0;
    ck_assert_int_eq(loom_add_size(SIZE_MAX, 1, &z), 1);
    ck_assert_int_eq(loom_mul_size(SIZE_MAX / 2 + 1, 2, &z), 1);
    ck_assert_int_eq(loom_mul_size(SIZE_MAX / 2, 2, &z), 0);
    ck_assert_uint_eq(z, SIZE_MAX - 1);
    int64_t p = 0;
    const int64_t ok[] = {1024, 1024, 1024, 1024, 1024, 1024};
    ck_assert_int_eq(loom_prod_i64(ok, 6, &p), 0);
    ck_assert_int_eq(p, 1LL << 60);
    const int64_t wrap[] = {4, (1LL << 62) + 8};
    ck_assert_int_eq(loom_prod_i64(wrap, 2, &p), 1);
    const int64_t neg[] = {4, -1};
    ck_assert_int_eq(loom_prod_i64(neg, 2, &p), 1);
    ck_assert_int_eq(loom_prod_i64(NULL, 0, &p), 0);
    ck_assert_int_eq(p, 1);
    int64_t i = 0;
    ck_assert_int_eq(loom_f64_to_i64(9223372036854775808.0, &i), 1);
    ck_assert_int_eq(loom_f64_to_i64(-9223372036854775808.0, &i), 0);
    ck_assert_int_eq(i, INT64_MIN);
    ck_assert_int_eq(loom_f64_to_i64(NAN, &i), 1);
    ck_assert_int_eq(loom_f64_to_i64(-INFINITY, &i), 1);
    ck_assert_int_eq(loom_f64_to_i64(-2.9, &i), 0);
    ck_assert_int_eq(i, -2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("checked");
    TCase *tc = tcase_create("checked");
    tcase_add_test(tc, add_sub_mul);
    tcase_add_test(tc, div_mod);
    tcase_add_test(tc, sizes_products_casts);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
