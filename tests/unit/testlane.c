/* The lane-suite helpers declared in testlane.h. */
#include "testlane.h"

#include <stdio.h>
#include <string.h>

#include <loom/platform.h>

#include "testutil.h"

loom_engine *tl_open_engine(const char *model, const char *plugin_dir,
                            const char *family, int64_t max_context,
                            int threads)
{
    const char *dirs[1] = {plugin_dir};
    loom_engine_params p;
    memset(&p, 0, sizeof p);
    p.model = model;
    p.family = family;
    p.plugin_dirs = dirs;
    p.n_plugin_dirs = 1;
    p.device = LOOM_DEVICE_CPU;
    p.n_threads = threads;
    p.max_context = max_context;
    loom_engine *e = NULL;
    loom_err err;
    loom_status rc = loom_engine_open(&p, &e, &err);
    ck_assert_msg(rc == LOOM_OK, "%s", err.msg);
    return e;
}

loom_lane *tl_new_lane(loom_engine *e, int32_t max_streams,
                       int32_t round_tokens, int32_t chunk)
{
    loom_lane_params lp;
    memset(&lp, 0, sizeof lp);
    lp.engine = e;
    lp.max_streams = max_streams;
    lp.round_tokens = round_tokens;
    lp.prefill_chunk = chunk;
    loom_lane *lane = NULL;
    loom_err err;
    ck_assert_msg(loom_lane_new(&lp, &lane, &err) == LOOM_OK, "%s", err.msg);
    return lane;
}

int tl_plugin_built(const char *name)
{
    char so[1024];
    snprintf(so, sizeof so, "%s/libloom-%s%s", LOOM_PLUGIN_DIR, name,
             loom_dl_suffix());
    if (loom_file_exists(so))
        return 1;
    fprintf(stderr, "%s plugin not built (%s): skipped\n", name, so);
    return 0;
}
