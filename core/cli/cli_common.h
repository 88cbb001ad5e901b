/* Option parsing shared by the subcommands that open a model. */
#ifndef LOOM_CLI_COMMON_H
#define LOOM_CLI_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include <loom/engine.h>
#include <loom/lane.h>

#include "cli_opts.h"

#define LOOM_CLI_MAX_PLUGIN_DIRS 16

/* The options every model-opening command takes; table holds their
 * entries for a loom_cli_cmd (filled by loom_cli_model_opts_init). */
enum {
    LOOM_CLI_PLUGIN_PATH = 1, /* --plugin-path DIR */
    LOOM_CLI_FAMILY = 2,      /* --family NAME */
    LOOM_CLI_ENGINE = 4,      /* --device, --gpu-memory, --threads, --ctx */
    LOOM_CLI_ALL = 7,
    LOOM_CLI_DRAFTER = 8, /* --drafter DIR, where the lane speculates */
    LOOM_CLI_DEVICE = 16  /* --device alone, for a device line (not ENGINE) */
};
typedef struct loom_cli_model_opts {
    const char *plugin_dirs[LOOM_CLI_MAX_PLUGIN_DIRS];
    int n_plugin_dirs;
    const char *family;
    int device;
    int64_t n_threads;
    int64_t ctx;
    double gpu_memory;   /* --gpu-memory; 0: the default */
    const char *drafter; /* --drafter DIR or NAME[:OPTIONS] */
    loom_cli_opt table[8];
} loom_cli_model_opts;

/* Zeroes O and fills its table with the options WHICH names. */
void loom_cli_model_opts_init(loom_cli_model_opts *o, int which);
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
/* A loom_engine_params progress callback: "\rUSER d / t MB (p%)" on stderr
 * (USER is the line's text), ended by a newline at the total. */
void loom_cli_progress(void *user, uint64_t done, uint64_t total);
/* Reads the text at PATH ("-": stdin) into a malloc'd NUL-terminated
 * string; NULL with a message naming CMD and PATH on failure. */
char *loom_cli_read_text(const char *cmd, const char *path);

#endif
