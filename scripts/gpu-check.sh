#!/usr/bin/env bash
# On the GPU machine, in one call: the GPU tests (CUDA ops and the whole model against the
# CPU reference), `megatron bench` at the issue's shapes, and the PyTorch reference
# (../shared/bench/torch_gpt_bench.py, copied to the ignored bench/out/ and carried) on the same shapes.
# The build comes from here: bench/pack_for_gpu_machine.sh builds with CUDA (sm_90a) and
# assembles build-gpu-pack; carry build-gpu-pack (and data/gpt2, data/brown for the data runs).
#   scripts/gpu-check.sh PACK_DIR OUT_DIR [shapes...]    shapes: 124m 350m 1.3b 2.7b (default all)
set -uo pipefail
P=${1:?pack dir}
OUT=${2:?out dir}
shift 2
SHAPES=("$@")
[ ${#SHAPES[@]} -gt 0 ] || SHAPES=(124m 350m 1.3b 2.7b)
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="$PWD/$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  "$P/megatron" version
} 2>&1 | tee "$OUT/machine.txt"

echo "== GPU tests" | tee "$OUT/gpu_tests.txt"
for t in "$P"/tests/*cuda*_test; do
  [ -x "$t" ] || continue
  echo "-- $(basename "$t")"
  timeout 300 "$t" --gtest_brief=1 2>&1 | tail -n 40
done 2>&1 | tee -a "$OUT/gpu_tests.txt"

bench_flags() {
  case $1 in
    124m) echo "--model gpt2-124m --micro-batch-size 16 --global-batch-size 16" ;;
    350m) echo "--model gpt2-350m --micro-batch-size 16 --global-batch-size 16" ;;
    1.3b) echo "--model gpt3-1.3b --micro-batch-size 4 --global-batch-size 4" ;;
    2.7b) echo "--model gpt3-2.7b --micro-batch-size 4 --global-batch-size 4" ;;
  esac
}
echo "== megatron bench" | tee "$OUT/bench.txt"
for shape in "${SHAPES[@]}"; do
  # bf16, no dropout (as the PyTorch reference), vocabulary padded to 50304.
  timeout 300 "$P/megatron" bench $(bench_flags "$shape") --bf16 --attention-dropout 0 --hidden-dropout 0 \
    --device cuda --bench-iters 10 --warmup-iters 3 --json 2>&1 | tee -a "$OUT/bench.txt"
done

echo "== PyTorch reference" | tee "$OUT/torch.txt"
declare -A TORCH=([124m]=gpt2-124M [350m]=gpt2-350M [1.3b]=gpt3-1.3B [2.7b]=gpt3-2.7B)
for shape in "${SHAPES[@]}"; do
  timeout 300 python3 bench/out/torch_gpt_bench.py "${TORCH[$shape]}" 2>&1 | grep -v Warning | tail -n 3
done 2>&1 | tee -a "$OUT/torch.txt"
