#!/usr/bin/env bash
# On the GPU machine: are two identical training runs bit-identical? 40 iterations of a small
# GPT (bf16, no dropout: cuDNN attention) on the Brown Corpus, twice with --deterministic-mode
# and twice without; every logged loss and grad norm compared exactly (from --log-jsonl).
#   bench/gpu_determinism.sh PACK_DIR OUT_DIR      (needs data/gpt2 and data/brown carried)
set -uo pipefail
P=${1:?pack dir}
OUT=${2:?out dir}
W=/tmp/mt_determinism
mkdir -p $W
"$P/megatron" preprocess --input data/brown/brown.jsonl --output-prefix $W/brown --tokenizer-type GPT2BPETokenizer \
  --vocab-file data/gpt2/vocab.json --merge-file data/gpt2/merges.txt --append-eod --workers 8 > $W/pre.log 2>&1
run() {  # run NAME [extra flags]
  local name=$1
  shift
  timeout 200 "$P/megatron" train --device cuda --bf16 --num-layers 4 --hidden-size 512 --num-attention-heads 8 \
    --seq-length 512 --max-position-embeddings 512 --micro-batch-size 8 --global-batch-size 16 --train-iters 40 \
    --lr 6e-4 --lr-warmup-iters 5 --attention-dropout 0 --hidden-dropout 0 --log-interval 1 --eval-interval 1000 \
    --eval-iters 0 --data-path $W/brown_text_document --data-cache-path $W/cache --vocab-file data/gpt2/vocab.json \
    --merge-file data/gpt2/merges.txt --log-jsonl $W/$name.jsonl "$@" > $W/$name.log 2>&1
  echo "$name: exit $? $(grep -c 'lm_loss' $W/$name.jsonl 2>/dev/null) logged iterations"
}
run det1 --deterministic-mode
run det2 --deterministic-mode
run plain1
run plain2
python3 - $W <<'PY' | tee "$OUT/determinism.txt"
import json, sys
w = sys.argv[1]
def read(name):
    return [(r["iteration"], r["lm_loss"], r.get("grad_norm")) for r in map(json.loads, open(f"{w}/{name}.jsonl")) if "lm_loss" in r]
for a, b in (("det1", "det2"), ("plain1", "plain2")):
    x, y = read(a), read(b)
    same = x == y and len(x) >= 40
    first = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), None)
    print(f"{a} vs {b}: {len(x)} iterations, {'bit-identical' if same else 'DIFFERENT'}"
          + ("" if first is None else f" (first difference at iteration {x[first][0]}: {x[first][1:]} vs {y[first][1:]})"))
print("last loss", read("det1")[-1])
PY
grep -h "deterministic\|attention" $W/det1.log | head -3
