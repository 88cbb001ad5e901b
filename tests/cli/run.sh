#!/usr/bin/env bash
# `loom run` and `loom bench` as a user runs them: greedy ids equal the
# transformers golden, seeded runs repeat, stop strings cut the text, a
# model without a tokenizer prints ids, JSON lines from bench, bad options.
set -u
loom=$1
fixtures=$2
build=$(dirname "$loom")
q=$fixtures/models/qwen35-tiny
toy=$fixtures/models/toy
. "$(dirname "$0")/lib.sh"
need_plugin qwen35
export LC_ALL=C

# the golden prompt and greedy ids, as "a,b,c" and "[a, b, c]"
flat=$(tr -d ' \n' < "$q/golden.json")
prompt=$(echo "$flat" | sed -n 's/.*"prompt_ids":\[\([0-9,]*\)\].*/\1/p')
greedy=$(echo "$flat" | sed -n 's/.*"greedy":\[\([0-9,]*\)\].*/\1/p')
n=$(echo "$greedy" | tr ',' '\n' | wc -l)
want="[$(echo "$greedy" | sed 's/,/, /g')]"

out=$("$loom" run "$q" --ids "$prompt" -n "$n" --temperature 0 --print-ids --threads 1 2>/dev/null); rc=$?
check "greedy --print-ids equals the transformers golden" '[ $rc -eq 0 ] && [ "$out" = "$want" ]'
out=$("$loom" run "$q" --ids "$prompt" -n "$n" --temperature 0 --print-ids --prefill-chunk 5 --threads 1 2>/dev/null)
check "prompt chunks of 5 give the same ids" '[ "$out" = "$want" ]'

a=$("$loom" run "$q" --ids "$prompt" -n 20 --temperature 1 --seed 7 --print-ids 2>/dev/null)
b=$("$loom" run "$q" --ids "$prompt" -n 20 --temperature 1 --seed 7 --top-k 1000 --top-p 1 --print-ids 2>/dev/null)
c=$("$loom" run "$q" --ids "$prompt" -n 20 --temperature 1 --seed 8 --print-ids 2>/dev/null)
check "a seed repeats (and no-op filters change nothing)" '[ -n "$a" ] && [ "$a" = "$b" ]'
check "another seed gives other tokens" '[ "$a" != "$c" ]'
cnt=$(echo "$a" | tr ',' '\n' | wc -l)
check "-n 20 gives 20 ids" '[ "$cnt" -eq 20 ]'

err=$("$loom" run "$q" -p "In the beginning" -n 16 --temperature 1 --seed 3 --stats 2>&1 >/dev/null); rc=$?
check "--stats reports tok/s and time to first token" '[ $rc -eq 0 ] && echo "$err" | grep -q "decode [0-9.]* tok/s" && echo "$err" | grep -q "time to first token" && echo "$err" | grep -q "seed 3"'

text=$("$loom" run "$q" -p "In the beginning" -n 24 --temperature 0 --ignore-eos 2>/dev/null)
check "text goes to stdout" '[ ${#text} -gt 4 ]'
# two printable ASCII bytes from past the start of the text
stop=
for ((i = 3; i + 1 < ${#text}; i++)); do
  s=${text:i:2}
  if [[ $s =~ ^[[:alnum:][:punct:]]{2}$ ]]; then stop=$s; break; fi
done
cut=$(printf '%s' "${text%%"$stop"*}") # $(...) drops trailing newlines
out=$("$loom" run "$q" -p "In the beginning" -n 24 --temperature 0 --ignore-eos --stop "$stop" 2>/dev/null)
check "--stop cuts the text before the stop string" '[ -n "$stop" ] && [ "$out" = "$cut" ]'

"$loom" run "$q" -p "hello" --chat -n 4 --temperature 0 >/dev/null 2>&1; rc=$?
check "--chat formats with the chat template" '[ $rc -eq 0 ]'

out=$("$loom" run "$toy" --plugin-path "$build/test-plugins" --ids 1,2,3 -n 5 --temperature 0 2>/dev/null); rc=$?
cnt=$(echo "$out" | tr ',' '\n' | wc -l)
check "a model without a tokenizer prints ids" '[ $rc -eq 0 ] && [ "$cnt" -eq 5 ] && echo "$out" | grep -q "^\["'
err=$("$loom" run "$toy" --plugin-path "$build/test-plugins" -p hi 2>&1); rc=$?
check "-p without a tokenizer fails with a reason" '[ $rc -eq 1 ] && echo "$err" | grep -q "tokenizer"'

out=$("$loom" bench "$q" --streams 1,3 --prompt 16 --gen 4 --threads 1 2>/dev/null); rc=$?
lines=$(echo "$out" | grep -c '"decode_tok_s"')
check "bench prints a JSON line per stream count" '[ $rc -eq 0 ] && [ "$lines" -eq 2 ] && echo "$out" | grep -q "\"streams\": 3" && echo "$out" | grep -q "\"weight_bytes\": [1-9]"'
out=$("$loom" bench "$q" --streams 1 --prompt 8 --gen 4 --threads 1 --device cpu --time-device 2>/dev/null); rc=$?
check "bench --time-device on the CPU: the usual line, no device split" '[ $rc -eq 0 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && ! echo "$out" | grep -q device_forward_ms'

"$loom" run "$q" --ids 1,2 -n -1 >/dev/null 2>&1; rc=$?
check "-n -1 is refused" '[ $rc -eq 2 ]'
"$loom" run "$q" --ids 1,2 --temperature warm >/dev/null 2>&1; rc=$?
check "a non-number is refused" '[ $rc -eq 2 ]'
err=$("$loom" run "$q" --ids 1,2 --top-p 3 2>&1); rc=$?
check "top-p 3 is refused by name" '[ $rc -eq 1 ] && echo "$err" | grep -q "top_p"'
err=$("$loom" run "$q" --ids 1,99999 2>&1); rc=$?
check "an id outside the vocabulary is refused" '[ $rc -eq 1 ] && echo "$err" | grep -q "vocabulary"'
"$loom" run "$q" >/dev/null 2>&1; rc=$?
check "no prompt: usage, exit 2" '[ $rc -eq 2 ]'
"$loom" bench "$q" --streams 0 >/dev/null 2>&1; rc=$?
check "bench --streams 0 is refused" '[ $rc -eq 2 ]'
for cmd in run bench; do
  "$loom" $cmd --help | grep -q "usage: loom $cmd"; r=$?
  check "$cmd --help" '[ $r -eq 0 ]'
done

finish
