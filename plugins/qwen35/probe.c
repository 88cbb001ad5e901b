/* Decides from config.json alone (no tensors) whether a checkpoint is a
 * Qwen3.5 / Qwen3-Next model, and how sure that is. */
#include "qwen35.h"

static const char *const q35_archs[] = {
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5ForCausalLM",
    "Qwen3NextForCausalLM",
};

static const char *const q35_types[] = {"qwen3_5", "qwen3_5_text",
                                        "qwen3_next"};

static int q35_in(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        if (strcmp(s, list[i]) == 0)
            return 1;
    return 0;
}

int32_t q35_probe(const loom_host *host, const loom_checkpoint *ckpt)
{
    const loom_json *cfg = host->config(ckpt);
    const loom_json *archs = host->json_get(cfg, "architectures");
    size_t n = host->json_len(archs);
    for (size_t i = 0; i < n; i++)
        if (q35_in(host->json_str(host->json_at(archs, i)), q35_archs,
                   sizeof q35_archs / sizeof *q35_archs))
            return 100;
    const char *mt = host->json_str(host->json_get(cfg, "model_type"));
    const char *tmt =
        host->json_str(host->json_get(host->text_config(ckpt), "model_type"));
    size_t nt = sizeof q35_types / sizeof *q35_types;
    if (q35_in(mt, q35_types, nt) || q35_in(tmt, q35_types, nt))
        return 50;
    return 0;
}
