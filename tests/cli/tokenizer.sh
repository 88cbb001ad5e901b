#!/usr/bin/env bash
# `loom tokenize`, `detokenize`, `chat-format` and `bench-tokenizer` against
# references: ids from the Qwen3 golden (HF tokenizers) and a rendering from
# chat_refs.json (HF apply_chat_template); then their error exits.
# Usage: tokenizer.sh LOOM_EXE FIXTURES_DIR
set -euo pipefail
loom=${1:?usage: tokenizer.sh LOOM_EXE FIXTURES_DIR}
fixtures=${2:?usage: tokenizer.sh LOOM_EXE FIXTURES_DIR}
qwen3=$fixtures/tokenizers/qwen3
small=$fixtures/models/qwen35-tiny # loads in milliseconds
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# golden.json: "Hello, world!" -> [9707, 11, 1879, 0]; the chat markup case
# -> 151644 872 198 13048 1052 151645 198 151644 77091 198
got=$("$loom" tokenize "$qwen3" "Hello, world!")
[ "$got" = "[9707, 11, 1879, 0]" ] || fail "tokenize: $got"
got=$("$loom" tokenize "$qwen3" $'<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n')
[ "$got" = "[151644, 872, 198, 13048, 1052, 151645, 198, 151644, 77091, 198]" ] ||
  fail "tokenize specials: $got"
# --no-special: <|im_end|> is text, so its id must not appear
got=$("$loom" tokenize "$qwen3" "<|im_end|>" --no-special)
case "$got" in *151645*) fail "--no-special kept the special id: $got" ;; esac

got=$("$loom" detokenize "$qwen3" 9707,11,1879,0,151645)
[ "$got" = "Hello, world!<|im_end|>" ] || fail "detokenize: $got"
got=$("$loom" detokenize "$qwen3" 9707,151645 --skip-special)
[ "$got" = "Hello" ] || fail "detokenize --skip-special: $got"

# chat-format: the system_user conversation of chat_refs.json
cat >"$tmp/m.json" <<'J'
[{"role": "system", "content": "You are a helpful assistant."},
 {"role": "user", "content": "What is 2+2?"}]
J
"$loom" chat-format "$qwen3" "$tmp/m.json" >"$tmp/out"
printf '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n' >"$tmp/want"
cmp "$tmp/out" "$tmp/want" || fail "chat-format differs"
"$loom" chat-format "$qwen3" "$tmp/m.json" --no-generation-prompt >"$tmp/out"
head -c -22 "$tmp/want" >"$tmp/want2"
cmp "$tmp/out" "$tmp/want2" || fail "chat-format --no-generation-prompt"

printf 'In the beginning God created the heaven and the earth.\n' >"$tmp/text"
"$loom" bench-tokenizer "$small" "$tmp/text" --size-mb 0.01 --seconds 0.01 |
  grep -q '"mb_per_s"' || fail "bench-tokenizer"

for c in tokenize detokenize chat-format bench-tokenizer; do
  "$loom" $c --help | grep -q "usage: loom $c" || fail "$c --help"
done
# errors: missing model, bad ids, bad UTF-8, bad messages file
! "$loom" tokenize "$tmp/none" hi 2>/dev/null || fail "tokenize: missing model"
! "$loom" detokenize "$qwen3" 1,x 2>/dev/null || fail "detokenize: bad ids"
! "$loom" detokenize "$small" 999999 2>/dev/null || fail "detokenize: bad id"
! "$loom" tokenize "$small" $'\xff' 2>"$tmp/err" || fail "tokenize: bad UTF-8"
grep -q "UTF-8" "$tmp/err" || fail "tokenize: UTF-8 message"
echo '{"messages": 3}' >"$tmp/bad.json"
! "$loom" chat-format "$qwen3" "$tmp/bad.json" 2>/dev/null || fail "chat-format: bad messages"
! "$loom" chat-format "$qwen3" "$tmp/none.json" 2>/dev/null || fail "chat-format: missing file"
! "$loom" tokenize 2>/dev/null || fail "tokenize: no args"
echo "ok"
