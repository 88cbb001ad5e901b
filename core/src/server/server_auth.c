/* API keys for the server: the --api-key-file parsed into SHA-256 digests
 * (the keys themselves are not kept; nettle hashes them), and constant-time
 * checks of bearer tokens against them. */
#include "server_auth.h"

#include <stdlib.h>
#include <string.h>

#include <nettle/sha2.h>

#include <loom/platform.h>

typedef struct srv_key {
    uint8_t digest[SRV_KEY_DIGEST_SIZE];
    char label[64];
} srv_key;

struct srv_keyring {
    srv_key *keys;
    int n;
};

/* Overwrites memory the compiler may not elide: key text must not outlive
 * parsing in freed heap blocks. */
static void wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n--)
        *v++ = 0;
}

_Static_assert(SRV_KEY_DIGEST_SIZE == SHA256_DIGEST_SIZE,
               "key digests are SHA-256");

void srv_key_digest(const char *key, size_t len,
                    uint8_t out[SRV_KEY_DIGEST_SIZE])
{
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, len, (const uint8_t *)key);
    sha256_digest(&ctx, SRV_KEY_DIGEST_SIZE, out);
    /* the context holds the key's last block */
    wipe(&ctx, sizeof ctx);
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' ||
           c == '\v';
}

static void trim(const char **s, const char **e)
{
    while (*s < *e && is_space(**s))
        (*s)++;
    while (*e > *s && is_space((*e)[-1]))
        (*e)--;
}

loom_status srv_keyring_load(const char *path, srv_keyring **out, loom_err *err)
{
    if (!loom_file_exists(path))
        return loom_err_set(err, LOOM_ERR_NOT_FOUND,
                            "%s: API key file not found", path);
    /* A key file others can read is as good as published. */
    if (loom_file_is_shared(path))
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%s: API key file is readable by group or others; "
                            "chmod 600 it",
                            path);
    char *text = NULL;
    size_t size = 0;
    loom_status st = loom_read_file(path, &text, &size, err);
    if (st != LOOM_OK)
        return st;
    srv_keyring *k = calloc(1, sizeof *k);
    int cap = 0;
    if (!k) {
        st = loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    int line_no = 0;
    for (const char *p = text; p < text + size;) {
        const char *nl = memchr(p, '\n', (size_t)(text + size - p));
        const char *s = p, *e = nl ? nl : text + size;
        p = nl ? nl + 1 : text + size;
        line_no++;
        trim(&s, &e);
        if (s == e || *s == '#')
            continue;
        /* "KEY" (no white space) or "LABEL: KEY" (white space after the
         * colon); anything else is refused, never guessed at. Messages
         * name the line, never its text: it may be a key. */
        const char *label_s = NULL, *label_e = NULL, *why = NULL;
        const char *ws = s;
        while (ws < e && !is_space(*ws))
            ws++;
        if (ws == e) {
            if (e[-1] == ':')
                why = "a label without a key";
            else if (memchr(s, ':', (size_t)(e - s)))
                why = "a ':' in a key without a label is ambiguous: write "
                      "'LABEL: KEY' (white space after the colon)";
        } else {
            label_s = s;
            label_e = ws - 1;
            s = ws;
            trim(&s, &e);
            const char *kws = s;
            while (kws < e && !is_space(*kws))
                kws++;
            if (*label_e != ':' || label_e == label_s ||
                memchr(label_s, ':', (size_t)(label_e - label_s)) || kws != e)
                why = "expected 'KEY' or 'LABEL: KEY' (keys hold no white "
                      "space; labels no ':')";
            else if ((size_t)(label_e - label_s) >= sizeof k->keys[0].label)
                why = "a label over 63 bytes";
        }
        if (why) {
            st = loom_err_set(err, LOOM_ERR_FORMAT, "%s:%d: %s", path, line_no,
                              why);
            goto done;
        }
        if (k->n == cap) {
            int ncap = cap ? cap * 2 : 8;
            srv_key *nk = realloc(k->keys, (size_t)ncap * sizeof *nk);
            if (!nk) {
                st = loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory",
                                  path);
                goto done;
            }
            k->keys = nk;
            cap = ncap;
        }
        srv_key *key = &k->keys[k->n++];
        srv_key_digest(s, (size_t)(e - s), key->digest);
        if (label_s) {
            size_t n = (size_t)(label_e - label_s);
            memcpy(key->label, label_s, n);
            key->label[n] = 0;
        } else {
            snprintf(key->label, sizeof key->label, "line%d", line_no);
        }
    }
    if (k->n == 0)
        st = loom_err_set(err, LOOM_ERR_INVALID, "%s: no API keys in the file",
                          path);
done:
    wipe(text, size);
    free(text);
    if (st != LOOM_OK) {
        srv_keyring_free(k);
        return st;
    }
    *out = k;
    return LOOM_OK;
}

void srv_keyring_free(srv_keyring *k)
{
    if (!k)
        return;
    if (k->keys)
        wipe(k->keys, (size_t)k->n * sizeof *k->keys);
    free(k->keys);
    free(k);
}

int srv_keyring_count(const srv_keyring *k)
{
    return k ? k->n : 0;
}

const char *srv_keyring_check(const srv_keyring *k, const char *key, size_t len)
{
    /* Hashing first makes every comparison the same length whatever was
     * presented; every digest is compared in full and the match is picked
     * without a data-dependent branch. */
    uint8_t d[SRV_KEY_DIGEST_SIZE];
    srv_key_digest(key, len, d);
    int found = -1;
    for (int i = 0; i < k->n; i++) {
        unsigned diff = 0;
        for (int j = 0; j < SRV_KEY_DIGEST_SIZE; j++)
            diff |= (unsigned)(d[j] ^ k->keys[i].digest[j]);
        /* mask is all ones when diff == 0 */
        int mask = -(int)((diff - 1u) >> 31 & 1u);
        found = (found & ~mask) | (i & mask);
    }
    return found >= 0 ? k->keys[found].label : NULL;
}

const char *srv_bearer_token(const char *header, size_t *len)
{
    if (!header)
        return NULL;
    while (*header == ' ' || *header == '\t')
        header++;
    static const char scheme[] = "bearer";
    for (size_t i = 0; i < sizeof scheme - 1; i++) {
        char c = header[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != scheme[i])
            return NULL;
    }
    const char *t = header + sizeof scheme - 1;
    if (*t != ' ' && *t != '\t')
        return NULL;
    while (*t == ' ' || *t == '\t')
        t++;
    const char *e = t + strlen(t);
    while (e > t && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    if (e == t)
        return NULL;
    *len = (size_t)(e - t);
    return t;
}
