/* Model ids: directories as they are, `org/name` through a fake Hugging Face
 * hub cache laid out in a temp dir ($HF_HUB_CACHE, $HF_HOME/hub, then
 * ~/.cache/huggingface/hub), and errors that say where they looked. */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdir: test-only OS use */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <loom/checkpoint.h>

#include "testutil.h"

/* mkdir -p */
static void mkdirs(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0755);
            *p = '/';
        }
    }
    mkdir(buf, 0755);
    struct stat st;
    ck_assert_msg(stat(buf, &st) == 0 && S_ISDIR(st.st_mode), "mkdir %s", buf);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* cache/models--<repo>/refs/main = ref, and snapshots/<rev>/ (when rev). */
static void fake_repo(const char *cache, const char *repo, const char *ref,
                      const char *rev)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/models--%s/refs", cache, repo);
    mkdirs(p);
    snprintf(p, sizeof p, "%s/models--%s/refs/main", cache, repo);
    write_text(p, ref);
    if (rev) {
        snprintf(p, sizeof p, "%s/models--%s/snapshots/%s", cache, repo, rev);
        mkdirs(p);
    }
}

static void clear_env(void)
{
    unsetenv("HF_HUB_CACHE");
    unsetenv("HF_HOME");
}

static void expect_dir(const char *model, const char *want)
{
    char dir[1024];
    loom_err err;
    ck_assert_msg(loom_model_resolve(model, dir, sizeof dir, &err) == LOOM_OK,
                  "%s: %s", model, err.msg);
    ck_assert_str_eq(dir, want);
}

static void expect_fail(const char *model, loom_status code, const char *a,
                        const char *b)
{
    char dir[1024];
    loom_err err = {{0}};
    loom_status s = loom_model_resolve(model, dir, sizeof dir, &err);
    ck_assert_msg(s == code, "%s: status %d, want %d: %s", model, s, code,
                  err.msg);
    ck_assert_msg(!a || strstr(err.msg, a), "lacks '%s': %s", a, err.msg);
    ck_assert_msg(!b || strstr(err.msg, b), "lacks '%s': %s", b, err.msg);
}

START_TEST(test_directory)
{
    const char *d = temp_dir();
    expect_dir(d, d);
    expect_dir(fixture("models/qwen35-tiny"), fixture("models/qwen35-tiny"));
    /* a buffer too small for the path */
    char small[4];
    loom_err err;
    ck_assert_int_eq(loom_model_resolve(d, small, sizeof small, &err),
                     LOOM_ERR_RANGE);
    ck_assert_int_eq(loom_model_resolve("", small, sizeof small, &err),
                     LOOM_ERR_INVALID);
}
END_TEST

START_TEST(test_hf_hub_cache)
{
    clear_env();
    const char *root = temp_dir();
    char cache[512], want[1024];
    snprintf(cache, sizeof cache, "%s/hc", root);
    fake_repo(cache, "org--tiny-model_1.5", "0123abcd\n", "0123abcd");
    setenv("HF_HUB_CACHE", cache, 1);
    /* HF_HOME is set too but HF_HUB_CACHE comes first */
    char home[512];
    snprintf(home, sizeof home, "%s/hh", root);
    char hub[600];
    snprintf(hub, sizeof hub, "%s/hub", home);
    fake_repo(hub, "org--tiny-model_1.5", "ffff", "ffff");
    setenv("HF_HOME", home, 1);
    snprintf(want, sizeof want,
             "%s/models--org--tiny-model_1.5/snapshots/0123abcd", cache);
    expect_dir("org/tiny-model_1.5", want);
}
END_TEST

START_TEST(test_hf_home)
{
    clear_env();
    const char *root = temp_dir();
    char hub[600], want[1024];
    snprintf(hub, sizeof hub, "%s/hub", root);
    fake_repo(hub, "Org--Name", "deadbeef", "deadbeef");
    fake_repo(hub, "gpt2", "c0ffee\r\n", "c0ffee");
    setenv("HF_HOME", root, 1);
    setenv("HF_HUB_CACHE", "", 1); /* empty counts as unset */
    snprintf(want, sizeof want, "%s/models--Org--Name/snapshots/deadbeef", hub);
    expect_dir("Org/Name", want);
    /* a repo without an org */
    snprintf(want, sizeof want, "%s/models--gpt2/snapshots/c0ffee", hub);
    expect_dir("gpt2", want);
}
END_TEST

START_TEST(test_home_fallback)
{
    clear_env();
    const char *home = temp_dir();
    char hub[600], want[1024];
    snprintf(hub, sizeof hub, "%s/.cache/huggingface/hub", home);
    fake_repo(hub, "org--name", "abc", "abc");
    setenv("HOME", home, 1);
    snprintf(want, sizeof want, "%s/models--org--name/snapshots/abc", hub);
    expect_dir("org/name", want);
}
END_TEST

START_TEST(test_missing_id)
{
    clear_env();
    const char *root = temp_dir();
    setenv("HF_HUB_CACHE", root, 1);
    char refs[1024];
    snprintf(refs, sizeof refs, "%s/models--org--missing/refs/main", root);
    /* names the id, the directory it tried and the cache file it tried */
    expect_fail("org/missing", LOOM_ERR_NOT_FOUND, "./org/missing", refs);
    expect_fail("org/missing", LOOM_ERR_NOT_FOUND, "$HF_HUB_CACHE",
                "does not download");

    /* refs/main names a snapshot that is not there */
    fake_repo(root, "org--gone", "1234", NULL);
    char snap[1024];
    snprintf(snap, sizeof snap, "%s/models--org--gone/snapshots/1234", root);
    expect_fail("org/gone", LOOM_ERR_NOT_FOUND, snap, "refs/main");

    /* refs/main that would climb out of the cache */
    fake_repo(root, "org--evil", "../../x\n", NULL);
    expect_fail("org/evil", LOOM_ERR_FORMAT, "refs/main", "revision");
    fake_repo(root, "org--empty", "\n", NULL);
    expect_fail("org/empty", LOOM_ERR_FORMAT, "refs/main", "revision");
}
END_TEST

/* org/name@REV: a branch under refs/ (also with '/'), a snapshot hash
 * whole or by a unique prefix; a missing revision names the cache. */
START_TEST(test_revision)
{
    clear_env();
    const char *root = temp_dir();
    setenv("HF_HUB_CACHE", root, 1);
    fake_repo(root, "org--rev", "aaaa1111bbbb2222\n", "aaaa1111bbbb2222");
    char p[1024], want[1024];
    snprintf(p, sizeof p, "%s/models--org--rev/snapshots/cccc3333dddd4444",
             root);
    mkdirs(p);
    snprintf(p, sizeof p, "%s/models--org--rev/snapshots/cccc3333eeee5555",
             root);
    mkdirs(p);
    snprintf(p, sizeof p, "%s/models--org--rev/refs/dev", root);
    write_text(p, "cccc3333dddd4444");
    snprintf(p, sizeof p, "%s/models--org--rev/refs/pr", root);
    mkdirs(p);
    snprintf(p, sizeof p, "%s/models--org--rev/refs/pr/1", root);
    write_text(p, "cccc3333eeee5555\n");

    snprintf(want, sizeof want, "%s/models--org--rev/snapshots/%s", root,
             "aaaa1111bbbb2222");
    expect_dir("org/rev", want);
    expect_dir("org/rev@main", want);
    expect_dir("org/rev@aaaa111", want); /* a unique prefix */
    snprintf(want, sizeof want, "%s/models--org--rev/snapshots/%s", root,
             "cccc3333dddd4444");
    expect_dir("org/rev@dev", want);
    expect_dir("org/rev@cccc3333dddd4444", want);
    snprintf(want, sizeof want, "%s/models--org--rev/snapshots/%s", root,
             "cccc3333eeee5555");
    expect_dir("org/rev@pr/1", want);

    /* missing: the message names the revision, the cache and the snapshots */
    expect_fail("org/rev@nope", LOOM_ERR_NOT_FOUND, "revision nope", root);
    expect_fail("org/rev@nope", LOOM_ERR_NOT_FOUND, "refs/nope",
                "aaaa1111bbbb2222");
    expect_fail("org/rev@cccc3333", LOOM_ERR_NOT_FOUND,
                "more than one snapshot", NULL);
    expect_fail("org/rev@aaaa", LOOM_ERR_NOT_FOUND, "revision aaaa", NULL);
    /* names that would climb out of the repo */
    expect_fail("org/rev@../x", LOOM_ERR_NOT_FOUND, "org/name[@REV]", NULL);
    expect_fail("org/rev@", LOOM_ERR_NOT_FOUND, "org/name[@REV]", NULL);
    expect_fail("org/rev@a/../../b", LOOM_ERR_NOT_FOUND, "org/name[@REV]",
                NULL);
}
END_TEST

START_TEST(test_missing_everything)
{
    clear_env();
    unsetenv("HOME");
#ifdef _WIN32
    unsetenv("USERPROFILE"); /* the home directory's other source there */
#endif
    expect_fail("org/name", LOOM_ERR_NOT_FOUND, "org/name", "unset");
    /* with HOME back, the default cache is named */
    const char *home = temp_dir();
    setenv("HOME", home, 1);
    char hub[600];
    snprintf(hub, sizeof hub, "%s/.cache/huggingface/hub", home);
    expect_fail("org/name", LOOM_ERR_NOT_FOUND, hub, "home directory");
}
END_TEST

START_TEST(test_not_an_id)
{
    clear_env();
    setenv("HF_HUB_CACHE", temp_dir(), 1);
    /* paths that are not directories and cannot be repo ids */
    expect_fail("/no/such/dir/anywhere", LOOM_ERR_NOT_FOUND,
                "/no/such/dir/anywhere", "no such directory");
    expect_fail("a/b/c", LOOM_ERR_NOT_FOUND, "a/b/c", "no such directory");
    expect_fail("../org", LOOM_ERR_NOT_FOUND, "../org", "no such directory");
    expect_fail("org/.hidden", LOOM_ERR_NOT_FOUND, NULL, "no such directory");
    expect_fail("org/", LOOM_ERR_NOT_FOUND, NULL, "no such directory");
    expect_fail("org name/x", LOOM_ERR_NOT_FOUND, NULL, "no such directory");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("model_id");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_directory);
    tcase_add_test(tc, test_hf_hub_cache);
    tcase_add_test(tc, test_hf_home);
    tcase_add_test(tc, test_home_fallback);
    tcase_add_test(tc, test_missing_id);
    tcase_add_test(tc, test_revision);
    tcase_add_test(tc, test_missing_everything);
    tcase_add_test(tc, test_not_an_id);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
