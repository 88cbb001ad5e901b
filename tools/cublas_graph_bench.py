#!/usr/bin/env python3
"""The comparison rows of issue 14, measured on the GPU machine beside
`loom bench`: every projection of one Qwen3.5 decode step as a cuBLAS BF16
product (torch.nn.functional.linear), captured in one CUDA graph, nothing
else (no attention, no recurrence, no norms); then the same with the
products that share an input merged (GDN qkv+z+b+a, attention q+k+v,
gate+up). Geometry from tools/make_qwen35_bench.py, random weights made on
the device (no checkpoint needed).

Usage: cublas_graph_bench.py [--geometry 2b|9b] [--rows 1] [--iters 200]
Prints one line per variant: tok/s (steps per second times rows), the
weight bytes one step reads, and the bandwidth reached.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_qwen35_bench as mb  # noqa: E402


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def shapes(cfg, merged):
    """[(out_features, in_features)] of one step's products, in order."""
    H, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    Hk, Hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    cd = 2 * Hk * dk + Hv * dv
    out = []
    for i in range(cfg["num_hidden_layers"]):
        if (i + 1) % cfg["full_attention_interval"] == 0:
            qkv = [2 * nh * hd, nkv * hd, nkv * hd]
            out += [(sum(qkv), H)] if merged else [(r, H) for r in qkv]
            out.append((H, nh * hd))
        else:
            proj = [cd, Hv * dv, Hv, Hv]
            out += [(sum(proj), H)] if merged else [(r, H) for r in proj]
            out.append((H, Hv * dv))
        out += [(2 * F, H)] if merged else [(F, H), (F, H)]
        out.append((H, F))
    out.append((V, H))
    return out


def run(cfg, merged, rows, iters):
    dev = torch.device("cuda")
    torch.manual_seed(0)
    ws = [torch.randn(o, i, device=dev, dtype=torch.bfloat16) * i ** -0.5
          for o, i in shapes(cfg, merged)]
    width = max(max(w.shape) for w in ws)
    x = torch.randn(rows, width, device=dev, dtype=torch.bfloat16)
    outs = [None] * len(ws)

    def step():
        for k, w in enumerate(ws):
            outs[k] = torch.nn.functional.linear(x[:, : w.shape[1]], w)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    for _ in range(10):
        g.replay()
    torch.cuda.synchronize()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(iters):
        g.replay()
    t1.record()
    torch.cuda.synchronize()
    sec = t0.elapsed_time(t1) / 1e3 / iters
    nbytes = sum(w.numel() * 2 for w in ws)
    del ws
    torch.cuda.empty_cache()
    return rows / sec, nbytes, nbytes / sec


def main():
    geo = arg("--geometry", "2b")
    rows, iters = arg("--rows", 1), arg("--iters", 200)
    cfg = dict(mb.CONFIG)
    cfg.update(mb.GEOMETRIES[geo])
    for merged in (False, True):
        tps, nbytes, bw = run(cfg, merged, rows, iters)
        print("cublas-graph geometry=%s merged=%d rows=%d: %.1f tok/s, %.2f GB per step, "
              "%.2f TB/s (%.0f%% of 4.8)" % (geo, merged, rows, tps, nbytes / 1e9,
                                              bw / 1e12, 100 * bw / 4.8e12))


if __name__ == "__main__":
    main()
