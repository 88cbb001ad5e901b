/* The model-suite helpers declared in testmodel.h. */
#include "testmodel.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <loom/cpu_ops.h>
#include <loom/round_plan.h>
#include <loom/safetensors.h>
#include <loom/sample.h>
#include <loom/weights.h>

#include "testutil.h"

loom_engine *tm_open_on(const char *dir, int device, int64_t max_context,
                        int32_t max_streams, loom_status *rc, loom_err *err)
{
    static const char *const dirs[] = {LOOM_PLUGIN_DIR};
    loom_engine_params p;
    memset(&p, 0, sizeof p);
    p.model = dir;
    p.plugin_dirs = dirs;
    p.n_plugin_dirs = 1;
    p.device = device;
    p.n_threads = 2;
    p.max_context = max_context;
    p.max_streams = max_streams;
    loom_engine *e = NULL;
    loom_status st = loom_engine_open(&p, &e, err);
    if (rc)
        *rc = st;
    return st == LOOM_OK ? e : NULL;
}

loom_engine *tm_open(const char *dir, int64_t max_context, loom_status *rc,
                     loom_err *err)
{
    return tm_open_on(dir, LOOM_DEVICE_CPU, max_context, 0, rc, err);
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
    loom_status rc = loom_family_cache_new(&e->family, e->model, &c, &err);
    ck_assert_msg(rc == LOOM_OK, "cache_new: %s", err.msg);
    return c;
}

void tm_cache_reset(loom_engine *e, loom_cache **c)
{
    loom_err err = {{0}};
    loom_status rc = loom_family_cache_reset(&e->family, e->model, c, &err);
    ck_assert_msg(rc == LOOM_OK, "cache_reset: %s", err.msg);
}

void tm_cache_free(loom_engine *e, loom_cache *c)
{
    loom_family_cache_free(&e->family, e->model, c);
}

loom_status tm_commit(loom_engine *e, loom_cache *c, int32_t kept,
                      loom_err *err)
{
    return loom_family_commit(&e->family, e->model, c, kept, err);
}

loom_round tm_round(const loom_row *rows, int32_t n)
{
    return (loom_round){sizeof(loom_round), sizeof(loom_row), rows, n};
}

loom_output tm_output(float *logits, int64_t n_logits, int64_t vocab,
                      float *taps, int64_t n_taps, int64_t tap_width)
{
    loom_output o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    if (logits)
        o.logits = loom_view_host_f32(logits, n_logits, vocab);
    if (taps)
        o.taps = loom_view_host_f32(taps, n_taps, tap_width);
    return o;
}

loom_status tm_forward_taps(loom_engine *e, const loom_row *rows, int32_t n,
                            float *logits, float *taps, int64_t tap_width,
                            loom_err *err)
{
    int64_t n_logits = 0, n_taps = 0;
    for (int32_t i = 0; i < n; i++) {
        n_logits += (rows[i].flags & LOOM_ROW_LOGITS) != 0;
        n_taps += (rows[i].flags & LOOM_ROW_TAP) != 0;
    }
    loom_round r = tm_round(rows, n);
    loom_output o =
        tm_output(logits, n_logits, e->info.vocab, taps, n_taps, tap_width);
    return loom_family_forward(&e->family, e->model, &r, &o, err);
}

loom_status tm_forward(loom_engine *e, const loom_row *rows, int32_t n,
                       float *logits, loom_err *err)
{
    return tm_forward_taps(e, rows, n, logits, NULL, 0, err);
}

const loom_target_i *tm_target(loom_engine *e)
{
    const loom_target_i *t =
        loom_family_extension(&e->family, e->model, LOOM_TARGET_ID);
    ck_assert_msg(t != NULL, "the model has no %s", LOOM_TARGET_ID);
    ck_assert_uint_ge(t->struct_size, sizeof *t);
    /* an extension the model does not have is NULL, not an error */
    ck_assert_ptr_null(
        loom_family_extension(&e->family, e->model, "loom.target/0"));
    return t;
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
        loom_err err = {{0}};
        loom_status st = tm_forward(e, &r, 1, row, &err);
        ck_assert_msg(st == LOOM_OK, "forward: %s", err.msg);
    }
    free(row);
}

/* Row `row` of a [vocab, hidden] BF16, F16 or F32 table, as float32. */
static void table_row(const loom_tensor *t, int64_t row, float *out)
{
    int64_t H = t->shape[1];
    for (int64_t d = 0; d < H; d++) {
        int64_t i = row * H + d;
        if (t->dtype == LOOM_DTYPE_BF16)
            out[d] = loom_bf16_to_f32(((const uint16_t *)t->data)[i]);
        else if (t->dtype == LOOM_DTYPE_F16)
            out[d] = loom_f16_to_f32(((const uint16_t *)t->data)[i]);
        else
            out[d] = ((const float *)t->data)[i];
    }
}

void tm_check_target(const char *model, const char *plugin,
                     const char *embed_name)
{
    tm_golden g;
    tm_read_golden(model, 1, &g);
    loom_engine *e = tm_open_ok(fixture(model), plugin);
    const loom_target_i *tg = tm_target(e);
    int32_t V = e->info.vocab, H = e->info.hidden, T = g.n_prompt;
    int32_t last = e->info.n_layers - 1;
    loom_err err = {{0}};
    ck_assert_msg(tg->set_taps(e->model, &last, 1, &err) == LOOM_OK, "%s",
                  err.msg);
    size_t tv = (size_t)T * (size_t)V, th = (size_t)T * (size_t)H;
    float *lg = malloc(tv * sizeof *lg), *head = malloc(tv * sizeof *head);
    float *taps = malloc(th * sizeof *taps);
    float *wide = malloc((size_t)T * (size_t)(V + 3) * sizeof *wide);
    ck_assert(lg && head && taps && wide);

    /* a one-token prompt: the last layer's output through head is the
     * forward's logits, bit for bit */
    loom_cache *c = tm_new_cache(e);
    loom_row rows[64];
    for (int32_t i = 0; i < T; i++)
        rows[i] =
            (loom_row){c, g.prompt[i], i, -1, LOOM_ROW_LOGITS | LOOM_ROW_TAP};
    ck_assert_msg(tm_forward_taps(e, rows, 1, lg, taps, H, &err) == LOOM_OK,
                  "%s", err.msg);
    loom_view hv = loom_view_host_f32(taps, 1, H);
    loom_view lv = loom_view_host_f32(head, 1, V);
    ck_assert_msg(tg->head(e->model, &hv, 1, &lv, &err) == LOOM_OK, "%s",
                  err.msg);
    ck_assert_msg(memcmp(head, lg, (size_t)V * sizeof *lg) == 0,
                  "%s: head(taps) differs from the logits by %g", model,
                  rel_err(head, lg, (size_t)V));
    ck_assert_double_lt(rel_err(lg, g.logits, (size_t)V), 1e-4);

    /* the whole prompt in one forward: every row alike */
    tm_cache_reset(e, &c);
    ck_assert_msg(tm_forward_taps(e, rows, T, lg, taps, H, &err) == LOOM_OK,
                  "%s", err.msg);
    hv = loom_view_host_f32(taps, T, H);
    lv = loom_view_host_f32(head, T, V);
    ck_assert_msg(tg->head(e->model, &hv, T, &lv, &err) == LOOM_OK, "%s",
                  err.msg);
    ck_assert_msg(memcmp(head, lg, tv * sizeof *lg) == 0,
                  "%s: head(taps) of %d rows differs from the logits by %g",
                  model, T, rel_err(head, lg, tv));
    double d = rel_err(lg, g.logits, tv);
    ck_assert_msg(d < 1e-4, "%s: logits against transformers: %g", model, d);
    /* rows further apart than the vocabulary: the same rows */
    loom_view sv = loom_view_host_f32(wide, T, V);
    sv.strides[0] = V + 3;
    ck_assert_msg(tg->head(e->model, &hv, T, &sv, &err) == LOOM_OK, "%s",
                  err.msg);
    for (int32_t i = 0; i < T; i++)
        ck_assert_int_eq(memcmp(wide + (size_t)i * (V + 3),
                                head + (size_t)i * V, (size_t)V * sizeof *lg),
                         0);

    /* embed: the table's rows as float32 */
    loom_st *st = NULL;
    ck_assert_int_eq(loom_st_open_dir(fixture(model), &st, &err), LOOM_OK);
    const loom_tensor *table = loom_st_find(st, embed_name);
    ck_assert_msg(table != NULL, "%s: no %s", model, embed_name);
    ck_assert_int_eq(table->shape[1], H);
    int32_t tokens[4] = {g.prompt[0], g.prompt[T - 1], 0, V - 1};
    float got[4 * 512], want[512];
    ck_assert_int_le(H, 512);
    loom_view ev = loom_view_host_f32(got, 4, H);
    ck_assert_msg(tg->embed(e->model, tokens, 4, &ev, &err) == LOOM_OK, "%s",
                  err.msg);
    for (int32_t i = 0; i < 4; i++) {
        table_row(table, tokens[i], want);
        ck_assert_msg(
            memcmp(got + (size_t)i * H, want, (size_t)H * sizeof *want) == 0,
            "%s: embed(%d) is not the table's row", model, tokens[i]);
    }
    loom_st_close(st);

    /* refusals */
    tokens[1] = V;
    ck_assert_int_eq(tg->embed(e->model, tokens, 2, &ev, &err), LOOM_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "token"));
    ev.shape[1] = H - 1;
    ck_assert_int_eq(tg->embed(e->model, tokens, 1, &ev, &err),
                     LOOM_ERR_INVALID);
    loom_view dv = lv;
    dv.kind = LOOM_MEM_DEVICE;
    dv.data = NULL;
    dv.device_ptr = 0x1000;
    ck_assert_int_eq(tg->head(e->model, &hv, 1, &dv, &err),
                     LOOM_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "device memory"));
    ck_assert_int_eq(tg->head(e->model, &hv, T + 1, &lv, &err),
                     LOOM_ERR_INVALID);
    int32_t past = e->info.n_layers;
    ck_assert_int_eq(tg->set_taps(e->model, &past, 1, &err), LOOM_ERR_RANGE);

    tm_cache_free(e, c);
    free(lg);
    free(head);
    free(taps);
    free(wide);
    free(g.logits);
    loom_engine_close(e);
}

void tm_check_row_size(const char *model, const char *plugin)
{
    tm_golden g;
    tm_read_golden(model, 0, &g);
    loom_engine *e = tm_open_ok(fixture(model), plugin);
    int32_t V = e->info.vocab, T = g.n_prompt;
    size_t tv = (size_t)T * (size_t)V;
    float *l1 = malloc(tv * sizeof *l1), *l2 = malloc(tv * sizeof *l2);
    loom_cache *c = tm_new_cache(e);
    loom_row rows[64];
    struct {
        loom_row row;
        uint64_t later;
    } wide[64];
    for (int32_t i = 0; i < T; i++) {
        rows[i] = (loom_row){c, g.prompt[i], i, -1, LOOM_ROW_LOGITS};
        wide[i].row = rows[i];
        wide[i].later = ~0ull;
    }
    loom_err err = {{0}};
    ck_assert_msg(tm_forward(e, rows, T, l1, &err) == LOOM_OK, "%s", err.msg);
    tm_cache_reset(e, &c);
    loom_round r = {sizeof r, sizeof *wide, &wide[0].row, T};
    loom_output o = tm_output(l2, T, V, NULL, 0, 0);
    ck_assert_msg(loom_family_forward(&e->family, e->model, &r, &o, &err) ==
                      LOOM_OK,
                  "%s", err.msg);
    ck_assert_int_eq(memcmp(l1, l2, tv * sizeof *l1), 0);
    tm_cache_free(e, c);
    free(l1);
    free(l2);
    loom_engine_close(e);
}

void tm_check_struct_sizes(const char *model, const char *plugin)
{
    loom_engine *e = tm_open_ok(fixture(model), plugin);
    const loom_family_i *vt = e->family.vt;
    union {
        loom_model_info info;
        unsigned char bytes[sizeof(loom_model_info) + 16];
    } buf;
    /* an older host's info, without weight_bytes_per_token */
    size_t old = offsetof(loom_model_info, weight_bytes_per_token);
    memset(&buf, 0xa5, sizeof buf);
    buf.info.struct_size = (uint32_t)old;
    vt->describe(e->model, &buf.info);
    ck_assert_uint_eq(buf.info.struct_size, old);
    ck_assert_int_eq(buf.info.vocab, e->info.vocab);
    ck_assert_int_eq(buf.info.n_layers, e->info.n_layers);
    ck_assert_uint_eq(buf.info.caps, e->info.caps);
    ck_assert_int_eq(buf.info.compute_dtype, e->info.compute_dtype);
    for (size_t i = old; i < sizeof buf; i++)
        ck_assert_msg(buf.bytes[i] == 0xa5,
                      "%s: describe wrote byte %zu of "
                      "a %zu-byte info",
                      model, i, old);
    /* a newer host's, longer: filled up to this ABI's */
    memset(&buf, 0xa5, sizeof buf);
    buf.info.struct_size = sizeof buf;
    vt->describe(e->model, &buf.info);
    ck_assert_uint_eq(buf.info.struct_size, sizeof(loom_model_info));
    ck_assert_uint_eq(buf.info.weight_bytes_per_token,
                      e->info.weight_bytes_per_token);
    for (size_t i = sizeof(loom_model_info); i < sizeof buf; i++)
        ck_assert_uint_eq(buf.bytes[i], 0xa5);

    /* an older host's options, stopping before max_rows (whose bytes hold
     * what a reader must not take) */
    loom_model_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = (uint32_t)offsetof(loom_model_options, max_rows);
    opt.device = LOOM_DEVICE_CPU;
    opt.max_context = 64;
    opt.max_rows = 3;
    loom_model *m = NULL;
    loom_err err = {{0}};
    ck_assert_msg(vt->open(&e->hs.host, e->ckpt, &opt, &m, &err) == LOOM_OK,
                  "%s", err.msg);
    memset(&buf, 0, sizeof buf);
    buf.info.struct_size = sizeof buf.info;
    vt->describe(m, &buf.info);
    ck_assert_int_eq(buf.info.max_context, 64);
    ck_assert_int_eq(buf.info.max_rows, 512);
    vt->close(m);
    loom_engine_close(e);
}

void tm_check_cache_budget(const char *model, const char *plugin)
{
    loom_engine *e = tm_open_ok(fixture(model), plugin);
    int64_t fixed = (int64_t)e->info.cache_bytes_fixed;
    ck_assert_int_gt(fixed, 0);
    int64_t before = loom_host_accounted(&e->hs, LOOM_MEM_HOST, LOOM_MEM_CACHE);
    int64_t total = loom_host_accounted(&e->hs, LOOM_MEM_HOST, -1);
    loom_cache *c = tm_new_cache(e);
    ck_assert_int_eq(loom_host_accounted(&e->hs, LOOM_MEM_HOST, LOOM_MEM_CACHE),
                     before + fixed);
    tm_cache_free(e, c);
    ck_assert_int_eq(loom_host_accounted(&e->hs, LOOM_MEM_HOST, LOOM_MEM_CACHE),
                     before);
    /* one byte short of a cache */
    loom_host_set_budget(&e->hs, LOOM_MEM_HOST, total + fixed - 1);
    c = NULL;
    loom_err err = {{0}};
    ck_assert_int_eq(loom_family_cache_new(&e->family, e->model, &c, &err),
                     LOOM_ERR_FULL);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(loom_host_accounted(&e->hs, LOOM_MEM_HOST, -1), total);
    loom_host_set_budget(&e->hs, LOOM_MEM_HOST, total + fixed);
    c = tm_new_cache(e);
    tm_cache_free(e, c);
    loom_host_set_budget(&e->hs, LOOM_MEM_HOST, INT64_MAX);
    loom_engine_close(e);
}

void tm_check_device_view_refused(loom_engine *e, const loom_row *row)
{
    loom_round r = tm_round(row, 1);
    float one[1];
    loom_output o = tm_output(one, 1, e->info.vocab, NULL, 0, 0);
    o.logits.kind = LOOM_MEM_DEVICE;
    o.logits.data = NULL;
    o.logits.device_ptr = 0x1000;
    loom_err err = {{0}};
    ck_assert_int_eq(loom_family_forward(&e->family, e->model, &r, &o, &err),
                     LOOM_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "device memory"));
}

/* 40 rows of one stream in one round (at least LOOM_PROMPT_MIN_ROWS and
 * no speculative row: the linear layers take host->matmul_prompt) against
 * the same tokens fed one row a round (host->matmul, the decode kernels):
 * the last row's logits within `tol` of the largest logit, and the same
 * argmax. On the float32 prompt sets each product of the two kernels is
 * within 2 g s of the other's (core/src/model/matmul_prompt.c: g = 2K
 * 2^-24, about 1e-5 here), and the fixture's few layers keep that well
 * under tol = 1e-4. Where the host's prompt set rounds x to BF16 (AMX, or
 * AVX512-BF16 through LOOM_PROMPT_ISA; the fixtures' weights are BF16)
 * each product is off by up to 2^-8 s more, and layer on layer (the
 * random fixtures' gates and recurrences amplify it) that came to 4.2e-3
 * (nemotron-h-moe-tiny), 2.0e-2 (qwen35-tiny, -vl-tiny), 5.1e-2
 * (qwen35-moe-tiny) and 9.5e-2 (qwen35-ref2) of the largest logit, within
 * a tenth of that on both sets (AVX512-BF16 gives 9.0e-2 on qwen35-ref2):
 * tol = 0.2, and the argmax still equal. */
void tm_check_prompt_chunk(const char *model, const char *plugin)
{
    enum { N = 40 };
    ck_assert_int_ge(N, LOOM_PROMPT_MIN_ROWS);
    tm_golden g;
    tm_read_golden(model, 0, &g);
    loom_engine *e = tm_open_ok(fixture(model), plugin);
    int32_t V = e->info.vocab, ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = g.prompt[(i * 7) % g.n_prompt];
    float *chunk = malloc((size_t)V * sizeof(float));
    float *step = malloc((size_t)V * sizeof(float));
    loom_cache *c = tm_new_cache(e);
    loom_row rows[N];
    for (int i = 0; i < N; i++)
        rows[i] =
            (loom_row){c, ids[i], i, -1, i == N - 1 ? LOOM_ROW_LOGITS : 0};
    loom_err err = {{0}};
    ck_assert_msg(tm_forward(e, rows, N, chunk, &err) == LOOM_OK, "%s",
                  err.msg);
    tm_cache_reset(e, &c);
    for (int i = 0; i < N; i++) {
        rows[0] =
            (loom_row){c, ids[i], i, -1, i == N - 1 ? LOOM_ROW_LOGITS : 0};
        ck_assert_msg(tm_forward(e, rows, 1, i == N - 1 ? step : NULL, &err) ==
                          LOOM_OK,
                      "%s", err.msg);
    }
    double dmax = 0, lmax = 0;
    for (int32_t v = 0; v < V; v++) {
        dmax = fmax(dmax, fabs((double)chunk[v] - step[v]));
        lmax = fmax(lmax, fabs((double)step[v]));
    }
    fprintf(stderr,
            "%s: prompt chunk vs one-row steps: %.3g of the largest "
            "logit\n",
            model, dmax / lmax);
    double tol =
        loom_matmul_prompt_default() >= LOOM_MM_AVX512BF16 ? 0.2 : 1e-4;
    ck_assert_msg(dmax <= tol * lmax,
                  "%s: prompt chunk differs by %g (max "
                  "logit %g)",
                  model, dmax, lmax);
    ck_assert_int_eq(loom_cpu_argmax(chunk, V), loom_cpu_argmax(step, V));
    /* the chunk did take the prompt kernels: its bits differ */
    ck_assert(memcmp(chunk, step, (size_t)V * sizeof(float)) != 0);
    tm_cache_free(e, c);
    free(chunk);
    free(step);
    loom_engine_close(e);
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
