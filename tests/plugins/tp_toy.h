/* The toy family's body, shared by the toy plugin (tp_toy_family.c) and its
 * ABI variants (tp_toy_old.c, tp_toy_new.c, tp_toy_bare.c), each of which
 * includes it once and builds its own vtable and descriptor from it.
 *
 * A deterministic family for testing the lane: no weights, logits in closed
 * form from a hash of the stream's whole history (every token and its
 * position), so a lane that feeds a stream's tokens out of order, twice, to
 * the wrong cache or at the wrong position changes what it generates. It
 * claims only config.json with architectures ["LoomToyForTest"].
 *
 * config.json fields: vocab_size (64), eos_token_id (int or list; 63),
 * max_position_embeddings (4096), toy_eos_at (the eos logit jumps to the
 * top from this position on; 0: never), toy_fail_token (a round holding a
 * row with this token fails; -1: never). It reports the eos ids the SDK
 * merges from config.json and generation_config.json (loom_cfg_eos_ids).
 * Its model offers one extension, TOY_EXT_ID, for the dispatcher tests.
 * Errors do not name the plugin: the core's dispatcher prefixes them. */
#ifndef TP_TOY_H
#define TP_TOY_H

/* a variant leaves out the optional members it tests */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

#include <string.h>
#include <stdlib.h>

#include <loom/config.h>
#include <loom/plugin.h>

#define TOY_MAGIC 0x746f7931u

typedef struct toy_model {
    const loom_host *host;
    int32_t vocab;
    int32_t n_eos; /* config.json's: their logits are shaped */
    int32_t eos[LOOM_MAX_EOS];
    int32_t n_stop_ids; /* reported: the SDK's merge with generation_config */
    int32_t stop_ids[LOOM_MAX_EOS];
    int64_t max_context;
    int32_t max_rows;
    int32_t eos_at;
    int32_t fail_token;
} toy_model;

struct loom_cache {
    uint32_t magic;
    const toy_model *model;
    uint64_t h;  /* hash of (token, position) of every row fed */
    int32_t len; /* rows fed */
};

static uint64_t toy_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static uint64_t toy_feed(uint64_t h, int32_t token, int32_t position)
{
    return toy_mix(
        h ^ toy_mix(((uint64_t)(uint32_t)token << 32) | (uint32_t)position));
}

/* Logits after a row: in [-4, 4) from the history hash, eos pushed down
 * (or to the top from toy_eos_at on). */
static void toy_logits(const toy_model *m, uint64_t h, int32_t position,
                       float *out)
{
    for (int32_t v = 0; v < m->vocab; v++) {
        uint64_t r = toy_mix(h + 0x9E3779B97F4A7C15ull * (uint64_t)(v + 1));
        out[v] = (float)((double)(r >> 40) / 16777216.0 * 8.0 - 4.0);
    }
    for (int32_t i = 0; i < m->n_eos; i++) {
        int32_t e = m->eos[i];
        if (e >= 0 && e < m->vocab)
            out[e] =
                (m->eos_at > 0 && position + 1 >= m->eos_at) ? 20.0f : -6.0f;
    }
}

static int64_t cfg_int(const loom_host *h, const loom_json *cfg,
                       const char *key, int64_t dflt)
{
    const loom_json *v = h->json_get(cfg, key);
    loom_json_type t = h->json_type(v);
    return (t == LOOM_JSON_INT || t == LOOM_JSON_REAL) ? h->json_int(v) : dflt;
}

static loom_status LOOM_ABI toy_geometry(const loom_host *h,
                                         const loom_checkpoint *c,
                                         const loom_fields *out, loom_err *err)
{
    const loom_json *cfg = h->text_config(c);
    int64_t vocab = cfg_int(h, cfg, "vocab_size", 64);
    if (vocab <= 0 || vocab > (1 << 24))
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "config.json: vocab_size %lld", (long long)vocab);
    out->i64(out->ctx, "vocab_size", vocab);
    out->str(out->ctx, "kind", "toy");
    return LOOM_OK;
}

static loom_status LOOM_ABI toy_open(const loom_host *h,
                                     const loom_checkpoint *c,
                                     const loom_model_options *o,
                                     loom_model **out, loom_err *err)
{
    const loom_json *cfg = h->text_config(c);
    toy_model m = {0};
    m.host = h;
    m.vocab = (int32_t)cfg_int(h, cfg, "vocab_size", 64);
    if (m.vocab <= 0 || m.vocab > (1 << 24))
        return loom_err_set(err, LOOM_ERR_FORMAT, "config.json: vocab_size %d",
                            m.vocab);
    const loom_json *eos = h->json_get(cfg, "eos_token_id");
    if (h->json_type(eos) == LOOM_JSON_ARRAY) {
        for (size_t i = 0; i < h->json_len(eos) && m.n_eos < LOOM_MAX_EOS; i++)
            m.eos[m.n_eos++] = (int32_t)h->json_int(h->json_at(eos, i));
    } else if (h->json_type(eos) == LOOM_JSON_INT) {
        m.eos[m.n_eos++] = (int32_t)h->json_int(eos);
    } else {
        m.eos[m.n_eos++] = m.vocab - 1;
    }
    loom_cfg_eos_ids(h, c, m.vocab, m.stop_ids, &m.n_stop_ids);
    if (m.n_stop_ids == 0)
        m.stop_ids[m.n_stop_ids++] = m.vocab - 1;
    m.max_context = cfg_int(h, cfg, "max_position_embeddings", 4096);
    if (o->max_context > 0 && o->max_context < m.max_context)
        m.max_context = o->max_context;
    m.max_rows = o->max_rows > 0 ? o->max_rows : 512;
    m.eos_at = (int32_t)cfg_int(h, cfg, "toy_eos_at", 0);
    m.fail_token = (int32_t)cfg_int(h, cfg, "toy_fail_token", -1);
    toy_model *pm = (toy_model *)malloc(sizeof *pm);
    if (!pm)
        return loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
    *pm = m;
    *out = (loom_model *)pm;
    return LOOM_OK;
}

static void LOOM_ABI toy_close(loom_model *model)
{
    free(model);
}

static void LOOM_ABI toy_describe(const loom_model *model,
                                  loom_model_info *info)
{
    const toy_model *m = (const toy_model *)model;
    info->vocab = m->vocab;
    info->hidden = 8;
    info->n_layers = 1;
    info->n_eos = m->n_stop_ids;
    for (int32_t i = 0; i < m->n_stop_ids; i++)
        info->eos[i] = m->stop_ids[i];
    info->max_context = m->max_context;
    info->layer_kinds = "-";
    info->cache_bytes_fixed = sizeof(struct loom_cache);
    info->cache_bytes_per_token = 0;
    info->max_rows = m->max_rows;
    info->caps = 0;
    info->device = LOOM_DEVICE_CPU;
    info->compute_dtype = LOOM_DTYPE_F32;
}

static loom_status LOOM_ABI toy_cache_new(loom_model *model, loom_cache **out,
                                          loom_err *err)
{
    toy_model *m = (toy_model *)model;
    loom_cache *c = (loom_cache *)calloc(1, sizeof *c);
    if (!c)
        return loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
    c->magic = TOY_MAGIC;
    c->model = m;
    /* the accounting lets tests see caches that were never freed */
    loom_status rc = m->host->account(m->host, LOOM_MEM_HOST, LOOM_MEM_CACHE,
                                      (int64_t)sizeof *c, err);
    if (rc != LOOM_OK) {
        free(c);
        return rc;
    }
    *out = c;
    return LOOM_OK;
}

static void LOOM_ABI toy_cache_reset(loom_model *model, loom_cache *c)
{
    (void)model;
    c->h = 0;
    c->len = 0;
}

static void LOOM_ABI toy_cache_free(loom_model *model, loom_cache *c)
{
    toy_model *m = (toy_model *)model;
    if (!c)
        return;
    c->magic = 0;
    m->host->account(m->host, LOOM_MEM_HOST, LOOM_MEM_CACHE,
                     -(int64_t)sizeof *c, NULL);
    free(c);
}

/* dst takes src's history: the same rows after either give the same
 * logits. The toy has no windows, so nothing is ever refused. */
static loom_status LOOM_ABI toy_cache_copy(loom_model *model, loom_cache *dst,
                                           const loom_cache *src, loom_err *err)
{
    toy_model *m = (toy_model *)model;
    if (!dst || !src || dst->magic != TOY_MAGIC || src->magic != TOY_MAGIC ||
        dst->model != m || src->model != m)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "cache_copy: not caches of this model");
    dst->h = src->h;
    dst->len = src->len;
    return LOOM_OK;
}

static loom_status LOOM_ABI toy_forward(loom_model *model,
                                        const loom_round *round,
                                        const loom_output *out, loom_err *err)
{
    toy_model *m = (toy_model *)model;
    /* the round and its rows may be bigger than this plugin knows (a newer
     * lane), never smaller than 2.0's */
    if (round->struct_size < sizeof(loom_round) ||
        round->row_size < sizeof(loom_row) ||
        (out && out->struct_size < sizeof(loom_output)))
        return loom_err_set(
            err, LOOM_ERR_ABI, "round %u bytes, rows %u bytes, output %u bytes",
            round->struct_size, round->row_size, out ? out->struct_size : 0u);
    if (round->n_rows <= 0 || round->n_rows > m->max_rows)
        return loom_err_set(err, LOOM_ERR_RANGE, "%d rows (max %d)",
                            round->n_rows, m->max_rows);
    /* check every row before touching a cache: a failed forward changes
     * nothing */
    int32_t n_logits = 0;
    for (int32_t r = 0; r < round->n_rows; r++) {
        const loom_row *row = loom_round_row(round, r);
        if (!row->cache || row->cache->magic != TOY_MAGIC ||
            row->cache->model != m)
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "row %d: not a cache of this model", r);
        if (row->token < 0 || row->token >= m->vocab)
            return loom_err_set(err, LOOM_ERR_RANGE, "row %d: token %d", r,
                                row->token);
        if (row->parent != -1)
            return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                                "row %d: parent %d (no trees)", r, row->parent);
        if (row->token == m->fail_token)
            return loom_err_set(err, LOOM_ERR_DEVICE,
                                "row %d: token %d fails on purpose", r,
                                row->token);
        int32_t before = 0; /* earlier rows of the same cache */
        for (int32_t q = 0; q < r; q++)
            if (loom_round_row(round, q)->cache == row->cache)
                before++;
        if (row->position != row->cache->len + before)
            return loom_err_set(err, LOOM_ERR_STATE,
                                "row %d: position %d, cache holds %d "
                                "(+%d earlier rows)",
                                r, row->position, row->cache->len, before);
        if ((int64_t)row->position >= m->max_context)
            return loom_err_set(err, LOOM_ERR_RANGE,
                                "row %d: position %d past context %lld", r,
                                row->position, (long long)m->max_context);
        if (row->flags & LOOM_ROW_SPECULATIVE)
            return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                                "row %d: a window row (no windows)", r);
        if (row->flags & LOOM_ROW_LOGITS)
            n_logits++;
    }
    /* logits go to a dense host float32 view of [n_logits, vocab] */
    if (n_logits > 0 &&
        (!out || !loom_view_row_f32(&out->logits, n_logits - 1) ||
         out->logits.ndim != 2 || out->logits.shape[1] != m->vocab ||
         out->logits.strides[1] != 1))
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%d rows ask for logits, the output has no host "
                            "float32 [%d, %d] view",
                            n_logits, n_logits, m->vocab);
    int32_t k = 0;
    for (int32_t r = 0; r < round->n_rows; r++) {
        const loom_row *row = loom_round_row(round, r);
        loom_cache *c = row->cache;
        c->h = toy_feed(c->h, row->token, row->position);
        c->len++;
        if (row->flags & LOOM_ROW_LOGITS) {
            toy_logits(m, c->h, row->position,
                       loom_view_row_f32(&out->logits, k));
            k++;
        }
    }
    return LOOM_OK;
}

static loom_status LOOM_ABI toy_commit(loom_model *model, loom_cache *cache,
                                       int32_t kept, loom_err *err)
{
    (void)model;
    (void)cache;
    (void)kept;
    /* the toy never makes windows, so no cache ever has one to commit */
    return loom_err_set(err, LOOM_ERR_STATE, "the cache has no window");
}

/* The toy's one extension: what the dispatcher's get_extension tests find. */
#define TOY_EXT_ID "tp.toy/1"

typedef struct toy_ext_i {
    uint32_t struct_size;
    int32_t (*vocab)(const loom_model *model);
} toy_ext_i;

static int32_t toy_ext_vocab(const loom_model *model)
{
    return ((const toy_model *)model)->vocab;
}

static const toy_ext_i toy_ext = {sizeof(toy_ext_i), toy_ext_vocab};

static const void *LOOM_ABI toy_get_extension(const loom_model *model,
                                              const char *id)
{
    (void)model;
    return strcmp(id, TOY_EXT_ID) == 0 ? &toy_ext : NULL;
}

/* Claims config.json naming `arch` with `score`. */
static int32_t toy_probe_arch(const loom_host *h, const loom_checkpoint *c,
                              const char *arch, int32_t score)
{
    const loom_json *a = h->json_get(h->config(c), "architectures");
    for (size_t i = 0; i < h->json_len(a); i++) {
        const char *s = h->json_str(h->json_at(a, i));
        if (s && strcmp(s, arch) == 0)
            return score;
    }
    return 0;
}

#endif
