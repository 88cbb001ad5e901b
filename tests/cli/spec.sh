#!/usr/bin/env bash
# --drafter on the command line, with the oracle test drafter
# (tests/plugins/tp_oracle_drafter.c) proposing qwen35-tiny's own greedy
# continuation: `loom run --drafter --stats` prints the same ids as plain
# decoding and the acceptance lengths; `loom bench --drafter` prints a plain
# and a speculative line; `loom serve --drafter` answers the same text with
# and without "speculative": false and counts windows in /metrics; a
# drafter given as a model and a model given as a drafter are refused.
# Usage: spec.sh LOOM_EXE FIXTURES_DIR. Exit 77 (skip) without python3.
set -euo pipefail
loom=${1:?usage: spec.sh LOOM_EXE FIXTURES_DIR}
fixtures=${2:?usage: spec.sh LOOM_EXE FIXTURES_DIR}
command -v python3 >/dev/null || { echo "skip: no python3"; exit 77; }
plugins=$(dirname "$loom")/test-plugins
model=$fixtures/models/qwen35-tiny
tmp=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

prompt=5,6,7,8,9
"$loom" run "$model" --ids $prompt -n 40 --temperature 0 --ignore-eos \
  --print-ids >"$tmp/plain" 2>/dev/null
mkdir "$tmp/oracle"
python3 - "$prompt" "$tmp/plain" "$tmp/oracle" <<'EOF'
import json, sys
prompt = [int(t) for t in sys.argv[1].split(",")]
ids = json.load(open(sys.argv[2]))
cfg = {"architectures": ["LoomOracleDrafter"], "wrong_every": 5,
       "wrong": "period", "block_size": 8, "sequences": [prompt + ids]}
json.dump(cfg, open(sys.argv[3] + "/config.json", "w"))
open(sys.argv[3] + "/model.safetensors", "wb").write(
    bytes([2, 0, 0, 0, 0, 0, 0, 0]) + b"{}")
EOF

"$loom" run "$model" --ids $prompt -n 40 --temperature 0 --ignore-eos \
  --print-ids --stats --plugin-path "$plugins" --drafter "$tmp/oracle" \
  >"$tmp/spec" 2>"$tmp/spec.err"
cmp -s "$tmp/plain" "$tmp/spec" || fail "speculative ids differ: $(cat "$tmp/spec")"
grep -Eq 'mean acceptance length 4\.[0-9]+; histogram .*5:' "$tmp/spec.err" ||
  fail "no acceptance line: $(cat "$tmp/spec.err")"
echo "run --drafter: same ids, $(grep -o 'mean acceptance.*' "$tmp/spec.err")"

"$loom" bench "$model" --streams 2 --prompt 8 --gen 24 --plugin-path "$plugins" \
  --drafter "$tmp/oracle" >"$tmp/bench" 2>/dev/null
grep -q '"speculative": false' "$tmp/bench" || fail "no plain bench line"
grep -q '"speculative": true.*"mean_acceptance"' "$tmp/bench" ||
  fail "no speculative bench line: $(cat "$tmp/bench")"

if "$loom" run "$tmp/oracle" --ids 1 -n 1 --plugin-path "$plugins" \
  2>"$tmp/err1"; then fail "a drafter ran as a model"; fi
grep -q 'is a drafter checkpoint (drafter tp-oracle)' "$tmp/err1" ||
  fail "drafter as model: $(cat "$tmp/err1")"
if "$loom" run "$model" --ids 1 -n 1 --drafter "$model" 2>"$tmp/err2"; then
  fail "a model ran as a drafter"
fi
grep -q 'is a model checkpoint (family qwen35), not a drafter' "$tmp/err2" ||
  fail "model as drafter: $(cat "$tmp/err2")"
echo "refusals name what they are"

: >"$tmp/out" # emptied first: the wait below reads it for the address
"$loom" serve "$model" --port 0 --plugin-path "$plugins" \
  --drafter "$tmp/oracle" >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 1 600); do
  if grep -q 'listening on' "$tmp/out" 2>/dev/null; then break; fi
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/err"; fail "server died"; }
  sleep 0.1
done
url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$tmp/out")
[ -n "$url" ] || fail "no address printed"
body='"prompt":['$prompt'],"max_tokens":40,"temperature":0,"ignore_eos":true'
a=$(curl -sf "$url/v1/completions" -H 'Content-Type: application/json' \
  -d "{$body}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
windows() { curl -sf "$url/metrics" | sed -n 's/^loom_spec_windows_total //p'; }
w1=$(windows)
b=$(curl -sf "$url/v1/completions" -H 'Content-Type: application/json' \
  -d "{$body,\"speculative\":false}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
w2=$(windows)
[ "$a" = "$b" ] || fail "texts differ with and without speculation"
[ "$w1" -gt 0 ] || fail "no windows counted: $w1"
[ "$w1" = "$w2" ] || fail "\"speculative\": false still speculated ($w1 -> $w2)"
kill -TERM "$pid"
wait "$pid" || fail "server exit status $?"
pid=
echo "serve --drafter: $w1 windows, the same text with \"speculative\": false"
