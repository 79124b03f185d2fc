#!/usr/bin/env bash
# clang-tidy with the checks of .clang-tidy over a configured build's compile_commands.json.
#   scripts/tidy.sh [-p BUILD_DIR] [FILE...]
# BUILD_DIR defaults to build/ (any configuration: CMake always writes compile_commands.json);
# FILE defaults to every tracked .cpp under src/ except the CUDA backend's (nvcc's flags are not
# clang's). Runs $(nproc) clang-tidys at once; exits non-zero if any check fired.
# Needs clang-tidy 14 or newer (Debian: apt-get install clang-tidy).
set -euo pipefail
cd "$(dirname "$0")/.."

build=build
if [[ "${1:-}" == "-p" ]]; then
  build=$2
  shift 2
fi
command -v clang-tidy >/dev/null || { echo "tidy.sh: clang-tidy not found (apt-get install clang-tidy)" >&2; exit 2; }
[[ -f "$build/compile_commands.json" ]] ||
  { echo "tidy.sh: no $build/compile_commands.json (configure with cmake -S . -B $build first)" >&2; exit 2; }

if [[ $# -gt 0 ]]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files -- 'src/*.cpp' | grep -v '^src/backend/cuda/')
fi
# --warnings-as-errors makes a finding change the exit status; the findings are printed as warnings.
printf '%s\0' "${files[@]}" |
  xargs -0 -r -n 4 -P "$(nproc)" clang-tidy -p "$build" --quiet --warnings-as-errors='*' 2>/dev/null
