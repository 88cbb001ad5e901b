/* libFuzzer target for the Nemotron-H family's config.json geometry: any
 * config either is refused or gives sizes that the plugin's cache and
 * forward compute without overflow (UBSan aborts on signed overflow in
 * this build). */
#include <stdint.h>
#include <string.h>

#include <loom/checkpoint.h>
#include <loom/host.h>

#include "../../plugins/nemotron/nemotron.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void LOOM_ABI put_i64(void *ctx, const char *key, int64_t v)
{
    (void)key;
    *(int64_t *)ctx ^= v;
}
static void LOOM_ABI put_f64(void *ctx, const char *key, double v)
{
    (void)key;
    (void)v;
    (void)ctx;
}
static void LOOM_ABI put_str(void *ctx, const char *key, const char *v)
{
    (void)key;
    *(int64_t *)ctx ^= (int64_t)strlen(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fuzz_write("config.json", data, size))
        return 0;
    loom_host_state hs;
    loom_host_init(&hs, NULL);
    loom_checkpoint *ckpt = NULL;
    loom_err err;
    if (loom_checkpoint_open(fuzz_dir(), &ckpt, &err) != LOOM_OK)
        return 0;
    nem_geometry g;
    if (nem_geometry_parse(&hs.host, ckpt, &g, &err) == LOOM_OK) {
        /* the widths the cache and forward derive */
        volatile int64_t sink =
            (int64_t)g.n_q_heads * g.head_dim +
            (int64_t)g.n_kv_heads * g.head_dim + (int64_t)g.vocab * g.hidden +
            (int64_t)(g.conv_kernel - 1) * g.conv_dim +
            (int64_t)g.d_inner * g.ssm_state + 2 * (int64_t)g.hidden +
            g.moe_inter + (int64_t)g.n_experts * g.moe_inter;
        int64_t acc = sink;
        loom_fields out = {sizeof out, &acc, put_i64, put_f64, put_str};
        nem_geometry_report(&g, &out);
    }
    loom_checkpoint_close(ckpt);
    return 0;
}
