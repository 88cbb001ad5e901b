/* Qwen3.5-MoE checkpoints through the qwen35 plugin, against transformers'
 * reference outputs (tests/fixtures/models/qwen35-moe-tiny, one tensor per
 * expert, and qwen35-moe-tiny-fused, 3-D expert tensors; both made by
 * tools/make_qwen35_moe_ref.py): logits, greedy decoding, chunked prompts,
 * two streams in a round, speculative windows against plain steps, the
 * multimodal wrapper, the reported geometry and weight bytes, and the
 * refusals of malformed expert tensors and fields. Also the SDK's routing
 * helpers (loom/cpu_route.h) against brute force. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <loom/checkpoint.h>
#include <loom/cpu_route.h>
#include <loom/engine.h>
#include <loom/safetensors.h>

#include "st_write.h"
#include "testmodel.h"
#include "testutil.h"

static const char *const PER = "models/qwen35-moe-tiny";
static const char *const FUSED = "models/qwen35-moe-tiny-fused";

/* ---------------------------------------------------------------- helpers */

/* Feeds ids[0..n) from position pos0, `chunk` rows per forward, each row
 * flagged `flags`; logits of every row into out (NULL without logits). */
static void feed(loom_engine *e, loom_cache *c, int32_t pos0,
                 const int32_t *ids, int32_t n, int32_t chunk, uint32_t flags,
                 float *out)
{
    loom_row rows[64];
    ck_assert_int_le(chunk, 64);
    for (int32_t p = 0; p < n; p += chunk) {
        int32_t k = n - p < chunk ? n - p : chunk;
        for (int32_t i = 0; i < k; i++)
            rows[i] = (loom_row){c, ids[p + i], pos0 + p + i, -1, flags};
        loom_err err = {{0}};
        loom_status st = tm_forward(
            e, rows, k, out ? out + (size_t)p * e->info.vocab : NULL, &err);
        ck_assert_msg(st == LOOM_OK, "forward: %s", err.msg);
    }
}

/* The prompt's logits of checkpoint `dir`, fed `chunk` rows at a time. */
static float *prompt_logits(const char *dir, const tm_golden *g, int32_t chunk)
{
    loom_engine *e = tm_open_ok(dir, "qwen35");
    ck_assert_int_eq(e->info.vocab, g->vocab);
    float *lg = malloc((size_t)g->n_prompt * g->vocab * sizeof(float));
    loom_cache *c = tm_new_cache(e);
    feed(e, c, 0, g->prompt, g->n_prompt, chunk, LOOM_ROW_LOGITS, lg);
    tm_cache_free(e, c);
    loom_engine_close(e);
    return lg;
}

/* Checkpoint `dir` against the goldens of fixture `model`: every prompt
 * position within 1e-4 of transformers, then greedy decoding through the
 * cache gives transformers' tokens. */
static void check_reference(const char *model, const char *dir)
{
    tm_golden g;
    tm_read_golden(model, 1, &g);
    loom_engine *e = tm_open_ok(dir, "qwen35");
    ck_assert_int_eq(e->info.vocab, g.vocab);
    float *lg = malloc((size_t)g.n_prompt * g.vocab * sizeof(float));
    loom_cache *c = tm_new_cache(e);
    feed(e, c, 0, g.prompt, g.n_prompt, g.n_prompt, LOOM_ROW_LOGITS, lg);
    for (int32_t t = 0; t < g.n_prompt; t++) {
        double r = rel_err(lg + (size_t)t * g.vocab,
                           g.logits + (size_t)t * g.vocab, (size_t)g.vocab);
        ck_assert_msg(r < 1e-4, "%s position %d: relative error %g", dir, t, r);
    }
    tm_check_greedy(dir, e, c, &g, lg + (size_t)(g.n_prompt - 1) * g.vocab);
    tm_cache_free(e, c);
    free(lg);
    free(g.logits);
    loom_engine_close(e);
}

#define MAX_TENSORS 256

/* A copy of fixture `model` without tensor `drop` (NULL: none) and with
 * tensor `reshape` (NULL: none) given shape[ndim] (BF16, so fewer or more
 * bytes of the same data: only the header is checked). */
static const char *tensor_edit(const char *model, const char *drop,
                               const char *reshape, int ndim,
                               const int64_t *shape)
{
    static st_entry ents[MAX_TENSORS];
    loom_st *st = NULL;
    int n = st_read(model, &st, ents, MAX_TENSORS);
    const char *dir = tm_edited_copy(model, "{}", 0);
    if (drop) {
        int k = st_index(ents, n, drop);
        ck_assert_msg(k >= 0, "%s has no %s", model, drop);
        memmove(&ents[k], &ents[k + 1], sizeof *ents * (size_t)(n - k - 1));
        n--;
    }
    if (reshape) {
        int k = st_index(ents, n, reshape);
        ck_assert_msg(k >= 0, "%s has no %s", model, reshape);
        uint64_t count = 1;
        ents[k].ndim = ndim;
        for (int d = 0; d < ndim; d++) {
            ents[k].shape[d] = shape[d];
            count *= (uint64_t)shape[d];
        }
        ck_assert_uint_le(count * 2, ents[k].nbytes);
        ents[k].nbytes = count * 2;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_write(path, ents, n);
    loom_st_close(st);
    return dir;
}

static void expect_refusal(const char *dir, const char *needle1,
                           const char *needle2)
{
    loom_err err = {{0}};
    loom_status st;
    loom_engine *e = tm_open(dir, 0, &st, &err);
    ck_assert_msg(e == NULL && st != LOOM_OK, "%s: opened", dir);
    ck_assert_msg(st == LOOM_ERR_FORMAT || st == LOOM_ERR_INVALID ||
                      st == LOOM_ERR_NOT_FOUND,
                  "%s: status %d (%s)", dir, st, err.msg);
    ck_assert_msg(strstr(err.msg, needle1) != NULL, "'%s' lacks '%s'", err.msg,
                  needle1);
    if (needle2)
        ck_assert_msg(strstr(err.msg, needle2) != NULL, "'%s' lacks '%s'",
                      err.msg, needle2);
}

/* ---------------------------------------------------------------- reference */

START_TEST(reference_per_expert)
{
    check_reference(PER, fixture(PER));
}
END_TEST

START_TEST(reference_fused)
{
    check_reference(FUSED, fixture(FUSED));
}
END_TEST

/* Both layouts hold the same BF16 values: the same logits, bit for bit. */
START_TEST(layouts_agree)
{
    tm_golden g;
    tm_read_golden(PER, 1, &g);
    float *a = prompt_logits(fixture(PER), &g, g.n_prompt);
    float *b = prompt_logits(fixture(FUSED), &g, g.n_prompt);
    ck_assert_int_eq(memcmp(a, b, (size_t)g.n_prompt * g.vocab * 4), 0);
    free(a);
    free(b);
    free(g.logits);
}
END_TEST

/* The release layout: Qwen3_5MoeForConditionalGeneration, text fields under
 * text_config, weights under model.language_model., fused experts. */
START_TEST(multimodal_wrapper)
{
    static st_entry ents[MAX_TENSORS];
    loom_st *st = NULL;
    int n = st_read(FUSED, &st, ents, MAX_TENSORS);
    for (int i = 0; i < n; i++)
        if (!strncmp(ents[i].name, "model.", 6)) {
            char nm[160];
            snprintf(nm, sizeof nm, "model.language_model.%s",
                     ents[i].name + 6);
            snprintf(ents[i].name, sizeof ents[i].name, "%s", nm);
        }
    const char *dir = tm_edited_copy(FUSED, "{}", 0);
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_write(path, ents, n);
    loom_st_close(st);

    snprintf(path, sizeof path, "%s/config.json", fixture(FUSED));
    json_error_t je;
    json_t *text = json_load_file(path, 0, &je);
    ck_assert_ptr_nonnull(text);
    json_object_set_new(text, "model_type", json_string("qwen3_5_moe_text"));
    json_object_del(text, "architectures");
    json_t *root = json_pack(
        "{s:[s], s:s, s:o, s:{s:s, s:i}, s:b}", "architectures",
        "Qwen3_5MoeForConditionalGeneration", "model_type", "qwen3_5_moe",
        "text_config", text, "vision_config", "model_type", "qwen3_5_moe",
        "depth", 2, "tie_word_embeddings", 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    ck_assert_int_eq(json_dump_file(root, path, JSON_INDENT(1)), 0);
    json_decref(root);

    check_reference(FUSED, dir);
    /* and a refusal names the nested field */
    const char *bad = tm_edited_copy(FUSED, "{}", 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cfg = json_load_file(path, 0, &je);
    json_object_set_new(json_object_get(cfg, "text_config"),
                        "num_experts_per_tok", json_integer(9));
    snprintf(path, sizeof path, "%s/config.json", bad);
    ck_assert_int_eq(json_dump_file(cfg, path, JSON_INDENT(1)), 0);
    json_decref(cfg);
    expect_refusal(bad, "text_config.num_experts_per_tok = 9",
                   "num_experts = 8");
}
END_TEST

/* ---------------------------------------------------------------- rounds */

/* Rows of a stream fed in chunks give the logits of one forward over all;
 * routing and the grouped experts make a row's result independent of the
 * other rows. */
START_TEST(chunked_prompt)
{
    tm_golden g;
    tm_read_golden(PER, 1, &g);
    size_t n = (size_t)g.n_prompt * g.vocab;
    float *all = prompt_logits(fixture(PER), &g, g.n_prompt);
    int32_t chunks[3] = {1, 5, 7};
    for (int i = 0; i < 3; i++) {
        float *part = prompt_logits(fixture(FUSED), &g, chunks[i]);
        ck_assert_msg(memcmp(part, all, n * sizeof(float)) == 0, "chunk %d: %g",
                      chunks[i], rel_err(part, all, n));
        free(part);
    }
    free(all);
    free(g.logits);
}
END_TEST

START_TEST(two_streams)
{
    tm_golden g;
    tm_read_golden(PER, 1, &g);
    loom_engine *e = tm_open_ok(fixture(PER), "qwen35");
    int32_t V = g.vocab, n = 10, m = 7;
    const int32_t *a = g.prompt, *b = g.prompt + 12;
    float *la = malloc((size_t)n * V * sizeof(float));
    float *lb = malloc((size_t)m * V * sizeof(float));
    float *both = malloc((size_t)(n + m) * V * sizeof(float));
    loom_cache *c = tm_new_cache(e);
    feed(e, c, 0, a, n, n, LOOM_ROW_LOGITS, la);
    tm_cache_reset(e, &c);
    feed(e, c, 0, b, m, m, LOOM_ROW_LOGITS, lb);
    tm_cache_free(e, c);
    loom_cache *ca = tm_new_cache(e), *cb = tm_new_cache(e);
    loom_row rows[32];
    const float *want[32];
    int32_t k = 0, ia = 0, ib = 0;
    while (ia < n || ib < m) {
        if (ib < m) {
            want[k] = lb + (size_t)ib * V;
            rows[k++] = (loom_row){cb, b[ib], ib, -1, LOOM_ROW_LOGITS};
            ib++;
        }
        if (ia < n) {
            want[k] = la + (size_t)ia * V;
            rows[k++] = (loom_row){ca, a[ia], ia, -1, LOOM_ROW_LOGITS};
            ia++;
        }
    }
    loom_err err = {{0}};
    ck_assert_msg(tm_forward(e, rows, k, both, &err) == LOOM_OK, "%s", err.msg);
    for (int32_t i = 0; i < k; i++)
        ck_assert_msg(memcmp(both + (size_t)i * V, want[i],
                             (size_t)V * sizeof(float)) == 0,
                      "round row %d: %g", i,
                      rel_err(both + (size_t)i * V, want[i], (size_t)V));
    tm_cache_free(e, ca);
    tm_cache_free(e, cb);
    free(la);
    free(lb);
    free(both);
    free(g.logits);
    loom_engine_close(e);
}
END_TEST

/* A window of k speculative rows after `plain` plain rows, commit(j), then
 * one more row, against feeding only the rows kept: the next row's logits
 * must be bit for bit equal. */
static void check_commit(const char *model, int32_t plain, int32_t k, int32_t j)
{
    tm_golden g;
    tm_read_golden(model, 1, &g);
    loom_engine *e = tm_open_ok(fixture(model), "qwen35");
    int32_t V = g.vocab, p = 6;
    const int32_t *win = g.prompt + p;
    int32_t next = g.prompt[p + plain + k];
    float *l1 = malloc((size_t)V * sizeof(float));
    float *l2 = malloc((size_t)V * sizeof(float));
    float *scratch = malloc((size_t)(plain + k) * V * sizeof(float));
    loom_err err = {{0}};
    loom_cache *c = tm_new_cache(e);
    feed(e, c, 0, g.prompt, p, p, 0, NULL);
    loom_row rows[32];
    for (int32_t i = 0; i < plain + k; i++)
        rows[i] = (loom_row){c, win[i], p + i, -1,
                             LOOM_ROW_LOGITS |
                                 (i >= plain ? LOOM_ROW_SPECULATIVE : 0u)};
    ck_assert_int_eq(tm_forward(e, rows, plain + k, scratch, &err), LOOM_OK);
    ck_assert_msg(tm_commit(e, c, j, &err) == LOOM_OK, "%s", err.msg);
    feed(e, c, p + plain + j, &next, 1, 1, LOOM_ROW_LOGITS, l1);

    tm_cache_reset(e, &c);
    feed(e, c, 0, g.prompt, p, p, 0, NULL);
    for (int32_t i = 0; i < plain + j; i++) /* plain steps, one row each */
        feed(e, c, p + i, win + i, 1, 1, 0, NULL);
    feed(e, c, p + plain + j, &next, 1, 1, LOOM_ROW_LOGITS, l2);
    ck_assert_msg(memcmp(l1, l2, (size_t)V * sizeof(float)) == 0,
                  "%s: commit(%d) of %d after %d plain rows differs by %g",
                  model, j, k, plain, rel_err(l1, l2, (size_t)V));
    tm_cache_free(e, c);
    free(l1);
    free(l2);
    free(scratch);
    free(g.logits);
    loom_engine_close(e);
}

START_TEST(windows_equal_steps)
{
    check_commit(PER, 0, 4, 0);
    check_commit(PER, 0, 4, 2);
    check_commit(PER, 0, 5, 5);
    check_commit(PER, 2, 4, 1);
    check_commit(FUSED, 0, 6, 3);
    check_commit(FUSED, 3, 3, 3);
}
END_TEST

/* ---------------------------------------------------------------- describe */

typedef struct fields {
    int64_t experts, top_k, moe_ffn, shared_ffn, norm_topk, moe_layers;
    char variant[32];
} fields;

static void LOOM_ABI f_i64(void *ctx, const char *k, int64_t v)
{
    fields *f = ctx;
    if (!strcmp(k, "num_experts"))
        f->experts = v;
    if (!strcmp(k, "num_experts_per_tok"))
        f->top_k = v;
    if (!strcmp(k, "moe_intermediate_size"))
        f->moe_ffn = v;
    if (!strcmp(k, "shared_expert_intermediate_size"))
        f->shared_ffn = v;
    if (!strcmp(k, "norm_topk_prob"))
        f->norm_topk = v;
    if (!strcmp(k, "moe_layers"))
        f->moe_layers = v;
}

static void LOOM_ABI f_f64(void *ctx, const char *k, double v)
{
    (void)ctx;
    (void)k;
    (void)v;
}

static void LOOM_ABI f_str(void *ctx, const char *k, const char *v)
{
    fields *f = ctx;
    if (!strcmp(k, "variant"))
        snprintf(f->variant, sizeof f->variant, "%s", v);
}

/* Bytes a token reads, from the file: every linear weight but the
 * embedding table (one row of it) and the conv taps, less the experts a
 * token does not run (E - top_k of each of the 4 layers, each expert three
 * [32 x 64] BF16 matrices). */
static uint64_t file_bytes_per_token(const char *model)
{
    loom_st *st = NULL;
    loom_err err;
    ck_assert_int_eq(loom_st_open_dir(fixture(model), &st, &err), LOOM_OK);
    uint64_t total = 0;
    for (size_t i = 0; i < loom_st_count(st); i++) {
        const loom_tensor *t = loom_st_at(st, i);
        if (t->ndim >= 2 && !strstr(t->name, "conv1d") &&
            !strstr(t->name, "embed_tokens"))
            total += t->nbytes;
    }
    loom_st_close(st);
    return total - 4u * (8u - 3u) * 3u * 32u * 64u * 2u;
}

START_TEST(describe_and_geometry)
{
    const char *models[2] = {PER, FUSED};
    for (int i = 0; i < 2; i++) {
        loom_engine *e = tm_open_ok(fixture(models[i]), "qwen35");
        ck_assert_str_eq(e->info.layer_kinds, "LALL");
        ck_assert_int_eq(e->info.vocab, 512);
        ck_assert_int_eq(e->info.n_eos, 1);
        ck_assert_uint_eq(e->info.weight_bytes_per_token,
                          file_bytes_per_token(models[i]));
        fields f;
        memset(&f, 0, sizeof f);
        loom_fields out = {sizeof out, &f, f_i64, f_f64, f_str};
        loom_err err = {{0}};
        ck_assert_int_eq(
            loom_family_geometry(&e->family, &e->hs.host, e->ckpt, &out, &err),
            LOOM_OK);
        ck_assert_str_eq(f.variant, "qwen3_5_moe");
        ck_assert_int_eq(f.experts, 8);
        ck_assert_int_eq(f.top_k, 3);
        ck_assert_int_eq(f.moe_ffn, 32);
        ck_assert_int_eq(f.shared_ffn, 48);
        ck_assert_int_eq(f.norm_topk, 1);
        ck_assert_int_eq(f.moe_layers, 4);
        loom_engine_close(e);
    }
    /* transformers drops norm_topk_prob for this type and always
     * renormalises: a stray false changes nothing */
    tm_golden g;
    tm_read_golden(PER, 1, &g);
    float *a = prompt_logits(fixture(PER), &g, g.n_prompt);
    float *b = prompt_logits(
        tm_edited_copy(PER,
                       "{\"norm_topk_prob\": false, \"mlp_only_layers\": [1], "
                       "\"decoder_sparse_step\": 2}",
                       0),
        &g, g.n_prompt);
    ck_assert_int_eq(memcmp(a, b, (size_t)g.n_prompt * g.vocab * 4), 0);
    free(a);
    free(b);
    free(g.logits);
}
END_TEST

/* ---------------------------------------------------------------- broken */

START_TEST(broken_fields)
{
    expect_refusal(tm_edited_copy(PER, "{\"num_experts_per_tok\": 9}", 0),
                   "num_experts_per_tok = 9", "exceeds num_experts = 8");
    expect_refusal(tm_edited_copy(PER, "{\"num_experts\": null}", 0),
                   "num_experts", "required");
    expect_refusal(tm_edited_copy(PER, "{\"moe_intermediate_size\": 0}", 0),
                   "moe_intermediate_size = 0", NULL);
    expect_refusal(
        tm_edited_copy(PER, "{\"shared_expert_intermediate_size\": null}", 0),
        "shared_expert_intermediate_size", "required");
    /* more experts than the file holds: the router's shape names it */
    expect_refusal(tm_edited_copy(PER, "{\"num_experts\": 9}", 0),
                   "model.layers.0.mlp.gate", NULL);
    expect_refusal(tm_edited_copy(PER, "{\"moe_intermediate_size\": 16}", 0),
                   "model.layers.0.mlp.experts.0.gate_proj", NULL);
    expect_refusal(tm_edited_copy(FUSED, "{\"moe_intermediate_size\": 16}", 0),
                   "model.layers.0.mlp.experts.gate_up_proj", "[8, 32, 64]");
}
END_TEST

START_TEST(broken_expert_tensors)
{
    /* a missing expert, shared expert or fused half */
    const char *missing[][2] = {
        {PER, "model.layers.2.mlp.experts.5.up_proj.weight"},
        {PER, "model.layers.0.mlp.experts.7.down_proj.weight"},
        {PER, "model.layers.1.mlp.shared_expert_gate.weight"},
        {PER, "model.layers.3.mlp.gate.weight"},
        {FUSED, "model.layers.3.mlp.experts.down_proj"},
        {FUSED, "model.layers.1.mlp.shared_expert.up_proj.weight"},
    };
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++) {
        const char *name = missing[i][1];
        char base[160];
        /* weight_find names the module path, without ".weight" */
        snprintf(base, sizeof base, "%.*s",
                 (int)(strstr(name, ".weight") ? strstr(name, ".weight") - name
                                               : (long)strlen(name)),
                 name);
        expect_refusal(tensor_edit(missing[i][0], name, NULL, 0, NULL), base,
                       NULL);
    }
    /* fused with gate_up_proj missing: read as per-expert, the first expert
     * is missing */
    expect_refusal(tensor_edit(FUSED, "model.layers.2.mlp.experts.gate_up_proj",
                               NULL, 0, NULL),
                   "model.layers.2.mlp.experts.0.gate_proj", NULL);
    /* wrong shapes */
    struct {
        const char *model, *name;
        int ndim;
        int64_t shape[3];
    } wrong[] = {
        {PER, "model.layers.1.mlp.experts.3.down_proj.weight", 2, {64, 31}},
        {PER, "model.layers.2.mlp.experts.0.gate_proj.weight", 2, {31, 64}},
        {PER, "model.layers.0.mlp.gate.weight", 2, {7, 64}},
        {PER, "model.layers.3.mlp.shared_expert_gate.weight", 2, {1, 32}},
        {FUSED, "model.layers.1.mlp.experts.gate_up_proj", 3, {7, 64, 64}},
        {FUSED, "model.layers.1.mlp.experts.gate_up_proj", 3, {8, 62, 64}},
        {FUSED, "model.layers.0.mlp.experts.gate_up_proj", 2, {512, 64}},
        {FUSED, "model.layers.2.mlp.experts.down_proj", 3, {8, 32, 64}},
        {FUSED, "model.layers.3.mlp.experts.down_proj", 3, {4, 64, 32}},
    };
    for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++)
        expect_refusal(tensor_edit(wrong[i].model, NULL, wrong[i].name,
                                   wrong[i].ndim, wrong[i].shape),
                       wrong[i].name, NULL);
}
END_TEST

/* ---------------------------------------------------------------- routing */

/* The reference order: larger first, then lower index, NaN last. */
static int ref_first(const float *x, int32_t a, int32_t b)
{
    float va = isnan(x[a]) ? -INFINITY : x[a];
    float vb = isnan(x[b]) ? -INFINITY : x[b];
    return va != vb ? va > vb : a < b;
}

START_TEST(topk_against_brute_force)
{
    uint32_t seed = 12345;
    int64_t sizes[] = {1, 2, 3, 7, 8, 64, 255, 256, 512};
    float x[512];
    int32_t idx[512], ref[512], work[512];
    unsigned char used[512];
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        int64_t n = sizes[si];
        for (int rep = 0; rep < 40; rep++) {
            /* few distinct values (ties), sorted or reversed runs, NaNs */
            for (int64_t i = 0; i < n; i++) {
                seed = seed * 1664525u + 1013904223u;
                int v = (int)(seed >> 24) % (rep % 3 == 0 ? 4 : 1000);
                x[i] = rep % 5 == 1   ? (float)i
                       : rep % 5 == 2 ? (float)-i
                                      : (float)v * 0.01f;
                if (rep % 7 == 3 && v % 13 == 0)
                    x[i] = NAN;
            }
            int64_t ks[] = {1, 2, 3, n / 2, n - 1, n};
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                int64_t k = ks[ki];
                if (k < 1 || k > n)
                    continue;
                loom_cpu_topk(x, n, k, idx, work);
                memset(used, 0, (size_t)n);
                for (int64_t t = 0; t < k; t++) {
                    int32_t best = -1;
                    for (int32_t i = 0; i < (int32_t)n; i++)
                        if (!used[i] && (best < 0 || ref_first(x, i, best)))
                            best = i;
                    used[best] = 1;
                    ref[t] = best;
                }
                ck_assert_msg(memcmp(idx, ref, (size_t)k * 4) == 0,
                              "n %lld k %lld rep %d", (long long)n,
                              (long long)k, rep);
            }
        }
    }
}
END_TEST

START_TEST(group_by_expert)
{
    enum { T = 37, K = 3, E = 11 };
    int32_t sel[T * K], start[E + 1], order[T * K];
    uint32_t seed = 7;
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) {
            /* distinct experts per row, expert 4 never chosen */
            int v;
            do {
                seed = seed * 1664525u + 1013904223u;
                v = (int)(seed >> 20) % E;
            } while (v == 4 || (k > 0 && v == sel[t * K]) ||
                     (k > 1 && v == sel[t * K + 1]));
            sel[t * K + k] = v;
        }
    loom_cpu_group_by_expert(sel, T * K, E, start, order);
    ck_assert_int_eq(start[0], 0);
    ck_assert_int_eq(start[E], T * K);
    ck_assert_int_eq(start[4], start[5]);
    int seen[T * K] = {0};
    for (int e = 0; e < E; e++) {
        int count = 0;
        for (int i = 0; i < T * K; i++)
            count += sel[i] == e;
        ck_assert_int_eq(start[e + 1] - start[e], count);
        for (int j = start[e]; j < start[e + 1]; j++) {
            ck_assert_int_eq(sel[order[j]], e);
            if (j > start[e])
                ck_assert_int_lt(order[j - 1], order[j]);
            seen[order[j]]++;
        }
    }
    for (int i = 0; i < T * K; i++)
        ck_assert_int_eq(seen[i], 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("qwen35_moe");
    TCase *ref = tcase_create("reference");
    tcase_set_timeout(ref, 120);
    tcase_add_test(ref, reference_per_expert);
    tcase_add_test(ref, reference_fused);
    tcase_add_test(ref, layouts_agree);
    tcase_add_test(ref, multimodal_wrapper);
    tcase_add_test(ref, describe_and_geometry);
    suite_add_tcase(s, ref);
    TCase *rounds = tcase_create("rounds");
    tcase_set_timeout(rounds, 120);
    tcase_add_test(rounds, chunked_prompt);
    tcase_add_test(rounds, two_streams);
    tcase_add_test(rounds, windows_equal_steps);
    suite_add_tcase(s, rounds);
    TCase *broken = tcase_create("broken");
    tcase_set_timeout(broken, 120);
    tcase_add_test(broken, broken_fields);
    tcase_add_test(broken, broken_expert_tensors);
    suite_add_tcase(s, broken);
    TCase *route = tcase_create("routing");
    tcase_add_test(route, topk_against_brute_force);
    tcase_add_test(route, group_by_expert);
    suite_add_tcase(s, route);
    return run_suite(s);
}
