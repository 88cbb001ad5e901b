/* `loom run MODEL -p TEXT`: generates from one prompt through the lane,
 * streaming the decoded text to stdout (or the ids with --print-ids). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <loom/chat_template.h>
#include <loom/checkpoint.h>
#include <loom/lane.h>
#include <loom/platform.h>
#include <loom/tokenizer.h>

#include "cli_common.h"
#include "commands.h"

#define MAX_STOP 16

static void help(FILE *out)
{
    fprintf(out,
            "usage: loom run MODEL (-p TEXT | --ids 1,2,3) [options]\n\n"
            "Generates from one prompt and streams the text to stdout.\n\n"
            "  -p, --prompt TEXT     the prompt text (needs tokenizer.json)\n"
            "  --ids LIST            the prompt as comma-separated token ids\n"
            "  --chat                format TEXT as a user message with the "
            "chat template\n"
            "  -n, --max-tokens N    tokens to generate (default 128; 0: until "
            "eos or the\n"
            "                        context is full)\n"
            "  --temperature T       0 is greedy (default: generation_config."
            "json's when\n"
            "                        it samples, else 0)\n"
            "  --top-k K             keep the K best tokens (0: off)\n"
            "  --top-p P             keep the smallest set of mass P (1: off)\n"
            "  --min-p P             keep tokens of at least P x the best's "
            "probability\n"
            "  --repeat-penalty R    penalize prompt and generated tokens "
            "(1: off)\n"
            "  --presence-penalty X  OpenAI-style, over generated tokens\n"
            "  --frequency-penalty X OpenAI-style, over generated tokens\n"
            "  --seed S              sampling seed (default: random, shown by "
            "--stats)\n"
            "  --stop S              stop at this text, not printed "
            "(repeatable)\n"
            "  --ignore-eos          do not stop at eos ids\n"
            "  --print-ids           print the generated ids as a JSON array "
            "instead of text\n"
            "  --stats               prompt and decode tok/s, time to first "
            "token on stderr\n"
            "  --prefill-chunk N     prompt rows per round (default: the "
            "model's max)\n");
    loom_cli_model_opts_help(out);
}

typedef struct run_state {
    int print_ids;
    int32_t *ids;
    int32_t n_ids, cap_ids;
    loom_lane_event last; /* the final event's numbers */
    char error[512];
    int done;
    int wrote_text;
} run_state;

static int on_event(void *user, const loom_lane_event *ev)
{
    run_state *st = (run_state *)user;
    if (ev->token >= 0) {
        if (st->n_ids == st->cap_ids) {
            int32_t cap = st->cap_ids ? st->cap_ids * 2 : 64;
            int32_t *v = realloc(st->ids, sizeof(int32_t) * (size_t)cap);
            if (!v)
                return 1; /* out of memory: stop the stream */
            st->ids = v;
            st->cap_ids = cap;
        }
        st->ids[st->n_ids++] = ev->token;
    }
    if (!st->print_ids && ev->text && ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
        st->wrote_text = 1;
    }
    if (ev->finish != LOOM_FINISH_NONE) {
        st->last = *ev;
        st->last.text = NULL;
        st->last.top = NULL;
        st->last.error = NULL;
        if (ev->error)
            snprintf(st->error, sizeof st->error, "%s", ev->error);
        st->done = 1;
    }
    return 0;
}

static int parse_num(const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        fprintf(stderr, "loom run: %s: '%s' is not a number\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_u64(const char *opt, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-') {
        fprintf(stderr, "loom run: %s: '%s' is not an unsigned integer\n", opt,
                s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Defaults from generation_config.json when it asks for sampling. */
static void generation_defaults(loom_engine *e, loom_sample_params *sp)
{
    json_t *gc = loom_checkpoint_generation_config(e->ckpt);
    sp->temperature = 0.0f;
    if (!gc || !json_is_true(json_object_get(gc, "do_sample")))
        return;
    json_t *v = json_object_get(gc, "temperature");
    sp->temperature = json_is_number(v) ? (float)json_number_value(v) : 1.0f;
    v = json_object_get(gc, "top_k");
    if (json_is_integer(v) && json_integer_value(v) >= 0)
        sp->top_k = (int32_t)json_integer_value(v);
    v = json_object_get(gc, "top_p");
    if (json_is_number(v))
        sp->top_p = (float)json_number_value(v);
    v = json_object_get(gc, "min_p");
    if (json_is_number(v))
        sp->min_p = (float)json_number_value(v);
    v = json_object_get(gc, "repetition_penalty");
    if (json_is_number(v))
        sp->repeat_penalty = (float)json_number_value(v);
}

/* TEXT (optionally as a chat user message) -> ids. */
static int encode_prompt(const char *dir, const loom_tokenizer *tok,
                         const char *text, int chat, int32_t **ids, int32_t *n)
{
    loom_err err = {{0}};
    char *rendered = NULL;
    if (chat) {
        loom_chat_template *t = NULL;
        if (loom_chat_template_load(dir, &t, &err) != LOOM_OK) {
            fprintf(stderr, "loom run: --chat: %s\n", err.msg);
            return 1;
        }
        json_t *msgs =
            json_pack("[{s:s, s:s}]", "role", "user", "content", text);
        loom_status rc =
            msgs ? loom_chat_template_render(t, msgs, 1, NULL, &rendered, &err)
                 : loom_err_set(&err, LOOM_ERR_NOMEM, "out of memory");
        json_decref(msgs);
        loom_chat_template_free(t);
        if (rc != LOOM_OK) {
            fprintf(stderr, "loom run: --chat: %s\n", err.msg);
            return 1;
        }
        text = rendered;
    }
    size_t nn = 0;
    /* the template writes special tokens as text: they must be recognized */
    loom_status rc =
        loom_tokenizer_encode(tok, text, strlen(text), chat, ids, &nn, &err);
    free(rendered);
    if (rc != LOOM_OK) {
        fprintf(stderr, "loom run: %s\n", err.msg);
        return 1;
    }
    *n = (int32_t)nn;
    return 0;
}

int loom_cmd_run(int argc, char **argv)
{
    loom_cli_model_opts o;
    memset(&o, 0, sizeof o);
    const char *model = NULL, *text = NULL, *ids_s = NULL;
    const char *stops[MAX_STOP];
    int n_stop = 0, chat = 0, print_ids = 0, stats = 0, ignore_eos = 0;
    int64_t max_tokens = 128, chunk = 0;
    /* sampling options given on the command line; NAN: not given (their
     * ranges are checked once, by loom_lane_add) */
    double temp = NAN, top_p = NAN, min_p = NAN, rep = NAN, pres = NAN,
           freq = NAN, top_k = NAN;
    uint64_t seed = 0;
    int has_seed = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help(stdout);
            return 0;
        }
        int r = loom_cli_model_opt(&o, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r == 1)
            continue;
        if (!strcmp(a, "--chat")) {
            chat = 1;
            continue;
        }
        if (!strcmp(a, "--print-ids")) {
            print_ids = 1;
            continue;
        }
        if (!strcmp(a, "--stats")) {
            stats = 1;
            continue;
        }
        if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = 1;
            continue;
        }
        if (a[0] == '-') { /* every other option takes a value */
            if (i + 1 >= argc) {
                fprintf(stderr, "loom run: %s needs a value\n", a);
                return 2;
            }
            const char *v = argv[++i];
            double d;
            int bad = 0;
            if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
                text = v;
            else if (!strcmp(a, "--ids"))
                ids_s = v;
            else if (!strcmp(a, "--stop")) {
                if (n_stop == MAX_STOP) {
                    fprintf(stderr, "loom run: at most %d --stop\n", MAX_STOP);
                    return 2;
                }
                stops[n_stop++] = v;
            } else if (!strcmp(a, "--seed")) {
                bad = parse_u64(a, v, &seed);
                has_seed = 1;
            } else if (parse_num(a, v, &d)) {
                return 2;
            } else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
                max_tokens = (int64_t)d;
                bad = d < 0 || d != floor(d) || d > INT32_MAX;
            } else if (!strcmp(a, "--prefill-chunk")) {
                chunk = (int64_t)d;
                bad = d < 0 || d != floor(d) || d > INT32_MAX;
            } else if (!strcmp(a, "--temperature"))
                temp = d;
            else if (!strcmp(a, "--top-k")) {
                top_k = d;
                bad = d != floor(d) || d < INT32_MIN || d > INT32_MAX;
            } else if (!strcmp(a, "--top-p"))
                top_p = d;
            else if (!strcmp(a, "--min-p"))
                min_p = d;
            else if (!strcmp(a, "--repeat-penalty"))
                rep = d;
            else if (!strcmp(a, "--presence-penalty"))
                pres = d;
            else if (!strcmp(a, "--frequency-penalty"))
                freq = d;
            else {
                fprintf(stderr, "loom run: unknown option '%s'\n", a);
                help(stderr);
                return 2;
            }
            if (bad) {
                fprintf(stderr, "loom run: %s: '%s' is out of range\n", a, v);
                return 2;
            }
            continue;
        }
        if (model) {
            fprintf(stderr, "loom run: unexpected argument '%s'\n", a);
            help(stderr);
            return 2;
        }
        model = a;
    }
    if (!model || (!text && !ids_s) || (text && ids_s)) {
        fprintf(stderr, "loom run: give MODEL and one of -p TEXT or --ids\n");
        help(stderr);
        return 2;
    }
    if (chat && !text) {
        fprintf(stderr, "loom run: --chat needs -p TEXT\n");
        return 2;
    }

    loom_engine_params ep;
    loom_cli_engine_params(&o, model, &ep);
    loom_engine *e = NULL;
    loom_err err = {{0}};
    if (loom_engine_open(&ep, &e, &err) != LOOM_OK) {
        fprintf(stderr, "loom run: %s\n", err.msg);
        return 1;
    }
    const char *dir = loom_checkpoint_dir(e->ckpt);
    int rc = 0;
    loom_tokenizer *tok = NULL;
    int32_t *prompt = NULL, n_prompt = 0;
    loom_lane *lane = NULL;
    run_state st;
    memset(&st, 0, sizeof st);
    st.print_ids = print_ids;

    if (loom_tokenizer_open(dir, &tok, &err) != LOOM_OK) {
        tok = NULL;
        if (text) {
            fprintf(stderr, "loom run: %s (give the prompt with --ids)\n",
                    err.msg);
            rc = 1;
            goto done;
        }
        if (!print_ids)
            fprintf(stderr, "loom run: no tokenizer (%s): printing ids\n",
                    err.msg);
        st.print_ids = print_ids = 1;
    }
    if (text) {
        if (encode_prompt(dir, tok, text, chat, &prompt, &n_prompt)) {
            rc = 1;
            goto done;
        }
    } else if (loom_cli_parse_ids(ids_s, &prompt, &n_prompt) != 0) {
        rc = 2;
        goto done;
    }

    loom_lane_params lp;
    memset(&lp, 0, sizeof lp);
    lp.engine = e;
    lp.tokenizer = tok; /* stop strings need text even with --print-ids */
    lp.max_streams = 1;
    lp.prefill_chunk = (int32_t)chunk;
    if (loom_lane_new(&lp, &lane, &err) != LOOM_OK) {
        fprintf(stderr, "loom run: %s\n", err.msg);
        rc = 1;
        goto done;
    }
    loom_stream_params sp;
    memset(&sp, 0, sizeof sp);
    sp.prompt = prompt;
    sp.n_prompt = n_prompt;
    loom_sample_params_default(&sp.sample);
    generation_defaults(e, &sp.sample);
    if (!isnan(temp))
        sp.sample.temperature = (float)temp;
    if (!isnan(top_k))
        sp.sample.top_k = (int32_t)top_k;
    if (!isnan(top_p))
        sp.sample.top_p = (float)top_p;
    if (!isnan(min_p))
        sp.sample.min_p = (float)min_p;
    if (!isnan(rep))
        sp.sample.repeat_penalty = (float)rep;
    if (!isnan(pres))
        sp.sample.presence_penalty = (float)pres;
    if (!isnan(freq))
        sp.sample.frequency_penalty = (float)freq;
    sp.sample.seed = seed;
    sp.sample.has_seed = has_seed;
    sp.max_tokens = (int32_t)max_tokens;
    sp.stop = stops;
    sp.n_stop = n_stop;
    sp.ignore_eos = ignore_eos;
    sp.cb = on_event;
    sp.user = &st;
    if (loom_lane_add(lane, &sp, NULL, &err) != LOOM_OK) {
        fprintf(stderr, "loom run: %s\n", err.msg);
        rc = 1;
        goto done;
    }
    while (!st.done) {
        if (loom_lane_step(lane, NULL, &err) != LOOM_OK && !st.done) {
            fprintf(stderr, "loom run: %s\n", err.msg);
            rc = 1;
            goto done;
        }
    }
    if (print_ids) {
        printf("[");
        for (int32_t i = 0; i < st.n_ids; i++)
            printf("%s%d", i ? ", " : "", st.ids[i]);
        printf("]\n");
    } else if (st.wrote_text) {
        printf("\n");
    }
    fflush(stdout);
    if (st.last.finish == LOOM_FINISH_ERROR) {
        fprintf(stderr, "loom run: %s\n", st.error);
        rc = 1;
    }
    if (stats) {
        const loom_lane_event *ev = &st.last;
        double ttft = ev->ttft_s, dec = ev->elapsed_s - ev->ttft_s;
        int32_t ng = ev->n_generated;
        fprintf(stderr,
                "loom run: prompt %d tokens, %.1f tok/s; generated %d "
                "tokens, decode %.1f tok/s; time to first token %.1f ms; "
                "finish %s; seed %llu\n",
                ev->n_prompt, ttft > 0 ? ev->n_prompt / ttft : 0.0, ng,
                ng > 1 && dec > 0 ? (ng - 1) / dec : 0.0, ttft * 1e3,
                loom_finish_name(ev->finish), (unsigned long long)ev->seed);
        if (e->drafter) {
            loom_lane_stats ls;
            loom_lane_get_stats(lane, &ls);
            loom_cli_print_acceptance(stderr, "loom run", &ls);
        }
    }
done:
    loom_lane_free(lane);
    free(st.ids);
    free(prompt);
    if (tok)
        loom_tokenizer_free(tok);
    loom_engine_close(e);
    return rc;
}
