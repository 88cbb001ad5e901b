#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, and generate
# text with the small trained model shipped in models/ (CPU when no GPU).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/tools/install-deps.sh"
"$here/tools/build.sh"
model=${1:-$here/models/kjv-qwen35}
prompt=${2:-In the beginning God created}
"$here/build/loom" run "$model" -p "$prompt" -n 64 --temperature 0 --stats
