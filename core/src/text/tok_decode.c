/* Ids back to text: whole decodes and the incremental detokenizer, both
 * replacing invalid UTF-8 the way the reference (Rust's from_utf8_lossy)
 * does: one U+FFFD per maximal invalid subpart. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

typedef struct tok_buf {
    char *p;
    size_t n, cap;
} tok_buf;

static int buf_reserve(tok_buf *b, size_t more)
{
    if (b->n + more + 1 <= b->cap)
        return 1;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + more + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return 0;
    b->p = p;
    b->cap = cap;
    return 1;
}

static const char REPLACEMENT[] = "\xEF\xBF\xBD";

/* Appends the text of s[0..n): valid characters as they are, U+FFFD for each
 * invalid subpart. Unless FINAL, a trailing incomplete sequence is left
 * unconsumed. Returns the bytes consumed, or (size_t)-1 on out of memory. */
static size_t append_lossy(tok_buf *out, const char *s, size_t n, int final)
{
    /* At most 3 output bytes per input byte (a lone byte -> U+FFFD). */
    if (!buf_reserve(out, 3 * n))
        return (size_t)-1;
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        while (run < n && (uint8_t)s[run] < 0x80)
            run++;
        if (run > i) {
            memcpy(out->p + out->n, s + i, run - i);
            out->n += run - i;
            i = run;
            continue;
        }
        size_t bad;
        int incomplete;
        size_t k = loom__utf8_scan(s + i, n - i, &bad, &incomplete);
        if (k) {
            memcpy(out->p + out->n, s + i, k);
            out->n += k;
            i += k;
            continue;
        }
        if (incomplete && !final)
            break;
        memcpy(out->p + out->n, REPLACEMENT, 3);
        out->n += 3;
        i += bad;
    }
    out->p[out->n] = '\0';
    return i;
}

static loom_status check_id(const loom_tokenizer *tok, int32_t id,
                            loom_err *err)
{
    if (id < 0 || (size_t)id >= tok->n_ids || !tok->bytes[id])
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "tokenizer: id %d is not in the vocabulary "
                            "(size %zu)",
                            (int)id, tok->n_ids);
    return LOOM_OK;
}

loom_status loom_tokenizer_decode(const loom_tokenizer *tok, const int32_t *ids,
                                  size_t n, int skip_special, char **text,
                                  size_t *len, loom_err *err)
{
    tok_buf raw = {0}, out = {0};
    loom_status st = LOOM_OK;
    for (size_t i = 0; i < n; i++) {
        st = check_id(tok, ids[i], err);
        if (st != LOOM_OK)
            goto fail;
        if (skip_special && tok->special[ids[i]])
            continue;
        uint32_t k = tok->bytes_len[ids[i]];
        if (!buf_reserve(&raw, k))
            goto nomem;
        memcpy(raw.p + raw.n, tok->bytes[ids[i]], k);
        raw.n += k;
    }
    if (!buf_reserve(&out, 0) ||
        append_lossy(&out, raw.p ? raw.p : "", raw.n, 1) == (size_t)-1)
        goto nomem;
    free(raw.p);
    *text = out.p;
    if (len)
        *len = out.n;
    return LOOM_OK;
nomem:
    st = loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");
fail:
    free(raw.p);
    free(out.p);
    return st;
}

/* ------------------------------------------------------------ streaming */

struct loom_detok {
    const loom_tokenizer *tok;
    int skip_special;
    char pending[4]; /* the start of a character still incomplete */
    size_t n_pending;
    tok_buf in, out;
};

loom_status loom_detok_new(const loom_tokenizer *tok, int skip_special,
                           loom_detok **out, loom_err *err)
{
    loom_detok *d = calloc(1, sizeof *d);
    if (!d || !buf_reserve(&d->out, 16)) {
        free(d);
        return loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");
    }
    d->tok = tok;
    d->skip_special = skip_special;
    *out = d;
    return LOOM_OK;
}

loom_status loom_detok_push(loom_detok *d, int32_t id, const char **text,
                            size_t *len, loom_err *err)
{
    d->out.n = 0;
    d->out.p[0] = '\0';
    *text = d->out.p;
    *len = 0;
    loom_status st = check_id(d->tok, id, err);
    if (st != LOOM_OK)
        return st;
    if (d->skip_special && d->tok->special[id])
        return LOOM_OK;
    uint32_t k = d->tok->bytes_len[id];
    d->in.n = 0;
    if (!buf_reserve(&d->in, d->n_pending + k))
        return loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");
    memcpy(d->in.p, d->pending, d->n_pending);
    memcpy(d->in.p + d->n_pending, d->tok->bytes[id], k);
    d->in.n = d->n_pending + k;
    size_t used = append_lossy(&d->out, d->in.p, d->in.n, 0);
    if (used == (size_t)-1)
        return loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");
    /* What is left is an incomplete sequence: at most 3 bytes. */
    d->n_pending = d->in.n - used;
    memcpy(d->pending, d->in.p + used, d->n_pending);
    *text = d->out.p;
    *len = d->out.n;
    return LOOM_OK;
}

void loom_detok_flush(loom_detok *d, const char **text, size_t *len)
{
    d->out.n = 0;
    /* Four bytes of room were reserved at creation; U+FFFD needs three. */
    if (d->n_pending) {
        memcpy(d->out.p, REPLACEMENT, 3);
        d->out.n = 3;
    }
    d->out.p[d->out.n] = '\0';
    d->n_pending = 0;
    *text = d->out.p;
    *len = d->out.n;
}

void loom_detok_free(loom_detok *d)
{
    if (!d)
        return;
    free(d->in.p);
    free(d->out.p);
    free(d);
}
