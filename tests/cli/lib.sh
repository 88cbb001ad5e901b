# Shell helpers the CLI and client tests share; sourced, not run (the
# tests/CMakeLists.txt glob of tests/cli/*.sh leaves this file out).

# check NAME CONDITION: evaluates CONDITION (a command) and counts it as
# passed or failed; `finish` ends the script with the tally.
fail=0
pass=0
check() {
  if eval "$2"; then echo "ok: $1"; pass=$((pass + 1)); else echo "FAIL: $1"; fail=$((fail + 1)); fi
}
finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}

# need_plugin NAME: exit 77 (skip) unless the plugin is built beside $loom.
need_plugin() {
  if [ ! -e "$(dirname "$loom")/plugins/libloom-$1.so" ]; then
    echo "$1 plugin not built: skipped"; exit 77
  fi
}

# with_tmp: $tmp, a scratch folder removed at exit with any server that
# serve_start left running.
with_tmp() {
  tmp=$(mktemp -d)
  pid=
  trap lib_cleanup EXIT
}
lib_cleanup() {
  if [ -n "${pid:-}" ]; then kill "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}

# serve_start MODEL [extra args...]: `loom serve` on a free loopback port
# (--port 0), output in $tmp/out and $tmp/err; sets $pid and, once the model
# is loaded and the address printed, $url.
serve_start() {
  local model=$1
  shift
  # emptied here, before the server starts: the background job truncates
  # them only when it runs, and the wait below must not read the address
  # a server started earlier printed there
  : >"$tmp/out"
  : >"$tmp/err"
  "$loom" serve "$model" --port 0 "$@" >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  # up to 5 minutes: a sanitizer build on a loaded 2-core machine is slow
  for _ in $(seq 1 3000); do
    if grep -q 'listening on' "$tmp/out" 2>/dev/null; then break; fi
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/err"; echo "server died"; exit 1; }
    sleep 0.1
  done
  url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$tmp/out")
  [ -n "$url" ] || { cat "$tmp/err"; echo "no address printed"; exit 1; }
  echo "server at $url"
}

# serve_stop: SIGTERM must stop the server with exit status 0.
serve_stop() {
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  pid=
  [ "$rc" = 0 ] || { cat "$tmp/err"; echo "server exited $rc on SIGTERM"; exit 1; }
  echo "server stopped with exit status 0"
}

# golden_ids DIR: from DIR/golden.json, $prompt and $greedy (comma lists),
# $n (the greedy length) and $want (greedy as `loom run --print-ids` prints).
golden_ids() {
  flat=$(tr -d ' \n' < "$1/golden.json")
  prompt=$(echo "$flat" | sed -n 's/.*"prompt_ids":\[\([0-9,]*\)\].*/\1/p')
  greedy=$(echo "$flat" | sed -n 's/.*"greedy":\[\([0-9,]*\)\].*/\1/p')
  n=$(echo "$greedy" | tr ',' '\n' | wc -l)
  want="[$(echo "$greedy" | sed 's/,/, /g')]"
}

# logits_rel GOT REF: max |got-ref| / max |ref| of two float32 files.
logits_rel() {
  od -An -v -f -w4 "$1" > "$tmp/rel_a"
  od -An -v -f -w4 "$2" > "$tmp/rel_b"
  paste "$tmp/rel_a" "$tmp/rel_b" | awk '{d=$1-$2; if(d<0)d=-d; if(d>md)md=d; r=$2; if(r<0)r=-r; if(r>mr)mr=r} END{printf "%g", md/mr}'
}

# check_golden NAME DIR: `loom logits` within 1e-4 of DIR/logits.f32 and
# `loom run` giving DIR's golden greedy ids, whole and in prompt chunks of 5.
check_golden() {
  local m=$1 d=$2
  golden_ids "$d"
  "$loom" logits "$d" --ids "$prompt" --out "$tmp/l.f32" --threads 1 >/dev/null 2>&1; rc=$?
  check "$m: logits has the reference's size" \
    '[ $rc -eq 0 ] && [ "$(stat -c %s "$tmp/l.f32")" = "$(stat -c %s "$d/logits.f32")" ]'
  rel=$(logits_rel "$tmp/l.f32" "$d/logits.f32")
  check "$m: logits within 1e-4 of transformers (rel $rel)" \
    'awk -v r="$rel" "BEGIN{exit !(r < 1e-4)}"'
  out=$("$loom" run "$d" --ids "$prompt" -n "$n" --temperature 0 --ignore-eos --print-ids --threads 2 2>/dev/null)
  check "$m: run --print-ids equals the golden greedy" '[ "$out" = "$want" ]'
  out=$("$loom" run "$d" --ids "$prompt" -n "$n" --temperature 0 --ignore-eos --print-ids --prefill-chunk 5 2>/dev/null)
  check "$m: prompt chunks of 5 give the same ids" '[ "$out" = "$want" ]'
}
