/* `loom run MODEL -p TEXT`: generates from one prompt through the lane,
 * streaming the decoded text to stdout (or the ids with --print-ids). */
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
#include "cli_sample.h"
#include "commands.h"

#define MAX_STOP 16

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

/* TEXT (optionally as a chat user message) -> ids. */
static int encode_prompt(const char *dir, const loom_tokenizer *tok,
                         const char *text, int chat, const char *system,
                         const char *template_file, int32_t **ids, int32_t *n)
{
    loom_err err = {{0}};
    size_t nn = 0;
    loom_status rc;
    if (chat) {
        /* the server's prompt path: the template with the real message,
         * tokenized as transformers does */
        loom_chat_template *t = NULL;
        if (loom_chat_template_load_file(dir, template_file, &t, &err) !=
            LOOM_OK) {
            fprintf(stderr, "loom run: --chat: %s\n", err.msg);
            return 1;
        }
        json_t *msgs = json_array();
        if (msgs && system)
            json_array_append_new(msgs, json_pack("{s:s, s:s}", "role",
                                                  "system", "content", system));
        if (msgs)
            json_array_append_new(
                msgs, json_pack("{s:s, s:s}", "role", "user", "content", text));
        rc = msgs
                 ? loom_chat_prompt(t, tok, msgs, 1, NULL, NULL, ids, &nn, &err)
                 : loom_err_set(&err, LOOM_ERR_NOMEM, "out of memory");
        json_decref(msgs);
        loom_chat_template_free(t);
        if (rc != LOOM_OK) {
            fprintf(stderr, "loom run: --chat: %s\n", err.msg);
            return 1;
        }
    } else {
        rc = loom_tokenizer_encode(tok, text, strlen(text), 0, ids, &nn, &err);
        if (rc != LOOM_OK) {
            fprintf(stderr, "loom run: %s\n", err.msg);
            return 1;
        }
    }
    *n = (int32_t)nn;
    return 0;
}

static const char run_usage[] =
    "usage: loom run MODEL (-p TEXT | -f FILE | --ids 1,2,3) [options]\n\n"
    "Generates from one prompt and streams the text to stdout.\n";

int loom_cmd_run(int argc, char **argv)
{
    loom_cli_model_opts o;
    loom_cli_model_opts_init(&o, LOOM_CLI_ALL | LOOM_CLI_DRAFTER);
    loom_cli_sample smp;
    loom_cli_sample_init(&smp);
    const char *text = NULL, *file = NULL, *ids_s = NULL, *system = NULL,
               *template_file = NULL;
    const char *stops[MAX_STOP];
    int n_stop = 0, chat = 0, print_ids = 0, stats = 0, ignore_eos = 0;
    int64_t max_tokens = 128, chunk = 0;
    const loom_cli_opt opts[] = {
        {'p', "prompt", "TEXT", LOOM_OPT_STR, &text, 0, 0, NULL, NULL,
         "the prompt text (needs tokenizer.json); -: read stdin"},
        {'f', "file", "FILE", LOOM_OPT_STR, &file, 0, 0, NULL, NULL,
         "read the prompt text from FILE (-: stdin)"},
        {0, "ids", "LIST", LOOM_OPT_STR, &ids_s, 0, 0, NULL, NULL,
         "the prompt as comma-separated token ids"},
        {0, "chat", NULL, LOOM_OPT_FLAG, &chat, 0, 0, NULL, NULL,
         "format TEXT as a user message with the chat template"},
        {0, "system", "TEXT", LOOM_OPT_STR, &system, 0, 0, NULL, NULL,
         "a system message before it (implies --chat)"},
        {0, "chat-template", "FILE", LOOM_OPT_STR, &template_file, 0, 0, NULL,
         NULL, "a Jinja chat template instead of the model's (implies --chat)"},
        {'n', "max-tokens", "N", LOOM_OPT_INT, &max_tokens, 0, INT32_MAX, NULL,
         NULL,
         "tokens to generate (default 128; 0: until eos or the\ncontext is "
         "full)"},
        {0, "stop", "S", LOOM_OPT_LIST, stops, 0, MAX_STOP, &n_stop, NULL,
         "stop at this text, not printed (repeatable)"},
        {0, "ignore-eos", NULL, LOOM_OPT_FLAG, &ignore_eos, 0, 0, NULL, NULL,
         "do not stop at eos ids"},
        {0, "print-ids", NULL, LOOM_OPT_FLAG, &print_ids, 0, 0, NULL, NULL,
         "print the generated ids as a JSON array instead of text"},
        {0, "stats", NULL, LOOM_OPT_FLAG, &stats, 0, 0, NULL, NULL,
         "prompt and decode tok/s, time to first token on stderr\n(with "
         "--drafter, the acceptance lengths too)"},
        {0, "prefill-chunk", "N", LOOM_OPT_INT, &chunk, 0, INT32_MAX, NULL,
         NULL, "prompt rows per round (default: the model's max)"},
        {0},
    };
    const loom_cli_cmd cmd = {
        "run", run_usage, {opts, smp.table, o.table}, 1, 1};
    const char *model;
    int r = loom_cli_parse(&cmd, argc, argv, &model);
    if (r >= 0)
        return r;
    if ((!!text + !!file + !!ids_s) != 1) {
        fprintf(stderr,
                "loom run: give MODEL and one of -p TEXT, -f FILE or --ids\n");
        return 2;
    }
    if (system || template_file)
        chat = 1;
    if (chat && ids_s) {
        fprintf(stderr, "loom run: --chat needs -p TEXT or -f FILE\n");
        return 2;
    }
    char *read_text = NULL;
    if (file || (text && !strcmp(text, "-"))) {
        read_text = loom_cli_read_text("run", file ? file : "-");
        if (!read_text)
            return 1;
        text = read_text;
    }

    loom_engine_params ep;
    loom_cli_engine_params(&o, model, &ep);
    ep.max_streams = 1; /* one stream: the cache pool holds one slot */
    loom_engine *e = NULL;
    loom_err err = {{0}};
    if (loom_engine_open(&ep, &e, &err) != LOOM_OK) {
        fprintf(stderr, "loom run: %s\n", err.msg);
        free(read_text);
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
        if (encode_prompt(dir, tok, text, chat, system, template_file, &prompt,
                          &n_prompt)) {
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
    loom_cli_sample_apply(&smp, e, &sp.sample);
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
    free(read_text);
    return rc;
}
