/* Speculation on the device lane: with the oracle drafter
 * (tests/plugins/tp_oracle_drafter.c) proposing the plain output with
 * chosen proposals wrong, every stream on the CUDA engine emits exactly the
 * tokens plain decoding on the CUDA engine emits (greedy and seeded at
 * T=0.7), fixed windows and the planner alike, and a stream asking for its
 * prompt's logprobs in the same rounds gets those of the host-sampling
 * lane. Skipped (77) without a driver or device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/cuda_runtime.h>
#include <loom/engine.h>
#include <loom/lane.h>

#include "gpuutil.h"
#include "testutil.h"

#define N_GEN     40
#define N_STREAMS 4
#define N_PROMPT  12

static loom_engine *open_eng(const char *model, const char *drafter)
{
    static const char *const dirs[] = {LOOM_PLUGIN_DIR, LOOM_TEST_PLUGIN_DIR};
    loom_engine_params p;
    memset(&p, 0, sizeof p);
    p.model = model;
    p.plugin_dirs = dirs;
    p.n_plugin_dirs = 2;
    p.device = LOOM_DEVICE_CUDA;
    p.n_threads = 2;
    p.max_streams = N_STREAMS;
    p.drafter = drafter;
    loom_engine *e = NULL;
    loom_err err = {{0}};
    ck_assert_msg(loom_engine_open(&p, &e, &err) == LOOM_OK, "open %s: %s",
                  model, err.msg);
    ck_assert_int_eq(e->info.device, LOOM_DEVICE_CUDA);
    return e;
}

typedef struct got {
    int32_t tok[N_GEN];
    int32_t n;
    float plp[N_PROMPT]; /* prompt logprobs by prompt index */
    int32_t n_plp;
    int done;
    char error[256];
} got;

static int on_event(void *user, const loom_lane_event *ev)
{
    got *g = user;
    if (ev->prompt_index > 0) {
        if (ev->prompt_index < N_PROMPT)
            g->plp[ev->prompt_index] = ev->logprob;
        g->n_plp++;
        return 0;
    }
    if (ev->token >= 0 && g->n < N_GEN)
        g->tok[g->n++] = ev->token;
    if (ev->finish != LOOM_FINISH_NONE) {
        g->done = 1;
        if (ev->error)
            snprintf(g->error, sizeof g->error, "%s", ev->error);
    }
    return 0;
}

static void prompt_of(int i, int32_t vocab, int32_t *ids)
{
    for (int32_t k = 0; k < N_PROMPT; k++)
        ids[k] = (int32_t)((k * 37 + i * 113 + 5) % vocab);
}

/* Streams 0, 2 greedy, 1, 3 seeded T=0.7 top-p 0.9; stream `lp_stream`
 * (if >= 0) asks for its prompt's logprobs. */
static void run_lane(loom_engine *e, int host_sampling, int32_t draft_window,
                     int lp_stream, got *out)
{
    loom_lane_params lp;
    memset(&lp, 0, sizeof lp);
    lp.engine = e;
    lp.max_streams = N_STREAMS;
    lp.host_sampling = host_sampling;
    lp.draft_window = draft_window;
    loom_lane *lane = NULL;
    loom_err err = {{0}};
    ck_assert_msg(loom_lane_new(&lp, &lane, &err) == LOOM_OK, "lane: %s",
                  err.msg);
    int32_t prompt[N_STREAMS][N_PROMPT];
    for (int i = 0; i < N_STREAMS; i++) {
        memset(&out[i], 0, sizeof out[i]);
        loom_stream_params sp;
        memset(&sp, 0, sizeof sp);
        prompt_of(i, e->info.vocab, prompt[i]);
        sp.prompt = prompt[i];
        sp.n_prompt = N_PROMPT;
        loom_sample_params_default(&sp.sample);
        sp.sample.has_seed = 1;
        sp.sample.seed = 99 + (uint64_t)i;
        sp.sample.temperature = i % 2 ? 0.7f : 0.0f;
        if (i % 2)
            sp.sample.top_p = 0.9f;
        /* prompt logprobs need n_logprobs >= 0 */
        sp.prompt_logprobs = i == lp_stream;
        if (i == lp_stream)
            sp.sample.n_logprobs = 0;
        sp.max_tokens = N_GEN;
        sp.ignore_eos = 1;
        sp.cb = on_event;
        sp.user = &out[i];
        uint64_t id;
        ck_assert_msg(loom_lane_add(lane, &sp, &id, &err) == LOOM_OK, "add: %s",
                      err.msg);
    }
    while (loom_lane_pending(lane) > 0) {
        int32_t rows = 0;
        ck_assert_msg(loom_lane_step(lane, &rows, &err) == LOOM_OK, "step: %s",
                      err.msg);
    }
    for (int i = 0; i < N_STREAMS; i++) {
        ck_assert_msg(out[i].done && !out[i].error[0], "stream %d: %s", i,
                      out[i].error);
        ck_assert_int_eq(out[i].n, N_GEN);
    }
    loom_lane_free(lane);
}

/* The oracle's checkpoint: the streams' prompts and plain outputs, about
 * every third proposal wrong, no taps. */
static const char *write_oracle(const int32_t vocab, const got *plain)
{
    const char *dir = temp_dir();
    ck_assert_ptr_nonnull(dir);
    size_t cap = 64 + (size_t)N_STREAMS * (N_PROMPT + N_GEN) * 12;
    char *text = malloc(cap);
    ck_assert(text);
    size_t n = (size_t)snprintf(
        text, cap,
        "{\"architectures\":[\"LoomOracleDrafter\"],\"wrong_every\":3,"
        "\"wrong\":\"hash\",\"block_size\":16,\"taps\":[],\"sequences\":[");
    for (int i = 0; i < N_STREAMS; i++) {
        int32_t prompt[N_PROMPT];
        prompt_of(i, vocab, prompt);
        n += (size_t)snprintf(text + n, cap - n, "%s[", i ? "," : "");
        for (int32_t k = 0; k < N_PROMPT + N_GEN; k++)
            n += (size_t)snprintf(text + n, cap - n, "%s%d", k ? "," : "",
                                  k < N_PROMPT ? prompt[k]
                                               : plain[i].tok[k - N_PROMPT]);
        n += (size_t)snprintf(text + n, cap - n, "]");
    }
    snprintf(text + n, cap - n, "]}");
    write_text_in(dir, "config.json", text);
    free(text);
    /* an empty safetensors file: the oracle has no weights */
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    static const unsigned char st[10] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    fwrite(st, 1, sizeof st, f);
    fclose(f);
    return dir;
}

static void check_model(const char *name)
{
    char model[1024];
    snprintf(model, sizeof model, "%s/models/%s", LOOM_FIXTURES, name);
    loom_engine *plain_eng = open_eng(model, NULL);
    got plain[N_STREAMS], host_lp[N_STREAMS];
    run_lane(plain_eng, 0, 0, -1, plain);
    /* the prompt logprobs' reference: the host path on the same engine */
    run_lane(plain_eng, 1, 0, 2, host_lp);
    int32_t vocab = plain_eng->info.vocab;
    loom_engine_close(plain_eng);

    const char *dir = write_oracle(vocab, plain);
    loom_engine *e = open_eng(model, dir);
    static const int32_t windows[] = {6, 3, 0};
    for (size_t w = 0; w < sizeof windows / sizeof *windows; w++) {
        got spec[N_STREAMS];
        run_lane(e, 0, windows[w], 2, spec);
        for (int i = 0; i < N_STREAMS; i++)
            for (int32_t k = 0; k < N_GEN; k++)
                ck_assert_msg(spec[i].tok[k] == plain[i].tok[k],
                              "%s window %d stream %d token %d: speculative "
                              "%d, plain %d",
                              name, windows[w], i, k, spec[i].tok[k],
                              plain[i].tok[k]);
        ck_assert_int_eq(spec[2].n_plp, N_PROMPT - 1);
        ck_assert_int_eq(host_lp[2].n_plp, N_PROMPT - 1);
        for (int32_t k = 1; k < N_PROMPT; k++)
            ck_assert_msg(fabsf(spec[2].plp[k] - host_lp[2].plp[k]) < 1e-4f,
                          "%s prompt logprob %d: %g vs host %g", name, k,
                          (double)spec[2].plp[k], (double)host_lp[2].plp[k]);
    }
    loom_engine_close(e);
    printf("%s: speculative == plain on the device (%d streams x %d)\n", name,
           N_STREAMS, N_GEN);
}

START_TEST(spec_equals_plain)
{
    check_model("qwen35-tiny");
    check_model("qwen35-ref2");
}
END_TEST

int main(void)
{
    loom_cuda_facts facts;
    if (!gpu_probe(&facts))
        return GPU_SKIP;
    Suite *s = suite_create("lane_spec_device");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, spec_equals_plain);
    suite_add_tcase(s, tc);
    return gpu_run_suite(s);
}
