#!/usr/bin/env bash
# The shipped trained model (models/kjv-qwen35) continues three prompts
# greedily exactly as transformers did (models/kjv-qwen35-samples.txt).
set -u
loom=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
model=$root/models/kjv-qwen35
samples=$root/models/kjv-qwen35-samples.txt
pass=0
fail=0
# The prompt of each of these samples is the text before its continuation;
# the other two samples' prompts are not recorded with them.
for prompt in "In the beginning" "And Jesus said unto them" "Blessed are the"; do
  ref=$(awk -v p="$prompt" 'BEGIN{RS="----\n"} index($0, p) == 1 {print; exit}' "$samples")
  got=$("$loom" run "$model" -p "$prompt" -n 48 --temperature 0 2>/dev/null)
  if [ -n "$got" ] && [ "${ref#"$prompt$got"}" != "$ref" ]; then
    echo "ok: '$prompt' continues as the reference does (${#got} chars)"
    pass=$((pass + 1))
  else
    echo "FAIL: '$prompt'"
    echo "  got: $got"
    echo "  ref: ${ref:0:300}"
    fail=$((fail + 1))
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
