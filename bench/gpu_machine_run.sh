#!/usr/bin/env bash
# Runs on the lent GPU machine (Ubuntu, 16 cores, no internet) over a build made
# here: the GPU tests, the tokenizer benchmark next to tiktoken, the Hugging Face Llama
# conversion check against transformers, and preprocessing throughput. Usage (from the repo root there): bench/gpu_machine_run.sh BUILD_DIR OUT_DIR
# BUILD_DIR is the folder bench/pack_for_gpu_machine.sh assembles: megatron, bench/, tests/
# and lib/ (the shared libraries that machine may lack).
set -uo pipefail
B=${1:?build dir}
OUT=${2:?out dir}
export NCCL_NVLS_ENABLE=0
[ -f "$PWD/$B/lib.tar.xz" ] && tar -C "$PWD/$B" -xJf "$PWD/$B/lib.tar.xz"
[ -f "$PWD/$B/tests.tar.xz" ] && tar -C "$PWD/$B" -xJf "$PWD/$B/tests.tar.xz"
[ -f "$PWD/$B/tokenizer_inputs.tar.xz" ] && tar -C "$PWD/$B" -xJf "$PWD/$B/tokenizer_inputs.tar.xz"
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
V=data/gpt2/vocab.json
M=data/gpt2/merges.txt
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core)'
  python3 -c 'import tiktoken, sys; print("tiktoken", tiktoken.__version__, "python", sys.version.split()[0])'
  "$B/megatron" version
} 2>&1 | tee "$OUT/machine.txt"

# GPU tests (label gpu).
for t in "$B"/tests/*cuda*_test; do [ -x "$t" ] && "$t" 2>&1; done | tee "$OUT/gpu_tests.txt"

# A bigger corpus for throughput: the Brown Corpus 16 times (about 100 MB of JSONL).
mkdir -p /tmp/corpus
for i in $(seq 1 16); do cat data/brown/brown.jsonl; done > /tmp/corpus/brown16.jsonl

"$B/bench/tokenizer_bench" "$V" "$M" /tmp/corpus/brown16.jsonl 1,2,4,8,16 2>&1 | tee "$OUT/tokenizer_bench.txt"
python3 bench/tiktoken_bench.py --vocab-file "$V" --merge-file "$M" --input /tmp/corpus/brown16.jsonl \
  --threads 16 --megatron "$B/megatron" 2>&1 | tee "$OUT/tiktoken_bench.txt"

# Every tokenizer type against the Python libraries Megatron calls (ids and one-thread speed).
if [ -d "$B/tokenizer_inputs" ]; then
  python3 -c 'import importlib; print(*[m + " " + getattr(importlib.import_module(m), "__version__", "?")
    for m in ("sentencepiece", "tokenizers", "tiktoken", "transformers")])' 2>&1 | tee "$OUT/tokenizer_crosscheck.txt"
  python3 bench/tokenizer_crosscheck.py --inputs "$B/tokenizer_inputs" --megatron "$B/megatron" \
    --bench "$B/bench/tokenizer_bench" --corpus data/brown/brown.jsonl 2>&1 | tee -a "$OUT/tokenizer_crosscheck.txt"
fi

# Hugging Face Llama conversion against transformers' LlamaForCausalLM, both ways, with our CPU
# and CUDA engines (bench/hf_llama_check.py prints its markdown table last).
for d in cpu cuda; do
  PYTHONUNBUFFERED=1 python3 bench/hf_llama_check.py --megatron "$B/megatron" --out /tmp/hf_llama_check_$d --device $d
done 2>&1 | tee "$OUT/hf_llama_check.txt"

for w in 1 4 16; do
  /usr/bin/time -v "$B/megatron" preprocess --input /tmp/corpus/brown16.jsonl --output-prefix /tmp/corpus/out$w \
    --tokenizer-type GPT2BPETokenizer --vocab-file "$V" --merge-file "$M" --append-eod --workers $w \
    --log-interval 2000 2>&1 | grep -E 'Done|Elapsed|Maximum resident|error' 
done 2>&1 | tee "$OUT/preprocess_bench.txt"
cmp /tmp/corpus/out1_text_document.bin /tmp/corpus/out16_text_document.bin && \
  cmp /tmp/corpus/out1_text_document.idx /tmp/corpus/out16_text_document.idx && echo "outputs identical for 1 and 16 workers" | tee -a "$OUT/preprocess_bench.txt"

# Peak memory on a multi-GB input (must stay under 1 GB), 1 and 16 workers.
MT_BIN="$PWD/$B/megatron" BENCH_DIR=/tmp bench/preprocess_memory_bench.sh 3 1 16 2>&1 | tee "$OUT/preprocess_memory_bench.txt"
