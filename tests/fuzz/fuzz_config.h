/* The body the config.json geometry fuzz targets share: the input is
 * written as config.json, opened as a checkpoint, and handed to the
 * family's check, which parses it and reports into a sink of fields. */
#ifndef LOOM_FUZZ_CONFIG_H
#define LOOM_FUZZ_CONFIG_H

#include <stdint.h>
#include <string.h>

#include <loom/checkpoint.h>
#include <loom/host.h>

#include "fuzz_util.h"

static void LOOM_ABI fuzz_put_i64(void *ctx, const char *key, int64_t v)
{
    (void)key;
    *(int64_t *)ctx ^= v;
}
static void LOOM_ABI fuzz_put_f64(void *ctx, const char *key, double v)
{
    (void)key;
    (void)v;
    (void)ctx;
}
static void LOOM_ABI fuzz_put_str(void *ctx, const char *key, const char *v)
{
    (void)key;
    *(int64_t *)ctx ^= (int64_t)strlen(v);
}

/* Parses the geometry from CKPT and, if it is accepted, computes the
 * widths the plugin derives and reports the geometry into OUT. */
typedef void (*fuzz_config_check)(const loom_host *host, loom_checkpoint *ckpt,
                                  loom_fields *out);

static int fuzz_config_run(const uint8_t *data, size_t size,
                           fuzz_config_check check)
{
    if (!fuzz_write("config.json", data, size))
        return 0;
    loom_host_state hs;
    loom_host_init(&hs, NULL);
    loom_checkpoint *ckpt = NULL;
    loom_err err;
    if (loom_checkpoint_open(fuzz_dir(), &ckpt, &err) != LOOM_OK)
        return 0;
    int64_t acc = 0;
    loom_fields out = {sizeof out, &acc, fuzz_put_i64, fuzz_put_f64,
                       fuzz_put_str};
    check(&hs.host, ckpt, &out);
    loom_checkpoint_close(ckpt);
    return 0;
}

#endif
