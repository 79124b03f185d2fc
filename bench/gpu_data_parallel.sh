#!/usr/bin/env bash
# On a multi-GPU machine (nvidia-h200-x2 / -x4): data parallelism over NCCL.
#  1. parity: a small GPT (bf16, no dropout, --deterministic-mode) trained 20 iterations on one
#     GPU and with --nproc-per-node N (same global batch): the losses must agree to bf16
#     reduction-order noise;
#     the same with --overlap-grad-reduce (several buckets) and with the distributed optimizer
#     plus --overlap-param-gather;
#  2. weak scaling: gpt2-350m (mb 16, seq 1024) and gpt3-1.3b (mb 4, seq 2048) on 1 and N GPUs
#     (global batch = mb x GPUs), tokens/s from --log-jsonl, without and with --overlap-grad-reduce
#     (and the distributed optimizer with both overlaps at 1.3B), next to PyTorch DDP
#     (bench/torch_gpt_ddp.py under torchrun, which imports bench/torch_gpt_bench.py beside it)
#     on 1 and N GPUs.
#  3. power: the 1.3B `megatron bench` on 1 and N GPUs with its clock and power line (JSON);
#  SKIP_TORCH=1 leaves PyTorch out; SKIP_BASE=1 keeps only the 1-GPU runs, and with
#  ENV_LIST="A=1 B=2" (environment) the overlapped runs are repeated once per NAME=VALUE, that
#  variable set (e.g. NCCL_MAX_CTAS=8 or MEGATRON_GEMM_AUTOTUNE=1), for A/B measurements.
#   bench/gpu_data_parallel.sh PACK_DIR OUT_DIR NGPUS     (needs data/gpt2 and data/brown carried)
set -uo pipefail
P=${1:?pack dir}
OUT=${2:?out dir}
N=${3:-2}
W=/tmp/mt_dp
. bench/gpu_runs.sh
PAR="--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 \
  --micro-batch-size 4 --global-batch-size $((4 * N)) --log-interval 1 --deterministic-mode --ddp-bucket-size 1000000"
train parity1 1 20 --num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 512 \
  --max-position-embeddings 512 --micro-batch-size 4 --global-batch-size $((4 * N)) --log-interval 1 --deterministic-mode
if [ -z "${SKIP_BASE:-}" ]; then
train parityN $N 20 --num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 512 \
  --max-position-embeddings 512 --micro-batch-size 4 --global-batch-size $((4 * N)) --log-interval 1 --deterministic-mode
train parityN_distopt $N 20 --num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 512 \
  --max-position-embeddings 512 --micro-batch-size 4 --global-batch-size $((4 * N)) --log-interval 1 --deterministic-mode \
  --use-distributed-optimizer
train parityN_overlap $N 20 $PAR --overlap-grad-reduce
train parityN_distopt_overlap $N 20 $PAR --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
fi
for g in 1 $N; do
  [ -n "${SKIP_BASE:-}" ] && [ $g -ne 1 ] && continue
  train m350_$g $g 30 --model gpt2-350m --micro-batch-size 16 --global-batch-size $((16 * g)) --log-interval 10
  train m1300_$g $g 30 --model gpt3-1.3b --micro-batch-size 4 --global-batch-size $((4 * g)) --log-interval 10
done
for kv in ${ENV_LIST:-}; do
  export "$kv"
  tag=$(echo "$kv" | tr -c 'A-Za-z0-9\n' '_')
  train parityN_overlap_env$tag $N 20 $PAR --overlap-grad-reduce
  train m350_${N}_overlap_env$tag $N 30 --model gpt2-350m --micro-batch-size 16 --global-batch-size $((16 * N)) \
    --log-interval 10 --overlap-grad-reduce
  train m1300_${N}_overlap_env$tag $N 30 --model gpt3-1.3b --micro-batch-size 4 --global-batch-size $((4 * N)) \
    --log-interval 10 --overlap-grad-reduce
  train m1300_${N}_distopt_overlap_env$tag $N 30 --model gpt3-1.3b --micro-batch-size 4 \
    --global-batch-size $((4 * N)) --log-interval 10 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
  unset "${kv%%=*}"
done
[ -z "${SKIP_BASE:-}" ] && train m350_${N}_overlap $N 30 --model gpt2-350m --micro-batch-size 16 --global-batch-size $((16 * N)) --log-interval 10 \
  --overlap-grad-reduce
[ -z "${SKIP_BASE:-}" ] && train m1300_${N}_overlap $N 30 --model gpt3-1.3b --micro-batch-size 4 --global-batch-size $((4 * N)) --log-interval 10 \
  --overlap-grad-reduce
[ -z "${SKIP_BASE:-}" ] && train m1300_${N}_distopt_overlap $N 30 --model gpt3-1.3b --micro-batch-size 4 --global-batch-size $((4 * N)) \
  --log-interval 10 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
python3 - $W $N <<'PY' | tee $OUT/dp_summary.txt
import glob, os, sys
sys.path.insert(0, "bench")
from gpu_runs import print_parity, rows
w, n = sys.argv[1], int(sys.argv[2])
extra = sorted(os.path.basename(f)[:-6] for f in glob.glob(f"{w}/parityN_overlap_env*.jsonl"))
print_parity(w, "parity1", ["parityN", "parityN_distopt", "parityN_overlap", "parityN_distopt_overlap"] + extra)
variants = [("m350", ""), ("m350", "_overlap"), ("m1300", ""), ("m1300", "_overlap"), ("m1300", "_distopt_overlap")]
for f in sorted(glob.glob(f"{w}/m*_{n}_*env*.jsonl")):
    name = os.path.basename(f)[:-6]
    shape = name.split("_")[0]
    variants.append((shape, name[len(f"{shape}_{n}"):]))
for shape, variant in variants:
    t1, tn = rows(w, f"{shape}_1"), rows(w, f"{shape}_{n}{variant}")
    if not t1 or not tn:
        print(f"{shape}{variant}: missing runs"); continue
    a, b = t1[-1]["tokens_per_second"], tn[-1]["tokens_per_second"] / n
    print(f"{shape}{variant}: 1 GPU {a:.0f} tokens/s; {n} GPUs {b:.0f} tokens/s per GPU: weak-scaling efficiency {100 * b / a:.1f}%")
PY
# Power (the DP gap's hypothesis: NCCL's HBM and NVLink traffic shares the 700 W cap with the
# GEMMs): rank 0's SM clock and board power over the timed steps of `megatron bench`, 1 GPU
# against N with the distributed optimizer and both overlaps, at 1.3B.
for g in 1 $N; do
  flags=""
  [ "$g" -gt 1 ] && flags="--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
  timeout 200 "$P/megatron" bench --model gpt3-1.3b --bf16 --attention-dropout 0 --hidden-dropout 0 --device cuda \
    --micro-batch-size 4 --global-batch-size $((4 * g)) --bench-iters 20 --warmup-iters 3 --nproc-per-node $g $flags \
    --json > $OUT/dp_power_$g.json 2>&1
  echo "1.3B bench on $g GPU(s): $(grep -h -o '"ms_per_iter": [0-9.]*\|"sm_clock_median_mhz": [0-9]*\|"power_median_w": [0-9.]*' \
    $OUT/dp_power_$g.json | tr '\n' ' ')" | tee -a $OUT/dp_summary.txt
done
# torch_gpt_ddp.py imports torch_gpt_bench.py from its own folder (bench/).
[ -n "${SKIP_TORCH:-}" ] || [ -f bench/torch_gpt_bench.py ] ||
  echo "bench/torch_gpt_bench.py is missing (torch_gpt_ddp.py imports it): PyTorch DDP not run" | tee $OUT/torch_ddp_1.txt
[ -n "${SKIP_TORCH:-}" ] || timeout 200 torchrun --nproc_per_node 1 bench/torch_gpt_ddp.py gpt2-350M gpt3-1.3B 2>&1 | grep '^{' | tee $OUT/torch_ddp_1.txt
[ -n "${SKIP_TORCH:-}" ] || timeout 240 torchrun --nproc_per_node $N bench/torch_gpt_ddp.py gpt2-350M gpt3-1.3B 2>&1 | grep '^{' | tee $OUT/torch_ddp_$N.txt
tar -C $W -czf $OUT/logs.tar.gz $(cd $W && ls *.log)
