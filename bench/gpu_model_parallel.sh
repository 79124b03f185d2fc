#!/usr/bin/env bash
# On a multi-GPU machine (nvidia-h200-x2 / -x4): tensor and pipeline parallelism over NCCL.
#  1. parity: a small GPT (bf16, no dropout, --deterministic-mode, 2 micro-batches per global
#     batch) trained 20 iterations on one GPU, with TP=N + sequence parallelism, and with PP=N
#     (1F1B): the losses must agree to bf16 reduction-order noise;
#  2. throughput: gpt3-1.3b and gpt3-2.7b (micro-batch 4, seq 2048) with TP=N (+SP) and with
#     PP=N (8 micro-batches per global batch), tokens/s per GPU from --log-jsonl, next to the
#     1-GPU run of the same micro-batch;
#  3. the TP=N + SP step at 1.3B under --profile-ops (ops and collectives, rank 0);
#  with N = 4 also TP2 x PP2 rows and the largest model the planner fits on 4 GPUs.
#   bench/gpu_model_parallel.sh PACK_DIR OUT_DIR NGPUS     (needs data/gpt2 and data/brown carried)
set -uo pipefail
P=${1:?pack dir}
OUT=${2:?out dir}
N=${3:-2}
W=/tmp/mt_mp
FAILURES=mp_failures.txt
. bench/gpu_runs.sh
SMALL="--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 \
  --micro-batch-size 4 --global-batch-size 8 --log-interval 1 --deterministic-mode"
train mp_parity1 1 20 $SMALL
train mp_parity_tp$N $N 20 $SMALL --tensor-model-parallel-size $N --sequence-parallel
train mp_parity_pp$N $N 20 $SMALL --pipeline-model-parallel-size $N
for m in 1300 2700; do
  model=gpt3-1.3b; [ $m = 2700 ] && model=gpt3-2.7b
  train mp_${m}_1 1 12 --model $model --micro-batch-size 4 --global-batch-size 4 --log-interval 4
  train mp_${m}_tp$N $N 12 --model $model --micro-batch-size 4 --global-batch-size 4 --log-interval 4 \
    --tensor-model-parallel-size $N --sequence-parallel
  train mp_${m}_pp$N $N 8 --model $model --micro-batch-size 4 --global-batch-size 32 --log-interval 4 \
    --pipeline-model-parallel-size $N
done
python3 - $W $N <<'PY' | tee $OUT/mp_summary.txt
import sys
sys.path.insert(0, "bench")
from gpu_runs import print_parity, rows
w, n = sys.argv[1], int(sys.argv[2])
print_parity(w, "mp_parity1", [f"mp_parity_tp{n}", f"mp_parity_pp{n}"])
for m in ("1300", "2700"):
    base = rows(w, f"mp_{m}_1")
    for lay in (f"tp{n}", f"pp{n}"):
        r = rows(w, f"mp_{m}_{lay}")
        if not base or not r:
            print(f"{m} {lay}: missing runs"); continue
        a, b = base[-1]["tokens_per_second"], r[-1]["tokens_per_second"] / n
        print(f"gpt {m}M {lay}: 1 GPU {a:.0f} tokens/s; {lay} {b:.0f} tokens/s per GPU ({100 * b / a:.1f}% of 1 GPU)")
PY
# 4 GPUs: TP2 x PP2 rows at 1.3B and 2.7B, and the largest model the planner fits on
#    4 GPUs: two steps of `megatron bench` measure whether it trains and its memory against the
#    plan. LARGEST (flags) names it; the default is the planner's 4 x H200 answer (52 layers,
#    hidden 7168, 56 heads: 32.4B parameters, TP4 + SP, full recompute, planned 137.97 GiB per
#    GPU; bench/results/2026-11-24.md, "parameters initialised on the GPU"), which does not fit
#    4 x H100.
LARGEST=${LARGEST:-"--num-layers 52 --hidden-size 7168 --num-attention-heads 56 --seq-length 2048 \
  --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 4 \
  --sequence-parallel --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"}
if [ "$N" = 4 ]; then
  for m in 1300 2700; do
    model=gpt3-1.3b; [ $m = 2700 ] && model=gpt3-2.7b
    train mp_${m}_tp2pp2 4 8 --model $model --micro-batch-size 4 --global-batch-size 32 --log-interval 4 \
      --tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 2
  done
  python3 - $W <<'PY' | tee -a $OUT/mp_summary.txt
import sys
sys.path.insert(0, "bench")
from gpu_runs import rows
for m in ("1300", "2700"):
    base, r = rows(sys.argv[1], f"mp_{m}_1"), rows(sys.argv[1], f"mp_{m}_tp2pp2")
    if base and r:
        a, b = base[-1]["tokens_per_second"], r[-1]["tokens_per_second"] / 4
        print(f"gpt {m}M tp2pp2: {b:.0f} tokens/s per GPU ({100 * b / a:.1f}% of 1 GPU)")
PY
  timeout 300 "$P/megatron" bench $LARGEST --bf16 --device cuda --nproc-per-node 4 --bench-iters 2 --warmup-iters 1 \
    > $OUT/largest_4gpu.txt 2>&1
  echo "largest model on 4 GPUs: exit $?" | tee -a $OUT/mp_summary.txt
fi
# 3. where TP's time goes: --profile-ops on rank 0 at 1.3B, the ops and each group's
#    collectives (blocking ones, and the waits for started ones: what compute did not hide).
timeout 150 "$P/megatron" bench --model gpt3-1.3b --bf16 --attention-dropout 0 --hidden-dropout 0 --device cuda \
  --micro-batch-size 4 --global-batch-size 4 --bench-iters 5 --warmup-iters 2 --profile-ops --nproc-per-node $N \
  --tensor-model-parallel-size $N --sequence-parallel 2>&1 | sed -n '/ > time per op/,/ > GEMM shapes/p' > $OUT/tp_profile.txt
tar -C $W -czf $OUT/mp_logs.tar.gz $(cd $W && ls *.log)
