/* An oracle drafter for the lane's speculation tests and benches: it
 * proposes a stream's known continuation, read from its config.json, with
 * every k-th proposal made wrong, so windows are accepted long, rejected
 * at chosen offsets and committed often. config.json:
 *   "architectures": ["LoomOracleDrafter"],
 *   "sequences": [[ids...], ...]  each a whole stream (prompt + output),
 *   "wrong_every": k              0: never wrong, 1: always,
 *   "wrong": "hash" | "period"    which positions: a hash of the position
 *                                 (rejections at every offset) or pos % k,
 *   "block_size": B               at most B - 1 proposals a window,
 *   "taps": [layer ids]           taps it asks for (default [0]).
 * A stream follows the first sequence that agrees with every pending token
 * the lane has shown it at its position; the positions it absorbs must run
 * on from 0 without gaps, or absorb fails (so the tests see the lane hand
 * over exactly the kept rows). */
#include <stdlib.h>
#include <string.h>

#include <loom/plugin.h>

#define MAX_SEQS 64
#define MAX_TAPS 8

struct loom_drafter {
    int32_t vocab, hidden;
    int32_t n_seq;
    int32_t *len;
    int32_t **seq;
    int32_t wrong_every;
    int hash;
    int32_t block_size;
    int32_t n_taps;
    int32_t taps[MAX_TAPS];
};

struct loom_draft_stream {
    int32_t next_pos;    /* the next position absorb must bring */
    uint64_t candidates; /* sequences still agreeing with the stream */
};

static int has_arch(const loom_host *h, const loom_checkpoint *c,
                    const char *arch)
{
    const loom_json *a = h->json_get(h->config(c), "architectures");
    for (size_t i = 0; i < h->json_len(a); i++) {
        const char *s = h->json_str(h->json_at(a, i));
        if (s && strcmp(s, arch) == 0)
            return 1;
    }
    return 0;
}

static int32_t LOOM_ABI od_probe(const loom_host *h, const loom_checkpoint *c)
{
    return has_arch(h, c, "LoomOracleDrafter") ? 50 : 0;
}

static void LOOM_ABI od_close(loom_drafter *d)
{
    if (!d)
        return;
    for (int32_t i = 0; i < d->n_seq; i++)
        free(d->seq[i]);
    free(d->seq);
    free(d->len);
    free(d);
}

static loom_status read_config(const loom_host *h, const loom_json *cfg,
                               loom_drafter *d, loom_err *err)
{
    const loom_json *seqs = h->json_get(cfg, "sequences");
    size_t n = h->json_len(seqs);
    if (n == 0 || n > MAX_SEQS)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "oracle: config.json sequences: %zu (1..%d)", n,
                            MAX_SEQS);
    d->seq = (int32_t **)calloc(n, sizeof *d->seq);
    d->len = (int32_t *)calloc(n, sizeof *d->len);
    if (!d->seq || !d->len)
        return loom_err_set(err, LOOM_ERR_NOMEM, "oracle: out of memory");
    d->n_seq = (int32_t)n;
    for (size_t i = 0; i < n; i++) {
        const loom_json *s = h->json_at(seqs, i);
        size_t m = h->json_len(s);
        d->seq[i] = (int32_t *)malloc(sizeof(int32_t) * (m ? m : 1));
        if (!d->seq[i])
            return loom_err_set(err, LOOM_ERR_NOMEM, "oracle: out of memory");
        d->len[i] = (int32_t)m;
        for (size_t j = 0; j < m; j++) {
            int64_t t = h->json_int(h->json_at(s, j));
            if (t < 0 || t >= d->vocab)
                return loom_err_set(err, LOOM_ERR_RANGE,
                                    "oracle: sequences[%zu][%zu] = %lld is "
                                    "outside the target's vocabulary of %d",
                                    i, j, (long long)t, d->vocab);
            d->seq[i][j] = (int32_t)t;
        }
    }
    d->wrong_every = (int32_t)h->json_int(h->json_get(cfg, "wrong_every"));
    const char *mode = h->json_str(h->json_get(cfg, "wrong"));
    d->hash = !mode || strcmp(mode, "period") != 0;
    const loom_json *bs = h->json_get(cfg, "block_size");
    d->block_size = bs ? (int32_t)h->json_int(bs) : 16;
    if (d->wrong_every < 0 || d->block_size < 2)
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "oracle: wrong_every %d, block_size %d",
                            d->wrong_every, d->block_size);
    const loom_json *taps = h->json_get(cfg, "taps");
    if (!taps) {
        d->n_taps = 1;
        d->taps[0] = 0;
        return LOOM_OK;
    }
    size_t nt = h->json_len(taps);
    if (nt > MAX_TAPS)
        return loom_err_set(err, LOOM_ERR_RANGE, "oracle: %zu taps", nt);
    d->n_taps = (int32_t)nt;
    for (size_t i = 0; i < nt; i++)
        d->taps[i] = (int32_t)h->json_int(h->json_at(taps, i));
    return LOOM_OK;
}

static loom_status LOOM_ABI od_open(const loom_host *h,
                                    const loom_checkpoint *c,
                                    const loom_target *target,
                                    loom_drafter **out, loom_err *err)
{
    if (!target || target->struct_size < sizeof(loom_target) || !target->info)
        return loom_err_set(err, LOOM_ERR_INVALID, "oracle: no target");
    loom_drafter *d = (loom_drafter *)calloc(1, sizeof *d);
    if (!d)
        return loom_err_set(err, LOOM_ERR_NOMEM, "oracle: out of memory");
    d->vocab = target->info->vocab;
    d->hidden = target->info->hidden;
    loom_status rc = read_config(h, h->config(c), d, err);
    if (rc != LOOM_OK) {
        od_close(d);
        return rc;
    }
    *out = d;
    return LOOM_OK;
}

static void LOOM_ABI od_needs(const loom_drafter *d, loom_drafter_needs *req)
{
    req->n_taps = d->n_taps;
    req->taps = d->n_taps ? d->taps : NULL;
    req->block_size = d->block_size;
    req->mask_token = d->vocab - 1;
}

static loom_status LOOM_ABI od_stream_new(loom_drafter *d,
                                          loom_draft_stream **s, loom_err *err)
{
    *s = (loom_draft_stream *)calloc(1, sizeof **s);
    if (!*s)
        return loom_err_set(err, LOOM_ERR_NOMEM, "oracle: out of memory");
    (*s)->candidates =
        d->n_seq == 64 ? ~(uint64_t)0 : (((uint64_t)1 << d->n_seq) - 1);
    return LOOM_OK;
}

static void LOOM_ABI od_stream_free(loom_drafter *d, loom_draft_stream *s)
{
    (void)d;
    free(s);
}

static loom_status LOOM_ABI od_absorb(loom_drafter *d, loom_draft_stream *s,
                                      const loom_view *features,
                                      const int32_t *positions, int32_t n,
                                      loom_err *err)
{
    int64_t width = (int64_t)d->n_taps * d->hidden;
    if (d->n_taps > 0 &&
        (features->ndim != 2 || features->shape[0] != n ||
         features->shape[1] != width || !loom_view_row_f32(features, n - 1)))
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "oracle: features [%lld, %lld] for %d rows of "
                            "width %lld",
                            (long long)features->shape[0],
                            (long long)features->shape[1], n, (long long)width);
    for (int32_t i = 0; i < n; i++) {
        if (positions[i] != s->next_pos)
            return loom_err_set(err, LOOM_ERR_STATE,
                                "oracle: absorbed position %d, expected %d",
                                positions[i], s->next_pos);
        s->next_pos++;
    }
    return LOOM_OK;
}

static int wrong_at(const loom_drafter *d, int32_t pos)
{
    if (d->wrong_every == 0)
        return 0;
    if (!d->hash)
        return pos % d->wrong_every == 0;
    uint64_t x = (uint64_t)pos * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return x % (uint64_t)d->wrong_every == 0;
}

static loom_status LOOM_ABI od_draft(loom_drafter *d,
                                     loom_draft_stream *const *streams,
                                     const int32_t *last, int32_t n_streams,
                                     const loom_proposals *out, loom_err *err)
{
    if (out->struct_size < sizeof(loom_proposals))
        return loom_err_set(err, LOOM_ERR_ABI, "oracle: proposals of %u bytes",
                            out->struct_size);
    for (int32_t i = 0; i < n_streams; i++) {
        loom_draft_stream *s = streams[i];
        /* the pending token sits right after what was absorbed */
        int32_t p = s->next_pos;
        int32_t follow = -1;
        for (int32_t q = 0; q < d->n_seq; q++) {
            if (!(s->candidates >> q & 1))
                continue;
            if (p >= d->len[q] || d->seq[q][p] != last[i])
                s->candidates &= ~((uint64_t)1 << q);
            else if (follow < 0)
                follow = q;
        }
        int32_t n = 0;
        for (; follow >= 0 && n < out->max && n < d->block_size - 1; n++) {
            int32_t at = p + 1 + n;
            if (at >= d->len[follow])
                break;
            int32_t t = d->seq[follow][at];
            out->tokens[i * out->max + n] =
                wrong_at(d, at) ? (t + 1) % d->vocab : t;
            out->parents[i * out->max + n] = -1;
        }
        out->n_out[i] = n;
    }
    return LOOM_OK;
}

static const loom_drafter_i oracle_drafter = {
    .struct_size = sizeof(loom_drafter_i),
    .geometry = NULL,
    .open = od_open,
    .close = od_close,
    .needs = od_needs,
    .stream_new = od_stream_new,
    .stream_free = od_stream_free,
    .absorb = od_absorb,
    .draft = od_draft,
};

static const void *LOOM_ABI od_get_interface(const char *id)
{
    return strcmp(id, LOOM_DRAFTER_ID) == 0 ? &oracle_drafter : NULL;
}

static const loom_plugin oracle_plugin = {
    LOOM_ABI_MAJOR,
    LOOM_ABI_MINOR,
    sizeof(loom_plugin),
    "tp-oracle",
    "0.1.0",
    LOOM_PLUGIN_DRAFTER,
    "speculation tests: proposes a known continuation, some of it wrong",
    od_probe,
    od_get_interface,
};

LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void)
{
    return &oracle_plugin;
}
