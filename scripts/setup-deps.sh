#!/usr/bin/env bash
# Installs every build and test dependency of vramtrace from Debian's packages.
# Idempotent: prints nothing and installs nothing when everything is already present. Also puts
# DuckDB's libduckdb.so (npm's package, sha512 pinned) where `vramtrace export --format parquet`
# finds it.
# Usage: scripts/setup-deps.sh [--with-browser]   (--with-browser adds chromium for the HTML report test)
set -euo pipefail

pkgs=(cmake ninja-build g++ pkg-config
      libspdlog-dev libfmt-dev nlohmann-json3-dev catch2 libsimdjson-dev libcli11-dev
      libzstd-dev zlib1g-dev libbenchmark-dev
      clang libclang-rt-14-dev)
pkgs+=(libisal-dev)     # ISA-L: gzip decoding about 2.6x faster than zlib for big traces (zlib is the fallback)
pkgs+=(libxml2-utils)  # xmllint: the JUnit schema test of `vramtrace check --format junit`
pkgs+=(debootstrap)    # the Debian 11 root of the portable build (scripts/portable.sh)
pkgs+=(libdw-dev)      # elfutils' static libdw: source lines of native frames (reporter/symbols); names work without it
pkgs+=(ccache)         # scripts/test.sh's compiler cache: a later run on the same machine rebuilds only what changed
if [[ "${1:-}" == "--with-browser" || "${VRAMTRACE_WITH_BROWSER:-0}" == "1" ]]; then
  pkgs+=(chromium)
fi

# DuckDB's C API library for `vramtrace export --format parquet` (loaded at run time, never linked:
# docs/export.md), from npm's package of DuckDB's Node bindings, which carries libduckdb.so. The
# package's sha512 (npm's "integrity") is pinned; the library goes to the folder the command looks
# in by default. Without npm it says so and goes on: only that export and its tests need it.
duckdb_version=1.5.6
duckdb_package=@duckdb/node-bindings-linux-x64@1.5.6-r.1
duckdb_sha512=IXcrZJE6kEqM0Z4wwdVnGBHX/frOS33VPNAwDXQ/Q+Fs84b058Qe94chrCCIcNJlG8Y3UHIUU4eBeCQxW5mN1Q==
duckdb_dir="${XDG_CACHE_HOME:-$HOME/.cache}/vramtrace/duckdb/$duckdb_version"
install_duckdb() {
  [[ -f "$duckdb_dir/libduckdb.so" ]] && return 0
  if ! command -v npm >/dev/null || ! command -v openssl >/dev/null; then
    echo "setup-deps: no npm (or openssl): DuckDB's libduckdb.so not installed; vramtrace export --format parquet" \
         "and its tests need it (docs/export.md)" >&2
    return 0
  fi
  echo "setup-deps: fetching $duckdb_package (libduckdb.so, about 24 MB) into $duckdb_dir" >&2
  local tmp
  tmp=$(mktemp -d)
  # A failed download (no network, the registry down) is reported and the rest still installed:
  # only the parquet export and its tests need the library, and they say it is missing.
  if ! (cd "$tmp" && npm pack --silent "$duckdb_package" >/dev/null); then
    echo "setup-deps: could not fetch $duckdb_package from npm's registry: libduckdb.so not installed;" \
         "vramtrace export --format parquet and its tests need it (docs/export.md)" >&2
    rm -rf "$tmp"
    return 0
  fi
  local tgz=("$tmp"/*.tgz)
  local got
  got=$(openssl dgst -sha512 -binary "${tgz[0]}" | openssl base64 -A)
  if [[ "$got" != "$duckdb_sha512" ]]; then
    echo "setup-deps: $duckdb_package has sha512 $got, not the pinned $duckdb_sha512: not installed" >&2
    rm -rf "$tmp"
    return 1
  fi
  # Called in a `||` list, where set -e does not apply: each step's failure is checked.
  if ! tar -xzf "${tgz[0]}" -C "$tmp" package/libduckdb.so || ! mkdir -p "$duckdb_dir" ||
     ! mv "$tmp/package/libduckdb.so" "$duckdb_dir/libduckdb.so.tmp.$$" ||
     ! mv "$duckdb_dir/libduckdb.so.tmp.$$" "$duckdb_dir/libduckdb.so"; then
    echo "setup-deps: could not unpack libduckdb.so from $duckdb_package into $duckdb_dir" >&2
    rm -rf "$tmp" "$duckdb_dir/libduckdb.so.tmp.$$"
    return 1
  fi
  rm -rf "$tmp"
}
# A pinned package with another sha512 fails the script, but only after the system packages.
duckdb_status=0
install_duckdb || duckdb_status=$?

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
((${#missing[@]} == 0)) && exit "$duckdb_status"

echo "setup-deps: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
exit "$duckdb_status"
