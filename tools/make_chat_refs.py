#!/usr/bin/env python3
"""Makes the chat-prompt references for the server and `loom run --chat`
(tests/fixtures/tokenizer_refs/chat_prompt_refs.json) with Hugging Face's
transformers and tokenizers: apply_chat_template(..., tokenize=False) of
agent-style conversations (tools, tool calls, tool results, reasoning,
multi-turn thinking, template arguments), and the ids of each rendering as
transformers tokenizes it (special tokens in the text parsed, no extra
special tokens added), from the tokenizers library and from
apply_chat_template(tokenize=True).

Run on the GPU machine:  python3 tools/make_chat_refs.py BASE OUTFILE
BASE holds qwen3/, nemotron-h-tiny/ (tokenizer.json, tokenizer_config.json)
and chat_templates/nemotron_tools.jinja, as in tests/fixtures.
"""
import json
import os
import sys
import traceback

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Weather for a city, in \u00b0C.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Searches the web.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}}, "required": ["query"]}}},
]

# Assistant tool calls as the server passes them to templates: OpenAI's
# shape with the arguments string parsed into an object (as vLLM does).
CALL_PARIS = {"id": "call_1", "type": "function", "function": {
    "name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}
CALL_ROME = {"id": "call_2", "type": "function", "function": {
    "name": "get_weather", "arguments": {"city": "Rome"}}}

CONVERSATIONS = [
    {"name": "agent_tools_offered", "tools": TOOLS, "messages": [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Weather in Paris?"}]},
    {"name": "agent_tool_result", "tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL_PARIS]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}]},
    {"name": "agent_parallel_results", "tools": TOOLS, "messages": [
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": "Paris and Rome?"},
        {"role": "assistant", "content": "Checking both.",
         "tool_calls": [CALL_PARIS, CALL_ROME]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21"},
        {"role": "tool", "tool_call_id": "call_2", "content": "25"},
        {"role": "assistant", "content": "Paris 21, Rome 25."},
        {"role": "user", "content": "Thanks. And tomorrow?"}]},
    {"name": "agent_reasoning_tool", "tools": TOOLS, "messages": [
        {"role": "user", "content": "Find news on loom."},
        {"role": "assistant", "content": "",
         "reasoning_content": "I should search.",
         "tool_calls": [{"id": "call_9", "type": "function", "function": {
             "name": "search", "arguments": {"query": "loom news"}}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": "nothing new"}]},
    {"name": "multi_turn_thinking", "messages": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4"},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "<think>\nAdd again.\n</think>\n\n6"},
        {"role": "user", "content": "And 4+4?"}]},
    {"name": "multi_turn_reasoning_field", "messages": [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1", "reasoning_content": "R1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "A2", "reasoning_content": "R2"}],
     "add_generation_prompt": False},
    {"name": "no_thinking_tools", "tools": TOOLS,
     "extra": {"enable_thinking": False}, "messages": [
        {"role": "user", "content": "Weather in Oslo?"}]},
    {"name": "special_text_in_content", "messages": [
        {"role": "user",
         "content": "Say <|im_end|> then <think>hi</think> and <tool_call>"}]},
]

TEMPLATES = {
    # the checkpoint's own template
    "qwen3": ("qwen3", None),
    # a Nemotron-style template (TOOLCALL lists, a think block opened by the
    # generation prompt) on the tiny Nemotron tokenizer
    "nemotron_tools": ("nemotron-h-tiny", "chat_templates/nemotron_tools.jinja"),
}


def main():
    base, outfile = sys.argv[1], sys.argv[2]
    import tokenizers
    import transformers
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast
    out = {"made_by": "tokenizers %s, transformers %s" % (
        tokenizers.__version__, transformers.__version__), "templates": {}}
    for name, (tokdir, tplfile) in TEMPLATES.items():
        d = os.path.join(base, tokdir)
        cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
        tpl = open(os.path.join(base, tplfile)).read() if tplfile else cfg["chat_template"]
        raw = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        entry = {"tokenizer": tokdir, "template_file": tplfile, "renderings": []}
        try:
            tok = transformers.AutoTokenizer.from_pretrained(d)
            entry["loader"] = "AutoTokenizer " + type(tok).__name__
        except Exception as e:
            entry["autotokenizer_error"] = repr(e)
            tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"))
            for k in ("bos_token", "eos_token"):
                if isinstance(cfg.get(k), str):
                    setattr(tok, k, cfg[k])
            entry["loader"] = "PreTrainedTokenizerFast"
        for conv in CONVERSATIONS:
            r = {k: v for k, v in conv.items()}
            r.setdefault("add_generation_prompt", True)
            try:
                kw = dict(conv.get("extra", {}))
                if "tools" in conv:
                    kw["tools"] = conv["tools"]
                text = tok.apply_chat_template(
                    conv["messages"], tokenize=False, chat_template=tpl,
                    add_generation_prompt=r["add_generation_prompt"], **kw)
                r["rendered"] = text
                r["ids"] = raw.encode(text, add_special_tokens=False).ids
                t = tok.apply_chat_template(
                    conv["messages"], tokenize=True, chat_template=tpl,
                    add_generation_prompt=r["add_generation_prompt"], **kw)
                if hasattr(t, "keys") and "input_ids" in t:
                    t = t["input_ids"]
                if t and isinstance(t[0], list):
                    t = t[0]
                r["transformers_ids"] = list(t)
            except Exception as e:
                r["error"] = repr(e)
                r["traceback"] = traceback.format_exc()[-2000:]
            entry["renderings"].append(r)
        out["templates"][name] = entry
    with open(outfile, "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    print("wrote", outfile)


if __name__ == "__main__":
    main()
