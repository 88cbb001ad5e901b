#!/usr/bin/env bash
# device-stage.sh BUILD DEST: copies what a run on the GPU machine needs from
# a build dir (the loom binary, plugins/*.so, the test binaries, the shared
# libraries that machine lacks) into DEST, e.g. .stage/NAME, which
# .git/info/exclude ignores. Carry DEST in the device call and start it with
#   . DEST/setup.sh
# which links /work/main and this tree's root (a worktree's path too) to the
# tree there, BUILD to DEST (so the paths the tests were compiled with
# resolve) and sets LD_LIBRARY_PATH to DEST/libs.
# Run the test binaries directly there (DEST/gpu_test_...), logs into $OUT.
set -euo pipefail
build=${1:?usage: device-stage.sh BUILD DEST}
dest=${2:?usage: device-stage.sh BUILD DEST}
here=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$dest"
mkdir -p "$dest/plugins" "$dest/test-plugins" "$dest/libs"
cp "$build/loom" "$dest/"
cp "$build"/plugins/*.so "$dest/plugins/" 2>/dev/null || true
cp "$build"/test-plugins/*.so "$dest/test-plugins/" 2>/dev/null || true
# test executables: the GPU suites (and the CPU suites with LOOM_STAGE_UNIT=1)
suites=("$build"/gpu_test_*)
[ "${LOOM_STAGE_UNIT:-0}" = 1 ] && suites+=("$build"/test_*)
for t in "${suites[@]}"; do
  [ -f "$t" ] && [ -x "$t" ] && cp "$t" "$dest/"
done
pack=${LOOM_PACK_LIBS:-$here/../shared/device/pack-libs.sh}
[ -f "$pack" ] || pack=/work/shared/device/pack-libs.sh
sh "$pack" "$build/loom" "$dest/libs" >/dev/null
for t in "$dest"/gpu_test_*; do
  [ -f "$t" ] && sh "$pack" "$t" "$dest/libs" >/dev/null
done
# The device gets the checkout that DEST lies in (its root is $PWD there);
# the binaries hold this tree's absolute paths (a worktree's too), so the
# setup links this tree's root to $PWD and BUILD to DEST.
mkdir -p "$dest"
sent=$(git -C "$dest" rev-parse --show-toplevel)
rel_dest=$(realpath --relative-to="$sent" "$dest")
abs_build=$(realpath "$build")
cat >"$dest/setup.sh" <<SETUP
# sourced at the repository root on the device machine (device-stage.sh)
mkdir -p /work && ln -sfn "\$PWD" /work/main
[ "$here" = /work/main ] || [ -e "$here" ] || { mkdir -p "$(dirname "$here")" && ln -sfn "\$PWD" "$here"; }
[ -e "$abs_build" ] || ln -sfn "\$PWD/$rel_dest" "$abs_build"
export LD_LIBRARY_PATH=\$PWD/$rel_dest/libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
SETUP
du -sh "$dest"
