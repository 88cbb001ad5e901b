/* libFuzzer target for the Qwen3.5 family's config.json geometry: any
 * config either is refused or gives sizes that the plugin's own derived
 * widths and cache sizes compute without overflow (UBSan aborts on signed
 * overflow in this build). */
#include <stdint.h>
#include <string.h>

#include <loom/checkpoint.h>
#include <loom/host.h>

#include "../../plugins/qwen35/qwen35.h"
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
    q35_geometry g;
    if (q35_geometry_parse(&hs.host, ckpt, &g, &err) == LOOM_OK) {
        /* what the plugin derives from the geometry */
        volatile int64_t sink = q35_conv_dim(&g) + q35_value_dim(&g) +
                                g.lin_v_heads * g.lin_dk * g.lin_dv +
                                (g.conv_kernel - 1) * q35_conv_dim(&g) +
                                2 * g.n_heads * g.head_dim +
                                2 * g.n_kv_heads * g.head_dim +
                                g.vocab * g.hidden + g.ffn * g.hidden +
                                g.n_experts * g.moe_ffn * g.hidden;
        int64_t acc = sink;
        loom_fields out = {sizeof out, &acc, put_i64, put_f64, put_str};
        q35_geometry_report(&g, &out);
    }
    loom_checkpoint_close(ckpt);
    return 0;
}
