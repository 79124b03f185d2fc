#!/usr/bin/env bash
# On a multi-GPU machine (nvidia-h200-x2 / -x4): tensor and pipeline parallelism over NCCL.
#  1. parity: a small GPT (bf16, no dropout, --deterministic-mode, 2 micro-batches per global
#     batch) trained 20 iterations on one GPU, with TP=N + sequence parallelism, and with PP=N
#     (1F1B): the losses must agree to bf16 reduction-order noise;
#  2. throughput: gpt3-1.3b and gpt3-2.7b (micro-batch 4, seq 2048) with TP=N (+SP) and with
#     PP=N (8 micro-batches per global batch), tokens/s per GPU from --log-jsonl, next to the
#     1-GPU run of the same micro-batch.
#   bench/gpu_model_parallel.sh PACK_DIR OUT_DIR NGPUS     (needs data/gpt2 and data/brown carried)
set -uo pipefail
P=${1:?pack dir}
OUT=${2:?out dir}
N=${3:-2}
export NCCL_NVLS_ENABLE=0
for f in lib tests; do [ -d "$P/lib" ] || { [ -f "$P/$f.tar.xz" ] && tar -C "$P" -xJf "$P/$f.tar.xz"; }; done
export LD_LIBRARY_PATH="$PWD/$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
W=/tmp/mt_mp
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
  [ $rc -eq 0 ] || { echo "== $name (exit $rc)"; tail -n 20 $W/$name.log; } >> $OUT/mp_failures.txt
}
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
import json, sys
w, n = sys.argv[1], int(sys.argv[2])
def rows(name):
    try:
        return [r for r in map(json.loads, open(f"{w}/{name}.jsonl")) if r.get("lm_loss") is not None]
    except OSError:
        return []
one = rows("mp_parity1")
for other in (f"mp_parity_tp{n}", f"mp_parity_pp{n}"):
    o = rows(other)
    if not one or len(one) != len(o):
        print(f"{other}: {len(o)} vs {len(one)} logged iterations: FAIL"); continue
    dl = max(abs(a["lm_loss"] - b["lm_loss"]) for a, b in zip(one, o))
    dg = max(abs(a["grad_norm"] - b["grad_norm"]) / a["grad_norm"] for a, b in zip(one, o))
    print(f"{other} vs 1 GPU over {len(o)} iterations: max |loss diff| {dl:.2e}, max rel grad-norm diff {dg:.2e}")
for m in ("1300", "2700"):
    base = rows(f"mp_{m}_1")
    for lay in (f"tp{n}", f"pp{n}"):
        r = rows(f"mp_{m}_{lay}")
        if not base or not r:
            print(f"{m} {lay}: missing runs"); continue
        a, b = base[-1]["tokens_per_second"], r[-1]["tokens_per_second"] / n
        print(f"gpt {m}M {lay}: 1 GPU {a:.0f} tokens/s; {lay} {b:.0f} tokens/s per GPU ({100 * b / a:.1f}% of 1 GPU)")
PY
tar -C $W -czf $OUT/mp_logs.tar.gz $(cd $W && ls *.log)
