/* Chat-template features against Python's jinja2 in transformers' chat
 * environment (tokenizer_refs/jinja_refs.json, made by
 * tools/make_jinja_refs.py): filters, loop.cycle, {% filter %} blocks,
 * tojson's arguments, escaping and case on non-ASCII text; and
 * strftime_now against the C library's clock. */
#define _POSIX_C_SOURCE 200809L /* localtime_r: test-only OS use */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <loom/chat_template.h>

#include "testutil.h"

static json_t *refs(void)
{
    json_error_t je;
    json_t *r =
        json_load_file(fixture("tokenizer_refs/jinja_refs.json"), 0, &je);
    ck_assert_msg(r != NULL, "jinja_refs.json: %s", je.text);
    return r;
}

START_TEST(jinja2_references)
{
    json_t *r = refs();
    json_t *msgs = json_object_get(r, "messages");
    size_t i, n_ok = 0, n_err = 0;
    json_t *c;
    json_array_foreach(json_object_get(r, "cases"), i, c)
    {
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *src = json_string_value(json_object_get(c, "template"));
        json_t *want = json_object_get(c, "output");
        char *out = NULL;
        loom_err err = {{0}};
        loom_status st = loom_chat_render(
            src, msgs, 0, json_object_get(c, "extra"), &out, &err);
        if (!want) {
            ck_assert_msg(st != LOOM_OK,
                          "%s: jinja2 refuses (%s), loom gave "
                          "'%s'",
                          name,
                          json_string_value(json_object_get(c, "jinja2_error")),
                          out ? out : "");
            n_err++;
            continue;
        }
        ck_assert_msg(st == LOOM_OK, "%s: %s", name, err.msg);
        ck_assert_msg(strcmp(out, json_string_value(want)) == 0,
                      "%s: %s\n--- got\n%s\n--- jinja2\n%s", name, src, out,
                      json_string_value(want));
        free(out);
        n_ok++;
    }
    ck_assert_uint_ge(n_ok, 60);
    ck_assert_uint_ge(n_err, 1);
    json_decref(r);
}
END_TEST

/* Llama 3's use: strftime_now("%d %b %Y"), the local date. */
START_TEST(strftime_now)
{
    json_t *msgs = json_array();
    for (int attempt = 0; attempt < 2; attempt++) {
        char want[64];
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        strftime(want, sizeof want, "Today Date: %d %b %Y|%H", &tm);
        char *out = NULL;
        loom_err err;
        ck_assert_msg(
            loom_chat_render("Today Date: {{ strftime_now('%d %b %Y|%H') }}",
                             msgs, 0, NULL, &out, &err) == LOOM_OK,
            "%s", err.msg);
        int same = strcmp(out, want) == 0;
        free(out);
        if (same)
            break;
        /* the hour turned between the two clocks: once more */
        ck_assert_msg(attempt == 0, "strftime_now differs from strftime");
    }
    char *out = NULL;
    loom_err err;
    ck_assert_int_ne(
        loom_chat_render("{{ strftime_now() }}", msgs, 0, NULL, &out, &err),
        LOOM_OK);
    json_decref(msgs);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("chat_jinja");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, jinja2_references);
    tcase_add_test(tc, strftime_now);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
