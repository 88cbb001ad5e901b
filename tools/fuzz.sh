#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a fixed time
# over its corpus (tests/fuzz/corpus/NAME: seeds and every crash found so
# far, which are run first as regression inputs). New inputs go to a
# scratch directory, not the repository. A crash, leak, UB or timeout
# fails the run and leaves its input under BUILD_DIR/fuzz-artifacts/.
# Usage: tools/fuzz.sh [BUILD_DIR] [SECONDS_EACH]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$here/build-fuzz}
secs=${2:-20}
CC=clang cmake -S "$here" -B "$dir" -DLOOM_FUZZ=ON -DLOOM_TESTS=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
targets=(safetensors chat_template tokenizer request config_qwen35
  config_nemotron)
cmake --build "$dir" -j"$(nproc)" --target "${targets[@]/#/fuzz_}"
mkdir -p "$dir/fuzz-artifacts"
status=0
for t in "${targets[@]}"; do
  scratch=$(mktemp -d)
  dict=()
  [ -f "$here/tests/fuzz/$t.dict" ] && dict=(-dict="$here/tests/fuzz/$t.dict")
  echo "== fuzz_$t (${secs} s)"
  if ! "$dir/fuzz_$t" "${dict[@]}" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/fuzz-artifacts/$t-" \
    "$scratch" "$here/tests/fuzz/corpus/$t" >"$dir/fuzz-$t.log" 2>&1; then
    echo "fuzz_$t failed; see $dir/fuzz-$t.log and $dir/fuzz-artifacts/" >&2
    tail -40 "$dir/fuzz-$t.log" >&2
    status=1
  else
    grep -E '^stat::number_of_executed_units' "$dir/fuzz-$t.log" || true
  fi
  rm -rf "$scratch"
done
exit $status
