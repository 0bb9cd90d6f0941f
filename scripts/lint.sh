#!/usr/bin/env bash
# Formats (check only, or --fix) and runs clang-tidy over the project's own sources.
# Usage: scripts/lint.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.h' | grep -v '^tests/data/')
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
else
  clang-format --dry-run "${files[@]}" 2>&1 | grep -c warning | xargs -I{} echo "clang-format: {} lines would change"
fi
[[ -f build/compile_commands.json ]] || cmake --preset default >/dev/null
mapfile -t sources < <(git ls-files 'allocator/*.cpp' 'reporter/*.cpp')
clang-tidy -p build --quiet "${sources[@]}"
