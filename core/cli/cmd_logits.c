/* `loom logits MODEL --ids 1,2,3 --out FILE.f32`: one forward over the ids as
 * a single prompt; writes float32 [T, vocab] little-endian (the format of the
 * reference fixtures' logits.f32), for checking a model against a reference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"
#include "commands.h"

static const char logits_usage[] =
    "usage: loom logits MODEL --ids 1,2,3 --out FILE.f32 [options]\n\n"
    "Runs one forward over the ids as a single prompt and writes the logits "
    "at\nevery position as little-endian float32 [T, vocab].\n";

/* The prompt's rows, fed in chunks of at most max_rows; every row asks for
 * its logits, which land in order in `logits`. */
static int run_prompt(loom_engine *e, const int32_t *ids, int32_t n,
                      float *logits)
{
    loom_err err = {{0}};
    loom_cache *cache = NULL;
    if (loom_family_cache_new(&e->family, e->model, &cache, &err) != LOOM_OK) {
        fprintf(stderr, "loom logits: %s\n", err.msg);
        return 1;
    }
    int32_t chunk = e->info.max_rows > 0 ? e->info.max_rows : 512;
    loom_row *rows = calloc((size_t)chunk, sizeof *rows);
    if (!rows) {
        loom_family_cache_free(&e->family, e->model, cache);
        fprintf(stderr, "loom logits: out of memory\n");
        return 1;
    }
    int rc = 0;
    for (int32_t p = 0; p < n && rc == 0; p += chunk) {
        int32_t k = n - p < chunk ? n - p : chunk;
        for (int32_t i = 0; i < k; i++)
            rows[i] = (loom_row){cache, ids[p + i], p + i, -1, LOOM_ROW_LOGITS};
        loom_round round = {sizeof round, sizeof *rows, rows, k};
        loom_output out;
        memset(&out, 0, sizeof out);
        out.struct_size = sizeof out;
        out.logits = loom_view_host_f32(
            logits + (size_t)p * (size_t)e->info.vocab, k, e->info.vocab);
        if (loom_family_forward(&e->family, e->model, &round, &out, &err) !=
            LOOM_OK) {
            fprintf(stderr, "loom logits: %s\n", err.msg);
            rc = 1;
        }
    }
    free(rows);
    loom_family_cache_free(&e->family, e->model, cache);
    return rc;
}

int loom_cmd_logits(int argc, char **argv)
{
    loom_cli_model_opts o;
    loom_cli_model_opts_init(&o, LOOM_CLI_ALL);
    const char *ids_s = NULL, *out_path = NULL;
    const loom_cli_opt opts[] = {
        {0, "ids", "LIST", LOOM_OPT_STR, &ids_s, 0, 0, NULL, NULL,
         "comma-separated token ids (required)"},
        {0, "out", "FILE", LOOM_OPT_STR, &out_path, 0, 0, NULL, NULL,
         "output file (required)"},
        {0},
    };
    const loom_cli_cmd cmd = {"logits", logits_usage, {opts, o.table}, 1, 1};
    const char *model;
    int r = loom_cli_parse(&cmd, argc, argv, &model);
    if (r >= 0)
        return r;
    if (!ids_s || !out_path) {
        loom_cli_help(&cmd, stderr);
        return 2;
    }
    int32_t *ids = NULL, n = 0;
    if (loom_cli_parse_ids(ids_s, &ids, &n) != 0)
        return 2;
    if (n == 0) {
        fprintf(stderr, "loom logits: --ids is empty\n");
        free(ids);
        return 2;
    }

    loom_engine_params p;
    loom_cli_engine_params(&o, model, &p);
    loom_engine *e = NULL;
    loom_err err = {{0}};
    if (loom_engine_open(&p, &e, &err) != LOOM_OK) {
        fprintf(stderr, "loom logits: %s\n", err.msg);
        free(ids);
        return 1;
    }
    int rc = 0;
    size_t count = (size_t)n * (size_t)e->info.vocab;
    float *logits = malloc(count * sizeof *logits);
    if (!logits) {
        fprintf(stderr, "loom logits: out of memory for %zu logits\n", count);
        rc = 1;
    }
    if (rc == 0)
        rc = run_prompt(e, ids, n, logits);
    if (rc == 0) {
        /* float32 little-endian: the host order on every supported target */
        FILE *f = fopen(out_path, "wb");
        if (!f || fwrite(logits, sizeof *logits, count, f) != count) {
            fprintf(stderr, "loom logits: cannot write %s\n", out_path);
            rc = 1;
        }
        if (f && fclose(f) != 0 && rc == 0) {
            fprintf(stderr, "loom logits: cannot write %s\n", out_path);
            rc = 1;
        }
    }
    if (rc == 0)
        fprintf(stderr, "loom logits: wrote [%d, %d] float32 to %s\n", n,
                e->info.vocab, out_path);
    free(logits);
    free(ids);
    loom_engine_close(e);
    return rc;
}
