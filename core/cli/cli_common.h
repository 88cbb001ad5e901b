/* Option parsing shared by the subcommands that open a model. */
#ifndef LOOM_CLI_COMMON_H
#define LOOM_CLI_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include <loom/engine.h>

#include "cli_opts.h"

#define LOOM_CLI_MAX_PLUGIN_DIRS 16

/* The options every model-opening command takes; table holds their
 * entries for a loom_cli_cmd (filled by loom_cli_model_opts_init). */
enum {
    LOOM_CLI_PLUGIN_PATH = 1, /* --plugin-path DIR */
    LOOM_CLI_FAMILY = 2,      /* --family NAME */
    LOOM_CLI_ENGINE = 4,      /* --device, --threads, --ctx */
    LOOM_CLI_ALL = 7
};
typedef struct loom_cli_model_opts {
    const char *plugin_dirs[LOOM_CLI_MAX_PLUGIN_DIRS];
    int n_plugin_dirs;
    const char *family;
    int device;
    int64_t n_threads;
    int64_t ctx;
    loom_cli_opt table[6];
} loom_cli_model_opts;

/* Zeroes O and fills its table with the options WHICH names. */
void loom_cli_model_opts_init(loom_cli_model_opts *o, int which);
/* Fills engine params from the options. */
void loom_cli_engine_params(const loom_cli_model_opts *o, const char *model,
                            loom_engine_params *p);
/* Parses "1,2,3" into a malloc'd array. Returns 0 on success. */
int loom_cli_parse_ids(const char *s, int32_t **ids, int32_t *n);
/* A loom_engine_params progress callback: "\rUSER d / t MB (p%)" on stderr
 * (USER is the line's text), ended by a newline at the total. */
void loom_cli_progress(void *user, uint64_t done, uint64_t total);
/* Reads the text at PATH ("-": stdin) into a malloc'd NUL-terminated
 * string; NULL with a message naming CMD and PATH on failure. */
char *loom_cli_read_text(const char *cmd, const char *path);

#endif
