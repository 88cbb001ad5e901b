/* Option parsing shared by the subcommands that open a model. */
#ifndef LOOM_CLI_COMMON_H
#define LOOM_CLI_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include <loom/engine.h>
#include <loom/lane.h>

#define LOOM_CLI_MAX_PLUGIN_DIRS 16

/* The options every model-opening command takes. */
typedef struct loom_cli_model_opts {
    const char *plugin_dirs[LOOM_CLI_MAX_PLUGIN_DIRS];
    int n_plugin_dirs;
    const char *family;
    int device;
    int n_threads;
    int64_t ctx;
    double gpu_memory;   /* --gpu-memory; 0: the default */
    const char *drafter; /* --drafter DIR or NAME[:OPTIONS] */
} loom_cli_model_opts;

/* Consumes argv[*i] (and its value) when it is one of --plugin-path DIR,
 * --family NAME, --device cpu|cuda|auto, --gpu-memory BYTES|FRACTION,
 * --threads N, --ctx N. Returns 1 when
 * consumed, 0 when not one of these, -1 on a bad value (message printed). */
int loom_cli_model_opt(loom_cli_model_opts *o, int argc, char **argv, int *i);
/* Prints the help lines for those options. */
void loom_cli_model_opts_help(FILE *out);
/* Fills engine params from the options. */
void loom_cli_engine_params(const loom_cli_model_opts *o, const char *model,
                            loom_engine_params *p);
/* The device a model would run on, for `loom plugins` and `loom inspect`:
 * "NVIDIA H200 (cc 9.0, 139.8 GiB)" or "cpu (why)" into buf; returns 1 for
 * a GPU. `device` is the --device option (loom_device_kind). With json,
 * *json gets {"kind", "name", "cc", "memory_bytes"} or {"kind", "why"}. */
int loom_cli_device(int device, char *buf, size_t size, void **json);
/* Prints a lane's acceptance lengths (mean and histogram), one line. */
void loom_cli_print_acceptance(FILE *out, const char *who,
                               const loom_lane_stats *st);
/* Parses "1,2,3" into a malloc'd array. Returns 0 on success. */
int loom_cli_parse_ids(const char *s, int32_t **ids, int32_t *n);

#endif
