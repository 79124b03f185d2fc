#!/usr/bin/env bash
# On the GPU machine: `megatron bench` of two builds side by side, alternating A B A B per shape so
# that clock and thermal drift fall on both (a restructure must leave the speed as it was).
#   bench/compare_binaries.sh BINARY_A BINARY_B OUT_DIR [shapes...]
#   shapes: 124m 350m 1.3b 2.7b (bf16, no dropout, as scripts/gpu-check.sh); default all four.
# Prints one line per run (shape, binary, tokens/s) and the ratio B/A of the two means per shape.
set -uo pipefail
A=${1:?binary A}
B=${2:?binary B}
OUT=${3:?out dir}
shift 3
SHAPES=("$@")
[ ${#SHAPES[@]} -gt 0 ] || SHAPES=(124m 350m 1.3b 2.7b)
export NCCL_NVLS_ENABLE=0
flags() {
  case $1 in
    124m) echo "--model gpt2-124m --micro-batch-size 16 --global-batch-size 16" ;;
    350m) echo "--model gpt2-350m --micro-batch-size 16 --global-batch-size 16" ;;
    1.3b) echo "--model gpt3-1.3b --micro-batch-size 4 --global-batch-size 4" ;;
    2.7b) echo "--model gpt3-2.7b --micro-batch-size 4 --global-batch-size 4" ;;
  esac
}
tokens_per_second() {  # binary shape -> tokens/s of one `megatron bench --json`
  timeout 300 "$1" bench $(flags "$2") --bf16 --attention-dropout 0 --hidden-dropout 0 --device cuda \
    --bench-iters 10 --warmup-iters 3 --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])'
}
for shape in "${SHAPES[@]}"; do
  a=() b=()
  for round in 1 2; do
    a+=("$(tokens_per_second "$A" "$shape")")
    b+=("$(tokens_per_second "$B" "$shape")")
    echo "$shape round $round: A ${a[-1]} B ${b[-1]} tokens/s"
  done
  python3 -c "import sys; a=[float(x) for x in sys.argv[1:3]]; b=[float(x) for x in sys.argv[3:5]]; \
print(f'$shape: A {sum(a)/2:.0f} B {sum(b)/2:.0f} tokens/s, B/A = {sum(b)/sum(a):.4f}')" "${a[@]}" "${b[@]}"
done 2>&1 | tee "$OUT/compare_binaries.txt"
