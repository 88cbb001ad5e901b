/* libFuzzer target for the Qwen3.5 family's config.json geometry: any
 * config either is refused or gives sizes that the plugin's own derived
 * widths and cache sizes compute without overflow (UBSan aborts on signed
 * overflow in this build). */
#include "../../plugins/qwen35/qwen35.h"
#include "fuzz_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const loom_host *host, loom_checkpoint *ckpt,
                  loom_fields *out)
{
    q35_geometry g;
    loom_err err;
    if (q35_geometry_parse(host, ckpt, &g, &err) != LOOM_OK)
        return;
    /* what the plugin derives from the geometry */
    volatile int64_t sink =
        q35_conv_dim(&g) + q35_value_dim(&g) +
        g.lin_v_heads * g.lin_dk * g.lin_dv +
        (g.conv_kernel - 1) * q35_conv_dim(&g) + 2 * g.n_heads * g.head_dim +
        2 * g.n_kv_heads * g.head_dim + g.vocab * g.hidden + g.ffn * g.hidden +
        g.n_experts * g.moe_ffn * g.hidden;
    *(int64_t *)out->ctx ^= sink;
    q35_geometry_report(&g, out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_config_run(data, size, check);
}
