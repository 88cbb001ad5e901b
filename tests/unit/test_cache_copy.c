/* cache_copy (ABI 2.2) of the qwen35 and nemotron families on the CPU: a
 * copy of a cache continues exactly like its source and like a cache that
 * was fed the same rows itself (bit for bit), a copy of a prompt decodes
 * transformers' greedy tokens, the copy replaces what dst held, and a
 * source with an uncommitted window is refused. */
#include <stdlib.h>
#include <string.h>

#include <loom/engine.h>
#include <loom/family.h>

#include "testmodel.h"
#include "testutil.h"

static const char *const models[] = {
    "models/qwen35-tiny",
    "models/qwen35-moe-tiny",
    "models/nemotron-h-tiny",
    "models/nemotron-h-moe-tiny",
};
static const char *const plugins[] = {"qwen35", "qwen35", "nemotron",
                                      "nemotron"};

/* Feeds toks[0..n) to c from position pos0 as one round; every row's
 * logits into out ([n, vocab]) when out is not NULL. */
static void feed(loom_engine *e, loom_cache *c, int32_t pos0,
                 const int32_t *toks, int n, uint32_t flags, float *out)
{
    loom_row rows[64];
    ck_assert_int_le(n, 64);
    for (int i = 0; i < n; i++)
        rows[i] = (loom_row){c, toks[i], pos0 + i, -1,
                             flags | (out ? LOOM_ROW_LOGITS : 0u)};
    loom_err err = {{0}};
    loom_status rc = tm_forward(e, rows, n, out, &err);
    ck_assert_msg(rc == LOOM_OK, "forward of %d rows at %d: %s", n, pos0,
                  err.msg);
}

static loom_status copy(loom_engine *e, loom_cache *dst, const loom_cache *src,
                        loom_err *err)
{
    return loom_family_cache_copy(&e->family, e->model, dst, src, err);
}

/* The engine of models[i] (claimed by plugins[i]), its golden (without
 * logits) in *g, and three fresh caches. */
static loom_engine *open_model(int i, tm_golden *g, loom_cache **a,
                               loom_cache **b, loom_cache **c)
{
    loom_engine *e = tm_open_ok(fixture(models[i]), plugins[i]);
    tm_read_golden(models[i], 0, g);
    *a = tm_new_cache(e);
    *b = tm_new_cache(e);
    *c = tm_new_cache(e);
    return e;
}

static void close_model(loom_engine *e, loom_cache *a, loom_cache *b,
                        loom_cache *c)
{
    tm_cache_free(e, a);
    tm_cache_free(e, b);
    tm_cache_free(e, c);
    loom_engine_close(e);
}

/* After the prompt: a copy, its source and a cache fed the prompt itself
 * give the same logits for the next rows, one at a time and as a chunk; the
 * copy's source is left as it was. */
START_TEST(copy_continues_like_source)
{
    const char *rel = models[_i];
    tm_golden g;
    loom_cache *a, *b, *ref;
    loom_engine *e = open_model(_i, &g, &a, &b, &ref);
    ck_assert(loom_family_has_cache_copy(&e->family));
    size_t V = (size_t)e->info.vocab;
    int32_t P = g.n_prompt;
    ck_assert_int_ge(P, 8);
    float *la = malloc(4 * V * sizeof(float));
    float *lb = malloc(4 * V * sizeof(float));
    float *lr = malloc(4 * V * sizeof(float));
    /* the prompt in two chunks into a, in the same chunks into ref */
    feed(e, a, 0, g.prompt, 5, 0, NULL);
    feed(e, a, 5, g.prompt + 5, P - 5, 0, NULL);
    feed(e, ref, 0, g.prompt, 5, 0, NULL);
    feed(e, ref, 5, g.prompt + 5, P - 5, 0, NULL);
    /* b held another history, longer than the prompt: the copy drops it */
    int32_t junk[40];
    for (int i = 0; i < 40; i++)
        junk[i] = g.prompt[(i * 7) % P];
    feed(e, b, 0, junk, 40, 0, NULL);
    loom_err err = {{0}};
    ck_assert_msg(copy(e, b, a, &err) == LOOM_OK, "copy: %s", err.msg);

    /* three steps of one row, then a chunk of three */
    const int32_t next[6] = {g.prompt[1], g.prompt[3], g.prompt[0],
                             g.prompt[2], g.prompt[4], g.prompt[6]};
    for (int s = 0; s < 3; s++) {
        feed(e, b, P + s, next + s, 1, 0, lb);
        feed(e, a, P + s, next + s, 1, 0, la);
        feed(e, ref, P + s, next + s, 1, 0, lr);
        ck_assert_msg(memcmp(la, lb, V * sizeof(float)) == 0,
                      "%s step %d: the copy's logits differ from its source's",
                      rel, s);
        ck_assert_msg(memcmp(lr, lb, V * sizeof(float)) == 0,
                      "%s step %d: the copy's logits differ from a cache fed "
                      "the rows itself",
                      rel, s);
    }
    feed(e, b, P + 3, next + 3, 3, 0, lb);
    feed(e, a, P + 3, next + 3, 3, 0, la);
    feed(e, ref, P + 3, next + 3, 3, 0, lr);
    ck_assert(memcmp(la, lb, 3 * V * sizeof(float)) == 0);
    ck_assert(memcmp(lr, lb, 3 * V * sizeof(float)) == 0);

    free(la);
    free(lb);
    free(lr);
    close_model(e, a, b, ref);
}
END_TEST

/* Two copies of one prompt's cache each decode transformers' greedy
 * continuation from the prompt's last logits. */
START_TEST(copies_decode_greedy)
{
    const char *rel = models[_i];
    tm_golden g;
    loom_cache *src, *c1, *c2;
    loom_engine *e = open_model(_i, &g, &src, &c1, &c2);
    size_t V = (size_t)e->info.vocab;
    float *lg = malloc((size_t)g.n_prompt * V * sizeof(float));
    feed(e, src, 0, g.prompt, g.n_prompt, 0, lg);
    const float *last = lg + (size_t)(g.n_prompt - 1) * V;
    loom_err err = {{0}};
    ck_assert_msg(copy(e, c1, src, &err) == LOOM_OK, "copy: %s", err.msg);
    ck_assert_msg(copy(e, c2, c1, &err) == LOOM_OK, "copy: %s", err.msg);
    tm_check_greedy(rel, e, c2, &g, last);
    tm_check_greedy(rel, e, c1, &g, last);
    tm_check_greedy(rel, e, src, &g, last);
    free(lg);
    close_model(e, src, c1, c2);
}
END_TEST

/* A source with an uncommitted window is refused (LOOM_ERR_STATE) and dst
 * keeps what it held; after the commit the copy continues like the source
 * (and like a cache fed only the kept rows). */
START_TEST(open_window_refused)
{
    const char *rel = models[_i];
    tm_golden g;
    loom_cache *a, *b, *ref;
    loom_engine *e = open_model(_i, &g, &a, &b, &ref);
    size_t V = (size_t)e->info.vocab;
    float *got = malloc(V * sizeof(float));
    float *want = malloc(V * sizeof(float));
    float *mine = malloc(V * sizeof(float));
    const int pre = 6, k = 4;
    feed(e, a, 0, g.prompt, pre, 0, NULL);
    feed(e, a, pre, g.prompt + pre, k, LOOM_ROW_SPECULATIVE, NULL);
    feed(e, b, 0, g.prompt, 3, 0, NULL);
    loom_err err = {{0}};
    ck_assert_int_eq(copy(e, b, a, &err), LOOM_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(err.msg, "window"));
    /* b is untouched: it continues from its own three rows */
    feed(e, b, 3, g.prompt + 3, 1, 0, mine);
    feed(e, ref, 0, g.prompt, 3, 0, NULL);
    feed(e, ref, 3, g.prompt + 3, 1, 0, want);
    ck_assert(memcmp(mine, want, V * sizeof(float)) == 0);

    ck_assert_int_eq(tm_commit(e, a, 2, &err), LOOM_OK);
    ck_assert_msg(copy(e, b, a, &err) == LOOM_OK, "copy: %s", err.msg);
    int32_t next = g.prompt[1];
    feed(e, b, pre + 2, &next, 1, 0, got);
    tm_cache_reset(e, &ref);
    feed(e, ref, 0, g.prompt, pre + 2, 0, NULL);
    feed(e, ref, pre + 2, &next, 1, 0, want);
    ck_assert_msg(memcmp(got, want, V * sizeof(float)) == 0,
                  "%s: the copy of a committed cache differs", rel);
    feed(e, a, pre + 2, &next, 1, 0, mine);
    ck_assert(memcmp(got, mine, V * sizeof(float)) == 0);

    /* a copy of an empty cache is empty */
    tm_cache_reset(e, &ref);
    ck_assert_int_eq(copy(e, b, ref, &err), LOOM_OK);
    feed(e, b, 0, g.prompt, 1, 0, got);
    feed(e, ref, 0, g.prompt, 1, 0, want);
    ck_assert(memcmp(got, want, V * sizeof(float)) == 0);

    free(got);
    free(want);
    free(mine);
    close_model(e, a, b, ref);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cache_copy");
    TCase *t = tcase_create("families");
    tcase_set_timeout(t, 600);
    int n = (int)(sizeof models / sizeof models[0]);
    tcase_add_loop_test(t, copy_continues_like_source, 0, n);
    tcase_add_loop_test(t, copies_decode_greedy, 0, n);
    tcase_add_loop_test(t, open_window_refused, 0, n);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
