/* `loom bench-tokenizer MODEL FILE`: single-thread encoding speed of a
 * checkpoint's tokenizer on a text, printed as JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/checkpoint.h>
#include <loom/model_id.h>
#include <loom/platform.h>
#include <loom/tokenizer.h>

#include "commands.h"

static void help(FILE *out)
{
    fprintf(out,
            "usage: loom bench-tokenizer MODEL FILE [--size-mb N] "
            "[--seconds S]\n\n"
            "Encodes FILE (repeated until it is at least N MB, default 4) "
            "on one thread\nagain and again for at least S seconds (default "
            "2) and prints one JSON\nobject: bytes, tokens, seconds per "
            "encode, mb_per_s (1 MB = 10^6 bytes),\ntokens_per_s and "
            "load_seconds.\n");
}

int loom_cmd_bench_tokenizer(int argc, char **argv)
{
    const char *model = NULL, *file = NULL;
    double size_mb = 4, seconds = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            help(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--size-mb") && i + 1 < argc) {
            size_mb = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            seconds = atof(argv[++i]);
        } else if (argv[i][0] != '-' && !model) {
            model = argv[i];
        } else if (argv[i][0] != '-' && !file) {
            file = argv[i];
        } else {
            fprintf(stderr, "loom bench-tokenizer: unexpected argument '%s'\n",
                    argv[i]);
            help(stderr);
            return 2;
        }
    }
    if (!model || !file || size_mb <= 0 || size_mb > 4096) {
        help(stderr);
        return 2;
    }
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
