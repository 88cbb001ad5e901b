#!/usr/bin/env python3
"""Write a checkpoint with Qwen3.5-0.8B's geometry (or 2B's, 9B's with
--geometry) and random BF16 weights, for measuring decode speed (`loom bench
DIR --device cpu|cuda`). Not a fixture: write it under /tmp and do not
commit it (about 1.5 GB for 0.8B, 4.5 GB for 2B, 19 GB for 9B).

Standard library only (no numpy/torch): each weight tensor is filled by
tiling a block of Gaussian values scaled by 1/sqrt(fan_in), starting at a
different offset per tensor, which is as good as fully random for timing
(the same bytes are read either way) and keeps every value finite.

With --affine4 every linear weight (embedding and lm_head included) is
MLX affine 4-bit instead, groups of 64: random 4-bit codes, BF16 scales and
biases chosen so that the weights are zero-mean with the BF16 path's spread.

Usage: make_qwen35_bench.py OUT_DIR [--geometry 0.8b|2b|9b] [--layers N]
                            [--vocab N] [--affine4]
(--layers and --vocab make smaller checkpoints of a geometry's products, as
tests/gpu does to hold the tensor-core products of real sizes to the CPU.)
"""
import argparse
import array
import json
import math
import os
import random
import struct

CONFIG = {
    "architectures": ["Qwen3_5ForCausalLM"],
    "model_type": "qwen3_5_text",
    "vocab_size": 248320,
    "hidden_size": 1024,
    "intermediate_size": 3584,
    "num_hidden_layers": 24,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 16,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4,
    "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                        "partial_rotary_factor": 0.25},
    "eos_token_id": 248044,
    "dtype": "bfloat16",
}

# docs/specs/qwen35.md 1.3: what differs from 0.8B at the larger sizes
GEOMETRIES = {
    "0.8b": {},
    "2b": {"hidden_size": 2048, "intermediate_size": 6144},
    "9b": {"hidden_size": 4096, "intermediate_size": 12288,
           "num_hidden_layers": 32, "num_attention_heads": 16,
           "num_key_value_heads": 4, "linear_num_value_heads": 32,
           "tie_word_embeddings": False},
}

BLOCK = 1 << 20  # values per random block


def bf16_block(rng, std, n):
    f = array.array("f", (rng.gauss(0.0, std) for _ in range(n)))
    b = f.tobytes()
    out = bytearray(len(b) // 2)
    out[0::2] = b[2::4]  # the upper half of each little-endian float32
    out[1::2] = b[3::4]
    return bytes(out)


def tensors(cfg):
    """(name, shape, kind) in file order; kind picks the fill."""
    H, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    Hk, Hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv, K = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], cfg["linear_conv_kernel_dim"]
    cd = 2 * Hk * dk + Hv * dv
    out = [("model.embed_tokens.weight", [V, H], "w"), ("model.norm.weight", [H], "zero")]
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", [V, H], "w"))
    every = cfg["full_attention_interval"]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out += [(p + "input_layernorm.weight", [H], "zero"),
                (p + "post_attention_layernorm.weight", [H], "zero")]
        if (i + 1) % every == 0:
            out += [(p + "self_attn.q_proj.weight", [2 * nh * hd, H], "w"),
                    (p + "self_attn.k_proj.weight", [nkv * hd, H], "w"),
                    (p + "self_attn.v_proj.weight", [nkv * hd, H], "w"),
                    (p + "self_attn.o_proj.weight", [H, nh * hd], "w"),
                    (p + "self_attn.q_norm.weight", [hd], "zero"),
                    (p + "self_attn.k_norm.weight", [hd], "zero")]
        else:
            out += [(p + "linear_attn.in_proj_qkv.weight", [cd, H], "w"),
                    (p + "linear_attn.in_proj_z.weight", [Hv * dv, H], "w"),
                    (p + "linear_attn.in_proj_b.weight", [Hv, H], "w"),
                    (p + "linear_attn.in_proj_a.weight", [Hv, H], "w"),
                    (p + "linear_attn.conv1d.weight", [cd, 1, K], "conv"),
                    (p + "linear_attn.A_log", [Hv], "alog"),
                    (p + "linear_attn.dt_bias", [Hv], "small"),
                    (p + "linear_attn.norm.weight", [dv], "one"),
                    (p + "linear_attn.out_proj.weight", [H, Hv * dv], "w")]
        out += [(p + "mlp.gate_proj.weight", [F, H], "w"),
                (p + "mlp.up_proj.weight", [F, H], "w"),
                (p + "mlp.down_proj.weight", [H, F], "w")]
    return out


def affine4(ts):
    """Each "w" tensor as its MLX affine-4 triple."""
    out = []
    for name, shape, kind in ts:
        if kind != "w":
            out.append((name, shape, kind))
            continue
        rows, cols = shape
        stem = name[: -len(".weight")]
        out += [(name, [rows, cols // 8], "q4:%d" % cols),
                (stem + ".scales", [rows, cols // 64], "scale:%d" % cols),
                (stem + ".biases", [rows, cols // 64], "bias:%d" % cols)]
    return out


def nbytes(shape, kind):
    return math.prod(shape) * (4 if kind.startswith("q4") else 2)


def main():
    ap = argparse.ArgumentParser(
        description="Write a random-weight Qwen3.5 checkpoint for loom bench.")
    ap.add_argument("out_dir")
    ap.add_argument("--geometry", choices=sorted(GEOMETRIES))
    ap.add_argument("--layers", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--affine4", action="store_true")
    args = ap.parse_args()
    out_dir = args.out_dir
    cfg = dict(CONFIG)
    if args.geometry:
        cfg.update(GEOMETRIES[args.geometry])
    if args.layers is not None:
        if args.layers < 1:
            ap.error("--layers: %d is not a positive count" % args.layers)
        cfg["num_hidden_layers"] = args.layers
    if args.vocab is not None:
        if args.vocab < 64 or args.vocab % 64:
            ap.error("--vocab: %d is not a positive multiple of 64" %
                     args.vocab)
        cfg["vocab_size"] = args.vocab
        cfg["eos_token_id"] = min(cfg["eos_token_id"], args.vocab - 1)
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(1234)
    quant = args.affine4
    ts = tensors(cfg)
    if quant:
        ts = affine4(ts)
        cfg["quantization"] = {"group_size": 64, "bits": 4}
    header, off = {}, 0
    for name, shape, kind in ts:
        n = nbytes(shape, kind)
        dt = "U32" if kind.startswith("q4") else "BF16"
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    blocks = {}
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        # the BF16 checkpoint draws nothing for it (its weights stay as they were)
        codes = bytes(rng.getrandbits(8) for _ in range(BLOCK)) if quant else b""
        for idx, (name, shape, kind) in enumerate(ts):
            n = math.prod(shape)
            if kind.startswith("q4"):
                # random codes 0..15: mean 7.5, spread 4.6 steps
                left = n * 4
                start = idx * 7919 % BLOCK
                f.write(codes[start:start + left])
                left -= min(left, BLOCK - start)
                while left > 0:
                    f.write(codes[:left])
                    left -= min(left, BLOCK)
                continue
            if kind.startswith("scale") or kind.startswith("bias"):
                std = 1.0 / math.sqrt(int(kind.split(":")[1]))
                step = std / 4.6
                v = step if kind.startswith("scale") else -7.5 * step
                f.write(bf16_block_vals([v]) * n)
                continue
            if kind == "w":
                std = 1.0 / math.sqrt(shape[-1])
                if std not in blocks:
                    blocks[std] = bf16_block(rng, std, BLOCK)
                blk = blocks[std]
                start = (idx * 7919 % BLOCK) * 2
                left = n * 2
                f.write(blk[start:start + left])
                left -= min(left, len(blk) - start)
                while left > 0:
                    f.write(blk[:left])
                    left -= min(left, len(blk))
            else:
                vals = {"zero": lambda: 0.0, "one": lambda: 1.0,
                        "conv": lambda: rng.gauss(0.0, 0.5),
                        "alog": lambda: math.log(rng.uniform(1.0, 8.0)),
                        "small": lambda: rng.uniform(-1.0, 1.0)}[kind]
                f.write(bf16_block_vals([vals() for _ in range(n)]))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print(out_dir, "written:", len(ts), "tensors,", off, "bytes of weights")


def bf16_block_vals(vals):
    b = array.array("f", vals).tobytes()
    out = bytearray(len(b) // 2)
    out[0::2] = b[2::4]
    out[1::2] = b[3::4]
    return bytes(out)


if __name__ == "__main__":
    main()
