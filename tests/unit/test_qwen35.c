/* The qwen35 family plugin through the engine API, against transformers'
 * reference outputs (tests/fixtures/models/qwen35-*): logits, greedy
 * decoding through the cache, chunked prompts, several streams per round,
 * speculative windows with commit under the one window rule, the
 * loom.target/1 extension (taps, embed, head), and the refusals of broken
 * checkpoints
 * (made in a temporary directory by rewriting config.json and the
 * safetensors file). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <loom/checkpoint.h>
#include <loom/cpu_ops.h>
#include <loom/engine.h>
#include <loom/platform.h>
#include <loom/safetensors.h>

#include "st_write.h"
#include "testmodel.h"
#include "variants.h"
#include "testutil.h"

/* ---------------------------------------------------------------- helpers */

/* Feeds ids[0..n) at positions from the cache's length, `chunk` rows per
 * forward, each row flagged `flags`; logits of every row into out (may be
 * NULL when flags lack LOOM_ROW_LOGITS). */
static loom_status feed(loom_engine *e, loom_cache *c, int32_t pos0,
                        const int32_t *ids, int32_t n, int32_t chunk,
                        uint32_t flags, float *out, loom_err *err)
{
    loom_row rows[64];
    ck_assert_int_le(chunk, 64);
    for (int32_t p = 0; p < n; p += chunk) {
        int32_t k = n - p < chunk ? n - p : chunk;
        for (int32_t i = 0; i < k; i++)
            rows[i] = (loom_row){c, ids[p + i], pos0 + p + i, -1, flags};
        loom_status st = tm_forward(
            e, rows, k, out ? out + (size_t)p * e->info.vocab : NULL, err);
        if (st != LOOM_OK)
            return st;
    }
    return LOOM_OK;
}

static void feed_ok(loom_engine *e, loom_cache *c, int32_t pos0,
                    const int32_t *ids, int32_t n, int32_t chunk,
                    uint32_t flags, float *out)
{
    loom_err err = {{0}};
    loom_status st = feed(e, c, pos0, ids, n, chunk, flags, out, &err);
    ck_assert_msg(st == LOOM_OK, "forward: %s", err.msg);
}

/* ---------------------------------------------------------------- reference */

static void check_reference(const char *model)
{
    tm_golden g;
    tm_read_golden(model, 1, &g);
    loom_engine *e = tm_open_ok(fixture(model), "qwen35");
    ck_assert_int_eq(e->info.vocab, g.vocab);
    float *lg = malloc((size_t)g.n_prompt * g.vocab * sizeof(float));
    loom_cache *c = tm_new_cache(e);
    feed_ok(e, c, 0, g.prompt, g.n_prompt, g.n_prompt, LOOM_ROW_LOGITS, lg);
    /* every prompt position within 1e-4 of transformers */
    for (int32_t t = 0; t < g.n_prompt; t++) {
        double r = rel_err(lg + (size_t)t * g.vocab,
                           g.logits + (size_t)t * g.vocab, (size_t)g.vocab);
        ck_assert_msg(r < 1e-4, "%s position %d: relative error %g", model, t,
                      r);
    }
    /* greedy decoding through the cache, one row per forward */
    tm_check_greedy(model, e, c, &g, lg + (size_t)(g.n_prompt - 1) * g.vocab);
    tm_cache_free(e, c);
    free(lg);
    free(g.logits);
    loom_engine_close(e);
}

START_TEST(reference_tiny)
{
    check_reference("models/qwen35-tiny");
}
END_TEST

START_TEST(reference_vl_tiny)
{
    check_reference("models/qwen35-vl-tiny");
}
END_TEST

START_TEST(reference_ref2)
{
    check_reference("models/qwen35-ref2");
}
END_TEST

/* ---------------------------------------------------------------- describe */

typedef struct fields {
    int64_t rot_dim, n_kv, eos_count;
    double prf;
    char kinds[64];
} fields;

static void LOOM_ABI f_i64(void *ctx, const char *k, int64_t v)
{
    fields *f = ctx;
    if (!strcmp(k, "rotary_dim"))
        f->rot_dim = v;
    if (!strcmp(k, "num_key_value_heads"))
        f->n_kv = v;
    if (!strcmp(k, "eos_token_id"))
        f->eos_count++;
}

static void LOOM_ABI f_f64(void *ctx, const char *k, double v)
{
    fields *f = ctx;
    if (!strcmp(k, "partial_rotary_factor"))
        f->prf = v;
}

static void LOOM_ABI f_str(void *ctx, const char *k, const char *v)
{
    fields *f = ctx;
    if (!strcmp(k, "layer_kinds"))
        snprintf(f->kinds, sizeof f->kinds, "%s", v);
}

START_TEST(describe_and_geometry)
{
    loom_engine *e = tm_open_ok(fixture("models/qwen35-tiny"), "qwen35");
    ck_assert_int_eq(e->info.vocab, 512);
    ck_assert_int_eq(e->info.hidden, 64);
    ck_assert_int_eq(e->info.n_layers, 4);
    ck_assert_str_eq(e->info.layer_kinds, "LLLA");
    ck_assert_int_eq(e->info.n_eos, 1);
    ck_assert_int_eq(e->info.eos[0], 1);
    ck_assert_uint_eq(e->info.caps, LOOM_CAP_WINDOWS | LOOM_CAP_TAPS);
    ck_assert_int_eq(e->info.max_context, 4096);
    /* 3 GDN layers: tail 3 x (2*32 + 64) + state 4 x 16 x 16 floats */
    ck_assert_uint_eq(e->info.cache_bytes_fixed,
                      3u * (3u * 128u + 4u * 16u * 16u) * 4u);
    /* 1 attention layer: K and V of 2 heads x 32 */
    ck_assert_uint_eq(e->info.cache_bytes_per_token, 2u * 64u * 4u);
    loom_engine_close(e);

    /* ref2: partial_rotary_factor 0.5 inside rope_parameters wins over the
     * top-level 0.25; eos from a list */
    e = tm_open_ok(fixture("models/qwen35-ref2"), "qwen35");
    ck_assert_str_eq(e->info.layer_kinds, "ALLAL");
    ck_assert_int_eq(e->info.n_eos, 2);
    ck_assert_int_eq(e->info.eos[1], 2);
    fields f;
    memset(&f, 0, sizeof f);
    loom_fields out = {sizeof out, &f, f_i64, f_f64, f_str};
    loom_err err = {{0}};
    ck_assert_int_eq(
        loom_family_geometry(&e->family, &e->hs.host, e->ckpt, &out, &err),
        LOOM_OK);
    ck_assert_int_eq(f.rot_dim, 32);
    ck_assert_double_eq(f.prf, 0.5);
    ck_assert_int_eq(f.n_kv, 2);
    ck_assert_str_eq(f.kinds, "ALLAL");
    loom_engine_close(e);

    /* vl-tiny: nested text_config, tied head */
    e = tm_open_ok(fixture("models/qwen35-vl-tiny"), "qwen35");
    ck_assert_str_eq(e->info.layer_kinds, "LLALLA");
    loom_engine_close(e);
}
END_TEST

/* Layer outputs for a drafter, chosen after open through loom.target/1:
 * the last layer's tap, put through the final norm, is transformers' final
 * hidden state (hidden.f32). */
START_TEST(taps)
{
    const char *t = "models/qwen35-tiny";
    tm_golden g;
    tm_read_golden(t, 1, &g);
    loom_engine *e = tm_open_ok(fixture(t), "qwen35");
    const loom_target_i *tg = tm_target(e);
    int64_t H = e->info.hidden, T = g.n_prompt;
    loom_err err = {{0}};
    int32_t layers[2] = {3, 0};
    ck_assert_msg(tg->set_taps(e->model, layers, 2, &err) == LOOM_OK, "%s",
                  err.msg);
    layers[0] = 1; /* the ids were copied */
    loom_cache *c = tm_new_cache(e);
    float *taps = malloc((size_t)(T * 2 * H) * sizeof(float));
    float *lg = malloc((size_t)(T * g.vocab) * sizeof(float));
    loom_row rows[64];
    for (int32_t i = 0; i < T; i++)
        rows[i] =
            (loom_row){c, g.prompt[i], i, -1, LOOM_ROW_TAP | LOOM_ROW_LOGITS};
    ck_assert_int_eq(tm_forward(e, rows, (int32_t)T, lg, &err),
                     LOOM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "taps"));
    ck_assert_msg(tm_forward_taps(e, rows, (int32_t)T, lg, taps, 2 * H, &err) ==
                      LOOM_OK,
                  "%s", err.msg);
    /* the final norm of the model, read from the file: (1 + w) */
    loom_st *st = NULL;
    ck_assert_int_eq(loom_st_open_dir(fixture(t), &st, &err), LOOM_OK);
    const loom_tensor *nw = loom_st_find(st, "model.norm.weight");
    ck_assert_ptr_nonnull(nw);
    size_t n = 0;
    char path[1024];
    snprintf(path, sizeof path, "%s/hidden.f32", fixture(t));
    float *ref = read_f32(path, &n);
    ck_assert_uint_eq(n, (size_t)(T * H));
    float *got = malloc((size_t)(T * H) * sizeof(float));
    for (int64_t i = 0; i < T; i++) {
        const float *x = taps + (i * 2 + 0) * H; /* slot 0: layer 3 */
        double ss = 0;
        for (int64_t d = 0; d < H; d++)
            ss += (double)x[d] * x[d];
        double inv = 1.0 / sqrt(ss / (double)H + 1e-6);
        for (int64_t d = 0; d < H; d++)
            got[i * H + d] =
                (float)(x[d] * inv *
                        (1.0 +
                         loom_bf16_to_f32(((const uint16_t *)nw->data)[d])));
    }
    double d = rel_err(got, ref, (size_t)(T * H));
    ck_assert_msg(d < 1e-4, "final hidden from the layer-3 tap: %g", d);
    /* slot 1 holds layer 0's output, which differs from layer 3's */
    ck_assert(memcmp(taps + H, taps, (size_t)H * sizeof(float)) != 0);
    loom_st_close(st);
    /* a tap outside the model is refused, and the taps stay as they were */
    layers[0] = 3;
    layers[1] = 4;
    ck_assert_int_eq(tg->set_taps(e->model, layers, 2, &err), LOOM_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "tapped layer 4"));
    ck_assert_int_eq(tg->set_taps(e->model, NULL, 1, &err), LOOM_ERR_INVALID);
    tm_cache_reset(e, &c);
    ck_assert_int_eq(tm_forward(e, rows, 1, lg, &err), LOOM_ERR_INVALID);
    /* no taps: rows flagged LOOM_ROW_TAP need no view */
    ck_assert_int_eq(tg->set_taps(e->model, NULL, 0, &err), LOOM_OK);
    ck_assert_msg(tm_forward(e, rows, 1, lg, &err) == LOOM_OK, "%s", err.msg);
    tm_cache_free(e, c);
    free(got);
    free(ref);
    free(taps);
    free(lg);
    free(g.logits);
    loom_engine_close(e);
}
END_TEST

/* loom.target/1's embed and head against the model itself and its files,
 * on every fixture; and a newer lane's wider rows give the same logits. */
START_TEST(target_tiny)
{
    tm_check_target("models/qwen35-tiny", "qwen35",
                    "model.embed_tokens.weight");
    tm_check_row_size("models/qwen35-tiny", "qwen35");
    tm_check_struct_sizes("models/qwen35-tiny", "qwen35");
    tm_check_cache_budget("models/qwen35-tiny", "qwen35");
}
END_TEST

START_TEST(target_vl_tiny)
{
    tm_check_target("models/qwen35-vl-tiny", "qwen35",
                    "model.language_model.embed_tokens.weight");
}
END_TEST

START_TEST(target_ref2)
{
    tm_check_target("models/qwen35-ref2", "qwen35",
                    "model.embed_tokens.weight");
}
END_TEST

/* ---------------------------------------------------------------- rounds */

/* ---------------------------------------------------------------- prompt
 * kernel */

/* The prompt kernels against the decode kernels: tm_check_prompt_chunk. */
START_TEST(prompt_chunk_kernels)
{
    tm_check_prompt_chunk("models/qwen35-tiny", "qwen35");
    tm_check_prompt_chunk("models/qwen35-ref2", "qwen35");
    tm_check_prompt_chunk("models/qwen35-vl-tiny", "qwen35");
    tm_check_prompt_chunk("models/qwen35-moe-tiny", "qwen35");
}
END_TEST

START_TEST(chunked_prompt)
{
    tm_golden g;
    tm_read_golden("models/qwen35-tiny", 1, &g);
    loom_engine *e = tm_open_ok(fixture("models/qwen35-tiny"), "qwen35");
    size_t n = (size_t)g.n_prompt * g.vocab;
    float *all = malloc(n * sizeof(float)), *part = malloc(n * sizeof(float));
    loom_cache *c = tm_new_cache(e);
    feed_ok(e, c, 0, g.prompt, g.n_prompt, g.n_prompt, LOOM_ROW_LOGITS, all);
    int32_t chunks[2] = {1, 3};
    for (int i = 0; i < 2; i++) {
        /* cache_reset makes the cache reusable from position 0 */
        tm_cache_reset(e, &c);
        feed_ok(e, c, 0, g.prompt, g.n_prompt, chunks[i], LOOM_ROW_LOGITS,
                part);
        double r = rel_err(part, all, n);
        ck_assert_msg(r <= 1e-5, "chunk %d: %g", chunks[i], r);
    }
    tm_cache_free(e, c);
    free(all);
    free(part);
    free(g.logits);
    loom_engine_close(e);
}
END_TEST

START_TEST(two_streams)
{
    tm_golden g;
    tm_read_golden("models/qwen35-vl-tiny", 1, &g);
    loom_engine *e = tm_open_ok(fixture("models/qwen35-vl-tiny"), "qwen35");
    int32_t V = g.vocab, n = 10, m = 7;
    const int32_t *a = g.prompt, *b = g.prompt + 12; /* two different prompts */
    float *la = malloc((size_t)(n + 1) * V * sizeof(float));
    float *lb = malloc((size_t)(m + 1) * V * sizeof(float));
    float *both = malloc((size_t)(n + m + 2) * V * sizeof(float));
    /* alone */
    loom_cache *c = tm_new_cache(e);
    feed_ok(e, c, 0, a, n, n, LOOM_ROW_LOGITS, la);
    feed_ok(e, c, n, &b[0], 1, 1, LOOM_ROW_LOGITS, la + (size_t)n * V);
    tm_cache_reset(e, &c);
    feed_ok(e, c, 0, b, m, m, LOOM_ROW_LOGITS, lb);
    feed_ok(e, c, m, &a[0], 1, 1, LOOM_ROW_LOGITS, lb + (size_t)m * V);
    tm_cache_free(e, c);
    /* together: the prompts' rows interleaved in one round, then one decode
     * round with a row of each (b's row first) */
    loom_cache *ca = tm_new_cache(e), *cb = tm_new_cache(e);
    loom_row rows[32];
    int32_t k = 0, ia = 0, ib = 0;
    int32_t order[32]; /* 0: a, 1: b, in round order */
    while (ia < n || ib < m) {
        if (ia < n) {
            rows[k] = (loom_row){ca, a[ia], ia, -1, LOOM_ROW_LOGITS};
            order[k++] = ia++;
        }
        if (ib < m) {
            rows[k] = (loom_row){cb, b[ib], ib, -1, LOOM_ROW_LOGITS};
            order[k++] = 100 + ib++;
        }
    }
    loom_err err = {{0}};
    ck_assert_msg(tm_forward(e, rows, k, both, &err) == LOOM_OK, "%s", err.msg);
    for (int32_t i = 0; i < k; i++) {
        const float *want = order[i] < 100 ? la + (size_t)order[i] * V
                                           : lb + (size_t)(order[i] - 100) * V;
        double d = rel_err(both + (size_t)i * V, want, (size_t)V);
        ck_assert_msg(d <= 1e-6, "round row %d: %g", i, d);
    }
    loom_row dec[2] = {{cb, a[0], m, -1, LOOM_ROW_LOGITS},
                       {ca, b[0], n, -1, LOOM_ROW_LOGITS}};
    ck_assert_int_eq(tm_forward(e, dec, 2, both, &err), LOOM_OK);
    ck_assert_double_le(rel_err(both, lb + (size_t)m * V, (size_t)V), 1e-6);
    ck_assert_double_le(rel_err(both + V, la + (size_t)n * V, (size_t)V), 1e-6);
    tm_cache_free(e, ca);
    tm_cache_free(e, cb);
    free(la);
    free(lb);
    free(both);
    free(g.logits);
    loom_engine_close(e);
}
END_TEST

/* A window of k speculative rows, commit(j), then one more row, against
 * feeding only the j rows: the next row's logits must be bit for bit equal.
 * `plain` rows of the window's forward come before the speculative ones. */
static void check_commit(const char *model, int32_t plain, int32_t k, int32_t j)
{
    tm_golden g;
    tm_read_golden(model, 1, &g);
    loom_engine *e = tm_open_ok(fixture(model), "qwen35");
    int32_t V = g.vocab, p = 8;
    const int32_t *win = g.prompt + p; /* plain rows, then the window */
    int32_t next = g.prompt[p + plain + k];
    float *l1 = malloc((size_t)V * sizeof(float));
    float *l2 = malloc((size_t)V * sizeof(float));
    float *scratch = malloc((size_t)(plain + k) * V * sizeof(float));
    loom_err err = {{0}};

    loom_cache *c = tm_new_cache(e);
    feed_ok(e, c, 0, g.prompt, p, p, 0, NULL);
    loom_row rows[32];
    for (int32_t i = 0; i < plain + k; i++)
        rows[i] = (loom_row){c, win[i], p + i, -1,
                             LOOM_ROW_LOGITS |
                                 (i >= plain ? LOOM_ROW_SPECULATIVE : 0u)};
    ck_assert_int_eq(tm_forward(e, rows, plain + k, scratch, &err), LOOM_OK);
    ck_assert_msg(tm_commit(e, c, j, &err) == LOOM_OK, "%s", err.msg);
    feed_ok(e, c, p + plain + j, &next, 1, 1, LOOM_ROW_LOGITS, l1);

    tm_cache_reset(e, &c);
    feed_ok(e, c, 0, g.prompt, p, p, 0, NULL);
    if (plain + j > 0)
        feed_ok(e, c, p, win, plain + j, plain + j, 0, NULL);
    feed_ok(e, c, p + plain + j, &next, 1, 1, LOOM_ROW_LOGITS, l2);
    ck_assert_msg(memcmp(l1, l2, (size_t)V * sizeof(float)) == 0,
                  "%s: commit(%d) of %d after %d plain rows differs by %g",
                  model, j, k, plain, rel_err(l1, l2, (size_t)V));
    tm_cache_free(e, c);
    free(l1);
    free(l2);
    free(scratch);
    free(g.logits);
    loom_engine_close(e);
}

START_TEST(commit_windows)
{
    check_commit("models/qwen35-tiny", 0, 4, 0);
    check_commit("models/qwen35-tiny", 0, 4, 2);
    check_commit("models/qwen35-tiny", 0, 4, 4);
    check_commit("models/qwen35-tiny", 0, 5, 1);
    check_commit("models/qwen35-tiny", 3, 4, 2); /* plain rows first */
    check_commit("models/qwen35-ref2", 0, 6, 3);
    check_commit("models/qwen35-vl-tiny", 2, 3, 1);
}
END_TEST

START_TEST(commit_errors_and_repeats)
{
    tm_golden g;
    tm_read_golden("models/qwen35-tiny", 1, &g);
    loom_engine *e = tm_open_ok(fixture("models/qwen35-tiny"), "qwen35");
    int32_t V = g.vocab;
    loom_err err = {{0}};
    loom_cache *c = tm_new_cache(e);
    float *l1 = malloc((size_t)V * 2 * sizeof(float));
    float *l2 = malloc((size_t)V * 16 * sizeof(float));
    feed_ok(e, c, 0, g.prompt, 6, 6, 0, NULL);
    /* no window yet: a commit is out of turn, commit(0) too */
    ck_assert_int_eq(tm_commit(e, c, 1, &err), LOOM_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(err.msg, "no window"));
    ck_assert_int_eq(tm_commit(e, c, 0, &err), LOOM_ERR_STATE);
    /* two windows in a row, each partly kept */
    feed_ok(e, c, 6, g.prompt + 6, 3, 3, LOOM_ROW_SPECULATIVE, NULL);
    ck_assert_int_eq(tm_commit(e, c, 4, &err), LOOM_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "kept = 4"));
    ck_assert_int_eq(tm_commit(e, c, 1, &err), LOOM_OK);
    feed_ok(e, c, 7, g.prompt + 7, 4, 4, LOOM_ROW_SPECULATIVE, NULL);
    ck_assert_int_eq(tm_commit(e, c, 2, &err), LOOM_OK);
    /* the one window rule: a second window before the commit is refused
     * and changes nothing */
    feed_ok(e, c, 9, g.prompt + 9, 2, 2, LOOM_ROW_SPECULATIVE, NULL);
    ck_assert_int_eq(
        feed(e, c, 11, g.prompt + 11, 2, 2, LOOM_ROW_SPECULATIVE, NULL, &err),
        LOOM_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(err.msg, "not committed"));
    ck_assert_int_eq(tm_commit(e, c, 1, &err), LOOM_OK);
    feed_ok(e, c, 10, g.prompt + 10, 2, 2, LOOM_ROW_SPECULATIVE, NULL);
    ck_assert_int_eq(tm_commit(e, c, 2, &err), LOOM_OK);
    feed_ok(e, c, 12, g.prompt + 12, 1, 1, LOOM_ROW_LOGITS, l1);
    /* plain rows after an uncommitted window are refused too */
    feed_ok(e, c, 13, g.prompt + 13, 2, 2, LOOM_ROW_SPECULATIVE, NULL);
    ck_assert_int_eq(
        feed(e, c, 15, g.prompt + 15, 1, 1, LOOM_ROW_LOGITS, l1 + V, &err),
        LOOM_ERR_STATE);
    ck_assert_int_eq(tm_commit(e, c, 2, &err), LOOM_OK);
    feed_ok(e, c, 15, g.prompt + 15, 1, 1, LOOM_ROW_LOGITS, l1 + V);
    ck_assert_int_eq(tm_commit(e, c, 0, &err), LOOM_ERR_STATE);

    tm_cache_reset(e, &c);
    feed_ok(e, c, 0, g.prompt, 16, 16, LOOM_ROW_LOGITS, l2);
    ck_assert_int_eq(memcmp(l1, l2 + (size_t)12 * V, (size_t)V * 4), 0);
    ck_assert_int_eq(memcmp(l1 + V, l2 + (size_t)15 * V, (size_t)V * 4), 0);
    tm_cache_free(e, c);
    free(l1);
    free(l2);
    free(g.logits);
    loom_engine_close(e);
}
END_TEST

START_TEST(forward_refusals)
{
    tm_golden g;
    tm_read_golden("models/qwen35-tiny", 1, &g);
    loom_err err = {{0}};
    loom_status opened;
    /* a context limit of 8 positions */
    loom_engine *e = tm_open(fixture("models/qwen35-tiny"), 8, &opened, &err);
    ck_assert_int_eq(opened, LOOM_OK);
    int32_t V = g.vocab;
    float *l1 = malloc((size_t)V * 8 * sizeof(float));
    float *l2 = malloc((size_t)V * 8 * sizeof(float));
    loom_cache *c = tm_new_cache(e);
    feed_ok(e, c, 0, g.prompt, 4, 4, 0, NULL);
    /* wrong position, bad token, trees, plain after speculative, too long,
     * no logits view, a device view: each refused, and the cache is left
     * as it was */
    loom_row bad[3] = {{c, g.prompt[4], 5, -1, 0}};
    ck_assert_int_eq(tm_forward(e, bad, 1, NULL, &err), LOOM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "position 5"));
    bad[0] = (loom_row){c, 512, 4, -1, 0};
    ck_assert_int_eq(tm_forward(e, bad, 1, NULL, &err), LOOM_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "token 512"));
    bad[0] = (loom_row){c, 3, 4, 0, 0};
    ck_assert_int_eq(tm_forward(e, bad, 1, NULL, &err), LOOM_ERR_UNSUPPORTED);
    bad[0] = (loom_row){c, 3, 4, -1, LOOM_ROW_SPECULATIVE};
    bad[1] = (loom_row){c, 3, 5, -1, 0};
    ck_assert_int_eq(tm_forward(e, bad, 2, NULL, &err), LOOM_ERR_INVALID);
    bad[0] = (loom_row){NULL, 3, 4, -1, 0};
    ck_assert_int_eq(tm_forward(e, bad, 2, NULL, &err), LOOM_ERR_INVALID);
    ck_assert_int_eq(feed(e, c, 4, g.prompt + 4, 5, 5, 0, NULL, &err),
                     LOOM_ERR_FULL);
    ck_assert_ptr_nonnull(strstr(err.msg, "context limit 8"));
    bad[0] = (loom_row){c, 3, 4, -1, LOOM_ROW_LOGITS};
    ck_assert_int_eq(tm_forward(e, bad, 1, NULL, &err), LOOM_ERR_INVALID);
    tm_check_device_view_refused(e, bad);
    /* the cache still stands at position 4 */
    feed_ok(e, c, 4, g.prompt + 4, 4, 4, LOOM_ROW_LOGITS, l1);
    tm_cache_reset(e, &c);
    feed_ok(e, c, 0, g.prompt, 8, 8, LOOM_ROW_LOGITS, l2);
    ck_assert_int_eq(memcmp(l1, l2 + (size_t)4 * V, (size_t)4 * V * 4), 0);
    tm_cache_free(e, c);
    free(l1);
    free(l2);
    free(g.logits);
    loom_engine_close(e);
}
END_TEST

/* ---------------------------------------------------------------- broken */

static void expect_refusal(const char *dir, loom_status code,
                           const char *needle1, const char *needle2)
{
    loom_err err = {{0}};
    loom_status st;
    tm_open(dir, 0, &st, &err);
    ck_assert_msg(st == code, "%s: status %d, want %d (%s)", dir, st, code,
                  err.msg);
    ck_assert_msg(strstr(err.msg, needle1) != NULL, "'%s' lacks '%s'", err.msg,
                  needle1);
    if (needle2)
        ck_assert_msg(strstr(err.msg, needle2) != NULL, "'%s' lacks '%s'",
                      err.msg, needle2);
}

START_TEST(broken_geometry)
{
    const char *t = "models/qwen35-tiny";
    expect_refusal(tm_edited_copy(t, "{\"num_key_value_heads\": 3}", 0),
                   LOOM_ERR_FORMAT, "num_key_value_heads = 3",
                   "num_attention_heads = 4");
    expect_refusal(tm_edited_copy(t, "{\"linear_num_value_heads\": 3}", 0),
                   LOOM_ERR_FORMAT, "linear_num_value_heads = 3",
                   "linear_num_key_heads = 2");
    expect_refusal(tm_edited_copy(t,
                                  "{\"layer_types\": [\"linear_attention\", "
                                  "\"linear_attention\", \"full_attention\"]}",
                                  0),
                   LOOM_ERR_FORMAT, "layer_types has 3 entries",
                   "num_hidden_layers = 4");
    expect_refusal(tm_edited_copy(t,
                                  "{\"layer_types\": [\"linear_attention\", "
                                  "\"mamba\", \"full_attention\", "
                                  "\"full_attention\"]}",
                                  0),
                   LOOM_ERR_FORMAT, "layer_types[1] = \"mamba\"", NULL);
    expect_refusal(tm_edited_copy(t, "{\"hidden_size\": 0}", 0),
                   LOOM_ERR_FORMAT, "hidden_size = 0", "positive");
    expect_refusal(tm_edited_copy(t, "{\"linear_key_head_dim\": -16}", 0),
                   LOOM_ERR_FORMAT, "linear_key_head_dim = -16", NULL);
    expect_refusal(tm_edited_copy(t, "{\"vocab_size\": null}", 0),
                   LOOM_ERR_FORMAT, "vocab_size", "required");
    expect_refusal(tm_edited_copy(t, "{\"head_dim\": \"32\"}", 0),
                   LOOM_ERR_FORMAT, "head_dim", "integer");
    expect_refusal(tm_edited_copy(t,
                                  "{\"full_attention_interval\": 0, "
                                  "\"layer_types\": null}",
                                  0),
                   LOOM_ERR_FORMAT, "full_attention_interval = 0", NULL);
    expect_refusal(tm_edited_copy(t, "{\"rms_norm_eps\": 0}", 0),
                   LOOM_ERR_FORMAT, "rms_norm_eps = 0", NULL);
    expect_refusal(tm_edited_copy(t,
                                  "{\"partial_rotary_factor\": 0.01, "
                                  "\"rope_parameters\": null}",
                                  0),
                   LOOM_ERR_FORMAT, "partial_rotary_factor = 0.01", NULL);
    expect_refusal(tm_edited_copy(t,
                                  "{\"rope_parameters\": {\"rope_type\": "
                                  "\"yarn\"}}",
                                  0),
                   LOOM_ERR_UNSUPPORTED, "rope_type = \"yarn\"", NULL);
    expect_refusal(tm_edited_copy(t, "{\"hidden_act\": \"gelu\"}", 0),
                   LOOM_ERR_UNSUPPORTED, "hidden_act = \"gelu\"", NULL);
    /* nested: the message names text_config */
    expect_refusal(tm_edited_copy("models/qwen35-vl-tiny",
                                  "{\"num_attention_heads\": 0}", 1),
                   LOOM_ERR_FORMAT, "text_config.num_attention_heads = 0",
                   NULL);
    /* without layer_types, full_attention_interval decides: 2 gives LALA,
     * which this checkpoint's tensors do not match (layer 1 has no q_proj) */
    expect_refusal(tm_edited_copy(t,
                                  "{\"full_attention_interval\": 2, "
                                  "\"layer_types\": null}",
                                  0),
                   LOOM_ERR_NOT_FOUND, "layers.1.self_attn.q_proj", NULL);
}
END_TEST

/* issue 18: a config whose sizes wrap in int64 (4 key heads of 2^62 + 8
 * gave 32, this checkpoint's real width, so every shape check passed and
 * the forward overran the state), optional fields of the wrong type and
 * eos ids outside the vocabulary are refused at open. */
START_TEST(hostile_geometry)
{
    const char *t = "models/qwen35-tiny";
    expect_refusal(tm_edited_copy(t,
                                  "{\"linear_num_key_heads\": 4, "
                                  "\"linear_num_value_heads\": 4, "
                                  "\"linear_key_head_dim\": "
                                  "4611686018427387912}",
                                  0),
                   LOOM_ERR_FORMAT, "linear_key_head_dim", "2^48");
    expect_refusal(tm_edited_copy(t,
                                  "{\"vocab_size\": 4294967296, "
                                  "\"hidden_size\": 4294967296}",
                                  0),
                   LOOM_ERR_FORMAT, "vocab_size x hidden_size", "2^48");
    expect_refusal(tm_edited_copy(t, "{\"tie_word_embeddings\": \"yes\"}", 0),
                   LOOM_ERR_FORMAT, "tie_word_embeddings", "boolean");
    expect_refusal(tm_edited_copy(t, "{\"rope_parameters\": \"x\"}", 0),
                   LOOM_ERR_FORMAT, "rope_parameters", "object");
    expect_refusal(tm_edited_copy(t, "{\"eos_token_id\": -1}", 0),
                   LOOM_ERR_FORMAT, "eos_token_id = -1", "vocabulary");
    expect_refusal(tm_edited_copy(t, "{\"eos_token_id\": 1099511627776}", 0),
                   LOOM_ERR_FORMAT, "eos_token_id = 1099511627776", NULL);
}
END_TEST

/* The probe: architectures first, model_type second, nothing else; eos
 * ids gathered from config.json and generation_config.json. */
START_TEST(probe_and_eos)
{
    loom_engine *e = tm_open_ok(fixture("models/qwen35-tiny"), "qwen35");
    const loom_plugin *pl = e->plugin->plugin;
    const loom_host *host = &e->hs.host;
    ck_assert_int_eq(pl->probe(host, e->ckpt), 100);
    struct {
        const char *edit;
        int32_t score;
    } cases[] = {
        {"{\"architectures\": null}", 50},
        {"{\"architectures\": [\"Qwen3NextForCausalLM\"]}", 100},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": "
         "\"qwen3_next\"}",
         50},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": "
         "\"llama\"}",
         0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *dir =
            tm_edited_copy("models/qwen35-tiny", cases[i].edit, 0);
        loom_checkpoint *ck = NULL;
        loom_err err = {{0}};
        ck_assert_int_eq(loom_checkpoint_open(dir, &ck, &err), LOOM_OK);
        ck_assert_msg(pl->probe(host, ck) == cases[i].score, "%s: %d",
                      cases[i].edit, pl->probe(host, ck));
        loom_checkpoint_close(ck);
    }
    loom_engine_close(e);

    /* eos: the config's 1, then generation_config's list, deduplicated */
    const char *dir = tm_edited_copy("models/qwen35-tiny", "{}", 0);
    write_text_in(dir, "generation_config.json",
                  "{\"eos_token_id\": [1, 7, 9]}");
    e = tm_open_ok(dir, "qwen35");
    ck_assert_int_eq(e->info.n_eos, 3);
    ck_assert_int_eq(e->info.eos[0], 1);
    ck_assert_int_eq(e->info.eos[1], 7);
    ck_assert_int_eq(e->info.eos[2], 9);
    loom_engine_close(e);
}
END_TEST

START_TEST(broken_tensors)
{
    const char *t = "models/qwen35-tiny";
    st_entry ents[128];
    loom_st *st = NULL;
    int n = st_read(t, &st, ents, 128);
    char path[1024];
    const char *missing[] = {"model.layers.2.linear_attn.in_proj_z.weight",
                             "model.layers.3.self_attn.q_norm.weight",
                             "model.layers.1.linear_attn.A_log",
                             "lm_head.weight", "model.norm.weight"};
    for (size_t m = 0; m < sizeof missing / sizeof *missing; m++) {
        const char *dir = tm_edited_copy(t, "{}", 0);
        int k = st_index(ents, n, missing[m]);
        ck_assert_int_ge(k, 0);
        st_entry e2[128];
        memcpy(e2, ents, sizeof(st_entry) * (size_t)n);
        memmove(&e2[k], &e2[k + 1], sizeof(st_entry) * (size_t)(n - k - 1));
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        st_write(path, e2, n - 1);
        expect_refusal(dir, LOOM_ERR_NOT_FOUND, missing[m], NULL);
    }
    /* wrong shapes: a linear weight one row short, a norm too long, conv
     * taps of the wrong kernel */
    struct {
        const char *name;
        int ndim;
        int64_t shape[3];
    } wrong[] = {
        {"model.layers.0.mlp.up_proj.weight", 2, {159, 64}},
        {"model.layers.3.self_attn.k_norm.weight", 1, {16}},
        {"model.layers.0.linear_attn.conv1d.weight", 3, {128, 1, 3}},
        {"model.layers.1.linear_attn.dt_bias", 1, {2}},
    };
    for (size_t w = 0; w < sizeof wrong / sizeof *wrong; w++) {
        const char *dir = tm_edited_copy(t, "{}", 0);
        int k = st_index(ents, n, wrong[w].name);
        ck_assert_int_ge(k, 0);
        st_entry e2[128];
        memcpy(e2, ents, sizeof(st_entry) * (size_t)n);
        e2[k].ndim = wrong[w].ndim;
        uint64_t count = 1;
        for (int d = 0; d < wrong[w].ndim; d++) {
            e2[k].shape[d] = wrong[w].shape[d];
            count *= (uint64_t)wrong[w].shape[d];
        }
        e2[k].nbytes = count * 2; /* BF16, fewer bytes than the original */
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        st_write(path, e2, n);
        loom_err err = {{0}};
        loom_status s;
        tm_open(dir, 0, &s, &err);
        ck_assert_msg(s == LOOM_ERR_FORMAT || s == LOOM_ERR_INVALID,
                      "%s: status %d (%s)", wrong[w].name, s, err.msg);
        ck_assert_msg(strstr(err.msg, wrong[w].name) != NULL,
                      "'%s' does not name %s", err.msg, wrong[w].name);
    }
    loom_st_close(st);
}
END_TEST

/* qwen35-tiny rewritten as a Qwen3-Next checkpoint (fv_qwen3_next) computes
 * the same function, so it must give the same logits. */
static void check_next(int moe)
{
    const char *t = "models/qwen35-tiny";
    const char *dir = fv_qwen3_next(moe);
    tm_golden g;
    tm_read_golden(t, 1, &g);
    size_t cnt = (size_t)g.n_prompt * g.vocab;
    float *l1 = malloc(cnt * 4), *l2 = malloc(cnt * 4);
    loom_engine *e = tm_open_ok(fixture(t), "qwen35");
    loom_cache *c = tm_new_cache(e);
    feed_ok(e, c, 0, g.prompt, g.n_prompt, g.n_prompt, LOOM_ROW_LOGITS, l1);
    tm_cache_free(e, c);
    loom_engine_close(e);
    e = tm_open_ok(dir, "qwen35");
    c = tm_new_cache(e);
    feed_ok(e, c, 0, g.prompt, g.n_prompt, 5, LOOM_ROW_LOGITS, l2);
    tm_cache_free(e, c);
    loom_engine_close(e);
    double d = rel_err(l2, l1, cnt);
    ck_assert_msg(d <= (moe ? 1e-5 : 1e-6), "moe %d: %g", moe, d);
    ck_assert_double_le(rel_err(l2, g.logits, cnt), 1e-4);
    free(l1);
    free(l2);
    free(g.logits);
}

/* ---------------------------------------------------------------- dtypes */

enum { AS_F32, AS_F16, AS_MLX, AS_MLX_REF };

static float bf16_at(const st_entry *e, size_t i)
{
    return loom_bf16_to_f32(((const uint16_t *)e->data)[i]);
}

static int is_zero_centred_norm(const char *name)
{
    return strstr(name, "layernorm.weight") || strstr(name, "q_norm.") ||
           strstr(name, "k_norm.") || !strcmp(name, "model.norm.weight");
}

/* qwen35-tiny with its tensors stored another way: all F32, all F16, MLX
 * (4-bit affine linear weights where the input width allows, norms shifted
 * by +1, conv1d as [C, K, 1], names under language_model.), or the F32
 * checkpoint holding the MLX one's dequantized weights in HF layout. */
static const char *make_dtype_variant(int kind)
{
    const char *t = "models/qwen35-tiny";
    st_entry ents[128], out[256];
    loom_st *st = NULL;
    int n = st_read(t, &st, ents, 128), m = 0;
    for (int i = 0; i < n; i++) {
        st_entry e = ents[i];
        size_t cnt = e.nbytes / 2;
        int quant = e.ndim == 2 && e.shape[1] % 64 == 0;
        if (kind == AS_F16) {
            uint16_t *h = malloc(e.nbytes);
            for (size_t k = 0; k < cnt; k++)
                h[k] = loom_f32_to_f16(bf16_at(&ents[i], k));
            snprintf(e.dtype, sizeof e.dtype, "F16");
            e.data = e.owned = h;
            out[m++] = e;
            continue;
        }
        if (kind == AS_F32 || (kind == AS_MLX_REF && !quant)) {
            float *f = malloc(cnt * 4);
            for (size_t k = 0; k < cnt; k++)
                f[k] = bf16_at(&ents[i], k);
            snprintf(e.dtype, sizeof e.dtype, "F32");
            e.data = e.owned = f;
            e.nbytes = cnt * 4;
            out[m++] = e;
            continue;
        }
        int64_t rows = e.shape[0], cols = quant ? e.shape[1] : 0;
        uint32_t *q = quant ? malloc((size_t)(rows * cols / 8) * 4) : NULL;
        uint16_t *sc = quant ? malloc((size_t)(rows * cols / 64) * 2) : NULL;
        uint16_t *bi = quant ? malloc((size_t)(rows * cols / 64) * 2) : NULL;
        if (kind == AS_MLX_REF) {
            float *deq = malloc(cnt * 4);
            fv_affine(ents[i].data, rows, cols, 4, q, sc, bi, deq);
            free(q);
            free(sc);
            free(bi);
            snprintf(e.dtype, sizeof e.dtype, "F32");
            e.data = e.owned = deq;
            e.nbytes = cnt * 4;
            out[m++] = e;
            continue;
        }
        /* AS_MLX */
        char name[128];
        if (!strncmp(e.name, "model.", 6))
            snprintf(name, sizeof name, "language_model.model.%.100s",
                     e.name + 6);
        else
            snprintf(name, sizeof name, "language_model.%.100s", e.name);
        if (quant) {
            fv_affine(ents[i].data, rows, cols, 4, q, sc, bi, NULL);
            char base[128];
            snprintf(base, sizeof base, "%.*s",
                     (int)(strlen(name) - strlen(".weight")), name);
            st_entry w = e, s2 = e, b2 = e;
            snprintf(w.name, sizeof w.name, "%s.weight", base);
            snprintf(w.dtype, sizeof w.dtype, "U32");
            w.shape[1] = cols / 8;
            w.data = w.owned = q;
            w.nbytes = (uint64_t)(rows * cols / 8) * 4;
            snprintf(s2.name, sizeof s2.name, "%s.scales", base);
            s2.shape[1] = cols / 64;
            s2.data = s2.owned = sc;
            s2.nbytes = (uint64_t)(rows * cols / 64) * 2;
            snprintf(b2.name, sizeof b2.name, "%s.biases", base);
            b2.shape[1] = cols / 64;
            b2.data = b2.owned = bi;
            b2.nbytes = s2.nbytes;
            out[m++] = w;
            out[m++] = s2;
            out[m++] = b2;
            continue;
        }
        snprintf(e.name, sizeof e.name, "%s", name);
        if (is_zero_centred_norm(ents[i].name)) {
            /* MLX stores 1 + w; F32 keeps that sum exact */
            float *f = malloc(cnt * 4);
            for (size_t k = 0; k < cnt; k++)
                f[k] = 1.0f + bf16_at(&ents[i], k);
            snprintf(e.dtype, sizeof e.dtype, "F32");
            e.data = e.owned = f;
            e.nbytes = cnt * 4;
        } else if (strstr(e.name, "conv1d.weight")) {
            e.shape[1] = e.shape[2]; /* [C, 1, K] -> [C, K, 1] */
            e.shape[2] = 1;
        }
        out[m++] = e;
    }
    const char *dir =
        tm_edited_copy(t,
                       kind == AS_MLX ? "{\"quantization\": {\"group_size\": "
                                        "64, \"bits\": 4}}"
                                      : "{}",
                       0);
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_write(path, out, m);
    for (int i = 0; i < m; i++)
        free(out[i].owned);
    loom_st_close(st);
    return dir;
}

static float *prompt_logits(const char *dir, const tm_golden *g)
{
    float *l = malloc((size_t)g->n_prompt * g->vocab * sizeof(float));
    loom_engine *e = tm_open_ok(dir, "qwen35");
    loom_cache *c = tm_new_cache(e);
    feed_ok(e, c, 0, g->prompt, g->n_prompt, 7, LOOM_ROW_LOGITS, l);
    tm_cache_free(e, c);
    loom_engine_close(e);
    return l;
}

START_TEST(weight_dtypes)
{
    tm_golden g;
    tm_read_golden("models/qwen35-tiny", 1, &g);
    size_t cnt = (size_t)g.n_prompt * g.vocab;
    float *bf = prompt_logits(fixture("models/qwen35-tiny"), &g);
    /* F32 holds the BF16 values exactly: the same function */
    float *f32 = prompt_logits(make_dtype_variant(AS_F32), &g);
    ck_assert_double_le(rel_err(f32, bf, cnt), 1e-6);
    /* F16 rounds a few small weights: still within the reference bound */
    float *f16 = prompt_logits(make_dtype_variant(AS_F16), &g);
    ck_assert_double_le(rel_err(f16, g.logits, cnt), 1e-3);
    /* MLX 4-bit against the same weights dequantized into an F32 HF file */
    float *mlx = prompt_logits(make_dtype_variant(AS_MLX), &g);
    float *ref = prompt_logits(make_dtype_variant(AS_MLX_REF), &g);
    double d = rel_err(mlx, ref, cnt);
    ck_assert_msg(d <= 1e-5, "MLX vs dequantized: %g", d);
    /* and quantization changed the function (the test is not vacuous) */
    ck_assert_double_gt(rel_err(ref, bf, cnt), 1e-3);
    free(bf);
    free(f32);
    free(f16);
    free(mlx);
    free(ref);
    free(g.logits);
}
END_TEST

START_TEST(qwen3_next_layout)
{
    check_next(0);
}
END_TEST

START_TEST(qwen3_next_moe)
{
    check_next(1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("qwen35");
    TCase *ref = tcase_create("reference");
    tcase_set_timeout(ref, 120);
    tcase_add_test(ref, reference_tiny);
    tcase_add_test(ref, reference_vl_tiny);
    tcase_add_test(ref, reference_ref2);
    tcase_add_test(ref, describe_and_geometry);
    tcase_add_test(ref, taps);
    tcase_add_test(ref, target_tiny);
    tcase_add_test(ref, target_vl_tiny);
    tcase_add_test(ref, target_ref2);
    suite_add_tcase(s, ref);
    TCase *rounds = tcase_create("rounds");
    tcase_set_timeout(rounds, 120);
    tcase_add_test(rounds, chunked_prompt);
    tcase_add_test(rounds, prompt_chunk_kernels);
    tcase_add_test(rounds, two_streams);
    tcase_add_test(rounds, commit_windows);
    tcase_add_test(rounds, commit_errors_and_repeats);
    tcase_add_test(rounds, forward_refusals);
    suite_add_tcase(s, rounds);
    TCase *broken = tcase_create("broken");
    tcase_set_timeout(broken, 120);
    tcase_add_test(broken, broken_geometry);
    tcase_add_test(broken, hostile_geometry);
    tcase_add_test(broken, probe_and_eos);
    tcase_add_test(broken, broken_tensors);
    tcase_add_test(broken, qwen3_next_layout);
    tcase_add_test(broken, qwen3_next_moe);
    tcase_add_test(broken, weight_dtypes);
    suite_add_tcase(s, broken);
    return run_suite(s);
}
