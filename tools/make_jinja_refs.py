#!/usr/bin/env python3
"""Reference renderings of chat-template features by Python's jinja2, in the
environment transformers renders chat templates with (trim_blocks,
lstrip_blocks, loopcontrols, its own tojson, raise_exception), written to
tests/fixtures/tokenizer_refs/jinja_refs.json for tests/unit/test_chat_jinja.c.

Usage: python3 tools/make_jinja_refs.py   (needs python3-jinja2)
Each case: a template, its variables (messages, add_generation_prompt,
tools and documents as apply_chat_template passes them, plus extras), and
jinja2's output, or "error": true when jinja2 refuses it.
"""
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' override: json.dumps, not jinja2's HTML-safe one
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


MSGS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Héllo <b>&</b> 'x' \"y\""},
    {"role": "assistant", "content": "Hi!"},
]
PEOPLE = [
    {"name": "bob", "age": 31, "score": 2.5},
    {"name": "Alice", "age": 27, "score": 4.25},
    {"name": "carol", "age": 31, "score": 1.0},
    {"name": "alice", "age": 40, "score": 3.5},
]

# name, template, extra variables
CASES = [
    # sort
    ("sort_ints", "{{ [3, 1, 2, 10, -4] | sort }}", {}),
    ("sort_reverse", "{{ [3, 1, 2] | sort(reverse=true) }}", {}),
    ("sort_strings_nocase", "{{ ['b', 'A', 'c', 'a', 'B'] | sort }}", {}),
    ("sort_strings_case", "{{ ['b', 'A', 'c', 'a', 'B'] | sort(case_sensitive=true) }}", {}),
    ("sort_attribute", "{% for p in people | sort(attribute='age') %}{{ p.name }} {% endfor %}", {"people": PEOPLE}),
    ("sort_attribute_name", "{{ people | sort(attribute='name') | map(attribute='name') | join(',') }}", {"people": PEOPLE}),
    ("sort_floats", "{{ [2.5, 1, 0.5, 3] | sort }}", {}),
    ("sort_mixed", "{{ [1, 'a'] | sort }}", {}),
    # dictsort
    ("dictsort", "{% for k, v in d | dictsort %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "a": 2, "C": 3}}),
    ("dictsort_value", "{% for k, v in d | dictsort(by='value') %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 3, "a": 2, "c": 1}}),
    ("dictsort_reverse", "{% for k, v in d | dictsort(reverse=true) %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("dictsort_case", "{% for k, v in d | dictsort(true) %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "B": 2, "a": 3}}),
    ("dictsort_pair", "{% for p in d | dictsort %}{{ p[0] }}:{{ p[1] }} {% endfor %}", {"d": {"y": 1, "x": 2}}),
    # unique
    ("unique", "{{ [1, 2, 1, 3, 2] | unique | list }}", {}),
    ("unique_nocase", "{{ ['a', 'A', 'b', 'B', 'a'] | unique | list }}", {}),
    ("unique_case", "{{ ['a', 'A', 'b', 'a'] | unique(case_sensitive=true) | list }}", {}),
    ("unique_attribute", "{{ people | unique(attribute='age') | map(attribute='name') | join(',') }}", {"people": PEOPLE}),
    # sum, max, min
    ("sum", "{{ [1, 2, 3] | sum }}", {}),
    ("sum_floats", "{{ [1, 2.5, 0.25] | sum }}", {}),
    ("sum_start", "{{ [1, 2] | sum(start=10) }}", {}),
    ("sum_attribute", "{{ people | sum(attribute='age') }}", {"people": PEOPLE}),
    ("sum_empty", "{{ [] | sum }}", {}),
    ("max", "{{ [3, 9, 2] | max }}", {}),
    ("min", "{{ [3, 9, 2] | min }}", {}),
    ("max_strings", "{{ ['b', 'C', 'a'] | max }}", {}),
    ("min_strings_case", "{{ ['b', 'C', 'a'] | min(case_sensitive=true) }}", {}),
    ("max_attribute", "{{ (people | max(attribute='score')).name }}", {"people": PEOPLE}),
    ("min_attribute", "{{ (people | min(attribute='age')).name }}", {"people": PEOPLE}),
    ("max_empty", "[{{ [] | max }}]", {}),
    # round
    ("round", "{{ 2.7 | round }} {{ 2.5 | round }} {{ 3.5 | round }} {{ -2.5 | round }}", {}),
    ("round_precision", "{{ 3.14159 | round(2) }} {{ 2.675 | round(2) }} {{ 0.125 | round(2) }}", {}),
    ("round_methods", "{{ 2.1 | round(method='ceil') }} {{ 2.9 | round(method='floor') }} {{ 2.25 | round(1, 'floor') }} {{ -2.5 | round(method='ceil') }}", {}),
    ("round_int", "{{ 7 | round }} {{ (7 / 2) | round | int }}", {}),
    # format
    ("format", "{{ '%s is %d years' | format('bob', 31) }}", {}),
    ("format_float", "{{ '%.2f|%5.1f|%-6s|%05d|%x|%%' | format(3.14159, 2.25, 'ab', 42, 255) }}", {}),
    ("format_repr", "{{ '%s and %s' | format([1, 'a'], none) }}", {}),
    ("format_bool", "{{ '%s %d' | format(true, true) }}", {}),
    # indent
    ("indent", "{{ 'a\nb\n\nc' | indent }}", {}),
    ("indent_first", "{{ 'a\nb' | indent(2, true) }}", {}),
    ("indent_blank", "{{ 'a\n\nb' | indent(2, blank=true) }}", {}),
    ("indent_string", "{{ 'a\nb' | indent('> ') }}", {}),
    ("indent_trailing", "[{{ 'a\nb\n' | indent(3) }}]", {}),
    # center
    ("center", "[{{ 'abc' | center(9) }}][{{ 'ab' | center(7) }}][{{ 'abc' | center(8) }}][{{ 'abcdef' | center(3) }}]", {}),
    ("center_default", "[{{ 'x' | center }}]", {}),
    ("center_unicode", "[{{ 'héé' | center(7) }}]", {}),
    # batch
    ("batch", "{{ [1, 2, 3, 4, 5] | batch(2) | list }}", {}),
    ("batch_fill", "{{ [1, 2, 3, 4, 5] | batch(3, 0) | list }}", {}),
    ("batch_loop", "{% for row in 'abcdefg' | list | batch(3, '-') %}{{ row | join }}|{% endfor %}", {}),
    # loop.cycle
    ("loop_cycle", "{% for m in messages %}{{ loop.cycle('odd', 'even') }} {% endfor %}", {}),
    ("loop_cycle_three", "{% for i in range(7) %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}", {}),
    # filter blocks
    ("filter_block", "{% filter upper %}hello {{ messages[0].role }}{% endfilter %}!", {}),
    ("filter_block_args", "{% filter replace('a', 'o') %}banana{% endfilter %}", {}),
    ("filter_block_chain", "{% filter trim | upper %}  spaced  {% endfilter %}|", {}),
    ("filter_block_loop", "{% for m in messages %}{% filter center(12) %}{{ m.role }}{% endfilter %}|{% endfor %}", {}),
    # tojson
    ("tojson", "{{ messages[1] | tojson }}", {}),
    ("tojson_separators", "{{ messages[1] | tojson(separators=(',', ':')) }}", {}),
    ("tojson_separators_list", "{{ {'a': [1, 2], 'b': none} | tojson(separators=[', ', ' = ']) }}", {}),
    ("tojson_indent_separators", "{{ {'a': [1, 2]} | tojson(indent=2, separators=(',', ': ')) }}", {}),
    ("tojson_sort_keys", "{{ {'b': 1, 'a': {'d': 2, 'c': 3}} | tojson(sort_keys=true) }}", {}),
    ("tojson_ascii", "{{ 'héllo ✓' | tojson(ensure_ascii=true) }}", {}),
    # escaping
    ("escape", "{{ messages[1].content | e }}", {}),
    ("escape_long", "{{ '<a href=\"x\">Tom & Jerry\\'s</a>' | escape }}", {}),
    ("escape_concat", "{{ ('<b>' | e) ~ '<i>' }}", {}),
    ("escape_number", "{{ 5 | e }}", {}),
    # case on non-ASCII
    ("upper_unicode", "{{ 'héllo wörld ñ ω д' | upper }}", {}),
    ("lower_unicode", "{{ 'HÉLLO WÖRLD Ñ Ω Д' | lower }}", {}),
    ("title_unicode", "{{ 'élan vital über' | title }}", {}),
    ("capitalize_unicode", "{{ 'élan VITAL' | capitalize }}", {}),
    ("upper_method", "{{ 'ça va'.upper() }} {{ 'ÇA VA'.lower() }}", {}),
]


def main():
    env = environment()
    out = []
    for name, src, extra in CASES:
        variables = {"messages": MSGS, "add_generation_prompt": False,
                     "tools": None, "documents": None}
        variables.update(extra)
        case = {"name": name, "template": src, "extra": extra}
        try:
            case["output"] = env.from_string(src).render(**variables)
        except Exception as e:  # what jinja2 refuses, loom must refuse
            case["error"] = True
            case["jinja2_error"] = "%s: %s" % (type(e).__name__, e)
        out.append(case)
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "tests", "fixtures", "tokenizer_refs",
                        "jinja_refs.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"jinja2": jinja2.__version__, "messages": MSGS,
                   "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("%d cases, jinja2 %s -> %s" % (len(out), jinja2.__version__, path))


if __name__ == "__main__":
    sys.exit(main())
