#!/usr/bin/env bash
# Installs what loom needs to build and test on Debian/Ubuntu (run as root or
# with sudo). Idempotent: packages already present are left as they are.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
pkgs=(build-essential cmake pkg-config libjansson-dev check libsubunit-dev
      libpcre2-dev libutf8proc-dev libmicrohttpd-dev nettle-dev curl python3
      openssl) # openssl: the TLS test makes a self-signed certificate
# CI extras: the format check, the Windows build, the browser the chat
# page's test drives (tests/clients/webui.sh), clang for the fuzz targets
[ "${LOOM_CI_EXTRAS:-0}" = 1 ] && pkgs+=(clang-format gcc-mingw-w64-x86-64 chromium clang)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}"
fi
