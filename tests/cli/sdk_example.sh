#!/usr/bin/env bash
# A third party's view of the SDK: install loom into a prefix, build the
# out-of-tree example plugin against it with find_package(Loom), and check
# that loom loads it and that it claims a config of its own.
set -u
loom=$1
build=$(dirname "$loom")
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
. "$(dirname "$0")/lib.sh"

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" 2>&1
check "loom installs into a prefix" '[ -f "$work/prefix/include/loom/plugin.h" ]'
check "plugins install under the prefix" '[ -f "$work/prefix/lib/loom/plugins/libloom-qwen35.so" ] || [ -f "$work/prefix/lib64/loom/plugins/libloom-qwen35.so" ] || ls "$work"/prefix/lib/*/loom/plugins/libloom-qwen35.so >/dev/null 2>&1'

cmake -S "$root/sdk/examples/hello-family" -B "$work/hello" \
  -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/hello.log" 2>&1 &&
  cmake --build "$work/hello" >>"$work/hello.log" 2>&1
check "the example builds against the installed SDK" '[ -f "$work/hello/plugins/libloom-hello.so" ]'

out=$("$loom" plugins --plugin-path "$work/hello/plugins" 2>&1)
check "loom loads the example plugin" 'echo "$out" | grep -q "^hello *family"'

mkdir -p "$work/model"
echo '{"model_type": "hello", "hidden_size": 96}' >"$work/model/config.json"
out=$("$loom" inspect "$work/model" --plugin-path "$work/hello/plugins" 2>/dev/null)
check "the example claims its config and reports its geometry" 'echo "$out" | grep -q "hidden_size *96"'

[ $fail -eq 0 ] && rm -rf "$work" || echo "logs kept in $work"
finish
