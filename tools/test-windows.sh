#!/usr/bin/env bash
# The Windows test command: cross-builds loom for x86_64-w64-mingw32 (deps
# from Debian's source packages), runs its suites under wine64, and compares
# the fixtures' logits and greedy tokens with the Linux build's.
# Usage: tools/test-windows.sh [WIN_BUILD_DIR] [LINUX_BUILD_DIR]
#   defaults: build-windows, build (skipped when it has no loom)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
wdir=${1:-$here/build-windows}
ldir=${2:-$here/build}
jobs=${LOOM_JOBS:-2}
mkdir -p "$wdir"
wdir=$(cd "$wdir" && pwd)
[ -d "$ldir" ] && ldir=$(cd "$ldir" && pwd)
t_start=$(date +%s)

# ---- what the cross build and Wine need (Debian packages; as install-deps.sh)
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
pkgs=(gcc-mingw-w64-x86-64 wine64 dpkg-dev cmake make pkg-config python3)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== windows: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
wine=$(command -v wine64 || true)
[ -n "$wine" ] || wine=/usr/lib/wine/wine64
t_deps0=$(date +%s)

# ---- dependencies, then loom itself
"$here/tools/build-windows-deps.sh" "$wdir"
t_build0=$(date +%s)
echo "== windows: configure and build ($wdir)"
# The CUDA fatbins (nvcc on this machine, when it has one) are embedded in
# the PE DLLs as in the ELF ones: the same bytes as the Linux build's. Wine
# has no GPU to run them on; on Windows the runtime opens nvcuda.dll and,
# without one, says why it chose the CPU.
cmake -S "$here" -B "$wdir" -DCMAKE_TOOLCHAIN_FILE="$here/cmake/mingw-w64.cmake" \
  -DLOOM_WINDOWS_DEPS="$wdir/deps/prefix" -DLOOM_WERROR=ON -DLOOM_CUDA=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$wdir" -j"$jobs" >"$wdir/build.log" 2>&1 || { tail -40 "$wdir/build.log"; exit 1; }
t_test0=$(date +%s)

# ---- a Wine prefix of its own, under the build tree
export WINEPREFIX=$wdir/wine WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
if [ ! -d "$WINEPREFIX" ]; then
  echo "== windows: wine prefix ($WINEPREFIX)"
  "$wine" wineboot -i >/dev/null 2>&1 || true
  # wineboot returns while the prefix (profile folders, %TEMP%) is still
  # being made; tests that start early find no temporary directory
  "$(dirname "$wine")/wineserver" -w 2>/dev/null || wineserver -w 2>/dev/null || sleep 20
fi

pass=0 fail=0 skip=0
failed=() skipped=()
echo "== windows: ctest under $wine (unit suites, CLI tests, serve)"
set +e
# A failed test runs once more: now and then (about one test in 60 per run,
# on a loaded machine) a Wine process fails as it starts, "wine client
# error:0: recvmsg: Connection reset by peer" or a hang before main, in a
# test that passes alone; a test that fails twice is reported failed.
(cd "$wdir" && ctest -j"$jobs" --timeout 900 --repeat until-pass:2 --output-on-failure >"$wdir/ctest.log" 2>&1)
set -e
grep -E "Test +#" "$wdir/ctest.log" || true
retried=()
while read -r name status runs; do
  [ "${runs:-1}" -gt 1 ] && [ "$status" = Passed ] && retried+=("$name")
  case $status in
    Passed) pass=$((pass + 1)) ;;
    Skipped) skip=$((skip + 1))
      # the reason this test printed, from its own part of the log
      why=$(awk -v t="$name" '$0 ~ ("Testing: " t "$") { on = 1 }
              on && tolower($0) ~ /^skip(ped)?: / { sub(/^[^:]*: /, ""); print; exit }
              on && index($0, "\"" t "\" end time") { exit }' \
              "$wdir/Testing/Temporary/LastTest.log" 2>/dev/null)
      skipped+=("$name: ${why:-(no reason printed)}") ;;
    *) fail=$((fail + 1)); failed+=("$name") ;;
  esac
done < <(sed -n -E 's/.*Test +#[0-9]+: ([A-Za-z0-9_]+) \.*[* ]*(Passed|Failed|Skipped|Not Run|Timeout|Exception).*/\1 \2/p' "$wdir/ctest.log" | sed 's/\*//g' |
  # a test run twice (--repeat) counts by its last run
  awk '!($1 in st) { order[++n] = $1 } { st[$1] = $2; runs[$1]++ }
       END { for (i = 1; i <= n; i++) print order[i], st[order[i]], runs[order[i]] }')
if [ $fail -gt 0 ]; then
  sed -n '/The following tests FAILED/,$p' "$wdir/ctest.log"
  grep -B5 -A30 -E "\*\*\*Failed|Timeout" "$wdir/ctest.log" | head -200
fi

# ---- the CPU path against the Linux build: same prompts, same thread count
check() { # name, command
  if eval "$2"; then echo "ok: $1"; pass=$((pass + 1)); else echo "FAIL: $1"; fail=$((fail + 1)); failed+=("$1"); fi
}
if [ -x "$ldir/loom" ]; then
  echo "== windows: logits and greedy tokens against the Linux build ($ldir)"
  tmp=$wdir/test-tmp/vs-linux
  mkdir -p "$tmp"
  for m in qwen35-tiny qwen35-ref2 qwen35-vl-tiny nemotron-h-tiny nemotron-h-moe-tiny; do
    q=$here/tests/fixtures/models/$m
    flat=$(tr -d ' \n' <"$q/golden.json")
    ids=$(echo "$flat" | sed -n 's/.*"prompt_ids":\[\([0-9,]*\)\].*/\1/p')
    # Equal to the last bit: the CPU path's elementary functions are the
    # SDK's own (loom/cpu_math.h), not the C library's, and no FMA
    # contraction; the same thread count gives the same order of sums.
    for t in 1 2; do
      "$ldir/loom" logits "$q" --ids "$ids" --out "$tmp/$m.t$t.linux.f32" --threads $t 2>/dev/null
      "$wine" "$wdir/loom.exe" logits "$q" --ids "$ids" --out "$tmp/$m.t$t.win.f32" --threads $t 2>/dev/null
      if [ -s "$tmp/$m.t$t.linux.f32" ] && cmp -s "$tmp/$m.t$t.linux.f32" "$tmp/$m.t$t.win.f32"; then
        check "$m: logits identical to the Linux build's ($t threads)" true
      else
        # say how far apart they are, for the report
        python3 - "$tmp/$m.t$t.win.f32" "$tmp/$m.t$t.linux.f32" <<'PY' || true
import struct, sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
if len(a) != len(b) or not a:
    print("sizes differ: %d and %d bytes" % (len(a), len(b))); sys.exit()
a = struct.unpack("<%df" % (len(a) // 4), a)
b = struct.unpack("<%df" % (len(b) // 4), b)
d = [abs(x - y) for x, y in zip(a, b)]
print("%d of %d logits differ, by up to %.3g" % (sum(1 for x in d if x), len(d), max(d)))
PY
        check "$m: logits identical to the Linux build's ($t threads)" false
      fi
    done
    lin=$("$ldir/loom" run "$q" --ids "$ids" -n 16 --temperature 0 --ignore-eos --print-ids --threads 2 2>/dev/null)
    win=$("$wine" "$wdir/loom.exe" run "$q" --ids "$ids" -n 16 --temperature 0 --ignore-eos --print-ids --threads 2 2>/dev/null | tr -d '\r')
    check "$m: 16 greedy tokens equal to the Linux build's" '[ -n "$lin" ] && [ "$lin" = "$win" ]'
    # sampled: the keyed Gumbel draw's logarithms are the SDK's too
    samp=(-n 16 --temperature 0.9 --top-p 0.95 --seed 1234 --ignore-eos --print-ids --threads 2)
    lin=$("$ldir/loom" run "$q" --ids "$ids" "${samp[@]}" 2>/dev/null)
    win=$("$wine" "$wdir/loom.exe" run "$q" --ids "$ids" "${samp[@]}" 2>/dev/null | tr -d '\r')
    check "$m: 16 sampled tokens (seed 1234) equal to the Linux build's" '[ -n "$lin" ] && [ "$lin" = "$win" ]'
  done
else
  skip=$((skip + 1))
  skipped+=("logits vs Linux: no Linux build at $ldir (run tools/test.sh first)")
fi

# Suites that are not run there, with the reason.
for sh in "$here"/tests/cli/*.sh; do
  skip=$((skip + 1))
  skipped+=("cli_$(basename "$sh" .sh): a POSIX shell script (its loom checks run as wcli_* where they need no shell)")
done
skip=$((skip + 1))
skipped+=("cli_webui: a POSIX shell script driving chromium against loom (the Linux build runs it)")
for s in "$here"/tests/gpu/test_*.c; do
  [ -e "$s" ] || continue
  # counted above where ctest ran it (and it skipped, wanting a driver)
  grep -q "Test *#[0-9]*: gpu_$(basename "$s" .c) " "$wdir/ctest.log" && continue
  skip=$((skip + 1))
  skipped+=("gpu_$(basename "$s" .c): GPU suites need a GPU and its driver, not in Wine")
done

# this prefix's wineserver goes away before we do
"$(dirname "$wine")/wineserver" -w 2>/dev/null || true

t_end=$(date +%s)
echo "== windows: summary"
for s in "${skipped[@]}"; do echo "skipped: $s"; done
for f in "${failed[@]}"; do echo "failed: $f"; done
for r in "${retried[@]}"; do echo "passed at its second run: $r"; done
echo "windows (wine): $pass passed, $fail failed, $skip skipped"
echo "windows: timings: tools $((t_deps0 - t_start)) s, deps $((t_build0 - t_deps0)) s, build $((t_test0 - t_build0)) s, tests $((t_end - t_test0)) s, total $((t_end - t_start)) s"
[ $fail -eq 0 ]
