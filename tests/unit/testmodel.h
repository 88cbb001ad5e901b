/* Helpers shared by the model-family suites (test_qwen35, test_nemotron):
 * an engine over a checkpoint with the plugins of this build, the
 * transformers goldens of tests/fixtures/models/, greedy decoding against
 * them, and copies of a fixture with an edited config.json. */
#ifndef LOOM_TESTMODEL_H
#define LOOM_TESTMODEL_H

#include <stdint.h>

#include <loom/engine.h>

/* Opens an engine over checkpoint directory `dir` with this build's plugins:
 * CPU, two threads, `max_context` (0: the model's). Returns NULL on failure,
 * with the status in *rc (when rc is not NULL) and the message in err. */
loom_engine *tm_open(const char *dir, int64_t max_context, loom_status *rc,
                     loom_err *err);
/* tm_open that must succeed, with plugin `plugin` claiming the model. */
loom_engine *tm_open_ok(const char *dir, const char *plugin);

/* golden.json (and logits.f32) of a fixture model. */
typedef struct tm_golden {
    int32_t prompt[64];
    int32_t n_prompt;
    int32_t greedy[64]; /* transformers' greedy continuation */
    int32_t n_greedy;
    int32_t vocab; /* logits.shape[1] */
    float *logits; /* [n_prompt, vocab], or NULL; the caller frees it */
} tm_golden;

/* Reads fixture `model`'s golden.json; with `with_logits`, also its
 * logits.f32, checked against the shape golden.json gives. */
void tm_read_golden(const char *model, int with_logits, tm_golden *g);

/* A new cache of e's model (the test fails when it cannot be made). */
loom_cache *tm_new_cache(loom_engine *e);

/* Decodes g->n_greedy tokens greedily through cache c, which holds the
 * prompt; `last` is the prompt's last row of logits. Each token must be
 * transformers' (`what` names the model in failures). */
void tm_check_greedy(const char *what, loom_engine *e, loom_cache *c,
                     const tm_golden *g, const float *last);

/* Copies file `from` to `to` (the test fails when it cannot). */
void tm_copy_file(const char *from, const char *to);

/* A copy of fixture `model` (model.safetensors, generation_config.json) in a
 * fresh temporary directory, with config.json edited by `edit`: a JSON
 * object merged into the root (text_level 0) or into text_config
 * (text_level 1), where JSON null deletes the key. Returns the directory. */
const char *tm_edited_copy(const char *model, const char *edit, int text_level);

#endif
