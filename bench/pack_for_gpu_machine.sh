#!/usr/bin/env bash
# Builds a CUDA-enabled tree for the GPU machine (sm_90a) and copies into BUILD/lib
# the shared libraries that machine's Ubuntu image may lack (e.g. libsimdjson).
# Usage: bench/pack_for_gpu_machine.sh [BUILD_DIR]   (default build-gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-gpu}
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMT_BUILD_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a
cmake --build "$B" -j "$(nproc)"
mkdir -p "$B/lib"
for lib in simdjson pcre2-8 zstd lzma; do
  path=$(ldd "$B/megatron" | awk -v l="lib$lib.so" '$1 ~ l {print $3}')
  [ -n "$path" ] && cp -L "$path" "$B/lib/"
done
ls "$B/lib"
