/* libFuzzer target for the Nemotron-H family's config.json geometry: any
 * config either is refused or gives sizes that the plugin's cache and
 * forward compute without overflow (UBSan aborts on signed overflow in
 * this build). */
#include "../../plugins/nemotron/nemotron.h"
#include "fuzz_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const loom_host *host, loom_checkpoint *ckpt,
                  loom_fields *out)
{
    nem_geometry g;
    loom_err err;
    if (nem_geometry_parse(host, ckpt, &g, &err) != LOOM_OK)
        return;
    /* the widths the cache and forward derive */
    volatile int64_t sink =
        (int64_t)g.n_q_heads * g.head_dim + (int64_t)g.n_kv_heads * g.head_dim +
        (int64_t)g.vocab * g.hidden +
        (int64_t)(g.conv_kernel - 1) * g.conv_dim +
        (int64_t)g.d_inner * g.ssm_state + 2 * (int64_t)g.hidden + g.moe_inter +
        (int64_t)g.n_experts * g.moe_inter;
    *(int64_t *)out->ctx ^= sink;
    nem_geometry_report(&g, out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_config_run(data, size, check);
}
