#!/usr/bin/env bash
# Real clients against `loom serve` on a free loopback port: the official
# openai npm package (tests/clients/openai_client.mjs) and curl for SSE
# (tests/clients/curl_sse.sh), with and without an API key; then SIGTERM
# must stop the server with exit status 0.
# Usage: clients.sh LOOM_EXE FIXTURES_DIR. Exit 77 (skip) without node_modules.
set -euo pipefail
loom=${1:?usage: clients.sh LOOM_EXE FIXTURES_DIR}
fixtures=${2:?usage: clients.sh LOOM_EXE FIXTURES_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
clients=$here/clients
if [ ! -d "$clients/node_modules/openai" ] || ! command -v node >/dev/null; then
  echo "skip: tests/clients/node_modules is absent (run npm ci there)"
  exit 77
fi
model=$fixtures/models/qwen35-tiny
. "$here/cli/lib.sh"
with_tmp

# start_server [extra args...]: the server on $model, its requests logged.
start_server() {
  serve_start "$model" --request-log "$tmp/requests.jsonl" "$@"
}

start_server
node "$clients/openai_client.mjs" "$url/v1"
node "$clients/openai_n.mjs" "$url/v1"
bash "$clients/curl_sse.sh" "$url/v1"
serve_stop

umask 077
printf 'ci: sk-loom-test-key\n' >"$tmp/keys"
start_server --api-key-file "$tmp/keys"
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/models")
[ "$code" = 401 ] || { echo "no key: got $code, wanted 401"; exit 1; }
node "$clients/openai_client.mjs" "$url/v1" sk-loom-test-key
bash "$clients/curl_sse.sh" "$url/v1" sk-loom-test-key
# SIGHUP rereads the key file: the new key works, the old one no longer
printf 'ci2: sk-loom-second-key\n' >"$tmp/keys"
kill -HUP "$pid"
for _ in $(seq 1 50); do
  grep -q 'keys reloaded' "$tmp/err" && break
  sleep 0.1
done
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer sk-loom-second-key' "$url/v1/models")
[ "$code" = 200 ] || { echo "new key after SIGHUP: got $code"; exit 1; }
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer sk-loom-test-key' "$url/v1/models")
[ "$code" = 401 ] || { echo "old key after SIGHUP: got $code"; exit 1; }
echo "SIGHUP reloaded the keys"
serve_stop

# The chat API (issue 16): the tiny model as a hub id, with sampling
# defaults and a template that shows what reaches it.
snap=$tmp/hub/models--loom--tiny/snapshots/abc123
mkdir -p "$snap" "$tmp/hub/models--loom--tiny/refs"
printf abc123 >"$tmp/hub/models--loom--tiny/refs/main"
cp "$model/config.json" "$model/model.safetensors" "$model/tokenizer.json" "$snap/"
printf '{"bos_token_id": 0, "eos_token_id": 1, "temperature": 0.0, "max_new_tokens": 5}' \
  >"$snap/generation_config.json"
python3 - "$snap/tokenizer_config.json" <<'PY'
import json, sys
t = ("{%- if tools %}{{- 'T:' }}{%- for t in tools %}{{- t.function.name + ' ' }}{%- endfor %}{%- endif %}"
     "{%- if flavor is defined %}{{- 'F:' + flavor }}{%- endif %}"
     "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + (m.content or '') }}"
     "{%- if m.tool_calls %}{%- for c in m.tool_calls %}{{- c.function.name + (c.function.arguments | tojson) }}{%- endfor %}{%- endif %}"
     "{{- '<|im_end|>\\n' }}{%- endfor %}"
     "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}")
json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": t}, open(sys.argv[1], "w"))
PY
model_saved=$model
model=loom/tiny
HF_HUB_CACHE=$tmp/hub start_server --ctx 256
node "$clients/openai_chat_api.mjs" "$url/v1" 256
serve_stop
model=$model_saved

lines=$(wc -l <"$tmp/requests.jsonl")
python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$tmp/requests.jsonl"
echo "request log: $lines whole JSON lines"
echo "client checks passed"
