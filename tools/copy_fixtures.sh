#!/usr/bin/env bash
# Refreshes tests/fixtures/ and models/ from the shared reference fixtures
# (made by shared/tools/make_goldens.py); tests never read ../shared directly.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
shared=${1:-$here/../shared/fixtures}
rm -rf "$here/tests/fixtures/models" "$here/tests/fixtures/drafters" "$here/tests/fixtures/tokenizers"
cp -r "$shared/models" "$shared/drafters" "$shared/tokenizers" "$here/tests/fixtures/"
rm -rf "$here/models/kjv-qwen35"
cp -r "$shared/house/kjv-qwen35" "$here/models/"
cp "$shared/house/kjv-qwen35-samples.txt" "$here/models/"
chmod -R u+w "$here/tests/fixtures" "$here/models"
