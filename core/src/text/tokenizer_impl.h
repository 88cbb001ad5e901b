/* The tokenizer's internal layout, shared by tokenizer.c (loading and the
 * encode driver), tok_enc.c (the encoder's segment store), tok_bpe.c
 * (vocabulary maps and merges), tok_pretok.c (normalizers and
 * pre-tokenizers) and tok_decode.c (bytes back to text). */
#ifndef LOOM_TOKENIZER_IMPL_H
#define LOOM_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>

#include <loom/tokenizer.h>

/* ---- growable int32 array (the output ids) */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;
loom_status loom__tok_ids_push(tok_ids *a, int32_t id, loom_err *err);

/* ---- string -> id map: open addressing, keys point into the arena */
typedef struct tok_strmap {
    const char **key;
    uint32_t *klen;
    int32_t *val;
    size_t cap; /* power of two, 0 when empty */
    size_t n;
} tok_strmap;
uint64_t loom__tok_hash(const void *data, size_t len);
loom_status loom__tok_strmap_put(tok_strmap *m, const char *key, size_t len,
                                 int32_t val, loom_err *err);
/* Sizes the map for N keys at once (loading avoids rehashing). */
loom_status loom__tok_strmap_reserve(tok_strmap *m, size_t n, loom_err *err);
int32_t loom__tok_strmap_get(const tok_strmap *m, const char *key, size_t len);
void loom__tok_strmap_free(tok_strmap *m);

/* ---- (left id, right id) -> (rank, merged id) */
typedef struct tok_merge {
    uint64_t key; /* (left << 32) | right, UINT64_MAX when the slot is free */
    uint32_t rank;
    int32_t id;
} tok_merge;
typedef struct tok_mergemap {
    tok_merge *slot;
    size_t cap; /* power of two */
    size_t n;
} tok_mergemap;
loom_status loom__tok_mergemap_init(tok_mergemap *m, size_t expect,
                                    loom_err *err);
/* A later merge of the same pair replaces the earlier one, as HF's map does. */
void loom__tok_mergemap_put(tok_mergemap *m, int32_t a, int32_t b,
                            uint32_t rank, int32_t id);
const tok_merge *loom__tok_mergemap_get(const tok_mergemap *m, int32_t a,
                                        int32_t b);
void loom__tok_mergemap_free(tok_mergemap *m);

/* ---- added tokens */
typedef struct tok_added {
    const char *content; /* in the arena */
    size_t len;
    const char *pat; /* what is matched: content, normalized when the token
                        is `normalized` */
    size_t pat_len;
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} tok_added;

/* ---- normalizers (a Sequence is flattened into steps) */
typedef enum tok_norm_kind {
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_LOWERCASE,
} tok_norm_kind;

/* ---- pre-tokenizers (a Sequence is flattened into steps) */
typedef enum tok_split_behavior {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_WITH_PREVIOUS,
    TOK_SPLIT_MERGED_WITH_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;

typedef struct tok_pre {
    pcre2_code *re; /* NULL: the step only prepends a space (ByteLevel) */
    int jit;        /* the JIT compiled the pattern */
    tok_split_behavior behavior;
    int invert;
    int add_prefix_space; /* ByteLevel: prepend ' ' to a piece without one */
} tok_pre;

#define TOK_MAX_STEPS 16

struct loom_tokenizer {
    char *arena; /* every string below points in here */
    size_t arena_len, arena_cap;

    size_t n_ids;       /* one more than the largest id */
    const char **text;  /* [n_ids] token as in tokenizer.json, or NULL */
    const char **bytes; /* [n_ids] raw bytes the token decodes to */
    uint32_t *bytes_len;
    uint8_t *special; /* [n_ids] 1 for special added tokens */

    tok_strmap vocab; /* model vocabulary, keyed by its byte-level form */
    tok_mergemap merges;
    int32_t byte_id[256]; /* id of each single-byte token, -1 if none */
    int ignore_merges;

    tok_added *added;
    size_t n_added;
    tok_strmap added_map; /* content -> id */
    /* Added tokens ordered by the first byte of their pattern:
     * by_byte[first[b] .. first[b + 1]) start with byte b. */
    uint32_t *by_byte;
    uint32_t first[257];
    int32_t unk_id; /* -1 when the model has no unk_token */

    tok_norm_kind norm[TOK_MAX_STEPS];
    size_t n_norm;
    tok_pre pre[TOK_MAX_STEPS];
    size_t n_pre;
    int byte_level; /* a ByteLevel pre-tokenizer was seen */
};

/* ---- byte-level alphabet (GPT-2's bytes_to_unicode) */
/* The code point that stands for byte B in tokenizer.json. */
uint32_t loom__tok_byte_char(uint8_t b);
/* Byte for code point CP, or -1 when CP is not in the alphabet. */
int loom__tok_char_byte(uint32_t cp);

/* ---- UTF-8 */
/* Decodes one code point of valid UTF-8 at s (n bytes left); returns its
 * length. */
size_t loom__utf8_decode(const char *s, size_t n, uint32_t *cp);
size_t loom__utf8_encode(uint32_t cp, char *out);
/* Length of the valid sequence at s (n >= 1 bytes), or 0 when invalid. Then
 * *bad is the length of the maximal subpart that could start a valid
 * sequence (>= 1; one U+FFFD replaces it), and *incomplete is 1 when the
 * bytes ran out before the sequence could be judged. */
size_t loom__utf8_scan(const char *s, size_t n, size_t *bad, int *incomplete);
/* Unicode White_Space (Rust's char::is_whitespace). */
int loom__tok_is_space(uint32_t cp);

/* ---- encoding stages */
typedef struct tok_cache tok_cache;
typedef struct tok_enc {
    const loom_tokenizer *tok;
    tok_ids out;
    tok_cache *cache;
    pcre2_match_data *md;
    loom_err *err;
    int parse_special; /* recognize special added tokens in the text */
    /* Buffers made during the call (normalized text, prefixed pieces): the
     * cache's keys point into them, so they live until the call ends. */
    char **bufs;
    size_t n_bufs, cap_bufs;
} tok_enc;
/* Hands BUF to the call (freed at its end); frees it on failure. The
 * segment store (tok_enc.c). */
loom_status loom__tok_enc_keep(tok_enc *e, char *buf);
/* Frees every buffer handed to the call. */
void loom__tok_enc_release(tok_enc *e);

/* Normalizes s[0..len) with every normalizer step into *out (malloc'd; set
 * to NULL with *out_len = len when nothing changes). */
loom_status loom__tok_normalize(const loom_tokenizer *tok, const char *s,
                                size_t len, char **out, size_t *out_len,
                                loom_err *err);
/* Runs pre-tokenizer steps from STEP on, then BPE on each final piece. */
loom_status loom__tok_pretokenize(tok_enc *e, size_t step, const char *s,
                                  size_t len);
/* Byte-pair encodes one pre-tokenized piece into e->out (through the cache). */
loom_status loom__tok_bpe_word(tok_enc *e, const char *s, size_t len);
tok_cache *loom__tok_cache_new(void);
void loom__tok_cache_free(tok_cache *c);

/* ---- loading helpers (tok_pretok.c) */
#include <jansson.h>
loom_status loom__tok_load_normalizer(loom_tokenizer *tok, json_t *node,
                                      loom_err *err);
loom_status loom__tok_load_pretokenizer(loom_tokenizer *tok, json_t *node,
                                        loom_err *err);
void loom__tok_free_pretokenizers(loom_tokenizer *tok);

/* ---- JSON files (tokenizer.c; chat_template.c reads its config with it) */
/* Parses the file NAME in DIR, or DIR itself when it is not a directory,
 * with json_loadb FLAGS. PATH gets the file's path for the caller's
 * messages; errors name it (and the JSON line and column). */
loom_status loom__tok_read_json(const char *dir, const char *name, size_t flags,
                                char *path, size_t path_size, json_t **out,
                                loom_err *err);

#endif
