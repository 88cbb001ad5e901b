/* The lane's invariants on the toy test family (tests/plugins/
 * tp_toy_family.c, logits a closed-form hash of each stream's history) and
 * on qwen35-tiny when its plugin is built: a stream's tokens equal those of
 * a plain one-row-at-a-time loop over the family (the reference, no lane)
 * whatever shares its rounds and however its prompt is chunked; stop
 * conditions; cancellation and the cache pool; errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/engine.h>
#include <loom/lane.h>
#include <loom/log.h>
#include <loom/platform.h>
#include <loom/tokenizer.h>

#include "testlane.h"
#include "testmodel.h"
#include "testutil.h"

#define MAXTOK 512

/* ---------------------------------------------------------------- setup */

static loom_engine *open_engine(const char *model, const char *plugin_dir,
                                int64_t max_context)
{
    return tl_open_engine(model, plugin_dir, NULL, max_context, 1);
}

static loom_engine *open_toy(int64_t max_context)
{
    return open_engine(fixture("models/toy"), LOOM_TEST_PLUGIN_DIR,
                       max_context);
}

/* A toy checkpoint with extra config fields (JSON members, no braces) and
 * optionally a generation_config.json. */
static loom_engine *open_toy_gen(const char *extra, const char *gen)
{
    const char *dir = temp_dir();
    ck_assert_ptr_nonnull(dir);
    char text[1024], path[600];
    snprintf(text, sizeof text,
             "{\"architectures\": [\"LoomToyForTest\"], \"eos_token_id\": "
             "63, %s}\n",
             extra);
    write_text_in(dir, "config.json", text);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    static const unsigned char st[10] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    fwrite(st, 1, sizeof st, f);
    fclose(f);
    if (gen)
        write_text_in(dir, "generation_config.json", gen);
    return open_engine(dir, LOOM_TEST_PLUGIN_DIR, 0);
}

static loom_engine *open_toy_with(const char *extra)
{
    return open_toy_gen(extra, NULL);
}

/* ---------------------------------------------------------------- events */

typedef struct collector {
    int32_t tokens[MAXTOK];
    int32_t n; /* token events */
    int n_events, n_final, after_final;
    loom_finish finish;
    int32_t final_token;
    char error[512];
    char text[4096];
    size_t n_text;
    char piece_at[MAXTOK][16]; /* each event's text (short ones) */
    uint64_t seed;
    int cancel_after; /* return nonzero after this many tokens; 0: never */
    float logprob[MAXTOK];
    int32_t n_top;
    loom_token_logprob top0;
    int bad_count;  /* n_generated out of step */
    loom_mutex *mu; /* threaded tests */
    loom_cond *cv;
} collector;

static int collect(void *user, const loom_lane_event *ev)
{
    collector *c = (collector *)user;
    if (c->mu)
        loom_mutex_lock(c->mu);
    if (c->n_final)
        c->after_final++;
    c->n_events++;
    if (ev->token >= 0) {
        if (c->n < MAXTOK) {
            c->tokens[c->n] = ev->token;
            c->logprob[c->n] = ev->logprob;
        }
        c->n++;
        if (ev->n_generated != c->n)
            c->bad_count++;
        if (c->n == 1) {
            c->n_top = ev->n_top;
            if (ev->n_top > 0)
                c->top0 = ev->top[0];
        }
    }
    c->seed = ev->seed;
    if (ev->text) {
        if (c->n_text + ev->text_len < sizeof c->text) {
            memcpy(c->text + c->n_text, ev->text, ev->text_len);
            c->n_text += ev->text_len;
            c->text[c->n_text] = '\0';
        }
        if (ev->token >= 0 && c->n - 1 < MAXTOK)
            snprintf(c->piece_at[c->n - 1], 16, "%s", ev->text);
    }
    int ret = 0;
    if (ev->finish != LOOM_FINISH_NONE) {
        c->n_final++;
        c->finish = ev->finish;
        c->final_token = ev->token;
        if (ev->error)
            snprintf(c->error, sizeof c->error, "%s", ev->error);
        if (c->cv)
            loom_cond_broadcast(c->cv);
    } else if (c->cancel_after && c->n >= c->cancel_after) {
        ret = 1;
    }
    if (c->mu)
        loom_mutex_unlock(c->mu);
    return ret;
}

static void assert_well_formed(const collector *c)
{
    ck_assert_int_eq(c->n_final, 1);
    ck_assert_int_eq(c->after_final, 0);
    ck_assert_int_eq(c->bad_count, 0);
}

static uint64_t add_stream(loom_lane *lane, const int32_t *prompt, int32_t n,
                           const loom_sample_params *sp, int32_t max_tokens,
                           collector *c)
{
    loom_stream_params p;
    memset(&p, 0, sizeof p);
    p.prompt = prompt;
    p.n_prompt = n;
    p.sample = *sp;
    p.max_tokens = max_tokens;
    p.cb = collect;
    p.user = c;
    uint64_t id = 0;
    loom_err err;
    ck_assert_msg(loom_lane_add(lane, &p, &id, &err) == LOOM_OK, "%s", err.msg);
    ck_assert_uint_gt(id, 0);
    return id;
}

static void run_idle(loom_lane *lane)
{
    for (int guard = 0; loom_lane_pending(lane) > 0; guard++) {
        ck_assert_int_lt(guard, 100000);
        loom_err err;
        int32_t rows = 0;
        ck_assert_msg(loom_lane_step(lane, &rows, &err) == LOOM_OK, "%s",
                      err.msg);
    }
}

/* ---------------------------------------------------------------- reference */

/* What the stream must produce: the family fed one row at a time with a
 * cache of its own, sampled with the same chain at each token's position,
 * stopping at eos / max_tokens / the context. No lane involved. */
static int32_t reference(loom_engine *e, const int32_t *prompt, int32_t n,
                         const loom_sample_params *sp, int32_t max_tokens,
                         int64_t max_context, int32_t *out)
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
        int last_prompt = pos == n - 1;
        int32_t feed = pos < n ? prompt[pos] : tok;
        loom_row row = {cache, feed, pos, -1,
                        (pos >= n - 1) ? LOOM_ROW_LOGITS : 0u};
        loom_round r = {sizeof r, sizeof row, &row, 1};
        loom_output o = {sizeof o, loom_view_host_f32(logits, 1, V), {0}};
        ck_assert_msg(loom_family_forward(f, e->model, &r, &o, &err) == LOOM_OK,
                      "%s", err.msg);
        pos++;
        if (pos < n && !last_prompt)
            continue;
        loom_sample_result res;
        loom_sampler_sample(s, logits, pos, &res);
        loom_sampler_accept(s, res.token, 1);
        tok = res.token;
        out[ng++] = tok;
        int eos = 0;
        for (int32_t i = 0; i < e->info.n_eos; i++)
            eos |= e->info.eos[i] == tok;
        if (eos || (max_tokens > 0 && ng >= max_tokens) ||
            n + ng >= max_context || ng >= MAXTOK)
            break;
    }
    free(logits);
    loom_sampler_free(s);
    loom_family_cache_free(f, e->model, cache);
    return ng;
}

static void assert_tokens(const collector *c, const int32_t *ref, int32_t nref,
                          const char *what)
{
    ck_assert_msg(c->n == nref, "%s: %d tokens, reference %d", what, c->n,
                  nref);
    for (int32_t i = 0; i < nref; i++)
        ck_assert_msg(c->tokens[i] == ref[i],
                      "%s: token %d is %d, reference %d", what, i, c->tokens[i],
                      ref[i]);
}

/* ---------------------------------------------------------------- specs */

#define NSPEC 8
typedef struct spec {
    int32_t prompt[64];
    int32_t n;
    loom_sample_params sp;
    int32_t max_tokens;
    int32_t ref[MAXTOK];
    int32_t nref;
} spec;

static void make_specs(loom_engine *e, spec *s, int greedy_only)
{
    static const int32_t lens[NSPEC] = {5, 17, 3, 40, 9, 1, 23, 12};
    uint64_t x = 12345;
    for (int i = 0; i < NSPEC; i++) {
        s[i].n = lens[i];
        for (int j = 0; j < lens[i]; j++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            s[i].prompt[j] = (int32_t)((x >> 33) % 62);
        }
        loom_sample_params_default(&s[i].sp);
        if (greedy_only || i % 2 == 0) {
            s[i].sp.temperature = 0;
        } else {
            s[i].sp.temperature = 0.9f;
            s[i].sp.top_k = 40;
            s[i].sp.top_p = 0.95f;
            s[i].sp.seed = 100 + (uint64_t)i;
            s[i].sp.has_seed = 1;
        }
        s[i].max_tokens = 20 + i;
        s[i].nref = reference(e, s[i].prompt, s[i].n, &s[i].sp, s[i].max_tokens,
                              e->info.max_context, s[i].ref);
    }
}

/* Runs streams first..first+count-1 of the specs, stream j added after
 * `stagger * j` rounds, and checks each against its reference. */
static void run_group(loom_engine *e, spec *s, int first, int count,
                      int stagger, int32_t max_streams, int32_t round_tokens,
                      int32_t chunk)
{
    loom_lane *lane = tl_new_lane(e, max_streams, round_tokens, chunk);
    collector *c = calloc((size_t)count, sizeof *c);
    int added = 0;
    for (int round = 0; added < count || loom_lane_pending(lane) > 0; round++) {
        ck_assert_int_lt(round, 100000);
        while (added < count && round >= stagger * added) {
            spec *sp = &s[first + added];
            add_stream(lane, sp->prompt, sp->n, &sp->sp, sp->max_tokens,
                       &c[added]);
            added++;
        }
        loom_err err;
        ck_assert_msg(loom_lane_step(lane, NULL, &err) == LOOM_OK, "%s",
                      err.msg);
    }
    loom_lane_stats st;
    loom_lane_get_stats(lane, &st);
    uint64_t prompt_total = 0, gen_total = 0;
    for (int j = 0; j < count; j++) {
        char what[128];
        snprintf(what, sizeof what,
                 "stream %d of %d (stagger %d, chunk %d, max_streams %d)",
                 first + j, count, stagger, chunk, max_streams);
        assert_well_formed(&c[j]);
        assert_tokens(&c[j], s[first + j].ref, s[first + j].nref, what);
        prompt_total += (uint64_t)s[first + j].n;
        gen_total += (uint64_t)c[j].n;
    }
    ck_assert_uint_eq(st.prompt_tokens, prompt_total);
    ck_assert_uint_eq(st.generated_tokens, gen_total);
    ck_assert_uint_eq(st.streams_finished, (uint64_t)count);
    ck_assert(st.ttft_avg_s > 0 && st.ttft_last_s > 0);
    ck_assert_uint_gt(st.rounds, 0);
    ck_assert_int_eq(st.pool_free, st.pool_total);
    ck_assert_int_le(st.pool_total, max_streams);
    loom_lane_free(lane);
    free(c);
}

/* ---------------------------------------------------------------- tests */

START_TEST(alone_equals_the_plain_loop)
{
    loom_engine *e = open_toy(0);
    spec *s = calloc(NSPEC, sizeof *s);
    make_specs(e, s, 0);
    for (int i = 0; i < NSPEC; i++)
        run_group(e, s, i, 1, 0, 8, 16, 6);
    free(s);
    loom_engine_close(e);
}
END_TEST

START_TEST(tokens_do_not_depend_on_the_company)
{
    loom_engine *e = open_toy(0);
    spec *s = calloc(NSPEC, sizeof *s);
    make_specs(e, s, 0);
    /* beside 1, 3 and 7 others that start at different times */
    run_group(e, s, 0, 2, 3, 8, 16, 6);
    run_group(e, s, 4, 4, 2, 8, 16, 6);
    run_group(e, s, 0, 8, 1, 8, 16, 6);
    run_group(e, s, 0, 8, 5, 8, 32, 4);
    /* all at once, and fewer cache slots than streams (queueing) */
    run_group(e, s, 0, 8, 0, 8, 64, 64);
    run_group(e, s, 0, 8, 0, 3, 16, 5);
    run_group(e, s, 0, 8, 2, 1, 4, 3);
    free(s);
    loom_engine_close(e);
}
END_TEST

START_TEST(prefill_chunk_sizes_do_not_change_tokens)
{
    loom_engine *e = open_toy(0);
    spec *s = calloc(NSPEC, sizeof *s);
    make_specs(e, s, 0);
    static const int32_t chunks[] = {1, 2, 7, 16, 64};
    for (size_t i = 0; i < sizeof chunks / sizeof *chunks; i++)
        run_group(e, s, 0, 8, 1, 8, 64, chunks[i]);
    /* a round budget smaller than a prompt splits it too */
    run_group(e, s, 3, 1, 0, 1, 2, 0);
    free(s);
    loom_engine_close(e);
}
END_TEST

START_TEST(unseeded_streams_report_the_seed_that_repeats_them)
{
    loom_engine *e = open_toy(0);
    static const int32_t prompt[4] = {3, 1, 4, 1};
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    loom_lane *lane = tl_new_lane(e, 4, 16, 0);
    collector a = {0}, b = {0};
    add_stream(lane, prompt, 4, &sp, 30, &a);
    add_stream(lane, prompt, 4, &sp, 30, &b);
    run_idle(lane);
    ck_assert_uint_ne(a.seed, b.seed);
    int32_t ref[MAXTOK];
    sp.seed = a.seed;
    sp.has_seed = 1;
    int32_t n = reference(e, prompt, 4, &sp, 30, 4096, ref);
    assert_tokens(&a, ref, n, "unseeded stream, replayed with its seed");
    loom_lane_free(lane);
    loom_engine_close(e);
}
END_TEST

START_TEST(cancelled_stream_frees_its_cache)
{
    loom_engine *e = open_toy(0);
    int64_t base = loom_host_accounted(&e->hs, LOOM_MEM_HOST, -1);
    loom_lane *lane = tl_new_lane(e, 4, 16, 0);
    static const int32_t prompt[3] = {7, 8, 9};
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0;
    collector a = {0}, b = {0}, q = {0};
    uint64_t ida = add_stream(lane, prompt, 3, &sp, 1000, &a);
    add_stream(lane, prompt, 3, &sp, 1000, &b);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(loom_lane_step(lane, NULL, NULL), LOOM_OK);
    loom_lane_stats st;
    loom_lane_get_stats(lane, &st);
    ck_assert_int_eq(st.active, 2);
    ck_assert_int_eq(st.pool_total, 2);
    ck_assert_int_eq(st.pool_free, 0);
    ck_assert_int_eq(a.n, 5);

    loom_lane_cancel(lane, ida);
    loom_lane_cancel(lane, 999999); /* unknown: ignored */
    ck_assert_int_eq(loom_lane_step(lane, NULL, NULL), LOOM_OK);
    assert_well_formed(&a);
    ck_assert_int_eq(a.finish, LOOM_FINISH_CANCELLED);
    ck_assert_int_eq(a.final_token, -1);
    ck_assert_int_eq(a.n, 5); /* no token after the cancel */
    ck_assert_int_eq(b.n, 6);
    loom_lane_get_stats(lane, &st);
    ck_assert_int_eq(st.active, 1);
    ck_assert_int_eq(st.pool_free, 1);

    /* a cancelled stream's cache is the next stream's */
    add_stream(lane, prompt, 3, &sp, 2, &q);
    run_idle(lane);
    ck_assert_int_eq(q.finish, LOOM_FINISH_LENGTH);
    loom_lane_get_stats(lane, &st);
    ck_assert_int_eq(st.pool_total, 2);

    /* the callback cancels by returning nonzero */
    collector c = {0};
    c.cancel_after = 3;
    add_stream(lane, prompt, 3, &sp, 1000, &c);
    for (int i = 0; i < 40 && !c.n_final; i++)
        ck_assert_int_eq(loom_lane_step(lane, NULL, NULL), LOOM_OK);
    assert_well_formed(&c);
    ck_assert_int_eq(c.finish, LOOM_FINISH_CANCELLED);
    ck_assert_int_eq(c.n, 3);

    /* b ran to its length meanwhile; freeing the lane cancels what is
     * still running */
    ck_assert_int_eq(b.finish, LOOM_FINISH_LENGTH);
    ck_assert_int_eq(b.n, 1000);
    collector d = {0};
    add_stream(lane, prompt, 3, &sp, 1000, &d);
    ck_assert_int_eq(loom_lane_step(lane, NULL, NULL), LOOM_OK);
    loom_lane_free(lane);
    assert_well_formed(&d);
    ck_assert_int_eq(d.finish, LOOM_FINISH_CANCELLED);
    ck_assert_int_eq(d.n, 1);

    /* cancelled while queued: no cache, no token */
    lane = tl_new_lane(e, 1, 16, 0);
    collector r = {0}, w = {0};
    add_stream(lane, prompt, 3, &sp, 4, &r);
    uint64_t idw = add_stream(lane, prompt, 3, &sp, 4, &w);
    ck_assert_int_eq(loom_lane_step(lane, NULL, NULL), LOOM_OK);
    loom_lane_cancel(lane, idw);
    run_idle(lane);
    assert_well_formed(&w);
    ck_assert_int_eq(w.finish, LOOM_FINISH_CANCELLED);
    ck_assert_int_eq(w.n, 0);
    ck_assert_int_eq(r.finish, LOOM_FINISH_LENGTH);
    loom_lane_free(lane);
    ck_assert_int_eq(loom_host_accounted(&e->hs, LOOM_MEM_HOST, -1),
                     base); /* every cache freed */
    loom_engine_close(e);
}
END_TEST

/* What the stats say while a stream's final event is delivered. */
typedef struct stats_at_final {
    loom_lane *lane;
    int finals;
    int32_t active, queued;
} stats_at_final;

static int stats_on_final(void *user, const loom_lane_event *ev)
{
    stats_at_final *f = user;
    if (ev->finish != LOOM_FINISH_NONE) {
        loom_lane_stats st;
        loom_lane_get_stats(f->lane, &st);
        f->active += st.active;
        f->queued += st.queued;
        f->finals++;
    }
    return 0;
}

/* issue 18 (test_server's flaky stream count): a client that has its
 * stream's final event must not see the stream still counted, whether it
 * ended by length or was cancelled while queued. */
START_TEST(final_event_sees_its_stream_uncounted)
{
    loom_engine *e = open_toy(0);
    loom_lane *lane = tl_new_lane(e, 1, 16, 0);
    static const int32_t prompt[3] = {7, 8, 9};
    stats_at_final f = {.lane = lane};
    loom_stream_params p;
    memset(&p, 0, sizeof p);
    p.prompt = prompt;
    p.n_prompt = 3;
    loom_sample_params_default(&p.sample);
    p.sample.temperature = 0;
    p.max_tokens = 3;
    p.cb = stats_on_final;
    p.user = &f;
    uint64_t id = 0, id2 = 0;
    loom_err err;
    ck_assert_int_eq(loom_lane_add(lane, &p, &id, &err), LOOM_OK);
    run_idle(lane);
    ck_assert_int_eq(f.finals, 1);
    ck_assert_int_eq(f.active, 0);
    ck_assert_int_eq(f.queued, 0);
    /* one decoding, one queued behind it and cancelled there */
    p.max_tokens = 1000;
    ck_assert_int_eq(loom_lane_add(lane, &p, &id, &err), LOOM_OK);
    ck_assert_int_eq(loom_lane_step(lane, NULL, NULL), LOOM_OK);
    ck_assert_int_eq(loom_lane_add(lane, &p, &id2, &err), LOOM_OK);
    loom_lane_cancel(lane, id2);
    ck_assert_int_eq(loom_lane_step(lane, NULL, NULL), LOOM_OK);
    ck_assert_int_eq(f.finals, 2);
    ck_assert_int_eq(f.active, 1); /* the decoding stream, still counted */
    ck_assert_int_eq(f.queued, 0);
    loom_lane_cancel(lane, id);
    run_idle(lane);
    ck_assert_int_eq(f.finals, 3);
    ck_assert_int_eq(f.active, 1);
    loom_lane_free(lane);
    loom_engine_close(e);
}
END_TEST

START_TEST(thousand_streams_leave_the_pool_as_it_started)
{
    loom_engine *e = open_toy(0);
    int64_t base = loom_host_accounted(&e->hs, LOOM_MEM_HOST, -1);
    loom_lane *lane = tl_new_lane(e, 8, 32, 0);
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.seed = 5;
    sp.has_seed = 1;
    collector *c = calloc(1000, sizeof *c);
    int64_t after_first = 0;
    for (int i = 0; i < 1000; i++) {
        int32_t prompt[2] = {i % 60, (i / 60) % 60};
        add_stream(lane, prompt, 2, &sp, 2, &c[i]);
        run_idle(lane);
        assert_well_formed(&c[i]);
        ck_assert_int_eq(c[i].n, 2);
        loom_lane_stats st;
        loom_lane_get_stats(lane, &st);
        ck_assert_int_eq(st.pool_total, 1);
        ck_assert_int_eq(st.pool_free, 1);
        if (i == 0)
            after_first = loom_host_accounted(&e->hs, LOOM_MEM_HOST, -1);
        ck_assert_int_eq(loom_host_accounted(&e->hs, LOOM_MEM_HOST, -1),
                         after_first);
    }
    /* and 1000 at once through 8 slots */
    memset(c, 0, 1000 * sizeof *c);
    for (int i = 0; i < 1000; i++) {
        int32_t prompt[2] = {i % 60, 7};
        add_stream(lane, prompt, 2, &sp, 3, &c[i]);
    }
    run_idle(lane);
    loom_lane_stats st;
    loom_lane_get_stats(lane, &st);
    ck_assert_int_eq(st.pool_total, 8);
    ck_assert_int_eq(st.pool_free, 8);
    ck_assert_uint_eq(st.streams_finished, 2000);
    for (int i = 0; i < 1000; i++) {
        assert_well_formed(&c[i]);
        ck_assert_int_eq(c[i].n, 3);
    }
    loom_lane_free(lane);
    ck_assert_int_eq(loom_host_accounted(&e->hs, LOOM_MEM_HOST, -1), base);
    free(c);
    loom_engine_close(e);
}
END_TEST

/* ---- cancellation by id */

/* What one of many streams got: counts only. */
typedef struct tally {
    int n_final, n_tokens, after_final;
    loom_finish finish;
} tally;

static int count_event(void *user, const loom_lane_event *ev)
{
    tally *t = (tally *)user;
    if (t->n_final)
        t->after_final++;
    if (ev->token >= 0)
        t->n_tokens++;
    if (ev->finish != LOOM_FINISH_NONE) {
        t->n_final++;
        t->finish = ev->finish;
    }
    return 0;
}

START_TEST(cancel_by_id_reaches_exactly_its_streams_among_thousands)
{
    enum { N = 3000 };
    loom_engine *e = open_toy(0);
    loom_lane *lane = tl_new_lane(e, 4, 16, 0);
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0;
    tally *t = calloc(N, sizeof *t);
    uint64_t *id = calloc(N, sizeof *id);
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_nonnull(id);
    for (int i = 0; i < N; i++) {
        int32_t prompt[2] = {i % 60, 1 + i % 7};
        loom_stream_params p;
        memset(&p, 0, sizeof p);
        p.prompt = prompt;
        p.n_prompt = 2;
        p.sample = sp;
        p.max_tokens = 2;
        p.cb = count_event;
        p.user = &t[i];
        loom_err err;
        ck_assert_msg(loom_lane_add(lane, &p, &id[i], &err) == LOOM_OK, "%s",
                      err.msg);
    }
    /* every third, newest first, some twice; ids never given are ignored */
    int n_cancel = 0;
    for (int i = N - 1; i >= 0; i--)
        if (i % 3 == 0) {
            loom_lane_cancel(lane, id[i]);
            n_cancel++;
        }
    for (int i = 0; i < N; i += 300)
        loom_lane_cancel(lane, id[i]);
    loom_lane_cancel(lane, 0);
    loom_lane_cancel(lane, id[N - 1] + 1);
    loom_lane_cancel(lane, UINT64_MAX);
    ck_assert_int_eq(loom_lane_pending(lane), N);

    /* one round ends them all, before any takes a row */
    ck_assert_int_eq(loom_lane_step(lane, NULL, NULL), LOOM_OK);
    for (int i = 0; i < N; i++) {
        if (i % 3 == 0) {
            ck_assert_int_eq(t[i].n_final, 1);
            ck_assert_int_eq(t[i].finish, LOOM_FINISH_CANCELLED);
            ck_assert_int_eq(t[i].n_tokens, 0);
        } else {
            ck_assert_int_eq(t[i].n_final, 0);
        }
    }
    ck_assert_int_eq(loom_lane_pending(lane), N - n_cancel);

    /* more cancels between rounds, after the table lost a thousand ids:
     * the second half of the i % 3 == 1 streams, and one running now */
    int running = -1;
    for (int i = 0; i < N && running < 0; i++)
        if (t[i].n_tokens == 1 && !t[i].n_final)
            running = i;
    ck_assert_int_ge(running, 0);
    loom_lane_cancel(lane, id[running]);
    for (int i = N / 2; i < N; i++)
        if (i % 3 == 1)
            loom_lane_cancel(lane, id[i]);
    run_idle(lane);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(t[i].n_final, 1);
        ck_assert_int_eq(t[i].after_final, 0);
        int cancelled = i % 3 == 0 || (i >= N / 2 && i % 3 == 1);
        if (i == running) {
            ck_assert_int_eq(t[i].finish, LOOM_FINISH_CANCELLED);
            ck_assert_int_eq(t[i].n_tokens, 1);
        } else if (cancelled) {
            ck_assert_int_eq(t[i].finish, LOOM_FINISH_CANCELLED);
            ck_assert_int_eq(t[i].n_tokens, 0);
        } else {
            ck_assert_int_eq(t[i].finish, LOOM_FINISH_LENGTH);
            ck_assert_int_eq(t[i].n_tokens, 2);
        }
    }
    /* a finished id is unknown now: no event, nothing pending */
    loom_lane_cancel(lane, id[2]);
    ck_assert_int_eq(loom_lane_pending(lane), 0);
    ck_assert_int_eq(loom_lane_step(lane, NULL, NULL), LOOM_OK);
    ck_assert_int_eq(t[2].n_final, 1);
    loom_lane_stats st;
    loom_lane_get_stats(lane, &st);
    ck_assert_uint_eq(st.streams_finished, N);
    ck_assert_int_eq(st.queued, 0);
    ck_assert_int_eq(st.active, 0);
    loom_lane_free(lane);
    free(t);
    free(id);
    loom_engine_close(e);
}
END_TEST

/* ---- text: a piece function over the toy vocabulary */

typedef struct pieces {
    char s[64][8];
} pieces;

static size_t piece_fn(void *ctx, int32_t token, char *buf, size_t cap)
{
    const pieces *p = (const pieces *)ctx;
    size_t n = strlen(p->s[token]);
    memcpy(buf, p->s[token], n < cap ? n : cap);
    return n;
}

static void default_pieces(pieces *p)
{
    for (int t = 0; t < 64; t++) {
        p->s[t][0] = (char)('a' + t % 26);
        p->s[t][1] = (char)('0' + t / 26);
        p->s[t][2] = '\0';
    }
}

static loom_lane *text_lane(loom_engine *e, pieces *p)
{
    loom_lane_params lp;
    memset(&lp, 0, sizeof lp);
    lp.engine = e;
    lp.piece = piece_fn;
    lp.piece_ctx = p;
    loom_lane *lane = NULL;
    loom_err err;
    ck_assert_msg(loom_lane_new(&lp, &lane, &err) == LOOM_OK, "%s", err.msg);
    return lane;
}

static const int32_t text_prompt[6] = {11, 22, 33, 44, 5, 6};

/* Runs the text prompt greedily with stop strings. */
static void run_text(loom_engine *e, pieces *p, const char *const *stop,
                     int n_stop, int32_t max_tokens, collector *c)
{
    loom_lane *lane = text_lane(e, p);
    loom_stream_params sp;
    memset(&sp, 0, sizeof sp);
    sp.prompt = text_prompt;
    sp.n_prompt = 6;
    loom_sample_params_default(&sp.sample);
    sp.sample.temperature = 0;
    sp.max_tokens = max_tokens;
    sp.stop = stop;
    sp.n_stop = n_stop;
    sp.cb = collect;
    sp.user = c;
    loom_err err;
    ck_assert_msg(loom_lane_add(lane, &sp, NULL, &err) == LOOM_OK, "%s",
                  err.msg);
    run_idle(lane);
    assert_well_formed(c);
    loom_lane_free(lane);
}

/* The greedy tokens of the text prompt and their text under `p`. */
static int32_t greedy_text(loom_engine *e, const pieces *p, int32_t n,
                           int32_t *g, char *text)
{
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0;
    int32_t ng = reference(e, text_prompt, 6, &sp, n, 4096, g);
    text[0] = '\0';
    for (int32_t i = 0; i < ng; i++)
        strcat(text, p->s[g[i]]);
    return ng;
}

START_TEST(stop_string_split_across_tokens_stops_and_is_not_emitted)
{
    loom_engine *e = open_toy(0);
    pieces p;
    default_pieces(&p);
    int32_t g[MAXTOK];
    char T[1024];
    int32_t ng = greedy_text(e, &p, 16, g, T);
    ck_assert_int_eq(ng, 16);

    /* last character of token 5's piece + first of token 6's */
    char stop[3] = {p.s[g[5]][1], p.s[g[6]][0], 0};
    const char *hit = strstr(T, stop);
    ck_assert_ptr_nonnull(hit);
    size_t o = (size_t)(hit - T);
    int32_t j = (int32_t)((o + 2 + 1) / 2); /* tokens to complete it */
    const char *stops[2] = {"zz", stop};
    collector c = {0};
    run_text(e, &p, stops, 2, 16, &c);
    ck_assert_int_eq(c.finish, LOOM_FINISH_STOP);
    ck_assert_int_eq(c.n, j);
    ck_assert_int_eq(c.final_token, g[j - 1]);
    ck_assert_uint_eq(c.n_text, o);
    ck_assert(memcmp(c.text, T, o) == 0);
    ck_assert_ptr_null(strstr(c.text, stop));

    /* a stop string inside one token's piece */
    char stop1[3] = {p.s[g[4]][0], p.s[g[4]][1], 0};
    hit = strstr(T, stop1);
    o = (size_t)(hit - T);
    const char *stops1[1] = {stop1};
    memset(&c, 0, sizeof c);
    run_text(e, &p, stops1, 1, 16, &c);
    ck_assert_int_eq(c.finish, LOOM_FINISH_STOP);
    ck_assert_uint_eq(c.n_text, o);
    ck_assert(memcmp(c.text, T, o) == 0);
    loom_engine_close(e);
}
END_TEST

START_TEST(held_back_text_is_released_when_no_stop_follows)
{
    loom_engine *e = open_toy(0);
    pieces p;
    default_pieces(&p);
    int32_t g[MAXTOK];
    char T[1024];
    greedy_text(e, &p, 16, g, T);
    /* token 3's piece starts the stop string, '#' never comes */
    char stop[sizeof p.s[0] + 2];
    ck_assert_int_lt(snprintf(stop, sizeof stop, "%s##", p.s[g[3]]),
                     (int)sizeof stop);
    const char *stops[1] = {stop};
    collector c = {0};
    run_text(e, &p, stops, 1, 16, &c);
    ck_assert_int_eq(c.finish, LOOM_FINISH_LENGTH);
    ck_assert_int_eq(c.n, 16);
    ck_assert_str_eq(c.text, T);         /* everything, in order */
    ck_assert_str_eq(c.piece_at[3], ""); /* held while it could match */
    loom_engine_close(e);
}
END_TEST

START_TEST(text_is_released_in_whole_utf8_characters)
{
    loom_engine *e = open_toy(0);
    pieces p;
    default_pieces(&p);
    int32_t g[MAXTOK];
    char T[1024];
    int32_t ng = greedy_text(e, &p, 16, g, T);
    /* two adjacent tokens that occur nowhere else become the halves of
     * the euro sign */
    int at = -1;
    for (int i = 0; i + 1 < ng && at < 0; i++) {
        if (g[i] == g[i + 1])
            continue;
        int other = 0;
        for (int k = 0; k < ng; k++)
            if (k != i && k != i + 1 && (g[k] == g[i] || g[k] == g[i + 1]))
                other = 1;
        if (!other)
            at = i;
    }
    ck_assert_int_ge(at, 0);
    strcpy(p.s[g[at]], "\xE2\x82");
    strcpy(p.s[g[at + 1]], "\xAC");
    greedy_text(e, &p, 16, g, T);
    collector c = {0};
    run_text(e, &p, NULL, 0, 16, &c);
    ck_assert_str_eq(c.text, T);
    ck_assert_str_eq(c.piece_at[at], "");
    ck_assert_str_eq(c.piece_at[at + 1], "\xE2\x82\xAC");

    /* ending on half a character flushes U+FFFD */
    memset(&c, 0, sizeof c);
    run_text(e, &p, NULL, 0, at + 1, &c);
    ck_assert_int_eq(c.finish, LOOM_FINISH_LENGTH);
    size_t n = strlen(c.text);
    ck_assert_uint_ge(n, 3);
    ck_assert_str_eq(c.text + n - 3, "\xEF\xBF\xBD");
    loom_engine_close(e);
}
END_TEST

START_TEST(token_bytes_are_the_bytes_the_text_is_made_of)
{
    loom_engine *e = open_toy(0);
    pieces p;
    default_pieces(&p);
    strcpy(p.s[9], "\xE2\x82"); /* half a character stays half */
    loom_lane *lane = text_lane(e, &p);
    for (int32_t t = 0; t < 64; t++) {
        size_t n = 99;
        const char *b = loom_lane_token_bytes(lane, t, &n);
        ck_assert_ptr_nonnull(b);
        ck_assert_uint_eq(n, strlen(p.s[t]));
        ck_assert_int_eq(memcmp(b, p.s[t], n), 0);
    }
    size_t n = 99;
    ck_assert_ptr_null(loom_lane_token_bytes(lane, 64, &n));
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(loom_lane_token_bytes(lane, -1, &n));
    /* the pieces were taken at loom_lane_new: the stream's text and the
     * token bytes agree even when the caller's table changes after */
    default_pieces(&p);
    loom_stream_params sp;
    memset(&sp, 0, sizeof sp);
    sp.prompt = text_prompt;
    sp.n_prompt = 6;
    loom_sample_params_default(&sp.sample);
    sp.sample.temperature = 0;
    sp.max_tokens = 16;
    collector c = {0};
    sp.cb = collect;
    sp.user = &c;
    loom_err err;
    ck_assert_msg(loom_lane_add(lane, &sp, NULL, &err) == LOOM_OK, "%s",
                  err.msg);
    run_idle(lane);
    assert_well_formed(&c);
    char want[1024] = "";
    size_t nw = 0;
    for (int32_t i = 0; i < c.n; i++) {
        const char *b = loom_lane_token_bytes(lane, c.tokens[i], &n);
        memcpy(want + nw, b, n);
        nw += n;
    }
    want[nw] = '\0';
    if (nw >= 2 && (unsigned char)want[nw - 1] == 0x82 &&
        (unsigned char)want[nw - 2] == 0xE2)
        strcpy(want + nw - 2, "\xEF\xBF\xBD"); /* flushed as U+FFFD */
    ck_assert_str_eq(c.text, want);
    loom_lane_free(lane);

    /* a lane without text has no bytes */
    lane = tl_new_lane(e, 1, 16, 0);
    ck_assert_ptr_null(loom_lane_token_bytes(lane, 3, &n));
    loom_lane_free(lane);
    loom_engine_close(e);
}
END_TEST

START_TEST(eos_max_tokens_and_context_end_streams)
{
    /* eos becomes the argmax at position 12: a 5-token prompt stops after
     * tokens at positions 5..12, the last one eos */
    loom_engine *e = open_toy_with("\"toy_eos_at\": 12");
    static const int32_t prompt[5] = {1, 2, 3, 4, 5};
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0;
    pieces p;
    default_pieces(&p);
    loom_lane *lane = text_lane(e, &p);
    collector c = {0};
    add_stream(lane, prompt, 5, &sp, 100, &c);
    run_idle(lane);
    assert_well_formed(&c);
    ck_assert_int_eq(c.finish, LOOM_FINISH_STOP);
    ck_assert_int_eq(c.n, 8);
    ck_assert_int_eq(c.final_token, 63);
    ck_assert_str_eq(c.piece_at[7], ""); /* eos has no text */

    /* ignore_eos runs on to max_tokens */
    loom_stream_params q;
    memset(&q, 0, sizeof q);
    q.prompt = prompt;
    q.n_prompt = 5;
    q.sample = sp;
    q.max_tokens = 10;
    q.ignore_eos = 1;
    q.cb = collect;
    collector d = {0};
    q.user = &d;
    ck_assert_int_eq(loom_lane_add(lane, &q, NULL, NULL), LOOM_OK);
    run_idle(lane);
    assert_well_formed(&d);
    ck_assert_int_eq(d.finish, LOOM_FINISH_LENGTH);
    ck_assert_int_eq(d.n, 10);
    ck_assert_int_eq(d.tokens[9], 63);
    loom_lane_free(lane);
    loom_engine_close(e);

    /* a context of 20: a 15-token prompt gets 5 tokens */
    e = open_toy(20);
    lane = tl_new_lane(e, 4, 16, 0);
    int32_t long_prompt[20];
    for (int i = 0; i < 20; i++)
        long_prompt[i] = i;
    collector f = {0}, g = {0}, h = {0};
    add_stream(lane, long_prompt, 15, &sp, 0, &f);
    add_stream(lane, long_prompt, 19, &sp, 0, &g);
    add_stream(lane, long_prompt, 15, &sp, 5, &h); /* length wins a tie */
    run_idle(lane);
    ck_assert_int_eq(f.finish, LOOM_FINISH_CONTEXT);
    ck_assert_int_eq(f.n, 5);
    ck_assert_int_eq(g.finish, LOOM_FINISH_CONTEXT);
    ck_assert_int_eq(g.n, 1);
    ck_assert_int_eq(h.finish, LOOM_FINISH_LENGTH);
    int32_t ref[MAXTOK];
    int32_t nref = reference(e, long_prompt, 15, &sp, 0, 20, ref);
    assert_tokens(&f, ref, nref, "context-limited stream");
    loom_err err;
    loom_stream_params bad;
    memset(&bad, 0, sizeof bad);
    bad.prompt = long_prompt;
    bad.n_prompt = 20;
    bad.sample = sp;
    bad.cb = collect;
    bad.user = &f;
    ck_assert_int_eq(loom_lane_add(lane, &bad, NULL, &err), LOOM_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "fills the context of 20"));
    loom_lane_free(lane);
    loom_engine_close(e);
}
END_TEST

static const int32_t eos_prompt[4] = {2, 7, 1, 8};

/* The toy's greedy run of 12 tokens from eos_prompt into g; the index where
 * g[5], the token made an eos id, first stands. */
static int greedy_sixth(int32_t *g)
{
    loom_engine *e = open_toy(0);
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0;
    ck_assert_int_eq(reference(e, eos_prompt, 4, &sp, 12, 4096, g), 12);
    loom_engine_close(e);
    int first = 5;
    for (int i = 0; i < 5; i++)
        if (g[i] == g[5])
            first = i;
    return first;
}

/* A greedy stream on E stops, as for an eos id, at token TOK (index FIRST);
 * closes E. */
static void expect_stop_at(loom_engine *e, int first, int32_t tok)
{
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0;
    loom_lane *lane = tl_new_lane(e, 4, 16, 0);
    collector c = {0};
    add_stream(lane, eos_prompt, 4, &sp, 12, &c);
    run_idle(lane);
    assert_well_formed(&c);
    ck_assert_int_eq(c.finish, LOOM_FINISH_STOP);
    ck_assert_int_eq(c.n, first + 1);
    ck_assert_int_eq(c.final_token, tok);
    loom_lane_free(lane);
    loom_engine_close(e);
}

START_TEST(generation_config_eos_ids_stop_streams_too)
{
    /* the greedy run's 6th token, made an eos id by generation_config */
    int32_t g[MAXTOK];
    int first = greedy_sixth(g);
    char gen[128];
    snprintf(gen, sizeof gen, "{\"eos_token_id\": [63, %d]}", g[5]);
    expect_stop_at(open_toy_gen("\"model_type\": \"toy\"", gen), first, g[5]);
}
END_TEST

START_TEST(generation_config_eos_is_merged_once_by_the_family)
{
    /* the greedy run's 6th token, named twice by generation_config beside
     * config.json's 63 and two ids outside the vocabulary of 64 */
    int32_t g[MAXTOK];
    int first = greedy_sixth(g);
    ck_assert_int_ne(g[5], 63);
    char gen[160];
    snprintf(gen, sizeof gen, "{\"eos_token_id\": [63, %d, 64, %d, -1]}", g[5],
             g[5]);
    loom_engine *e = open_toy_gen("\"model_type\": \"toy\"", gen);
    ck_assert_int_eq(e->info.n_eos, 2);
    ck_assert_int_eq(e->info.eos[0], 63);
    ck_assert_int_eq(e->info.eos[1], g[5]);
    expect_stop_at(e, first, g[5]);
}
END_TEST

/* loom_lane_add copies the bias: the caller's array may change after. */
START_TEST(the_stream_keeps_the_bias_it_was_added_with)
{
    loom_engine *e = open_toy(0);
    loom_lane *lane = tl_new_lane(e, 2, 16, 0);
    static const int32_t prompt[2] = {4, 5};
    loom_logit_bias bias[1] = {{17, 100.0f}};
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0;
    sp.bias = bias;
    sp.n_bias = 1;
    collector c = {0};
    add_stream(lane, prompt, 2, &sp, 6, &c);
    bias[0].token = 23;
    run_idle(lane);
    assert_well_formed(&c);
    ck_assert_int_eq(c.n, 6);
    for (int32_t i = 0; i < c.n; i++)
        ck_assert_int_eq(c.tokens[i], 17);
    loom_lane_free(lane);
    loom_engine_close(e);
}
END_TEST

START_TEST(bad_streams_are_refused)
{
    loom_engine *e = open_toy(0);
    loom_lane_params lp;
    memset(&lp, 0, sizeof lp);
    lp.engine = e;
    lp.max_queued = 2;
    loom_lane *lane = NULL;
    loom_err err;
    ck_assert_int_eq(loom_lane_new(&lp, &lane, &err), LOOM_OK);
    static const int32_t ok[2] = {1, 2}, far[2] = {1, 64}, neg[1] = {-1};
    const char *empty_stop[1] = {""};
    collector c = {0};
    loom_stream_params p;
#define REFUSE(stmt, code, word)                                               \
    do {                                                                       \
        memset(&p, 0, sizeof p);                                               \
        p.prompt = ok;                                                         \
        p.n_prompt = 2;                                                        \
        loom_sample_params_default(&p.sample);                                 \
        p.cb = collect;                                                        \
        p.user = &c;                                                           \
        stmt;                                                                  \
        ck_assert_int_eq(loom_lane_add(lane, &p, NULL, &err), code);           \
        ck_assert_msg(strstr(err.msg, word), "%s", err.msg);                   \
    } while (0)
    REFUSE(p.n_prompt = 0, LOOM_ERR_INVALID, "empty prompt");
    REFUSE(p.prompt = far, LOOM_ERR_RANGE, "token 64 at 1");
    REFUSE((p.prompt = neg, p.n_prompt = 1), LOOM_ERR_RANGE, "token -1");
    REFUSE(p.sample.temperature = -1, LOOM_ERR_RANGE, "temperature");
    REFUSE(p.cb = NULL, LOOM_ERR_INVALID, "callback");
    REFUSE((p.stop = empty_stop, p.n_stop = 1), LOOM_ERR_INVALID,
           "stop string 0 is empty");
    REFUSE(p.n_stop = 1, LOOM_ERR_INVALID, "stop strings");
    static const char *const some_stop[1] = {"x"};
    REFUSE((p.stop = some_stop, p.n_stop = 1), LOOM_ERR_UNSUPPORTED,
           "need a tokenizer");
    /* the queue holds two */
    collector a = {0}, b = {0};
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    add_stream(lane, ok, 2, &sp, 1, &a);
    add_stream(lane, ok, 2, &sp, 1, &b);
    REFUSE((void)0, LOOM_ERR_FULL, "2 streams already waiting");
#undef REFUSE
    ck_assert_int_eq(c.n_events, 0);
    run_idle(lane);
    ck_assert_int_eq(a.n_final + b.n_final, 2);
    loom_lane_free(lane);

    /* lane parameters */
    lp.max_queued = -1;
    ck_assert_int_eq(loom_lane_new(&lp, &lane, &err), LOOM_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "max_queued -1"));
    lp.max_queued = 0;
    lp.engine = NULL;
    ck_assert_int_eq(loom_lane_new(&lp, &lane, &err), LOOM_ERR_INVALID);
    loom_engine_close(e);
}
END_TEST

START_TEST(failed_forward_ends_its_round_with_errors)
{
    loom_engine *e = open_toy_with("\"toy_fail_token\": 13");
    int64_t base = loom_host_accounted(&e->hs, LOOM_MEM_HOST, -1);
    loom_lane *lane = tl_new_lane(e, 4, 16, 0);
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0;
    static const int32_t good[3] = {1, 2, 3}, bad[3] = {4, 13, 5};
    /* keep the good stream from sampling 13 itself */
    static const loom_logit_bias ban[1] = {{13, -INFINITY}};
    sp.bias = ban;
    sp.n_bias = 1;
    collector a = {0}, b = {0}, c = {0};
    add_stream(lane, good, 3, &sp, 100, &a);
    ck_assert_int_eq(loom_lane_step(lane, NULL, NULL), LOOM_OK);
    ck_assert_int_eq(loom_lane_step(lane, NULL, NULL), LOOM_OK);
    ck_assert_int_eq(a.n, 2);
    add_stream(lane, bad, 3, &sp, 100, &b);
    loom_err err;
    ck_assert_int_eq(loom_lane_step(lane, NULL, &err), LOOM_ERR_DEVICE);
    ck_assert_ptr_nonnull(strstr(err.msg, "fails on purpose"));
    assert_well_formed(&a);
    assert_well_formed(&b);
    ck_assert_int_eq(a.finish, LOOM_FINISH_ERROR);
    ck_assert_int_eq(b.finish, LOOM_FINISH_ERROR);
    ck_assert_ptr_nonnull(strstr(b.error, "fails on purpose"));
    /* the lane goes on */
    add_stream(lane, good, 3, &sp, 4, &c);
    run_idle(lane);
    ck_assert_int_eq(c.finish, LOOM_FINISH_LENGTH);
    loom_lane_stats st;
    loom_lane_get_stats(lane, &st);
    ck_assert_int_eq(st.pool_free, st.pool_total);
    loom_lane_free(lane);
    ck_assert_int_eq(loom_host_accounted(&e->hs, LOOM_MEM_HOST, -1), base);
    loom_engine_close(e);
}
END_TEST

START_TEST(logprobs_reach_the_events)
{
    loom_engine *e = open_toy(0);
    static const int32_t prompt[3] = {9, 8, 7};
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0;
    sp.n_logprobs = 2;
    loom_lane *lane = tl_new_lane(e, 4, 16, 0);
    collector c = {0};
    add_stream(lane, prompt, 3, &sp, 3, &c);
    run_idle(lane);
    /* the reference: logits of the prompt's last row, log-softmax */
    const loom_family *f = &e->family;
    loom_cache *cache = NULL;
    ck_assert_int_eq(loom_family_cache_new(f, e->model, &cache, NULL), LOOM_OK);
    loom_row rows[3];
    for (int i = 0; i < 3; i++)
        rows[i] =
            (loom_row){cache, prompt[i], i, -1, i == 2 ? LOOM_ROW_LOGITS : 0u};
    float lg[64];
    loom_round r = {sizeof r, sizeof rows[0], rows, 3};
    loom_output o = {sizeof o, loom_view_host_f32(lg, 1, 64), {0}};
    ck_assert_int_eq(loom_family_forward(f, e->model, &r, &o, NULL), LOOM_OK);
    loom_family_cache_free(f, e->model, cache);
    int best = 0;
    double z = 0;
    for (int v = 0; v < 64; v++) {
        if (lg[v] > lg[best])
            best = v;
    }
    for (int v = 0; v < 64; v++)
        z += exp((double)lg[v] - lg[best]);
    double lp = -log(z);
    ck_assert_int_eq(c.tokens[0], best);
    ck_assert_double_eq_tol(c.logprob[0], lp, 1e-5);
    ck_assert_int_eq(c.n_top, 2);
    ck_assert_int_eq(c.top0.token, best);
    ck_assert_double_eq_tol(c.top0.logprob, lp, 1e-5);
    loom_lane_free(lane);
    loom_engine_close(e);
}
END_TEST

/* ---- the lane thread */

typedef struct adder {
    loom_lane *lane;
    spec *s;
    collector *c;
    int first, count;
} adder;

static void add_some(void *arg)
{
    adder *a = (adder *)arg;
    for (int i = a->first; i < a->first + a->count; i++) {
        loom_stream_params p;
        memset(&p, 0, sizeof p);
        p.prompt = a->s[i].prompt;
        p.n_prompt = a->s[i].n;
        p.sample = a->s[i].sp;
        p.max_tokens = a->s[i].max_tokens;
        p.cb = collect;
        p.user = &a->c[i];
        if (loom_lane_add(a->lane, &p, NULL, NULL) != LOOM_OK)
            a->c[i].bad_count = 1000;
        loom_sleep_ms(2);
    }
}

START_TEST(lane_thread_serves_streams_added_from_other_threads)
{
    /* two pool threads: the draws of a round run in parallel */
    loom_engine *e =
        tl_open_engine(fixture("models/toy"), LOOM_TEST_PLUGIN_DIR, NULL, 0, 2);
    spec *s = calloc(NSPEC, sizeof *s);
    make_specs(e, s, 0);
    loom_lane *lane = tl_new_lane(e, 8, 16, 4);
    loom_err err;
    ck_assert_msg(loom_lane_start(lane, &err) == LOOM_OK, "%s", err.msg);
    ck_assert_int_eq(loom_lane_start(lane, &err), LOOM_ERR_STATE);
    ck_assert_int_eq(loom_lane_step(lane, NULL, &err), LOOM_ERR_STATE);
    loom_mutex *mu = loom_mutex_new();
    loom_cond *cv = loom_cond_new();
    collector c[NSPEC];
    memset(c, 0, sizeof c);
    for (int i = 0; i < NSPEC; i++) {
        c[i].mu = mu;
        c[i].cv = cv;
    }
    adder ad[4];
    loom_thread *th[4];
    for (int t = 0; t < 4; t++) {
        ad[t] = (adder){lane, s, c, t * 2, 2};
        ck_assert_int_eq(loom_thread_start(&th[t], add_some, &ad[t], &err),
                         LOOM_OK);
    }
    for (int t = 0; t < 4; t++)
        loom_thread_join(th[t]);
    loom_mutex_lock(mu);
    for (int waited = 0; waited < 200; waited++) {
        int done = 0;
        for (int i = 0; i < NSPEC; i++)
            done += c[i].n_final;
        if (done == NSPEC)
            break;
        loom_cond_timedwait(cv, mu, 100);
    }
    loom_mutex_unlock(mu);
    loom_lane_stop(lane);
    for (int i = 0; i < NSPEC; i++) {
        assert_well_formed(&c[i]);
        assert_tokens(&c[i], s[i].ref, s[i].nref, "threaded lane");
    }
    /* stopped: steps work again; free with nothing pending */
    ck_assert_int_eq(loom_lane_step(lane, NULL, &err), LOOM_OK);
    loom_lane_free(lane);
    loom_cond_free(cv);
    loom_mutex_free(mu);
    free(s);
    loom_engine_close(e);
}
END_TEST

/* ---- the real family */

/* A real family's greedy tokens equal the transformers golden alone and
 * beside 3 others started earlier; a seeded stream equals the plain loop. */
static void real_family(const char *model_dir, const char *plugin_name)
{
    const char *plugin = LOOM_PLUGIN_DIR;
    if (!tl_plugin_built(plugin_name))
        return;
    tm_golden g;
    tm_read_golden(model_dir, 0, &g);
    const int32_t *prompt = g.prompt, *golden = g.greedy;
    int32_t np = g.n_prompt, ng = g.n_greedy;

    loom_engine *e = open_engine(fixture(model_dir), plugin, 0);
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0;
    loom_sample_params hot;
    loom_sample_params_default(&hot);
    hot.temperature = 1.0f;
    hot.seed = 77;
    hot.has_seed = 1;
    int32_t hot_ref[MAXTOK];
    int32_t n_hot =
        reference(e, prompt, 9, &hot, 10, e->info.max_context, hot_ref);
    for (int company = 0; company <= 3; company += 3) {
        loom_lane *lane = tl_new_lane(e, 8, 16, 5);
        collector c = {0}, h = {0}, o[3];
        memset(o, 0, sizeof o);
        for (int k = 0; k < company; k++) /* others, started earlier */
            add_stream(lane, prompt + k, np - k, &sp, 6 + k, &o[k]);
        ck_assert_int_eq(loom_lane_step(lane, NULL, NULL), LOOM_OK);
        add_stream(lane, prompt, np, &sp, ng, &c);
        add_stream(lane, prompt, 9, &hot, 10, &h);
        run_idle(lane);
        assert_well_formed(&c);
        assert_tokens(&c, golden, ng, "greedy vs the transformers golden");
        assert_tokens(&h, hot_ref, n_hot, "seeded vs the plain loop");
        loom_lane_free(lane);
    }
    loom_engine_close(e);
}

START_TEST(qwen35_tiny_greedy_matches_golden_alone_and_in_company)
{
    real_family("models/qwen35-tiny", "qwen35");
}
END_TEST

START_TEST(nemotron_h_tiny_greedy_matches_golden_alone_and_in_company)
{
    real_family("models/nemotron-h-tiny", "nemotron");
}
END_TEST

/* An id the model has but the tokenizer lacks has no text; the stream goes
 * on (real checkpoints pad their vocabulary past the tokenizer's). */
START_TEST(ids_past_the_tokenizer_have_no_text)
{
    loom_engine *e = open_toy_with("\"vocab_size\": 600");
    loom_tokenizer *tok = NULL;
    loom_err err;
    ck_assert_msg(loom_tokenizer_open(fixture("models/qwen35-tiny"), &tok,
                                      &err) == LOOM_OK,
                  "%s", err.msg);
    ck_assert_uint_eq(loom_tokenizer_vocab_size(tok), 512);
    loom_lane_params lp;
    memset(&lp, 0, sizeof lp);
    lp.engine = e;
    lp.tokenizer = tok;
    loom_lane *lane = NULL;
    ck_assert_int_eq(loom_lane_new(&lp, &lane, &err), LOOM_OK);
    static const int32_t prompt[3] = {70, 80, 90};
    static const loom_logit_bias force[1] = {{550, 100.0f}};
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0;
    sp.bias = force;
    sp.n_bias = 1;
    collector c = {0};
    add_stream(lane, prompt, 3, &sp, 3, &c);
    run_idle(lane);
    assert_well_formed(&c);
    ck_assert_int_eq(c.finish, LOOM_FINISH_LENGTH);
    ck_assert_int_eq(c.n, 3);
    ck_assert_int_eq(c.tokens[0], 550);
    ck_assert_uint_eq(c.n_text, 0);
    loom_lane_free(lane);
    loom_tokenizer_free(tok);
    loom_engine_close(e);
}
END_TEST

START_TEST(qwen35_tiny_text_is_the_tokenizers_decode)
{
    const char *plugin = LOOM_PLUGIN_DIR;
    if (!tl_plugin_built("qwen35"))
        return;
    loom_engine *e = open_engine(fixture("models/qwen35-tiny"), plugin, 0);
    loom_tokenizer *tok = NULL;
    loom_err err;
    ck_assert_msg(loom_tokenizer_open(fixture("models/qwen35-tiny"), &tok,
                                      &err) == LOOM_OK,
                  "%s", err.msg);
    loom_lane_params lp;
    memset(&lp, 0, sizeof lp);
    lp.engine = e;
    lp.tokenizer = tok;
    loom_lane *lane = NULL;
    ck_assert_int_eq(loom_lane_new(&lp, &lane, &err), LOOM_OK);
    static const int32_t prompt[5] = {300, 301, 302, 7, 9};
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 1.0f;
    sp.seed = 3;
    sp.has_seed = 1;
    collector c = {0};
    add_stream(lane, prompt, 5, &sp, 40, &c);
    run_idle(lane);
    assert_well_formed(&c);
    /* the reference: the whole id list decoded at once */
    char *full = NULL;
    size_t n_full = 0;
    int n_ids = c.finish == LOOM_FINISH_STOP ? c.n - 1 : c.n; /* no eos */
    ck_assert_int_eq(loom_tokenizer_decode(tok, c.tokens, (size_t)n_ids, 1,
                                           &full, &n_full, &err),
                     LOOM_OK);
    ck_assert_uint_eq(c.n_text, n_full);
    ck_assert(memcmp(c.text, full, n_full) == 0);

    /* a stop string made of the end of one token's text and the start of
     * the next one's stops there, and is not printed */
    size_t cut = 0;
    int32_t at = -1;
    for (int32_t i = 1; i + 1 < n_ids && at < 0; i++) {
        char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        loom_tokenizer_decode(tok, c.tokens, (size_t)i, 1, &a, &na, &err);
        loom_tokenizer_decode(tok, c.tokens, (size_t)i + 1, 1, &b, &nb, &err);
        /* ASCII on both sides of the boundary, so a 2-byte stop is text */
        if (na >= 1 && nb >= na + 1 && (unsigned char)b[na - 1] < 0x80 &&
            (unsigned char)b[na] < 0x80 && b[na - 1] > ' ' && b[na] > ' ') {
            at = i;
            cut = na;
        }
        free(a);
        free(b);
    }
    if (at >= 0) {
        char stop[3] = {full[cut - 1], full[cut], 0};
        const char *hit = strstr(full, stop);
        size_t o = (size_t)(hit - full);
        loom_stream_params q;
        memset(&q, 0, sizeof q);
        q.prompt = prompt;
        q.n_prompt = 5;
        q.sample = sp;
        q.max_tokens = 40;
        const char *stops[1] = {stop};
        q.stop = stops;
        q.n_stop = 1;
        q.cb = collect;
        collector d = {0};
        q.user = &d;
        ck_assert_int_eq(loom_lane_add(lane, &q, NULL, &err), LOOM_OK);
        run_idle(lane);
        assert_well_formed(&d);
        ck_assert_int_eq(d.finish, LOOM_FINISH_STOP);
        ck_assert_uint_eq(d.n_text, o);
        ck_assert(memcmp(d.text, full, o) == 0);
    } else {
        fprintf(stderr, "no ASCII token boundary in the sample: stop "
                        "string part skipped\n");
    }
    free(full);
    loom_lane_free(lane);
    loom_tokenizer_free(tok);
    loom_engine_close(e);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("lane");
    TCase *t = tcase_create("toy");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, alone_equals_the_plain_loop);
    tcase_add_test(t, tokens_do_not_depend_on_the_company);
    tcase_add_test(t, prefill_chunk_sizes_do_not_change_tokens);
    tcase_add_test(t, unseeded_streams_report_the_seed_that_repeats_them);
    tcase_add_test(t, cancelled_stream_frees_its_cache);
    tcase_add_test(t, final_event_sees_its_stream_uncounted);
    tcase_add_test(t, thousand_streams_leave_the_pool_as_it_started);
    tcase_add_test(t, stop_string_split_across_tokens_stops_and_is_not_emitted);
    tcase_add_test(t, held_back_text_is_released_when_no_stop_follows);
    tcase_add_test(t, text_is_released_in_whole_utf8_characters);
    tcase_add_test(t, eos_max_tokens_and_context_end_streams);
    tcase_add_test(t, generation_config_eos_ids_stop_streams_too);
    tcase_add_test(t, generation_config_eos_is_merged_once_by_the_family);
    tcase_add_test(t, cancel_by_id_reaches_exactly_its_streams_among_thousands);
    tcase_add_test(t, token_bytes_are_the_bytes_the_text_is_made_of);
    tcase_add_test(t, the_stream_keeps_the_bias_it_was_added_with);
    tcase_add_test(t, bad_streams_are_refused);
    tcase_add_test(t, failed_forward_ends_its_round_with_errors);
    tcase_add_test(t, logprobs_reach_the_events);
    tcase_add_test(t, ids_past_the_tokenizer_have_no_text);
    tcase_add_test(t, lane_thread_serves_streams_added_from_other_threads);
    suite_add_tcase(s, t);
    TCase *q = tcase_create("families");
    tcase_set_timeout(q, 300);
    tcase_add_test(q, qwen35_tiny_greedy_matches_golden_alone_and_in_company);
    tcase_add_test(q, qwen35_tiny_text_is_the_tokenizers_decode);
    tcase_add_test(q,
                   nemotron_h_tiny_greedy_matches_golden_alone_and_in_company);
    suite_add_tcase(s, q);
    return s;
}

int main(void)
{
    loom_log_set_level(LOOM_LOG_ERROR); /* the broken test plugins warn */
    return run_suite(suite());
}
