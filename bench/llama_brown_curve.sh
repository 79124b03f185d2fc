#!/usr/bin/env bash
# On the GPU machine: 200 iterations of a tiny Llama (RMSNorm, SwiGLU, no biases, untied output
# layer, rotary embeddings, 2 key/value groups for 4 heads) on the Brown Corpus, on the GPU and on
# the CPU from the same initial weights, data order and dropout masks (fp32: our attention
# kernels, whose masks are the CPU's): the GPU's loss curve must follow the CPU's.
#   bench/llama_brown_curve.sh PACK_DIR OUT_DIR     (needs data/gpt2 and data/brown carried)
set -uo pipefail
P=${1:?pack dir}
OUT=${2:?out dir}
W=/tmp/mt_llama_curve
mkdir -p $W
"$P/megatron" preprocess --input data/brown/brown.jsonl --output-prefix $W/brown --tokenizer-type GPT2BPETokenizer \
  --vocab-file data/gpt2/vocab.json --merge-file data/gpt2/merges.txt --append-eod --workers 8 > $W/pre.log 2>&1
for dev in cuda cpu; do
  timeout 400 "$P/megatron" train --device $dev --num-layers 2 --hidden-size 128 --num-attention-heads 4 \
    --group-query-attention --num-query-groups 2 --position-embedding-type rope --normalization RMSNorm --swiglu \
    --disable-bias-linear --untie-embeddings-and-output-weights --seq-length 64 --micro-batch-size 8 \
    --global-batch-size 16 --train-iters 200 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 20 \
    --log-interval 10 --eval-interval 100 --eval-iters 2 --data-path $W/brown_text_document \
    --data-cache-path $W/cache --vocab-file data/gpt2/vocab.json --merge-file data/gpt2/merges.txt \
    --log-jsonl "$OUT/llama_curve_$dev.jsonl" > "$OUT/llama_train_$dev.log" 2>&1
  echo "$dev: exit $? $(grep -o 'elapsed time per iteration (ms): [0-9.]*' "$OUT/llama_train_$dev.log" | tail -1)"
done
python3 - "$OUT/llama_curve_cuda.jsonl" "$OUT/llama_curve_cpu.jsonl" <<'PY'
import json, sys
def read(p):
    return {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(p)) if "consumed_samples" in r}
g, c = read(sys.argv[1]), read(sys.argv[2])
for i in sorted(c):
    print(f"iteration {i:4d}  cpu {c[i]:.5f}  cuda {g[i]:.5f}  diff {g[i] - c[i]:+.2e}")
worst = max(abs(g[i] - c[i]) for i in c)
print(f"max |cuda - cpu| = {worst:.3e} over {len(c)} logged iterations: {'PASS' if worst < 2e-2 else 'FAIL'}")
PY
