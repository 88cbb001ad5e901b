/* The SDK's config.json readers (loom/config.h) over a checkpoint written in
 * a temporary directory: values, defaults, every refusal's exact text, the
 * eos-id merge, the probe score and the id-list report. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <loom/checkpoint.h>
#include <loom/config.h>
#include <loom/host.h>

#include "testutil.h"

static const char *const config_text =
    "{\"model_type\": \"foo\","
    " \"architectures\": [\"BarForCausalLM\", \"FooForCausalLM\"],"
    " \"n\": 64, \"zero\": 0, \"neg\": -3, \"big\": 3000000000,"
    " \"whole\": 64.0, \"frac\": 2.5, \"s\": \"7\", \"t\": true,"
    " \"f\": false, \"nul\": null, \"list\": [1], \"obj\": {},"
    " \"eps\": 1e-6, \"ieps\": 2,"
    " \"eos_token_id\": [2, 7, 2, -1, 600],"
    " \"text_config\": {\"model_type\": \"foo_text\", \"eos_token_id\": 9,"
    " \"hidden_size\": 0}}";

typedef struct fixture_ckpt {
    loom_host_state hs;
    loom_checkpoint *ckpt;
    loom_err err;
    loom_cfg c; /* over the root config, "config.json", no prefix */
} fixture_ckpt;

/* Opens a checkpoint holding config.json (and generation_config.json when
 * `gen` is not NULL). */
static void open_cfg(fixture_ckpt *f, const char *config, const char *gen)
{
    const char *dir = temp_dir();
    ck_assert_ptr_nonnull(dir);
    write_text_in(dir, "config.json", config);
    if (gen)
        write_text_in(dir, "generation_config.json", gen);
    memset(f, 0, sizeof *f);
    loom_host_init(&f->hs, NULL);
    ck_assert_msg(loom_checkpoint_open(dir, &f->ckpt, &f->err) == LOOM_OK, "%s",
                  f->err.msg);
    const loom_host *h = &f->hs.host;
    f->c = (loom_cfg){h, h->config(f->ckpt), "config.json", "", 0, &f->err};
}

/* loom_cfg_int calls over config_text that are refused, and the message. */
static const struct int_refusal {
    const char *key;
    int required;
    int64_t def, min, max;
    const char *msg;
} int_refusals[] = {
    {"absent", 1, 0, 1, INT64_MAX,
     "config.json: absent is required but missing"},
    {"nul", 1, 0, 1, INT64_MAX, "config.json: nul is required but null"},
    /* the default is checked like a written value */
    {"absent", 0, 0, 1, INT64_MAX, "config.json: absent = 0 must be positive"},
    {"zero", 1, 0, 1, INT64_MAX, "config.json: zero = 0 must be positive"},
    {"neg", 1, 0, 0, INT64_MAX, "config.json: neg = -3 must be non-negative"},
    {"n", 1, 0, 100, INT64_MAX, "config.json: n = 64 must be >= 100"},
    {"big", 1, 0, 1, INT32_MAX,
     "config.json: big = 3000000000 exceeds 2147483647"},
    {"s", 1, 0, 1, INT64_MAX,
     "config.json: s must be an integer, not a string"},
    {"t", 1, 0, 1, INT64_MAX,
     "config.json: t must be an integer, not a boolean"},
    {"list", 1, 0, 1, INT64_MAX,
     "config.json: list must be an integer, not an array"},
    {"whole", 1, 0, 1, INT64_MAX,
     "config.json: whole must be an integer, not a real"},
};

/* Expects loom_cfg_int(key, ...) to refuse with exactly `msg`. */
static void int_refused(fixture_ckpt *f, const struct int_refusal *r)
{
    int64_t v = 0;
    memset(&f->err, 0, sizeof f->err);
    ck_assert_int_eq(
        loom_cfg_int(&f->c, r->key, r->required, r->def, r->min, r->max, &v),
        LOOM_ERR_FORMAT);
    ck_assert_str_eq(f->err.msg, r->msg);
}

START_TEST(int_fields)
{
    fixture_ckpt f;
    open_cfg(&f, config_text, NULL);
    int64_t v = 0;
    ck_assert_int_eq(loom_cfg_int(&f.c, "n", 1, 0, 1, INT64_MAX, &v), LOOM_OK);
    ck_assert_int_eq(v, 64);
    ck_assert_int_eq(loom_cfg_int(&f.c, "absent", 0, 5, 1, 10, &v), LOOM_OK);
    ck_assert_int_eq(v, 5);
    ck_assert_int_eq(loom_cfg_int(&f.c, "nul", 0, -1, INT64_MIN, 0, &v),
                     LOOM_OK);
    ck_assert_int_eq(v, -1);

    for (size_t i = 0; i < sizeof int_refusals / sizeof *int_refusals; i++)
        int_refused(&f, &int_refusals[i]);

    /* integral reals accepted where asked for; fractions still refused */
    f.c.integral_reals = 1;
    ck_assert_int_eq(loom_cfg_int(&f.c, "whole", 1, 0, 1, INT64_MAX, &v),
                     LOOM_OK);
    ck_assert_int_eq(v, 64);
    int_refused(&f, &(struct int_refusal){"frac", 1, 0, 1, INT64_MAX,
                                          "config.json: frac = 2.5 must be "
                                          "an integer"});

    /* the file and prefix name the field */
    const loom_host *h = &f.hs.host;
    f.c.obj = h->text_config(f.ckpt);
    f.c.file = "/m/config.json";
    f.c.prefix = "text_config.";
    struct int_refusal r = {"hidden_size",
                            1,
                            0,
                            1,
                            INT64_MAX,
                            "/m/config.json: text_config.hidden_size = 0 "
                            "must be positive"};
    int_refused(&f, &r);
    /* NULL file and prefix read as "config.json" and "" */
    f.c.file = NULL;
    f.c.prefix = NULL;
    r.msg = "config.json: hidden_size = 0 must be positive";
    int_refused(&f, &r);
    loom_checkpoint_close(f.ckpt);
}
END_TEST

START_TEST(real_and_bool_fields)
{
    fixture_ckpt f;
    open_cfg(&f, config_text, NULL);
    double d = 0;
    ck_assert_int_eq(loom_cfg_real(&f.c, "eps", 0.5, &d), LOOM_OK);
    ck_assert(d == 1e-6);
    ck_assert_int_eq(loom_cfg_real(&f.c, "ieps", 0.5, &d), LOOM_OK);
    ck_assert(d == 2.0);
    ck_assert_int_eq(loom_cfg_real(&f.c, "neg", 0.5, &d), LOOM_OK);
    ck_assert(d == -3.0);
    ck_assert_int_eq(loom_cfg_real(&f.c, "absent", 0.5, &d), LOOM_OK);
    ck_assert(d == 0.5);
    ck_assert_int_eq(loom_cfg_real(&f.c, "s", 0.5, &d), LOOM_ERR_FORMAT);
    ck_assert_str_eq(f.err.msg, "config.json: s must be a number, not a "
                                "string");

    ck_assert_int_eq(loom_cfg_pos_real(&f.c, "eps", 0.5, &d), LOOM_OK);
    ck_assert(d == 1e-6);
    ck_assert_int_eq(loom_cfg_pos_real(&f.c, "nul", -1.0, &d), LOOM_OK);
    ck_assert(d == -1.0); /* the default is not checked */
    ck_assert_int_eq(loom_cfg_pos_real(&f.c, "zero", 0.5, &d), LOOM_ERR_FORMAT);
    ck_assert_str_eq(f.err.msg, "config.json: zero = 0 must be positive");
    ck_assert_int_eq(loom_cfg_pos_real(&f.c, "neg", 0.5, &d), LOOM_ERR_FORMAT);
    ck_assert_str_eq(f.err.msg, "config.json: neg = -3 must be positive");
    ck_assert_int_eq(loom_cfg_pos_real(&f.c, "t", 0.5, &d), LOOM_ERR_FORMAT);
    ck_assert_str_eq(f.err.msg, "config.json: t must be a number, not a "
                                "boolean");

    int b = -1;
    ck_assert_int_eq(loom_cfg_bool(&f.c, "t", 0, &b), LOOM_OK);
    ck_assert_int_eq(b, 1);
    ck_assert_int_eq(loom_cfg_bool(&f.c, "f", 1, &b), LOOM_OK);
    ck_assert_int_eq(b, 0);
    ck_assert_int_eq(loom_cfg_bool(&f.c, "absent", 1, &b), LOOM_OK);
    ck_assert_int_eq(b, 1);
    ck_assert_int_eq(loom_cfg_bool(&f.c, "n", 0, &b), LOOM_ERR_FORMAT);
    ck_assert_str_eq(f.err.msg, "config.json: n must be a boolean, not an "
                                "integer");
    ck_assert_int_eq(loom_cfg_bool(&f.c, "obj", 0, &b), LOOM_ERR_FORMAT);
    ck_assert_str_eq(f.err.msg, "config.json: obj must be a boolean, not an "
                                "object");

    ck_assert_int_eq(loom_cfg_has(&f.c, "n"), 1);
    ck_assert_int_eq(loom_cfg_has(&f.c, "f"), 1);
    ck_assert_int_eq(loom_cfg_has(&f.c, "nul"), 0);
    ck_assert_int_eq(loom_cfg_has(&f.c, "absent"), 0);
    ck_assert_str_eq(loom_cfg_type_name(LOOM_JSON_MISSING), "missing");
    ck_assert_str_eq(loom_cfg_type_name(LOOM_JSON_NULL), "null");
    ck_assert_str_eq(loom_cfg_type_name(LOOM_JSON_REAL), "a real");
    loom_checkpoint_close(f.ckpt);
}
END_TEST

START_TEST(eos_ids_merged)
{
    fixture_ckpt f;
    open_cfg(&f, config_text, "{\"eos_token_id\": [11, 9, 2]}");
    const loom_host *h = &f.hs.host;
    int32_t eos[LOOM_MAX_EOS], n = -1;
    /* text config, root, generation config; repeats dropped */
    loom_cfg_eos_ids(h, f.ckpt, 0, eos, &n);
    const int32_t all[] = {9, 2, 7, -1, 600, 11};
    ck_assert_int_eq(n, 6);
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(eos[i], all[i]);
    /* with a vocabulary, ids outside it are left out */
    loom_cfg_eos_ids(h, f.ckpt, 512, eos, &n);
    const int32_t in_vocab[] = {9, 2, 7, 11};
    ck_assert_int_eq(n, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(eos[i], in_vocab[i]);
    loom_checkpoint_close(f.ckpt);

    /* a flat config; non-integers passed over; at most LOOM_MAX_EOS kept */
    open_cfg(&f, "{\"eos_token_id\": [1, \"x\", 2, 3, 4, 5, 6, 7, 8, 9, 10]}",
             "{\"eos_token_id\": \"x\"}");
    loom_cfg_eos_ids(&f.hs.host, f.ckpt, 0, eos, &n);
    ck_assert_int_eq(n, LOOM_MAX_EOS);
    for (int i = 0; i < LOOM_MAX_EOS; i++)
        ck_assert_int_eq(eos[i], i + 1);
    loom_checkpoint_close(f.ckpt);
}
END_TEST

/* issue 18: eos ids out of the vocabulary (-1, 1e6, 2^40, which truncated
 * to 0) and ids that are not integers are refused, naming the field. */
START_TEST(eos_ids_checked)
{
    static const struct {
        const char *config, *gen, *msg;
    } bad[] = {
        {"{\"eos_token_id\": -1}", NULL,
         "config.json: eos_token_id = -1 is outside the vocabulary [0, 512)"},
        {"{\"eos_token_id\": [1, 1099511627776]}", NULL,
         "config.json: eos_token_id[1] = 1099511627776 is outside the "
         "vocabulary [0, 512)"},
        {"{\"eos_token_id\": 1e6}", NULL,
         "config.json: eos_token_id must be a token id, not a real"},
        {"{\"text_config\": {\"eos_token_id\": [\"x\"]}}", NULL,
         "config.json: text_config.eos_token_id[0] must be a token id, not a "
         "string"},
        {"{\"eos_token_id\": 3}", "{\"eos_token_id\": 512}",
         "generation_config.json: eos_token_id = 512 is outside the "
         "vocabulary [0, 512)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fixture_ckpt f;
        open_cfg(&f, bad[i].config, bad[i].gen);
        ck_assert_int_eq(
            loom_cfg_eos_ids_check(&f.hs.host, f.ckpt, 512, &f.err),
            LOOM_ERR_FORMAT);
        ck_assert_str_eq(f.err.msg, bad[i].msg);
        /* the unchecked merge never truncates 2^40 into id 0 */
        int32_t eos[LOOM_MAX_EOS], n = -1;
        loom_cfg_eos_ids(&f.hs.host, f.ckpt, 0, eos, &n);
        for (int32_t k = 0; k < n; k++)
            ck_assert_int_ne(eos[k], 0);
        loom_checkpoint_close(f.ckpt);
    }
    fixture_ckpt f;
    open_cfg(&f, "{\"eos_token_id\": [3, 511], \"text_config\": {}}",
             "{\"eos_token_id\": null}");
    ck_assert_int_eq(loom_cfg_eos_ids_check(&f.hs.host, f.ckpt, 512, &f.err),
                     LOOM_OK);
    loom_checkpoint_close(f.ckpt);
}
END_TEST

/* issue 18: an integral real past int64 is refused by value, not cast
 * (undefined) and printed as -9223372036854775808. */
START_TEST(huge_integral_real_refused)
{
    fixture_ckpt f;
    open_cfg(&f, "{\"n\": 1e19, \"m\": -1e300}", NULL);
    f.c.integral_reals = 1;
    int64_t v = 0;
    ck_assert_int_eq(loom_cfg_int(&f.c, "n", 1, 0, 1, INT64_MAX, &v),
                     LOOM_ERR_FORMAT);
    ck_assert_str_eq(f.err.msg, "config.json: n = 1e+19 is out of range");
    ck_assert_int_eq(loom_cfg_int(&f.c, "m", 1, 0, INT64_MIN, INT64_MAX, &v),
                     LOOM_ERR_FORMAT);
    ck_assert_ptr_null(strstr(f.err.msg, "9223372036854775808"));
    loom_checkpoint_close(f.ckpt);
}
END_TEST

START_TEST(probe_scores)
{
    fixture_ckpt f;
    open_cfg(&f, config_text, NULL);
    const loom_host *h = &f.hs.host;
    const char *archs[] = {"FooForCausalLM"};
    const char *other[] = {"BazForCausalLM"};
    const char *root_type[] = {"qux", "foo"};
    const char *text_type[] = {"foo_text"};
    ck_assert_int_eq(loom_cfg_probe(h, f.ckpt, archs, 1, NULL, 0), 100);
    ck_assert_int_eq(loom_cfg_probe(h, f.ckpt, other, 1, root_type, 2), 50);
    ck_assert_int_eq(loom_cfg_probe(h, f.ckpt, NULL, 0, text_type, 1), 50);
    ck_assert_int_eq(loom_cfg_probe(h, f.ckpt, other, 1, other, 1), 0);
    ck_assert_int_eq(loom_cfg_probe(h, f.ckpt, NULL, 0, NULL, 0), 0);
    loom_checkpoint_close(f.ckpt);
}
END_TEST

static void LOOM_ABI keep_str(void *ctx, const char *key, const char *value)
{
    (void)key;
    snprintf(ctx, 2048, "%s", value);
}

START_TEST(report_ids)
{
    char got[2048];
    loom_fields out = {sizeof out, got, NULL, NULL, keep_str};
    const int32_t ids[] = {1, 7, 9};
    loom_cfg_report_ids(&out, "eos", ids, 3);
    ck_assert_str_eq(got, "1,7,9");
    loom_cfg_report_ids(&out, "eos", ids, 0);
    ck_assert_str_eq(got, "");
    /* 100 ids of 11 characters: 85 fit in 1023 (11 + 84 x 12 = 1019) */
    int32_t wide[100];
    for (int i = 0; i < 100; i++)
        wide[i] = INT32_MIN;
    loom_cfg_report_ids(&out, "ids", wide, 100);
    ck_assert_uint_eq(strlen(got), 1019);
    ck_assert_int_eq(got[1018], '8');
    ck_assert_int_eq(got[1007], ',');
}
END_TEST

int main(void)
{
    const TTest *tests[] = {
        int_fields,      real_and_bool_fields,       eos_ids_merged,
        eos_ids_checked, huge_integral_real_refused, probe_scores,
        report_ids};
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    for (size_t i = 0; i < sizeof tests / sizeof *tests; i++)
        tcase_add_test(tc, tests[i]);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
