#!/usr/bin/env bash
# On the GPU machine, in one call: the GPU tests (CUDA ops and the whole model against the
# CPU reference), `megatron bench` at the four reference shapes (124M, 350M, 1.3B, 2.7B), and
# the PyTorch reference (bench/torch_gpt_bench.py, carried with the working tree) on the same
# shapes.
# The build comes from here: bench/pack_for_gpu_machine.sh builds with CUDA (sm_90a) and
# assembles build-gpu-pack; carry build-gpu-pack (and data/gpt2, data/brown for the data runs).
#   scripts/gpu-check.sh PACK_DIR OUT_DIR [shapes...]    shapes: 124m 350m 1.3b 2.7b (default all)
# Environment: SKIP_TESTS=1, SKIP_BENCH=1, SKIP_TORCH=1, SKIP_CURVES=1, SKIP_PARALLEL=1 leave those parts out (to fit
# one device call's 10 minutes); GPU_TEST_JOBS=N runs N test binaries at a time (default 1).
set -uo pipefail
P=${1:?pack dir}
OUT=${2:?out dir}
shift 2
SHAPES=("$@")
[ ${#SHAPES[@]} -gt 0 ] || SHAPES=(124m 350m 1.3b 2.7b)
export NCCL_NVLS_ENABLE=0
[ -f "$PWD/$P/lib.tar.xz" ] && tar -C "$PWD/$P" -xJf "$PWD/$P/lib.tar.xz"
[ -f "$PWD/$P/tests.tar.xz" ] && tar -C "$PWD/$P" -xJf "$PWD/$P/tests.tar.xz"
export LD_LIBRARY_PATH="$PWD/$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  "$P/megatron" version
} 2>&1 | tee "$OUT/machine.txt"

# The test binaries run GPU_TEST_JOBS at a time on the one GPU, each into its own log, gathered
# in name order. One by one (the default) they take ~6 minutes (cuda_gemm_test alone ~2); they
# are correctness tests (none times anything), and GPU_TEST_JOBS=3 ran all of them in 153 s on
# an H100 (bench/results/2026-11-24.md, "attention dropout on cuDNN"), leaving room in a device
# call for the benchmarks.
# Tests that start `megatron` or read data/gpt2 find them here, not in this build's paths.
export MEGATRON_TEST_SOURCE_DIR="$PWD" MEGATRON_TEST_BINARY_DIR="$(cd "$P" && pwd)"
run_gpu_test() {
  timeout 300 "$1" --gtest_brief=1 > "$2/gpu_test_$(basename "$1").log" 2>&1
  echo "exit status $?" >> "$2/gpu_test_$(basename "$1").log"
}
export -f run_gpu_test
[ -n "${SKIP_TESTS:-}" ] || { echo "== GPU tests" | tee "$OUT/gpu_tests.txt"
for t in "$P"/tests/*cuda*_test; do [ -x "$t" ] && echo "$t"; done |
  xargs -P "${GPU_TEST_JOBS:-1}" -I{} bash -c 'run_gpu_test "$1" "$2"' _ {} "$OUT"
for t in "$P"/tests/*cuda*_test; do
  [ -x "$t" ] || continue
  echo "-- $(basename "$t")"
  tail -n 40 "$OUT/gpu_test_$(basename "$t").log"
done 2>&1 | tee -a "$OUT/gpu_tests.txt"; }

bench_flags() {
  case $1 in
    124m) echo "--model gpt2-124m --micro-batch-size 16 --global-batch-size 16" ;;
    350m) echo "--model gpt2-350m --micro-batch-size 16 --global-batch-size 16" ;;
    1.3b) echo "--model gpt3-1.3b --micro-batch-size 4 --global-batch-size 4" ;;
    2.7b) echo "--model gpt3-2.7b --micro-batch-size 4 --global-batch-size 4" ;;
  esac
}
[ -n "${SKIP_BENCH:-}" ] || echo "== megatron bench" | tee "$OUT/bench.txt"
[ -n "${SKIP_BENCH:-}" ] || for shape in "${SHAPES[@]}"; do
  # bf16, no dropout (as the PyTorch reference), vocabulary padded to 50304.
  timeout 300 "$P/megatron" bench $(bench_flags "$shape") --bf16 --attention-dropout 0 --hidden-dropout 0 \
    --device cuda --bench-iters 10 --warmup-iters 3 --json 2>&1 | tee -a "$OUT/bench.txt"
done

[ -n "${SKIP_TORCH:-}" ] || echo "== PyTorch reference" | tee "$OUT/torch.txt"
declare -A TORCH=([124m]=gpt2-124M [350m]=gpt2-350M [1.3b]=gpt3-1.3B [2.7b]=gpt3-2.7B)
[ -n "${SKIP_TORCH:-}" ] || for shape in "${SHAPES[@]}"; do
  timeout 300 python3 bench/torch_gpt_bench.py "${TORCH[$shape]}" 2>&1 | grep -v Warning | tail -n 3
done 2>&1 | tee -a "$OUT/torch.txt"

# 200 iterations on the Brown Corpus (needs data/gpt2 and data/brown carried): the GPU run must
# follow the CPU reference's loss curve (same initial weights, data order and dropout masks).
if [ -z "${SKIP_CURVES:-}" ] && [ -f data/brown/brown.jsonl ] && [ -f data/gpt2/vocab.json ]; then
  echo "== Brown Corpus: GPU vs CPU loss curves" | tee "$OUT/curves.txt"
  W=/tmp/mt_curves
  mkdir -p $W
  "$P/megatron" preprocess --input data/brown/brown.jsonl --output-prefix $W/brown --tokenizer-type GPT2BPETokenizer \
    --vocab-file data/gpt2/vocab.json --merge-file data/gpt2/merges.txt --append-eod --workers 8 > $W/pre.log 2>&1
  # brown_train NAME SECONDS [train flags]: 200 iterations of a 2-layer model (hidden 128, micro-
  # batch 8, global batch 16), losses logged every 10 into $OUT/curve_NAME.jsonl.
  brown_train() {
    local name=$1 secs=$2
    shift 2
    timeout "$secs" "$P/megatron" train "$@" --num-layers 2 --hidden-size 128 --num-attention-heads 4 \
      --micro-batch-size 8 --global-batch-size 16 --train-iters 200 --lr 1e-3 --min-lr 1e-4 \
      --lr-decay-style cosine --lr-warmup-iters 20 --log-interval 10 --eval-interval 100 --eval-iters 2 \
      --data-path $W/brown_text_document --vocab-file data/gpt2/vocab.json \
      --merge-file data/gpt2/merges.txt --log-jsonl $OUT/curve_$name.jsonl > $OUT/train_$name.log 2>&1
    echo "$name: exit $? $(grep -c 'consumed samples' $OUT/train_$name.log) log lines, $(grep -o 'elapsed time per iteration (ms): [0-9.]*' $OUT/train_$name.log | tail -1)$(grep -m1 ' own kernels' $OUT/train_$name.log | sed 's/^/; /')"
  }
  for dev in cuda cpu; do
    brown_train $dev 400 --device $dev --seq-length 64 --data-cache-path $W/cache
  done 2>&1 | tee -a "$OUT/curves.txt"
  python3 - "$OUT/curve_cuda.jsonl" "$OUT/curve_cpu.jsonl" <<'PY' 2>&1 | tee -a "$OUT/curves.txt"
import json, sys
def read(p):
    return {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(p)) if "consumed_samples" in r}
g, c = read(sys.argv[1]), read(sys.argv[2])
worst = max(abs(g[i] - c[i]) for i in c)
for i in sorted(c):
    print(f"iteration {i:4d}  cpu {c[i]:.5f}  cuda {g[i]:.5f}  diff {g[i] - c[i]:+.2e}")
print(f"max |cuda - cpu| = {worst:.3e} over {len(c)} logged iterations: {'PASS' if worst < 2e-2 else 'FAIL'}")
PY
  # bf16 at s = 128 runs attention on cuDNN, whose dropout masks are its own: that curve then
  # follows one with our masks only within the noise of other masks and bf16. The reference is
  # the GPU in fp32 at s = 128 (our kernels and masks: the CPU's curve to ~1e-7, as above; the
  # CPU itself takes ~2 s per iteration here). Judged on the mean of the last five logged
  # losses (iterations 160-200): within 0.05 nats.
  echo "== Brown Corpus, s = 128: GPU bf16 (cuDNN's attention dropout) vs GPU fp32 (our masks)" | tee -a "$OUT/curves.txt"
  for dtype in bf16 fp32; do
    brown_train 128_$dtype 300 --device cuda $([ $dtype = bf16 ] && echo --bf16) --seq-length 128 \
      --max-position-embeddings 128 --data-cache-path $W/cache128
  done 2>&1 | tee -a "$OUT/curves.txt"
  python3 - "$OUT/curve_128_bf16.jsonl" "$OUT/curve_128_fp32.jsonl" <<'PY' 2>&1 | tee -a "$OUT/curves.txt"
import json, sys
def read(p):
    return {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(p)) if "consumed_samples" in r}
g, c = read(sys.argv[1]), read(sys.argv[2])
for i in sorted(c):
    print(f"iteration {i:4d}  fp32 {c[i]:.5f}  bf16 cuDNN {g[i]:.5f}  diff {g[i] - c[i]:+.3f}")
last = sorted(c)[-5:]
gap = sum(g[i] - c[i] for i in last) / len(last)
print(f"mean of the last 5 logged losses: bf16 - fp32 = {gap:+.4f}: {'PASS' if abs(gap) < 0.05 else 'FAIL'}")
PY
fi

# Every parallel layout with its ranks sharing this GPU (--distributed-backend mpi; needs
# data/gpt2 and data/brown): the host-staged communicator's test under mpirun (its CUDA half),
# then bench/gpu_shared_parallel.sh (~3 minutes): the layouts' losses against one process.
if [ -z "${SKIP_PARALLEL:-}" ] && [ -f data/brown/brown.jsonl ] && [ -f data/gpt2/vocab.json ]; then
  echo "== parallel layouts on one GPU" | tee "$OUT/parallel.txt"
  t="$P/tests/comm_host_staged_communicator_test"
  [ -x "$t" ] && timeout 120 "$t" --gtest_brief=1 2>&1 | tail -n 5 | tee -a "$OUT/parallel.txt"
  timeout 480 bash bench/gpu_shared_parallel.sh "$P" "$OUT" 2>&1 | tee -a "$OUT/parallel.txt"
fi
