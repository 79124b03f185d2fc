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
#     (../shared/bench/torch_gpt_ddp.py under torchrun, copied to bench/out/) on 1 and N GPUs.
#  SKIP_TORCH=1 leaves PyTorch out; SKIP_BASE=1 keeps only the 1-GPU runs, and with
#  ENV_LIST="A=1 B=2" (environment) the overlapped runs are repeated once per NAME=VALUE, that
#  variable set (e.g. NCCL_MAX_CTAS=8 or MEGATRON_GEMM_AUTOTUNE=1), for A/B measurements.
#   bench/gpu_data_parallel.sh PACK_DIR OUT_DIR NGPUS     (needs data/gpt2 and data/brown carried)
set -uo pipefail
P=${1:?pack dir}
OUT=${2:?out dir}
N=${3:-2}
export NCCL_NVLS_ENABLE=0
for f in lib tests; do [ -f "$P/$f.tar.xz" ] && tar -C "$P" -xJf "$P/$f.tar.xz"; done
export LD_LIBRARY_PATH="$PWD/$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
W=/tmp/mt_dp
mkdir -p $W
"$P/megatron" preprocess --input data/brown/brown.jsonl --output-prefix $W/brown --tokenizer-type GPT2BPETokenizer \
  --vocab-file data/gpt2/vocab.json --merge-file data/gpt2/merges.txt --append-eod --workers 8 > $W/pre.log 2>&1
DATA="--data-path $W/brown_text_document --data-cache-path $W/cache --vocab-file data/gpt2/vocab.json --merge-file data/gpt2/merges.txt"
COMMON="--device cuda --bf16 --attention-dropout 0 --hidden-dropout 0 --lr 3e-4 --lr-warmup-iters 2 --eval-interval 100000 --eval-iters 0 $DATA"
train() {  # train NAME NPROC ITERS FLAGS...
  local name=$1 nproc=$2 iters=$3
  shift 3
  local launch=()
  [ "$nproc" -gt 1 ] && launch=(--nproc-per-node "$nproc")
  timeout 240 "$P/megatron" train "${launch[@]}" $COMMON --train-iters "$iters" --log-jsonl $W/$name.jsonl "$@" \
    > $W/$name.log 2>&1
  local rc=$?
  echo "$name: exit $rc"
  [ $rc -eq 0 ] || { echo "== $name (exit $rc)"; tail -n 20 $W/$name.log; } >> $OUT/failures.txt
}
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
import json, sys
w, n = sys.argv[1], int(sys.argv[2])
def rows(name):
    try:
        return [r for r in map(json.loads, open(f"{w}/{name}.jsonl")) if r.get("lm_loss") is not None]
    except OSError:
        return []
one = rows("parity1")
import glob, os
extra = sorted(os.path.basename(f)[:-6] for f in glob.glob(f"{w}/parityN_overlap_env*.jsonl"))
for other in ["parityN", "parityN_distopt", "parityN_overlap", "parityN_distopt_overlap"] + extra:
    o = rows(other)
    if not one or len(one) != len(o):
        print(f"{other}: {len(o)} vs {len(one)} logged iterations: FAIL"); continue
    dl = max(abs(a["lm_loss"] - b["lm_loss"]) for a, b in zip(one, o))
    dg = max(abs(a["grad_norm"] - b["grad_norm"]) / a["grad_norm"] for a, b in zip(one, o))
    print(f"{other} vs 1 GPU over {len(o)} iterations: max |loss diff| {dl:.2e}, max rel grad-norm diff {dg:.2e}")
variants = [("m350", ""), ("m350", "_overlap"), ("m1300", ""), ("m1300", "_overlap"), ("m1300", "_distopt_overlap")]
for f in sorted(glob.glob(f"{w}/m*_{n}_*env*.jsonl")):
    name = os.path.basename(f)[:-6]
    shape = name.split("_")[0]
    variants.append((shape, name[len(f"{shape}_{n}"):]))
for shape, variant in variants:
    t1, tn = rows(f"{shape}_1"), rows(f"{shape}_{n}{variant}")
    if not t1 or not tn:
        print(f"{shape}{variant}: missing runs"); continue
    a, b = t1[-1]["tokens_per_second"], tn[-1]["tokens_per_second"] / n
    print(f"{shape}{variant}: 1 GPU {a:.0f} tokens/s; {n} GPUs {b:.0f} tokens/s per GPU: weak-scaling efficiency {100 * b / a:.1f}%")
PY
[ -n "${SKIP_TORCH:-}" ] || timeout 200 torchrun --nproc_per_node 1 bench/out/torch_gpt_ddp.py gpt2-350M gpt3-1.3B 2>&1 | grep '^{' | tee $OUT/torch_ddp_1.txt
[ -n "${SKIP_TORCH:-}" ] || timeout 240 torchrun --nproc_per_node $N bench/out/torch_gpt_ddp.py gpt2-350M gpt3-1.3B 2>&1 | grep '^{' | tee $OUT/torch_ddp_$N.txt
tar -C $W -czf $OUT/logs.tar.gz $(cd $W && ls *.log)
