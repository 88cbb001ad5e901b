/* The host services: thread pool, platform file helpers, JSON accessors,
 * the shared matmul kernel against a plain double-precision reference, and
 * the tables lent to plugins (their log lines carry their names). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <loom/checkpoint.h>
#include <loom/host.h>
#include <loom/log.h>
#include <loom/pool.h>
#include <loom/platform.h>
#include <loom/registry.h>
#include <loom/weights.h>

#include "testutil.h"

struct cover {
    atomic_int *hits;
};

static void LOOM_ABI mark(void *ctx, int64_t b, int64_t e)
{
    struct cover *c = ctx;
    for (int64_t i = b; i < e; i++)
        atomic_fetch_add(&c->hits[i], 1);
}

START_TEST(pool_covers_each_index_once)
{
    loom_pool *pool = NULL;
    loom_err err;
    ck_assert_int_eq(loom_pool_new(4, &pool, &err), LOOM_OK);
    ck_assert_int_eq(loom_pool_size(pool), 4);
    atomic_int *hits = calloc(1000, sizeof *hits);
    struct cover c = {hits};
    /* many short jobs in a row: the case where a late worker could run a
     * part twice or miss one */
    for (int round = 0; round < 2000; round++) {
        int64_t n = 1 + (round * 37) % 1000;
        loom_pool_run(pool, n, mark, &c);
        for (int64_t i = 0; i < n; i++) {
            ck_assert_int_eq(atomic_load(&hits[i]), 1);
            atomic_store(&hits[i], 0);
        }
    }
    free(hits);
    loom_pool_free(pool);
}
END_TEST

struct nested {
    loom_pool *pool;
    atomic_int count;
};

static void LOOM_ABI inner(void *ctx, int64_t b, int64_t e)
{
    struct nested *n = ctx;
    atomic_fetch_add(&n->count, (int)(e - b));
}

static void LOOM_ABI outer(void *ctx, int64_t b, int64_t e)
{
    struct nested *n = ctx;
    for (int64_t i = b; i < e; i++)
        loom_pool_run(n->pool, 10, inner, n);
}

START_TEST(pool_nested_calls_run_inline)
{
    struct nested n = {NULL, 0};
    loom_err err;
    ck_assert_int_eq(loom_pool_new(3, &n.pool, &err), LOOM_OK);
    loom_pool_run(n.pool, 7, outer, &n);
    ck_assert_int_eq(atomic_load(&n.count), 70);
    loom_pool_free(n.pool);
}
END_TEST

static void collect(void *ctx, const char *name)
{
    char *buf = ctx;
    strcat(buf, name);
    strcat(buf, ";");
}

START_TEST(platform_files)
{
    const char *dir = temp_dir();
    char path[1024], list[256] = "";
    const char *names[] = {"b.txt", "a.txt", "c.bin"};
    for (int i = 0; i < 3; i++)
        write_text_in(dir, names[i], "hello");
    loom_err err;
    ck_assert_int_eq(loom_dir_list(dir, collect, list, &err), LOOM_OK);
    ck_assert_str_eq(list, "a.txt;b.txt;c.bin;");

    loom_map m;
    snprintf(path, sizeof path, "%s/a.txt", dir);
    ck_assert_int_eq(loom_map_file(path, &m, &err), LOOM_OK);
    ck_assert_uint_eq(m.size, 5);
    ck_assert_int_eq(memcmp(m.data, "hello", 5), 0);
    loom_unmap(&m);
    ck_assert_int_eq(loom_file_exists(path), 1);
    ck_assert_int_eq(loom_dir_exists(path), 0);
    ck_assert_int_eq(loom_dir_exists(dir), 1);

    snprintf(path, sizeof path, "%s/missing", dir);
    ck_assert_int_eq(loom_map_file(path, &m, &err), LOOM_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, path));
    ck_assert_int_eq(loom_dir_list(path, collect, list, &err),
                     LOOM_ERR_NOT_FOUND);

    snprintf(path, sizeof path, "%s/a.txt", dir);
#ifndef _WIN32
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "chmod 600 '%s'", path);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(loom_file_is_shared(path), 0);
    snprintf(cmd, sizeof cmd, "chmod 640 '%s'", path);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(loom_file_is_shared(path), 1);
#else
    /* NTFS has ACLs, not mode bits: nothing is shared by mode there */
    fprintf(stderr, "test_host: mode-bit sharing not checked on Windows "
                    "(NTFS has no mode bits)\n");
    ck_assert_int_eq(loom_file_is_shared(path), 0);
#endif

    char exe[1024];
    ck_assert_int_eq(loom_exe_dir(exe, sizeof exe, &err), LOOM_OK);
#ifndef _WIN32
    ck_assert_str_eq(exe, LOOM_BUILD_DIR);
#else
    /* Windows spells the directory with a drive and backslashes (Z:\work
     * under Wine for CMake's /work): the same path once both are put in
     * that form, and this program is in it */
    char want[1024], me[1100];
    snprintf(want, sizeof want, "%s", LOOM_BUILD_DIR);
    for (char *c = want; *c; c++)
        if (*c == '/')
            *c = '\\';
    const char *tail = want[0] == '\\' ? want : strchr(want, '\\');
    ck_assert_ptr_nonnull(tail);
    ck_assert_ptr_nonnull(strchr(exe, ':'));
    ck_assert_str_eq(strchr(exe, ':') + 1, tail);
    snprintf(me, sizeof me, "%s\\test_host.exe", exe);
    ck_assert_int_eq(loom_file_exists(me), 1);
#endif
}
END_TEST

START_TEST(json_accessors)
{
    loom_host_state hs;
    loom_host_init(&hs, NULL);
    const loom_host *h = &hs.host;
    loom_checkpoint *ckpt = NULL;
    loom_err err;
    ck_assert_int_eq(
        loom_checkpoint_open(fixture("models/qwen35-vl-tiny"), &ckpt, &err),
        LOOM_OK);
    const loom_json *tc = h->text_config(ckpt);
    ck_assert_ptr_ne(tc, h->config(ckpt));
    ck_assert_int_eq(h->json_type(tc), LOOM_JSON_OBJECT);
    ck_assert_int_eq(h->json_type(h->json_get(tc, "nope")), LOOM_JSON_MISSING);
    ck_assert_int_eq(h->json_type(h->json_get(NULL, "x")), LOOM_JSON_MISSING);
    const loom_json *hs_ = h->json_get(tc, "hidden_size");
    ck_assert_int_eq(h->json_type(hs_), LOOM_JSON_INT);
    ck_assert_int_eq(h->json_int(hs_), 64);
    ck_assert_double_eq(h->json_real(hs_), 64.0);
    const loom_json *archs = h->json_get(h->config(ckpt), "architectures");
    ck_assert_uint_eq(h->json_len(archs), 1);
    ck_assert_str_eq(h->json_str(h->json_at(archs, 0)),
                     "Qwen3_5ForConditionalGeneration");
    ck_assert_ptr_null(h->json_at(archs, 1));
    ck_assert_ptr_null(h->json_str(hs_));
    loom_checkpoint_close(ckpt);
}
END_TEST

/* A deterministic pseudo-random float in [-1, 1). */
static float rnd(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void check_matmul(loom_pool *pool, loom_dtype dt, int64_t rows,
                         int64_t cols, int64_t n_tok)
{
    uint32_t s = (uint32_t)(rows * 31 + cols * 7 + n_tok);
    size_t n = (size_t)(rows * cols);
    float *wf = malloc(n * sizeof *wf);
    uint16_t *wh = malloc(n * sizeof *wh);
    float *x = malloc((size_t)(n_tok * cols) * sizeof *x);
    float *y = malloc((size_t)(n_tok * rows) * sizeof *y);
    for (size_t i = 0; i < n; i++) {
        float v = rnd(&s);
        if (dt == LOOM_DTYPE_BF16) {
            wh[i] = loom_f32_to_bf16(v);
            wf[i] = loom_bf16_to_f32(wh[i]);
        } else if (dt == LOOM_DTYPE_F16) {
            wh[i] = loom_f32_to_f16(v);
            wf[i] = loom_f16_to_f32(wh[i]);
        } else {
            wf[i] = v;
        }
    }
    for (int64_t i = 0; i < n_tok * cols; i++)
        x[i] = rnd(&s);
    loom_weight w;
    memset(&w, 0, sizeof w);
    w.dtype = dt;
    w.rows = rows;
    w.cols = cols;
    w.data = dt == LOOM_DTYPE_F32 ? (const void *)wf : (const void *)wh;
    loom_matmul(pool, &w, x, y, n_tok);
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < rows; r++) {
            double ref = 0, mag = 0;
            for (int64_t c = 0; c < cols; c++) {
                ref += (double)wf[r * cols + c] * x[t * cols + c];
                mag += fabs((double)wf[r * cols + c] * x[t * cols + c]);
            }
            /* float32 accumulation: error grows with the sum of magnitudes */
            ck_assert_msg(fabs(y[t * rows + r] - ref) <= 1e-5 * mag + 1e-6,
                          "dtype %d [%lld,%lld] tok %lld row %lld: %g vs %g",
                          dt, (long long)rows, (long long)cols, (long long)t,
                          (long long)r, y[t * rows + r], ref);
        }
    free(wf);
    free(wh);
    free(x);
    free(y);
}

START_TEST(matmul_matches_reference)
{
    loom_pool *pool = NULL;
    loom_err err;
    ck_assert_int_eq(loom_pool_new(3, &pool, &err), LOOM_OK);
    loom_dtype dts[] = {LOOM_DTYPE_F32, LOOM_DTYPE_BF16, LOOM_DTYPE_F16};
    for (int d = 0; d < 3; d++) {
        check_matmul(pool, dts[d], 1, 1, 1);
        check_matmul(pool, dts[d], 37, 13, 1);
        check_matmul(pool, dts[d], 64, 64, 1);
        check_matmul(pool, dts[d], 100, 257, 3);
        check_matmul(pool, dts[d], 15, 9, 5);
        check_matmul(pool, dts[d], 300, 515, 9);
    }
    check_matmul(NULL, LOOM_DTYPE_BF16, 33, 70, 2);
    loom_pool_free(pool);
}
END_TEST

/* A row's result must not depend on how many tokens share the call: the
 * families' commit checks compare logits bit for bit. */
START_TEST(matmul_rows_independent_of_token_count)
{
    loom_pool *pool = NULL;
    loom_err err;
    ck_assert_int_eq(loom_pool_new(2, &pool, &err), LOOM_OK);
    const int64_t rows = 300, cols = 1000 + 13, n_tok = 7;
    uint32_t s = 12345;
    uint16_t *wh = malloc((size_t)(rows * cols) * 2);
    float *wf = malloc((size_t)(rows * cols) * 4);
    float *x = malloc((size_t)(n_tok * cols) * 4);
    float *yall = malloc((size_t)(n_tok * rows) * 4);
    float *yone = malloc((size_t)rows * 4);
    for (int64_t i = 0; i < rows * cols; i++) {
        wf[i] = rnd(&s);
        wh[i] = loom_f32_to_bf16(wf[i]);
    }
    for (int64_t i = 0; i < n_tok * cols; i++)
        x[i] = rnd(&s);
    loom_dtype dts[] = {LOOM_DTYPE_BF16, LOOM_DTYPE_F16, LOOM_DTYPE_F32};
    for (int d = 0; d < 3; d++) {
        loom_weight w;
        memset(&w, 0, sizeof w);
        w.dtype = dts[d];
        w.rows = rows;
        w.cols = cols;
        w.data = dts[d] == LOOM_DTYPE_F32 ? (const void *)wf : (const void *)wh;
        loom_matmul(pool, &w, x, yall, n_tok);
        for (int64_t t = 0; t < n_tok; t++) {
            loom_matmul(pool, &w, x + t * cols, yone, 1);
            ck_assert_int_eq(memcmp(yone, yall + t * rows, (size_t)rows * 4),
                             0);
        }
    }
    free(wh);
    free(wf);
    free(x);
    free(yall);
    free(yone);
    loom_pool_free(pool);
}
END_TEST

/* What the log sink writes to stderr while fn(ctx) runs. */
static char *stderr_of(void (*fn)(void *ctx), void *ctx)
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    ck_assert_ptr_nonnull(tmp);
    int saved = dup(fileno(stderr));
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(dup2(fileno(tmp), fileno(stderr)), 0);
    fn(ctx);
    fflush(stderr);
    dup2(saved, fileno(stderr));
    close(saved);
    long n = ftell(tmp);
    ck_assert_int_ge(n, 0);
    char *text = calloc((size_t)n + 1, 1);
    rewind(tmp);
    ck_assert_uint_eq(fread(text, 1, (size_t)n, tmp), (size_t)n);
    fclose(tmp);
    return text;
}

struct log_case {
    const loom_host *core, *good, *qwen;
};

static void write_lines(void *ctx)
{
    struct log_case *c = ctx;
    c->core->log(c->core, LOOM_LOG_WARN, "core line %d", 1);
    c->good->log(c->good, LOOM_LOG_ERROR, "probe saw %s", "nothing");
    /* a plugin that already names itself is named once */
    c->qwen->log(c->qwen, LOOM_LOG_WARN, "qwen35: weights stay mapped");
    /* below the threshold (warning by default): not written */
    c->good->log(c->good, LOOM_LOG_INFO, "quiet");
}

START_TEST(plugin_log_lines_carry_the_plugin_name)
{
    loom_pool *pool = NULL;
    loom_err err;
    ck_assert_int_eq(loom_pool_new(3, &pool, &err), LOOM_OK);
    loom_host_state hs;
    loom_host_init(&hs, pool);
    const char *dirs[1] = {LOOM_TEST_PLUGIN_DIR};
    loom_registry *reg = NULL;
    ck_assert_int_eq(loom_registry_load(dirs, 1, &hs, &reg, &err), LOOM_OK);
    const loom_plugin_ref *good = NULL, *qwen = NULL;
    for (int i = 0; i < loom_registry_count(reg); i++) {
        const loom_plugin_ref *r = loom_registry_at(reg, i);
        if (!strcmp(r->plugin->name, "tp-good"))
            good = r;
        if (!strcmp(r->plugin->name, "qwen35"))
            qwen = r;
    }
    ck_assert_ptr_nonnull(good);
    ck_assert_ptr_nonnull(qwen);
    /* each plugin has a table of its own, not the core's */
    ck_assert_ptr_ne(good->host, &hs.host);
    ck_assert_ptr_ne(good->host, qwen->host);

    struct log_case c = {&hs.host, good->host, qwen->host};
    char *text = stderr_of(write_lines, &c);
    ck_assert_str_eq(text, "loom: warning: core line 1\n"
                           "tp-good: error: probe saw nothing\n"
                           "qwen35: warning: weights stay mapped\n");
    free(text);

    /* the lent table shares the core's pool and accounting */
    ck_assert_int_eq(good->host->n_threads(good->host), 3);
    ck_assert_int_eq(good->host->account(good->host, LOOM_MEM_HOST,
                                         LOOM_MEM_SCRATCH, 4096, NULL),
                     LOOM_OK);
    ck_assert_int_eq(qwen->host->account(qwen->host, LOOM_MEM_HOST,
                                         LOOM_MEM_SCRATCH, -1024, NULL),
                     LOOM_OK);
    ck_assert_int_eq(loom_host_accounted(&hs, LOOM_MEM_HOST, -1), 3072);

    /* and the core's device table: none on the CPU, the engine's once set
     * (a stand-in struct here: only its address is compared) */
    ck_assert_ptr_null(good->host->cuda(good->host));
    static const int device_table = 0;
    hs.cuda = (const struct loom_cuda *)&device_table;
    ck_assert_ptr_eq(good->host->cuda(good->host), hs.cuda);
    ck_assert_ptr_eq(qwen->host->cuda(qwen->host), hs.cuda);
    hs.cuda = NULL;
    loom_registry_free(reg);
    loom_pool_free(pool);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("host");
    TCase *tc = tcase_create("host");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, pool_covers_each_index_once);
    tcase_add_test(tc, pool_nested_calls_run_inline);
    tcase_add_test(tc, platform_files);
    tcase_add_test(tc, json_accessors);
    tcase_add_test(tc, matmul_matches_reference);
    tcase_add_test(tc, matmul_rows_independent_of_token_count);
    tcase_add_test(tc, plugin_log_lines_carry_the_plugin_name);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
