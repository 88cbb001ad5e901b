/* SHA-256 (FIPS 180-4), used to keep only digests of API keys in memory. */
#ifndef LOOM_SHA256_H
#define LOOM_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define LOOM_SHA256_SIZE 32

typedef struct loom_sha256 {
    uint32_t h[8];
    uint64_t length; /* bytes absorbed so far */
    uint8_t block[64];
    size_t used; /* bytes waiting in block */
} loom_sha256_ctx;

void loom_sha256_init(loom_sha256_ctx *ctx);
void loom_sha256_update(loom_sha256_ctx *ctx, const void *data, size_t n);
void loom_sha256_final(loom_sha256_ctx *ctx, uint8_t out[LOOM_SHA256_SIZE]);
/* One-shot digest of data[0..n). */
void loom_sha256(const void *data, size_t n, uint8_t out[LOOM_SHA256_SIZE]);

#endif
