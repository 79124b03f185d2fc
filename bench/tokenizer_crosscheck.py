#!/usr/bin/env python3
"""Cross-check and speed of our tokenizers against the Python libraries Megatron itself calls, on
the GPU machine (which has sentencepiece, tokenizers, tiktoken and transformers; no hub).

  python3 bench/tokenizer_crosscheck.py --inputs DIR --megatron B/megatron --bench B/bench/tokenizer_bench \\
      --corpus data/brown/brown.jsonl [--limit-docs 500] [--repeats 3]

DIR comes from bench/tokenizer_crosscheck_inputs.sh. For each tokenizer, ids of `megatron tokenize`
on the corpus documents and the hard cases are compared with the reference's, as Megatron calls it:
  Llama2Tokenizer       sentencepiece.SentencePieceProcessor(model).encode_as_ids(text)
  HuggingFaceTokenizer  transformers.AutoTokenizer.from_pretrained(dir)(text).input_ids, and
                        tokenizers.Tokenizer.from_file(tokenizer.json).encode(text).ids
  TikTokenizer          tiktoken.Encoding(pat_str=v2, mergeable_ranks=rank+1000, specials 0..999)
                        .encode(text, allowed_special="all")
(The hard cases hold U+0085 and U+FEFF, which the npm references cannot judge.) Then one-thread
throughput: the reference's encode loop, and tokenizer_bench's 1-thread cold and warm passes.
Prints a markdown table; a reference whose module is missing is reported as such.
MB/s = 10^6 bytes of UTF-8 text per second, best of --repeats.
"""
import argparse
import base64
import json
import os
import re
import subprocess
import sys
import time

V2 = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
      r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|"
      r"\s+(?!\S)|\s+")
NAMED = ["<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"]


def ours(megatron, flags, texts):
    data = b"".join(t.encode("utf-8") + b"\0" for t in texts)
    r = subprocess.run([megatron, "tokenize", "--null-data", *flags], input=data, capture_output=True, check=True)
    return [[int(x) for x in l.split()] for l in r.stdout.decode().split("\n")[:-1]]


def our_speed(bench, flags, corpus, repeats):
    r = subprocess.run([bench, *flags, corpus, "1", str(repeats)], capture_output=True, text=True)
    speeds = dict(re.findall(r"^\s+1\s+(cold|warm)\s+([\d.]+)", r.stdout, re.M))
    return f"{speeds.get('cold', '?')} cold / {speeds.get('warm', '?')} warm" if speeds else f"failed: {r.stderr[-200:]}"


def ref_speed(encode, texts, repeats):
    n = sum(len(t.encode("utf-8")) for t in texts)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for t in texts:
            encode(t)
        best = min(best, time.perf_counter() - t0)
    return f"{n / 1e6 / best:.2f}"


def compare(name, texts, want, got):
    bad = [i for i, (w, g) in enumerate(zip(want, got)) if w != g]
    if len(want) != len(got):
        return f"{name}: {len(got)} results for {len(want)} texts"
    if not bad:
        return f"{name}: {len(texts)}/{len(texts)} identical"
    i = bad[0]
    at = next((k for k in range(min(len(want[i]), len(got[i]))) if want[i][k] != got[i][k]), 0)
    return (f"{name}: {len(texts) - len(bad)}/{len(texts)} identical; first bad text {i} {texts[i][:60]!r} at id {at}: "
            f"want {want[i][max(0, at - 2):at + 4]} got {got[i][max(0, at - 2):at + 4]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--megatron", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--limit-docs", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    with open(a.corpus, encoding="utf-8") as f:
        docs = [json.loads(l)["text"] for l in f if l.strip()][:a.limit_docs]
    hard = json.load(open(os.path.join(a.inputs, "hard_cases.json"), encoding="utf-8"))
    texts = docs + hard
    rows, lines = [], []
    corpus = os.path.join("/tmp", f"tokenizer_crosscheck_{os.getpid()}.jsonl")  # the same documents for ours
    with open(corpus, "w", encoding="utf-8") as f:
        for t in docs:
            f.write(json.dumps({"text": t}) + "\n")
    a.corpus = corpus

    sp_model = os.path.join(a.inputs, "llama2", "tokenizer.model")
    flags = ["--tokenizer-type", "Llama2Tokenizer", "--tokenizer-model", sp_model]
    try:
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=sp_model)
        lines.append(compare("Llama2Tokenizer vs sentencepiece " + getattr(spm, "__version__", "?"), texts,
                             [sp.encode_as_ids(t) for t in texts], ours(a.megatron, flags, texts)))
        ref = ref_speed(sp.encode_as_ids, docs, a.repeats)
    except ImportError:
        ref = "sentencepiece not installed"
    rows.append(("Llama2Tokenizer (Llama 2 vocabulary)", our_speed(a.bench, flags, a.corpus, a.repeats), ref))

    l3 = os.path.join(a.inputs, "llama3")
    flags = ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", l3]
    got = ours(a.megatron, flags, texts)
    ref = "tokenizers not installed"
    try:
        import tokenizers
        tok = tokenizers.Tokenizer.from_file(os.path.join(l3, "tokenizer.json"))
        lines.append(compare("HuggingFaceTokenizer vs tokenizers " + tokenizers.__version__, texts,
                             [tok.encode(t).ids for t in texts], got))
        ref = ref_speed(lambda t: tok.encode(t).ids, docs, a.repeats) + " (tokenizers)"
    except ImportError:
        pass
    try:
        import transformers
        hf = transformers.AutoTokenizer.from_pretrained(l3)
        lines.append(compare("HuggingFaceTokenizer vs transformers " + transformers.__version__ + " AutoTokenizer",
                             texts, [hf(t).input_ids for t in texts], got))
        ref += "; " + ref_speed(lambda t: hf(t).input_ids, docs, a.repeats) + " (transformers)"
    except ImportError:
        ref += "; transformers not installed"
    rows.append(("HuggingFaceTokenizer (Llama 3 tokenizer.json)", our_speed(a.bench, flags, a.corpus, a.repeats), ref))

    vocab_file = os.path.join(a.inputs, "tiktoken_vocab.json")
    vocab = json.load(open(vocab_file))
    size = 1000 + len(vocab)
    flags = ["--tokenizer-type", "TikTokenizer", "--tokenizer-model", vocab_file, "--tiktoken-pattern", "v2",
             "--vocab-size", str(size)]
    try:
        import tiktoken
        enc = tiktoken.Encoding(name="megatron", pat_str=V2,
                                mergeable_ranks={base64.b64decode(x["token_bytes"]): x["rank"] + 1000 for x in vocab},
                                special_tokens={(NAMED[i] if i < 7 else f"<SPECIAL_{i}>"): i for i in range(1000)})
        lines.append(compare("TikTokenizer vs tiktoken " + tiktoken.__version__, texts,
                             [enc.encode(t, allowed_special="all") for t in texts], ours(a.megatron, flags, texts)))
        ref = ref_speed(lambda t: enc.encode(t, allowed_special="all"), docs, a.repeats)
    except ImportError:
        ref = "tiktoken not installed"
    rows.append((f"TikTokenizer v2 (cl100k_base ranks, vocab {size})", our_speed(a.bench, flags, a.corpus, a.repeats), ref))

    print("\n".join(lines))
    print(f"\none thread, the first {len(docs)} documents of the corpus, MB/s\n")
    print("| tokenizer | megatron (tokenizer_bench) | reference |\n| --- | --- | --- |")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    os.remove(corpus)
    return 0 if all(re.search(r": (\d+)/\1 identical$", l) for l in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
