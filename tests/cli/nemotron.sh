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
fail=0
pass=0
check() { # name, condition (a command)
  if eval "$2"; then echo "ok: $1"; pass=$((pass + 1)); else echo "FAIL: $1"; fail=$((fail + 1)); fi
}
if [ ! -e "$build/plugins/libloom-nemotron.so" ]; then
  echo "nemotron plugin not built: skipped"; exit 77
fi
export LC_ALL=C
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

out=$("$loom" inspect "$fixtures/models/nemotron-h-tiny" 2>&1); rc=$?
check "inspect names the plugin and the pattern" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "nemotron" && echo "$out" | grep -q "M-M\*-"'

for m in nemotron-h-tiny nemotron-h-moe-tiny; do
  d=$fixtures/models/$m
  flat=$(tr -d ' \n' < "$d/golden.json")
  prompt=$(echo "$flat" | sed -n 's/.*"prompt_ids":\[\([0-9,]*\)\].*/\1/p')
  greedy=$(echo "$flat" | sed -n 's/.*"greedy":\[\([0-9,]*\)\].*/\1/p')
  n=$(echo "$greedy" | tr ',' '\n' | wc -l)
  want="[$(echo "$greedy" | sed 's/,/, /g')]"

  "$loom" logits "$d" --ids "$prompt" --out "$tmp/l.f32" --threads 1 >/dev/null 2>&1; rc=$?
  check "$m: logits has the reference's size" \
    '[ $rc -eq 0 ] && [ "$(stat -c %s "$tmp/l.f32")" = "$(stat -c %s "$d/logits.f32")" ]'
  # max |diff| / max |ref| with od and awk: both files as float32 columns
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

out=$("$loom" bench "$fixtures/models/nemotron-h-moe-tiny" --device cpu --streams 1,3 --prompt 8 --gen 4 2>/dev/null); rc=$?
check "bench --device cpu prints one JSON line per stream count" \
  '[ $rc -eq 0 ] && [ "$(echo "$out" | grep -c "\"decode_tok_s\"")" -eq 2 ]'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
