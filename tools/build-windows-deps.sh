#!/usr/bin/env bash
# Builds loom's dependencies for x86_64-w64-mingw32 (static libraries) from
# Debian's own source packages into BUILD_DIR/deps/prefix.
# Usage: tools/build-windows-deps.sh [BUILD_DIR]   (default: build-windows)
#
# The sources come from `apt-get source`, through a private apt state under
# BUILD_DIR/deps/apt whose deb-src entries repeat the suites of the machine's
# Debian deb entries; the system's apt configuration is left as it is.
# Nothing is downloaded from anywhere else and nothing is kept in the repo.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build-windows}
mkdir -p "$build"
build=$(cd "$build" && pwd)
deps=$build/deps
prefix=$deps/prefix
host=x86_64-w64-mingw32
jobs=${LOOM_JOBS:-2}
toolchain=$here/cmake/mingw-w64.cmake

if [ -f "$prefix/.complete" ]; then
  echo "windows deps: $prefix is complete"
  exit 0
fi
rm -rf "$deps"
mkdir -p "$deps/apt/lists/partial" "$deps/apt/cache" "$deps/apt/parts" \
  "$deps/src" "$deps/work" "$prefix"

# deb-src twins of the Debian deb entries (deb822 .sources and one-line .list
# files alike); third-party repositories carry no sources and are left out.
emit_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -n -E 's/^[[:space:]]*deb[[:space:]]+(.*debian.*)$/deb-src \1/p' "$f"
  done >"$deps/apt/parts/loom-src.list"
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'BEGIN { RS = ""; ORS = "\n\n" }
         /(^|\n)Types:[^\n]*deb/ && /(^|\n)URIs:[^\n]*debian/ &&
         !/(^|\n)Enabled:[[:space:]]*no/ {
           sub(/(^|\n)Types:[^\n]*/, "\nTypes: deb-src"); sub(/^\n/, ""); print }' \
      "$f"
  done >"$deps/apt/parts/loom-src.sources"
  if [ ! -s "$deps/apt/parts/loom-src.list" ] && [ ! -s "$deps/apt/parts/loom-src.sources" ]; then
    echo "error: no Debian deb entries in /etc/apt to mirror as deb-src" >&2
    exit 1
  fi
}
emit_sources
: >"$deps/apt/none.list"
apt_opts=(-o "Dir::Etc::SourceList=$deps/apt/none.list"
          -o "Dir::Etc::SourceParts=$deps/apt/parts"
          -o "Dir::State::Lists=$deps/apt/lists"
          -o "Dir::Cache=$deps/apt/cache"
          -o "APT::Sandbox::User=root" -qq)
suites=$(sed -n -E 's/^Suites:[[:space:]]*//p' "$deps/apt/parts/loom-src.sources";
         sed -E 's/\[[^]]*\]//' "$deps/apt/parts/loom-src.list" | awk '{ print $3 }')
echo "== windows deps: apt-get update (deb-src for: $(echo $suites))"
apt-get "${apt_opts[@]}" update

# The newest version first; when a mirror lacks it (a security update not yet
# synced), the version of each suite in turn.
fetch() {
  local pkg=$1 s
  (cd "$deps/src" && apt-get "${apt_opts[@]}" source "$pkg" >/dev/null 2>&1) && return 0
  for s in $suites; do
    rm -rf "$deps/src/$pkg"[-_]* 2>/dev/null || true
    (cd "$deps/src" && apt-get "${apt_opts[@]}" source "$pkg/$s" >/dev/null 2>&1) && return 0
  done
  echo "error: apt-get source $pkg failed for every suite ($suites)" >&2
  exit 1
}
srcdir() { find "$deps/src" -maxdepth 1 -mindepth 1 -type d -name "$1-*" | head -1; }

cmake_dep() {
  local name=$1
  shift
  local src
  src=$(srcdir "$name")
  echo "== windows deps: $name ($(basename "$src"), cmake)"
  cmake -S "$src" -B "$deps/work/$name" -G "Unix Makefiles" \
    -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DLOOM_WINDOWS_DEPS="$prefix" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=OFF \
    -DCMAKE_POLICY_DEFAULT_CMP0074=NEW "$@" >"$deps/work/$name.log" 2>&1 ||
    { tail -40 "$deps/work/$name.log"; exit 1; }
  cmake --build "$deps/work/$name" -j"$jobs" >>"$deps/work/$name.log" 2>&1 ||
    { tail -40 "$deps/work/$name.log"; exit 1; }
  cmake --install "$deps/work/$name" >>"$deps/work/$name.log" 2>&1 ||
    { tail -40 "$deps/work/$name.log"; exit 1; }
}

for p in jansson pcre2 utf8proc libmicrohttpd check nettle; do
  echo "== windows deps: apt-get source $p"
  fetch "$p"
done

cmake_dep jansson -DJANSSON_BUILD_DOCS=OFF -DJANSSON_EXAMPLES=OFF \
  -DJANSSON_WITHOUT_TESTS=ON -DJANSSON_BUILD_SHARED_LIBS=OFF
cmake_dep pcre2 -DPCRE2_BUILD_PCRE2_8=ON -DPCRE2_BUILD_PCRE2_16=OFF \
  -DPCRE2_BUILD_PCRE2_32=OFF -DPCRE2_BUILD_PCRE2GREP=OFF -DPCRE2_BUILD_TESTS=OFF \
  -DPCRE2_SUPPORT_JIT=OFF -DPCRE2_SUPPORT_LIBBZ2=OFF -DPCRE2_SUPPORT_LIBZ=OFF \
  -DPCRE2_SUPPORT_LIBEDIT=OFF -DPCRE2_SUPPORT_LIBREADLINE=OFF
cmake_dep utf8proc -DUTF8PROC_ENABLE_TESTING=OFF
cmake_dep check -DCHECK_ENABLE_TESTS=OFF -DBUILD_TESTING=OFF \
  -DCHECK_ENABLE_SUBUNIT=OFF -DENABLE_SUBUNIT_EXT=OFF
# Check's CMake build names a library in check.pc that it does not install
# (check_pic) and also makes a DLL; keep the static library only.
sed -i -e 's/-lcheck_pic/-lcheck/' "$prefix/lib/pkgconfig/check.pc"
rm -f "$prefix/lib/libcheck.dll.a" "$prefix/bin/libcheck.dll"

# libmicrohttpd has only autotools; HTTPS is off (TLS optional, docs/windows.md).
src=$(srcdir libmicrohttpd)
echo "== windows deps: libmicrohttpd ($(basename "$src"), autotools)"
mkdir -p "$deps/work/libmicrohttpd"
(cd "$deps/work/libmicrohttpd" &&
  "$src/configure" --host=$host --prefix="$prefix" --libdir="$prefix/lib" \
    --enable-static --disable-shared --disable-https --without-gnutls \
    --disable-doc --disable-examples --disable-curl --disable-nls \
    --disable-dauth --disable-bauth --disable-postprocessor \
    --enable-itc=socketpair >"$deps/work/libmicrohttpd.log" 2>&1 &&
  make -j"$jobs" -C src/microhttpd >>"$deps/work/libmicrohttpd.log" 2>&1 &&
  make -C src/microhttpd install >>"$deps/work/libmicrohttpd.log" 2>&1 &&
  make -C src/include install >>"$deps/work/libmicrohttpd.log" 2>&1 &&
  make install-pkgconfigDATA >>"$deps/work/libmicrohttpd.log" 2>&1) ||
  { tail -40 "$deps/work/libmicrohttpd.log"; exit 1; }

# nettle (the API keys' SHA-256) has only autotools; loom uses its hashes
# alone, so hogweed's public-key half (which needs GMP) is not built, and
# its C code stands in for the assembly (which would need m4; a key's hash
# is not hot).
src=$(srcdir nettle)
echo "== windows deps: nettle ($(basename "$src"), autotools)"
# Debian's fPIC patch edits aclocal.m4 and configure alike; newer stamps keep
# make from running autoheader, which the build machine need not have.
touch "$src/configure" "$src/stamp-h.in" "$src/config.h.in"
mkdir -p "$deps/work/nettle"
(cd "$deps/work/nettle" &&
  "$src/configure" --host=$host --prefix="$prefix" --libdir="$prefix/lib" \
    --enable-static --disable-shared --disable-public-key \
    --disable-assembler --disable-documentation --disable-openssl >"$deps/work/nettle.log" 2>&1 &&
  make -j"$jobs" libnettle.a nettle.pc >>"$deps/work/nettle.log" 2>&1 &&
  make install-static install-headers install-pkgconfig >>"$deps/work/nettle.log" 2>&1) ||
  { tail -40 "$deps/work/nettle.log"; exit 1; }

touch "$prefix/.complete"
echo "windows deps: ready in $prefix"
