#!/usr/bin/env bash
# Installs every build and test dependency of vramtrace from Debian's packages.
# Idempotent: prints nothing and installs nothing when everything is already present.
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
if [[ "${1:-}" == "--with-browser" || "${VRAMTRACE_WITH_BROWSER:-0}" == "1" ]]; then
  pkgs+=(chromium)
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
((${#missing[@]} == 0)) && exit 0

echo "setup-deps: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
