#!/usr/bin/env bash
# Refreshes the copies of the shared reference fixtures in tests/fixtures/
# and models/ (tests never read ../shared). Fixtures the project made itself
# (qwen35-ref2, nemotron-h-moe-tiny, toy, tokenizer_refs) are left alone;
# tools/make_*_ref.py and tools/make_tokenizer_refs.py remake those.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
shared=${1:-$here/../shared/fixtures}
for kind in models drafters tokenizers; do
  mkdir -p "$here/tests/fixtures/$kind"
  for src in "$shared/$kind"/*/; do
    name=$(basename "$src")
    rm -rf "$here/tests/fixtures/$kind/$name"
    cp -r "$src" "$here/tests/fixtures/$kind/$name"
  done
done
rm -rf "$here/models/kjv-qwen35"
cp -r "$shared/house/kjv-qwen35" "$here/models/"
cp "$shared/house/kjv-qwen35-samples.txt" "$here/models/"
chmod -R u+w "$here/tests/fixtures" "$here/models"
