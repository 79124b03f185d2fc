#!/usr/bin/env bash
# The main job on the embedded data: preprocess the Brown Corpus into Megatron's
# indexed format and show what a training run would read from it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MEGATRON=$BUILD/megatron
mkdir -p data/demo
set -x
$MEGATRON preprocess --input data/brown/brown.jsonl --output-prefix data/demo/brown \
  --tokenizer-type GPT2BPETokenizer --vocab-file data/gpt2/vocab.json --merge-file data/gpt2/merges.txt \
  --append-eod --workers "$(nproc)" --log-interval 100
$MEGATRON dataset-info data/demo/brown_text_document --seq-length 1024 --train-samples 2000 \
  --split 969,30,1 --seed 1234 --data-cache-path data/demo/cache --show-samples 2
