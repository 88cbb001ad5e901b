/* Groups of streams of one prompt (loom_lane_add_group) share its prefill:
 * each member emits exactly the tokens a lone stream with its parameters
 * emits (a lone lane run and a plain one-row loop over the family, no
 * lane, are the references), the prompt's rows are forwarded once per
 * group (the stats' prompt_tokens), members that cannot share prefill
 * themselves (a family without cache_copy, a group larger than the lane's
 * streams, a leader cancelled mid-prompt), and bad groups are refused
 * whole. On the toy family and on qwen35-tiny when its plugin is built. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/engine.h>
#include <loom/lane.h>
#include <loom/log.h>
#include <loom/platform.h>

#include "testlane.h"
#include "testutil.h"

#define MAXTOK 256
#define NMAX   6

static loom_engine *open_engine(const char *model, const char *plugin_dir,
                                const char *family)
{
    return tl_open_engine(model, plugin_dir, family, 0, 1);
}

static loom_engine *open_toy(void)
{
    return open_engine(fixture("models/toy"), LOOM_TEST_PLUGIN_DIR, NULL);
}

typedef struct collector {
    int32_t tokens[MAXTOK];
    int32_t n;
    int n_final, after_final;
    loom_finish finish;
    uint64_t seed;
    int32_t n_prompt;
} collector;

static int collect(void *user, const loom_lane_event *ev)
{
    collector *c = (collector *)user;
    if (c->n_final)
        c->after_final++;
    if (ev->token >= 0 && c->n < MAXTOK)
        c->tokens[c->n++] = ev->token;
    c->seed = ev->seed;
    c->n_prompt = ev->n_prompt;
    if (ev->finish != LOOM_FINISH_NONE) {
        c->n_final++;
        c->finish = ev->finish;
    }
    return 0;
}

static void run_idle(loom_lane *lane)
{
    for (int guard = 0; loom_lane_pending(lane) > 0; guard++) {
        ck_assert_int_lt(guard, 100000);
        loom_err err;
        ck_assert_msg(loom_lane_step(lane, NULL, &err) == LOOM_OK, "%s",
                      err.msg);
    }
}

/* What a lone stream must produce: the family fed one row at a time with a
 * cache of its own, sampled at each token's position. No lane. */
static int32_t reference(loom_engine *e, const int32_t *prompt, int32_t n,
                         const loom_sample_params *sp, int32_t max_tokens,
                         int32_t *out)
{
    const loom_family *f = &e->family;
    int32_t V = e->info.vocab;
    loom_cache *cache = NULL;
    loom_err err;
    ck_assert_msg(loom_family_cache_new(f, e->model, &cache, &err) == LOOM_OK,
                  "%s", err.msg);
    loom_sampler *s = NULL;
    ck_assert_int_eq(loom_sampler_new(sp, V, 0, &s, &err), LOOM_OK);
    float *logits = malloc(sizeof(float) * (size_t)V);
    for (int32_t i = 0; i < n; i++)
        loom_sampler_accept(s, prompt[i], 0);
    int32_t pos = 0, ng = 0, tok = prompt[0];
    for (;;) {
        int32_t feed = pos < n ? prompt[pos] : tok;
        loom_row row = {cache, feed, pos, -1,
                        pos >= n - 1 ? LOOM_ROW_LOGITS : 0u};
        loom_round r = {sizeof r, sizeof row, &row, 1};
        loom_output o = {sizeof o, loom_view_host_f32(logits, 1, V), {0}};
        ck_assert_msg(loom_family_forward(f, e->model, &r, &o, &err) == LOOM_OK,
                      "%s", err.msg);
        pos++;
        if (pos < n)
            continue;
        loom_sample_result res;
        loom_sampler_sample(s, logits, pos, &res);
        loom_sampler_accept(s, res.token, 1);
        tok = res.token;
        out[ng++] = tok;
        int eos = 0;
        for (int32_t i = 0; i < e->info.n_eos; i++)
            eos |= e->info.eos[i] == tok;
        if (eos || (max_tokens > 0 && ng >= max_tokens) || ng >= MAXTOK ||
            n + ng >= e->info.max_context)
            break;
    }
    free(logits);
    loom_sampler_free(s);
    loom_family_cache_free(f, e->model, cache);
    return ng;
}

/* A group's members: one prompt, each its own seed (derived from the
 * first as the server derives n choices' seeds) and length. */
typedef struct group {
    int32_t prompt[64];
    int32_t n_prompt;
    int32_t n;
    loom_stream_params p[NMAX];
    collector c[NMAX];
} group;

static void group_init(group *g, int32_t n, int32_t n_prompt, int32_t vocab,
                       float temperature)
{
    memset(g, 0, sizeof *g);
    g->n = n;
    g->n_prompt = n_prompt;
    uint64_t x = 777;
    for (int32_t j = 0; j < n_prompt; j++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        g->prompt[j] = (int32_t)((x >> 33) % (uint64_t)(vocab - 2));
    }
    for (int32_t i = 0; i < n; i++) {
        loom_stream_params *p = &g->p[i];
        p->prompt = g->prompt;
        p->n_prompt = n_prompt;
        loom_sample_params_default(&p->sample);
        p->sample.temperature = temperature;
        p->sample.top_k = 40;
        p->sample.seed = 4242 + (uint64_t)i * 0x9E3779B97F4A7C15ull;
        p->sample.has_seed = 1;
        p->max_tokens = 12 + 3 * i;
        p->cb = collect;
        p->user = &g->c[i];
    }
}

static uint64_t prompt_rows(loom_lane *lane)
{
    loom_lane_stats st;
    loom_lane_get_stats(lane, &st);
    return st.prompt_tokens;
}

/* Each member's tokens equal a lone lane stream's with its parameters and
 * the plain loop's. */
static void check_members(loom_engine *e, group *g, int32_t max_streams,
                          int32_t round_tokens, int32_t chunk)
{
    for (int32_t i = 0; i < g->n; i++) {
        collector *c = &g->c[i];
        ck_assert_int_eq(c->n_final, 1);
        ck_assert_int_eq(c->after_final, 0);
        ck_assert_uint_eq(c->seed, g->p[i].sample.seed);
        ck_assert_int_eq(c->n_prompt, g->n_prompt);

        loom_lane *lone = tl_new_lane(e, max_streams, round_tokens, chunk);
        collector alone = {0};
        loom_stream_params p = g->p[i];
        p.user = &alone;
        loom_err err;
        ck_assert_msg(loom_lane_add(lone, &p, NULL, &err) == LOOM_OK, "%s",
                      err.msg);
        run_idle(lone);
        ck_assert_uint_eq(prompt_rows(lone), (uint64_t)g->n_prompt);
        loom_lane_free(lone);

        int32_t ref[MAXTOK];
        int32_t nref = reference(e, g->prompt, g->n_prompt, &g->p[i].sample,
                                 g->p[i].max_tokens, ref);
        ck_assert_msg(alone.n == nref, "member %d: lone run %d tokens, loop %d",
                      i, alone.n, nref);
        ck_assert_msg(c->n == nref, "member %d: %d tokens, lone stream %d", i,
                      c->n, nref);
        for (int32_t t = 0; t < nref; t++) {
            ck_assert_int_eq(alone.tokens[t], ref[t]);
            ck_assert_msg(c->tokens[t] == ref[t],
                          "member %d token %d: %d, lone stream %d", i, t,
                          c->tokens[t], ref[t]);
        }
    }
}

static void add_group(loom_lane *lane, group *g, uint64_t *ids)
{
    loom_err err;
    ck_assert_msg(loom_lane_add_group(lane, g->p, g->n, ids, &err) == LOOM_OK,
                  "%s", err.msg);
}

/* Group g in a fresh lane run to its end: the prompt's rows forwarded are
 * `rows`, and each member's tokens are the lone streams'. */
static void run_group(loom_engine *e, group *g, int32_t max_streams,
                      int32_t round_tokens, int32_t chunk, uint64_t rows)
{
    loom_lane *lane = tl_new_lane(e, max_streams, round_tokens, chunk);
    add_group(lane, g, NULL);
    run_idle(lane);
    ck_assert_uint_eq(prompt_rows(lane), rows);
    loom_lane_free(lane);
    check_members(e, g, max_streams, round_tokens, chunk);
}

/* A group of three with 20-token prompts in chunks of 6, member `who`
 * cancelled after the first step (its rows in *rows when not NULL): it
 * ends cancelled with no token. Returns the lane, run to its end. */
static loom_lane *run_cancelling(loom_engine *e, group *g, int32_t who,
                                 int32_t *rows)
{
    group_init(g, 3, 20, e->info.vocab, 0.9f);
    loom_lane *lane = tl_new_lane(e, 4, 32, 6);
    uint64_t ids[NMAX];
    add_group(lane, g, ids);
    loom_err err;
    ck_assert_int_eq(loom_lane_step(lane, rows, &err), LOOM_OK);
    loom_lane_cancel(lane, ids[who]);
    run_idle(lane);
    ck_assert_int_eq(g->c[who].finish, LOOM_FINISH_CANCELLED);
    ck_assert_int_eq(g->c[who].n, 0);
    return lane;
}

/* ---------------------------------------------------------------- toy */

/* Four members, a prompt fed in chunks of 7 over several rounds, another
 * stream sharing the rounds: each member emits the lone stream's tokens,
 * and the prompt's 23 rows are forwarded once. */
START_TEST(members_equal_lone_streams_and_prefill_once)
{
    loom_engine *e = open_toy();
    group g;
    group_init(&g, 4, 23, e->info.vocab, 0.9f);
    loom_lane *lane = tl_new_lane(e, 8, 64, 7);
    uint64_t ids[NMAX] = {0};
    add_group(lane, &g, ids);
    for (int32_t i = 1; i < g.n; i++)
        ck_assert_uint_eq(ids[i], ids[0] + (uint64_t)i);
    /* company with a prompt of its own */
    group other;
    group_init(&other, 1, 9, e->info.vocab, 0.0f);
    other.prompt[0] = 5;
    add_group(lane, &other, NULL);
    run_idle(lane);
    ck_assert_uint_eq(prompt_rows(lane), 23u + 9u);
    loom_lane_stats st;
    loom_lane_get_stats(lane, &st);
    ck_assert_uint_eq(st.streams_added, 5);
    ck_assert_uint_eq(st.streams_finished, 5);
    uint64_t gen = 0;
    for (int32_t i = 0; i < g.n; i++)
        gen += (uint64_t)g.c[i].n;
    ck_assert_uint_eq(st.generated_tokens, gen + (uint64_t)other.c[0].n);
    ck_assert_int_eq(st.pool_free, st.pool_total);
    loom_lane_free(lane);
    check_members(e, &g, 8, 64, 7);
    check_members(e, &other, 8, 64, 7);
    loom_engine_close(e);
}
END_TEST

/* A one-row prompt and greedy members: the shared row is the prompt. */
START_TEST(one_token_prompt_greedy)
{
    loom_engine *e = open_toy();
    group g;
    group_init(&g, 3, 1, e->info.vocab, 0.0f);
    run_group(e, &g, 4, 16, 0, 1u);
    loom_engine_close(e);
}
END_TEST

/* Without cache_copy (tp-toy-bare) every member prefills, as n lone
 * streams would: the same tokens, n times the prompt's rows. */
START_TEST(family_without_cache_copy_prefills_each)
{
    loom_engine *e =
        open_engine(fixture("models/toy"), LOOM_TEST_PLUGIN_DIR, "tp-toy-bare");
    ck_assert(!loom_family_has_cache_copy(&e->family));
    loom_cache *a = NULL, *b = NULL;
    loom_err err;
    ck_assert_int_eq(loom_family_cache_new(&e->family, e->model, &a, &err),
                     LOOM_OK);
    ck_assert_int_eq(loom_family_cache_new(&e->family, e->model, &b, &err),
                     LOOM_OK);
    ck_assert_int_eq(loom_family_cache_copy(&e->family, e->model, b, a, &err),
                     LOOM_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "tp-toy-bare"));
    loom_family_cache_free(&e->family, e->model, a);
    loom_family_cache_free(&e->family, e->model, b);

    group g;
    group_init(&g, 3, 17, e->info.vocab, 0.9f);
    run_group(e, &g, 4, 32, 5, 3u * 17u);
    loom_engine_close(e);
}
END_TEST

/* Five members in a lane of two streams: members 0 and 1 share, 2 and 3
 * (admitted when those end, in the same round) share again, 4 is alone. */
START_TEST(group_larger_than_the_lane)
{
    loom_engine *e = open_toy();
    group g;
    group_init(&g, 5, 11, e->info.vocab, 0.9f);
    for (int32_t i = 0; i < g.n; i++)
        g.p[i].max_tokens = 8;
    run_group(e, &g, 2, 32, 4, 3u * 11u);
    loom_engine_close(e);
}
END_TEST

/* The leader cancelled after its first chunk: the next member leads from
 * the start and the third follows it; both emit the lone streams'
 * tokens. */
START_TEST(cancelled_leader_hands_the_prompt_on)
{
    loom_engine *e = open_toy();
    group g;
    int32_t rows = 0;
    loom_lane *lane = run_cancelling(e, &g, 0, &rows);
    ck_assert_int_eq(rows, 6); /* the leader's chunk; the others wait */
    ck_assert_uint_eq(prompt_rows(lane), 6u + 20u);
    loom_lane_free(lane);
    /* members 1 and 2 against lone runs */
    group rest = g;
    rest.n = 2;
    rest.p[0] = g.p[1];
    rest.p[1] = g.p[2];
    rest.c[0] = g.c[1];
    rest.c[1] = g.c[2];
    check_members(e, &rest, 4, 32, 6);
    loom_engine_close(e);
}
END_TEST

/* A cancelled follower ends alone; the others go on. */
START_TEST(cancelled_follower_ends_alone)
{
    loom_engine *e = open_toy();
    group g;
    loom_lane *lane = run_cancelling(e, &g, 1, NULL);
    ck_assert_uint_eq(prompt_rows(lane), 20u);
    loom_lane_free(lane);
    group rest = g;
    rest.n = 2;
    rest.p[1] = g.p[2];
    rest.c[1] = g.c[2];
    check_members(e, &rest, 4, 32, 6);
    loom_engine_close(e);
}
END_TEST

/* A group whose members' prompts differ, or with a bad member, is refused
 * whole: nothing is added. */
START_TEST(bad_groups_are_refused_whole)
{
    loom_engine *e = open_toy();
    loom_lane *lane = tl_new_lane(e, 4, 32, 0);
    group g;
    group_init(&g, 3, 8, e->info.vocab, 0.9f);
    int32_t other[8];
    memcpy(other, g.prompt, sizeof other);
    other[7] ^= 1;
    g.p[2].prompt = other;
    loom_err err;
    ck_assert_int_eq(loom_lane_add_group(lane, g.p, 3, NULL, &err),
                     LOOM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "member 2"));
    g.p[2].prompt = g.prompt;
    g.p[1].sample.temperature = -1.0f;
    ck_assert_int_ne(loom_lane_add_group(lane, g.p, 3, NULL, &err), LOOM_OK);
    ck_assert_int_eq(loom_lane_add_group(lane, g.p, 0, NULL, &err),
                     LOOM_ERR_INVALID);
    ck_assert_int_eq(loom_lane_pending(lane), 0);
    loom_lane_stats st;
    loom_lane_get_stats(lane, &st);
    ck_assert_uint_eq(st.streams_added, 0);
    loom_lane_free(lane);
    loom_engine_close(e);
}
END_TEST

/* ---------------------------------------------------------------- qwen35 */

/* The real family: members sampled at temperature 1 from a shared prefill
 * emit the lone streams' tokens, bit for bit on the CPU. */
START_TEST(qwen35_tiny_members_equal_lone_streams)
{
    const char *plugin = LOOM_PLUGIN_DIR;
    if (!tl_plugin_built("qwen35"))
        return;
    loom_engine *e =
        open_engine(fixture("models/qwen35-tiny"), plugin, "qwen35");
    ck_assert(loom_family_has_cache_copy(&e->family));
    group g;
    group_init(&g, 3, 19, e->info.vocab, 1.0f);
    run_group(e, &g, 4, 16, 8, 19u);
    loom_engine_close(e);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("lane_group");
    TCase *t = tcase_create("toy");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, members_equal_lone_streams_and_prefill_once);
    tcase_add_test(t, one_token_prompt_greedy);
    tcase_add_test(t, family_without_cache_copy_prefills_each);
    tcase_add_test(t, group_larger_than_the_lane);
    tcase_add_test(t, cancelled_leader_hands_the_prompt_on);
    tcase_add_test(t, cancelled_follower_ends_alone);
    tcase_add_test(t, bad_groups_are_refused_whole);
    suite_add_tcase(s, t);
    TCase *q = tcase_create("families");
    tcase_set_timeout(q, 300);
    tcase_add_test(q, qwen35_tiny_members_equal_lone_streams);
    suite_add_tcase(s, q);
    return s;
}

int main(void)
{
    loom_log_set_level(LOOM_LOG_ERROR);
    return run_suite(suite());
}
