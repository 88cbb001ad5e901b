#!/usr/bin/env python3
"""Oracle drafter checkpoints for `loom bench --drafter` (tests/plugins/
tp_oracle_drafter.c): recomputes bench's prompt of its first stream count
(seed 1), takes the model's greedy continuation from `loom run --print-ids`,
and writes OUT/oracleK (every K-th proposal wrong: mean acceptance ~K).

  tools/spec_oracle_bench.py build/loom models/kjv-qwen35 /tmp/oracles
  build/loom bench models/kjv-qwen35 --streams 1 --prompt 64 --gen 256 \
      --plugin-path build/test-plugins --drafter /tmp/oracles/oracle4
"""
import json, os, subprocess, sys

loom, model, out = sys.argv[1:4]
P, G = 64, 256
vocab = json.load(open(os.path.join(model, "config.json")))
vocab = vocab.get("text_config", vocab)["vocab_size"]
x, prompt = 1, []  # cmd_bench.c's generator, seed 1
for _ in range(P):
    x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
    prompt.append((x >> 33) % vocab)
ids = json.loads(subprocess.run(
    [loom, "run", model, "--ids", ",".join(map(str, prompt)), "--print-ids",
     "--temperature", "0", "-n", str(G), "--ignore-eos", "--device", "cpu"],
    capture_output=True, text=True, check=True).stdout)
for k in (1, 4, 8):
    d = os.path.join(out, "oracle%d" % k)
    os.makedirs(d, exist_ok=True)
    json.dump({"architectures": ["LoomOracleDrafter"], "wrong_every": k,
               "wrong": "period", "block_size": 16,
               "sequences": [prompt + ids]},
              open(os.path.join(d, "config.json"), "w"))
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(bytes([2, 0, 0, 0, 0, 0, 0, 0]) + b"{}")
    print(d)
