/* The nemotron plugin through the engine: logits and greedy tokens against
 * transformers' references (nemotron-h-tiny: M - M * -; nemotron-h-moe-tiny:
 * M E * M E - with group-limited routing, tied head, projection biases),
 * chunked prompts, streams sharing a round, speculative windows and commit
 * under the one window rule, the loom.target/1 extension (taps, embed,
 * head), and the refusals of broken configs and forwards. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <loom/checkpoint.h>
#include <loom/cpu_ops.h>
#include <loom/engine.h>
#include <loom/round_plan.h>
#include <loom/safetensors.h>
#include <loom/weights.h>

#include "testmodel.h"
#include "testutil.h"

#define TINY "models/nemotron-h-tiny"
#define MOE  "models/nemotron-h-moe-tiny"

/* ---------------------------------------------------------------- helpers */

/* Feeds toks[0..n) to c as one round from position c_len; every row asks
 * for logits (into out, [n, vocab]) when out is not NULL. */
static loom_status feed(loom_engine *e, loom_cache *c, int32_t pos0,
                        const int32_t *toks, int n, uint32_t flags, float *out,
                        loom_err *err)
{
    loom_row rows[64];
    ck_assert_int_le(n, 64);
    for (int i = 0; i < n; i++)
        rows[i] = (loom_row){c, toks[i], pos0 + i, -1,
                             flags | (out ? LOOM_ROW_LOGITS : 0)};
    return tm_forward(e, rows, n, out, err);
}

static void feed_ok(loom_engine *e, loom_cache *c, int32_t pos0,
                    const int32_t *toks, int n, uint32_t flags, float *out)
{
    loom_err err;
    loom_status rc = feed(e, c, pos0, toks, n, flags, out, &err);
    ck_assert_msg(rc == LOOM_OK, "forward: %s", err.msg);
}

/* ---------------------------------------------------------------- golden */

static void check_logits(const char *rel)
{
    loom_engine *e = tm_open_ok(fixture(rel), "nemotron");
    tm_golden g;
    tm_read_golden(rel, 0, &g);
    int V = e->info.vocab;
    char path[1024];
    snprintf(path, sizeof path, "%s/logits.f32", fixture(rel));
    size_t n_ref = 0;
    float *ref = read_f32(path, &n_ref);
    ck_assert_ptr_nonnull(ref);
    ck_assert_uint_eq(n_ref, (size_t)g.n_prompt * V);

    loom_cache *c = tm_new_cache(e);
    float *got = malloc(n_ref * sizeof *got);
    feed_ok(e, c, 0, g.prompt, g.n_prompt, 0, got);
    double err = rel_err(got, ref, n_ref);
    fprintf(stderr, "%s: logits rel err %.3g\n", rel, err);
    ck_assert_msg(err < 1e-4, "%s: logits rel err %g", rel, err);
    /* and row by row, so one bad position cannot hide under a big logit */
    for (int t = 0; t < g.n_prompt; t++) {
        double et = rel_err(got + (size_t)t * V, ref + (size_t)t * V, V);
        ck_assert_msg(et < 1e-4, "%s: position %d rel err %g", rel, t, et);
    }
    tm_cache_free(e, c);
    free(got);
    free(ref);
    loom_engine_close(e);
}

static void check_greedy(const char *rel)
{
    loom_engine *e = tm_open_ok(fixture(rel), "nemotron");
    tm_golden g;
    tm_read_golden(rel, 0, &g);
    int V = e->info.vocab;
    float *logits = malloc((size_t)V * sizeof *logits);
    loom_cache *c = tm_new_cache(e);
    /* the prompt with logits for its last row only */
    loom_row rows[64];
    for (int i = 0; i < g.n_prompt; i++)
        rows[i] = (loom_row){c, g.prompt[i], i, -1,
                             i == g.n_prompt - 1 ? LOOM_ROW_LOGITS : 0};
    loom_err err;
    ck_assert_msg(tm_forward(e, rows, g.n_prompt, logits, &err) == LOOM_OK,
                  "%s", err.msg);
    tm_check_greedy(rel, e, c, &g, logits);
    tm_cache_free(e, c);
    free(logits);
    loom_engine_close(e);
}

START_TEST(tiny_logits)
{
    check_logits(TINY);
}
END_TEST

START_TEST(tiny_greedy)
{
    check_greedy(TINY);
}
END_TEST

START_TEST(moe_logits)
{
    check_logits(MOE);
}
END_TEST

START_TEST(moe_greedy)
{
    check_greedy(MOE);
}
END_TEST

/* ---------------------------------------------------------------- chunks */

static const char *const models[] = {TINY, MOE};

/* Chunks of 1, 3, 7 and the whole prompt give the same logits, bit for bit:
 * each row's arithmetic does not depend on what else is in its round. */
START_TEST(chunked_prompts)
{
    const char *rel = models[_i];
    loom_engine *e = tm_open_ok(fixture(rel), "nemotron");
    tm_golden g;
    tm_read_golden(rel, 0, &g);
    size_t V = (size_t)e->info.vocab, n = (size_t)g.n_prompt;
    float *whole = malloc(n * V * sizeof(float));
    float *part = malloc(n * V * sizeof(float));
    loom_cache *c = tm_new_cache(e);
    feed_ok(e, c, 0, g.prompt, g.n_prompt, 0, whole);
    const int sizes[] = {1, 3, 7};
    for (int s = 0; s < 3; s++) {
        tm_cache_reset(e, &c);
        for (int p = 0; p < g.n_prompt; p += sizes[s]) {
            int k = g.n_prompt - p < sizes[s] ? g.n_prompt - p : sizes[s];
            feed_ok(e, c, p, g.prompt + p, k, 0, part + (size_t)p * V);
        }
        ck_assert_msg(memcmp(whole, part, n * V * sizeof(float)) == 0,
                      "%s: chunks of %d differ (rel err %g)", rel, sizes[s],
                      rel_err(part, whole, n * V));
    }
    tm_cache_free(e, c);
    free(whole);
    free(part);
    loom_engine_close(e);
}
END_TEST

/* ---------------------------------------------------------------- prompt
 * kernel */

/* The prompt kernels against the decode kernels: tm_check_prompt_chunk. */
START_TEST(prompt_chunk_kernels)
{
    tm_check_prompt_chunk(models[_i], "nemotron");
}
END_TEST

/* Two prompt chunks in turn, the second's chunked scan starting from the
 * state the first left in the cache, then one row, against the same
 * tokens one row a round: the logits of the second chunk's last row and
 * of the row after it within tm_check_prompt_chunk's bound (its comment
 * says why; these 69 rows came to at most 9.4e-7 of the largest logit on
 * the float32 set), and the same argmax. */
START_TEST(prompt_chunks_in_turn)
{
    const char *rel = models[_i];
    enum { N1 = 33, N2 = 35, N = N1 + N2 + 1 };
    ck_assert_int_ge(N1, LOOM_PROMPT_MIN_ROWS);
    ck_assert_int_ge(N2, LOOM_PROMPT_MIN_ROWS);
    loom_engine *e = tm_open_ok(fixture(rel), "nemotron");
    tm_golden g;
    tm_read_golden(rel, 0, &g);
    size_t V = (size_t)e->info.vocab;
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = g.prompt[(i * 7) % g.n_prompt];
    float *chunk = malloc(2 * V * sizeof(float));
    float *step = malloc(2 * V * sizeof(float));
    loom_cache *c = tm_new_cache(e);
    feed_ok(e, c, 0, ids, N1, 0, NULL);
    loom_row rows[N2];
    for (int i = 0; i < N2; i++)
        rows[i] = (loom_row){c, ids[N1 + i], N1 + i, -1,
                             i == N2 - 1 ? LOOM_ROW_LOGITS : 0};
    loom_err err;
    ck_assert_msg(tm_forward(e, rows, N2, chunk, &err) == LOOM_OK, "%s",
                  err.msg);
    feed_ok(e, c, N - 1, ids + N - 1, 1, 0, chunk + V);
    tm_cache_reset(e, &c);
    for (int i = 0; i < N; i++)
        feed_ok(e, c, i, ids + i, 1, 0,
                i >= N - 2 ? step + (size_t)(i - (N - 2)) * V : NULL);
    double tol =
        loom_matmul_prompt_default() >= LOOM_MM_AVX512BF16 ? 0.2 : 1e-4;
    for (int k = 0; k < 2; k++) {
        const float *a = chunk + k * V, *b = step + k * V;
        double dmax = 0, lmax = 0;
        for (size_t v = 0; v < V; v++) {
            dmax = fmax(dmax, fabs((double)a[v] - b[v]));
            lmax = fmax(lmax, fabs((double)b[v]));
        }
        fprintf(stderr,
                "%s: prompt chunks in turn, row %d: %.3g of the "
                "largest logit\n",
                rel, N - 2 + k, dmax / lmax);
        ck_assert_msg(dmax <= tol * lmax,
                      "%s: row %d differs by %g (max "
                      "logit %g)",
                      rel, N - 2 + k, dmax, lmax);
        ck_assert_int_eq(loom_cpu_argmax(a, (int64_t)V),
                         loom_cpu_argmax(b, (int64_t)V));
    }
    tm_cache_free(e, c);
    free(chunk);
    free(step);
    loom_engine_close(e);
}
END_TEST

/* Two streams whose rows interleave in one round get what each gets alone. */
START_TEST(two_streams)
{
    const char *rel = models[_i];
    loom_engine *e = tm_open_ok(fixture(rel), "nemotron");
    tm_golden g;
    tm_read_golden(rel, 0, &g);
    size_t V = (size_t)e->info.vocab;
    int na = 11, nb = 7;
    const int32_t *ta = g.prompt, *tb = g.prompt + 13;
    float *alone_a = malloc((size_t)na * V * sizeof(float));
    float *alone_b = malloc((size_t)nb * V * sizeof(float));
    loom_cache *a = tm_new_cache(e), *b = tm_new_cache(e);
    /* b first gets a head start of 2 rows alone */
    feed_ok(e, a, 0, ta, na, 0, alone_a);
    feed_ok(e, b, 0, tb, nb, 0, alone_b);
    tm_cache_reset(e, &a);
    tm_cache_reset(e, &b);
    float *both = malloc((size_t)(na + nb) * V * sizeof(float));
    feed_ok(e, b, 0, tb, 2, 0, both);
    ck_assert(memcmp(both, alone_b, 2 * V * sizeof(float)) == 0);
    loom_row rows[32];
    int n = 0, ia = 0, ib = 2;
    while (ia < na || ib < nb) {
        if (ia < na)
            rows[n++] = (loom_row){a, ta[ia], ia, -1, LOOM_ROW_LOGITS}, ia++;
        if (ib < nb && (ia % 2 == 0 || ia >= na))
            rows[n++] = (loom_row){b, tb[ib], ib, -1, LOOM_ROW_LOGITS}, ib++;
    }
    loom_err err;
    ck_assert_msg(tm_forward(e, rows, n, both, &err) == LOOM_OK, "%s", err.msg);
    for (int r = 0; r < n; r++) {
        const float *want = rows[r].cache == a
                                ? alone_a + (size_t)rows[r].position * V
                                : alone_b + (size_t)rows[r].position * V;
        ck_assert_msg(memcmp(both + (size_t)r * V, want, V * sizeof(float)) ==
                          0,
                      "%s: row %d (stream %s, position %d) differs", rel, r,
                      rows[r].cache == a ? "a" : "b", rows[r].position);
    }
    tm_cache_free(e, a);
    tm_cache_free(e, b);
    free(alone_a);
    free(alone_b);
    free(both);
    loom_engine_close(e);
}
END_TEST

/* ---------------------------------------------------------------- windows */

/* A window of k speculative rows, then commit(j), then one more row: that
 * row's logits equal, bit for bit, those of a cache fed the j rows plainly.
 * The window's own logits equal plain feeding too. */
START_TEST(commit_windows)
{
    const char *rel = models[_i];
    loom_engine *e = tm_open_ok(fixture(rel), "nemotron");
    tm_golden g;
    tm_read_golden(rel, 0, &g);
    size_t V = (size_t)e->info.vocab;
    const int pre = 9, k = 5;
    const int32_t *win = g.prompt + pre;
    int32_t next = g.prompt[pre + k + 1];
    float *wl = malloc((size_t)k * V * sizeof(float));
    float *pl = malloc((size_t)k * V * sizeof(float));
    float *got = malloc(V * sizeof(float));
    float *want = malloc(V * sizeof(float));
    loom_cache *c = tm_new_cache(e), *ref = tm_new_cache(e);
    loom_err err;
    for (int j = 0; j <= k; j++) {
        tm_cache_reset(e, &c);
        tm_cache_reset(e, &ref);
        feed_ok(e, c, 0, g.prompt, pre, 0, NULL);
        feed_ok(e, c, pre, win, k, LOOM_ROW_SPECULATIVE, wl);
        loom_status rc = tm_commit(e, c, j, &err);
        ck_assert_msg(rc == LOOM_OK, "commit(%d): %s", j, err.msg);
        feed_ok(e, c, pre + j, &next, 1, 0, got);

        feed_ok(e, ref, 0, g.prompt, pre, 0, NULL);
        if (j)
            feed_ok(e, ref, pre, win, j, 0, pl);
        feed_ok(e, ref, pre + j, &next, 1, 0, want);
        ck_assert_msg(memcmp(got, want, V * sizeof(float)) == 0,
                      "%s: commit(%d) of %d: next logits differ (rel %g)", rel,
                      j, k, rel_err(got, want, V));
        if (j)
            ck_assert(memcmp(wl, pl, (size_t)j * V * sizeof(float)) == 0);
    }

    /* a second window right after a commit; a forward while it is not
     * committed is refused (the one window rule) and changes nothing */
    tm_cache_reset(e, &c);
    tm_cache_reset(e, &ref);
    feed_ok(e, c, 0, g.prompt, pre, 0, NULL);
    feed_ok(e, c, pre, win, k, LOOM_ROW_SPECULATIVE, NULL);
    ck_assert_int_eq(tm_commit(e, c, 2, &err), LOOM_OK);
    feed_ok(e, c, pre + 2, win + 2, 3, LOOM_ROW_SPECULATIVE, NULL);
    ck_assert_int_eq(feed(e, c, pre + k, &next, 1, 0, got, &err),
                     LOOM_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(err.msg, "not committed"));
    ck_assert_int_eq(
        feed(e, c, pre + k, &next, 1, LOOM_ROW_SPECULATIVE, got, &err),
        LOOM_ERR_STATE);
    ck_assert_int_eq(tm_commit(e, c, 3, &err), LOOM_OK);
    feed_ok(e, c, pre + k, &next, 1, 0, got);
    feed_ok(e, ref, 0, g.prompt, pre + k, 0, NULL);
    feed_ok(e, ref, pre + k, &next, 1, 0, want);
    ck_assert(memcmp(got, want, V * sizeof(float)) == 0);

    /* a window whose first row is plain: only the flagged rows can go */
    tm_cache_reset(e, &c);
    loom_row rows[4];
    for (int i = 0; i < 4; i++)
        rows[i] =
            (loom_row){c, g.prompt[i], i, -1, i ? LOOM_ROW_SPECULATIVE : 0u};
    ck_assert_int_eq(tm_forward(e, rows, 4, NULL, &err), LOOM_OK);
    ck_assert_int_eq(tm_commit(e, c, 4, &err), LOOM_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "kept = 4"));
    ck_assert_int_eq(tm_commit(e, c, 1, &err), LOOM_OK);
    feed_ok(e, c, 2, &next, 1, 0, got);
    tm_cache_reset(e, &ref);
    feed_ok(e, ref, 0, g.prompt, 2, 0, NULL);
    feed_ok(e, ref, 2, &next, 1, 0, want);
    ck_assert(memcmp(got, want, V * sizeof(float)) == 0);
    /* no window: every commit is out of turn, commit(0) too */
    ck_assert_int_eq(tm_commit(e, c, 0, &err), LOOM_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(err.msg, "no window"));
    ck_assert_int_eq(tm_commit(e, c, 1, &err), LOOM_ERR_STATE);
    ck_assert_int_eq(tm_commit(e, c, -1, &err), LOOM_ERR_STATE);

    tm_cache_free(e, c);
    tm_cache_free(e, ref);
    free(wl);
    free(pl);
    free(got);
    free(want);
    loom_engine_close(e);
}
END_TEST

/* Windows of two streams in one round, committed differently. */
START_TEST(commit_two_streams)
{
    const char *rel = models[_i];
    loom_engine *e = tm_open_ok(fixture(rel), "nemotron");
    tm_golden g;
    tm_read_golden(rel, 0, &g);
    size_t V = (size_t)e->info.vocab;
    loom_cache *a = tm_new_cache(e), *b = tm_new_cache(e),
               *ref = tm_new_cache(e);
    const int32_t *ta = g.prompt, *tb = g.prompt + 10;
    int32_t next = g.prompt[23];
    feed_ok(e, a, 0, ta, 5, 0, NULL);
    feed_ok(e, b, 0, tb, 3, 0, NULL);
    loom_row rows[8];
    int n = 0;
    for (int i = 0; i < 4; i++) {
        rows[n++] = (loom_row){a, ta[5 + i], 5 + i, -1, LOOM_ROW_SPECULATIVE};
        rows[n++] = (loom_row){b, tb[3 + i], 3 + i, -1, LOOM_ROW_SPECULATIVE};
    }
    loom_err err;
    ck_assert_int_eq(tm_forward(e, rows, n, NULL, &err), LOOM_OK);
    ck_assert_int_eq(tm_commit(e, a, 1, &err), LOOM_OK);
    ck_assert_int_eq(tm_commit(e, b, 3, &err), LOOM_OK);
    float *got = malloc(V * sizeof(float)), *want = malloc(V * sizeof(float));
    feed_ok(e, a, 6, &next, 1, 0, got);
    feed_ok(e, ref, 0, ta, 6, 0, NULL);
    feed_ok(e, ref, 6, &next, 1, 0, want);
    ck_assert(memcmp(got, want, V * sizeof(float)) == 0);
    feed_ok(e, b, 6, &next, 1, 0, got);
    tm_cache_reset(e, &ref);
    feed_ok(e, ref, 0, tb, 6, 0, NULL);
    feed_ok(e, ref, 6, &next, 1, 0, want);
    ck_assert(memcmp(got, want, V * sizeof(float)) == 0);
    tm_cache_free(e, a);
    tm_cache_free(e, b);
    tm_cache_free(e, ref);
    free(got);
    free(want);
    loom_engine_close(e);
}
END_TEST

/* ---------------------------------------------------------------- target */

/* Taps chosen after open, in any order: each slot holds its layer's output,
 * the last layer's through head gives the row's logits, and a window's
 * tapped rows carry the same features as plain rows. */
START_TEST(taps)
{
    const char *rel = models[_i];
    loom_engine *e = tm_open_ok(fixture(rel), "nemotron");
    tm_golden g;
    tm_read_golden(rel, 0, &g);
    const loom_target_i *tg = tm_target(e);
    int64_t V = e->info.vocab, H = e->info.hidden, T = 6;
    int32_t L = e->info.n_layers;
    int32_t layers[3] = {L - 1, 0, L - 1};
    loom_err err;
    ck_assert_msg(tg->set_taps(e->model, layers, 3, &err) == LOOM_OK, "%s",
                  err.msg);
    loom_cache *c = tm_new_cache(e);
    loom_row rows[8];
    for (int i = 0; i < T; i++)
        rows[i] = (loom_row){c, g.prompt[i], i, -1,
                             LOOM_ROW_LOGITS | (i % 2 ? LOOM_ROW_TAP : 0u)};
    float *lg = malloc((size_t)(T * V) * sizeof(float));
    float *taps = malloc((size_t)(T * 3 * H) * sizeof(float));
    float *head = malloc((size_t)(T * V) * sizeof(float));
    ck_assert_msg(tm_forward_taps(e, rows, (int32_t)T, lg, taps, 3 * H, &err) ==
                      LOOM_OK,
                  "%s", err.msg);
    /* three tapped rows (1, 3, 5): slots 0 and 2 agree, slot 1 does not */
    for (int k = 0; k < 3; k++) {
        const float *t = taps + (size_t)k * 3 * H;
        ck_assert(memcmp(t, t + 2 * H, (size_t)H * sizeof(float)) == 0);
        ck_assert(memcmp(t, t + H, (size_t)H * sizeof(float)) != 0);
        loom_view hv = loom_view_host_f32((float *)t, 1, H);
        loom_view lv = loom_view_host_f32(head, 1, V);
        ck_assert_int_eq(tg->head(e->model, &hv, 1, &lv, &err), LOOM_OK);
        ck_assert_msg(memcmp(head, lg + (size_t)(2 * k + 1) * V,
                             (size_t)V * sizeof(float)) == 0,
                      "%s: head of row %d's tap", rel, 2 * k + 1);
    }
    /* the same rows as a window of one cache, then kept: the same taps */
    float *wtaps = malloc((size_t)(T * 3 * H) * sizeof(float));
    tm_cache_reset(e, &c);
    for (int i = 0; i < T; i++)
        rows[i].flags |= i ? LOOM_ROW_SPECULATIVE : 0u;
    ck_assert_msg(
        tm_forward_taps(e, rows, (int32_t)T, lg, wtaps, 3 * H, &err) == LOOM_OK,
        "%s", err.msg);
    ck_assert_int_eq(tm_commit(e, c, (int32_t)T - 1, &err), LOOM_OK);
    /* rows 1, 3 and 5 were tapped */
    ck_assert(memcmp(wtaps, taps, (size_t)(3 * 3 * H) * sizeof(float)) == 0);
    tm_cache_free(e, c);
    free(lg);
    free(taps);
    free(wtaps);
    free(head);
    loom_engine_close(e);
}
END_TEST

START_TEST(target)
{
    tm_check_target(models[_i], "nemotron", "backbone.embeddings.weight");
    if (_i == 0) {
        tm_check_row_size(models[_i], "nemotron");
        tm_check_struct_sizes(models[_i], "nemotron");
        tm_check_cache_budget(models[_i], "nemotron");
    }
}
END_TEST

/* ---------------------------------------------------------------- describe */

static void LOOM_ABI f_i64(void *ctx, const char *key, int64_t v)
{
    json_object_set_new(ctx, key, json_integer(v));
}
static void LOOM_ABI f_f64(void *ctx, const char *key, double v)
{
    json_object_set_new(ctx, key, json_real(v));
}
static void LOOM_ABI f_str(void *ctx, const char *key, const char *v)
{
    json_object_set_new(ctx, key, json_string(v));
}

START_TEST(describe_and_geometry)
{
    loom_engine *e = tm_open_ok(fixture(TINY), "nemotron");
    ck_assert_int_eq(e->info.vocab, 512);
    ck_assert_int_eq(e->info.hidden, 64);
    ck_assert_int_eq(e->info.n_layers, 5);
    ck_assert_str_eq(e->info.layer_kinds, "M-MA-");
    ck_assert_int_eq(e->info.n_eos, 1);
    ck_assert_int_eq(e->info.eos[0], 2);
    ck_assert_uint_eq(e->info.caps, LOOM_CAP_WINDOWS | LOOM_CAP_TAPS);
    ck_assert_int_eq(e->info.max_context, 4096);
    /* 2 Mamba layers: tail 3 x 192 + state 8 x 16 x 16 floats each */
    ck_assert_uint_eq(e->info.cache_bytes_fixed, 2u * (3 * 192 + 2048) * 4);
    /* 1 attention layer: K and V of 2 heads x 16 */
    ck_assert_uint_eq(e->info.cache_bytes_per_token, 2u * 32 * 4);

    json_t *got = json_object();
    loom_fields f = {sizeof f, got, f_i64, f_f64, f_str};
    loom_err err;
    ck_assert_int_eq(
        loom_family_geometry(&e->family, &e->hs.host, e->ckpt, &f, &err),
        LOOM_OK);
    ck_assert_str_eq(
        json_string_value(json_object_get(got, "hybrid_override_pattern")),
        "M-M*-");
    ck_assert_int_eq(json_integer_value(json_object_get(got, "d_inner")), 128);
    ck_assert_int_eq(json_integer_value(json_object_get(got, "conv_dim")), 192);
    ck_assert_int_eq(json_integer_value(json_object_get(got, "in_proj_dim")),
                     328);
    ck_assert_int_eq(json_integer_value(json_object_get(got, "head_dim")), 16);
    json_decref(got);
    loom_engine_close(e);

    e = tm_open_ok(fixture(MOE), "nemotron");
    ck_assert_str_eq(e->info.layer_kinds, "MEAME-");
    loom_engine_close(e);
}
END_TEST

/* ---------------------------------------------------------------- refusals */

static const struct refusal {
    const char *model;
    const char *edit;
    loom_status code;
    const char *needle;
} refusals[] = {
    {TINY, "{\"n_groups\": 3}", LOOM_ERR_FORMAT, "n_groups = 3"},
    {TINY, "{\"layers_block_type\": null}", LOOM_ERR_FORMAT,
     "hybrid_override_pattern"},
    {TINY,
     "{\"layers_block_type\": [\"mamba\", \"mlp\", \"conv\", \"attention\", "
     "\"mlp\"]}",
     LOOM_ERR_FORMAT, "layers_block_type[2] = conv"},
    {TINY,
     "{\"layers_block_type\": null, \"hybrid_override_pattern\": \"M-X*-\"}",
     LOOM_ERR_FORMAT, "letter 2 'X'"},
    {TINY, "{\"hybrid_override_pattern\": \"M-M--\"}", LOOM_ERR_FORMAT,
     "disagree"},
    {TINY, "{\"num_hidden_layers\": 7}", LOOM_ERR_FORMAT,
     "num_hidden_layers = 7"},
    {TINY, "{\"num_key_value_heads\": 3}", LOOM_ERR_FORMAT,
     "num_key_value_heads = 3"},
    {TINY, "{\"head_dim\": null}", LOOM_ERR_FORMAT, "head_dim"},
    {TINY, "{\"mamba_num_heads\": 0}", LOOM_ERR_FORMAT, "mamba_num_heads = 0"},
    {TINY, "{\"vocab_size\": null}", LOOM_ERR_FORMAT, "vocab_size"},
    {TINY, "{\"hidden_size\": \"64\"}", LOOM_ERR_FORMAT, "hidden_size"},
    {TINY, "{\"mamba_hidden_act\": \"gelu\"}", LOOM_ERR_UNSUPPORTED,
     "mamba_hidden_act = gelu"},
    {TINY, "{\"mlp_hidden_act\": \"silu\"}", LOOM_ERR_UNSUPPORTED,
     "mlp_hidden_act = silu"},
    {TINY, "{\"mamba_n_groups\": 4}", LOOM_ERR_FORMAT, "mamba_n_groups = 4"},
    {TINY, "{\"sliding_window\": 128}", LOOM_ERR_UNSUPPORTED,
     "sliding_window = 128"},
    {TINY, "{\"layer_norm_epsilon\": -1}", LOOM_ERR_FORMAT,
     "layer_norm_epsilon"},
    {TINY, "{\"use_conv_bias\": 1}", LOOM_ERR_FORMAT, "use_conv_bias"},
    {TINY, "{\"mlp_bias\": true}", LOOM_ERR_UNSUPPORTED, "mlp_bias"},
    /* geometry that parses but does not fit the tensors */
    {TINY, "{\"intermediate_size\": 100}", LOOM_ERR_FORMAT,
     "backbone.layers.1.mixer.up_proj"},
    {TINY, "{\"mamba_head_dim\": 8}", LOOM_ERR_FORMAT,
     "backbone.layers.0.mixer.in_proj"},
    {TINY, "{\"conv_kernel\": 3}", LOOM_ERR_FORMAT,
     "conv1d.weight: 768 elements, expected 576"},
    {MOE, "{\"use_conv_bias\": true}", LOOM_ERR_NOT_FOUND,
     "backbone.layers.0.mixer.conv1d.bias"},
    {MOE, "{\"n_group\": 3}", LOOM_ERR_FORMAT, "n_group = 3"},
    {MOE, "{\"num_experts_per_tok\": 5}", LOOM_ERR_FORMAT,
     "num_experts_per_tok = 5"},
    {MOE, "{\"topk_group\": 3}", LOOM_ERR_FORMAT, "topk_group = 3"},
    {MOE, "{\"moe_latent_size\": 16}", LOOM_ERR_UNSUPPORTED,
     "moe_latent_size = 16"},
    {MOE, "{\"moe_intermediate_size\": null}", LOOM_ERR_FORMAT,
     "moe_intermediate_size"},
    {MOE, "{\"n_routed_experts\": 4, \"n_group\": 1}", LOOM_ERR_FORMAT,
     "backbone.layers.1.mixer.gate"},
};

START_TEST(broken_geometry)
{
    const struct refusal *r = &refusals[_i];
    loom_err err;
    memset(&err, 0, sizeof err);
    loom_status rc;
    loom_engine *e =
        tm_open(tm_edited_copy(r->model, r->edit, 0), 0, &rc, &err);
    ck_assert_msg(e == NULL, "%s: opened", r->edit);
    ck_assert_msg(rc == r->code, "%s: status %d (%s), expected %d", r->edit, rc,
                  err.msg, r->code);
    ck_assert_msg(strstr(err.msg, r->needle) != NULL,
                  "%s: message \"%s\" does not name \"%s\"", r->edit, err.msg,
                  r->needle);
}
END_TEST

/* Legacy key names and the pattern string give the same model. */
START_TEST(legacy_config)
{
    const char *dir = tm_edited_copy(
        TINY,
        "{\"layers_block_type\": null, \"hybrid_override_pattern\": "
        "\"M-M*-\", \"n_groups\": null, \"mamba_n_groups\": 2, "
        "\"conv_kernel\": null, \"mamba_d_conv\": 4, \"head_dim\": null, "
        "\"attention_head_dim\": 16, \"num_hidden_layers\": 5}",
        0);
    loom_err err;
    loom_engine *e = tm_open(dir, 0, NULL, &err);
    ck_assert_msg(e != NULL, "%s", err.msg);
    ck_assert_str_eq(e->info.layer_kinds, "M-MA-");
    tm_golden g;
    tm_read_golden(TINY, 0, &g);
    size_t V = (size_t)e->info.vocab, n = (size_t)g.n_prompt;
    char path[1024];
    snprintf(path, sizeof path, "%s/logits.f32", fixture(TINY));
    size_t n_ref;
    float *ref = read_f32(path, &n_ref);
    float *got = malloc(n * V * sizeof(float));
    loom_cache *c = tm_new_cache(e);
    feed_ok(e, c, 0, g.prompt, g.n_prompt, 0, got);
    ck_assert(rel_err(got, ref, n * V) < 1e-4);
    tm_cache_free(e, c);
    free(got);
    free(ref);
    loom_engine_close(e);
}
END_TEST

/* ---------------------------------------------------------------- rewrites */

static const char *dtype_name(loom_dtype d)
{
    return d == LOOM_DTYPE_BF16 ? "BF16" : d == LOOM_DTYPE_F16 ? "F16" : "F32";
}

/* Rewrites fixture `rel` into a temporary directory (config.json as is) with
 * its tensors renamed or regrouped: when `stack`, each MoE layer's per-expert
 * up/down weights become one [E, rows, cols] tensor `experts.up_proj` /
 * `experts.down_proj` (transformers' in-memory layout); `rename_from` ->
 * `rename_to` renames one tensor. Returns the directory. */
static const char *rewritten(const char *rel, int stack,
                             const char *rename_from, const char *rename_to)
{
    loom_st *st;
    loom_err err;
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", fixture(rel));
    ck_assert_msg(loom_st_open_file(path, &st, &err) == LOOM_OK, "%s", err.msg);
    size_t n = loom_st_count(st);
    /* output pieces: name, dtype, shape, and the tensors whose bytes follow
     * each other to make it */
    typedef struct piece {
        char name[256];
        loom_dtype dtype;
        int ndim;
        int64_t shape[3];
        const loom_tensor *parts[64];
        int n_parts;
    } piece;
    piece *pc = calloc(n, sizeof *pc);
    int np = 0;
    for (size_t i = 0; i < n; i++) {
        const loom_tensor *t = loom_st_at(st, i);
        int layer, e;
        char which[16];
        if (stack &&
            sscanf(t->name, "backbone.layers.%d.mixer.experts.%d.%15[a-z]_proj",
                   &layer, &e, which) == 3) {
            char name[256];
            snprintf(name, sizeof name,
                     "backbone.layers.%d.mixer.experts.%s_proj", layer, which);
            int k = 0;
            while (k < np && strcmp(pc[k].name, name))
                k++;
            if (k == np) {
                snprintf(pc[np].name, sizeof pc[np].name, "%s", name);
                pc[np].dtype = t->dtype;
                pc[np].ndim = 3;
                pc[np].shape[1] = t->shape[0];
                pc[np].shape[2] = t->shape[1];
                np++;
            }
            ck_assert_int_eq(e, pc[k].n_parts); /* file order is by expert */
            pc[k].parts[pc[k].n_parts++] = t;
            pc[k].shape[0] = pc[k].n_parts;
            continue;
        }
        snprintf(pc[np].name, sizeof pc[np].name, "%s",
                 rename_from && !strcmp(t->name, rename_from) ? rename_to
                                                              : t->name);
        pc[np].dtype = t->dtype;
        pc[np].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++)
            pc[np].shape[d] = t->shape[d];
        pc[np].parts[0] = t;
        pc[np].n_parts = 1;
        np++;
    }
    json_t *h = json_object();
    uint64_t off = 0;
    for (int k = 0; k < np; k++) {
        uint64_t bytes = 0;
        for (int j = 0; j < pc[k].n_parts; j++)
            bytes += pc[k].parts[j]->nbytes;
        json_t *shape = json_array();
        for (int d = 0; d < pc[k].ndim; d++)
            json_array_append_new(shape, json_integer(pc[k].shape[d]));
        json_object_set_new(h, pc[k].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype",
                                      dtype_name(pc[k].dtype), "shape", shape,
                                      "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + bytes)));
        off += bytes;
    }
    char *hdr = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    const char *dir = temp_dir();
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    /* the header padded with spaces to 8 bytes keeps the data aligned */
    uint64_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    ck_assert_uint_eq(fwrite(&padded, 8, 1, f), 1);
    ck_assert_uint_eq(fwrite(hdr, 1, hl, f), hl);
    for (uint64_t i = hl; i < padded; i++)
        fputc(' ', f);
    for (int k = 0; k < np; k++)
        for (int j = 0; j < pc[k].n_parts; j++)
            ck_assert_uint_eq(
                fwrite(pc[k].parts[j]->data, 1, pc[k].parts[j]->nbytes, f),
                pc[k].parts[j]->nbytes);
    ck_assert_int_eq(fclose(f), 0);
    free(hdr);
    free(pc);
    loom_st_close(st);
    char from[1024];
    snprintf(from, sizeof from, "%s/config.json", fixture(rel));
    snprintf(path, sizeof path, "%s/config.json", dir);
    tm_copy_file(from, path);
    return dir;
}

/* The reference logits from a checkpoint directory holding `rel`'s weights
 * in another layout. */
static void check_dir_logits(const char *dir, const char *rel)
{
    loom_err err;
    loom_engine *e = tm_open(dir, 0, NULL, &err);
    ck_assert_msg(e != NULL, "%s", err.msg);
    tm_golden g;
    tm_read_golden(rel, 0, &g);
    size_t V = (size_t)e->info.vocab, n = (size_t)g.n_prompt;
    char path[1024];
    snprintf(path, sizeof path, "%s/logits.f32", fixture(rel));
    size_t n_ref;
    float *ref = read_f32(path, &n_ref);
    float *got = malloc(n * V * sizeof(float));
    loom_cache *c = tm_new_cache(e);
    feed_ok(e, c, 0, g.prompt, g.n_prompt, 0, got);
    double re = rel_err(got, ref, n * V);
    ck_assert_msg(re < 1e-4, "%s: rel err %g", dir, re);
    tm_cache_free(e, c);
    free(got);
    free(ref);
    loom_engine_close(e);
}

/* Experts stacked as [E, rows, cols] tensors load and give the same logits;
 * a stack of the wrong shape is refused by name. */
START_TEST(stacked_experts)
{
    check_dir_logits(rewritten(MOE, 1, NULL, NULL), MOE);
    const char *dir = rewritten(MOE, 1, NULL, NULL);
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    json_object_set_new(cfg, "moe_intermediate_size", json_integer(16));
    ck_assert_int_eq(json_dump_file(cfg, path, 0), 0);
    json_decref(cfg);
    loom_err err;
    loom_status rc;
    ck_assert_ptr_null(tm_open(dir, 0, &rc, &err));
    ck_assert_int_eq(rc, LOOM_ERR_FORMAT);
    ck_assert_ptr_nonnull(
        strstr(err.msg, "backbone.layers.1.mixer.experts.up_proj"));
}
END_TEST

/* Older checkpoints name the embedding table backbone.embedding; with
 * tie_word_embeddings and no lm_head.weight the head is the table. */
START_TEST(legacy_names_and_tied_head)
{
    check_dir_logits(rewritten(TINY, 0, "backbone.embeddings.weight",
                               "backbone.embedding.weight"),
                     TINY);
    /* the MoE fixture is tied and stores lm_head.weight equal to the table:
     * without it the table is used (and an mtp.* tensor is ignored) */
    check_dir_logits(
        rewritten(MOE, 0, "lm_head.weight", "mtp.layers.0.lm_head.weight"),
        MOE);
    /* untied and without lm_head.weight: refused, naming it */
    loom_err err;
    loom_status rc;
    ck_assert_ptr_null(tm_open(
        rewritten(TINY, 0, "lm_head.weight", "unused.lm_head"), 0, &rc, &err));
    ck_assert_int_eq(rc, LOOM_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "lm_head"));
}
END_TEST

/* probe: 100 for the architecture, 50 for the model_type alone, else 0 */
START_TEST(probe_scores)
{
    loom_engine *e = tm_open_ok(fixture(TINY), "nemotron");
    const loom_plugin *pl = e->plugin->plugin;
    const struct {
        const char *edit;
        int32_t score;
    } cases[] = {
        {"{}", 100},
        {"{\"architectures\": null}", 50},
        {"{\"architectures\": [\"Other\"], \"model_type\": \"nemotron_h\"}",
         50},
        {"{\"architectures\": [\"Other\"], \"model_type\": \"other\"}", 0},
    };
    for (int i = 0; i < 4; i++) {
        loom_checkpoint *ck;
        loom_err err;
        ck_assert_int_eq(loom_checkpoint_open(
                             tm_edited_copy(TINY, cases[i].edit, 0), &ck, &err),
                         LOOM_OK);
        ck_assert_int_eq(pl->probe(&e->hs.host, ck), cases[i].score);
        loom_checkpoint_close(ck);
    }
    ck_assert_ptr_null(pl->get_interface("loom.drafter/1"));
    ck_assert_int_eq(pl->abi_major, LOOM_ABI_MAJOR);
    loom_engine_close(e);
}
END_TEST

/* eos ids: an int or a list, from config.json and generation_config.json */
START_TEST(eos_ids)
{
    loom_err err;
    loom_engine *e =
        tm_open(tm_edited_copy(TINY, "{\"eos_token_id\": [2, 7, 2]}", 0), 0,
                NULL, &err);
    ck_assert_msg(e != NULL, "%s", err.msg);
    ck_assert_int_eq(e->info.n_eos, 2);
    ck_assert_int_eq(e->info.eos[0], 2);
    ck_assert_int_eq(e->info.eos[1], 7);
    loom_engine_close(e);
    const char *dir = tm_edited_copy(TINY, "{\"eos_token_id\": 9}", 0);
    write_text_in(dir, "generation_config.json", "{\"eos_token_id\": [11, 9]}");
    e = tm_open(dir, 0, NULL, &err);
    ck_assert_msg(e != NULL, "%s", err.msg);
    ck_assert_int_eq(e->info.n_eos, 2);
    ck_assert_int_eq(e->info.eos[0], 9);
    ck_assert_int_eq(e->info.eos[1], 11);
    loom_engine_close(e);
}
END_TEST

/* `layer_types` (transformers' alias) with the older kind names. */
START_TEST(layer_types_alias)
{
    loom_err err;
    loom_engine *e =
        tm_open(tm_edited_copy(TINY,
                               "{\"layers_block_type\": null, \"layer_types\": "
                               "[\"mamba\", \"mlp\", \"mamba\", \"attention\", "
                               "\"mlp\"]}",
                               0),
                0, NULL, &err);
    ck_assert_msg(e != NULL, "%s", err.msg);
    ck_assert_str_eq(e->info.layer_kinds, "M-MA-");
    loom_engine_close(e);
    /* both lists, disagreeing */
    loom_status rc;
    ck_assert_ptr_null(tm_open(
        tm_edited_copy(TINY,
                       "{\"layer_types\": [\"mamba\", \"mlp\", \"mamba\", "
                       "\"mlp\", \"mlp\"]}",
                       0),
        0, &rc, &err));
    ck_assert_int_eq(rc, LOOM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "layer_types"));
}
END_TEST

/* Bad rounds are refused and leave the cache as it was. */
START_TEST(bad_rounds)
{
    loom_engine *e = tm_open_ok(fixture(TINY), "nemotron");
    tm_golden g;
    tm_read_golden(TINY, 0, &g);
    size_t V = (size_t)e->info.vocab;
    float *got = malloc(V * sizeof(float)), *want = malloc(V * sizeof(float));
    loom_cache *c = tm_new_cache(e), *ref = tm_new_cache(e);
    loom_err err;
    feed_ok(e, c, 0, g.prompt, 4, 0, NULL);

    ck_assert_int_eq(feed(e, c, 3, g.prompt + 4, 1, 0, got, &err),
                     LOOM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "expects 4"));
    int32_t bad = 512;
    ck_assert_int_eq(feed(e, c, 4, &bad, 1, 0, got, &err), LOOM_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "token 512"));
    loom_row row = {c, g.prompt[4], 4, 0, LOOM_ROW_LOGITS};
    ck_assert_int_eq(tm_forward(e, &row, 1, got, &err), LOOM_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "parent 0"));
    /* a tapped row with layers tapped but no taps view */
    const loom_target_i *tg = tm_target(e);
    int32_t layer = 2;
    ck_assert_int_eq(tg->set_taps(e->model, &layer, 1, &err), LOOM_OK);
    row = (loom_row){c, g.prompt[4], 4, -1, LOOM_ROW_TAP | LOOM_ROW_LOGITS};
    ck_assert_int_eq(tm_forward(e, &row, 1, got, &err), LOOM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "taps"));
    ck_assert_int_eq(tg->set_taps(e->model, NULL, 0, &err), LOOM_OK);
    row = (loom_row){c, g.prompt[4], 4, -1, LOOM_ROW_LOGITS};
    ck_assert_int_eq(tm_forward(e, &row, 1, NULL, &err), LOOM_ERR_INVALID);
    tm_check_device_view_refused(e, &row);
    /* a plain row after a speculative one of the same stream */
    loom_row two[2] = {{c, g.prompt[4], 4, -1, LOOM_ROW_SPECULATIVE},
                       {c, g.prompt[5], 5, -1, 0}};
    ck_assert_int_eq(tm_forward(e, two, 2, NULL, &err), LOOM_ERR_INVALID);
    loom_round round = tm_round(&row, 1);
    ck_assert_int_eq(
        loom_family_forward(&e->family, e->model, &round, NULL, &err),
        LOOM_ERR_INVALID);
    loom_round no_rows = tm_round(NULL, 1);
    loom_output out = tm_output(got, 1, (int64_t)V, NULL, 0, 0);
    ck_assert_int_eq(
        loom_family_forward(&e->family, e->model, &no_rows, &out, &err),
        LOOM_ERR_INVALID);
    /* a round over the row limit */
    loom_row many[1];
    loom_round huge = tm_round(many, e->info.max_rows + 1);
    ck_assert_int_eq(
        loom_family_forward(&e->family, e->model, &huge, NULL, &err),
        LOOM_ERR_RANGE);

    /* after all that, the cache is as it was */
    feed_ok(e, c, 4, g.prompt + 4, 1, 0, got);
    feed_ok(e, ref, 0, g.prompt, 5, 0, NULL);
    tm_cache_reset(e, &ref);
    feed_ok(e, ref, 0, g.prompt, 4, 0, NULL);
    feed_ok(e, ref, 4, g.prompt + 4, 1, 0, want);
    ck_assert(memcmp(got, want, V * sizeof(float)) == 0);
    tm_cache_free(e, c);
    tm_cache_free(e, ref);
    free(got);
    free(want);
    loom_engine_close(e);
}
END_TEST

/* The context limit: a stream may not pass max_context. */
START_TEST(context_limit)
{
    loom_err err;
    loom_status rc;
    loom_engine *e = tm_open(fixture(TINY), 6, &rc, &err);
    ck_assert_int_eq(rc, LOOM_OK);
    ck_assert_int_eq(e->info.max_context, 6);
    tm_golden g;
    tm_read_golden(TINY, 0, &g);
    loom_cache *c = tm_new_cache(e);
    feed_ok(e, c, 0, g.prompt, 5, 0, NULL);
    ck_assert_int_eq(feed(e, c, 5, g.prompt + 5, 2, 0, NULL, &err),
                     LOOM_ERR_FULL);
    feed_ok(e, c, 5, g.prompt + 5, 1, 0, NULL);
    tm_cache_free(e, c);
    loom_engine_close(e);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("nemotron");
    TCase *t = tcase_create("golden");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, tiny_logits);
    tcase_add_test(t, tiny_greedy);
    tcase_add_test(t, moe_logits);
    tcase_add_test(t, moe_greedy);
    tcase_add_loop_test(t, chunked_prompts, 0, 2);
    tcase_add_loop_test(t, prompt_chunk_kernels, 0, 2);
    tcase_add_loop_test(t, prompt_chunks_in_turn, 0, 2);
    tcase_add_loop_test(t, two_streams, 0, 2);
    tcase_add_loop_test(t, commit_windows, 0, 2);
    tcase_add_loop_test(t, commit_two_streams, 0, 2);
    tcase_add_loop_test(t, taps, 0, 2);
    tcase_add_loop_test(t, target, 0, 2);
    tcase_add_test(t, stacked_experts);
    tcase_add_test(t, legacy_names_and_tied_head);
    suite_add_tcase(s, t);
    TCase *r = tcase_create("refusals");
    tcase_set_timeout(r, 120);
    tcase_add_test(r, describe_and_geometry);
    tcase_add_loop_test(r, broken_geometry, 0,
                        (int)(sizeof refusals / sizeof refusals[0]));
    tcase_add_test(r, legacy_config);
    tcase_add_test(r, probe_scores);
    tcase_add_test(r, layer_types_alias);
    tcase_add_test(r, eos_ids);
    tcase_add_test(r, bad_rounds);
    tcase_add_test(r, context_limit);
    suite_add_tcase(s, r);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
