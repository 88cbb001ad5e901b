#!/usr/bin/env bash
# `loom serve` as llama-server and vLLM users expect it, with curl: the
# startup summary, --api-key / $LOOM_API_KEY / x-api-key, CORS preflight and
# headers, /tokenize (llama-server and vLLM shapes) and /detokenize against
# `loom tokenize`, /version, the latency histograms and finish reasons in
# /metrics, --timeout, idle shutdown under 200 ms, SIGTERM draining an
# in-flight request, and HTTPS with a self-signed certificate made here.
set -u
loom=$1
fixtures=$2
build=$(dirname "$loom")
model=$fixtures/models/qwen35-tiny
. "$(dirname "$0")/lib.sh"
need_plugin qwen35
command -v curl >/dev/null || { echo "no curl: skipped"; exit 77; }
export LC_ALL=C
tmp=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

start() { # args...: starts loom serve, sets pid and url
  # emptied here: the background job's own redirection may come late
  : >"$tmp/out"
  "$loom" serve "$model" --port 0 --threads 1 "$@" >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  url=
  for _ in $(seq 1 300); do
    url=$(sed -n 's/.*listening on \(https\{0,1\}:[^ ]*\).*/\1/p' "$tmp/out")
    [ -n "$url" ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  cat "$tmp/err"; echo "server did not start"; return 1
}
stop() { # SIGTERM; sets stop_ms and stop_rc
  local t0; t0=$(date +%s%N)
  kill -TERM "$pid"; wait "$pid"; stop_rc=$?
  stop_ms=$((($(date +%s%N) - t0) / 1000000)); pid=
}
metric() { curl -s "$url/metrics" | awk -v k="$1" '$1 == k { print $2 }'; }

# ---- keys, summary, tokenize, CORS
# --ctx 4096: the 499 request below asks for 4000 tokens, and max_tokens
# over the context is refused up front (400) since the chat API
LOOM_API_KEY=from-env start --cors-origin http://app.example --ctx 4096 || exit 1
check "summary names model, family, device, context, streams, threads, load time" \
  'grep -q "model qwen35-tiny" "$tmp/err" && grep -q "family qwen35" "$tmp/err" && grep -q "device cpu" "$tmp/err" && grep -q "context [0-9]* tokens, [0-9]* streams, 1 threads, loaded in [0-9.]* s" "$tmp/err"'
check "no progress when stderr is not a terminal" '! grep -q "MB (" "$tmp/err"'
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/models")
check "no key: 401" '[ "$code" = 401 ]'
code=$(curl -s -o /dev/null -w '%{http_code}' -H "x-api-key: from-env" "$url/v1/models")
check "\$LOOM_API_KEY through x-api-key: 200" '[ "$code" = 200 ]'
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer from-env" "$url/v1/models")
check "\$LOOM_API_KEY through Authorization: Bearer: 200" '[ "$code" = 200 ]'
code=$(curl -s -o /dev/null -w '%{http_code}' -H "x-api-key: wrong" "$url/v1/models")
check "a wrong key: 401" '[ "$code" = 401 ]'
k='-H x-api-key:from-env'

want=$("$loom" tokenize "$model" "In the beginning" | tr -d ' ')
got=$(curl -s $k "$url/tokenize" -d '{"content":"In the beginning"}')
check "POST /tokenize gives loom tokenize's ids" 'echo "$got" | grep -qF "\"tokens\":$want"'
n=$(echo "$want" | tr ',' '\n' | wc -l)
check "/tokenize counts them (vLLM's count, max_model_len)" 'echo "$got" | grep -q "\"count\":$n" && echo "$got" | grep -q "\"max_model_len\":[1-9]"'
got=$(curl -s $k "$url/tokenize" -d '{"prompt":"In the beginning"}')
check "vLLM's prompt member" 'echo "$got" | grep -qF "\"tokens\":$want"'
got=$(curl -s $k "$url/tokenize" -d '{"content":"In the beginning","with_pieces":true}' |
  python3 -c 'import json, sys; t = json.load(sys.stdin)["tokens"]; print(json.dumps([x["id"] for x in t], separators=(",", ":")), "".join(x["piece"] for x in t))')
check "with_pieces: the ids, and pieces that spell the text" '[ "$got" = "$want In the beginning" ]'
printf '[{"role":"user","content":"hi"}]' >"$tmp/m.json"
"$loom" chat-format "$model" "$tmp/m.json" >"$tmp/chat.txt"
want=$("$loom" tokenize "$model" -f "$tmp/chat.txt" | tr -d ' ')
got=$(curl -s $k "$url/tokenize" -d '{"messages":[{"role":"user","content":"hi"}]}')
check "vLLM's messages: the chat template's ids" 'echo "$got" | grep -qF "\"tokens\":$want"'
ids=$("$loom" tokenize "$model" "In the beginning" | tr -d ' ')
got=$(curl -s $k "$url/detokenize" -d "{\"tokens\":$ids}")
check "POST /detokenize gives the text back" 'echo "$got" | grep -q "\"content\":\"In the beginning\""'
code=$(curl -s -o /dev/null -w '%{http_code}' $k "$url/detokenize" -d '{"tokens":[99999999]}')
check "an id outside the vocabulary: 400" '[ "$code" = 400 ]'
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/tokenize" -d '{"content":"x"}')
check "/tokenize needs the key too" '[ "$code" = 401 ]'
got=$(curl -s "$url/version")
check "GET /version" 'echo "$got" | grep -q "\"version\":\"[0-9]"'

h=$(curl -s -i -X OPTIONS "$url/v1/chat/completions" -H "Origin: http://app.example" \
  -H "Access-Control-Request-Method: POST" -H "Access-Control-Request-Headers: authorization, content-type")
check "preflight from an allowed origin: 204 with methods and headers" \
  'echo "$h" | grep -q "^HTTP/1.1 204" && echo "$h" | grep -qi "^Access-Control-Allow-Origin: http://app.example" && echo "$h" | grep -qi "^Access-Control-Allow-Methods:.*POST" && echo "$h" | grep -qi "^Access-Control-Allow-Headers: authorization, content-type"'
h=$(curl -s -i $k "$url/v1/models" -H "Origin: http://app.example")
check "an allowed origin gets Access-Control-Allow-Origin" 'echo "$h" | grep -qi "^Access-Control-Allow-Origin: http://app.example"'
h=$(curl -s -i $k "$url/v1/models" -H "Origin: http://evil.example")
check "another origin gets none" '! echo "$h" | grep -qi "^Access-Control-Allow-Origin"'
h=$(curl -s -i -X OPTIONS "$url/v1/models" -H "Origin: http://evil.example")
check "a preflight from another origin is not answered as CORS" '! echo "$h" | grep -qi "^Access-Control-Allow"'

# ---- metrics: two generations, finish reasons, histograms
curl -s $k "$url/v1/completions" -d '{"prompt":"In the beginning","max_tokens":5,"ignore_eos":true}' >/dev/null
curl -s $k "$url/v1/completions" -d '{"prompt":"In the beginning","max_tokens":3,"ignore_eos":true}' >/dev/null
check "finished by reason: length 2" '[ "$(metric "loom_request_success_total{finished_reason=\"length\"}")" = 2 ]'
for h in loom_e2e_request_latency_seconds loom_time_per_output_token_seconds loom_request_queue_time_seconds loom_time_to_first_token_seconds; do
  check "$h histogram counts 2" '[ "$(metric "${h}_count")" = 2 ] && [ "$(metric "${h}_bucket{le=\"+Inf\"}")" = 2 ]'
done
e2e=$(metric loom_e2e_request_latency_seconds_sum)
ttft=$(metric loom_time_to_first_token_seconds_sum)
check "latency sum >= time to first token sum" 'awk -v a="$e2e" -v b="$ttft" "BEGIN { exit !(a >= b && b > 0) }"'
# a client that hangs up before the answer is a 499; it resets the
# connection (a plain close is a half-close, which still gets its answer)
python3 - "$url" "${k#-H }" <<'PY'
import socket, struct, sys, time
host, port = sys.argv[1].split("//")[1].rsplit(":", 1)
key = sys.argv[2].strip("'\"")
body = b'{"prompt":"In","max_tokens":4000,"ignore_eos":true}'
s = socket.create_connection((host, int(port)))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" +
          (key.encode() + b"\r\n" if key else b"") +
          b"Content-Type: application/json\r\nContent-Length: " +
          str(len(body)).encode() + b"\r\n\r\n" + body)
time.sleep(0.3)
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
s.close()
PY
for _ in $(seq 1 100); do [ -n "$(metric 'loom_requests_total{route="/v1/completions",status="499"}')" ] && break; sleep 0.05; done
check "a hung-up client counts as 499" '[ "$(metric "loom_requests_total{route=\"/v1/completions\",status=\"499\"}")" = 1 ]'

# idle: SIGTERM stops it fast
sleep 0.3
stop
check "idle shutdown under 200 ms (took $stop_ms ms), exit 0" '[ $stop_rc -eq 0 ] && [ $stop_ms -lt 200 ]'

# ---- --timeout, draining, --api-key
printf '%s' '{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}' >"$tmp/t.jinja"
start --timeout 0.3 --api-key the-key --ctx 4096 --chat-template "$tmp/t.jinja" || exit 1
want=$("$loom" tokenize "$model" "<user>hi" | tr -d ' ')
got=$(curl -s -H "x-api-key: the-key" "$url/tokenize" -d '{"messages":[{"role":"user","content":"hi"}]}')
check "serve --chat-template renders with the file" 'echo "$got" | grep -qF "\"tokens\":$want"'
t0=$(date +%s%N)
got=$(curl -s -w ' %{http_code}' -H "x-api-key: the-key" "$url/v1/completions" -d '{"prompt":"In","max_tokens":4000,"ignore_eos":true}')
ms=$((($(date +%s%N) - t0) / 1000000))
check "--timeout ends a long request with 504 naming the limit ($ms ms)" \
  'echo "$got" | grep -q " 504$" && echo "$got" | grep -q "0.3 s" && [ $ms -lt 5000 ]'
got=$(curl -sN -H "x-api-key: the-key" "$url/v1/completions" -d '{"prompt":"In","max_tokens":4000,"ignore_eos":true,"stream":true}')
check "a stream past --timeout ends with an error event and [DONE]" \
  'echo "$got" | grep -q "\"code\":\"timeout\"" && echo "$got" | tail -n 2 | grep -q "\[DONE\]"'
check "timeouts counted as a finish reason" '[ "$(metric "loom_request_success_total{finished_reason=\"timeout\"}")" = 2 ]'
check "freed: no stream active" '[ "$(metric loom_streams_active)" = 0 ]'
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer the-key" "$url/v1/models")
check "--api-key accepted" '[ "$code" = 200 ]'
stop

# a request in flight when SIGTERM comes still gets its answer
start || exit 1
curl -s "$url/v1/completions" -d '{"prompt":"In","max_tokens":600,"ignore_eos":true}' >"$tmp/inflight" &
cpid=$!
seen=0
for _ in $(seq 1 200); do [ "$(metric loom_streams_active)" = 1 ] && { seen=1; break; }; sleep 0.01; done
stop
wait $cpid
check "SIGTERM while a request runs lets it finish" '[ $seen -eq 1 ] && grep -q "\"completion_tokens\":600" "$tmp/inflight" && [ $stop_rc -eq 0 ]'
# which part failed, for a failure seen once on CI's 2 cores (2026-12-08)
[ $seen -eq 1 ] && [ $stop_rc -eq 0 ] && grep -q '"completion_tokens":600' "$tmp/inflight" ||
  echo "  seen $seen, exit $stop_rc, answer: $(head -c 300 "$tmp/inflight")"

# ---- TLS with a certificate made now
if command -v openssl >/dev/null; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/key.pem" -out "$tmp/cert.pem" \
    -days 1 -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1
  chmod 600 "$tmp/key.pem"
  start --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" || exit 1
  check "the address is https" 'echo "$url" | grep -q "^https://"'
  got=$(curl -s --cacert "$tmp/cert.pem" "$url/health")
  check "HTTPS answers, verified against the certificate" 'echo "$got" | grep -q "\"status\":\"ok\""'
  got=$(curl -s --cacert "$tmp/cert.pem" "$url/v1/completions" -d '{"prompt":"In","max_tokens":2}')
  check "a completion over HTTPS" 'echo "$got" | grep -q "\"completion_tokens\":2"'
  code=$(curl -s -o /dev/null -w '%{http_code}' "http${url#https}/health")
  check "plain HTTP to it gets no answer" '[ "$code" = 000 ]'
  stop
  "$loom" serve "$model" --port 0 --tls-cert "$tmp/cert.pem" >/dev/null 2>"$tmp/err"; rc=$?
  check "--tls-cert without --tls-key is refused" '[ $rc -eq 2 ] && grep -q "tls-key" "$tmp/err"'
  "$loom" serve "$model" --port 0 --tls-cert "$tmp/m.json" --tls-key "$tmp/key.pem" >/dev/null 2>"$tmp/err"; rc=$?
  check "a certificate that is not PEM is refused by name" '[ $rc -eq 1 ] && grep -q "m.json: not a PEM certificate" "$tmp/err"'
else
  echo "no openssl: TLS not tested"
fi

finish
