#!/usr/bin/env python3
"""Write a Nemotron-H checkpoint with random BF16 weights for benchmarks.

Standard library only (no torch, no numpy). The widths are Nemotron-H-4B's
(hidden 3072, Mamba 112 heads x 64 with state 128 in 8 groups, attention
32/8 heads of 128, relu2 MLP 12288, vocab 131072); the depth is scaled down
to fit a small machine: `--layers 13` keeps the 4B's 24:4:24 mix of Mamba,
attention and MLP blocks as M-M-M*-M-M-M- (about 1.3 B parameters, 2.6 GB).
The numbers are meaningless; the shapes and bytes per token are real.

Usage: make_nemotron_bench.py OUT_DIR [--layers N] [--pattern STR]
(writes OUT_DIR/config.json and OUT_DIR/model.safetensors; put it in /tmp,
not in the repository).
"""
import argparse
import json
import math
import os
import random
import struct

GEOMETRY = {
    "hidden_size": 3072,
    "mamba_num_heads": 112,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 12288,
    "vocab_size": 131072,
}


def bf16(x):
    return struct.unpack("<I", struct.pack("<f", x))[0] >> 16


class Writer:
    """Collects tensors (name, shape, a function writing its bytes) and then
    writes a safetensors file: header first, data in the same order."""

    def __init__(self):
        self.items = []

    def add(self, name, shape, fill):
        self.items.append((name, shape, fill))

    def write(self, path):
        header, off = {}, 0
        for name, shape, _ in self.items:
            n = 2 * math.prod(shape)
            header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
            off += n
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)))
            f.write(h)
            for name, shape, fill in self.items:
                fill(f, math.prod(shape))
        return off


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=13)
    ap.add_argument("--pattern", default=None)
    args = ap.parse_args()
    g = GEOMETRY
    pattern = args.pattern or ("M-M-M*-M-M-M-" * 8)[: args.layers]
    os.makedirs(args.out, exist_ok=True)

    rng = random.Random(1)
    # a pool of N(0, 1/sqrt(hidden)) bf16 values; tensors are cut from it at
    # random offsets (fast in pure Python, and never NaN or subnormal)
    std = 1.0 / math.sqrt(g["hidden_size"])
    pool_n = 1 << 21
    pool = struct.pack(f"<{pool_n}H", *(bf16(rng.gauss(0.0, std)) for _ in range(pool_n)))

    def randn(f, n):
        left = 2 * n
        while left:
            off = 2 * rng.randrange(pool_n // 2)
            take = min(left, len(pool) - off)
            f.write(pool[off:off + take])
            left -= take

    def const(v):
        word = struct.pack("<H", bf16(v))
        return lambda f, n: f.write(word * n)

    def values(fn):
        return lambda f, n: f.write(struct.pack(f"<{n}H", *(bf16(fn(i)) for i in range(n))))

    H, nh, P, N, ng, K = (g[k] for k in ("hidden_size", "mamba_num_heads", "mamba_head_dim",
                                          "ssm_state_size", "n_groups", "conv_kernel"))
    d_inner = nh * P
    conv_dim = d_inner + 2 * ng * N
    nq, nkv, hd, inter, V = (g[k] for k in ("num_attention_heads", "num_key_value_heads",
                                             "head_dim", "intermediate_size", "vocab_size"))
    w = Writer()
    w.add("backbone.embeddings.weight", [V, H], randn)
    for i, kind in enumerate(pattern):
        p = f"backbone.layers.{i}."
        w.add(p + "norm.weight", [H], const(1.0))
        m = p + "mixer."
        if kind == "M":
            w.add(m + "in_proj.weight", [2 * d_inner + 2 * ng * N + nh, H], randn)
            w.add(m + "conv1d.weight", [conv_dim, 1, K], values(lambda i: rng.uniform(-0.5, 0.5)))
            w.add(m + "conv1d.bias", [conv_dim], values(lambda i: rng.uniform(-0.1, 0.1)))
            w.add(m + "A_log", [nh], values(lambda i: math.log(1 + i % 16)))
            w.add(m + "D", [nh], const(1.0))
            w.add(m + "dt_bias", [nh], values(lambda i: rng.uniform(-4.0, -2.0)))
            w.add(m + "norm.weight", [d_inner], const(1.0))
            w.add(m + "out_proj.weight", [H, d_inner], randn)
        elif kind == "*":
            w.add(m + "q_proj.weight", [nq * hd, H], randn)
            w.add(m + "k_proj.weight", [nkv * hd, H], randn)
            w.add(m + "v_proj.weight", [nkv * hd, H], randn)
            w.add(m + "o_proj.weight", [H, nq * hd], randn)
        elif kind == "-":
            w.add(m + "up_proj.weight", [inter, H], randn)
            w.add(m + "down_proj.weight", [H, inter], randn)
        else:
            raise SystemExit(f"pattern letter {kind!r}: only M * - here")
    w.add("backbone.norm_f.weight", [H], const(1.0))
    w.add("lm_head.weight", [V, H], randn)
    total = w.write(os.path.join(args.out, "model.safetensors"))

    cfg = dict(g)
    cfg.update({
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        "hybrid_override_pattern": pattern,
        "num_hidden_layers": len(pattern),
        "mamba_hidden_act": "silu",
        "mlp_hidden_act": "relu2",
        "use_conv_bias": True,
        "use_bias": False,
        "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": False,
        "max_position_embeddings": 8192,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    })
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    # bytes a decode step reads: every weight except the embedding table
    # (one row of it)
    per_tok = total - 2 * V * H + 2 * H
    print(json.dumps({"dir": args.out, "pattern": pattern, "bytes": total,
                      "weight_bytes_per_token": per_tok}))


if __name__ == "__main__":
    main()
