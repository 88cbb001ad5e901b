#!/usr/bin/env bash
# The chat page of `loom serve` on the shipped KJV model: its HTTP side with
# curl (headers, methods, --no-webui), then the page in headless chromium
# (webui_browser.mjs) against an open server and a keyed one. Screenshots go
# to ARTIFACT_DIR.
# Usage: webui.sh LOOM_EXE ARTIFACT_DIR. Exit 77 (skip) without chromium,
# node or tests/clients/node_modules/playwright-core.
set -euo pipefail
loom=${1:?usage: webui.sh LOOM_EXE ARTIFACT_DIR}
artifacts=${2:?usage: webui.sh LOOM_EXE ARTIFACT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
chromium=${CHROMIUM:-/usr/bin/chromium}
if ! command -v node >/dev/null || [ ! -x "$chromium" ] ||
  [ ! -d "$here/node_modules/playwright-core" ]; then
  echo "skip: needs node, $chromium and tests/clients/node_modules/playwright-core"
  exit 77
fi
model=$root/models/kjv-qwen35
mkdir -p "$artifacts"
. "$root/tests/cli/lib.sh"
with_tmp

# start_server [extra args...]: the server on $model.
start_server() {
  serve_start "$model" "$@"
}

fail() {
  echo "FAIL $*"
  exit 1
}

# code METHOD PATH: the HTTP status
code() { curl -s -o /dev/null -w '%{http_code}' -X "$1" "$url$2"; }

start_server
curl -s -D "$tmp/h" -o "$tmp/page" "$url/"
grep -qi '^content-type: text/html; charset=utf-8' "$tmp/h" || fail "/ content type"
grep -qi "^content-security-policy: default-src 'none'; script-src 'self'" "$tmp/h" ||
  fail "/ has no strict CSP"
grep -qi '^x-content-type-options: nosniff' "$tmp/h" || fail "/ nosniff"
# the bytes served are the page's source, whole
cmp -s "$tmp/page" "$root/core/src/server/webui/index.html" || fail "/ is not index.html"
curl -s "$url/webui.js" | cmp -s - "$root/core/src/server/webui/webui.js" || fail "webui.js"
curl -s "$url/webui.css" | cmp -s - "$root/core/src/server/webui/webui.css" || fail "webui.css"
curl -s "$url/index.html" | cmp -s - "$tmp/page" || fail "/index.html differs from /"
curl -s -D "$tmp/h" -o /dev/null "$url/webui.js"
grep -qi '^content-type: text/javascript' "$tmp/h" || fail "webui.js content type"
[ "$(curl -s -I -o /dev/null -w '%{http_code}' "$url/")" = 200 ] || fail "HEAD /"
[ "$(code POST /)" = 405 ] || fail "POST / is not 405"
[ "$(code GET /nothing.js)" = 404 ] || fail "an unknown file is not 404"
[ "$(code GET /embed.cmake)" = 404 ] || fail "the embed script is served"
echo "ok   the page's files are served whole with their headers"
node "$here/webui_browser.mjs" open "$url" "$artifacts"
serve_stop

start_server --no-webui
[ "$(code GET /)" = 404 ] || fail "--no-webui still serves /"
[ "$(code GET /webui.js)" = 404 ] || fail "--no-webui still serves webui.js"
[ "$(code GET /v1/models)" = 200 ] || fail "--no-webui: the API is gone"
echo "ok   --no-webui: no page, the API stays"
serve_stop

umask 077
printf 'ci: sk-loom-webui-key\n' >"$tmp/keys"
start_server --api-key-file "$tmp/keys"
[ "$(code GET /)" = 200 ] || fail "a keyed server does not serve the page without a key"
[ "$(code GET /v1/models)" = 401 ] || fail "a keyed server answers /v1 without a key"
node "$here/webui_browser.mjs" keyed "$url" sk-loom-webui-key "$artifacts"
serve_stop
echo "screenshots in $artifacts"
echo "chat page checks passed"
