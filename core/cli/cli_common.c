/* Option parsing shared by the subcommands that open a model. */
#include "cli_common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <loom/cuda_runtime.h>

static int need_value(int argc, char **argv, int i)
{
    if (i + 1 >= argc) {
        fprintf(stderr, "loom: %s needs a value\n", argv[i]);
        return 0;
    }
    return 1;
}

static int parse_int(const char *opt, const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) {
        fprintf(stderr, "loom: %s: '%s' is not an integer\n", opt, s);
        return 0;
    }
    *out = v;
    return 1;
}

int loom_cli_model_opt(loom_cli_model_opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    int64_t v;
    if (!strcmp(a, "--plugin-path")) {
        if (!need_value(argc, argv, *i))
            return -1;
        if (o->n_plugin_dirs == LOOM_CLI_MAX_PLUGIN_DIRS) {
            fprintf(stderr, "loom: at most %d --plugin-path options\n",
                    LOOM_CLI_MAX_PLUGIN_DIRS);
            return -1;
        }
        o->plugin_dirs[o->n_plugin_dirs++] = argv[++*i];
        return 1;
    }
    if (!strcmp(a, "--drafter")) {
        if (!need_value(argc, argv, *i))
            return -1;
        o->drafter = argv[++*i];
        return 1;
    }
    if (!strcmp(a, "--family")) {
        if (!need_value(argc, argv, *i))
            return -1;
        o->family = argv[++*i];
        return 1;
    }
    if (!strcmp(a, "--device")) {
        if (!need_value(argc, argv, *i))
            return -1;
        const char *d = argv[++*i];
        if (!strcmp(d, "cpu"))
            o->device = LOOM_DEVICE_CPU;
        else if (!strcmp(d, "cuda"))
            o->device = LOOM_DEVICE_CUDA;
        else if (!strcmp(d, "auto"))
            o->device = LOOM_DEVICE_AUTO;
        else {
            fprintf(stderr, "loom: --device: '%s' is not cpu, cuda or auto\n",
                    d);
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--gpu-memory")) {
        if (!need_value(argc, argv, *i))
            return -1;
        const char *m = argv[++*i];
        if (loom_cuda_parse_memory(m, &o->gpu_memory) != 0) {
            fprintf(stderr,
                    "loom: --gpu-memory: '%s' is not a byte count (K, M, G "
                    "suffixes allowed) nor a fraction in (0, 1]\n",
                    m);
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--threads")) {
        if (!need_value(argc, argv, *i) || !parse_int(a, argv[*i + 1], &v))
            return -1;
        if (v < 0 || v > 1024) {
            fprintf(stderr, "loom: --threads: %lld is out of range\n",
                    (long long)v);
            return -1;
        }
        o->n_threads = (int)v;
        ++*i;
        return 1;
    }
    if (!strcmp(a, "--ctx")) {
        if (!need_value(argc, argv, *i) || !parse_int(a, argv[*i + 1], &v))
            return -1;
        if (v < 0) {
            fprintf(stderr, "loom: --ctx: %lld is negative\n", (long long)v);
            return -1;
        }
        o->ctx = v;
        ++*i;
        return 1;
    }
    return 0;
}

void loom_cli_model_opts_help(FILE *out)
{
    fprintf(out,
            "  --plugin-path DIR   search DIR for plugins first (repeatable)\n"
            "  --family NAME       use this family plugin, whatever the probes "
            "say\n"
            "  --device D          cpu, cuda or auto (default: auto: the GPU "
            "when there is one)\n"
            "  --gpu-memory M      device memory budget: bytes (8G) or a "
            "fraction (default 0.9)\n"
            "  --threads N         CPU threads (default: one per core)\n"
            "  --ctx N             context limit in tokens (default: the "
            "model's)\n"
            "  --drafter D         speculate with drafter D: a checkpoint "
            "directory, or a drafter\n"
            "                      plugin by name with its options "
            "(ngram, ngram:n=3,k=8)\n");
}

void loom_cli_engine_params(const loom_cli_model_opts *o, const char *model,
                            loom_engine_params *p)
{
    memset(p, 0, sizeof *p);
    p->model = model;
    p->family = o->family;
    p->plugin_dirs = o->plugin_dirs;
    p->n_plugin_dirs = o->n_plugin_dirs;
    p->device = o->device;
    p->gpu_memory = o->gpu_memory;
    p->n_threads = o->n_threads;
    p->max_context = o->ctx;
    p->drafter = o->drafter;
}

void loom_cli_print_acceptance(FILE *out, const char *who,
                               const loom_lane_stats *st)
{
    if (st->spec_windows == 0) {
        fprintf(out, "%s: speculation: no verify windows\n", who);
        return;
    }
    double mean = (double)(st->spec_accepted + st->spec_windows) /
                  (double)st->spec_windows;
    fprintf(out,
            "%s: speculation: %llu windows, %llu of %llu drafts accepted, "
            "mean acceptance length %.2f; histogram",
            who, (unsigned long long)st->spec_windows,
            (unsigned long long)st->spec_accepted,
            (unsigned long long)st->spec_drafted, mean);
    for (int k = 1; k <= LOOM_MAX_WINDOW; k++)
        if (st->spec_hist[k])
            fprintf(out, " %d:%llu", k, (unsigned long long)st->spec_hist[k]);
    fprintf(out, "\n");
}

int loom_cli_device(int device, char *buf, size_t size, void **json)
{
    loom_cuda_facts f;
    loom_err err;
    int gpu = 0;
    if (device == LOOM_DEVICE_CPU)
        snprintf(err.msg, sizeof err.msg, "--device cpu");
    else
        gpu = loom_cuda_probe(&f, &err) == LOOM_OK;
    if (gpu) {
        double gib = (double)f.total_bytes / (1024.0 * 1024.0 * 1024.0);
        snprintf(buf, size, "%s (cc %d.%d, %.1f GiB)", f.name, f.cc_major,
                 f.cc_minor, gib);
        if (json) {
            char cc[16];
            snprintf(cc, sizeof cc, "%d.%d", f.cc_major, f.cc_minor);
            *json = json_pack("{s:s, s:s, s:s, s:I}", "kind", "cuda", "name",
                              f.name, "cc", cc, "memory_bytes",
                              (json_int_t)f.total_bytes);
        }
    } else {
        snprintf(buf, size, "cpu (%s)", err.msg);
        if (json)
            *json = json_pack("{s:s, s:s}", "kind", "cpu", "why", err.msg);
    }
    return gpu;
}

int loom_cli_parse_ids(const char *s, int32_t **ids, int32_t *n)
{
    size_t cap = 16, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v)
        return -1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 0 || x > INT32_MAX ||
            (*end && *end != ',')) {
            fprintf(stderr, "loom: bad token id list '%s' at '%s'\n", s, p);
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
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        fprintf(stderr, "loom: empty token id list\n");
        free(v);
        return -1;
    }
    *ids = v;
    *n = (int32_t)k;
    return 0;
}
