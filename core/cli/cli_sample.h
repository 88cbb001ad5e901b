/* The sampling options of the generating commands (run, chat), and
 * generation_config.json's defaults under them. */
#ifndef LOOM_CLI_SAMPLE_H
#define LOOM_CLI_SAMPLE_H

#include <loom/lane.h>

#include "cli_opts.h"

/* Values given on the command line; NAN: not given (their ranges are
 * checked once, by loom_lane_add). */
typedef struct loom_cli_sample {
    double temp, top_p, min_p, rep, pres, freq;
    int64_t top_k;
    int has_top_k;
    uint64_t seed;
    int has_seed;
    loom_cli_opt table[10];
} loom_cli_sample;

void loom_cli_sample_init(loom_cli_sample *s);
/* The model's defaults (generation_config.json when it samples, else
 * greedy) overridden by the options given. */
void loom_cli_sample_apply(const loom_cli_sample *s, loom_engine *e,
                           loom_sample_params *sp);

#endif
