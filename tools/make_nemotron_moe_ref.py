#!/usr/bin/env python3
"""Make the Nemotron-H MoE reference fixture (tests/fixtures/models/nemotron-h-moe-tiny).

Runs where torch and transformers are installed (the GPU machine has both; the
model runs on its CPU in float32). It builds transformers' NemotronHForCausalLM
with MoE ('E') blocks and random weights, saves it as a BF16 checkpoint
directory, and writes what transformers computes for it, in float32 from the
same BF16 weights, in the same format as the shared fixtures:

  golden.json    prompt ids, greedy continuation through the cache (with the
                 top-2 margin of each step), shapes, file names
  logits.f32     little-endian float32 [T, vocab]: logits at every prompt
                 position from one full-sequence forward
  hidden.f32     little-endian float32 [T, hidden]: final-norm hidden states
  blocks.f32     little-endian float32 [L+1, T, hidden]: the embeddings and the
                 output of every block (for layer-by-layer debugging)

The geometry differs from nemotron-h-tiny on purpose: two MoE blocks with
group-limited routing (n_group 2, topk_group 1), a non-zero
e_score_correction_bias (so selection and weighting differ), routed scaling,
a shared expert, no conv bias, in/out projection biases (use_bias), 2 heads
per B/C group, one KV head, and tie_word_embeddings. (transformers 5.17 does
not tie NemotronH's head: the script copies the embeddings into lm_head, so
the saved lm_head.weight equals the table and either reading is right.)

Usage: make_nemotron_moe_ref.py OUT_DIR
"""
import copy
import json
import os
import struct
import sys

import torch

from refs_common import bf16_exact, greedy_reference, write_f32

CONFIG = {
    "vocab_size": 512,
    "hidden_size": 64,
    "layers_block_type": ["linear_attention", "moe", "full_attention",
                          "linear_attention", "moe", "mlp"],
    "mamba_num_heads": 8,
    "mamba_head_dim": 8,
    "n_groups": 4,
    "ssm_state_size": 16,
    "conv_kernel": 4,
    "chunk_size": 8,
    "use_conv_bias": False,
    "use_bias": True,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "intermediate_size": 96,
    "n_routed_experts": 8,
    "num_experts_per_tok": 3,
    "moe_intermediate_size": 32,
    "moe_shared_expert_intermediate_size": 48,
    "n_shared_experts": 1,
    "n_group": 2,
    "topk_group": 1,
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    "tie_word_embeddings": True,
    "layer_norm_epsilon": 1e-5,
    "max_position_embeddings": 4096,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}
SEED = 11
PROMPT_LEN = 24
GEN = 12


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.empty(p.shape).uniform_(1.0, 8.0, generator=g)))
            elif name.endswith("dt_bias"):
                p.copy_(torch.empty(p.shape).uniform_(-1.0, 1.0, generator=g))
            elif name.endswith(".D"):
                p.copy_(torch.empty(p.shape).uniform_(0.5, 1.5, generator=g))
            elif "norm" in name and p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            p.copy_(bf16_exact(p))
        # the selection-only bias is a buffer, zero by default: give it a spread
        # comparable to the sigmoid scores so that it changes which experts win
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(bf16_exact(0.3 * torch.randn(b.shape, generator=g)))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    from transformers import NemotronHConfig, NemotronHForCausalLM

    torch.manual_seed(SEED)
    model = NemotronHForCausalLM(NemotronHConfig(**CONFIG))
    randomize(model, SEED)
    emb = model.get_input_embeddings().weight
    if CONFIG["tie_word_embeddings"] and model.lm_head.weight.data_ptr() != emb.data_ptr():
        print("lm_head was not tied: copying the embeddings into it")
        with torch.no_grad():
            model.lm_head.weight.copy_(emb)
    model = model.to(torch.float32).eval()
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)

    g = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(0, CONFIG["vocab_size"], (1, PROMPT_LEN), generator=g)
    full, gen, margins, agrees = greedy_reference(model, ids, GEN)
    logits = full.logits[0]
    hidden = full.hidden_states[-1][0]
    blocks = torch.stack([h[0] for h in full.hidden_states])
    write_f32(os.path.join(out, "logits.f32"), logits)
    write_f32(os.path.join(out, "hidden.f32"), hidden)
    write_f32(os.path.join(out, "blocks.f32"), blocks)
    golden = {
        "made_by": f"tools/make_nemotron_moe_ref.py: transformers {__import__('transformers').__version__}, "
                   f"torch {torch.__version__}, float32 from the bf16 weights",
        "family": "nemotron_h",
        "prompt_ids": ids[0].tolist(),
        "logits": {"file": "logits.f32", "shape": list(logits.shape)},
        "hidden": {"file": "hidden.f32", "shape": list(hidden.shape)},
        "blocks": {"file": "blocks.f32", "shape": list(blocks.shape)},
        "greedy": gen,
        "greedy_top2_margin": margins,
        "greedy_without_cache_agrees": agrees,
    }
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    # what was saved, to check the names the plugin binds
    with open(os.path.join(out, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    for k in sorted(header):
        if k != "__metadata__":
            print(k, header[k]["dtype"], header[k]["shape"])
    print("hidden_states", len(full.hidden_states), "min margin %.4f" % min(margins),
          "nocache agrees", agrees)


if __name__ == "__main__":
    main()
