#!/usr/bin/env bash
# The CLI on Qwen3.5-MoE checkpoints (both expert layouts): `loom inspect`
# shows the expert geometry, `loom logits` matches the transformers logits,
# `loom run` gives the golden greedy ids, whole and in prompt chunks.
# Usage: qwen35_moe.sh LOOM_EXE FIXTURES_DIR. Exit 77 without the plugin.
set -u
loom=$1
fixtures=$2
build=$(dirname "$loom")
. "$(dirname "$0")/lib.sh"
need_plugin qwen35
export LC_ALL=C
with_tmp

for m in qwen35-moe-tiny qwen35-moe-tiny-fused; do
  d=$fixtures/models/$m
  out=$("$loom" inspect "$d" 2>&1); rc=$?
  check "$m: inspect shows the expert geometry" \
    '[ $rc -eq 0 ] && echo "$out" | grep -q "variant *\"qwen3_5_moe\"" &&
     echo "$out" | grep -q "num_experts  *8" && echo "$out" | grep -q "num_experts_per_tok *3" &&
     echo "$out" | grep -q "moe_intermediate_size *32" &&
     echo "$out" | grep -q "shared_expert_intermediate_size *48" &&
     echo "$out" | grep -q "norm_topk_prob *1"'

  check_golden "$m" "$d"
done

finish
