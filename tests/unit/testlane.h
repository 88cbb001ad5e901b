/* Helpers shared by the lane suites (test_lane, test_lane_group): a CPU
 * engine over a checkpoint, a lane over it, and whether a plugin is built. */
#ifndef LOOM_TESTLANE_H
#define LOOM_TESTLANE_H

#include <stdint.h>

#include <loom/engine.h>
#include <loom/lane.h>

/* Opens an engine over `model` with the plugins of `plugin_dir` on the CPU:
 * `family` (NULL: the one that claims the model), `max_context` (0: the
 * model's), `threads` threads. The test fails when it cannot. */
loom_engine *tl_open_engine(const char *model, const char *plugin_dir,
                            const char *family, int64_t max_context,
                            int threads);

/* A lane over e (the test fails when it cannot be made). */
loom_lane *tl_new_lane(loom_engine *e, int32_t max_streams,
                       int32_t round_tokens, int32_t chunk);

/* Whether this build made plugin `name` (libloom-<name> in LOOM_PLUGIN_DIR);
 * when not, prints that the test is skipped. */
int tl_plugin_built(const char *name);

#endif
