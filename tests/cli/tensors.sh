#!/usr/bin/env bash
# `loom inspect MODEL --tensors`: every tensor with dtype, shape and bytes,
# and the total; the expected counts and byte totals were read from the
# fixtures' headers with Python's json module.
set -u
loom=$1
fixtures=$2
. "$(dirname "$0")/lib.sh"

out=$("$loom" inspect "$fixtures/models/qwen35-tiny" --tensors 2>&1); rc=$?
check "inspect --tensors succeeds" '[ $rc -eq 0 ]'
check "lists q_proj with dtype, shape, bytes" 'echo "$out" | grep -Eq "^model\.layers\.3\.self_attn\.q_proj\.weight +BF16 +\[256, 64\] +32768$"'
check "lists conv1d as 3-D" 'echo "$out" | grep -Eq "^model\.layers\.0\.linear_attn\.conv1d\.weight +BF16 +\[128, 1, 4\] +1024$"'
check "qwen35-tiny total" 'echo "$out" | grep -q "^56 tensors, 548240 bytes"'

out=$("$loom" inspect "$fixtures/models/nemotron-h-tiny" --tensors 2>&1)
check "nemotron-h-tiny total" 'echo "$out" | grep -q "^32 tensors, 343136 bytes"'

out=$("$loom" inspect --json "$fixtures/models/nemotron-h-tiny" --tensors 2>&1)
check "json lists tensors" 'echo "$out" | grep -q "\"name\": \"backbone.layers.0.mixer.in_proj.weight\""'
check "json total" 'echo "$out" | grep -q "\"total_bytes\": 343136"'

# a checkpoint whose tensors are broken: the error names the file
tmp=$(mktemp -d)
cp "$fixtures/models/qwen35-tiny/config.json" "$tmp/"
printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a":' > "$tmp/model.safetensors"
err=$("$loom" inspect "$tmp" --tensors 2>&1 >/dev/null); rc=$?
check "broken safetensors fails, naming the file" '[ $rc -ne 0 ] && echo "$err" | grep -q "$tmp/model.safetensors"'
rm -rf "$tmp"

finish
