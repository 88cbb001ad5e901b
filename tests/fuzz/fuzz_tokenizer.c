/* libFuzzer target for tokenizer.json: the first byte chooses between
 * loading the input as a tokenizer.json (then encoding a fixed text with
 * it), and encoding the input as text with the qwen35-tiny fixture's
 * tokenizer (then decoding the ids, which must give the text back, in
 * NFC as the fixture's normalizer makes it, when it is valid UTF-8). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <loom/tokenizer.h>
#include <utf8proc.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void encode_decode(const loom_tokenizer *tok, const char *text,
                          size_t len, int check)
{
    int32_t *ids = NULL;
    size_t n = 0;
    loom_err err;
    if (loom_tokenizer_encode(tok, text, len, 0, &ids, &n, &err) != LOOM_OK)
        return;
    char *back = NULL;
    size_t blen = 0;
    /* utf8proc's own NFC is the reference (NULL: not valid UTF-8) */
    char *want = NULL;
    if (check && !memchr(text, 0, len)) {
        char *z = malloc(len + 1);
        if (z) {
            memcpy(z, text, len);
            z[len] = 0;
            want = (char *)utf8proc_NFC((const utf8proc_uint8_t *)z);
            free(z);
        }
    }
    if (loom_tokenizer_decode(tok, ids, n, 0, &back, &blen, &err) == LOOM_OK) {
        /* byte-level BPE round-trips valid UTF-8, after the normalizer */
        if (want && (blen != strlen(want) || memcmp(back, want, blen) != 0))
            abort();
        free(back);
    }
    free(want);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static loom_tokenizer *fixture;
    static int tried;
    if (size == 0)
        return 0;
    loom_err err;
    if (data[0] & 1) {
        const char *path = fuzz_write("tokenizer.json", data + 1, size - 1);
        loom_tokenizer *tok = NULL;
        if (path && loom_tokenizer_open(path, &tok, &err) == LOOM_OK) {
            static const char text[] = "Hello, world! 123 <|im_end|> \xc3\xa9";
            encode_decode(tok, text, sizeof text - 1, 0);
            loom_tokenizer_free(tok);
        }
        return 0;
    }
    if (!tried) {
        tried = 1;
        if (loom_tokenizer_open(LOOM_FIXTURES "/models/qwen35-tiny", &fixture,
                                &err) != LOOM_OK)
            fixture = NULL;
    }
    if (fixture)
        encode_decode(fixture, (const char *)data + 1, size - 1, 1);
    return 0;
}
