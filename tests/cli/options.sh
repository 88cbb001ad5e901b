#!/usr/bin/env bash
# The one option parser as people type it (--opt=value, -n3, --, unknown
# options by name, help on every command), prompts from files and stdin,
# --system and --chat-template against the same conversation rendered by
# chat-format, and detokenize reading tokenize's output.
set -u
loom=$1
fixtures=$2
build=$(dirname "$loom")
q=$fixtures/models/qwen35-tiny
qwen3=$fixtures/tokenizers/qwen3
. "$(dirname "$0")/lib.sh"
need_plugin qwen35
export LC_ALL=C
with_tmp

base=$("$loom" run "$q" --ids 1,2,3 -n 5 --temperature 0 --print-ids --threads 1 2>/dev/null)
check "baseline run prints 5 ids" '[ $(echo "$base" | tr "," "\n" | wc -l) -eq 5 ]'
out=$("$loom" run "$q" --ids=1,2,3 -n5 --temperature=0 --print-ids --threads=1 2>/dev/null)
check "--opt=value and -n5 mean the same" '[ "$out" = "$base" ]'
out=$("$loom" run --ids 1,2,3 --max-tokens 5 --temperature 0 --print-ids --threads 1 -- "$q" 2>/dev/null)
check "-- ends options, MODEL after it" '[ "$out" = "$base" ]'

err=$("$loom" run "$q" --ids 1,2 --frobnicate 2>&1); rc=$?
check "an unknown option is named" '[ $rc -eq 2 ] && echo "$err" | grep -q "unknown option --frobnicate"'
err=$("$loom" run "$q" --ids 1,2 -x 2>&1); rc=$?
check "an unknown short option is named" '[ $rc -eq 2 ] && echo "$err" | grep -q "unknown option -x"'
err=$("$loom" run "$q" --ids 1,2 --print-ids=yes 2>&1); rc=$?
check "a flag given a value is refused" '[ $rc -eq 2 ] && echo "$err" | grep -q "takes no value"'
err=$("$loom" run "$q" --ids 1,2 --system 2>&1); rc=$?
check "a missing value is named" '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--system needs a value"'
err=$("$loom" serve "$q" --port=99999 2>&1); rc=$?
check "serve --port out of range" '[ $rc -eq 2 ] && echo "$err" | grep -q "not in \[0, 65535\]"'
# serve speculates with --drafter (the common model option): it is advertised,
# and a missing drafter checkpoint is named when the model loads
err=$("$loom" serve "$q" --port 0 --drafter "$tmp/nodrafter" 2>&1); rc=$?
check "serve --drafter opens the drafter (a missing one is named)" '[ $rc -eq 1 ] && echo "$err" | grep -q "nodrafter"'
h=$("$loom" serve --help)
check "serve --help lists --queue, --max-body, --name, --drafter" \
  'echo "$h" | grep -q -- "--queue N" && echo "$h" | grep -q -- "--max-body N" && echo "$h" | grep -q -- "--name NAME" && echo "$h" | grep -q -- "--drafter D"'
for c in plugins inspect tokenize detokenize chat-format logits run bench bench-tokenizer serve chat; do
  h=$("$loom" $c --help 2>&1); rc=$?
  check "$c --help lists its options" '[ $rc -eq 0 ] && echo "$h" | grep -q "usage: loom $c" && echo "$h" | grep -q -- "-h, --help"'
done
# the option column is aligned: every option line's text starts at one column
cols=$("$loom" run --help | grep -E '^  (-[a-z], |    )--' |
  awk '{ match($0, /--[a-z-]+( [A-Z]+)? +/); print RSTART + RLENGTH }' | sort -u | wc -l)
check "run --help is aligned" '[ "$cols" -eq 1 ]'

# prompts: -p TEXT, -f FILE, -p - and -f - give the same ids
printf 'In the beginning' >"$tmp/p.txt"
a=$("$loom" run "$q" -p "In the beginning" -n 6 --temperature 0 --print-ids --threads 1 2>/dev/null)
b=$("$loom" run "$q" -f "$tmp/p.txt" -n 6 --temperature 0 --print-ids --threads 1 2>/dev/null)
c=$("$loom" run "$q" -p - -n 6 --temperature 0 --print-ids --threads 1 <"$tmp/p.txt" 2>/dev/null)
check "-f FILE and -p - read the prompt" '[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ]'
err=$("$loom" run "$q" -f "$tmp/none.txt" 2>&1); rc=$?
check "-f on a missing file names it" '[ $rc -eq 1 ] && echo "$err" | grep -q "none.txt"'

# --system: the prompt equals chat-format's rendering of the same messages
printf '[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]' >"$tmp/m.json"
"$loom" chat-format "$q" "$tmp/m.json" >"$tmp/r.txt"
want=$("$loom" tokenize "$q" -f "$tmp/r.txt")
got=$("$loom" run "$q" -p Hi --system "Be brief." -n 1 --temperature 0 --print-ids --threads 1 --stats 2>&1 >/dev/null)
n_want=$(echo "$want" | tr ',' '\n' | wc -l)
check "--system adds a system turn (prompt length of chat-format's text)" \
  'echo "$got" | grep -q "prompt $n_want tokens"'
# --chat-template FILE: a template of our own, rendered by chat-format too
printf '%s' '{% for m in messages %}[{{ m.role }}] {{ m.content }}
{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}' >"$tmp/t.jinja"
out=$("$loom" chat-format "$q" "$tmp/m.json" --chat-template "$tmp/t.jinja")
check "chat-format --chat-template renders the file" \
  '[ "$out" = "$(printf "[system] Be brief.\n[user] Hi\n[assistant] ")" ]'
want=$("$loom" tokenize "$q" "$out")
n_want=$(echo "$want" | tr ',' '\n' | wc -l)
got=$("$loom" run "$q" -p Hi --system "Be brief." --chat-template "$tmp/t.jinja" -n 1 --temperature 0 --stats --threads 1 2>&1 >/dev/null)
check "run --chat-template uses the file" 'echo "$got" | grep -q "prompt $n_want tokens"'
# chat_template.jinja beside tokenizer_config.json is preferred
mkdir "$tmp/m"; cp "$qwen3"/tokenizer* "$tmp/m/"; cp "$tmp/t.jinja" "$tmp/m/chat_template.jinja"
out=$("$loom" chat-format "$tmp/m" "$tmp/m.json")
check "chat_template.jinja is read" '[ "$out" = "$(printf "[system] Be brief.\n[user] Hi\n[assistant] ")" ]'

# detokenize takes tokenize's output (as an argument or on stdin)
ids=$("$loom" tokenize "$qwen3" "Hello, world!")
got=$("$loom" detokenize "$qwen3" "$ids")
check "detokenize accepts [a, b, c]" '[ "$got" = "Hello, world!" ]'
got=$("$loom" tokenize "$qwen3" "Hello, world!" | "$loom" detokenize "$qwen3" -)
check "tokenize | detokenize - round-trips" '[ "$got" = "Hello, world!" ]'
got=$("$loom" detokenize "$qwen3" "9707 11 1879 0")
check "detokenize accepts space-separated ids" '[ "$got" = "Hello, world!" ]'
"$loom" detokenize "$qwen3" "[9707, 11" >/dev/null 2>&1; rc=$?
"$loom" detokenize "$qwen3" "[9707] 3" >/dev/null 2>&1; rc2=$?
check "detokenize refuses broken lists" '[ $rc -eq 2 ] && [ $rc2 -eq 2 ]'
got=$(printf 'Hello' | "$loom" tokenize "$qwen3" -)
check "tokenize - reads stdin" '[ "$got" = "[9707]" ]'

finish
