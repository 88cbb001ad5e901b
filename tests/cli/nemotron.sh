#!/usr/bin/env bash
# The family-agnostic CLI on Nemotron-H checkpoints: `loom inspect` shows the
# geometry, `loom logits` matches the transformers logits, `loom run` gives
# the golden greedy ids (whole and chunked prompts, dense and MoE), and
# `loom bench --device cpu` prints its JSON line.
# Usage: nemotron.sh LOOM_EXE FIXTURES_DIR. Exit 77 without the plugin.
set -u
loom=$1
fixtures=$2
build=$(dirname "$loom")
. "$(dirname "$0")/lib.sh"
need_plugin nemotron
export LC_ALL=C
with_tmp

out=$("$loom" inspect "$fixtures/models/nemotron-h-tiny" 2>&1); rc=$?
check "inspect names the plugin and the pattern" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "nemotron" && echo "$out" | grep -q "M-M\*-"'

for m in nemotron-h-tiny nemotron-h-moe-tiny; do
  d=$fixtures/models/$m
  check_golden "$m" "$d"
done

out=$("$loom" bench "$fixtures/models/nemotron-h-moe-tiny" --device cpu --streams 1,3 --prompt 8 --gen 4 2>/dev/null); rc=$?
check "bench --device cpu prints one JSON line per stream count" \
  '[ $rc -eq 0 ] && [ "$(echo "$out" | grep -c "\"decode_tok_s\"")" -eq 2 ]'

finish
