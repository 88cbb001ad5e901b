/* UTF-8 validation and coding, Unicode white space, and GPT-2's byte-level
 * alphabet (every byte spelled as a printable code point in tokenizer.json). */
#include "tokenizer_impl.h"

/* The valid range of a sequence's second byte given its lead byte (the
 * Unicode "well-formed byte sequences" table); len 0 for an invalid lead. */
typedef struct lead {
    uint8_t len, lo, hi;
} lead;

static lead lead_of(uint8_t b)
{
    if (b < 0x80)
        return (lead){1, 0, 0};
    if (b < 0xC2)
        return (lead){0, 0, 0};
    if (b < 0xE0)
        return (lead){2, 0x80, 0xBF};
    if (b == 0xE0)
        return (lead){3, 0xA0, 0xBF};
    if (b == 0xED)
        return (lead){3, 0x80, 0x9F};
    if (b < 0xF0)
        return (lead){3, 0x80, 0xBF};
    if (b == 0xF0)
        return (lead){4, 0x90, 0xBF};
    if (b < 0xF4)
        return (lead){4, 0x80, 0xBF};
    if (b == 0xF4)
        return (lead){4, 0x80, 0x8F};
    return (lead){0, 0, 0};
}

size_t loom__utf8_scan(const char *s, size_t n, size_t *bad, int *incomplete)
{
    const uint8_t *u = (const uint8_t *)s;
    lead l = lead_of(u[0]);
    *bad = 1;
    *incomplete = 0;
    if (l.len == 0)
        return 0;
    if (l.len == 1)
        return 1;
    for (size_t i = 1; i < l.len; i++) {
        if (i >= n) {
            *bad = i;
            *incomplete = 1;
            return 0;
        }
        uint8_t lo = i == 1 ? l.lo : 0x80, hi = i == 1 ? l.hi : 0xBF;
        if (u[i] < lo || u[i] > hi) {
            *bad = i;
            return 0;
        }
    }
    return l.len;
}

size_t loom_utf8_check(const char *text, size_t len)
{
    size_t i = 0;
    while (i < len) {
        /* ASCII runs are the common case. */
        if ((uint8_t)text[i] < 0x80) {
            i++;
            continue;
        }
        size_t bad;
        int incomplete;
        size_t k = loom__utf8_scan(text + i, len - i, &bad, &incomplete);
        if (!k)
            return i;
        i += k;
    }
    return len;
}

size_t loom__utf8_decode(const char *s, size_t n, uint32_t *cp)
{
    const uint8_t *u = (const uint8_t *)s;
    if (u[0] < 0x80 || n < 2) {
        *cp = u[0];
        return 1;
    }
    if (u[0] < 0xE0) {
        *cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
        return 2;
    }
    if (u[0] < 0xF0 || n < 4) {
        *cp = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) |
              (n > 2 ? (u[2] & 0x3F) : 0);
        return n > 2 ? 3 : 2;
    }
    *cp = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
          ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
    return 4;
}

size_t loom__utf8_encode(uint32_t cp, char *out)
{
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

int loom__tok_is_space(uint32_t cp)
{
    if (cp <= 0x20)
        return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85)
        return 0;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* GPT-2's bytes_to_unicode: the printable bytes ('!'..'~', 0xA1..0xAC,
 * 0xAE..0xFF) stand for themselves; the other 68 take U+0100 upward in
 * byte order. */
static int printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
           (b >= 0xAE && b <= 0xFF);
}

uint32_t loom__tok_byte_char(uint8_t b)
{
    if (printable(b))
        return b;
    if (b <= 0x20)
        return 0x100 + b; /* 33 of them: U+0100..U+0120 */
    if (b <= 0xA0)
        return 0x100 + 33 + (b - 0x7F); /* 0x7F..0xA0: U+0121..U+0142 */
    return 0x100 + 67;                  /* 0xAD */
}

int loom__tok_char_byte(uint32_t cp)
{
    if (cp < 0x100)
        return printable(cp) ? (int)cp : -1;
    uint32_t n = cp - 0x100;
    if (n < 33)
        return (int)n;
    if (n < 67)
        return (int)(0x7F + n - 33);
    return n == 67 ? 0xAD : -1;
}
