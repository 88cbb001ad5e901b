/* Speculative decoding in the lane (core/src/lane/spec.c) on both families,
 * with the oracle drafter (tests/plugins/tp_oracle_drafter.c) proposing the
 * plain output with chosen proposals wrong: every stream emits exactly the
 * tokens, logprobs, text and finish that an engine without a drafter emits
 * for it alone (greedy, seeded sampling at 0.7 and 1.5 with top-p,
 * penalties, stop strings, eos, max_tokens), whatever shares its rounds;
 * windows are rejected at every offset; drafter checkpoints and models are
 * told apart; and the DFlash drafter on qwen35-tiny matches its reference
 * (tests/fixtures/drafters/dflash-tiny/golden.json). */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <loom/engine.h>
#include <loom/lane.h>
#include <loom/log.h>

#include "testmodel.h"
#include "testutil.h"

#define MAXTOK 256
#define NREQ   8

/* ---------------------------------------------------------------- setup */

static loom_status try_open(const char *model, const char *drafter,
                            loom_engine **e, loom_err *err)
{
    const char *dirs[2] = {LOOM_PLUGIN_DIR, LOOM_TEST_PLUGIN_DIR};
    loom_engine_params p;
    memset(&p, 0, sizeof p);
    p.model = model;
    p.plugin_dirs = dirs;
    p.n_plugin_dirs = 2;
    p.device = LOOM_DEVICE_CPU;
    p.n_threads = 2;
    p.drafter = drafter;
    return loom_engine_open(&p, e, err);
}

static loom_engine *open_eng(const char *model, const char *drafter)
{
    loom_engine *e = NULL;
    loom_err err;
    ck_assert_msg(try_open(model, drafter, &e, &err) == LOOM_OK, "%s", err.msg);
    return e;
}

/* Token t's text: "<t>", so stop strings can name tokens. */
static size_t piece(void *ctx, int32_t token, char *buf, size_t cap)
{
    (void)ctx;
    char tmp[16];
    int n = snprintf(tmp, sizeof tmp, "<%d>", token);
    memcpy(buf, tmp, (size_t)n < cap ? (size_t)n : cap);
    return (size_t)n;
}

/* ---------------------------------------------------------------- runs */

typedef struct req {
    int32_t prompt[64];
    int32_t n_prompt;
    loom_sample_params sp;
    int32_t max_tokens;
    int ignore_eos;
    int no_spec;
    const char *stop;
} req;

typedef struct out {
    int32_t tokens[MAXTOK];
    float logprob[MAXTOK];
    int32_t n;
    int n_final;
    loom_finish finish;
    char text[4096];
    size_t n_text;
} out;

static int collect(void *user, const loom_lane_event *ev)
{
    out *o = (out *)user;
    if (ev->token >= 0 && o->n < MAXTOK) {
        o->logprob[o->n] = ev->logprob;
        o->tokens[o->n++] = ev->token;
    }
    if (ev->text && o->n_text + ev->text_len < sizeof o->text) {
        memcpy(o->text + o->n_text, ev->text, ev->text_len);
        o->n_text += ev->text_len;
        o->text[o->n_text] = '\0';
    }
    if (ev->finish != LOOM_FINISH_NONE) {
        o->n_final++;
        o->finish = ev->finish;
        ck_assert_msg(ev->finish != LOOM_FINISH_ERROR, "stream error: %s",
                      ev->error);
    }
    return 0;
}

static void add(loom_lane *lane, const req *r, out *o)
{
    memset(o, 0, sizeof *o);
    loom_stream_params p;
    memset(&p, 0, sizeof p);
    p.prompt = r->prompt;
    p.n_prompt = r->n_prompt;
    p.sample = r->sp;
    p.max_tokens = r->max_tokens;
    p.ignore_eos = r->ignore_eos;
    p.no_speculation = r->no_spec;
    p.stop = r->stop ? &r->stop : NULL;
    p.n_stop = r->stop ? 1 : 0;
    p.cb = collect;
    p.user = o;
    loom_err err;
    ck_assert_msg(loom_lane_add(lane, &p, NULL, &err) == LOOM_OK, "%s",
                  err.msg);
}

static loom_lane *new_lane(loom_engine *e, int32_t draft_window)
{
    loom_lane_params lp;
    memset(&lp, 0, sizeof lp);
    lp.engine = e;
    lp.piece = piece;
    lp.round_tokens = 64;
    lp.prefill_chunk = 5; /* prompts over several rounds, beside windows */
    lp.draft_window = draft_window;
    loom_lane *lane = NULL;
    loom_err err;
    ck_assert_msg(loom_lane_new(&lp, &lane, &err) == LOOM_OK, "%s", err.msg);
    return lane;
}

static void run_idle(loom_lane *lane)
{
    for (int guard = 0; loom_lane_pending(lane) > 0; guard++) {
        ck_assert_int_lt(guard, 10000);
        loom_err err;
        ck_assert_msg(loom_lane_step(lane, NULL, &err) == LOOM_OK, "%s",
                      err.msg);
    }
}

/* Runs rq[0..n) in one lane: the first half at once, the rest after two
 * rounds (so prompts meet windows); stats to *st when not NULL. */
static void run_together(loom_engine *e, int32_t draft_window, const req *rq,
                         int n, out *o, loom_lane_stats *st)
{
    loom_lane *lane = new_lane(e, draft_window);
    int half = (n + 1) / 2;
    for (int i = 0; i < half; i++)
        add(lane, &rq[i], &o[i]);
    for (int k = 0; k < 2; k++) {
        loom_err err;
        ck_assert_msg(loom_lane_step(lane, NULL, &err) == LOOM_OK, "%s",
                      err.msg);
    }
    for (int i = half; i < n; i++)
        add(lane, &rq[i], &o[i]);
    run_idle(lane);
    if (st)
        loom_lane_get_stats(lane, st);
    loom_lane_free(lane);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(o[i].n_final, 1);
}

static void run_alone(loom_engine *e, int32_t draft_window, const req *r,
                      out *o)
{
    run_together(e, draft_window, r, 1, o, NULL);
}

static void assert_same(const out *got, const out *want, const char *what,
                        int i)
{
    ck_assert_msg(got->n == want->n, "%s %d: %d tokens, plain %d", what, i,
                  got->n, want->n);
    for (int32_t t = 0; t < got->n; t++) {
        ck_assert_msg(got->tokens[t] == want->tokens[t],
                      "%s %d: token %d is %d, plain %d", what, i, t,
                      got->tokens[t], want->tokens[t]);
        ck_assert_msg(got->logprob[t] == want->logprob[t],
                      "%s %d: logprob %d is %.9g, plain %.9g", what, i, t,
                      (double)got->logprob[t], (double)want->logprob[t]);
    }
    ck_assert_int_eq(got->finish, want->finish);
    ck_assert_str_eq(got->text, want->text);
}

/* ---------------------------------------------------------------- oracle */

/* An oracle drafter checkpoint whose sequences are the requests' prompts
 * followed by their plain outputs. */
static const char *write_oracle(const req *rq, const out *plain, int n,
                                int wrong_every, const char *mode,
                                const char *taps)
{
    const char *dir = temp_dir();
    ck_assert_ptr_nonnull(dir);
    json_t *seqs = json_array();
    for (int i = 0; i < n; i++) {
        json_t *s = json_array();
        for (int32_t j = 0; j < rq[i].n_prompt; j++)
            json_array_append_new(s, json_integer(rq[i].prompt[j]));
        for (int32_t j = 0; j < plain[i].n; j++)
            json_array_append_new(s, json_integer(plain[i].tokens[j]));
        json_array_append_new(seqs, s);
    }
    json_t *cfg = json_object();
    json_t *arch = json_array();
    json_array_append_new(arch, json_string("LoomOracleDrafter"));
    json_object_set_new(cfg, "architectures", arch);
    json_object_set_new(cfg, "wrong_every", json_integer(wrong_every));
    json_object_set_new(cfg, "wrong", json_string(mode));
    json_object_set_new(cfg, "block_size", json_integer(16));
    if (taps)
        json_object_set_new(cfg, "taps", json_loads(taps, 0, NULL));
    json_object_set_new(cfg, "sequences", seqs);
    char *text = json_dumps(cfg, JSON_COMPACT);
    write_text_in(dir, "config.json", text);
    free(text);
    json_decref(cfg);
    /* an empty safetensors file: the oracle has no weights */
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    static const unsigned char st[10] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    fwrite(st, 1, sizeof st, f);
    fclose(f);
    return dir;
}

/* Requests of distinct prompts (lengths 3..), `kind` 0 greedy, 1 T=0.7
 * top-p 0.9, 2 T=1.5 top-p 0.95, 3 T=0.8 with penalties, cycling. */
static void make_reqs(req *rq, int n, int32_t vocab, int first_kind,
                      int32_t max_tokens)
{
    for (int i = 0; i < n; i++) {
        req *r = &rq[i];
        memset(r, 0, sizeof *r);
        r->n_prompt = 3 + 4 * i;
        for (int32_t j = 0; j < r->n_prompt; j++)
            r->prompt[j] = (int32_t)((37 * (i + 1) + 101 * j + 7) % vocab);
        loom_sample_params_default(&r->sp);
        r->sp.has_seed = 1;
        r->sp.seed = 1000 + (uint64_t)i;
        r->sp.n_logprobs = 2;
        switch ((first_kind + i) % 4) {
        case 0:
            r->sp.temperature = 0.0f;
            break;
        case 1:
            r->sp.temperature = 0.7f;
            r->sp.top_p = 0.9f;
            break;
        case 2:
            r->sp.temperature = 1.5f;
            r->sp.top_p = 0.95f;
            break;
        default:
            r->sp.temperature = 0.8f;
            r->sp.repeat_penalty = 1.3f;
            r->sp.presence_penalty = 0.4f;
            r->sp.frequency_penalty = 0.2f;
            r->sp.penalty_last_n = 8;
            break;
        }
        r->max_tokens = max_tokens;
        r->ignore_eos = 1;
    }
}

/* Plain outputs of rq, each alone on an engine without a drafter. */
static void plain_outputs(const char *model, const req *rq, int n, out *plain)
{
    loom_engine *e = open_eng(model, NULL);
    for (int i = 0; i < n; i++)
        run_alone(e, 0, &rq[i], &plain[i]);
    loom_engine_close(e);
}

/* The oracle on `model`: alone and all together, with fixed windows and
 * with the planner, equal the plain outputs; the fixed windows are
 * rejected at every offset. */
static void oracle_on(const char *model)
{
    req rq[NREQ];
    out plain[NREQ], got[NREQ];
    make_reqs(rq, NREQ, 512, 0, 48);
    plain_outputs(model, rq, NREQ, plain);
    for (int i = 0; i < NREQ; i++)
        ck_assert_int_eq(plain[i].n, 48);

    /* fixed windows of 6 drafts, about every third proposal wrong */
    const char *dir = write_oracle(rq, plain, NREQ, 3, "hash", NULL);
    loom_engine *e = open_eng(model, dir);
    for (int i = 0; i < NREQ; i++) {
        run_alone(e, 6, &rq[i], &got[i]);
        assert_same(&got[i], &plain[i], "alone", i);
    }
    loom_lane_stats st;
    run_together(e, 6, rq, NREQ, got, &st);
    for (int i = 0; i < NREQ; i++)
        assert_same(&got[i], &plain[i], "together", i);
    ck_assert_uint_gt(st.spec_windows, 20);
    /* a rejection at each offset, and windows accepted whole */
    for (int k = 1; k <= 7; k++)
        ck_assert_msg(st.spec_hist[k] > 0, "no window kept %d of 7 rows", k);
    uint64_t kept = 0, windows = 0;
    for (int k = 1; k <= LOOM_MAX_WINDOW; k++) {
        kept += (uint64_t)k * st.spec_hist[k];
        windows += st.spec_hist[k];
    }
    ck_assert_uint_eq(windows, st.spec_windows);
    ck_assert_uint_eq(kept, st.spec_accepted + st.spec_windows);
    loom_engine_close(e);

    /* long acceptances under the planner: every 12th proposal wrong */
    dir = write_oracle(rq, plain, NREQ, 12, "period", NULL);
    e = open_eng(model, dir);
    run_together(e, 0, rq, NREQ, got, &st);
    for (int i = 0; i < NREQ; i++)
        assert_same(&got[i], &plain[i], "planner", i);
    double mean =
        (double)(st.spec_accepted + st.spec_windows) / (double)st.spec_windows;
    ck_assert_msg(mean > 4.0, "mean acceptance %.2f", mean);
    loom_engine_close(e);

    /* every proposal wrong: one token a window, still the same output */
    dir = write_oracle(rq, plain, NREQ, 1, "period", NULL);
    e = open_eng(model, dir);
    run_together(e, 0, rq, NREQ, got, &st);
    for (int i = 0; i < NREQ; i++)
        assert_same(&got[i], &plain[i], "all wrong", i);
    ck_assert_uint_eq(st.spec_accepted, 0);
    ck_assert_uint_gt(st.spec_windows, 0);
    loom_engine_close(e);
}

START_TEST(test_oracle_qwen35)
{
    oracle_on(fixture("models/qwen35-tiny"));
}
END_TEST

START_TEST(test_oracle_nemotron)
{
    oracle_on(fixture("models/nemotron-h-tiny"));
}
END_TEST

/* Streams with and without the drafter share rounds; each emits what it
 * emits alone; a drafter that asks for no taps works the same. */
START_TEST(test_shared_rounds)
{
    const char *model = fixture("models/qwen35-tiny");
    req rq[NREQ];
    out plain[NREQ], got[NREQ];
    make_reqs(rq, NREQ, 512, 1, 40);
    plain_outputs(model, rq, NREQ, plain);
    for (int i = 0; i < NREQ; i++)
        rq[i].no_spec = i % 2;
    const char *taps[2] = {NULL, "[]"};
    for (int t = 0; t < 2; t++) {
        const char *dir = write_oracle(rq, plain, NREQ, 4, "hash", taps[t]);
        loom_engine *e = open_eng(model, dir);
        loom_lane_stats st;
        run_together(e, 0, rq, NREQ, got, &st);
        for (int i = 0; i < NREQ; i++)
            assert_same(&got[i], &plain[i], "shared", i);
        ck_assert_uint_gt(st.spec_windows, 0);
        loom_engine_close(e);
    }
}
END_TEST

/* Stop strings and max_tokens inside accepted runs end the stream where
 * plain decoding does, with nothing past the stop. */
START_TEST(test_stops)
{
    const char *model = fixture("models/nemotron-h-tiny");
    req rq[4];
    out plain[4], got[4];
    make_reqs(rq, 4, 512, 0, 40);
    out first[4];
    plain_outputs(model, rq, 4, first);
    /* stop strings naming tokens 9..12 of each plain output */
    static char stops[4][16];
    for (int i = 0; i < 4; i++) {
        snprintf(stops[i], sizeof stops[i], "<%d>", first[i].tokens[9 + i]);
        rq[i].stop = stops[i];
    }
    rq[1].max_tokens = 7;
    rq[1].stop = NULL;
    plain_outputs(model, rq, 4, plain);
    ck_assert_int_eq(plain[1].n, 7);
    ck_assert_int_eq(plain[1].finish, LOOM_FINISH_LENGTH);
    ck_assert_int_eq(plain[0].finish, LOOM_FINISH_STOP);
    ck_assert_ptr_null(strstr(plain[0].text, stops[0]));
    /* the oracle knows the whole 40 tokens: it proposes past the stop */
    const char *dir = write_oracle(rq, first, 4, 0, "period", NULL);
    loom_engine *e = open_eng(model, dir);
    loom_lane_stats st;
    run_together(e, 10, rq, 4, got, &st);
    for (int i = 0; i < 4; i++)
        assert_same(&got[i], &plain[i], "stops", i);
    ck_assert_uint_gt(st.spec_accepted, 10);
    loom_engine_close(e);
}
END_TEST

/* A copy of a fixture checkpoint whose eos id is `eos`. */
static const char *with_eos(const char *model, int32_t eos)
{
    const char *dir = temp_dir();
    ck_assert_ptr_nonnull(dir);
    const char *files[] = {"model.safetensors", "tokenizer.json",
                           "tokenizer_config.json"};
    char src[700], dst[700];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(src, sizeof src, "%s/%s", model, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        tm_copy_file(src, dst);
    }
    snprintf(src, sizeof src, "%s/config.json", model);
    json_t *cfg = json_load_file(src, 0, NULL);
    ck_assert_ptr_nonnull(cfg);
    json_t *tc = json_object_get(cfg, "text_config");
    json_object_set_new(tc ? tc : cfg, "eos_token_id", json_integer(eos));
    json_object_set_new(cfg, "eos_token_id", json_integer(eos));
    char *text = json_dumps(cfg, 0);
    write_text_in(dir, "config.json", text);
    free(text);
    json_decref(cfg);
    return dir;
}

/* An eos inside an accepted run ends the stream there. */
START_TEST(test_eos)
{
    const char *fx = fixture("models/qwen35-tiny");
    req rq[3];
    out first[3], plain[3], got[3];
    make_reqs(rq, 3, 512, 0, 40);
    plain_outputs(fx, rq, 3, first);
    /* a token the greedy stream emits at index 14 becomes the eos */
    int32_t eos = first[0].tokens[14];
    const char *model = with_eos(fx, eos);
    for (int i = 0; i < 3; i++)
        rq[i].ignore_eos = 0;
    plain_outputs(model, rq, 3, plain);
    ck_assert_int_eq(plain[0].finish, LOOM_FINISH_STOP);
    ck_assert_int_le(plain[0].n, 15);
    const char *dir = write_oracle(rq, first, 3, 0, "period", NULL);
    loom_engine *e = open_eng(model, dir);
    run_together(e, 15, rq, 3, got, NULL);
    for (int i = 0; i < 3; i++)
        assert_same(&got[i], &plain[i], "eos", i);
    loom_engine_close(e);
}
END_TEST

/* A drafter checkpoint given as a model, a model given as a drafter, and a
 * drafter whose taps the target lacks are refused, naming what they are. */
START_TEST(test_refusals)
{
    const char *model = fixture("models/qwen35-tiny");
    req rq[1];
    out plain[1];
    make_reqs(rq, 1, 512, 0, 4);
    memset(plain, 0, sizeof plain);
    const char *dir = write_oracle(rq, plain, 1, 0, "period", NULL);
    loom_engine *e = NULL;
    loom_err err;
    ck_assert_int_ne(try_open(dir, NULL, &e, &err), LOOM_OK);
    ck_assert_msg(strstr(err.msg, "is a drafter checkpoint") &&
                      strstr(err.msg, "tp-oracle"),
                  "%s", err.msg);
    ck_assert_int_ne(try_open(model, model, &e, &err), LOOM_OK);
    ck_assert_msg(strstr(err.msg, "is a model checkpoint") &&
                      strstr(err.msg, "qwen35"),
                  "%s", err.msg);
    dir = write_oracle(rq, plain, 1, 0, "period", "[99]");
    ck_assert_int_ne(try_open(model, dir, &e, &err), LOOM_OK);
    ck_assert_msg(strstr(err.msg, "99") && strstr(err.msg, "drafter"), "%s",
                  err.msg);
}
END_TEST

static int32_t golden_ints(json_t *g, const char *key, int32_t *out, int cap)
{
    json_t *a = json_object_get(g, key);
    ck_assert_msg(json_is_array(a), "golden.json: no %s", key);
    int32_t n = (int32_t)json_array_size(a);
    ck_assert_int_le(n, cap);
    for (int32_t i = 0; i < n; i++)
        out[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return n;
}

/* DFlash on qwen35-tiny, windows of a whole block: the tokens equal the
 * reference's speculative and plain greedy tokens, and each window keeps
 * as many tokens as the reference's round did. */
START_TEST(test_dflash_tiny)
{
    const char *model = fixture("models/qwen35-tiny");
    const char *drafter = fixture("drafters/dflash-tiny");
    json_t *g =
        json_load_file(fixture("drafters/dflash-tiny/golden.json"), 0, NULL);
    ck_assert_ptr_nonnull(g);
    req r;
    memset(&r, 0, sizeof r);
    r.n_prompt = golden_ints(g, "prompt_ids", r.prompt, 64);
    int32_t spec[MAXTOK], plain_ref[MAXTOK], acc[MAXTOK];
    int32_t n_spec = golden_ints(g, "speculative_greedy", spec, MAXTOK);
    int32_t n_plain = golden_ints(g, "plain_greedy", plain_ref, MAXTOK);
    int32_t n_acc = golden_ints(g, "acceptance_lengths", acc, MAXTOK);
    json_decref(g);
    loom_sample_params_default(&r.sp);
    r.sp.temperature = 0.0f;
    /* past the reference's end, so its last round is a whole window too */
    r.max_tokens = n_spec + 8;
    r.ignore_eos = 1;

    out plain;
    plain_outputs(model, &r, 1, &plain);
    ck_assert_int_ge(plain.n, n_plain);
    for (int32_t i = 0; i < n_plain; i++)
        ck_assert_int_eq(plain.tokens[i], plain_ref[i]);

    loom_engine *e = open_eng(model, drafter);
    ck_assert_int_eq(e->needs.block_size, 4);
    loom_lane *lane = new_lane(e, e->needs.block_size - 1);
    out got;
    add(lane, &r, &got);
    /* one stream: a round holds at most one window, read off the stats */
    int32_t lens[MAXTOK], n_lens = 0;
    uint64_t windows = 0, accepted = 0;
    for (int guard = 0; loom_lane_pending(lane) > 0; guard++) {
        ck_assert_int_lt(guard, 1000);
        loom_err err;
        ck_assert_msg(loom_lane_step(lane, NULL, &err) == LOOM_OK, "%s",
                      err.msg);
        loom_lane_stats st;
        loom_lane_get_stats(lane, &st);
        if (st.spec_windows > windows) {
            ck_assert_uint_eq(st.spec_windows, windows + 1);
            lens[n_lens++] = (int32_t)(st.spec_accepted - accepted) + 1;
        }
        windows = st.spec_windows;
        accepted = st.spec_accepted;
    }
    loom_lane_free(lane);
    loom_engine_close(e);
    ck_assert_int_eq(got.n_final, 1);
    ck_assert_int_ge(got.n, n_spec);
    for (int32_t i = 0; i < n_spec; i++)
        ck_assert_msg(got.tokens[i] == spec[i], "token %d is %d, reference %d",
                      i, got.tokens[i], spec[i]);
    /* and the rest is still plain greedy */
    ck_assert_int_eq(got.n, plain.n);
    for (int32_t i = 0; i < got.n; i++)
        ck_assert_int_eq(got.tokens[i], plain.tokens[i]);
    ck_assert_int_ge(n_lens, n_acc);
    for (int32_t i = 0; i < n_acc; i++)
        ck_assert_msg(lens[i] == acc[i], "round %d kept %d, reference %d", i,
                      lens[i], acc[i]);
}
END_TEST

Suite *spec_suite(void)
{
    Suite *s = suite_create("spec");
    TCase *tc = tcase_create("oracle");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_oracle_qwen35);
    tcase_add_test(tc, test_oracle_nemotron);
    tcase_add_test(tc, test_shared_rounds);
    tcase_add_test(tc, test_stops);
    tcase_add_test(tc, test_eos);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_dflash_tiny);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* the test plugins' deliberately broken ones would warn at every open */
    loom_log_set_level(LOOM_LOG_ERROR);
    return run_suite(spec_suite());
}
