#!/usr/bin/env bash
# A third party's view of the SDK: install loom into a prefix (then move
# it: the installed loom finds its plugins relative to itself), build the
# out-of-tree examples against it (hello-family and ngram-drafter with
# find_package(Loom), the drafter also with pkg-config and cc), and run the
# installed loom with each. With the n-gram drafter greedy output equals
# plain greedy output on every fixture model and the KJV model; on a prompt
# that repeats a passage, the first window accepts what prompt lookup
# predicts from the plain output (computed here independently).
# Usage: sdk_example.sh LOOM_EXE FIXTURES_DIR.
set -u
loom=$1
fixtures=${2:-$(cd "$(dirname "$0")/../fixtures" && pwd)}
build=$(dirname "$loom")
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
. "$(dirname "$0")/lib.sh"

cmake --install "$build" --prefix "$work/stage" >"$work/install.log" 2>&1
mv "$work/stage" "$work/prefix"
P=$work/prefix
L=$P/bin/loom
check "loom installs into a prefix" '[ -x "$L" ] && [ -f "$P/include/loom/plugin.h" ]'
check "plugins install in P/lib/loom/plugins" '[ -f "$P/lib/loom/plugins/libloom-qwen35.so" ]'
check "the CMake package and its version file install" '[ -f "$P/lib/cmake/Loom/LoomConfig.cmake" ] && [ -f "$P/lib/cmake/Loom/LoomConfigVersion.cmake" ]'
check "loom-sdk.pc installs" '[ -f "$P/lib/pkgconfig/loom-sdk.pc" ]'
out=$("$L" plugins 2>&1)
check "the moved loom finds its plugins relative to itself" 'echo "$out" | grep -q "^qwen35 .* $P/bin/../lib/loom/plugins/libloom-qwen35.so"'
check "and searches no configure-time prefix" '! echo "$out" | grep "^searched:" | grep -q "$work/stage\|/usr/local/lib"'

# hello-family: a family, find_package(Loom 2.0)
cmake -S "$root/sdk/examples/hello-family" -B "$work/hello" \
  -DCMAKE_PREFIX_PATH="$P" >"$work/hello.log" 2>&1 &&
  cmake --build "$work/hello" >>"$work/hello.log" 2>&1
check "hello-family builds against the installed SDK" '[ -f "$work/hello/plugins/libloom-hello.so" ]'
out=$("$L" plugins --plugin-path "$work/hello/plugins" 2>&1)
check "the installed loom loads hello-family" 'echo "$out" | grep -q "^hello *family"'
mkdir -p "$work/model"
echo '{"model_type": "hello", "hidden_size": 96}' >"$work/model/config.json"
out=$("$L" inspect "$work/model" --plugin-path "$work/hello/plugins" 2>/dev/null)
check "hello-family claims its config and reports its geometry" 'echo "$out" | grep -q "hidden_size *96"'

# another major of the package is refused by find_package
mkdir -p "$work/major3"
printf 'cmake_minimum_required(VERSION 3.20)\nproject(m3 C)\nfind_package(Loom 3.0 REQUIRED)\n' >"$work/major3/CMakeLists.txt"
check "find_package(Loom 3.0) refuses the 2.x SDK" '! cmake -S "$work/major3" -B "$work/major3/b" -DCMAKE_PREFIX_PATH="$P" >"$work/major3.log" 2>&1 && grep -q "version" "$work/major3.log"'

# ngram-drafter with CMake, installed into the same prefix
cmake -S "$root/sdk/examples/ngram-drafter" -B "$work/ngram" \
  -DCMAKE_PREFIX_PATH="$P" >"$work/ngram.log" 2>&1 &&
  cmake --build "$work/ngram" >>"$work/ngram.log" 2>&1 &&
  cmake --install "$work/ngram" --prefix "$P" >>"$work/ngram.log" 2>&1
check "ngram-drafter builds with CMake and installs into the prefix" '[ -f "$P/lib/loom/plugins/libloom-ngram.so" ]'
out=$("$L" plugins 2>&1)
# at the SDK's own ABI minor, read from its header
minor=$(sed -n 's/^#define LOOM_ABI_MINOR \([0-9]*\).*/\1/p' "$root/sdk/include/loom/plugin.h")
check "the installed loom finds the installed drafter" 'echo "$out" | grep -q "^ngram *drafter .* 2\.$minor "'

# ngram-drafter with pkg-config and cc, no CMake
cflags=$(PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config --cflags loom-sdk 2>>"$work/cc.log")
mkdir -p "$work/cc"
cc $cflags -std=c11 -Wall -Wextra -Werror -O2 -fPIC -shared \
  "$root/sdk/examples/ngram-drafter/ngram.c" -o "$work/cc/libloom-ngram.so" >>"$work/cc.log" 2>&1
check "ngram-drafter builds with pkg-config --cflags loom-sdk and cc" '[ -n "$cflags" ] && [ -f "$work/cc/libloom-ngram.so" ]'
out=$("$L" plugins --plugin-path "$work/cc" 2>&1)
check "the cc-built drafter loads first from --plugin-path" 'echo "$out" | grep -q "^ngram .*$work/cc/libloom-ngram.so"'

# greedy with the drafter equals greedy without it
ids=5,6,7,8,9,5,6,7,8,9,5,6
for m in "$fixtures"/models/*; do
  [ -f "$m/model.safetensors" ] || continue
  case $(basename "$m") in toy) continue ;; esac
  plain=$("$L" run "$m" --ids $ids -n 32 --temperature 0 --ignore-eos --print-ids 2>/dev/null)
  for d in ngram ngram:n=2,k=4; do
    spec=$("$L" run "$m" --ids $ids -n 32 --temperature 0 --ignore-eos --print-ids --stats \
      --drafter "$d" 2>"$work/spec.err")
    check "$(basename "$m") --drafter $d: greedy ids equal plain greedy" \
      '[ -n "$plain" ] && [ "$plain" = "$spec" ] && grep -q "speculation: [0-9]* windows" "$work/spec.err"'
  done
done
spec=$("$L" run "$fixtures/models/qwen35-tiny" --ids $ids -n 32 --temperature 0 --ignore-eos \
  --print-ids --plugin-path "$work/cc" --drafter ngram 2>/dev/null)
plain=$("$L" run "$fixtures/models/qwen35-tiny" --ids $ids -n 32 --temperature 0 --ignore-eos --print-ids 2>/dev/null)
check "the cc-built drafter: greedy ids equal plain greedy" '[ -n "$plain" ] && [ "$plain" = "$spec" ]'

# the KJV model on a prompt that repeats a passage
kjv=$root/models/kjv-qwen35
passage="And God said, Let there be light: and there was light. And God saw the light, that it was good."
prompt="$passage $passage And God said, Let there be light: and there was light. And God saw"
if [ -f "$kjv/model.safetensors" ] && command -v python3 >/dev/null; then
  "$L" tokenize "$kjv" "$prompt" >"$work/kjv.prompt" 2>/dev/null
  "$L" run "$kjv" -p "$prompt" -n 48 --temperature 0 --print-ids >"$work/kjv.plain" 2>/dev/null
  "$L" run "$kjv" -p "$prompt" -n 48 --temperature 0 --print-ids --stats \
    --drafter ngram:n=3,k=8 >"$work/kjv.spec" 2>"$work/kjv.err"
  check "KJV --drafter ngram: greedy ids equal plain greedy" '[ -s "$work/kjv.plain" ] && cmp -s "$work/kjv.plain" "$work/kjv.spec"'
  # prompt lookup, independently: after the first generated token the
  # drafter proposes what followed the last 3 tokens' earlier occurrence;
  # the first window keeps the drafts the plain output agrees with
  want=$(python3 - "$work/kjv.prompt" "$work/kjv.plain" <<'PY'
import json, sys
prompt = json.load(open(sys.argv[1])); out = json.load(open(sys.argv[2]))
h = prompt + out[:1]
prop = []
for n in (3, 2, 1):
    hit = [j for j in range(len(h) - n) if h[j:j + n] == h[len(h) - n:]]
    if hit:
        prop = h[hit[-1] + n:][:8]
        break
k = 0
while k < len(prop) and k + 1 < len(out) and prop[k] == out[k + 1]:
    k += 1
print(k)
PY
)
  echo "KJV: the first window should accept $want drafts: $(grep -o 'speculation.*' "$work/kjv.err")"
  check "the plain output continues the repeated passage (the prompt's premise)" '[ "${want:-0}" -ge 3 ]'
  check "the first window accepts the passage's tokens in a run of $want" \
    'grep -Eq "histogram.* $((want + 1)):[0-9]+" "$work/kjv.err"'
  check "mean acceptance length above 1" \
    'grep -Eq "mean acceptance length (1\.[0-9]*[1-9][0-9]*|[2-9]\.[0-9]+)" "$work/kjv.err"'
else
  echo "skip: KJV acceptance (no models/kjv-qwen35 or python3)"
fi

# options: unknown ones refused by name, bad values by field
err=$("$L" run "$fixtures/models/qwen35-tiny" --ids 5 -n 2 --drafter ngram:n=3,bogus=1 2>&1)
check "an unknown drafter option is refused by name" 'echo "$err" | grep -q "unknown option '"'"'bogus'"'"' (ngram takes: n, k)"'
err=$("$L" run "$fixtures/models/qwen35-tiny" --ids 5 -n 2 --drafter ngram:n=0 2>&1)
check "an option out of range is refused with its value" 'echo "$err" | grep -q "option n=0 is outside"'
err=$("$L" run "$fixtures/models/qwen35-tiny" --ids 5 -n 2 --drafter ngram:n=3,n=2 2>&1)
check "an option given twice is refused" 'echo "$err" | grep -q "option '"'"'n'"'"' given twice"'
err=$("$L" run "$fixtures/models/qwen35-tiny" --ids 5 -n 2 --drafter ngram:n 2>&1)
check "an option without a value is refused" 'echo "$err" | grep -q "option '"'"'n'"'"' is not key=value"'
err=$("$L" run "$fixtures/models/qwen35-tiny" --ids 5 -n 2 --drafter nosuch 2>&1)
check "a drafter name nothing answers to is refused" 'echo "$err" | grep -q "no drafter plugin named '"'"'nosuch'"'"'"'

[ $fail -eq 0 ] && rm -rf "$work" || echo "logs kept in $work"
finish
