#!/usr/bin/env bash
# The CLI on Qwen3.5-MoE checkpoints (both expert layouts): `loom inspect`
# shows the expert geometry, `loom logits` matches the transformers logits,
# `loom run` gives the golden greedy ids, whole and in prompt chunks.
# Usage: qwen35_moe.sh LOOM_EXE FIXTURES_DIR. Exit 77 without the plugin.
set -u
loom=$1
fixtures=$2
build=$(dirname "$loom")
fail=0
pass=0
check() { # name, condition (a command)
  if eval "$2"; then echo "ok: $1"; pass=$((pass + 1)); else echo "FAIL: $1"; fail=$((fail + 1)); fi
}
if [ ! -e "$build/plugins/libloom-qwen35.so" ]; then
  echo "qwen35 plugin not built: skipped"; exit 77
fi
export LC_ALL=C
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for m in qwen35-moe-tiny qwen35-moe-tiny-fused; do
  d=$fixtures/models/$m
  out=$("$loom" inspect "$d" 2>&1); rc=$?
  check "$m: inspect shows the expert geometry" \
    '[ $rc -eq 0 ] && echo "$out" | grep -q "variant *\"qwen3_5_moe\"" &&
     echo "$out" | grep -q "num_experts  *8" && echo "$out" | grep -q "num_experts_per_tok *3" &&
     echo "$out" | grep -q "moe_intermediate_size *32" &&
     echo "$out" | grep -q "shared_expert_intermediate_size *48" &&
     echo "$out" | grep -q "norm_topk_prob *1"'

  flat=$(tr -d ' \n' < "$d/golden.json")
  prompt=$(echo "$flat" | sed -n 's/.*"prompt_ids":\[\([0-9,]*\)\].*/\1/p')
  greedy=$(echo "$flat" | sed -n 's/.*"greedy":\[\([0-9,]*\)\].*/\1/p')
  n=$(echo "$greedy" | tr ',' '\n' | wc -l)
  want="[$(echo "$greedy" | sed 's/,/, /g')]"

  "$loom" logits "$d" --ids "$prompt" --out "$tmp/l.f32" --threads 1 >/dev/null 2>&1; rc=$?
  check "$m: logits has the reference's size" \
    '[ $rc -eq 0 ] && [ "$(stat -c %s "$tmp/l.f32")" = "$(stat -c %s "$d/logits.f32")" ]'
  od -An -v -f -w4 "$tmp/l.f32" > "$tmp/a"
  od -An -v -f -w4 "$d/logits.f32" > "$tmp/b"
  rel=$(paste "$tmp/a" "$tmp/b" | awk '{d=$1-$2; if(d<0)d=-d; if(d>md)md=d; r=$2; if(r<0)r=-r; if(r>mr)mr=r} END{printf "%g", md/mr}')
  check "$m: logits within 1e-4 of transformers (rel $rel)" \
    'awk -v r="$rel" "BEGIN{exit !(r < 1e-4)}"'

  out=$("$loom" run "$d" --ids "$prompt" -n "$n" --temperature 0 --ignore-eos --print-ids --threads 2 2>/dev/null)
  check "$m: run --print-ids equals the golden greedy" '[ "$out" = "$want" ]'
  out=$("$loom" run "$d" --ids "$prompt" -n "$n" --temperature 0 --ignore-eos --print-ids --prefill-chunk 5 2>/dev/null)
  check "$m: prompt chunks of 5 give the same ids" '[ "$out" = "$want" ]'
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
