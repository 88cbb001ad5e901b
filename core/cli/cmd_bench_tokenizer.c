/* `loom bench-tokenizer MODEL FILE`: single-thread encoding speed of a
 * checkpoint's tokenizer on a text, printed as JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/checkpoint.h>
#include <loom/model_id.h>
#include <loom/platform.h>
#include <loom/tokenizer.h>

#include "cli_opts.h"
#include "commands.h"

static const char bt_usage[] =
    "usage: loom bench-tokenizer MODEL FILE [options]\n\n"
    "Encodes FILE (repeated until it is at least N MB) on one thread again "
    "and\nagain for at least S seconds and prints one JSON object: bytes, "
    "tokens,\nseconds per encode, mb_per_s (1 MB = 10^6 bytes), tokens_per_s "
    "and\nload_seconds.\n";

int loom_cmd_bench_tokenizer(int argc, char **argv)
{
    double size_mb = 4, seconds = 2;
    const loom_cli_opt opts[] = {
        {0, "size-mb", "N", LOOM_OPT_NUM, &size_mb, 1e-6, 4096, NULL, NULL,
         "repeat FILE to at least N MB (default 4)"},
        {0, "seconds", "S", LOOM_OPT_NUM, &seconds, 0, 1e6, NULL, NULL,
         "encode for at least S seconds (default 2)"},
        {0},
    };
    const loom_cli_cmd cmd = {"bench-tokenizer", bt_usage, {opts}, 2, 2};
    const char *pos[2];
    int r = loom_cli_parse(&cmd, argc, argv, pos);
    if (r >= 0)
        return r;
    const char *model = pos[0], *file = pos[1];
    loom_err err;
    char dir[4096];
    char *data = NULL;
    size_t size = 0;
    if (loom_read_file(file, &data, &size, &err) != LOOM_OK) {
        fprintf(stderr, "loom bench-tokenizer: %s\n", err.msg);
        return 1;
    }
    if (size == 0) {
        fprintf(stderr, "loom bench-tokenizer: %s is empty\n", file);
        free(data);
        return 1;
    }
    size_t want = (size_t)(size_mb * 1e6);
    size_t total = size * ((want + size - 1) / size);
    char *text = malloc(total);
    if (!text) {
        fprintf(stderr, "loom bench-tokenizer: out of memory\n");
        free(data);
        return 1;
    }
    for (size_t o = 0; o < total; o += size)
        memcpy(text + o, data, size);
    free(data);

    loom_tokenizer *tok = NULL;
    uint64_t t0 = loom_now_ns();
    if (loom_model_resolve(model, dir, sizeof dir, &err) != LOOM_OK ||
        loom_tokenizer_open(dir, &tok, &err) != LOOM_OK) {
        fprintf(stderr, "loom bench-tokenizer: %s\n", err.msg);
        free(text);
        return 1;
    }
    double load_s = (double)(loom_now_ns() - t0) * 1e-9;
    int runs = 0;
    size_t tokens = 0;
    double spent = 0;
    int rc = 0;
    while (spent < seconds || runs == 0) {
        int32_t *ids = NULL;
        uint64_t a = loom_now_ns();
        if (loom_tokenizer_encode(tok, text, total, 1, &ids, &tokens, &err) !=
            LOOM_OK) {
            fprintf(stderr, "loom bench-tokenizer: %s\n", err.msg);
            rc = 1;
            break;
        }
        spent += (double)(loom_now_ns() - a) * 1e-9;
        free(ids);
        runs++;
    }
    if (rc == 0) {
        double per = spent / runs;
        printf("{\"bytes\": %zu, \"tokens\": %zu, \"runs\": %d, "
               "\"seconds\": %.4f, \"mb_per_s\": %.2f, \"tokens_per_s\": "
               "%.0f, \"load_seconds\": %.3f}\n",
               total, tokens, runs, per, (double)total / per / 1e6,
               (double)tokens / per, load_s);
    }
    loom_tokenizer_free(tok);
    free(text);
    return rc;
}
