#!/usr/bin/env bash
# clang-format over the C++ and CUDA sources (src/, tests/, bench/, tools/), in the style of
# .clang-format.
#   scripts/format.sh [FILE...]          rewrite the files in place (default: every tracked source)
#   scripts/format.sh --check [FILE...]  change nothing; list the files that differ and exit 1 if any
# Needs clang-format 14 or newer (Debian: apt-get install clang-format).
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
if [[ "${1:-}" == "--check" ]]; then
  check=1
  shift
fi
command -v clang-format >/dev/null || { echo "format.sh: clang-format not found (apt-get install clang-format)" >&2; exit 2; }

if [[ $# -gt 0 ]]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files -- 'src/*.cpp' 'src/*.h' 'src/*.cu' 'src/*.cuh' 'tests/*.cpp' 'tests/*.h' \
                                      'bench/*.cpp' 'bench/*.h' 'bench/*.cu' 'tools/*.cpp' 'tools/*.h')
fi

if [[ $check -eq 0 ]]; then
  printf '%s\0' "${files[@]}" | xargs -0 -r -n 50 clang-format -i --style=file
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! clang-format --style=file "$f" | cmp -s - "$f"; then
    echo "format.sh: $f is not formatted (scripts/format.sh $f)"
    bad=1
  fi
done
exit $bad
