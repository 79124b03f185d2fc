# Sourced by bench/gpu_data_parallel.sh and bench/gpu_model_parallel.sh on the GPU machine.
# Needs P (the pack folder), OUT and W (a work folder) set; unpacks the pack, preprocesses the
# Brown Corpus into $W, and defines
#   train NAME NPROC ITERS FLAGS...   one `megatron train` run (bf16, no dropout, no evaluation,
#                                     on the Brown Corpus; --nproc-per-node NPROC when > 1),
#                                     logging to $W/NAME.jsonl and $W/NAME.log; a failed run's
#                                     tail is appended to $OUT/${FAILURES:-failures.txt};
#                                     TRAIN_TIMEOUT seconds at most (default 240).
export NCCL_NVLS_ENABLE=0
for f in lib tests; do [ -d "$P/lib" ] || { [ -f "$P/$f.tar.xz" ] && tar -C "$P" -xJf "$P/$f.tar.xz"; }; done
export LD_LIBRARY_PATH="$PWD/$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$W"
"$P/megatron" preprocess --input data/brown/brown.jsonl --output-prefix $W/brown --tokenizer-type GPT2BPETokenizer \
  --vocab-file data/gpt2/vocab.json --merge-file data/gpt2/merges.txt --append-eod --workers 8 > $W/pre.log 2>&1
DATA="--data-path $W/brown_text_document --data-cache-path $W/cache --vocab-file data/gpt2/vocab.json --merge-file data/gpt2/merges.txt"
COMMON="--device cuda --bf16 --attention-dropout 0 --hidden-dropout 0 --lr 3e-4 --lr-warmup-iters 2 --eval-interval 100000 --eval-iters 0 $DATA"
train() {  # train NAME NPROC ITERS FLAGS...
  local name=$1 nproc=$2 iters=$3
  shift 3
  local launch=()
  [ "$nproc" -gt 1 ] && launch=(--nproc-per-node "$nproc")
  timeout "${TRAIN_TIMEOUT:-240}" "$P/megatron" train "${launch[@]}" $COMMON --train-iters "$iters" --log-jsonl $W/$name.jsonl "$@" \
    > $W/$name.log 2>&1
  local rc=$?
  echo "$name: exit $rc"
  [ $rc -eq 0 ] || { echo "== $name (exit $rc)"; tail -n 20 $W/$name.log; } >> $OUT/${FAILURES:-failures.txt}
}
