/* Plugin discovery (good and broken plugins) and selection of a family or
 * drafter from config.json. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/checkpoint.h>
#include <loom/engine.h>
#include <loom/host.h>
#include <loom/log.h>
#include <loom/platform.h>
#include <loom/registry.h>

#include "testutil.h"

static loom_host_state hs;

static loom_registry *load_with(const char *dir)
{
    loom_registry *reg = NULL;
    loom_err err;
    const char *dirs[1] = {dir};
    loom_status rc = loom_registry_load(dirs, dir ? 1 : 0, &hs, &reg, &err);
    ck_assert_msg(rc == LOOM_OK, "%s", err.msg);
    return reg;
}

static const loom_refusal *refusal_for(const loom_registry *reg,
                                       const char *file)
{
    for (int i = 0; i < loom_registry_refused_count(reg); i++) {
        const loom_refusal *r = loom_registry_refused_at(reg, i);
        if (strstr(r->path, file))
            return r;
    }
    return NULL;
}

static const loom_plugin_ref *plugin_named(const loom_registry *reg,
                                           const char *name)
{
    for (int i = 0; i < loom_registry_count(reg); i++)
        if (!strcmp(loom_registry_at(reg, i)->plugin->name, name))
            return loom_registry_at(reg, i);
    return NULL;
}

START_TEST(good_plugin_loads_bad_ones_are_refused)
{
    loom_registry *reg = load_with(LOOM_TEST_PLUGIN_DIR);
    const loom_plugin_ref *good = plugin_named(reg, "tp-good");
    ck_assert_ptr_nonnull(good);
    ck_assert_str_eq(good->plugin->version, "1.2.3");
    ck_assert_ptr_nonnull(strstr(good->path, "libtp_good"));

    const loom_refusal *r = refusal_for(reg, "libtp_noentry");
    ck_assert_ptr_nonnull(r);
    ck_assert_ptr_nonnull(strstr(r->reason, "no entry symbol"));

    r = refusal_for(reg, "libtp_badabi");
    ck_assert_ptr_nonnull(r);
    char want[128];
    snprintf(want, sizeof want, "incompatible ABI %d.0", LOOM_ABI_MAJOR + 1);
    ck_assert_ptr_nonnull(strstr(r->reason, want));
    /* one line */
    ck_assert_ptr_null(strchr(r->reason, '\n'));

    r = refusal_for(reg, "libtp_smallstruct");
    ck_assert_ptr_nonnull(r);
    ck_assert_ptr_nonnull(strstr(r->reason, "struct_size 16"));
    /* the plugin and both sizes, on one line */
    snprintf(want, sizeof want,
             "tp-small: descriptor struct_size 16 is "
             "smaller than ABI %d.0's %zu",
             LOOM_ABI_MAJOR,
             offsetof(loom_plugin, get_interface) + sizeof(void *));
    ck_assert_msg(strstr(r->reason, want), "%s", r->reason);
    ck_assert_ptr_null(strchr(r->reason, '\n'));

    r = refusal_for(reg, "libtp_missinglib");
    ck_assert_ptr_nonnull(r);
    /* the loader's own words name the missing library */
    ck_assert_ptr_nonnull(strstr(r->reason, "libtp_dep"));

    ck_assert_ptr_null(plugin_named(reg, "tp-badabi"));
    ck_assert_ptr_null(plugin_named(reg, "tp-small"));
    ck_assert_ptr_null(plugin_named(reg, "tp-missinglib"));
    loom_registry_free(reg);
}
END_TEST

/* cp src dst, without a shell (the suite runs on Windows too) */
static void copy_file(const char *src, const char *dst)
{
    loom_err err;
    char *data = NULL;
    size_t n = 0;
    ck_assert_msg(loom_read_file(src, &data, &n, &err) == LOOM_OK, "%s",
                  err.msg);
    FILE *f = fopen(dst, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", dst);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    free(data);
}

START_TEST(search_order_and_duplicates)
{
    /* LOOM_PLUGIN_PATH is searched after --plugin-path; the same plugin
     * found twice keeps the first and refuses the second. */
    const char *tmp = temp_dir();
    char src[1024], dst[1024];
    snprintf(src, sizeof src, "%s/libtp_good%s", LOOM_TEST_PLUGIN_DIR,
             loom_dl_suffix());
    snprintf(dst, sizeof dst, "%s/libtp_good_copy%s", tmp, loom_dl_suffix());
    copy_file(src, dst);

    setenv("LOOM_PLUGIN_PATH", tmp, 1);
    loom_registry *reg = load_with(LOOM_TEST_PLUGIN_DIR);
    unsetenv("LOOM_PLUGIN_PATH");
    ck_assert_str_eq(loom_registry_dir_at(reg, 0), LOOM_TEST_PLUGIN_DIR);
    ck_assert_str_eq(loom_registry_dir_at(reg, 1), tmp);
    const loom_plugin_ref *good = plugin_named(reg, "tp-good");
    ck_assert_ptr_nonnull(good);
    ck_assert_ptr_nonnull(strstr(good->path, LOOM_TEST_PLUGIN_DIR));
    const loom_refusal *r = refusal_for(reg, "libtp_good_copy");
    ck_assert_ptr_nonnull(r);
    ck_assert_ptr_nonnull(strstr(r->reason, "already loaded"));
    loom_registry_free(reg);
}
END_TEST

START_TEST(plugins_beside_the_executable_are_found)
{
    /* The test binaries sit in the build root, beside plugins/. */
    loom_registry *reg = load_with(NULL);
    ck_assert_ptr_nonnull(plugin_named(reg, "dflash"));
    ck_assert_ptr_nonnull(plugin_named(reg, "qwen35"));
    ck_assert_ptr_nonnull(plugin_named(reg, "nemotron"));
    loom_registry_free(reg);
}
END_TEST

static const char *select_for(loom_registry *reg, const char *model,
                              loom_plugin_kind kind, const char *force)
{
    loom_checkpoint *ckpt = NULL;
    loom_err err;
    loom_status rc = loom_checkpoint_open(model, &ckpt, &err);
    ck_assert_msg(rc == LOOM_OK, "%s", err.msg);
    const loom_plugin_ref *ref = NULL;
    rc = loom_registry_select(reg, ckpt, kind, force, &ref, &err);
    ck_assert_msg(rc == LOOM_OK, "%s", err.msg);
    loom_checkpoint_close(ckpt);
    return ref->plugin->name;
}

START_TEST(fixtures_pick_their_families)
{
    loom_registry *reg = load_with(LOOM_TEST_PLUGIN_DIR);
    ck_assert_str_eq(select_for(reg, fixture("models/qwen35-tiny"),
                                LOOM_PLUGIN_FAMILY, NULL),
                     "qwen35");
    ck_assert_str_eq(select_for(reg, fixture("models/qwen35-vl-tiny"),
                                LOOM_PLUGIN_FAMILY, NULL),
                     "qwen35");
    ck_assert_str_eq(select_for(reg, fixture("models/nemotron-h-tiny"),
                                LOOM_PLUGIN_FAMILY, NULL),
                     "nemotron");
    ck_assert_str_eq(select_for(reg, fixture("drafters/dflash-tiny"),
                                LOOM_PLUGIN_DRAFTER, NULL),
                     "dflash");
    /* --family overrides the probes */
    ck_assert_str_eq(select_for(reg, fixture("models/qwen35-tiny"),
                                LOOM_PLUGIN_FAMILY, "tp-good"),
                     "tp-good");
    loom_registry_free(reg);
}
END_TEST

/* A checkpoint directory holding only config.json with `text`. */
static const char *config_dir(const char *text)
{
    const char *dir = temp_dir();
    write_text_in(dir, "config.json", text);
    return dir;
}

static loom_plugin_kind kind_for(loom_registry *reg, const char *dir)
{
    loom_checkpoint *ckpt = NULL;
    loom_err err;
    loom_status rc = loom_checkpoint_open(dir, &ckpt, &err);
    ck_assert_msg(rc == LOOM_OK, "%s", err.msg);
    loom_plugin_kind kind = loom_registry_kind_of(reg, ckpt);
    loom_checkpoint_close(ckpt);
    return kind;
}

/* Whether a checkpoint is a drafter is the plugins' call (their probes),
 * not the core's: the dflash plugin claims its checkpoints. */
START_TEST(drafter_checkpoints_are_recognised)
{
    loom_registry *reg = load_with(LOOM_TEST_PLUGIN_DIR);
    ck_assert_int_eq(kind_for(reg, fixture("drafters/dflash-tiny")),
                     LOOM_PLUGIN_DRAFTER);
    ck_assert_int_eq(kind_for(reg, fixture("models/qwen35-tiny")),
                     LOOM_PLUGIN_FAMILY);
    /* dflash_config marks a drafter even under a family's architecture */
    const char *dir =
        config_dir("{\"architectures\": [\"Qwen3_5ForCausalLM\"], "
                   "\"dflash_config\": {\"mask_token_id\": 1}}");
    ck_assert_int_eq(kind_for(reg, dir), LOOM_PLUGIN_DRAFTER);
    /* nobody's checkpoint */
    dir = config_dir("{\"architectures\": [\"FooForCausalLM\"]}");
    ck_assert_int_eq(kind_for(reg, dir), 0);
    loom_registry_free(reg);
}
END_TEST

/* The engine refuses to open a drafter as a model, by the drafter's probe. */
START_TEST(engine_refuses_a_drafter_checkpoint)
{
    loom_engine_params p = {0};
    p.model = fixture("drafters/dflash-tiny");
    p.n_threads = 1;
    loom_engine *e = NULL;
    loom_err err;
    ck_assert_int_eq(loom_engine_open(&p, &e, &err), LOOM_ERR_INVALID);
    ck_assert_ptr_null(e);
    ck_assert_ptr_nonnull(strstr(err.msg, "is a drafter checkpoint"));
    ck_assert_ptr_nonnull(strstr(err.msg, "dflash-tiny"));
}
END_TEST

static loom_status open_and_select(loom_registry *reg, const char *dir,
                                   const char *force, loom_err *err)
{
    loom_checkpoint *ckpt = NULL;
    loom_status rc = loom_checkpoint_open(dir, &ckpt, err);
    if (rc != LOOM_OK)
        return rc;
    const loom_plugin_ref *ref = NULL;
    rc = loom_registry_select(reg, ckpt, LOOM_PLUGIN_FAMILY, force, &ref, err);
    loom_checkpoint_close(ckpt);
    return rc;
}

START_TEST(unknown_architecture_lists_what_was_seen)
{
    loom_registry *reg = load_with(LOOM_TEST_PLUGIN_DIR);
    loom_err err;
    const char *dir = config_dir(
        "{\"architectures\": [\"FooForCausalLM\"], \"model_type\": \"foo\"}");
    ck_assert_int_eq(open_and_select(reg, dir, NULL, &err), LOOM_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "FooForCausalLM"));
    ck_assert_ptr_nonnull(strstr(err.msg, "model_type foo"));
    ck_assert_ptr_nonnull(strstr(err.msg, "tp-good"));
    ck_assert_ptr_nonnull(strstr(err.msg, "qwen35"));
    /* a forced name that no plugin has */
    ck_assert_int_eq(open_and_select(reg, dir, "nosuch", &err),
                     LOOM_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "nosuch"));
    loom_registry_free(reg);
}
END_TEST

START_TEST(missing_config_is_named)
{
    loom_checkpoint *ckpt = NULL;
    loom_err err;
    const char *dir = temp_dir();
    ck_assert_int_eq(loom_checkpoint_open(dir, &ckpt, &err),
                     LOOM_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "config.json"));
    ck_assert_ptr_nonnull(strstr(err.msg, dir));
}
END_TEST

START_TEST(malformed_config_names_line_and_column)
{
    loom_checkpoint *ckpt = NULL;
    loom_err err;
    const char *dir = config_dir("{\n  \"a\": 1,\n  oops\n}\n");
    ck_assert_int_eq(loom_checkpoint_open(dir, &ckpt, &err), LOOM_ERR_FORMAT);
    char want[1100];
    snprintf(want, sizeof want, "%s/config.json:3:", dir);
    ck_assert_msg(strstr(err.msg, want) != NULL, "%s", err.msg);
}
END_TEST

START_TEST(array_config_is_refused)
{
    loom_checkpoint *ckpt = NULL;
    loom_err err;
    const char *dir =
        config_dir("[{\"architectures\": [\"Qwen3_5ForCausalLM\"]}]");
    ck_assert_int_eq(loom_checkpoint_open(dir, &ckpt, &err), LOOM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "array"));
    ck_assert_ptr_nonnull(strstr(err.msg, "config.json"));
}
END_TEST

int main(void)
{
    loom_host_init(&hs, NULL);
    loom_log_set_level(LOOM_LOG_ERROR);
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("discovery");
    tcase_add_test(tc, good_plugin_loads_bad_ones_are_refused);
    tcase_add_test(tc, search_order_and_duplicates);
    tcase_add_test(tc, plugins_beside_the_executable_are_found);
    suite_add_tcase(s, tc);
    tc = tcase_create("selection");
    tcase_add_test(tc, fixtures_pick_their_families);
    tcase_add_test(tc, drafter_checkpoints_are_recognised);
    tcase_add_test(tc, engine_refuses_a_drafter_checkpoint);
    tcase_add_test(tc, unknown_architecture_lists_what_was_seen);
    tcase_add_test(tc, missing_config_is_named);
    tcase_add_test(tc, malformed_config_names_line_and_column);
    tcase_add_test(tc, array_config_is_refused);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
