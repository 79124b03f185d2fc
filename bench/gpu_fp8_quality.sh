#!/usr/bin/env bash
# On the GPU machine: FP8's loss curve against bf16's (the FP8 issue's quality evidence). A 350M
# GPT (24 x 1024, 16 heads, seq 1024) trains 1,000 iterations on the Brown Corpus in bf16 and
# with --fp8-format hybrid under each recipe, the same seed, data order and dropout; each run's
# --log-jsonl (training and validation losses) lands in OUT_DIR, and a table of the validation
# losses is printed. bench/plot_loss_curves.py draws the curves from those files.
#   bench/gpu_fp8_quality.sh PACK_DIR OUT_DIR     (needs data/gpt2 and data/brown carried)
set -uo pipefail
P=${1:?pack dir}
OUT=${2:?out dir}
W=/tmp/mt_fp8_quality
mkdir -p "$W" "$OUT"
"$P/megatron" preprocess --input data/brown/brown.jsonl --output-prefix $W/brown --tokenizer-type GPT2BPETokenizer \
  --vocab-file data/gpt2/vocab.json --merge-file data/gpt2/merges.txt --append-eod --workers 8 > $W/pre.log 2>&1
run() {  # name, extra flags...
  local name=$1
  shift
  timeout 300 "$P/megatron" train --device cuda --bf16 --num-layers 24 --hidden-size 1024 --num-attention-heads 16 \
    --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 4 --train-iters 1000 \
    --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-warmup-iters 100 --weight-decay 0.1 --clip-grad 1.0 \
    --log-interval 50 --eval-interval 100 --eval-iters 20 --seed 1234 --data-path $W/brown_text_document \
    --data-cache-path $W/cache --vocab-file data/gpt2/vocab.json --merge-file data/gpt2/merges.txt \
    --log-jsonl "$OUT/fp8_quality_$name.jsonl" "$@" > "$OUT/fp8_quality_$name.log" 2>&1
  echo "$name: exit $? $(grep -o 'elapsed time per iteration (ms): [0-9.]*' "$OUT/fp8_quality_$name.log" | tail -1)"
}
rm -f "$OUT"/fp8_quality_*.jsonl
run bf16
run delayed --fp8-format hybrid --fp8-recipe delayed
run tensorwise --fp8-format hybrid --fp8-recipe tensorwise
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
runs = ["bf16", "delayed", "tensorwise"]
valid = {}
for r in runs:
    path = os.path.join(out, f"fp8_quality_{r}.jsonl")
    rows = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
    valid[r] = [(x["iteration"], x["lm_loss"]) for x in rows if x.get("split") == "validation"]
print("| validation loss at | " + " | ".join(runs) + " |")
print("| --- |" + " ---: |" * len(runs))
for i in range(max(len(v) for v in valid.values())):
    it = next(v[i][0] for v in valid.values() if len(v) > i)
    if i > 0 and it == next(v[i - 1][0] for v in valid.values() if len(v) > i):
        it = "final, whole validation split"
    cells = [f"{valid[r][i][1]:.4f}" if len(valid[r]) > i else "" for r in runs]
    print(f"| {it} | " + " | ".join(cells) + " |")
if valid["bf16"]:
    ref = valid["bf16"][-1][1]
    for r in runs[1:]:
        if valid[r]:
            print(f"final {r}: {valid[r][-1][1]:.4f} ({100 * (valid[r][-1][1] - ref) / ref:+.2f}% of bf16's {ref:.4f})")
PY
