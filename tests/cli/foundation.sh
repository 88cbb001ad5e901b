#!/usr/bin/env bash
# `loom plugins` and `loom inspect` as a user runs them: exit codes, the
# plugins found beside the executable, refusals, JSON output, and errors.
set -u
loom=$1
fixtures=$2
build=$(dirname "$loom")
. "$(dirname "$0")/lib.sh"

out=$("$loom" plugins --json 2>/dev/null)
check "plugins --json lists qwen35" 'echo "$out" | grep -q "\"name\": \"qwen35\""'
check "plugins --json lists nemotron" 'echo "$out" | grep -q "\"name\": \"nemotron\""'
check "plugins --json lists dflash as a drafter" 'echo "$out" | grep -A1 "\"name\": \"dflash\"" | grep -q drafter'

out=$("$loom" plugins --plugin-path "$build/test-plugins" 2>/dev/null)
check "plugins table shows refused files with reasons" 'echo "$out" | grep -q "libtp_noentry.so: no entry symbol"'
check "plugins table shows the good test plugin" 'echo "$out" | grep -q "^tp-good"'

out=$("$loom" inspect "$fixtures/models/qwen35-tiny" 2>/dev/null)
check "inspect picks qwen35 for qwen35-tiny" 'echo "$out" | grep -q "^plugin *qwen35"'
out=$("$loom" inspect --json "$fixtures/models/nemotron-h-tiny" 2>/dev/null)
check "inspect --json picks nemotron" 'echo "$out" | grep -q "\"plugin\": \"nemotron\""'
out=$("$loom" inspect "$fixtures/drafters/dflash-tiny" 2>/dev/null)
check "inspect reads the drafter geometry" 'echo "$out" | grep -q "block_size *4"'

err=$("$loom" inspect /nonexistent/model 2>&1 >/dev/null); rc=$?
check "inspect of a missing model fails with a message" '[ $rc -ne 0 ] && echo "$err" | grep -q "/nonexistent/model"'
err=$("$loom" inspect "$fixtures/models/qwen35-tiny" --family nosuch 2>&1 >/dev/null); rc=$?
check "--family with an unknown name is refused" '[ $rc -ne 0 ] && echo "$err" | grep -q "nosuch"'
"$loom" nosuchcommand >/dev/null 2>&1; rc=$?
check "an unknown command exits 2" '[ $rc -eq 2 ]'
for cmd in plugins inspect; do
  "$loom" $cmd --help | grep -q "usage: loom $cmd"; r=$?
  check "$cmd --help" '[ $r -eq 0 ]'
done

finish
