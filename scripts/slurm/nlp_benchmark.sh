#!/bin/bash
# One rank of the NLP (Megatron-LM) benchmark run, started by srun once per GPU from
# nlp_benchmark_13b.sbatch / nlp_benchmark_175b.sbatch (the replacement for the benchmark's
# JUBE workflow + torchrun). megatron reads its rank from SLURM_PROCID / SLURM_NTASKS /
# SLURM_LOCALID (docs/design.md, "Launching") and meets the other ranks at MASTER_ADDR:MASTER_PORT.
#
# Knobs (environment; the sbatch files set the model and defaults):
#   MODEL          gpt3-175b | gpt3-13b (the benchmark's fixed shapes: do not change)
#   TP PP MBS GBS  tensor / pipeline parallel size, micro-batch, global batch (the free knobs)
#   TRAIN_ITERS    iterations (default 20); LOG_INTERVAL (default 1)
#   DATA_PREFIX    the preprocessed OSCAR subset, e.g. data/oscar/oscar_text_document
#   VOCAB MERGES   GPT-2 vocab.json / merges.txt
#   MEGATRON       the binary (default: megatron on PATH)
#   EXTRA_ARGS     appended verbatim (e.g. --dry-run)
#   PREFLIGHT=0    skip `megatron preflight` before the run (skipped too with --dry-run in EXTRA_ARGS);
#                  PREFLIGHT_TOLERANCE (default 0.1); PREFLIGHT_ARGS appended to it (e.g. the
#                  --distributed-backend the run uses)
#   MEGATRON_PRINT_ARGS=1  print the megatron command, one argument per line, and exit
set -euo pipefail

: "${MODEL:?set MODEL (gpt3-175b or gpt3-13b)}"
: "${TP:=8}" "${PP:=1}" "${MBS:=1}" "${GBS:=512}" "${TRAIN_ITERS:=20}" "${LOG_INTERVAL:=1}"
: "${DATA_PREFIX:=data/oscar/oscar_text_document}" "${VOCAB:=data/gpt2/vocab.json}" "${MERGES:=data/gpt2/merges.txt}"
: "${MEGATRON:=megatron}"

args=(train --model "$MODEL"
  --tensor-model-parallel-size "$TP" --pipeline-model-parallel-size "$PP"
  --micro-batch-size "$MBS" --global-batch-size "$GBS"
  --bf16 --use-distributed-optimizer
  --train-iters "$TRAIN_ITERS" --log-interval "$LOG_INTERVAL" --log-throughput
  --eval-iters 0 --eval-interval 1000000
  --lr 6e-5 --min-lr 6e-6 --lr-decay-style cosine --lr-warmup-iters 0 --weight-decay 0.1 --clip-grad 1.0
  --data-path "$DATA_PREFIX" --vocab-file "$VOCAB" --merge-file "$MERGES" --split 949,50,1)
# Sequence parallelism splits the sequence over the tensor-parallel ranks: only with TP > 1.
if (( TP > 1 )); then args+=(--sequence-parallel); fi
# shellcheck disable=SC2206
args+=(${EXTRA_ARGS:-})

if [[ "${MEGATRON_PRINT_ARGS:-0}" == 1 ]]; then
  printf '%s\n' "$MEGATRON" "${args[@]}"
  exit 0
fi
# First every GPU and every link of this layout is measured (`megatron preflight`, ~10 s): a GPU
# or link more than PREFLIGHT_TOLERANCE below the others stops the job here (exit 1, srun
# --kill-on-bad-exit), named with its node, instead of slowing every rank of the run.
if [[ "${PREFLIGHT:-1}" == 1 && " ${EXTRA_ARGS:-} " != *" --dry-run "* ]]; then
  # shellcheck disable=SC2086
  "$MEGATRON" preflight --tensor-model-parallel-size "$TP" --pipeline-model-parallel-size "$PP" \
    --tolerance "${PREFLIGHT_TOLERANCE:-0.1}" ${PREFLIGHT_ARGS:-}
fi
exec "$MEGATRON" "${args[@]}"
