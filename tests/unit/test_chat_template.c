/* Chat templates against Hugging Face apply_chat_template renderings
 * (tokenizer_refs/chat_refs.json, made by tools/make_tokenizer_refs.py),
 * Jinja semantics worked out by hand, and the error paths. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <loom/chat_template.h>
#include <loom/tokenizer.h>

#include "testutil.h"

static const char *const NAMES[] = {"qwen3", "qwen35-tiny", "qwen35-vl-tiny",
                                    "nemotron-h-tiny", "kjv-qwen35"};
static const char *const DIRS[] = {
    "tokenizers/qwen3", "models/qwen35-tiny", "models/qwen35-vl-tiny",
    "models/nemotron-h-tiny", "../../models/kjv-qwen35"};

START_TEST(hf_renderings)
{
    json_error_t je;
    json_t *refs =
        json_load_file(fixture("tokenizer_refs/chat_refs.json"), 0, &je);
    ck_assert_msg(refs != NULL, "chat_refs.json: %s", je.text);
    json_t *r = json_object_get(json_object_get(refs, "templates"), NAMES[_i]);
    ck_assert_ptr_nonnull(r);
    loom_chat_template *t = NULL;
    loom_err err;
    ck_assert_msg(loom_chat_template_load(fixture(DIRS[_i]), &t, &err) ==
                      LOOM_OK,
                  "%s", err.msg);
    size_t i, checked = 0;
    json_t *c;
    json_array_foreach(json_object_get(r, "renderings"), i, c)
    {
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *want = json_object_get(c, "rendered");
        ck_assert_msg(want != NULL, "%s/%s: the reference failed", NAMES[_i],
                      name);
        json_t *extra = json_deep_copy(json_object_get(c, "extra"));
        if (!extra)
            extra = json_object();
        if (json_object_get(c, "tools"))
            json_object_set(extra, "tools", json_object_get(c, "tools"));
        char *out = NULL;
        loom_status st = loom_chat_template_render(
            t, json_object_get(c, "messages"),
            json_is_true(json_object_get(c, "add_generation_prompt")), extra,
            &out, &err);
        ck_assert_msg(st == LOOM_OK, "%s/%s: %s", NAMES[_i], name, err.msg);
        ck_assert_msg(strcmp(out, json_string_value(want)) == 0,
                      "%s/%s:\n--- got\n%s\n--- want\n%s", NAMES[_i], name, out,
                      json_string_value(want));
        free(out);
        json_decref(extra);
        checked++;
    }
    ck_assert_uint_ge(checked, 6);
    loom_chat_template_free(t);
    json_decref(refs);
}
END_TEST

/* The prompt path the server and `loom run --chat` share, against
 * apply_chat_template(tokenize=False) and the ids transformers gives for
 * it (tokenizer_refs/chat_prompt_refs.json, made by
 * tools/make_chat_refs.py): agent conversations with tools, tool calls,
 * tool results, reasoning, multi-turn thinking and template arguments. */
static const char *const PROMPT_REFS[] = {"qwen3", "nemotron_tools"};

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    return s;
}

START_TEST(hf_prompt_ids)
{
    json_error_t je;
    json_t *refs =
        json_load_file(fixture("tokenizer_refs/chat_prompt_refs.json"), 0, &je);
    ck_assert_msg(refs != NULL, "chat_prompt_refs.json: %s", je.text);
    const char *name = PROMPT_REFS[_i];
    json_t *r = json_object_get(json_object_get(refs, "templates"), name);
    ck_assert_ptr_nonnull(r);
    const char *tokdir = json_string_value(json_object_get(r, "tokenizer"));
    const char *file = json_string_value(json_object_get(r, "template_file"));
    char rel[256];
    snprintf(rel, sizeof rel, "%s/%s",
             strcmp(tokdir, "qwen3") == 0 ? "tokenizers" : "models", tokdir);
    loom_err err;
    loom_tokenizer *tok = NULL;
    ck_assert_msg(loom_tokenizer_open(fixture(rel), &tok, &err) == LOOM_OK,
                  "%s", err.msg);
    loom_chat_template *t = NULL;
    json_t *base = json_object();
    if (file) {
        char *src = slurp(fixture(file));
        ck_assert_msg(loom_chat_template_parse(src, &t, &err) == LOOM_OK, "%s",
                      err.msg);
        free(src);
        /* what HF passes from the tokenizer's config */
        json_object_set_new(base, "bos_token", json_string("<s>"));
        json_object_set_new(base, "eos_token", json_string("</s>"));
    } else {
        ck_assert_msg(loom_chat_template_load(fixture(rel), &t, &err) ==
                          LOOM_OK,
                      "%s", err.msg);
    }
    size_t i, checked = 0, refused = 0;
    json_t *c;
    json_array_foreach(json_object_get(r, "renderings"), i, c)
    {
        const char *cname = json_string_value(json_object_get(c, "name"));
        json_t *extra = json_deep_copy(base);
        json_object_update(extra, json_object_get(c, "extra"));
        if (json_object_get(c, "tools"))
            json_object_set(extra, "tools", json_object_get(c, "tools"));
        char *text = NULL;
        int32_t *ids = NULL;
        size_t n = 0;
        loom_status st = loom_chat_prompt(
            t, tok, json_object_get(c, "messages"),
            json_is_true(json_object_get(c, "add_generation_prompt")), extra,
            &text, &ids, &n, &err);
        json_decref(extra);
        if (json_object_get(c, "error")) {
            /* transformers' Jinja raised on it: so must loom */
            ck_assert_msg(st != LOOM_OK, "%s/%s: rendered what HF refused",
                          name, cname);
            refused++;
            continue;
        }
        ck_assert_msg(st == LOOM_OK, "%s/%s: %s", name, cname, err.msg);
        const char *want = json_string_value(json_object_get(c, "rendered"));
        ck_assert_msg(strcmp(text, want) == 0,
                      "%s/%s:\n--- got\n%s\n--- want\n%s", name, cname, text,
                      want);
        json_t *wids = json_object_get(c, "ids");
        ck_assert_msg(json_equal(wids, json_object_get(c, "transformers_ids")),
                      "%s/%s: the reference's two id lists differ", name,
                      cname);
        ck_assert_uint_eq(n, json_array_size(wids));
        for (size_t k = 0; k < n; k++)
            ck_assert_msg(
                ids[k] == json_integer_value(json_array_get(wids, k)),
                "%s/%s: id %zu is %d, transformers %lld", name, cname, k,
                ids[k], (long long)json_integer_value(json_array_get(wids, k)));
        free(text);
        free(ids);
        checked++;
    }
    ck_assert_uint_ge(checked, 7);
    ck_assert_uint_le(refused, 1);
    json_decref(base);
    loom_chat_template_free(t);
    loom_tokenizer_free(tok);
    json_decref(refs);
}
END_TEST

START_TEST(special_tokens_loaded)
{
    loom_chat_template *t = NULL;
    loom_err err;
    ck_assert_int_eq(
        loom_chat_template_load(fixture("models/nemotron-h-tiny"), &t, &err),
        LOOM_OK);
    ck_assert_str_eq(loom_chat_template_bos(t), "<s>");
    ck_assert_str_eq(loom_chat_template_eos(t), "</s>");
    loom_chat_template_free(t);
    ck_assert_int_eq(
        loom_chat_template_load(fixture("tokenizers/qwen3"), &t, &err),
        LOOM_OK);
    ck_assert_str_eq(loom_chat_template_bos(t), ""); /* null in the config */
    ck_assert_str_eq(loom_chat_template_eos(t), "<|im_end|>");
    loom_chat_template_free(t);
}
END_TEST

/* Expected outputs follow Jinja2's documented semantics with HF's
 * environment (trim_blocks, lstrip_blocks), worked out by hand. */
static const struct {
    const char *tmpl;
    const char *want;
} CASES[] = {
    /* whitespace control and trim_blocks / lstrip_blocks */
    {"a  {{- 'b' -}}  c", "abc"},
    {"{% if true %}\nx\n{% endif %}\ny", "x\ny"},
    {"  {% if true %}x{% endif %}", "x"},
    {"a\n    {% set v = 1 %}\nb{{ v }}", "a\nb1"},
    {"{{ 'x' }}\n", "x"}, /* the final newline is dropped */
    {"{#- comment -#}  z", "z"},
    {"{%+ if true %}k{% endif %}", "k"},
    /* literals, operators, precedence */
    {"{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }}",
     "7 9 3 -4 1"},
    {"{{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 0.1 + 0.2 }}",
     "3.5 1024 2.5 0.30000000000000004"},
    {"{{ 'a' ~ 1 ~ none ~ true }}", "a1NoneTrue"},
    {"{{ 'ab' + 'cd' }}{{ [1] + [2] }}{{ 'x' * 3 }}", "abcd[1, 2]xxx"},
    {"{{ 1 < 2 and 'b' > 'a' }} {{ not 1 == 1.0 }} {{ 3 in [1, 3] }}",
     "True False True"},
    {"{{ 'ell' in 'hello' }} {{ 'k' in {'k': 1} }} {{ 2 not in [1] }}",
     "True True True"},
    {"{{ 0 or 'x' }} {{ '' and 'y' }}|{{ 'a' if false else 'b' }}{{ 'c' if "
     "false }}",
     "x |b"},
    {"{{ {'a': [1, 'two', none, false]} }}", "{'a': [1, 'two', None, False]}"},
    /* subscripts, slices, negative indices */
    {"{% set l = [1, 2, 3, 4] %}{{ l[-1] }}{{ l[1:3] }}{{ l[::-1] }}{{ "
     "l[::2] }}{{ l[:-1] }}",
     "4[2, 3][4, 3, 2, 1][1, 3][1, 2, 3]"},
    {"{{ 'h\xC3\xA9llo'[1] }}{{ 'h\xC3\xA9llo'[::-1] }}{{ 'abc'[5:] }}|",
     "\xC3\xA9oll\xC3\xA9h|"},
    /* string methods */
    {"{{ '  a b  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ "
     "'xxaxx'.rstrip('x') }}|{{ '\\n\\nq\\n'.strip('\\n') }}",
     "a b|axx|xxa|q"},
    {"{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', "
     "1) }}",
     "['a', 'b', '', 'c']['a', 'b']['a', 'b c']"},
    {"{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'bc')) }}{{ "
     "'aXa'.replace('a', 'b') }}{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}",
     "TrueTruebXbABab"},
    {"{{ 'x</think>y'.split('</think>')[-1] }}", "y"},
    /* filters */
    {"{{ [1, 2] | length }}{{ 'h\xC3\xA9' | length }}{{ {'a': 1} | count }}",
     "221"},
    {"{{ ' t ' | trim }}|{{ [3, 4] | first }}{{ [3, 4] | last }}|{{ ['a', "
     "'b'] | join('-') }}|{{ 'ab' | upper }}",
     "t|34|a-b|AB"},
    {"{{ x | default('d') }}{{ '' | default('e', true) }}{{ 5 | string }}",
     "de5"},
    {"{{ {'a': [1, 2.5, 'q\"\\n\xC3\xA9'], 'b': none, 'c': true} | tojson }}",
     "{\"a\": [1, 2.5, \"q\\\"\\n\xC3\xA9\"], \"b\": null, \"c\": true}"},
    {"{{ {'a': [1]} | tojson(indent=2) }}", "{\n  \"a\": [\n    1\n  ]\n}"},
    {"{{ [{'r': 'a'}, {'r': 'b'}, {}] | selectattr('r', 'equalto', 'b') | "
     "list | length }}{{ [{'r': 'a'}, {'r': 'c'}] | map(attribute='r') | list "
     "}}",
     "1['a', 'c']"},
    /* tests */
    {"{{ x is defined }}{{ none is none }}{{ 'a' is string }}{{ 1 is not "
     "string }}{{ {} is mapping }}{{ 3 is odd }}{{ 1 is number }}",
     "FalseTrueTrueTrueTrueTrueTrue"},
    /* loops: loop variables, filters, else, break/continue, dict items */
    {"{% for x in ['a', 'b', 'c'] %}{{ loop.index0 }}{{ loop.index }}{{ x "
     "}}{{ loop.first }}{{ loop.last }}{{ loop.revindex }};{% endfor %}",
     "01aTrueFalse3;12bFalseFalse2;23cFalseTrue1;"},
    {"{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length "
     "}}{% endfor %}",
     "2/24/2"},
    {"{% for x in [] %}no{% else %}empty{% endfor %}", "empty"},
    {"{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% "
     "if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     "13"},
    {"{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }} {% endfor %}",
     "a=1 b=2 "},
    {"{% for i in range(3) %}{{ i }}{% endfor %}{% for c in 'ab' %}[{{ c "
     "}}]{% endfor %}",
     "012[a][b]"},
    /* scoping: a set inside a loop does not leak; a namespace does */
    {"{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}",
     "1"},
    {"{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = "
     "ns.n + i %}{% endfor %}{{ ns.n }}",
     "6"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c %}in{{ a }}{% endset %}{{ "
     "c }}",
     "12in1"},
    /* if / elif / else */
    {"{% for v in [1, 2, 3] %}{% if v == 1 %}one{% elif v == 2 %}two{% else "
     "%}many{% endif %} {% endfor %}",
     "one two many "},
    /* macros */
    {"{% macro m(a, b='z') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(2, "
     "b='y') }}",
     "<1z><2y>"},
    /* Undefined values iterate as empty and have length 0, as in Jinja */
    {"{% for x in nothing %}x{% else %}e{% endfor %}{{ nothing | length }}{{ "
     "'a' in nothing }}",
     "e0False"},
    /* generation blocks render their body */
    {"{% generation %}g{% endgeneration %}", "g"},
};

START_TEST(semantics)
{
    json_t *msgs = json_array();
    char *out = NULL;
    loom_err err;
    loom_status st =
        loom_chat_render(CASES[_i].tmpl, msgs, 0, NULL, &out, &err);
    ck_assert_msg(st == LOOM_OK, "case %d %s: %s", _i, CASES[_i].tmpl, err.msg);
    ck_assert_msg(strcmp(out, CASES[_i].want) == 0,
                  "case %d %s:\ngot  [%s]\nwant [%s]", _i, CASES[_i].tmpl, out,
                  CASES[_i].want);
    free(out);
    json_decref(msgs);
}
END_TEST

START_TEST(variables)
{
    /* Messages, add_generation_prompt, extras, and HF's tools=None. */
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "hi");
    json_t *extra = json_pack("{s:b}", "enable_thinking", 0);
    char *out = NULL;
    loom_err err;
    ck_assert_int_eq(
        loom_chat_render("{{ messages[0].role }}:{{ messages[0]['content'] "
                         "}} {{ add_generation_prompt }} {{ enable_thinking "
                         "is false }} {{ tools is none }} {{ bos_token is "
                         "defined }}",
                         msgs, 1, extra, &out, &err),
        LOOM_OK);
    ck_assert_str_eq(out, "user:hi True True True False");
    free(out);
    json_decref(extra);
    json_decref(msgs);
}
END_TEST

static const struct {
    const char *tmpl;
    loom_status code;
    const char *needle;
} ERRORS[] = {
    {"a\nb\n{% include 'x' %}", LOOM_ERR_UNSUPPORTED, "line 3"},
    {"{% include 'x' %}", LOOM_ERR_UNSUPPORTED, "include"},
    {"\n{{ x | wordcount }}", LOOM_ERR_UNSUPPORTED, "line 2"},
    {"{{ x | wordcount }}", LOOM_ERR_UNSUPPORTED, "wordcount"},
    {"{% for x in [1] %}\n{{ x }}", LOOM_ERR_FORMAT, "endfor"},
    {"{% if x %}", LOOM_ERR_FORMAT, "endif"},
    {"x\n{% endif %}", LOOM_ERR_FORMAT, "line 2"},
    {"{{ 'abc' ", LOOM_ERR_FORMAT, "unterminated"},
    {"{{ 'abc }}", LOOM_ERR_FORMAT, "unterminated string"},
    {"{# never closed", LOOM_ERR_FORMAT, "comment"},
    {"{{ 1 + }}", LOOM_ERR_FORMAT, "line 1"},
    {"{{ a $ b }}", LOOM_ERR_FORMAT, "'$'"},
    {"\n\n{{ raise_exception('Only user and assistant roles') }}",
     LOOM_ERR_INVALID, "line 3: raise_exception: Only user and assistant"},
    {"{{ undefined_thing.attr }}", LOOM_ERR_INVALID,
     "'undefined_thing' is undefined"},
    {"{{ 'a' + 1 }}", LOOM_ERR_INVALID, "str and int"},
    {"{{ 'a'.zfill(3) }}", LOOM_ERR_UNSUPPORTED, "str.zfill"},
    {"{{ x is prime }}", LOOM_ERR_UNSUPPORTED, "prime"},
    {"{{ 1 // 0 }}", LOOM_ERR_INVALID, "division by zero"},
    {"{% for x in 5 %}{% endfor %}", LOOM_ERR_INVALID, "cannot loop over int"},
    {"{{ f(*a) }}", LOOM_ERR_UNSUPPORTED, "*args"},
    {"{% for x in y recursive %}{% endfor %}", LOOM_ERR_UNSUPPORTED,
     "recursive"},
};

START_TEST(errors)
{
    json_t *msgs = json_array();
    char *out = NULL;
    loom_err err;
    loom_status st =
        loom_chat_render(ERRORS[_i].tmpl, msgs, 0, NULL, &out, &err);
    ck_assert_msg(st == ERRORS[_i].code, "case %d: status %d (%s)", _i, (int)st,
                  st == LOOM_OK ? out : err.msg);
    ck_assert_msg(strstr(err.msg, ERRORS[_i].needle) != NULL,
                  "case %d: message \"%s\" lacks \"%s\"", _i, err.msg,
                  ERRORS[_i].needle);
    json_decref(msgs);
}
END_TEST

START_TEST(load_errors)
{
    loom_chat_template *t = NULL;
    loom_err err;
    const char *dir = temp_dir();
    ck_assert_int_ne(loom_chat_template_load(dir, &t, &err), LOOM_OK);
    write_text_in(dir, "tokenizer_config.json", "{\"eos_token\": \"x\"}");
    ck_assert_int_eq(loom_chat_template_load(dir, &t, &err),
                     LOOM_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "chat_template"));
    write_text_in(dir, "tokenizer_config.json",
                  "{\"chat_template\": \"{% for %}\"}");
    ck_assert_int_eq(loom_chat_template_load(dir, &t, &err), LOOM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "tokenizer_config.json"));
    ck_assert_ptr_nonnull(strstr(err.msg, "line 1"));
    /* A list of named templates: the one named "default" is used. */
    write_text_in(dir, "tokenizer_config.json",
                  "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": "
                  "\"T\"}, {\"name\": \"default\", \"template\": \"D{{ "
                  "eos_token }}\"}], \"eos_token\": {\"content\": \"</e>\"}}");
    ck_assert_int_eq(loom_chat_template_load(dir, &t, &err), LOOM_OK);
    json_t *msgs = json_array();
    char *out;
    ck_assert_int_eq(loom_chat_template_render(t, msgs, 0, NULL, &out, &err),
                     LOOM_OK);
    ck_assert_str_eq(out, "D</e>");
    free(out);
    /* messages must be an array */
    json_t *obj = json_object();
    ck_assert_int_eq(loom_chat_template_render(t, obj, 0, NULL, &out, &err),
                     LOOM_ERR_INVALID);
    json_decref(obj);
    json_decref(msgs);
    loom_chat_template_free(t);
}
END_TEST

/* Hostile templates and messages (issue 18): each ends in an error naming
 * its cause, or in Python's answer, never in a crash, UB or a hang (Check's
 * per-test timeout catches those). MSGS is JSON for the messages. */
static const struct {
    const char *tmpl, *msgs;
    loom_status code;
    const char *want; /* the output, or a part of the message */
} HOSTILE[] = {
    {"{% for message in messages %}{{ message.turn // -1 }}{% endfor %}",
     "[{\"role\": \"user\", \"turn\": -9223372036854775808}]", LOOM_ERR_RANGE,
     "integer overflow"},
    {"{{ (-9223372036854775807 - 1) % -1 }}", NULL, LOOM_OK, "0"},
    {"{{ (-9223372036854775807 - 1) is divisibleby(-1) }}", NULL, LOOM_OK,
     "True"},
    {"{{ 9223372036854775807 + 1 }}", NULL, LOOM_ERR_RANGE, "overflow"},
    {"{{ -9223372036854775807 - 2 }}", NULL, LOOM_ERR_RANGE, "overflow"},
    {"{{ 3037000500 * 3037000500 }}", NULL, LOOM_ERR_RANGE, "overflow"},
    {"{{ 2 ** 63 }}", NULL, LOOM_ERR_RANGE, "overflow"},
    {"{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 1 ** 9223372036854775807 }}", NULL,
     LOOM_OK, "4611686018427387904 -9223372036854775808 1"},
    {"{% for m in messages %}{{ -m.turn }}{% endfor %}",
     "[{\"turn\": -9223372036854775808}]", LOOM_ERR_RANGE, "overflow"},
    {"{% for m in messages %}{{ m.turn | abs }}{% endfor %}",
     "[{\"turn\": -9223372036854775808}]", LOOM_ERR_RANGE, "overflow"},
    {"{{ 1e300 | int }}", NULL, LOOM_ERR_RANGE, "overflow"},
    {"{{ 9223372036854775808.0 | int }}", NULL, LOOM_ERR_RANGE, "overflow"},
    {"{{ -9223372036854775808.0 | int }} {{ 2.9 | int }}", NULL, LOOM_OK,
     "-9223372036854775808 2"},
    {"{{ '99999999999999999999' | int }}", NULL, LOOM_ERR_RANGE, "overflow"},
    {"{{ 1e308 * 10 }}", NULL, LOOM_ERR_RANGE, "not a finite number (inf)"},
    {"{{ 'nan' | float }}", NULL, LOOM_ERR_RANGE, "not a finite number (nan)"},
    {"{{ 99999999999999999999 }}", NULL, LOOM_ERR_FORMAT, "out of range"},
    {"{{ 1e999 }}", NULL, LOOM_ERR_FORMAT, "out of range"},
    {"{{ range(-9223372036854775807 - 1, 9223372036854775807) | length }}",
     NULL, LOOM_ERR_RANGE, "range() too long"},
    {"{{ range(9223372036854775806, 9223372036854775807, 9223372036854775807) "
     "| list }} {{ range(5, -9223372036854775807 - 1, -9223372036854775807) "
     "| list }}",
     NULL, LOOM_OK, "[9223372036854775806] [5, -9223372036854775802]"},
    {"{{ 'a' * 10000000000 }}", NULL, LOOM_ERR_RANGE, "size limit"},
    {"{{ 'ab' * -3 }}|{{ 'ab' * 2 }}", NULL, LOOM_OK, "|abab"},
    /* found by fuzz_chat_template: an empty str must not loop k times */
    {"{{ '' * 10000000000 }}|{{ ('' * 9223372036854775807) | length }}", NULL,
     LOOM_OK, "|0"},
    {"{{ [1] | tojson(indent=1000000000) }}", NULL, LOOM_ERR_RANGE,
     "indent over 1000"},
    {"{{ [1] | tojson(indent=2) }}", NULL, LOOM_OK, "[\n  1\n]"},
    /* the filters of chat_template_filter.c under the same bounds */
    {"{{ ('a\\n' * 1000000) | indent(100) }}", NULL, LOOM_ERR_RANGE,
     "size limit"},
    {"{{ 'a' | center(2000000) }}", NULL, LOOM_ERR_RANGE, "width out of range"},
    {"{{ '%1000d' | format(1) }}", NULL, LOOM_ERR_RANGE, "over 400"},
    {"{{ '%5d|%-4s|' | format(42, 'ab') }}", NULL, LOOM_OK, "   42|ab  |"},
    {"{{ [1] | batch(100000000, 0) }}", NULL, LOOM_ERR_RANGE, "list limit"},
    {"{{ range(1000000) | list | unique | length }}", NULL, LOOM_ERR_RANGE,
     "steps"},
    {"{% filter upper %}{{ 'a' * 60000000 }}{{ 'a' * 10000000 }}"
     "{% endfilter %}",
     NULL, LOOM_ERR_RANGE, "size limit"},
    {"{% set ns = namespace(s='a') %}{% for i in range(100) %}"
     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
     NULL, LOOM_ERR_RANGE, "size limit"},
    {"{% set ns = namespace(s='ab') %}{% for i in range(100) %}"
     "{% set ns.s = ns.s.replace('a', 'aaaaaaaa') %}{% endfor %}",
     NULL, LOOM_ERR_RANGE, "size limit"},
    {"{% for i in range(1000000) %}{% for j in range(1000000) %}"
     "{% endfor %}{% endfor %}",
     NULL, LOOM_ERR_RANGE, "steps"},
    {"{% set ns = namespace(a=1) %}{% set ns.b = [ns] %}{{ ns }}", NULL,
     LOOM_ERR_RANGE, "holds itself"},
    {"{% set ns = namespace(x=[]) %}{% for i in range(100000) %}"
     "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | length }}",
     NULL, LOOM_ERR_RANGE, "too large or deep"},
    {"{% set ns = namespace(x=[1]) %}{% for i in range(64) %}"
     "{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x | tojson }}",
     NULL, LOOM_ERR_RANGE, "too large or deep"},
    {"{{ 'abc'[1::9223372036854775807] }}{{ 'abc'[::-9223372036854775807] }}"
     "{{ 'a\xc3\xa9z'[::-1] }}{{ [1, 2, 3][-9223372036854775807 - 1:] }}",
     NULL, LOOM_OK,
     "bcz\xc3\xa9"
     "a[1, 2, 3]"},
};

/* "{{ " OPEN*N "1" CLOSE*N " }}" */
static char *nested(const char *open, const char *close, size_t n)
{
    size_t lo = strlen(open), lc = strlen(close);
    char *s = malloc(n * (lo + lc) + 16), *p = s;
    p += sprintf(p, "{{ ");
    for (size_t i = 0; i < n; i++, p += lo)
        memcpy(p, open, lo);
    *p++ = '1';
    for (size_t i = 0; i < n; i++, p += lc)
        memcpy(p, close, lc);
    sprintf(p, " }}");
    return s;
}

START_TEST(hostile)
{
    json_t *msgs =
        HOSTILE[_i].msgs ? json_loads(HOSTILE[_i].msgs, 0, NULL) : json_array();
    ck_assert_ptr_nonnull(msgs);
    char *out = NULL;
    loom_err err;
    loom_status st =
        loom_chat_render(HOSTILE[_i].tmpl, msgs, 0, NULL, &out, &err);
    ck_assert_msg(st == HOSTILE[_i].code, "case %d: status %d (%s)", _i,
                  (int)st, st == LOOM_OK ? out : err.msg);
    if (st == LOOM_OK)
        ck_assert_str_eq(out, HOSTILE[_i].want);
    else
        ck_assert_msg(strstr(err.msg, HOSTILE[_i].want) != NULL,
                      "case %d: message \"%s\" lacks \"%s\"", _i, err.msg,
                      HOSTILE[_i].want);
    free(out);
    json_decref(msgs);
}
END_TEST

/* Deep nesting and long chains are refused before they can exhaust the
 * parser's or the evaluator's stack; nesting that templates use works. */
START_TEST(nesting_limits)
{
    static const struct {
        const char *open, *close;
        size_t n;
    } deep[] = {{"(", ")", 20000},  {"not ", "", 20000},
                {"-", "", 2048},    {"[", "]", 20000},
                {"1 + ", "", 5000}, {"", " | string", 5000},
                {"", ".a", 5000},   {"1 if 1 else ", "", 5000}};
    json_t *msgs = json_array();
    char *out = NULL;
    loom_err err;
    for (size_t i = 0; i < sizeof deep / sizeof deep[0]; i++) {
        char *t = nested(deep[i].open, deep[i].close, deep[i].n);
        loom_status st = loom_chat_render(t, msgs, 0, NULL, &out, &err);
        ck_assert_msg(st == LOOM_ERR_RANGE, "case %zu: status %d (%s)", i,
                      (int)st, st == LOOM_OK ? "ok" : err.msg);
        ck_assert_msg(strstr(err.msg, "deeply") != NULL, "case %zu: %s", i,
                      err.msg);
        free(t);
        char *ok = nested(deep[i].open, deep[i].close, 30);
        st = loom_chat_render(ok, msgs, 0, NULL, &out, &err);
        ck_assert_msg(st == LOOM_OK || !strstr(err.msg, "deeply"),
                      "case %zu at 30: %s", i, err.msg);
        if (st == LOOM_OK)
            free(out);
        free(ok);
    }
    /* statements nested past the limit */
    size_t n = 5000;
    char *t = malloc(n * 24 + 1), *p = t;
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "{%% if 1 %%}");
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "{%% endif %%}");
    ck_assert_int_eq(loom_chat_render(t, msgs, 0, NULL, &out, &err),
                     LOOM_ERR_RANGE);
    free(t);
    json_decref(msgs);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("chat_template");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, hf_renderings, 0, 5);
    tcase_add_test(tc, special_tokens_loaded);
    tcase_add_loop_test(tc, hf_prompt_ids, 0,
                        (int)(sizeof PROMPT_REFS / sizeof PROMPT_REFS[0]));
    tcase_add_loop_test(tc, semantics, 0,
                        (int)(sizeof CASES / sizeof CASES[0]));
    tcase_add_test(tc, variables);
    tcase_add_loop_test(tc, errors, 0, (int)(sizeof ERRORS / sizeof ERRORS[0]));
    tcase_add_test(tc, load_errors);
    tcase_add_loop_test(tc, hostile, 0,
                        (int)(sizeof HOSTILE / sizeof HOSTILE[0]));
    tcase_add_test(tc, nesting_limits);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
