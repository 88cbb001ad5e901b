#!/usr/bin/env bash
# `loom logits` as a user runs it: the file is float32 [T, vocab] and agrees
# with the transformers reference of the fixture, the same bytes whatever
# the thread count, and bad invocations fail with a message.
set -u
loom=$1
fixtures=$2
build=$(dirname "$loom")
. "$(dirname "$0")/lib.sh"
need_plugin qwen35
with_tmp

for m in qwen35-tiny qwen35-ref2; do
  q=$fixtures/models/$m
  flat=$(tr -d ' \n' < "$q/golden.json")
  prompt=$(echo "$flat" | sed -n 's/.*"prompt_ids":\[\([0-9,]*\)\].*/\1/p')
  shape=$(echo "$flat" | sed -n 's/.*"logits":{"file":"logits.f32","shape":\[\([0-9,]*\)\].*/\1/p')
  t=${shape%,*}
  v=${shape#*,}
  "$loom" logits "$q" --ids "$prompt" --out "$tmp/$m.f32" --threads 2 2>"$tmp/err"; rc=$?
  size=$(wc -c < "$tmp/$m.f32" 2>/dev/null || echo 0)
  check "$m: writes [$t, $v] float32" '[ $rc -eq 0 ] && [ "$size" -eq $((t * v * 4)) ]'
  "$loom" logits "$q" --ids "$prompt" --out "$tmp/$m.1.f32" --threads 1 2>/dev/null
  check "$m: the same bytes with one thread" 'cmp -s "$tmp/$m.f32" "$tmp/$m.1.f32"'
  if command -v python3 >/dev/null; then
    rel=$(python3 - "$tmp/$m.f32" "$q/logits.f32" <<'PY'
import struct, sys
a, r = (open(p, "rb").read() for p in sys.argv[1:3])
a = struct.unpack("<%df" % (len(a) // 4), a)
r = struct.unpack("<%df" % (len(r) // 4), r)
print(max(abs(x - y) for x, y in zip(a, r)) / max(abs(y) for y in r) if len(a) == len(r) else 1)
PY
)
    check "$m: within 1e-4 of transformers ($rel)" 'python3 -c "import sys; sys.exit(0 if $rel < 1e-4 else 1)"'
  fi
done

q=$fixtures/models/qwen35-tiny
"$loom" logits --help >"$tmp/help" 2>&1; rc=$?
check "--help exits 0 and shows the usage" '[ $rc -eq 0 ] && grep -q "usage: loom logits" "$tmp/help"'
"$loom" logits "$q" --out "$tmp/x.f32" 2>/dev/null; rc=$?
check "no --ids: usage error" '[ $rc -eq 2 ]'
"$loom" logits "$q" --ids 1,2 2>/dev/null; rc=$?
check "no --out: usage error" '[ $rc -eq 2 ]'
"$loom" logits "$q" --ids 1,x --out "$tmp/x.f32" 2>/dev/null; rc=$?
check "bad id list: usage error" '[ $rc -eq 2 ]'
"$loom" logits "$q" --ids "" --out "$tmp/x.f32" 2>"$tmp/err"; rc=$?
check "empty id list: usage error" '[ $rc -eq 2 ] && grep -q "empty" "$tmp/err"'
"$loom" logits "$q" --ids 1 --out 2>/dev/null; rc=$?
check "--out without a value: usage error" '[ $rc -eq 2 ]'
"$loom" logits "$q" --ids 1,2 --out "$tmp/x.f32" --bogus 2>/dev/null; rc=$?
check "unknown option: usage error" '[ $rc -eq 2 ]'
"$loom" logits "$tmp/nonexistent" --ids 1,2 --out "$tmp/x.f32" 2>"$tmp/err"; rc=$?
check "missing model: exit 1 with a message" '[ $rc -eq 1 ] && [ -s "$tmp/err" ]'
"$loom" logits "$q" --ids 1,600 --out "$tmp/x.f32" 2>"$tmp/err"; rc=$?
check "id outside the vocabulary: exit 1 naming it" '[ $rc -eq 1 ] && grep -q "token 600" "$tmp/err"'
"$loom" logits "$q" --ids 1,2 --out "$tmp/no/such/dir/x.f32" 2>"$tmp/err"; rc=$?
check "unwritable output: exit 1 naming it" '[ $rc -eq 1 ] && grep -q "cannot write" "$tmp/err"'

finish
