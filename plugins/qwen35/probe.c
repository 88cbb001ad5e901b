/* Decides from config.json alone (no tensors) whether a checkpoint is a
 * Qwen3.5 / Qwen3.5-MoE / Qwen3-Next model, and how sure that is. */
#include "qwen35.h"

#include <loom/config.h>

static const char *const q35_archs[] = {
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5ForCausalLM",
    "Qwen3NextForCausalLM",
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5MoeForCausalLM",
};

static const char *const q35_types[] = {"qwen3_5", "qwen3_5_text", "qwen3_next",
                                        "qwen3_5_moe", "qwen3_5_moe_text"};

int32_t LOOM_ABI q35_probe(const loom_host *host, const loom_checkpoint *ckpt)
{
    return loom_cfg_probe(host, ckpt, q35_archs,
                          sizeof q35_archs / sizeof *q35_archs, q35_types,
                          sizeof q35_types / sizeof *q35_types);
}
