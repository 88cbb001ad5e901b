#!/usr/bin/env bash
# Server-sent events as curl sees them from a running `loom serve`: the
# content type, "data: " framing, one JSON chunk per event, one
# finish_reason, the usage chunk, and `data: [DONE]` last.
# Usage: curl_sse.sh BASE_URL [API_KEY]   (BASE_URL like http://127.0.0.1:8888/v1)
set -euo pipefail
base=${1:?usage: curl_sse.sh BASE_URL [API_KEY]}
auth=()
[ -n "${2:-}" ] && auth=(-H "Authorization: Bearer $2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check_stream() { # route body chunk_object
  local route=$1 body=$2 object=$3
  curl -sS -N --max-time 60 -D "$tmp/head" -o "$tmp/body" "${auth[@]}" \
    -H 'Content-Type: application/json' -d "$body" "$base/$route"
  grep -qi '^HTTP/1.1 200' "$tmp/head" || { echo "FAIL $route: status"; cat "$tmp/head"; return 1; }
  grep -qi '^content-type: text/event-stream' "$tmp/head" ||
    { echo "FAIL $route: content type"; cat "$tmp/head"; return 1; }
  python3 - "$tmp/body" "$object" <<'PY'
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
obj = sys.argv[2]
assert raw.endswith("\n\n"), "body does not end with a blank line"
events = raw[:-2].split("\n\n")
assert all(e.startswith("data: ") for e in events), "an event is not 'data: '"
assert events[-1] == "data: [DONE]", "last event is not [DONE]"
finishes, usage = [], None
for e in events[:-1]:
    chunk = json.loads(e[6:])
    assert chunk["object"] == obj, chunk["object"]
    if not chunk["choices"]:
        usage = chunk["usage"]
    for c in chunk["choices"]:
        if c["finish_reason"] is not None:
            finishes.append(c["finish_reason"])
assert len(finishes) == 1 and finishes[0] in ("stop", "length"), finishes
assert usage and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
print("ok   %d events, finish_reason %s, usage %s" % (len(events), finishes[0], usage))
PY
}

check_stream completions \
  '{"prompt":"In the beginning","max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}' \
  text_completion
check_stream chat/completions \
  '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}' \
  chat.completion.chunk
echo "curl SSE checks passed"
