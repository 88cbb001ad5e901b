#!/usr/bin/env python3
"""Make the qwen35-ref2 reference checkpoint with Hugging Face transformers.

A second Qwen3.5 text geometry that the stock fixtures do not cover: a
full-attention layer first, head_dim 64 with partial_rotary_factor 0.5 inside
rope_parameters (while the top-level key keeps transformers' 0.25, so the
engine must read the nested one), GQA 6 query / 2 KV heads, and two linear key
heads each serving three value heads (Hv/Hk = 3) with dv != dk.

Random weights rounded to BF16 and saved in BF16; the reference runs in
float32 from those same weights, as the shared fixture generator does:
  golden.json  prompt ids, greedy continuation through the cache, margins
  logits.f32   float32 [T, vocab], logits at every prompt position
  hidden.f32   float32 [T, hidden], final-norm hidden states
With --debug it also writes, for each extra checkpoint directory given, every
layer's output (float32 [L+1, T, hidden]) for comparing an engine layer by
layer; those are not fixtures.

Usage: make_qwen35_ref.py OUT_DIR [--debug CKPT_DIR ...]
Runs where torch and transformers are installed (the GPU machine).
"""
import copy
import json
import os
import sys

import torch

from refs_common import greedy_reference, randomize, write_f32

SPEC = {
    "name": "qwen35-ref2",
    "seed": 2027,
    "prompt_len": 20,
    "gen": 10,
    "config": {
        "vocab_size": 320,
        "hidden_size": 96,
        "intermediate_size": 224,
        "num_hidden_layers": 5,
        "layer_types": ["full_attention", "linear_attention", "linear_attention",
                        "full_attention", "linear_attention"],
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 6,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 24,
        "linear_conv_kernel_dim": 4,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                            "partial_rotary_factor": 0.5},
        "eos_token_id": [1, 2],
        "bos_token_id": 0,
    },
}


def make_ref2(out_root):
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(SPEC["seed"])
    model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**SPEC["config"]))
    randomize(model, SPEC["seed"])
    model = model.to(torch.float32).eval()
    out = os.path.join(out_root, SPEC["name"])
    os.makedirs(out, exist_ok=True)
    # the saved copy is BF16; the float32 model keeps float32 RoPE frequencies
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)

    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(SPEC["seed"] + 1)
    ids = torch.randint(0, vocab, (1, SPEC["prompt_len"]), generator=g)
    full, gen, margins, agrees = greedy_reference(model, ids, SPEC["gen"])
    logits, hidden = full.logits[0], full.hidden_states[-1][0]
    write_f32(os.path.join(out, "logits.f32"), logits)
    write_f32(os.path.join(out, "hidden.f32"), hidden)
    golden = {
        "made_by": "tools/make_qwen35_ref.py: transformers %s, torch %s, float32 from the bf16 weights"
                   % (__import__("transformers").__version__, torch.__version__),
        "family": "qwen35_text",
        "prompt_ids": ids[0].tolist(),
        "logits": {"file": "logits.f32", "shape": list(logits.shape)},
        "hidden": {"file": "hidden.f32", "shape": list(hidden.shape)},
        "greedy": gen,
        "greedy_top2_margin": margins,
        "greedy_without_cache_agrees": agrees,
    }
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": [1, 2]}, f, indent=1)
    print(SPEC["name"], "ok", list(logits.shape), "min margin %.4f" % min(margins),
          "nocache agrees", agrees)


def dump_layers(out_root, ckpt):
    """Every decoder layer's output for the checkpoint's golden prompt."""
    from transformers import AutoModelForCausalLM, AutoConfig

    cfg = AutoConfig.from_pretrained(ckpt)
    if getattr(cfg, "model_type", "") == "qwen3_5":
        from transformers import Qwen3_5ForConditionalGeneration as cls
    else:
        cls = AutoModelForCausalLM
    model = cls.from_pretrained(ckpt, torch_dtype=torch.float32).eval()
    ids = torch.tensor([json.load(open(os.path.join(ckpt, "golden.json")))["prompt_ids"]])
    with torch.no_grad():
        o = model(input_ids=ids, output_hidden_states=True, use_cache=False)
    hs = torch.stack([h[0] for h in o.hidden_states])
    name = os.path.basename(os.path.normpath(ckpt))
    write_f32(os.path.join(out_root, name + "_layers.f32"), hs)
    print(name, "layers", list(hs.shape))


if __name__ == "__main__":
    out_root = sys.argv[1]
    make_ref2(out_root)
    if len(sys.argv) > 2 and sys.argv[2] == "--debug":
        for d in sys.argv[3:] + [os.path.join(out_root, SPEC["name"])]:
            try:
                dump_layers(out_root, d)
            except Exception as e:  # debugging aid only: never fail the fixture
                print("debug dump failed for", d, ":", e)
