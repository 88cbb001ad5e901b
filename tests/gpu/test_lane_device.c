/* The lane on the device (logits kept there, the core's device sampler)
 * against the lane's host path: on the same CUDA engine with host sampling
 * the tokens must be equal (the same logits, one rule; a keyed-score tie
 * would show as a difference here), and greedy against the CPU engine they
 * must agree until a step whose two candidates the CPU's logits hold within
 * TOL of each other (the documented tie rule). Skipped (77) without a
 * driver or device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/cuda_runtime.h>
#include <loom/engine.h>
#include <loom/family.h>
#include <loom/lane.h>

#include "gpuutil.h"
#include "testutil.h"

#define TOL       2e-2
#define N_GEN     40
#define N_STREAMS 4

static loom_engine *open_eng(const char *dir, int device)
{
    return gpu_open(dir, device, N_STREAMS, NULL);
}

typedef struct got {
    int32_t tok[N_GEN];
    float logprob[N_GEN];
    int32_t n_top[N_GEN];
    int32_t n;
    int done;
    char error[256];
} got;

static int on_event(void *user, const loom_lane_event *ev)
{
    got *g = user;
    if (ev->token >= 0 && g->n < N_GEN) {
        g->tok[g->n] = ev->token;
        g->logprob[g->n] = ev->logprob;
        g->n_top[g->n] = ev->n_top;
        g->n++;
    }
    if (ev->finish != LOOM_FINISH_NONE) {
        g->done = 1;
        if (ev->error)
            snprintf(g->error, sizeof g->error, "%s", ev->error);
    }
    return 0;
}

/* The streams' sampling: greedy; seeded with top-k and penalties; seeded
 * with top-p, min-p, a bias and logprobs; seeded at temperature 1.3. */
static void stream_params(int i, int32_t vocab, loom_sample_params *p,
                          loom_logit_bias *bias)
{
    loom_sample_params_default(p);
    p->has_seed = 1;
    p->seed = 1234 + (uint64_t)i;
    switch (i) {
    case 0:
        p->temperature = 0.0f;
        break;
    case 1:
        p->temperature = 0.8f;
        p->top_k = 20;
        p->repeat_penalty = 1.3f;
        p->presence_penalty = 0.5f;
        p->frequency_penalty = 0.25f;
        p->penalty_last_n = 12;
        break;
    case 2:
        p->temperature = 0.9f;
        p->top_p = 0.9f;
        p->min_p = 0.05f;
        bias[0] = (loom_logit_bias){3 % vocab, 4.0f};
        bias[1] = (loom_logit_bias){7 % vocab, -INFINITY};
        p->bias = bias;
        p->n_bias = 2;
        p->n_logprobs = 3;
        break;
    default:
        p->temperature = 1.3f;
        break;
    }
}

static void prompt_of(int i, int32_t vocab, int32_t *ids, int32_t n)
{
    for (int32_t k = 0; k < n; k++)
        ids[k] = (int32_t)((k * 29 + i * 101 + 7) % vocab);
}

/* Runs N_STREAMS streams of N_GEN tokens (eos ignored) through one lane. */
static void run_lane(loom_engine *e, int host_sampling, int n_streams, got *out)
{
    loom_lane_params lp;
    memset(&lp, 0, sizeof lp);
    lp.engine = e;
    lp.max_streams = N_STREAMS;
    lp.host_sampling = host_sampling;
    loom_lane *lane = NULL;
    loom_err err = {{0}};
    ck_assert_msg(loom_lane_new(&lp, &lane, &err) == LOOM_OK, "lane: %s",
                  err.msg);
    int32_t V = e->info.vocab;
    loom_logit_bias bias[N_STREAMS][2];
    int32_t prompt[N_STREAMS][24];
    for (int i = 0; i < n_streams; i++) {
        memset(&out[i], 0, sizeof out[i]);
        loom_stream_params sp;
        memset(&sp, 0, sizeof sp);
        /* prompts of different lengths: the rounds mix prefill and decode */
        int32_t np = 6 + 5 * i;
        prompt_of(i, V, prompt[i], np);
        sp.prompt = prompt[i];
        sp.n_prompt = np;
        stream_params(i, V, &sp.sample, bias[i]);
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
    for (int i = 0; i < n_streams; i++) {
        ck_assert_msg(out[i].done && !out[i].error[0], "stream %d: %s", i,
                      out[i].error);
        ck_assert_int_eq(out[i].n, N_GEN);
    }
    loom_lane_free(lane);
}

static const char *fixture_dir(const char *name)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", LOOM_FIXTURES, name);
    return path;
}

/* Device draws against host draws of the same logits. */
static void check_same_engine(const char *name)
{
    loom_engine *e = open_eng(fixture_dir(name), LOOM_DEVICE_CUDA);
    got dev[N_STREAMS], host[N_STREAMS];
    run_lane(e, 0, N_STREAMS, dev);
    run_lane(e, 1, N_STREAMS, host);
    for (int i = 0; i < N_STREAMS; i++) {
        for (int32_t k = 0; k < N_GEN; k++) {
            ck_assert_msg(dev[i].tok[k] == host[i].tok[k],
                          "%s stream %d token %d: device %d, host %d", name, i,
                          k, dev[i].tok[k], host[i].tok[k]);
            ck_assert_int_eq(dev[i].n_top[k], host[i].n_top[k]);
            ck_assert_msg(fabsf(dev[i].logprob[k] - host[i].logprob[k]) < 1e-3f,
                          "%s stream %d token %d: logprob %g vs %g", name, i, k,
                          (double)dev[i].logprob[k],
                          (double)host[i].logprob[k]);
        }
    }
    loom_engine_close(e);
    printf("%s: %d streams x %d tokens, device == host sampling\n", name,
           N_STREAMS, N_GEN);
}

/* The CPU engine's logits after prompt + gen[0..k), the last row. */
static void cpu_logits(loom_engine *h, const int32_t *prompt, int32_t np,
                       const int32_t *gen, int32_t k, float *out)
{
    int32_t n = np + k;
    loom_row *rows = malloc(sizeof(loom_row) * (size_t)n);
    loom_cache *c = NULL;
    loom_err err = {{0}};
    ck_assert(rows);
    ck_assert_msg(loom_family_cache_new(&h->family, h->model, &c, &err) ==
                      LOOM_OK,
                  "cache: %s", err.msg);
    for (int32_t i = 0; i < n; i++)
        rows[i] = (loom_row){c, i < np ? prompt[i] : gen[i - np], i, -1,
                             i == n - 1 ? LOOM_ROW_LOGITS : 0};
    loom_round r = {sizeof r, sizeof(loom_row), rows, n};
    loom_output o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.logits = loom_view_host_f32(out, 1, h->info.vocab);
    ck_assert_msg(loom_family_forward(&h->family, h->model, &r, &o, &err) ==
                      LOOM_OK,
                  "cpu forward: %s", err.msg);
    loom_family_cache_free(&h->family, h->model, c);
    free(rows);
}

/* Greedy on the device lane against greedy on the CPU engine's lane. */
static void check_greedy_vs_cpu(const char *name)
{
    loom_engine *d = open_eng(fixture_dir(name), LOOM_DEVICE_CUDA);
    loom_engine *h = open_eng(fixture_dir(name), LOOM_DEVICE_CPU);
    got dev[1], cpu[1];
    run_lane(d, 0, 1, dev);
    run_lane(h, 0, 1, cpu);
    int32_t V = h->info.vocab;
    int32_t k = 0;
    while (k < N_GEN && dev[0].tok[k] == cpu[0].tok[k])
        k++;
    if (k < N_GEN) {
        /* a divergence must be a tie on the CPU's own logits */
        int32_t prompt[24];
        prompt_of(0, V, prompt, 6);
        float *lg = malloc(sizeof(float) * (size_t)V);
        ck_assert(lg);
        cpu_logits(h, prompt, 6, cpu[0].tok, k, lg);
        float mx = 0.0f;
        for (int32_t t = 0; t < V; t++)
            mx = fmaxf(mx, fabsf(lg[t]));
        double gap = fabs((double)lg[cpu[0].tok[k]] - lg[dev[0].tok[k]]) / mx;
        ck_assert_msg(gap < TOL,
                      "%s greedy token %d: device %d, cpu %d, %g apart "
                      "(relative), not a tie",
                      name, k, dev[0].tok[k], cpu[0].tok[k], gap);
        printf("%s: greedy agrees for %d tokens, then a tie (%g)\n", name, k,
               gap);
        free(lg);
    } else {
        printf("%s: greedy agrees with the CPU for all %d tokens\n", name,
               N_GEN);
    }
    loom_engine_close(d);
    loom_engine_close(h);
}

START_TEST(device_equals_host_sampling)
{
    check_same_engine("qwen35-tiny");
    check_same_engine("qwen35-ref2");
}
END_TEST

START_TEST(greedy_equals_cpu)
{
    check_greedy_vs_cpu("qwen35-tiny");
    check_greedy_vs_cpu("qwen35-ref2");
}
END_TEST

/* The device path frees what it took: a lane's scratch (device logits,
 * the sampler's buffers) goes back when it is freed. The model's own
 * scratch grows with its first rounds, so one lane warms it first. */
START_TEST(device_lane_releases)
{
    loom_engine *e = open_eng(fixture_dir("qwen35-tiny"), LOOM_DEVICE_CUDA);
    const loom_cuda *cu = loom_cuda_table(e->cuda);
    got dev[N_STREAMS];
    run_lane(e, 0, 2, dev);
    uint64_t before = cu->used(cu, LOOM_MEM_SCRATCH);
    for (int i = 0; i < 3; i++) {
        run_lane(e, 0, 2, dev);
        ck_assert_uint_eq(cu->used(cu, LOOM_MEM_SCRATCH), before);
    }
    loom_engine_close(e);
}
END_TEST

int main(void)
{
    loom_cuda_facts facts;
    if (!gpu_probe(&facts))
        return GPU_SKIP;
    Suite *s = suite_create("lane_device");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, device_equals_host_sampling);
    tcase_add_test(tc, greedy_equals_cpu);
    tcase_add_test(tc, device_lane_releases);
    suite_add_tcase(s, tc);
    return gpu_run_suite(s);
}
