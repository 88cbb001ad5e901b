/* The model-suite helpers declared in testmodel.h. */
#include "testmodel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <loom/sample.h>

#include "testutil.h"

loom_engine *tm_open(const char *dir, int64_t max_context, loom_status *rc,
                     loom_err *err)
{
    static const char *const dirs[] = {LOOM_PLUGIN_DIR};
    loom_engine_params p;
    memset(&p, 0, sizeof p);
    p.model = dir;
    p.plugin_dirs = dirs;
    p.n_plugin_dirs = 1;
    p.device = LOOM_DEVICE_CPU;
    p.n_threads = 2;
    p.max_context = max_context;
    loom_engine *e = NULL;
    loom_status st = loom_engine_open(&p, &e, err);
    if (rc)
        *rc = st;
    return st == LOOM_OK ? e : NULL;
}

loom_engine *tm_open_ok(const char *dir, const char *plugin)
{
    loom_err err = {{0}};
    loom_engine *e = tm_open(dir, 0, NULL, &err);
    ck_assert_msg(e != NULL, "open %s: %s", dir, err.msg);
    ck_assert_str_eq(e->plugin->plugin->name, plugin);
    return e;
}

void tm_read_golden(const char *model, int with_logits, tm_golden *g)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/golden.json", fixture(model));
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    ck_assert_msg(j != NULL, "%s: %s", path, je.text);
    json_t *ids = json_object_get(j, "prompt_ids");
    json_t *gr = json_object_get(j, "greedy");
    g->n_prompt = (int32_t)json_array_size(ids);
    g->n_greedy = (int32_t)json_array_size(gr);
    ck_assert_int_le(g->n_prompt, 64);
    ck_assert_int_le(g->n_greedy, 64);
    for (int32_t i = 0; i < g->n_prompt; i++)
        g->prompt[i] = (int32_t)json_integer_value(json_array_get(ids, i));
    for (int32_t i = 0; i < g->n_greedy; i++)
        g->greedy[i] = (int32_t)json_integer_value(json_array_get(gr, i));
    g->vocab = (int32_t)json_integer_value(json_array_get(
        json_object_get(json_object_get(j, "logits"), "shape"), 1));
    json_decref(j);
    g->logits = NULL;
    if (!with_logits)
        return;
    snprintf(path, sizeof path, "%s/logits.f32", fixture(model));
    size_t n = 0;
    g->logits = read_f32(path, &n);
    ck_assert_ptr_nonnull(g->logits);
    ck_assert_uint_eq(n, (size_t)g->n_prompt * (size_t)g->vocab);
}

loom_cache *tm_new_cache(loom_engine *e)
{
    loom_cache *c = NULL;
    loom_err err = {{0}};
    loom_status rc = e->family->cache_new(e->model, &c, &err);
    ck_assert_msg(rc == LOOM_OK, "cache_new: %s", err.msg);
    return c;
}

void tm_check_greedy(const char *what, loom_engine *e, loom_cache *c,
                     const tm_golden *g, const float *last)
{
    int32_t vocab = (int32_t)e->info.vocab;
    float *row = malloc((size_t)vocab * sizeof *row);
    ck_assert_ptr_nonnull(row);
    memcpy(row, last, (size_t)vocab * sizeof *row);
    /* one row per forward, each fed the token the previous one chose */
    for (int32_t i = 0; i < g->n_greedy; i++) {
        int32_t tok = loom_sample_argmax(row, vocab);
        ck_assert_msg(tok == g->greedy[i], "%s greedy step %d: %d, want %d",
                      what, i, tok, g->greedy[i]);
        loom_row r = {c, tok, g->n_prompt + i, -1, LOOM_ROW_LOGITS};
        loom_round round = {&r, 1};
        loom_output out = {row, NULL};
        loom_err err = {{0}};
        loom_status st = e->family->forward(e->model, &round, &out, &err);
        ck_assert_msg(st == LOOM_OK, "forward: %s", err.msg);
    }
    free(row);
}

void tm_copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb");
    ck_assert_msg(in != NULL, "cannot read %s", from);
    FILE *out = fopen(to, "wb");
    ck_assert_msg(out != NULL, "cannot write %s", to);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);
}

const char *tm_edited_copy(const char *model, const char *edit, int text_level)
{
    const char *dir = temp_dir();
    ck_assert_ptr_nonnull(dir);
    char src[1024], dst[1024];
    const char *files[] = {"model.safetensors", "generation_config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/%s", fixture(model), files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        tm_copy_file(src, dst);
    }
    snprintf(src, sizeof src, "%s/config.json", fixture(model));
    json_error_t je;
    json_t *cfg = json_load_file(src, 0, &je);
    ck_assert_msg(cfg != NULL, "%s: %s", src, je.text);
    json_t *tc = text_level ? json_object_get(cfg, "text_config") : cfg;
    ck_assert_ptr_nonnull(tc);
    json_t *ed = json_loads(edit, 0, &je);
    ck_assert_msg(ed != NULL, "bad edit %s: %s", edit, je.text);
    const char *key;
    json_t *v;
    json_object_foreach(ed, key, v)
    {
        if (json_is_null(v))
            json_object_del(tc, key);
        else
            json_object_set(tc, key, v);
    }
    json_decref(ed);
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    ck_assert_int_eq(json_dump_file(cfg, dst, JSON_INDENT(1)), 0);
    json_decref(cfg);
    return dir;
}
