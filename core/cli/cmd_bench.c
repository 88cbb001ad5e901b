/* `loom bench MODEL --streams 1,8,32 --prompt 512 --gen 128`: prefill and
 * decode throughput of the lane per stream count, one JSON line each, with
 * the weight bytes and the bandwidth they imply. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/checkpoint.h>
#include <loom/lane.h>
#include <loom/platform.h>
#include <loom/safetensors.h>
#include <loom/weights.h>

#include "cli_common.h"
#include "commands.h"

static const char bench_usage[] =
    "usage: loom bench MODEL [options]\n\n"
    "Runs S streams at once (each a random prompt, greedy, eos ignored) for "
    "each\nstream count S and prints one JSON line per S:\n"
    "  prefill_tok_s   prompt tokens / time until every stream had its first "
    "token\n"
    "  decode_tok_s    tokens after that point / time after it (S rows a "
    "round)\n"
    "  implied_gbps    weight_bytes x decode rounds/s: each round reads the "
    "weights once\n"
    "                  (weight_bytes: what the family says one decode step "
    "reads,\n                  else the checkpoint's size)\n"
    "With --drafter each stream count runs plain, then speculative, and a "
    "second\nline per run compares them. One engine serves every count, "
    "opened for the\nlargest: for one stream and no drafter a family may "
    "keep kernels that are\nfaster for one row (qwen35 on a GPU does).\n";

/* Filled by the callbacks, which run on the stepping thread. */
typedef struct bench_state {
    int32_t n_streams, n_first, n_done;
    uint64_t tokens;         /* generated so far */
    uint64_t tokens_at_mark; /* when the last stream got its first token */
    uint64_t t_mark, t_end;
    char error[512];
} bench_state;

static int on_event(void *user, const loom_lane_event *ev)
{
    bench_state *b = (bench_state *)user;
    uint64_t now = loom_now_ns();
    if (ev->token >= 0) {
        b->tokens++;
        if (ev->n_generated == 1 && ++b->n_first == b->n_streams) {
            b->t_mark = now;
            b->tokens_at_mark = b->tokens;
        }
    }
    if (ev->finish != LOOM_FINISH_NONE) {
        if (ev->finish == LOOM_FINISH_ERROR && ev->error && !b->error[0])
            snprintf(b->error, sizeof b->error, "%s", ev->error);
        if (++b->n_done == b->n_streams)
            b->t_end = now;
    }
    return 0;
}

/* What one decode round reads: the family's own count when it gives one
 * (the embedding table is then left out), else every tensor of the file. */
static uint64_t weight_bytes(loom_engine *e)
{
    if (e->info.struct_size >= sizeof e->info &&
        e->info.weight_bytes_per_token > 0)
        return e->info.weight_bytes_per_token;
    const loom_st *st = loom_checkpoint_tensors(e->ckpt);
    uint64_t total = 0;
    for (size_t i = 0; st && i < loom_st_count(st); i++)
        total += loom_st_at(st, i)->nbytes;
    return total;
}

/* One stream count: returns 0, or 1 on failure (message printed). With a
 * drafter, `spec` says whether the streams speculate; *decode_out gets the
 * decode rate, and a speculative line compares it with `plain_decode`. */
static int bench_one(loom_engine *e, int32_t S, int32_t n_prompt, int32_t n_gen,
                     uint64_t seed, uint64_t wbytes, int spec, int timing,
                     double plain_decode, double *decode_out)
{
    loom_err err = {{0}};
    loom_lane_params lp;
    memset(&lp, 0, sizeof lp);
    lp.engine = e;
    lp.max_streams = S;
    lp.max_queued = S;
    lp.time_device = timing;
    loom_lane *lane = NULL;
    if (loom_lane_new(&lp, &lane, &err) != LOOM_OK) {
        fprintf(stderr, "loom bench: %s\n", err.msg);
        return 1;
    }
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)n_prompt);
    if (!prompt) {
        loom_lane_free(lane);
        fprintf(stderr, "loom bench: out of memory\n");
        return 1;
    }
    bench_state b;
    memset(&b, 0, sizeof b);
    b.n_streams = S;
    uint64_t x = seed;
    int rc = 0;
    uint64_t t0 = loom_now_ns();
    for (int32_t s = 0; s < S && rc == 0; s++) {
        /* distinct prompts (a cache may not share work across streams) */
        for (int32_t i = 0; i < n_prompt; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            prompt[i] = (int32_t)((x >> 33) % (uint64_t)e->info.vocab);
        }
        loom_stream_params sp;
        memset(&sp, 0, sizeof sp);
        sp.prompt = prompt;
        sp.n_prompt = n_prompt;
        loom_sample_params_default(&sp.sample);
        sp.sample.temperature = 0;
        sp.max_tokens = n_gen;
        sp.ignore_eos = 1;
        sp.no_speculation = !spec;
        sp.cb = on_event;
        sp.user = &b;
        if (loom_lane_add(lane, &sp, NULL, &err) != LOOM_OK) {
            fprintf(stderr, "loom bench: %s\n", err.msg);
            rc = 1;
        }
    }
    while (rc == 0 && b.n_done < S) {
        if (loom_lane_step(lane, NULL, &err) != LOOM_OK) {
            fprintf(stderr, "loom bench: %s\n", err.msg);
            rc = 1;
        }
    }
    loom_lane_stats ls;
    loom_lane_get_stats(lane, &ls);
    loom_lane_free(lane);
    free(prompt);
    if (rc)
        return rc;
    if (b.error[0]) {
        fprintf(stderr, "loom bench: %s\n", b.error);
        return 1;
    }
    double t_prefill = (double)(b.t_mark - t0) * 1e-9;
    double t_decode = (double)(b.t_end - b.t_mark) * 1e-9;
    double prefill = t_prefill > 0 ? (double)S * n_prompt / t_prefill : 0;
    double decode =
        t_decode > 0 ? (double)(b.tokens - b.tokens_at_mark) / t_decode : 0;
    double rounds_s = decode / S;
    printf("{\"streams\": %d, \"prompt\": %d, \"gen\": %d, "
           "\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, "
           "\"decode_tok_s_per_stream\": %.2f, \"prefill_s\": %.4f, "
           "\"decode_s\": %.4f, \"rounds\": %llu, \"forward_s\": %.4f, "
           "\"weight_bytes\": %llu, \"implied_gbps\": %.3f, "
           "\"of_4_8_tb_s\": %.3f, \"ttft_avg_s\": %.4f, "
           "\"device\": \"%s\", \"threads\": %d, \"matmul\": \"%s\", "
           "\"matmul_prompt\": \"%s\", \"pin\": \"%s\"}\n",
           S, n_prompt, n_gen, prefill, decode, decode / S, t_prefill, t_decode,
           (unsigned long long)ls.rounds, ls.forward_s,
           (unsigned long long)wbytes, (double)wbytes * rounds_s * 1e-9,
           /* the H200's HBM: the bound a decode step's weight reads meet */
           (double)wbytes * rounds_s / 4.8e12, ls.ttft_avg_s,
           e->info.device == LOOM_DEVICE_CUDA ? "cuda" : "cpu",
           loom_pool_size(e->pool), loom_matmul_isa_name(loom_matmul_isa()),
           loom_matmul_isa_name(loom_matmul_prompt_default()),
           e->pin == LOOM_ENGINE_PIN_FAMILY_COPY
               ? "family copy"
               : loom_pin_name((loom_pin_kind)e->pin));
    if (ls.device_rounds > 0) {
        double n = (double)ls.device_rounds;
        printf("{\"streams\": %d, \"device_rounds\": %llu, "
               "\"device_forward_ms\": %.4f, \"device_draw_ms\": %.4f, "
               "\"device_between_ms\": %.4f}\n",
               S, (unsigned long long)ls.device_rounds,
               ls.device_forward_s * 1e3 / n, ls.device_draw_s * 1e3 / n,
               ls.device_between_s * 1e3 / n);
    }
    *decode_out = decode;
    if (e->drafter) {
        /* the same line, told apart: plain, or speculative with its
         * acceptance and its speed over the plain run before it */
        printf("{\"speculative\": %s, \"streams\": %d, \"decode_tok_s\": "
               "%.2f",
               spec ? "true" : "false", S, decode);
        if (spec) {
            double mean = ls.spec_windows
                              ? (double)(ls.spec_accepted + ls.spec_windows) /
                                    (double)ls.spec_windows
                              : 0;
            printf(", \"windows\": %llu, \"mean_acceptance\": %.3f, "
                   "\"speedup\": %.3f, \"acceptance_hist\": [",
                   (unsigned long long)ls.spec_windows, mean,
                   plain_decode > 0 ? decode / plain_decode : 0);
            for (int k = 1; k <= LOOM_MAX_WINDOW; k++)
                printf("%s%llu", k > 1 ? ", " : "",
                       (unsigned long long)ls.spec_hist[k]);
            printf("]");
        }
        printf("}\n");
    }
    fflush(stdout);
    return 0;
}

int loom_cmd_bench(int argc, char **argv)
{
    loom_cli_model_opts o;
    loom_cli_model_opts_init(&o, LOOM_CLI_ALL | LOOM_CLI_DRAFTER);
    const char *streams_s = "1,8,32";
    int64_t n_prompt = 512, n_gen = 128, seed = 1;
    int timing = 0;
    const loom_cli_opt opts[] = {
        {0, "streams", "LIST", LOOM_OPT_STR, &streams_s, 0, 0, NULL, NULL,
         "stream counts (default 1,8,32)"},
        {0, "prompt", "N", LOOM_OPT_INT, &n_prompt, 1, 1 << 24, NULL, NULL,
         "prompt tokens per stream (default 512)"},
        {0, "gen", "N", LOOM_OPT_INT, &n_gen, 2, 1 << 24, NULL, NULL,
         "tokens generated per stream (default 128)"},
        {0, "seed", "S", LOOM_OPT_INT, &seed, 0, 9e18, NULL, NULL,
         "prompt ids seed (default 1)"},
        {0, "time-device", NULL, LOOM_OPT_FLAG, &timing, 0, 0, NULL, NULL,
         "split decode rounds by device events (a measuring aid)"},
        {0},
    };
    const loom_cli_cmd cmd = {"bench", bench_usage, {opts, o.table}, 1, 1};
    const char *model;
    int r = loom_cli_parse(&cmd, argc, argv, &model);
    if (r >= 0)
        return r;
    int32_t *streams = NULL, n_streams = 0;
    if (loom_cli_parse_ids(streams_s, &streams, &n_streams) != 0)
        return 2;
    for (int32_t i = 0; i < n_streams; i++)
        if (streams[i] < 1 || streams[i] > 4096) {
            fprintf(stderr, "loom bench: --streams: %d is not in [1, 4096]\n",
                    streams[i]);
            free(streams);
            return 2;
        }

    loom_engine_params ep;
    loom_cli_engine_params(&o, model, &ep);
    /* rows a round: every stream's decode row plus room for prompts */
    int32_t most = 1;
    for (int32_t i = 0; i < n_streams; i++)
        if (streams[i] > most)
            most = streams[i];
    ep.max_rows = most + 1 > 512 ? most + 1 : 512;
    ep.max_streams = most;
    /* the cache pool need not hold the model's whole context */
    if (ep.max_context == 0)
        ep.max_context = n_prompt + n_gen + 16;
    loom_engine *e = NULL;
    loom_err err = {{0}};
    if (loom_engine_open(&ep, &e, &err) != LOOM_OK) {
        fprintf(stderr, "loom bench: %s\n", err.msg);
        free(streams);
        return 1;
    }
    if (e->info.max_context > 0 && n_prompt + n_gen > e->info.max_context) {
        fprintf(stderr,
                "loom bench: --prompt %lld + --gen %lld exceeds the context "
                "of %lld\n",
                (long long)n_prompt, (long long)n_gen,
                (long long)e->info.max_context);
        loom_engine_close(e);
        free(streams);
        return 2;
    }
    uint64_t wbytes = weight_bytes(e);
    int rc = 0;
    for (int32_t i = 0; i < n_streams && rc == 0; i++) {
        /* with a drafter: plain decoding first, then speculation */
        double plain = 0, spec = 0;
        rc = bench_one(e, streams[i], (int32_t)n_prompt, (int32_t)n_gen,
                       (uint64_t)seed + (uint64_t)i, wbytes, 0, timing, 0,
                       &plain);
        if (rc == 0 && e->drafter)
            rc = bench_one(e, streams[i], (int32_t)n_prompt, (int32_t)n_gen,
                           (uint64_t)seed + (uint64_t)i, wbytes, 1, timing,
                           plain, &spec);
    }
    loom_engine_close(e);
    free(streams);
    return rc;
}
