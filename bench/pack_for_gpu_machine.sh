#!/usr/bin/env bash
# Builds a CUDA-enabled tree (sm_90a) and assembles the small folder that travels to
# the GPU machine: the megatron binary, the benchmarks, the GPU tests, and in lib/ the
# shared libraries its Ubuntu image may lack (e.g. libsimdjson).
# Usage: bench/pack_for_gpu_machine.sh [BUILD_DIR] [PACK_DIR]   (defaults: build, build-gpu-pack)
# Then carry PACK_DIR, data/gpt2 and data/brown, and run bench/gpu_machine_run.sh PACK_DIR $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
P=${2:-build-gpu-pack}
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMT_BUILD_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a
cmake --build "$B" -j "$(nproc)"
rm -rf "$P"
mkdir -p "$P/lib" "$P/bench" "$P/tests"
cp "$B/megatron" "$P/"
cp "$B"/bench/*_bench "$P/bench/"
cp "$B"/tests/*cuda*_test "$P/tests/" 2>/dev/null || true
cp "$B"/tests/comm_host_staged_communicator_test "$P/tests/"  # its CUDA half: ranks sharing a GPU
# Libraries of Debian's that the Ubuntu image may lack (OpenBLAS resolves to the real file
# behind Debian's alternatives link). CUDA's and cuDNN's libraries are never copied: the GPU
# machine has its own (cuDNN's engines alone are ~500 MB; the pack must stay under 64 MiB).
# cpp-httplib (`megatron serve`) is Debian's compiled libcpp-httplib.so.0.11 with Brotli's
# libraries behind it; the OpenSSL 3 it also links (libssl.so.3, libcrypto.so.3) is in every
# Ubuntu image from 22.04 on (the GPU machine's 24.04 runs `megatron serve` with its own), and a
# copy of ours would shadow the image's for other programs.
for lib in simdjson pcre2-8 sentencepiece utf8proc zstd lzma openblas gfortran quadmath gomp cpp-httplib \
           brotlicommon brotlidec brotlienc; do
  path=$(ldd "$B/megatron" | awk -v l="lib$lib.so" '$1 ~ l {print $3}')
  if [ -n "$path" ]; then cp -L "$path" "$P/lib/"; fi
done
if ls "$P/lib" | grep -Eq '^lib(cudnn|cublas|cudart|nvrtc)'; then
  echo "error: a CUDA/cuDNN library ended up in $P/lib" >&2
  exit 1
fi
# OpenBLAS alone is ~36 MB and each GPU test binary ~17 MB, mostly the same kernels' device
# code: ship the libraries and the tests compressed (the device call carries 64 MiB at most),
# the tests in one xz stream whose dictionary spans every binary, so the copies of the device
# code compress to one (~250 MB -> ~13 MB; a multi-threaded or -6 stream keeps ~140 MB).
# bench/gpu_machine_run.sh and scripts/gpu-check.sh unpack them.
# The tokenizer cross-check's inputs (bench/tokenizer_crosscheck_inputs.sh; ~16 MB, ~3 MB as xz).
bench/tokenizer_crosscheck_inputs.sh "$P/tokenizer_inputs" >/dev/null
tar -C "$P" -cJf "$P/tokenizer_inputs.tar.xz" tokenizer_inputs
rm -rf "$P/tokenizer_inputs"
tar -C "$P" -cJf "$P/lib.tar.xz" lib
tar -C "$P" -cf - tests | xz -T1 --lzma2=preset=6,dict=512MiB > "$P/tests.tar.xz"
rm -rf "$P/lib" "$P/tests"
du -sh "$P"
