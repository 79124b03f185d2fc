#!/usr/bin/env python3
"""tiktoken's GPT-2 encoding on the same corpus as bench/tokenizer_bench, same table.

Builds a tiktoken.Encoding from GPT-2's own vocab.json / merges.txt (no download:
the GPU machine has no internet), checks that its ids equal megatron's on a sample,
then times encode_ordinary on one thread and encode_ordinary_batch on N threads.

  python3 bench/tiktoken_bench.py --vocab-file V --merge-file M --input corpus.jsonl \
      [--threads 16] [--megatron build/megatron] [--sample 200] [--repeats 3]

Conversion: GPT-2's vocab ids are already BPE ranks (ids 0-255 are the single bytes in
bytes_to_unicode order, id 256 + i is merge i), so mergeable_ranks maps each token's
bytes (its characters through byte_decoder) to its id; <|endoftext|> becomes the one
special token. The merges file is only checked against that (merge i -> id 256 + i).
MB/s counts 10^6 bytes of UTF-8 input text.
"""
import argparse
import json
import subprocess
import sys
import time

import tiktoken

# GPT-2's pre-tokenizer, as tiktoken writes it (the same language as Megatron's pattern).
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    table = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


def gpt2_encoding(vocab_file, merge_file):
    byte_decoder = {c: b for b, c in bytes_to_unicode().items()}
    with open(vocab_file, encoding="utf-8") as f:
        encoder = json.load(f)
    ranks = {}
    special = {}
    for token, rank in encoder.items():
        if token == "<|endoftext|>":
            special[token] = rank
            continue
        ranks[bytes(byte_decoder[c] for c in token)] = rank
    with open(merge_file, encoding="utf-8") as f:
        merges = f.read().split("\n")[1:-1]
    for i, line in enumerate(merges):
        a, b = line.split()
        if encoder.get(a + b) != 256 + i:
            sys.exit(f"{merge_file}:{i + 2}: merge '{a} {b}' is not token {256 + i}: ids are not ranks")
    return tiktoken.Encoding("gpt2-local", pat_str=GPT2_PAT, mergeable_ranks=ranks, special_tokens=special)


def read_texts(path):
    texts = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if path.endswith(".jsonl"):
                if line.strip():
                    texts.append(json.loads(line)["text"])
            else:
                texts.append(line.rstrip("\n"))
    return texts


def check_against_megatron(enc, texts, binary, vocab, merges):
    sample = [t for t in texts if "\0" not in t]
    data = "".join(t + "\0" for t in sample).encode("utf-8")
    out = subprocess.run([binary, "tokenize", "--vocab-file", vocab, "--merge-file", merges, "--null-data"],
                         input=data, capture_output=True, check=True).stdout.decode()
    lines = out.split("\n")[:-1]
    if len(lines) != len(sample):
        sys.exit(f"megatron printed {len(lines)} lines for {len(sample)} texts")
    for i, (text, line) in enumerate(zip(sample, lines)):
        ours = [int(x) for x in line.split()]
        theirs = enc.encode_ordinary(text)
        if ours != theirs:
            k = next((j for j, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            sys.exit(f"ids differ on sample text {i} at index {k}: tiktoken {theirs[max(0, k - 5):k + 5]} "
                     f"megatron {ours[max(0, k - 5):k + 5]}")
    print(f"ids check: tiktoken == megatron on {len(sample)} texts")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab-file", required=True)
    ap.add_argument("--merge-file", required=True)
    ap.add_argument("--input", required=True, help="*.jsonl ('text' key) or plain text, one document per line")
    ap.add_argument("--threads", default="16", help="thread counts for encode_ordinary_batch, e.g. 4,16")
    ap.add_argument("--megatron", help="megatron binary: compare ids on --sample texts first")
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    enc = gpt2_encoding(args.vocab_file, args.merge_file)
    texts = read_texts(args.input)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    if args.megatron:
        check_against_megatron(enc, texts[:args.sample], args.megatron, args.vocab_file, args.merge_file)

    print(f"tiktoken_bench: tiktoken {tiktoken.__version__} GPT-2, {len(texts)} documents, "
          f"{nbytes / 1e6:.1f} MB of text")
    print(f"{'threads':>8} {'pass':>5} {'MB/s':>10} {'MB/s/thread':>12} {'efficiency':>11} {'Mtokens/s':>12}")

    def best_of(fn):
        best, tokens = float("inf"), 0
        for _ in range(args.repeats):
            start = time.perf_counter()
            tokens = fn()
            best = min(best, time.perf_counter() - start)
        return best, tokens

    def single():
        return sum(len(enc.encode_ordinary(t)) for t in texts)

    # tiktoken keeps no word cache, so "cold" (first run) and "warm" (best of the rest) differ
    # only by first-touch effects; both are printed to line up with tokenizer_bench.
    start = time.perf_counter()
    tokens = single()
    cold = time.perf_counter() - start
    warm, _ = best_of(single)
    base = nbytes / 1e6 / warm
    for name, seconds in (("cold", cold), ("warm", warm)):
        mbs = nbytes / 1e6 / seconds
        print(f"{1:>8} {name:>5} {mbs:>10.2f} {mbs:>12.2f} {mbs / (nbytes / 1e6 / cold if name == 'cold' else base):>11.2f} "
              f"{tokens / 1e6 / seconds:>12.2f}")
    for threads in [int(x) for x in args.threads.split(",") if int(x) > 1]:
        seconds, tokens = best_of(lambda: sum(len(ids) for ids in enc.encode_ordinary_batch(texts, num_threads=threads)))
        mbs = nbytes / 1e6 / seconds
        print(f"{threads:>8} {'warm':>5} {mbs:>10.2f} {mbs / threads:>12.2f} {mbs / threads / base:>11.2f} "
              f"{tokens / 1e6 / seconds:>12.2f}")


if __name__ == "__main__":
    main()
