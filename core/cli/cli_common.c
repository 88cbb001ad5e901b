/* Option parsing shared by the subcommands that open a model. */
#include "cli_common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <loom/cuda_runtime.h>

static int parse_device(void *dst, const char *opt, const char *d)
{
    int *dev = (int *)dst;
    if (!strcmp(d, "cpu"))
        *dev = LOOM_DEVICE_CPU;
    else if (!strcmp(d, "cuda"))
        *dev = LOOM_DEVICE_CUDA;
    else if (!strcmp(d, "auto"))
        *dev = LOOM_DEVICE_AUTO;
    else {
        fprintf(stderr, "loom: %s: '%s' is not cpu, cuda or auto\n", opt, d);
        return -1;
    }
    return 0;
}

static int parse_gpu_memory(void *dst, const char *opt, const char *m)
{
    if (loom_cuda_parse_memory(m, (double *)dst) != 0) {
        fprintf(stderr,
                "loom: %s: '%s' is not a byte count (K, M, G suffixes "
                "allowed) nor a fraction in (0, 1]\n",
                opt, m);
        return -1;
    }
    return 0;
}

void loom_cli_model_opts_init(loom_cli_model_opts *o, int which)
{
    memset(o, 0, sizeof *o);
    loom_cli_opt *t = o->table;
    if (which & LOOM_CLI_PLUGIN_PATH)
        *t++ = (loom_cli_opt){0,
                              "plugin-path",
                              "DIR",
                              LOOM_OPT_LIST,
                              o->plugin_dirs,
                              0,
                              LOOM_CLI_MAX_PLUGIN_DIRS,
                              &o->n_plugin_dirs,
                              NULL,
                              "search DIR for plugins first (repeatable)"};
    if (which & LOOM_CLI_FAMILY)
        *t++ = (loom_cli_opt){0,
                              "family",
                              "NAME",
                              LOOM_OPT_STR,
                              &o->family,
                              0,
                              0,
                              NULL,
                              NULL,
                              "use this family (or drafter) plugin, whatever "
                              "the probes say"};
    if (which & LOOM_CLI_ENGINE) {
        *t++ = (loom_cli_opt){0,
                              "device",
                              "D",
                              LOOM_OPT_CALL,
                              &o->device,
                              0,
                              0,
                              NULL,
                              parse_device,
                              "cpu, cuda or auto (default: auto: the GPU when "
                              "there is one)"};
        *t++ = (loom_cli_opt){0,
                              "gpu-memory",
                              "M",
                              LOOM_OPT_CALL,
                              &o->gpu_memory,
                              0,
                              0,
                              NULL,
                              parse_gpu_memory,
                              "device memory budget: bytes (8G) or a "
                              "fraction (default 0.9)"};
        *t++ = (loom_cli_opt){0,
                              "threads",
                              "N",
                              LOOM_OPT_INT,
                              &o->n_threads,
                              0,
                              1024,
                              NULL,
                              NULL,
                              "CPU threads (default: one per core)"};
        *t++ = (loom_cli_opt){0,
                              "ctx",
                              "N",
                              LOOM_OPT_INT,
                              &o->ctx,
                              0,
                              1e12,
                              NULL,
                              NULL,
                              "context limit in tokens (default: the "
                              "model's)"};
    }
    if (which & LOOM_CLI_DEVICE)
        *t++ = (loom_cli_opt){0,
                              "device",
                              "D",
                              LOOM_OPT_CALL,
                              &o->device,
                              0,
                              0,
                              NULL,
                              parse_device,
                              "the device line for cpu, cuda or auto"};
    if (which & LOOM_CLI_DRAFTER)
        *t++ = (loom_cli_opt){
            0,
            "drafter",
            "D",
            LOOM_OPT_STR,
            &o->drafter,
            0,
            0,
            NULL,
            NULL,
            "speculate with drafter D: a checkpoint directory, "
            "or NAME[:OPTIONS] of a drafter plugin (ngram:n=3,k=8)"};
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
    p->n_threads = (int)o->n_threads;
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

char *loom_cli_read_text(const char *cmd, const char *path)
{
    int is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "loom %s: %s: %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t k = fread(buf + n, 1, cap - 1 - n, f);
        n += k;
        if (k == 0)
            break;
    }
    int bad = ferror(f);
    if (!is_stdin)
        fclose(f);
    if (!buf || bad) {
        fprintf(stderr, "loom %s: %s: %s\n", cmd, is_stdin ? "stdin" : path,
                buf ? "read error" : "out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

void loom_cli_progress(void *user, uint64_t done, uint64_t total)
{
    fprintf(stderr, "\r%s %.1f / %.1f MB (%d%%)", (const char *)user,
            (double)done / 1e6, (double)total / 1e6,
            total ? (int)(done * 100 / total) : 100);
    if (done >= total)
        fputc('\n', stderr);
    fflush(stderr);
}
