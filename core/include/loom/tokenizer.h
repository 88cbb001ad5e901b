/* Hugging Face tokenizer.json (byte-level BPE) encoding, decoding and
 * incremental detokenization, giving the ids of the `tokenizers` library. */
#ifndef LOOM_TOKENIZER_H
#define LOOM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include <loom/status.h>

typedef struct loom_tokenizer loom_tokenizer;
typedef struct loom_detok loom_detok;

/* Opens `tokenizer.json` in a checkpoint directory, or the file itself when
 * PATH names a file. Supported: model BPE (byte-level, merges as "a b" or
 * ["a", "b"]), added_tokens, normalizers NFC/NFD/NFKC/NFKD/Lowercase/Sequence,
 * pre-tokenizers Split/ByteLevel/Digits/Sequence (a ByteLevel step is
 * required), decoder ByteLevel. Any other
 * component type is refused by name (LOOM_ERR_UNSUPPORTED). The tokenizer is
 * immutable once open: every call below is [thread-safe]. */
loom_status loom_tokenizer_open(const char *path, loom_tokenizer **out,
                                loom_err *err);
void loom_tokenizer_free(loom_tokenizer *tok);

/* Encodes LEN bytes of UTF-8 TEXT (NUL bytes allowed) as `tokenizers` does
 * with encode(text, add_special_tokens=False). With PARSE_SPECIAL 0, added
 * tokens marked special are not recognized in the text (their characters are
 * encoded as ordinary text); non-special added tokens always are. *ids is
 * malloc'd (free it), *n its length. Invalid UTF-8 gives LOOM_ERR_INVALID
 * naming the byte offset. */
loom_status loom_tokenizer_encode(const loom_tokenizer *tok, const char *text,
                                  size_t len, int parse_special, int32_t **ids,
                                  size_t *n, loom_err *err);

/* Decodes ids to text (malloc'd, NUL-terminated; *len may be NULL). Invalid
 * UTF-8 byte runs become U+FFFD as `tokenizers` decode does. With
 * SKIP_SPECIAL, special added tokens are left out. An id outside the
 * vocabulary gives LOOM_ERR_INVALID. */
loom_status loom_tokenizer_decode(const loom_tokenizer *tok, const int32_t *ids,
                                  size_t n, int skip_special, char **text,
                                  size_t *len, loom_err *err);

/* One more than the largest id (vocabulary and added tokens). */
size_t loom_tokenizer_vocab_size(const loom_tokenizer *tok);
/* The id of a token given as it is written in tokenizer.json (added tokens
 * first, then the vocabulary, e.g. "<|im_end|>" or "Ġthe"); -1 if none. */
int32_t loom_tokenizer_token_id(const loom_tokenizer *tok, const char *text);
/* The token as written in tokenizer.json; NULL for an unused id. Valid until
 * loom_tokenizer_free. */
const char *loom_tokenizer_token_text(const loom_tokenizer *tok, int32_t id);
/* The raw bytes the token decodes to (*len set); NULL for an unused id. */
const char *loom_tokenizer_token_bytes(const loom_tokenizer *tok, int32_t id,
                                       size_t *len);
/* 1 if the id is an added token marked special (e.g. <|im_end|>). */
int loom_tokenizer_is_special(const loom_tokenizer *tok, int32_t id);

/* ---- incremental decoding
 * A stream of ids in, complete UTF-8 characters out: concatenating every
 * push and the final flush gives exactly loom_tokenizer_decode of all ids.
 * One loom_detok is used by one thread at a time. */
loom_status loom_detok_new(const loom_tokenizer *tok, int skip_special,
                           loom_detok **out, loom_err *err);
/* Adds one id. *text (*len bytes, NUL-terminated) holds what became
 * complete; it stays valid until the next call on D. Bytes that may still
 * start a character are held back; bytes that cannot become valid are
 * emitted as U+FFFD at once. */
loom_status loom_detok_push(loom_detok *d, int32_t id, const char **text,
                            size_t *len, loom_err *err);
/* Ends the stream: a held-back partial character becomes U+FFFD. The
 * detokenizer is then empty and can start a new stream. */
void loom_detok_flush(loom_detok *d, const char **text, size_t *len);
void loom_detok_free(loom_detok *d);

/* ---- UTF-8 helpers shared with the chat template and the server */

/* Offset of the first invalid byte, or LEN when TEXT is valid UTF-8
 * (overlongs, surrogates and values above U+10FFFF are invalid). */
size_t loom_utf8_check(const char *text, size_t len);

#endif
