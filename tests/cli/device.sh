#!/usr/bin/env bash
# --device without a GPU (none here, or hidden by CUDA_VISIBLE_DEVICES=-1
# where there is one): auto runs on the CPU and says why; cuda fails with a
# clear message; --gpu-memory values are checked; plugins and inspect name
# the device.
set -u
loom=$1
fixtures=$2
build=$(dirname "$loom")
q=$fixtures/models/qwen35-tiny
. "$(dirname "$0")/lib.sh"
need_plugin qwen35
export CUDA_VISIBLE_DEVICES=-1 LC_ALL=C

flat=$(tr -d ' \n' < "$q/golden.json")
prompt=$(echo "$flat" | sed -n 's/.*"prompt_ids":\[\([0-9,]*\)\].*/\1/p')
greedy=$(echo "$flat" | sed -n 's/.*"greedy":\[\([0-9,]*\)\].*/\1/p')
n=$(echo "$greedy" | tr ',' '\n' | wc -l)
want="[$(echo "$greedy" | sed 's/,/, /g')]"

out=$("$loom" run "$q" --ids "$prompt" -n "$n" --temperature 0 --print-ids --device auto --threads 1 2>/dev/null); rc=$?
check "--device auto without a GPU runs on the CPU (golden ids)" '[ $rc -eq 0 ] && [ "$out" = "$want" ]'
out=$("$loom" run "$q" --ids "$prompt" -n "$n" --temperature 0 --print-ids --threads 1 2>/dev/null)
check "auto is the default" '[ "$out" = "$want" ]'

out=$("$loom" inspect "$q" 2>&1)
check "inspect says the device is the CPU and why" 'echo "$out" | grep -Eq "^device +cpu \((no CUDA driver|no CUDA device)"'
out=$("$loom" inspect "$q" --device cpu 2>&1)
check "inspect --device cpu says so" 'echo "$out" | grep -Eq "^device +cpu \(--device cpu\)"'
out=$("$loom" inspect "$q" --json 2>&1)
check "inspect --json has the device kind and reason" 'echo "$out" | tr -d " \n" | grep -q "\"device\":{\"kind\":\"cpu\",\"why\":\"noCUDA"'
out=$("$loom" plugins 2>&1)
check "plugins names the device on its last line" 'echo "$out" | tail -1 | grep -Eq "^device: cpu \(no CUDA (driver|device)"'

err=$("$loom" run "$q" --ids "$prompt" -n 2 --device cuda 2>&1 >/dev/null); rc=$?
check "--device cuda without a GPU fails" '[ $rc -ne 0 ]'
check "... naming --device cuda and the missing driver or device" 'echo "$err" | grep -Eq "\-\-device cuda: no CUDA (driver|device)"'
check "... in one line" '[ "$(echo "$err" | wc -l)" -eq 1 ]'

err=$("$loom" run "$q" --ids "$prompt" -n 2 --gpu-memory 1.5x 2>&1 >/dev/null); rc=$?
check "--gpu-memory refuses a bad value" '[ $rc -eq 2 ] && echo "$err" | grep -q "gpu-memory"'
err=$("$loom" run "$q" --ids "$prompt" -n 2 --gpu-memory 2.5 2>&1 >/dev/null); rc=$?
check "--gpu-memory refuses a fractional byte count" '[ $rc -eq 2 ]'
out=$("$loom" run "$q" --ids "$prompt" -n "$n" --temperature 0 --print-ids --gpu-memory 0.5 --threads 1 2>/dev/null)
check "--gpu-memory 0.5 is accepted (and the CPU path runs)" '[ "$out" = "$want" ]'
out=$("$loom" run "$q" --ids "$prompt" -n "$n" --temperature 0 --print-ids --gpu-memory 8G --threads 1 2>/dev/null)
check "--gpu-memory 8G is accepted" '[ "$out" = "$want" ]'

finish
