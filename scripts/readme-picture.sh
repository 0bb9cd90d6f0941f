#!/usr/bin/env bash
# Regenerates docs/images/report.png, the README's picture: the HTML report of a bundled real OOM
# (BERT-base training under a 16 GiB cap on the H200, tests/data/oom/bert_16g), rendered by headless
# Chromium (Debian's `chromium`, which scripts/setup-deps.sh --with-browser installs).
# Usage: scripts/readme-picture.sh [TRACE]   (VRAMTRACE: the command, default build/bin/vramtrace)
set -euo pipefail
cd "$(dirname "$0")/.."
vt=${VRAMTRACE:-build/bin/vramtrace}
trace=${1:-tests/data/oom/bert_16g}
browser=$(command -v chromium || command -v chromium-browser || true)
[[ -x $vt ]] || { echo "readme-picture: no $vt (build first)" >&2; exit 2; }
[[ -n $browser ]] || { echo "readme-picture: no chromium (scripts/setup-deps.sh --with-browser)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$vt" report "$trace" -o "$tmp/report.html" --quiet
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
  --window-size=1400,1000 --screenshot="$tmp/report.png" "file://$tmp/report.html" >/dev/null 2>&1
[[ -s $tmp/report.png ]] || { echo "readme-picture: chromium wrote no screenshot" >&2; exit 1; }
cp "$tmp/report.png" docs/images/report.png
echo "docs/images/report.png from $trace"
