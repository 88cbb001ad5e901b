/* Overflow-checked integer arithmetic for sizes and values read from files
 * and requests: each function stores the exact result and returns 0, or
 * returns 1 (and stores nothing) when the result does not fit. */
#ifndef LOOM_CHECKED_H
#define LOOM_CHECKED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline int loom_add_i64(int64_t a, int64_t b, int64_t *out)
{
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
        return 1;
    *out = a + b;
    return 0;
}

static inline int loom_sub_i64(int64_t a, int64_t b, int64_t *out)
{
    if ((b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + b))
        return 1;
    *out = a - b;
    return 0;
}

static inline int loom_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    if (a == 0 || b == 0) {
        *out = 0;
        return 0;
    }
    if ((a == -1 && b == INT64_MIN) || (b == -1 && a == INT64_MIN))
        return 1;
    if (a > 0 ? (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a)
              : (b > 0 ? a < INT64_MIN / b : a < INT64_MAX / b))
        return 1;
    *out = a * b;
    return 0;
}

/* Python's floor division a // b; b == 0 is the caller's to refuse (it
 * returns 1 here too). */
static inline int loom_floordiv_i64(int64_t a, int64_t b, int64_t *out)
{
    if (b == 0 || (a == INT64_MIN && b == -1))
        return 1;
    int64_t q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0)))
        q--;
    *out = q;
    return 0;
}

/* Python's modulo (the result takes the divisor's sign); b == 0 returns 1. */
static inline int loom_mod_i64(int64_t a, int64_t b, int64_t *out)
{
    if (b == 0)
        return 1;
    if (b == -1) {
        *out = 0;
        return 0;
    }
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    *out = r;
    return 0;
}

static inline int loom_add_size(size_t a, size_t b, size_t *out)
{
    if (a > SIZE_MAX - b)
        return 1;
    *out = a + b;
    return 0;
}

static inline int loom_mul_size(size_t a, size_t b, size_t *out)
{
    if (b != 0 && a > SIZE_MAX / b)
        return 1;
    *out = a * b;
    return 0;
}

/* A product of N non-negative int64 factors (shapes, element counts): 1 when
 * a factor is negative or the product exceeds INT64_MAX. N == 0 gives 1. */
static inline int loom_prod_i64(const int64_t *v, size_t n, int64_t *out)
{
    int64_t p = 1;
    for (size_t i = 0; i < n; i++)
        if (v[i] < 0 || loom_mul_i64(p, v[i], &p))
            return 1;
    *out = p;
    return 0;
}

/* D converted to int64 when it is finite and in range (truncating toward
 * zero, like a C cast); 1 otherwise. */
static inline int loom_f64_to_i64(double d, int64_t *out)
{
    /* -2^63 is exact in a double; 2^63 is the first value out of range. */
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
        return 1;
    *out = (int64_t)d;
    return 0;
}

#ifdef __cplusplus
}
#endif

#endif
