/* Helpers shared by the model-family suites (test_qwen35, test_nemotron,
 * the GPU suites): an engine over a checkpoint with the plugins of this
 * build, the transformers goldens of tests/fixtures/models/, greedy decoding
 * against them, and copies of a fixture with an edited config.json. */
#ifndef LOOM_TESTMODEL_H
#define LOOM_TESTMODEL_H

#include <stdint.h>

#include <loom/engine.h>
#include <loom/family.h>

/* Opens an engine over checkpoint directory `dir` with this build's plugins:
 * device `device` (loom_device_kind), two threads, `max_context` (0: the
 * model's), `max_streams` (0: the default). Returns NULL on failure, with
 * the status in *rc (when rc is not NULL) and the message in err. */
loom_engine *tm_open_on(const char *dir, int device, int64_t max_context,
                        int32_t max_streams, loom_status *rc, loom_err *err);
/* tm_open_on on the CPU with the default streams. */
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

/* The model's calls through the family dispatcher (loom/family.h). */
void tm_cache_reset(loom_engine *e, loom_cache **c);
void tm_cache_free(loom_engine *e, loom_cache *c);
loom_status tm_commit(loom_engine *e, loom_cache *c, int32_t kept,
                      loom_err *err);

/* A round of rows[0..n) with the 2.0 sizes. */
loom_round tm_round(const loom_row *rows, int32_t n);

/* An output as the lane makes it on the CPU: host float32 views of
 * [n_logits, vocab] over `logits` and [n_taps, tap_width] over `taps`,
 * each empty (ndim 0) when its pointer is NULL. */
loom_output tm_output(float *logits, int64_t n_logits, int64_t vocab,
                      float *taps, int64_t n_taps, int64_t tap_width);

/* One forward over rows[0..n): logits of the rows flagged LOOM_ROW_LOGITS
 * into `logits` (NULL: no view), taps of those flagged LOOM_ROW_TAP into
 * `taps` rows of `tap_width` floats (NULL: no view). */
loom_status tm_forward_taps(loom_engine *e, const loom_row *rows, int32_t n,
                            float *logits, float *taps, int64_t tap_width,
                            loom_err *err);
loom_status tm_forward(loom_engine *e, const loom_row *rows, int32_t n,
                       float *logits, loom_err *err);

/* The model's loom.target/1 extension (the test fails without one). */
const loom_target_i *tm_target(loom_engine *e);

/* Decodes g->n_greedy tokens greedily through cache c, which holds the
 * prompt; `last` is the prompt's last row of logits. Each token must be
 * transformers' (`what` names the model in failures). */
void tm_check_greedy(const char *what, loom_engine *e, loom_cache *c,
                     const tm_golden *g, const float *last);

/* loom.target/1 of fixture `model` (claimed by `plugin`, its embedding
 * table named `embed_name`): head of the last layer's taps reproduces the
 * forward's logits bit for bit (a one-token prompt, then the whole prompt
 * in one forward), and those match transformers'; head into a strided
 * view writes the same rows; embed gives the table's rows as float32; and
 * the refusals (token, view kind and shape, tap range). */
void tm_check_target(const char *model, const char *plugin,
                     const char *embed_name);

/* The prompt of fixture `model` fed as rows of a wider struct (a newer
 * lane's loom_row with a field after it) gives the logits loom_row gives,
 * bit for bit. */
void tm_check_row_size(const char *model, const char *plugin);

/* The plugin's own vtable against hosts of other minors: describe into a
 * shorter loom_model_info (an older host) writes nothing past its
 * struct_size, into a longer one only up to this ABI's; open with options
 * that stop before max_rows takes max_rows' default. */
void tm_check_struct_sizes(const char *model, const char *plugin);

/* A cache's fixed bytes go into the host's account (LOOM_MEM_CACHE) and
 * come back when it is freed; under a budget they do not fit, cache_new is
 * refused with LOOM_ERR_FULL and counts nothing. */
void tm_check_cache_budget(const char *model, const char *plugin);

/* Row `row` (asking for logits, at its cache's length) with a logits view
 * of device memory: refused with LOOM_ERR_UNSUPPORTED by a CPU model. */
void tm_check_device_view_refused(loom_engine *e, const loom_row *row);

/* 40 rows of one stream of fixture `model` in one round (the prompt
 * kernels, host->matmul_prompt) against the same tokens one row a round
 * (the decode kernels): the last row's logits within 1e-4 of the largest
 * logit (0.2 where the prompt set rounds x to BF16: testmodel.c says
 * why), the same argmax, and bits that differ (the chunk did take the
 * prompt kernels). */
void tm_check_prompt_chunk(const char *model, const char *plugin);

/* Copies file `from` to `to` (the test fails when it cannot). */
void tm_copy_file(const char *from, const char *to);

/* A copy of fixture `model` (model.safetensors, generation_config.json) in a
 * fresh temporary directory, with config.json edited by `edit`: a JSON
 * object merged into the root (text_level 0) or into text_config
 * (text_level 1), where JSON null deletes the key. Returns the directory. */
const char *tm_edited_copy(const char *model, const char *edit, int text_level);

#endif
