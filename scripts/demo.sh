#!/usr/bin/env bash
# The main job on the embedded data: preprocess the Brown Corpus into Megatron's indexed
# format, show what a training run reads from it, then pretrain a small GPT on it (on the GPU
# when the build has CUDA and one is visible, `--device auto`; else on the CPU, a few minutes
# on 2 cores) with Megatron-LM's flags and log lines, save a checkpoint, and sample a few
# lines from it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MEGATRON=$BUILD/megatron
VOCAB=data/gpt2/vocab.json
MERGES=data/gpt2/merges.txt
mkdir -p data/demo
set -x
$MEGATRON preprocess --input data/brown/brown.jsonl --output-prefix data/demo/brown \
  --tokenizer-type GPT2BPETokenizer --vocab-file $VOCAB --merge-file $MERGES \
  --append-eod --workers "$(nproc)" --log-interval 100
$MEGATRON dataset-info data/demo/brown_text_document --seq-length 128 --train-samples 600 \
  --split 969,30,1 --seed 1234 --data-cache-path data/demo/cache --show-samples 1
$MEGATRON train \
  --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 \
  --micro-batch-size 4 --global-batch-size 4 --train-iters 150 \
  --lr 2e-3 --min-lr 2e-4 --lr-decay-style cosine --lr-warmup-iters 15 --weight-decay 0.1 --clip-grad 1.0 \
  --data-path data/demo/brown_text_document --split 969,30,1 --seed 1234 --data-cache-path data/demo/cache \
  --vocab-file $VOCAB --merge-file $MERGES \
  --log-interval 10 --eval-interval 50 --eval-iters 5 \
  --save data/demo/ckpt --tensorboard-dir data/demo/tensorboard --log-jsonl data/demo/metrics.jsonl
$MEGATRON checkpoint-info data/demo/ckpt | sed -n 1,4p
for prompt in "The jury said" "In the morning" "He was"; do
  $MEGATRON generate --load data/demo/ckpt --vocab-file $VOCAB --merge-file $MERGES \
    --prompt "$prompt" --max-new-tokens 24 --temperature 0.8 --top-k 40 --seed 1
done
