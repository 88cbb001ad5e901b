/* `loom tokenize`, `loom detokenize` and `loom chat-format`: a checkpoint's
 * tokenizer and chat template from the command line. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <loom/chat_template.h>
#include <loom/checkpoint.h>
#include <loom/model_id.h>
#include <loom/tokenizer.h>

#include "cli_common.h"
#include "commands.h"

static int open_tokenizer(const char *cmd, const char *model,
                          loom_tokenizer **tok)
{
    char dir[4096];
    loom_err err;
    if (loom_model_resolve(model, dir, sizeof dir, &err) != LOOM_OK ||
        loom_tokenizer_open(dir, tok, &err) != LOOM_OK) {
        fprintf(stderr, "loom %s: %s\n", cmd, err.msg);
        return 0;
    }
    return 1;
}

static const char tokenize_usage[] =
    "usage: loom tokenize MODEL (TEXT | -f FILE) [options]\n\n"
    "Prints the token ids of TEXT (-: stdin) as a JSON array, as the Hugging "
    "Face\ntokenizers library's encode(TEXT, add_special_tokens=False) gives "
    "them: added\ntokens written in TEXT (e.g. <|im_end|>) become their ids.\n"
    "MODEL is a checkpoint directory or an org/name[@REV] id in the local hub "
    "cache.\n";

int loom_cmd_tokenize(int argc, char **argv)
{
    int no_special = 0;
    const char *file = NULL;
    const loom_cli_opt opts[] = {
        {0, "no-special", NULL, LOOM_OPT_FLAG, &no_special, 0, 0, NULL, NULL,
         "encode special tokens written in TEXT as plain text"},
        {'f', "file", "FILE", LOOM_OPT_STR, &file, 0, 0, NULL, NULL,
         "read TEXT from FILE (-: stdin)"},
        {0},
    };
    const loom_cli_cmd cmd = {"tokenize", tokenize_usage, {opts}, 1, 2};
    const char *pos[2];
    int r = loom_cli_parse(&cmd, argc, argv, pos);
    if (r >= 0)
        return r;
    const char *model = pos[0], *text = pos[1];
    int parse_special = !no_special;
    if (!!text == !!file) {
        fprintf(stderr, "loom tokenize: give TEXT or -f FILE\n");
        return 2;
    }
    char *read_text = NULL;
    if (file || !strcmp(text, "-")) {
        if (!(read_text = loom_cli_read_text("tokenize", file ? file : "-")))
            return 1;
        text = read_text;
    }
    loom_tokenizer *tok;
    if (!open_tokenizer("tokenize", model, &tok)) {
        free(read_text);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    loom_err err;
    int rc = 0;
    if (loom_tokenizer_encode(tok, text, strlen(text), parse_special, &ids, &n,
                              &err) != LOOM_OK) {
        fprintf(stderr, "loom tokenize: %s\n", err.msg);
        rc = 1;
    } else {
        putchar('[');
        for (size_t i = 0; i < n; i++)
            printf(i ? ", %d" : "%d", (int)ids[i]);
        printf("]\n");
    }
    free(ids);
    free(read_text);
    loom_tokenizer_free(tok);
    return rc;
}

/* IDS as `loom tokenize` prints them ("[9707, 11]") or as a list
 * ("9707,11", "9707 11"). Returns 0, or -1 with a message. */
static int parse_id_text(const char *s, int32_t **ids, int32_t *n)
{
    size_t cap = 16, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v)
        return -1;
    const char *p = s;
    while (isspace((unsigned char)*p))
        p++;
    int bracket = *p == '[';
    p += bracket;
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        if (!*p || (bracket && *p == ']'))
            break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 0 || x > INT32_MAX) {
            fprintf(stderr, "loom detokenize: bad token id at '%.20s'\n", p);
            free(v);
            return -1;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, cap * 2 * sizeof *nv);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
            cap *= 2;
        }
        v[k++] = (int32_t)x;
        p = end;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == ',')
            p++;
        else if (*p && !(bracket && *p == ']') &&
                 !isspace((unsigned char)p[-1])) {
            fprintf(stderr, "loom detokenize: bad token id at '%.20s'\n", p);
            free(v);
            return -1;
        }
    }
    int open = bracket && *p != ']';
    p += bracket && !open;
    while (isspace((unsigned char)*p))
        p++;
    if (*p || k == 0 || open) {
        fprintf(stderr, "loom detokenize: %s\n",
                open ? "no closing ']'"
                : k  ? "text after the closing ']'"
                     : "no token ids");
        free(v);
        return -1;
    }
    *ids = v;
    *n = (int32_t)k;
    return 0;
}

static const char detokenize_usage[] =
    "usage: loom detokenize MODEL IDS [options]\n\n"
    "Prints the text of IDS followed by a newline: comma- or space-separated "
    "ids\n(9707,11,1879), or loom tokenize's output ([9707, 11, 1879]); -: "
    "read them\nfrom stdin. Bytes that are not valid UTF-8 become U+FFFD, as "
    "Hugging Face's\ndecode gives them.\n";

int loom_cmd_detokenize(int argc, char **argv)
{
    int skip = 0, raw = 0;
    const loom_cli_opt opts[] = {
        {0, "skip-special", NULL, LOOM_OPT_FLAG, &skip, 0, 0, NULL, NULL,
         "leave special tokens out"},
        {0, "raw", NULL, LOOM_OPT_FLAG, &raw, 0, 0, NULL, NULL,
         "no newline after the text"},
        {0},
    };
    const loom_cli_cmd cmd = {"detokenize", detokenize_usage, {opts}, 2, 2};
    const char *pos[2];
    int r = loom_cli_parse(&cmd, argc, argv, pos);
    if (r >= 0)
        return r;
    const char *model = pos[0], *list = pos[1];
    char *read_text = NULL;
    if (!strcmp(list, "-")) {
        if (!(read_text = loom_cli_read_text("detokenize", "-")))
            return 1;
        list = read_text;
    }
    int32_t *ids = NULL;
    int32_t n = 0;
    r = parse_id_text(list, &ids, &n);
    free(read_text);
    if (r != 0)
        return 2;
    loom_tokenizer *tok;
    if (!open_tokenizer("detokenize", model, &tok)) {
        free(ids);
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    loom_err err;
    int rc = 0;
    if (loom_tokenizer_decode(tok, ids, (size_t)n, skip, &text, &len, &err) !=
        LOOM_OK) {
        fprintf(stderr, "loom detokenize: %s\n", err.msg);
        rc = 1;
    } else {
        fwrite(text, 1, len, stdout);
        if (!raw)
            putchar('\n');
    }
    free(text);
    free(ids);
    loom_tokenizer_free(tok);
    return rc;
}

/* MESSAGES.json, or stdin for "-". */
static loom_status load_messages(const char *file, json_t **doc, loom_err *err)
{
    if (strcmp(file, "-"))
        return loom_json_load_file(file, doc, err);
    char *text = loom_cli_read_text("chat-format", "-");
    if (!text)
        return loom_err_set(err, LOOM_ERR_IO, "stdin: not read");
    json_error_t je;
    *doc = json_loads(text, 0, &je);
    free(text);
    if (!*doc)
        return loom_err_set(err, LOOM_ERR_FORMAT, "stdin:%d:%d: %s", je.line,
                            je.column, je.text);
    return LOOM_OK;
}

static const char chat_usage[] =
    "usage: loom chat-format MODEL MESSAGES.json [options]\n\n"
    "Renders the messages with the chat template of MODEL (chat_template.jinja "
    "or\ntokenizer_config.json) and prints the text, as Hugging Face's\n"
    "apply_chat_template(tokenize=False) gives it. MESSAGES.json (-: stdin) is "
    "an\narray of {\"role\", \"content\"} objects, or an object with "
    "\"messages\" and\nother template variables (\"tools\", "
    "\"enable_thinking\", ...).\n";

int loom_cmd_chat_format(int argc, char **argv)
{
    int no_gen = 0;
    const char *template_file = NULL;
    const loom_cli_opt opts[] = {
        {0, "no-generation-prompt", NULL, LOOM_OPT_FLAG, &no_gen, 0, 0, NULL,
         NULL, "do not open an assistant turn at the end"},
        {0, "chat-template", "FILE", LOOM_OPT_STR, &template_file, 0, 0, NULL,
         NULL, "a Jinja chat template instead of the model's"},
        {0},
    };
    const loom_cli_cmd cmd = {"chat-format", chat_usage, {opts}, 2, 2};
    const char *pos[2];
    int r = loom_cli_parse(&cmd, argc, argv, pos);
    if (r >= 0)
        return r;
    const char *model = pos[0], *file = pos[1];
    int gen = !no_gen;
    char dir[4096];
    loom_err err;
    json_t *doc = NULL;
    loom_chat_template *tpl = NULL;
    char *text = NULL;
    int rc = 1;
    if (loom_model_resolve(model, dir, sizeof dir, &err) != LOOM_OK ||
        load_messages(file, &doc, &err) != LOOM_OK ||
        loom_chat_template_load_file(dir, template_file, &tpl, &err) != LOOM_OK)
        goto done;
    json_t *messages = doc, *extra = NULL;
    if (json_is_object(doc)) {
        messages = json_object_get(doc, "messages");
        extra = json_deep_copy(doc);
        json_object_del(extra, "messages");
    }
    loom_status st =
        loom_chat_template_render(tpl, messages, gen, extra, &text, &err);
    json_decref(extra);
    if (st != LOOM_OK)
        goto done;
    fputs(text, stdout);
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "loom chat-format: %s\n", err.msg);
    free(text);
    loom_chat_template_free(tpl);
    json_decref(doc);
    return rc;
}
