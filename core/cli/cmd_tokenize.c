/* `loom tokenize`, `loom detokenize` and `loom chat-format`: a checkpoint's
 * tokenizer and chat template from the command line. */
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

static void tokenize_help(FILE *out)
{
    fprintf(out,
            "usage: loom tokenize MODEL TEXT [--no-special]\n\n"
            "Prints the token ids of TEXT as a JSON array, as the Hugging "
            "Face tokenizers\nlibrary's encode(TEXT, add_special_tokens=False) "
            "gives them: added tokens\nwritten in TEXT (e.g. <|im_end|>) "
            "become their ids.\nMODEL is a checkpoint directory or an "
            "org/name id in the local hub cache.\n\n"
            "  --no-special   encode special tokens written in TEXT as plain "
            "text\n");
}

int loom_cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL;
    int parse_special = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            tokenize_help(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--no-special")) {
            parse_special = 0;
        } else if (!model) {
            model = argv[i];
        } else if (!text) {
            text = argv[i];
        } else {
            fprintf(stderr, "loom tokenize: unexpected argument '%s'\n",
                    argv[i]);
            tokenize_help(stderr);
            return 2;
        }
    }
    if (!model || !text) {
        tokenize_help(stderr);
        return 2;
    }
    loom_tokenizer *tok;
    if (!open_tokenizer("tokenize", model, &tok))
        return 1;
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
    loom_tokenizer_free(tok);
    return rc;
}

static void detokenize_help(FILE *out)
{
    fprintf(out,
            "usage: loom detokenize MODEL IDS [--skip-special] [--raw]\n\n"
            "Prints the text of IDS (comma-separated, e.g. 9707,11,1879) "
            "followed by a\nnewline. Bytes that are not valid UTF-8 become "
            "U+FFFD, as Hugging Face's\ndecode gives them.\n\n"
            "  --skip-special   leave special tokens out\n"
            "  --raw            no newline after the text\n");
}

int loom_cmd_detokenize(int argc, char **argv)
{
    const char *model = NULL, *list = NULL;
    int skip = 0, raw = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            detokenize_help(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--skip-special")) {
            skip = 1;
        } else if (!strcmp(argv[i], "--raw")) {
            raw = 1;
        } else if (!model) {
            model = argv[i];
        } else if (!list) {
            list = argv[i];
        } else {
            fprintf(stderr, "loom detokenize: unexpected argument '%s'\n",
                    argv[i]);
            detokenize_help(stderr);
            return 2;
        }
    }
    if (!model || !list) {
        detokenize_help(stderr);
        return 2;
    }
    int32_t *ids = NULL;
    int32_t n = 0;
    if (loom_cli_parse_ids(list, &ids, &n) != 0) {
        fprintf(stderr, "loom detokenize: '%s' is not a list of ids\n", list);
        return 2;
    }
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

static void chat_help(FILE *out)
{
    fprintf(out,
            "usage: loom chat-format MODEL MESSAGES.json "
            "[--no-generation-prompt]\n\n"
            "Renders the messages with the chat template of MODEL's "
            "tokenizer_config.json\nand prints the text, as Hugging Face's "
            "apply_chat_template(tokenize=False)\ngives it. MESSAGES.json is "
            "an array of {\"role\", \"content\"} objects, or an\nobject "
            "with \"messages\" and other template variables (\"tools\", "
            "\"enable_thinking\", ...).\n\n"
            "  --no-generation-prompt   do not open an assistant turn at the "
            "end\n");
}

int loom_cmd_chat_format(int argc, char **argv)
{
    const char *model = NULL, *file = NULL;
    int gen = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            chat_help(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--no-generation-prompt")) {
            gen = 0;
        } else if (!model) {
            model = argv[i];
        } else if (!file) {
            file = argv[i];
        } else {
            fprintf(stderr, "loom chat-format: unexpected argument '%s'\n",
                    argv[i]);
            chat_help(stderr);
            return 2;
        }
    }
    if (!model || !file) {
        chat_help(stderr);
        return 2;
    }
    char dir[4096];
    loom_err err;
    json_t *doc = NULL;
    loom_chat_template *tpl = NULL;
    char *text = NULL;
    int rc = 1;
    if (loom_model_resolve(model, dir, sizeof dir, &err) != LOOM_OK ||
        loom_json_load_file(file, &doc, &err) != LOOM_OK ||
        loom_chat_template_load(dir, &tpl, &err) != LOOM_OK)
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
