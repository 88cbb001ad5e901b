/* A drafter by prompt lookup: it proposes what followed the most recent
 * earlier occurrence of the stream's last n tokens (n from its `n` option
 * down to 1) in the stream's own tokens. No weights, no taps, any family:
 * it opens without a checkpoint (`--drafter ngram:n=3,k=8`) and reads the
 * committed tokens through absorb_tokens (ABI 2.1). Built against the
 * installed SDK's plugin.h alone. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <loom/plugin.h>

#define NGRAM_MAX_N 8 /* longest suffix looked up */
#define NGRAM_MAX_K                                                            \
    15 /* most proposals a draft makes (LOOM_MAX_WINDOW - 1)                   \
        */

struct loom_drafter {
    int32_t vocab;
    int32_t n; /* longest suffix looked up */
    int32_t k; /* most proposals a draft makes */
};

/* The stream's committed tokens, position i at tok[i]. */
struct loom_draft_stream {
    int32_t *tok;
    int32_t len, cap;
};

/* An integer option from the config (the options the core parsed), `dflt`
 * when absent; refused outside [lo, hi] with its name and value. */
static loom_status ngram_opt(const loom_host *h, const loom_checkpoint *c,
                             const char *key, int32_t dflt, int32_t lo,
                             int32_t hi, int32_t *out, loom_err *err)
{
    const loom_json *v = h->json_get(h->config(c), key);
    loom_json_type t = h->json_type(v);
    if (t == LOOM_JSON_MISSING) {
        *out = dflt;
        return LOOM_OK;
    }
    if (t != LOOM_JSON_INT)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "ngram: option %s is not an integer", key);
    int64_t x = h->json_int(v);
    if (x < lo || x > hi)
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "ngram: option %s=%lld is outside [%d, %d]", key,
                            (long long)x, lo, hi);
    *out = (int32_t)x;
    return LOOM_OK;
}

static loom_status ngram_options(const loom_host *h, const loom_checkpoint *c,
                                 int32_t *n, int32_t *k, loom_err *err)
{
    loom_status rc = ngram_opt(h, c, "n", 3, 1, NGRAM_MAX_N, n, err);
    if (rc == LOOM_OK)
        rc = ngram_opt(h, c, "k", 8, 1, NGRAM_MAX_K, k, err);
    return rc;
}

/* Reports every option it reads: the core refuses any other by name. */
static loom_status LOOM_ABI ngram_geometry(const loom_host *h,
                                           const loom_checkpoint *c,
                                           const loom_fields *out,
                                           loom_err *err)
{
    int32_t n, k;
    loom_status rc = ngram_options(h, c, &n, &k, err);
    if (rc != LOOM_OK)
        return rc;
    out->i64(out->ctx, "n", n);
    out->i64(out->ctx, "k", k);
    return LOOM_OK;
}

static loom_status LOOM_ABI ngram_open(const loom_host *h,
                                       const loom_checkpoint *c,
                                       const loom_target *target,
                                       loom_drafter **out, loom_err *err)
{
    if (!target || target->struct_size < sizeof(loom_target) || !target->info ||
        target->info->vocab <= 0)
        return loom_err_set(err, LOOM_ERR_INVALID, "ngram: no target to fit");
    /* the core calls absorb_tokens from 2.1 on; an older one never would,
     * and the drafter would see no tokens */
    loom_drafter d;
    loom_status rc = ngram_options(h, c, &d.n, &d.k, err);
    if (rc != LOOM_OK)
        return rc;
    d.vocab = target->info->vocab;
    loom_drafter *p = (loom_drafter *)malloc(sizeof *p);
    if (!p)
        return loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
    *p = d;
    *out = p;
    return LOOM_OK;
}

static void LOOM_ABI ngram_close(loom_drafter *d)
{
    free(d);
}

static void LOOM_ABI ngram_needs(const loom_drafter *d, loom_drafter_needs *req)
{
    req->n_taps = 0;
    req->taps = NULL;
    req->block_size = d->k + 1;
    req->mask_token = 0; /* unused: it proposes real tokens only */
}

static loom_status LOOM_ABI ngram_stream_new(loom_drafter *d,
                                             loom_draft_stream **s,
                                             loom_err *err)
{
    (void)d;
    *s = (loom_draft_stream *)calloc(1, sizeof **s);
    return *s ? LOOM_OK : loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
}

static void LOOM_ABI ngram_stream_free(loom_drafter *d, loom_draft_stream *s)
{
    (void)d;
    if (s)
        free(s->tok);
    free(s);
}

static loom_status LOOM_ABI ngram_absorb_tokens(loom_drafter *d,
                                                loom_draft_stream *s,
                                                const int32_t *tokens,
                                                const int32_t *positions,
                                                int32_t n, loom_err *err)
{
    if (n <= 0)
        return LOOM_OK;
    /* consecutive, starting at or below the length (below: a rollback) */
    if (positions[0] < 0 || positions[0] > s->len)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "ngram: tokens at position %d, the stream holds %d",
                            positions[0], s->len);
    for (int32_t i = 0; i < n; i++) {
        if (positions[i] != positions[0] + i)
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "ngram: positions not consecutive at row %d",
                                i);
        if (tokens[i] < 0 || tokens[i] >= d->vocab)
            return loom_err_set(err, LOOM_ERR_RANGE, "ngram: token %d",
                                tokens[i]);
    }
    int32_t need = positions[0] + n;
    if (need > s->cap) {
        int32_t cap = s->cap ? s->cap : 256;
        while (cap < need)
            cap *= 2;
        int32_t *t = (int32_t *)realloc(s->tok, sizeof(int32_t) * (size_t)cap);
        if (!t)
            return loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
        s->tok = t;
        s->cap = cap;
    }
    memcpy(s->tok + positions[0], tokens, sizeof(int32_t) * (size_t)n);
    s->len = need;
    return LOOM_OK;
}

/* Token i of the history: the committed tokens, then `last`. */
static int32_t at(const loom_draft_stream *s, int32_t last, int32_t i)
{
    return i < s->len ? s->tok[i] : last;
}

/* Proposals after `last` into out[0..max): what followed the most recent
 * earlier occurrence of the history's longest matching suffix. */
static int32_t lookup(const loom_drafter *d, const loom_draft_stream *s,
                      int32_t last, int32_t max, int32_t *out)
{
    int32_t m = s->len + 1; /* history length, `last` included */
    for (int32_t n = d->n; n >= 1; n--) {
        if (m <= n)
            continue;
        /* an occurrence at j..j+n-1 that ends before the history does */
        for (int32_t j = m - n - 1; j >= 0; j--) {
            int32_t q = 0;
            while (q < n && at(s, last, j + q) == at(s, last, m - n + q))
                q++;
            if (q < n)
                continue;
            int32_t got = 0;
            for (int32_t p = j + n; p < m && got < max; p++)
                out[got++] = at(s, last, p);
            return got;
        }
    }
    return 0;
}

static loom_status LOOM_ABI ngram_draft(loom_drafter *d,
                                        loom_draft_stream *const *streams,
                                        const int32_t *last, int32_t n_streams,
                                        const loom_proposals *out,
                                        loom_err *err)
{
    if (out->struct_size < sizeof(loom_proposals))
        return loom_err_set(err, LOOM_ERR_ABI, "ngram: proposals of %u bytes",
                            out->struct_size);
    int32_t max = out->max < d->k ? out->max : d->k;
    for (int32_t i = 0; i < n_streams; i++) {
        int32_t *tok = out->tokens + (size_t)i * (size_t)out->max;
        int32_t got = max > 0 ? lookup(d, streams[i], last[i], max, tok) : 0;
        for (int32_t j = 0; j < got; j++)
            out->parents[(size_t)i * (size_t)out->max + (size_t)j] = -1;
        out->n_out[i] = got;
    }
    return LOOM_OK;
}

static const loom_drafter_i ngram_drafter = {
    sizeof(loom_drafter_i),
    ngram_geometry,
    ngram_open,
    ngram_close,
    ngram_needs,
    ngram_stream_new,
    ngram_stream_free,
    NULL, /* absorb: no taps asked */
    ngram_draft,
    ngram_absorb_tokens,
};

/* A drafter named on the command line claims no checkpoint directory. */
static int32_t LOOM_ABI ngram_probe(const loom_host *h,
                                    const loom_checkpoint *c)
{
    (void)h;
    (void)c;
    return 0;
}

static const void *LOOM_ABI ngram_get_interface(const char *id)
{
    return strcmp(id, LOOM_DRAFTER_ID) == 0 ? &ngram_drafter : NULL;
}

static const loom_plugin ngram_plugin = {
    LOOM_ABI_MAJOR,
    LOOM_ABI_MINOR,
    sizeof(loom_plugin),
    "ngram",
    "1.0.0",
    LOOM_PLUGIN_DRAFTER,
    "prompt-lookup drafter: proposes what followed the last n tokens before",
    ngram_probe,
    ngram_get_interface,
};

/* No work here: the descriptor is static. */
LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &ngram_plugin;
}
