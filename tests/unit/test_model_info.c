/* What the families' describe reports about their weights: the bytes one
 * decode step reads, against a count made from the safetensors header (every
 * 2-D tensor except an embedding table that is not also the head). */
#include <string.h>

#include <loom/safetensors.h>

#include "testmodel.h"
#include "testutil.h"

static uint64_t header_count(loom_engine *e, const char *embed, int tied)
{
    const loom_st *st = loom_checkpoint_tensors(e->ckpt);
    uint64_t total = 0;
    for (size_t i = 0; i < loom_st_count(st); i++) {
        const loom_tensor *t = loom_st_at(st, i);
        if (t->ndim != 2)
            continue;
        if (!tied && strcmp(t->name, embed) == 0)
            continue;
        total += t->nbytes;
    }
    return total;
}

START_TEST(decode_bytes_match_the_header)
{
    static const struct {
        const char *dir, *plugin, *embed;
        int tied;
    } cases[] = {
        {"models/qwen35-tiny", "qwen35", "model.embed_tokens.weight", 0},
        {"models/qwen35-vl-tiny", "qwen35",
         "model.language_model.embed_tokens.weight", 1},
        {"models/nemotron-h-tiny", "nemotron", "backbone.embeddings.weight", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        loom_engine *e = tm_open_ok(fixture(cases[i].dir), cases[i].plugin);
        /* the VL checkpoint's vision tower is not read by the text model */
        uint64_t want = header_count(e, cases[i].embed, cases[i].tied);
        if (strstr(cases[i].dir, "vl")) {
            const loom_st *st = loom_checkpoint_tensors(e->ckpt);
            for (size_t k = 0; k < loom_st_count(st); k++) {
                const loom_tensor *t = loom_st_at(st, k);
                if (t->ndim == 2 && strncmp(t->name, "model.visual.", 13) == 0)
                    want -= t->nbytes;
            }
        }
        ck_assert_msg(e->info.weight_bytes_per_token == want,
                      "%s: describe says %llu, header %llu", cases[i].dir,
                      (unsigned long long)e->info.weight_bytes_per_token,
                      (unsigned long long)want);
        loom_engine_close(e);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model_info");
    TCase *tc = tcase_create("bytes");
    tcase_add_test(tc, decode_bytes_match_the_header);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
