/* cache_copy (ABI 2.2) of the qwen35 family on the GPU: a copied device
 * cache continues exactly like its source and like a cache fed the same
 * rows itself (bitwise equal logits for the next steps, one row at a time
 * and as a chunk), the copy owns its pages (its source reset and its pages
 * taken by another stream change nothing), a copy drops what dst held, and
 * a source with an uncommitted window is refused; and a lane group of n
 * streams of one prompt (shared prefill, first draws on the device from
 * the leader's row) emits what lone streams with the members' seeds emit.
 * Skipped (77) without a driver or device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/cuda_runtime.h>
#include <loom/engine.h>
#include <loom/family.h>
#include <loom/lane.h>

#include "gpuutil.h"
#include "testmodel.h"
#include "testutil.h"

/* positions over several K/V pages (Q35_KV_PAGE is 16) */
#define PROMPT_N 41
#define STEPS    5

static loom_engine *open_cuda(const char *dir)
{
    return gpu_open(dir, LOOM_DEVICE_CUDA, 0, "qwen35");
}

/* Feeds ids[0..n) from pos0, `chunk` rows a forward, each flagged `flags`
 * (LOOM_ROW_LOGITS added when out is not NULL: every row's logits). */
static void feed(loom_engine *e, loom_cache *c, int32_t pos0,
                 const int32_t *ids, int32_t n, int32_t chunk, uint32_t flags,
                 float *out)
{
    int32_t V = e->info.vocab;
    loom_row rows[64];
    ck_assert_int_le(chunk, 64);
    for (int32_t p = 0; p < n; p += chunk) {
        int32_t k = n - p < chunk ? n - p : chunk;
        for (int32_t i = 0; i < k; i++)
            rows[i] = (loom_row){c, ids[p + i], pos0 + p + i, -1,
                                 flags | (out ? LOOM_ROW_LOGITS : 0u)};
        loom_round r = {sizeof r, sizeof(loom_row), rows, k};
        loom_output o;
        memset(&o, 0, sizeof o);
        o.struct_size = sizeof o;
        if (out)
            o.logits = loom_view_host_f32(out + (size_t)p * (size_t)V, k, V);
        loom_err err = {{0}};
        ck_assert_msg(loom_family_forward(&e->family, e->model, &r, &o, &err) ==
                          LOOM_OK,
                      "forward: %s", err.msg);
    }
}

static loom_status copy(loom_engine *e, loom_cache *dst, const loom_cache *src,
                        loom_err *err)
{
    return loom_family_cache_copy(&e->family, e->model, dst, src, err);
}

START_TEST(copy_continues_exactly)
{
    loom_engine *e = open_cuda(fixture("models/qwen35-tiny"));
    ck_assert(loom_family_has_cache_copy(&e->family));
    int32_t V = e->info.vocab;
    int32_t ids[PROMPT_N], junk[60], next[STEPS + 3];
    for (int32_t i = 0; i < PROMPT_N; i++)
        ids[i] = (i * 37 + 11) % V;
    for (int32_t i = 0; i < 60; i++)
        junk[i] = (i * 53 + 5) % V;
    for (int32_t i = 0; i < STEPS + 3; i++)
        next[i] = (i * 29 + 3) % V;
    size_t row = (size_t)V * sizeof(float);
    float *la = malloc(3 * row), *lb = malloc(3 * row), *lr = malloc(3 * row);
    ck_assert(la && lb && lr);

    loom_cache *a = tm_new_cache(e), *b = tm_new_cache(e),
               *ref = tm_new_cache(e);
    feed(e, a, 0, ids, PROMPT_N, 16, 0, NULL);
    feed(e, ref, 0, ids, PROMPT_N, 16, 0, NULL);
    /* b held a longer history (more pages): the copy drops it */
    feed(e, b, 0, junk, 60, 20, 0, NULL);
    loom_err err = {{0}};
    ck_assert_msg(copy(e, b, a, &err) == LOOM_OK, "copy: %s", err.msg);

    for (int32_t s = 0; s < STEPS; s++) {
        feed(e, a, PROMPT_N + s, next + s, 1, 1, 0, la);
        feed(e, b, PROMPT_N + s, next + s, 1, 1, 0, lb);
        feed(e, ref, PROMPT_N + s, next + s, 1, 1, 0, lr);
        ck_assert_msg(memcmp(la, lb, row) == 0,
                      "step %d: the copy's logits differ from its source's", s);
        ck_assert_msg(memcmp(lr, lb, row) == 0,
                      "step %d: the copy's logits differ from a cache fed "
                      "the rows itself",
                      s);
    }
    /* a's pages go back and another stream takes them: b has its own */
    loom_family_cache_reset(&e->family, e->model, &a, &err);
    loom_cache *c = tm_new_cache(e);
    feed(e, c, 0, junk, 60, 30, 0, NULL);
    feed(e, b, PROMPT_N + STEPS, next + STEPS, 3, 3, 0, lb);
    feed(e, ref, PROMPT_N + STEPS, next + STEPS, 3, 3, 0, lr);
    ck_assert_msg(memcmp(lr, lb, 3 * row) == 0,
                  "the copy changed when its source's pages were reused");

    loom_family_cache_free(&e->family, e->model, a);
    loom_family_cache_free(&e->family, e->model, b);
    loom_family_cache_free(&e->family, e->model, c);
    loom_family_cache_free(&e->family, e->model, ref);
    free(la);
    free(lb);
    free(lr);
    loom_engine_close(e);
}
END_TEST

START_TEST(open_window_refused)
{
    loom_engine *e = open_cuda(fixture("models/qwen35-tiny"));
    int32_t V = e->info.vocab;
    int32_t ids[24];
    for (int32_t i = 0; i < 24; i++)
        ids[i] = (i * 37 + 11) % V;
    size_t row = (size_t)V * sizeof(float);
    float *got = malloc(row), *want = malloc(row);
    loom_cache *a = tm_new_cache(e), *b = tm_new_cache(e),
               *ref = tm_new_cache(e);
    feed(e, a, 0, ids, 18, 18, 0, NULL);
    feed(e, a, 18, ids + 18, 4, 4, LOOM_ROW_SPECULATIVE, NULL);
    loom_err err = {{0}};
    ck_assert_int_eq(copy(e, b, a, &err), LOOM_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(err.msg, "window"));
    ck_assert_int_eq(loom_family_commit(&e->family, e->model, a, 2, &err),
                     LOOM_OK);
    ck_assert_msg(copy(e, b, a, &err) == LOOM_OK, "copy: %s", err.msg);
    feed(e, b, 20, ids + 22, 1, 1, 0, got);
    /* a cache given the same history itself, window and commit included */
    feed(e, ref, 0, ids, 18, 18, 0, NULL);
    feed(e, ref, 18, ids + 18, 4, 4, LOOM_ROW_SPECULATIVE, NULL);
    ck_assert_int_eq(loom_family_commit(&e->family, e->model, ref, 2, &err),
                     LOOM_OK);
    feed(e, ref, 20, ids + 22, 1, 1, 0, want);
    ck_assert_msg(memcmp(got, want, row) == 0,
                  "the copy of a committed cache differs");
    feed(e, a, 20, ids + 22, 1, 1, 0, want);
    ck_assert(memcmp(got, want, row) == 0);
    loom_family_cache_free(&e->family, e->model, a);
    loom_family_cache_free(&e->family, e->model, b);
    loom_family_cache_free(&e->family, e->model, ref);
    free(got);
    free(want);
    loom_engine_close(e);
}
END_TEST

typedef struct collected {
    int32_t tokens[64];
    int32_t n;
    int finals;
} collected;

static int collect(void *user, const loom_lane_event *ev)
{
    collected *c = (collected *)user;
    if (ev->token >= 0 && c->n < 64)
        c->tokens[c->n++] = ev->token;
    if (ev->finish != LOOM_FINISH_NONE)
        c->finals++;
    return 0;
}

static loom_lane *cuda_lane(loom_engine *e)
{
    loom_lane_params lp;
    memset(&lp, 0, sizeof lp);
    lp.engine = e;
    lp.max_streams = 4;
    lp.round_tokens = 32;
    lp.prefill_chunk = 16;
    loom_lane *lane = NULL;
    loom_err err = {{0}};
    ck_assert_msg(loom_lane_new(&lp, &lane, &err) == LOOM_OK, "%s", err.msg);
    return lane;
}

static uint64_t run_lane(loom_lane *lane)
{
    for (int guard = 0; loom_lane_pending(lane) > 0; guard++) {
        ck_assert_int_lt(guard, 10000);
        loom_err err = {{0}};
        ck_assert_msg(loom_lane_step(lane, NULL, &err) == LOOM_OK, "%s",
                      err.msg);
    }
    loom_lane_stats st;
    loom_lane_get_stats(lane, &st);
    return st.prompt_tokens;
}

START_TEST(lane_group_on_device)
{
    loom_engine *e = open_cuda(fixture("models/qwen35-tiny"));
    int32_t V = e->info.vocab;
    int32_t ids[PROMPT_N];
    for (int32_t i = 0; i < PROMPT_N; i++)
        ids[i] = (i * 37 + 11) % V;
    enum { N = 3 };
    loom_stream_params p[N];
    collected got[N], lone[N];
    memset(got, 0, sizeof got);
    memset(lone, 0, sizeof lone);
    for (int i = 0; i < N; i++) {
        memset(&p[i], 0, sizeof p[i]);
        p[i].prompt = ids;
        p[i].n_prompt = PROMPT_N;
        loom_sample_params_default(&p[i].sample);
        p[i].sample.temperature = 1.0f;
        p[i].sample.seed = 7 + (uint64_t)i * 0x9E3779B97F4A7C15ull;
        p[i].sample.has_seed = 1;
        p[i].max_tokens = 12;
        p[i].ignore_eos = 1;
        p[i].cb = collect;
        p[i].user = &got[i];
    }
    loom_lane *lane = cuda_lane(e);
    loom_err err = {{0}};
    ck_assert_msg(loom_lane_add_group(lane, p, N, NULL, &err) == LOOM_OK, "%s",
                  err.msg);
    ck_assert_uint_eq(run_lane(lane), PROMPT_N);
    loom_lane_free(lane);
    for (int i = 0; i < N; i++) {
        loom_lane *one = cuda_lane(e);
        loom_stream_params q = p[i];
        q.user = &lone[i];
        ck_assert_msg(loom_lane_add(one, &q, NULL, &err) == LOOM_OK, "%s",
                      err.msg);
        run_lane(one);
        loom_lane_free(one);
        ck_assert_int_eq(got[i].finals, 1);
        ck_assert_int_eq(got[i].n, 12);
        ck_assert_int_eq(lone[i].n, 12);
        for (int32_t t = 0; t < 12; t++)
            ck_assert_msg(got[i].tokens[t] == lone[i].tokens[t],
                          "member %d token %d: %d, lone stream %d", i, t,
                          got[i].tokens[t], lone[i].tokens[t]);
    }
    loom_engine_close(e);
}
END_TEST

int main(void)
{
    loom_cuda_facts facts;
    if (!gpu_probe(&facts))
        return GPU_SKIP;
    printf("device: %s (sm_%d%d)\n", facts.name, facts.cc_major,
           facts.cc_minor);
    Suite *s = suite_create("qwen35_gpu_copy");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, copy_continues_exactly);
    tcase_add_test(tc, open_window_refused);
    tcase_add_test(tc, lane_group_on_device);
    suite_add_tcase(s, tc);
    return gpu_run_suite(s);
}
