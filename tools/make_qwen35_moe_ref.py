#!/usr/bin/env python3
"""Make the Qwen3.5-MoE reference fixtures (tests/fixtures/models/qwen35-moe-tiny
and qwen35-moe-tiny-fused) with Hugging Face transformers.

Runs where torch and transformers are installed (the GPU machine has both; the
model runs on its CPU in float32). It builds transformers' Qwen3_5MoeForCausalLM
(model_type qwen3_5_moe_text) with random weights: Gated DeltaNet and gated
attention layers, every layer a sparse MoE block (router, top-k experts,
shared expert behind a sigmoid gate). The BF16 checkpoint is saved by
save_pretrained in whichever expert layout transformers writes, and the same
tensors are rewritten in the other layout:

  qwen35-moe-tiny        one tensor per expert: mlp.experts.N.{gate,up,down}_proj.weight
  qwen35-moe-tiny-fused  3-D tensors: mlp.experts.gate_up_proj [E, 2*I, H]
                         (gate rows first) and mlp.experts.down_proj [E, H, I]

Both directories get what transformers computes, in float32 from the BF16
weights, in the format of the shared fixtures:
  golden.json  prompt ids, greedy continuation through the cache, top-2
               margins, the smallest routing gap (k-th minus (k+1)-th router
               probability over every row and layer), and the largest logit
               difference when transformers loads each saved directory back
  logits.f32   float32 [T, vocab], logits at every prompt position
  hidden.f32   float32 [T, hidden], final-norm hidden states

Usage: make_qwen35_moe_ref.py OUT_DIR [SOURCE_DUMP]
SOURCE_DUMP, when given, receives the source of transformers' Qwen3.5-MoE
router, experts and MoE block (what the engine must match).
"""
import copy
import inspect
import json
import os
import re
import shutil
import sys
import traceback

import torch

from refs_common import greedy_reference, randomize, write_f32

PER_EXPERT = "qwen35-moe-tiny"
FUSED = "qwen35-moe-tiny-fused"
SEED = 35
PROMPT_LEN = 24
GEN = 12
CONFIG = {
    "vocab_size": 512,  # the vocabulary of qwen35-tiny's tokenizer
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "full_attention", "linear_attention",
                    "linear_attention"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_conv_kernel_dim": 4,
    "num_experts": 8,
    "num_experts_per_tok": 3,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 48,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                        "partial_rotary_factor": 0.25},
    "bos_token_id": 0,
    "eos_token_id": 1,
}


PER_RE = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")
FUSED_RE = re.compile(r"^(.*\.mlp\.experts)\.(gate_up_proj|down_proj)$")


def to_fused(tensors, n_experts, inter):
    out, groups = {}, {}
    for k, v in tensors.items():
        m = PER_RE.match(k)
        if not m:
            out[k] = v
            continue
        groups.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = v
    for base, d in groups.items():
        out[base + ".gate_up_proj"] = torch.stack(
            [torch.cat([d[(e, "gate")], d[(e, "up")]], 0) for e in range(n_experts)]).contiguous()
        out[base + ".down_proj"] = torch.stack([d[(e, "down")] for e in range(n_experts)]).contiguous()
    return out


def to_per_expert(tensors, n_experts, inter):
    out = {}
    for k, v in tensors.items():
        m = FUSED_RE.match(k)
        if not m:
            out[k] = v
            continue
        for e in range(n_experts):
            if m.group(2) == "gate_up_proj":
                out[f"{m.group(1)}.{e}.gate_proj.weight"] = v[e, :inter].contiguous()
                out[f"{m.group(1)}.{e}.up_proj.weight"] = v[e, inter:].contiguous()
            else:
                out[f"{m.group(1)}.{e}.down_proj.weight"] = v[e].contiguous()
    return out


def dump_sources(path):
    import transformers.models.qwen3_5_moe.modeling_qwen3_5_moe as mm
    with open(path, "w") as f:
        for name in ["Qwen3_5MoeTopKRouter", "Qwen3_5MoeExperts", "Qwen3_5MoeSparseMoeBlock",
                     "Qwen3_5MoeDecoderLayer", "Qwen3_5MoeMLP"]:
            try:
                f.write(f"# ---- {name}\n{inspect.getsource(getattr(mm, name))}\n")
            except Exception as e:
                f.write(f"# ---- {name}: {e}\n")
        try:
            import transformers.conversion_mapping as cm
            src = inspect.getsource(cm)
            f.write("# ---- conversion_mapping lines naming qwen3_5 / qwen3_next / experts\n")
            for i, line in enumerate(src.splitlines()):
                if re.search(r"qwen3_5|qwen3_next|qwen2_moe|gate_up_proj", line):
                    f.write(f"{i}: {line}\n")
        except Exception as e:
            f.write(f"# conversion_mapping: {e}\n")


def main():
    out_root = sys.argv[1]
    os.makedirs(out_root, exist_ok=True)
    if len(sys.argv) > 2:
        try:
            dump_sources(sys.argv[2])
        except Exception:
            traceback.print_exc()
    from safetensors.torch import load_file, save_file
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    torch.manual_seed(SEED)
    try:
        conf = Qwen3_5MoeTextConfig(**CONFIG)
    except Exception:
        import dataclasses
        print("config fields:", [f.name for f in dataclasses.fields(Qwen3_5MoeTextConfig)])
        raise
    model = Qwen3_5MoeForCausalLM(conf)
    randomize(model, SEED)
    model = model.to(torch.float32).eval()
    E, I, K = CONFIG["num_experts"], CONFIG["moe_intermediate_size"], CONFIG["num_experts_per_tok"]

    # the smallest gap between the k-th and (k+1)-th router probability seen
    gaps = []

    def router_hook(mod, args):
        try:
            x = args[0].reshape(-1, CONFIG["hidden_size"]).to(torch.float32)
            p = torch.softmax(torch.nn.functional.linear(x, mod.weight.to(torch.float32)), dim=-1)
            s = torch.sort(p, dim=-1, descending=True).values
            gaps.append(float((s[:, K - 1] - s[:, K]).min()))
        except Exception as e:  # a diagnostic only: never break the forward
            print("router hook:", e)

    for layer in model.model.layers:
        layer.mlp.gate.register_forward_pre_hook(router_hook)

    tmp = os.path.join(out_root, "_native")
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(tmp, safe_serialization=True)
    tensors = load_file(os.path.join(tmp, "model.safetensors"))
    native_fused = any(FUSED_RE.match(k) for k in tensors)
    print("save_pretrained wrote", "fused" if native_fused else "per-expert", "experts;",
          len(tensors), "tensors")
    layouts = {
        PER_EXPERT: to_per_expert(tensors, E, I) if native_fused else tensors,
        FUSED: tensors if native_fused else to_fused(tensors, E, I),
    }
    for name, t in layouts.items():
        d = os.path.join(out_root, name)
        os.makedirs(d, exist_ok=True)
        save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        for f in ("config.json", "generation_config.json"):
            if os.path.exists(os.path.join(tmp, f)):
                shutil.copy(os.path.join(tmp, f), os.path.join(d, f))
        for k in sorted(t):
            if ".layers.0." in k or ".layers." not in k:
                print(name, k, str(t[k].dtype), list(t[k].shape))
    print(open(os.path.join(tmp, "config.json")).read())
    shutil.rmtree(tmp)

    vocab = CONFIG["vocab_size"]
    g = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(0, vocab, (1, PROMPT_LEN), generator=g)
    full, gen, margins, agrees = greedy_reference(model, ids, GEN)
    logits, hidden = full.logits[0], full.hidden_states[-1][0]

    # each saved directory, loaded back by transformers, must compute the same
    reload = {}
    for name in layouts:
        try:
            res = Qwen3_5MoeForCausalLM.from_pretrained(os.path.join(out_root, name),
                                                        dtype=torch.float32,
                                                        output_loading_info=True)
            m2, info = res if isinstance(res, tuple) else (res, {})
            with torch.no_grad():
                l2 = m2.eval()(input_ids=ids, use_cache=False).logits[0]
            reload[name] = {"max_abs_logit_diff": float((l2 - logits).abs().max()),
                            "missing_keys": sorted(info.get("missing_keys", [])),
                            "unexpected_keys": sorted(info.get("unexpected_keys", []))}
        except Exception as e:
            traceback.print_exc()
            reload[name] = {"error": repr(e)}
        print("reload", name, reload[name])

    for name in layouts:
        d = os.path.join(out_root, name)
        write_f32(os.path.join(d, "logits.f32"), logits)
        write_f32(os.path.join(d, "hidden.f32"), hidden)
        golden = {
            "made_by": "tools/make_qwen35_moe_ref.py: transformers %s, torch %s, float32 from the bf16 weights"
                       % (__import__("transformers").__version__, torch.__version__),
            "family": "qwen35_moe_text",
            "expert_layout": "fused" if name == FUSED else "per_expert",
            "saved_natively": (name == FUSED) == native_fused,
            "prompt_ids": ids[0].tolist(),
            "logits": {"file": "logits.f32", "shape": list(logits.shape)},
            "hidden": {"file": "hidden.f32", "shape": list(hidden.shape)},
            "greedy": gen,
            "greedy_top2_margin": margins,
            "greedy_without_cache_agrees": agrees,
            "min_routing_gap": min(gaps) if gaps else None,
            "transformers_reload": reload[name],
        }
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(golden, f, indent=1)
    print("ok", list(logits.shape), "min margin %.4f" % min(margins), "min routing gap", min(gaps) if gaps else None,
          "nocache agrees", agrees)


if __name__ == "__main__":
    main()
