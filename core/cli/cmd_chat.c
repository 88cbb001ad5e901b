/* `loom chat MODEL`: an interactive multi-turn chat on a terminal. Each turn
 * renders the whole conversation with the chat template and streams the
 * reply; /exit (or end of input) leaves, /clear starts over. */
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

static const char chat_usage[] =
    "usage: loom chat MODEL [options]\n\n"
    "An interactive chat: type a message and the reply streams back; the "
    "conversation\nis kept and formatted with the model's chat template each "
    "turn. /exit or end of\ninput leaves, /clear forgets the conversation.\n";

typedef struct chat_reply {
    char *text;
    size_t len, cap;
    int done, failed;
    loom_finish finish;
    char error[512];
} chat_reply;

static int on_event(void *user, const loom_lane_event *ev)
{
    chat_reply *r = user;
    if (ev->text && ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
        if (r->len + ev->text_len + 1 > r->cap) {
            size_t cap = (r->len + ev->text_len + 1) * 2;
            char *t = realloc(r->text, cap);
            if (!t) {
                r->failed = 1;
                return 1;
            }
            r->text = t;
            r->cap = cap;
        }
        memcpy(r->text + r->len, ev->text, ev->text_len);
        r->len += ev->text_len;
        r->text[r->len] = 0;
    }
    if (ev->finish != LOOM_FINISH_NONE) {
        r->finish = ev->finish;
        if (ev->error)
            snprintf(r->error, sizeof r->error, "%s", ev->error);
        r->done = 1;
    }
    return 0;
}

/* One line of input without its newline (malloc'd), or NULL at its end. */
static char *read_line(FILE *in)
{
    size_t cap = 256, n = 0;
    char *s = malloc(cap);
    int c = EOF;
    while (s && (c = fgetc(in)) != EOF && c != '\n') {
        if (n + 1 == cap) {
            char *t = realloc(s, cap * 2);
            if (!t) {
                free(s);
                return NULL;
            }
            s = t;
            cap *= 2;
        }
        s[n++] = (char)c;
    }
    if (!s || (c == EOF && n == 0)) {
        free(s);
        return NULL;
    }
    if (n && s[n - 1] == '\r')
        n--;
    s[n] = 0;
    return s;
}

/* The conversation with a new turn's generation prompt -> ids. */
static int encode(const loom_chat_template *t, const loom_tokenizer *tok,
                  json_t *history, int32_t **ids, int32_t *n)
{
    loom_err err = {{0}};
    char *text = NULL;
    size_t nn = 0;
    if (loom_chat_template_render(t, history, 1, NULL, &text, &err) !=
            LOOM_OK ||
        loom_tokenizer_encode(tok, text, strlen(text), 1, ids, &nn, &err) !=
            LOOM_OK) {
        fprintf(stderr, "loom chat: %s\n", err.msg);
        free(text);
        return 1;
    }
    free(text);
    *n = (int32_t)nn;
    return 0;
}

/* One reply: streams it to stdout and keeps it in the history. Returns 0,
 * or 1 when the turn failed (the history is left without it). */
static int turn(loom_lane *lane, loom_engine *e, const loom_chat_template *t,
                const loom_tokenizer *tok, const loom_cli_sample *smp,
                int64_t max_tokens, json_t *history)
{
    int32_t *ids = NULL, n = 0;
    if (encode(t, tok, history, &ids, &n))
        return 1;
    loom_stream_params sp;
    memset(&sp, 0, sizeof sp);
    sp.prompt = ids;
    sp.n_prompt = n;
    loom_cli_sample_apply(smp, e, &sp.sample);
    sp.max_tokens = (int32_t)max_tokens;
    chat_reply r;
    memset(&r, 0, sizeof r);
    sp.cb = on_event;
    sp.user = &r;
    loom_err err = {{0}};
    int rc = 0;
    if (loom_lane_add(lane, &sp, NULL, &err) != LOOM_OK) {
        fprintf(stderr, "loom chat: %s (/clear starts over)\n", err.msg);
        rc = 1;
    }
    while (rc == 0 && !r.done)
        if (loom_lane_step(lane, NULL, &err) != LOOM_OK && !r.done) {
            fprintf(stderr, "loom chat: %s\n", err.msg);
            rc = 1;
        }
    free(ids);
    if (rc == 0) {
        printf("\n");
        fflush(stdout);
    }
    if (rc == 0 && (r.failed || r.finish == LOOM_FINISH_ERROR)) {
        fprintf(stderr, "loom chat: %s\n",
                r.failed ? "out of memory" : r.error);
        rc = 1;
    }
    if (rc == 0)
        json_array_append_new(history, json_pack("{s:s, s:s%}", "role",
                                                 "assistant", "content",
                                                 r.text ? r.text : "", r.len));
    free(r.text);
    return rc;
}

static json_t *new_history(const char *system)
{
    json_t *h = json_array();
    if (h && system)
        json_array_append_new(
            h, json_pack("{s:s, s:s}", "role", "system", "content", system));
    return h;
}

int loom_cmd_chat(int argc, char **argv)
{
    loom_cli_model_opts o;
    loom_cli_model_opts_init(&o, LOOM_CLI_ALL);
    loom_cli_sample smp;
    loom_cli_sample_init(&smp);
    const char *system = NULL, *template_file = NULL;
    int64_t max_tokens = 0;
    const loom_cli_opt opts[] = {
        {0, "system", "TEXT", LOOM_OPT_STR, &system, 0, 0, NULL, NULL,
         "a system message that opens the conversation"},
        {0, "chat-template", "FILE", LOOM_OPT_STR, &template_file, 0, 0, NULL,
         NULL, "a Jinja chat template instead of the model's"},
        {'n', "max-tokens", "N", LOOM_OPT_INT, &max_tokens, 0, INT32_MAX, NULL,
         NULL, "most tokens a reply may have (default 0: until eos)"},
        {0},
    };
    const loom_cli_cmd cmd = {
        "chat", chat_usage, {opts, smp.table, o.table}, 1, 1};
    const char *model;
    int r = loom_cli_parse(&cmd, argc, argv, &model);
    if (r >= 0)
        return r;

    int tty = loom_is_terminal(0) && loom_is_terminal(1);
    loom_engine_params ep;
    loom_cli_engine_params(&o, model, &ep);
    ep.max_streams = 1; /* one conversation: the cache pool holds one slot */
    if (loom_is_terminal(2)) {
        ep.progress = loom_cli_progress;
        ep.progress_user = (void *)"loom chat: loading";
    }
    loom_engine *e = NULL;
    loom_err err = {{0}};
    if (loom_engine_open(&ep, &e, &err) != LOOM_OK) {
        fprintf(stderr, "loom chat: %s\n", err.msg);
        return 1;
    }
    const char *dir = loom_checkpoint_dir(e->ckpt);
    loom_tokenizer *tok = NULL;
    loom_chat_template *t = NULL;
    loom_lane *lane = NULL;
    json_t *history = NULL;
    int rc = 1;
    if (loom_tokenizer_open(dir, &tok, &err) != LOOM_OK ||
        loom_chat_template_load_file(dir, template_file, &t, &err) != LOOM_OK) {
        fprintf(stderr, "loom chat: %s\n", err.msg);
        goto done;
    }
    loom_lane_params lp;
    memset(&lp, 0, sizeof lp);
    lp.engine = e;
    lp.tokenizer = tok;
    lp.max_streams = 1;
    if (loom_lane_new(&lp, &lane, &err) != LOOM_OK) {
        fprintf(stderr, "loom chat: %s\n", err.msg);
        goto done;
    }
    history = new_history(system);
    if (!history)
        goto done;
    if (tty)
        printf("loom chat: %s on %s; /exit leaves, /clear starts over\n",
               e->plugin->plugin->name,
               e->info.device == LOOM_DEVICE_CUDA ? "cuda" : "cpu");
    rc = 0;
    for (;;) {
        if (tty) {
            printf("> ");
            fflush(stdout);
        }
        char *line = read_line(stdin);
        if (!line || !strcmp(line, "/exit") || !strcmp(line, "/quit")) {
            free(line);
            break;
        }
        if (!strcmp(line, "/clear")) {
            free(line);
            json_decref(history);
            history = new_history(system);
            if (!history) {
                rc = 1;
                break;
            }
            continue;
        }
        if (!line[0]) {
            free(line);
            continue;
        }
        json_array_append_new(
            history, json_pack("{s:s, s:s}", "role", "user", "content", line));
        free(line);
        if (turn(lane, e, t, tok, &smp, max_tokens, history) != 0) {
            /* the message that failed is not kept */
            json_array_remove(history, json_array_size(history) - 1);
            if (!tty) {
                rc = 1;
                break;
            }
        }
    }
done:
    json_decref(history);
    loom_lane_free(lane);
    loom_chat_template_free(t);
    if (tok)
        loom_tokenizer_free(tok);
    loom_engine_close(e);
    return rc;
}
