#!/usr/bin/env python3
"""Makes the tokenizer and chat-template references for tests/unit/test_tokenizer.c
and tests/unit/test_chat_template.c with the Hugging Face libraries.

Run on a machine with `tokenizers` and `transformers` (the GPU machine), from the
repository root:  python3 tools/make_tokenizer_refs.py OUTDIR
Writes OUTDIR/tokenizer_refs.json and OUTDIR/chat_refs.json; copy them into
tests/fixtures/tokenizer_refs/.
"""
import json
import os
import random
import sys
import traceback

import tokenizers
from tokenizers import Tokenizer

TOKENIZER_DIRS = {
    "qwen3": "tests/fixtures/tokenizers/qwen3",
    "qwen35-tiny": "tests/fixtures/models/qwen35-tiny",
    "qwen35-vl-tiny": "tests/fixtures/models/qwen35-vl-tiny",
    "nemotron-h-tiny": "tests/fixtures/models/nemotron-h-tiny",
    "kjv-qwen35": "models/kjv-qwen35",
}

# Hand-picked hard cases: whitespace classes, contractions, NFC, scripts with
# combining marks, added tokens next to text, long runs (quadratic traps).
CASES = [
    "I'M DON'T WE'LL THEY'RE it'S you'D I'Ve",
    "it\u2019s curly \u2018quotes\u2019 and \u201cdouble\u201d",
    "it'\u017f long s and \u212a kelvin",
    "no\u00a0break\u00a0space and ideographic\u3000space",
    "line\u2028separator para\u2029graph next\u0085line",
    "zero\u200bwidth\u200djoiner\ufeffbom",
    "vertical\x0btab form\x0cfeed",
    "nul\x00byte inside",
    "  \n  \n\n   \t\t x  \r\n\r\n  ",
    "\n" * 40,
    " " * 100 + "x",
    "\t" * 17 + "y",
    "trailing spaces then newline   \n",
    "a" * 5000,
    "ab" * 1500,
    "1234567890" * 30,
    "\u0645\u0631\u062d\u0628\u0627 \u0661\u0662\u0663 \u00b2\u00b3 \u00bd \u216b",
    "e\u0301 A\u030a \u212b \u1100\u1161\u11a8 \ufb01 \u1e9b\u0323",
    " \u0301abc \u0308\u0308\u0308",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a \u0e42\u0e25\u0e01",
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4! \u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c\u3002\u30ab\u30bf\u30ab\u30ca",
    "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 \U0001F1EF\U0001F1F5 \U0001F44B\U0001F3FF \u2764\ufe0f",
    "\U0001D518\U0001D52B\U0001D526\U0001D520\U0001D52C\U0001D521\U0001D522 \U00010348 \U0001F600" * 3,
    "\ue000\uf8ff private \ufffd replacement \uffff",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n",
    " <|im_end|> ",
    "<|im_end|><|im_start|><|endoftext|>",
    "<|im_end",
    "<<|im_end|>>",
    "x<|endoftext|>y",
    "<think>\nreasoning\n</think>\n\nanswer",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
    "```python\nfor i in range(10):\n\tprint(i ** 2)  # squares\n```\n",
    "{\"key\": [1, 2.5, -3e10, null, true], \"n\\u00e9\": \"v\"}",
    "https://example.com/path?q=1&r=%20x#frag user@example.org",
    "1,234,567.89 $5.00 \u20ac10 50% 3:45pm 2024-01-01T00:00:00Z",
    "camelCaseWords snake_case_words kebab-case-words SCREAMING_CASE",
    "\u00c0\u00c1\u00c2\u00c3\u00c4\u00c5\u00c6\u00c7 \u00df \u0130 \u0131 \u03a3\u03c3\u03c2",
    "Hello\r\nWorld\rMac\nUnix",
    "...---...!!!???''\"\"``~~~",
    "'s's's 's 'S '",
    "a'b'c' 'd ''e''",
    "x\u0300\u0301\u0302\u0303\u0304\u0305\u0306\u0307\u0308\u0309\u030a\u030b\u030c\u030d",
]

CHAR_POOL = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    + list(" " * 12 + "\n" * 4 + "\t\r")
    + list(".,;:!?'\"()[]{}<>|/\\-_=+*&^%$#@~`")
    + ["'s", "'t", "'re", "'LL", "<|im_end|>", "<|im_start|>", "<think>",
       "\u00e9", "e\u0301", "\u00fc", "\u00f1", "\u00df", "\u0301", "\u0308",
       "\u4e2d", "\u6587", "\u3002", "\uff0c", "\u3042", "\u30a2", "\ud55c",
       "\u0416", "\u03bb", "\u05d0", "\u0627", "\u0928", "\u094d", "\u0e01",
       "\U0001F600", "\U0001F44D", "\U0001F3FD", "\u200d", "\ufe0f",
       "\u00a0", "\u3000", "\u2028", "\u0085", "\u000b", "\u000c",
       "\u0663", "\u00b2", "\u2167", "\u2019", "\u212b", "\u00c5"]
)


def fuzz_cases(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(0, 60)
        out.append("".join(rng.choice(CHAR_POOL) for _ in range(k)))
    return out


def tokenizer_refs(name, path):
    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    res = {"cases": [], "decode_cases": [], "no_special_cases": []}
    texts = CASES + fuzz_cases(300, 1234 + len(name))
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        res["cases"].append({"text": t, "ids": ids,
                             "decoded": tok.decode(ids, skip_special_tokens=False)})
    # Decoding arbitrary ids: partial UTF-8 sequences become U+FFFD.
    rng = random.Random(99)
    vs = tok.get_vocab_size(with_added_tokens=True)
    seqs = [[rng.randrange(vs) for _ in range(rng.randint(1, 12))] for _ in range(60)]
    for case in res["cases"][:len(CASES)]:
        for i in case["ids"][:40]:
            seqs.append([i])
    for ids in seqs:
        res["decode_cases"].append({
            "ids": ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    # Special tokens treated as plain text (encode_special_tokens=True).
    try:
        tok.encode_special_tokens = True
        for t in CASES[25:35]:
            res["no_special_cases"].append(
                {"text": t, "ids": tok.encode(t, add_special_tokens=False).ids})
        tok.encode_special_tokens = False
    except Exception as e:  # older tokenizers
        res["no_special_error"] = repr(e)
    return res


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the weather for a city \u2014 in \u00b0C.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "scale": {"type": "number", "default": 0.5}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "noop", "description": "Does \"nothing\"\n\tat all.",
        "parameters": {"type": "object", "properties": {}}}},
]

CONVERSATIONS = [
    {"name": "user_only_gen", "messages": [{"role": "user", "content": "Hello!"}],
     "add_generation_prompt": True},
    {"name": "user_only_nogen", "messages": [{"role": "user", "content": "Hello!"}],
     "add_generation_prompt": False},
    {"name": "system_user", "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2+2?"}], "add_generation_prompt": True},
    {"name": "multi_turn", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke.\nA short one."}],
     "add_generation_prompt": True},
    {"name": "assistant_last_nogen", "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello there."}],
     "add_generation_prompt": False},
    {"name": "think_in_content", "messages": [
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "<think>\nLet me think.\n</think>\n\nBecause."},
        {"role": "user", "content": "And then?"},
        {"role": "assistant", "content": "<think>\nAgain\nthinking\n</think>\n\n\nThen this."}],
     "add_generation_prompt": False},
    {"name": "think_history", "messages": [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>old reasoning</think>A1"},
        {"role": "user", "content": "Q2"}],
     "add_generation_prompt": True},
    {"name": "reasoning_content_field", "messages": [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "A", "reasoning_content": "\nR is here\n"}],
     "add_generation_prompt": False},
    {"name": "no_thinking", "messages": [{"role": "user", "content": "Quick answer"}],
     "add_generation_prompt": True, "extra": {"enable_thinking": False}},
    {"name": "thinking_true", "messages": [{"role": "user", "content": "Quick answer"}],
     "add_generation_prompt": True, "extra": {"enable_thinking": True}},
    {"name": "system_mid", "messages": [
        {"role": "user", "content": "a"},
        {"role": "system", "content": "late system"},
        {"role": "user", "content": "b"}], "add_generation_prompt": True},
    {"name": "unicode_quotes", "messages": [
        {"role": "system", "content": "\u4f60\u662f\u52a9\u624b \U0001F600"},
        {"role": "user", "content": "He said \"hi\" and 'bye' \\ {{ not jinja }} {% raw %}\n\n"}],
     "add_generation_prompt": True},
    {"name": "empty_content", "messages": [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""}], "add_generation_prompt": True},
    {"name": "tools_basic", "tools": TOOLS, "messages": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"}], "add_generation_prompt": True},
    {"name": "tools_no_system", "tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather in Paris?"}], "add_generation_prompt": True},
    {"name": "tool_calls_roundtrip", "tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather",
                                              "arguments": {"city": "Paris", "days": 2}}},
            {"type": "function", "function": {"name": "get_weather",
                                              "arguments": "{\"city\": \"Rome\"}"}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "tool", "content": "{\"temp\": 25.5}"},
        {"role": "assistant", "content": "Paris 21, Rome 25.5."},
        {"role": "user", "content": "<tool_response>x</tool_response>"}],
     "add_generation_prompt": True},
    {"name": "tool_call_with_text", "messages": [
        {"role": "user", "content": "Do it"},
        {"role": "assistant", "content": "Sure.", "tool_calls": [
            {"name": "noop", "arguments": {}}]},
        {"role": "tool", "content": "done"}],
     "add_generation_prompt": True},
]


def chat_refs(name, path):
    out = {"loader": None, "renderings": []}
    tok = None
    try:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(path)
        out["loader"] = "AutoTokenizer " + type(tok).__name__
    except Exception as e:
        out["autotokenizer_error"] = repr(e)
        from transformers import PreTrainedTokenizerFast
        cfg = json.load(open(os.path.join(path, "tokenizer_config.json")))
        tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(path, "tokenizer.json"))
        tok.chat_template = cfg["chat_template"]
        out["loader"] = "PreTrainedTokenizerFast"
    for conv in CONVERSATIONS:
        if name != "qwen3" and ("tools" in conv or any(
                set(m) - {"role", "content"} for m in conv["messages"])):
            continue
        entry = dict(conv)
        try:
            kw = dict(conv.get("extra", {}))
            if "tools" in conv:
                kw["tools"] = conv["tools"]
            entry["rendered"] = tok.apply_chat_template(
                conv["messages"], tokenize=False,
                add_generation_prompt=conv["add_generation_prompt"], **kw)
        except Exception as e:
            entry["error"] = repr(e)
        out["renderings"].append(entry)
    return out


def main():
    outdir = sys.argv[1]
    import transformers
    made_by = "tokenizers %s, transformers %s" % (tokenizers.__version__,
                                                  transformers.__version__)
    tr = {"made_by": made_by, "tokenizers": {}}
    cr = {"made_by": made_by, "templates": {}}
    for name, path in TOKENIZER_DIRS.items():
        try:
            tr["tokenizers"][name] = tokenizer_refs(name, path)
        except Exception:
            tr["tokenizers"][name] = {"error": traceback.format_exc()}
        try:
            cr["templates"][name] = chat_refs(name, path)
        except Exception:
            cr["templates"][name] = {"error": traceback.format_exc()}
    with open(os.path.join(outdir, "tokenizer_refs.json"), "w") as f:
        json.dump(tr, f, ensure_ascii=False, indent=0)
    with open(os.path.join(outdir, "chat_refs.json"), "w") as f:
        json.dump(cr, f, ensure_ascii=False, indent=1)
    print(made_by)
    for name, v in cr["templates"].items():
        print(name, v.get("loader"), [r["name"] for r in v.get("renderings", []) if "error" in r],
              v.get("error", "")[:300], v.get("autotokenizer_error", "")[:300])
    for name, v in tr["tokenizers"].items():
        print(name, len(v.get("cases", [])), v.get("error", "")[:300], v.get("no_special_error", ""))


if __name__ == "__main__":
    main()
