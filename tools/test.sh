#!/usr/bin/env bash
# The test command: builds loom (warnings as errors) and runs every suite.
# Usage: tools/test.sh [BUILD_DIR] [cmake args...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$here/build}
shift || true
if [ -f "$here/tests/clients/package.json" ] && [ ! -d "$here/tests/clients/node_modules" ]; then
  (cd "$here/tests/clients" && npm ci --no-audit --no-fund --loglevel=error) ||
    echo "warning: npm install failed; the client tests will be skipped" >&2
fi
"$here/tools/build.sh" "$dir" -DLOOM_WERROR=ON "$@"
cd "$dir"
ctest -j"$(nproc)" --output-on-failure --timeout 1200
