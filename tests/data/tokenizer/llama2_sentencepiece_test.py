"""Llama 2's real vocabulary through --tokenizer-type Llama2Tokenizer (Megatron's Llama 2 recipe:
--tokenizer-model tokenizer.model).

No tokenizer.model can be downloaded here, so one is assembled from llama-tokenizer-js's copy of
Llama 1/2's 32000 pieces (in id order): <unk> (UNKNOWN), <s> </s> (CONTROL), <0x00>..<0xFF>
(BYTE), then the normal pieces. SentencePiece's BPE merges the adjacent pair whose joined piece
has the highest score; the scores are restored from the package's merge list (Hugging Face's
tokenizer.json order, which its converter sorted by score): a piece scores -(index of the first
merge that makes it); pieces no merge makes (single characters) score below all of them. The trainer and
normalizer specs come from a small model spm_train builds with Llama 2's options (BPE,
byte_fallback, identity normalization, add_dummy_prefix, no removal of extra whitespace,
whitespace-only pieces allowed); the pieces are then replaced in the protobuf.

Checks: our ids == llama-tokenizer-js's encode (an independent re-implementation of Llama's
tokenizer) == Debian's python3-sentencepiece with the assembled model, on Brown documents and the
hard cases; vocab_size 32000, eod 2 (</s>) appended by preprocess --append-eod, and train's
"padded vocab (size: 32000) with 0 dummy tokens (new size: 32000)".
Run by Debian's python3; env MT_BIN, MT_SOURCE_DIR, MT_DATA_DIR. With --write-model PATH it only
writes the assembled tokenizer.model (bench/tokenizer_crosscheck_inputs.sh).
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_cases as tc  # noqa: E402

import sentencepiece as spm  # noqa: E402

NPM = os.path.join(tc.SOURCE_DIR, ".deps", "npm", "node_modules")
HERE = os.path.dirname(os.path.abspath(__file__))


def js(request):
    r = subprocess.run(["node", os.path.join(HERE, "llama2_vocab_dump.mjs"), NPM], input=json.dumps(request).encode(),
                       capture_output=True)
    if r.returncode != 0:
        sys.exit(f"llama-tokenizer-js failed: {r.stderr.decode()}")
    return json.loads(r.stdout)


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def read_varint(buf, i):
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return n, i


def fields(buf):
    """Top-level protobuf fields as (number, wire type, raw bytes of the whole field)."""
    i = 0
    while i < len(buf):
        start = i
        key, i = read_varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, i = read_varint(buf, i)
        elif wire == 1:
            i += 8
        elif wire == 2:
            n, i = read_varint(buf, i)
            i += n
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, buf[start:i]


def piece_message(piece, score, kind):
    body = b"\x0a" + varint(len(piece.encode())) + piece.encode() + b"\x15" + struct.pack("<f", score)
    body += b"\x18" + varint(kind)
    return b"\x0a" + varint(len(body)) + body


def build_model(work, vocab, merges):
    corpus = os.path.join(work, "small.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for t in tc.brown_texts(limit_bytes=300000):
            f.write(t + "\n")
    subprocess.run(["spm_train", f"--input={corpus}", f"--model_prefix={work}/spec", "--model_type=bpe",
                    "--vocab_size=1000", "--byte_fallback=true", "--normalization_rule_name=identity",
                    "--add_dummy_prefix=true", "--remove_extra_whitespaces=false",
                    "--allow_whitespace_only_pieces=true", "--split_digits=true", "--unk_id=0", "--bos_id=1",
                    "--eos_id=2", "--pad_id=-1", "--minloglevel=2", "--num_threads=2"], check=True, capture_output=True)
    with open(f"{work}/spec.model", "rb") as f:
        spec = f.read()
    made_by = {}
    for k, m in enumerate(merges):
        a, b = m.split(" ")
        made_by.setdefault(a + b, k)
    out = b""
    for i, p in enumerate(vocab):
        kind = 2 if i == 0 else 3 if i < 3 else 6 if i < 259 else 1  # UNKNOWN, CONTROL, BYTE, NORMAL
        score = 0.0 if i < 259 else -float(made_by.get(p, len(merges) + i))
        out += piece_message(p, score, kind)
    for number, _, raw in fields(spec):
        if number != 1:
            out += raw  # trainer_spec, normalizer_spec, ... as spm_train wrote them
    path = os.path.join(work, "tokenizer.model")
    with open(path, "wb") as f:
        f.write(out)
    return path


def main():
    ch = tc.Checker()
    work = tempfile.mkdtemp(prefix="mt_llama2_")
    try:
        texts = tc.brown_texts(limit_bytes=1500000) + [t for t in tc.TEXTS_HARD]
        ref = js({"vocab": True, "texts": texts})
        vocab = ref["vocab"]
        ch.check(len(vocab) == 32000, f"llama-tokenizer-js has {len(vocab)} pieces")
        model = build_model(work, vocab, ref["merges"])
        sp = spm.SentencePieceProcessor(model_file=model)
        ch.check(sp.get_piece_size() == 32000 and sp.eos_id() == 2 and sp.bos_id() == 1, "assembled model's sizes")
        got = tc.megatron_tokenize(["--tokenizer-type", "Llama2Tokenizer", "--tokenizer-model", model], texts)
        ch.compare("ours vs python sentencepiece", texts, [sp.encode(t) for t in texts], got)
        # llama-tokenizer-js encodes "" as [29871] (its preceding space); SentencePiece gives [].
        expected_js = [ids if t else [] for t, ids in zip(texts, ref["ids"])]
        ch.compare("ours vs llama-tokenizer-js", texts, expected_js, got)

        jsonl = os.path.join(work, "in.jsonl")
        docs = tc.brown_texts(limit_bytes=200000)
        with open(jsonl, "w", encoding="utf-8") as f:
            for t in docs:
                f.write(json.dumps({"text": t}) + "\n")
        tc.megatron(["preprocess", "--input", jsonl, "--output-prefix", f"{work}/l2", "--tokenizer-type",
                     "Llama2Tokenizer", "--tokenizer-model", model, "--append-eod", "--workers", "2"])
        got_docs, dtype = tc.read_indexed(f"{work}/l2_text_document")
        ch.compare("preprocess", docs, [sp.encode(t) + [2] for t in docs], got_docs)
        ch.check(dtype.__name__ == "uint16", f"dtype {dtype}")
        r = tc.megatron(["train", "--dry-run", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                         "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "1",
                         "--train-iters", "1", "--lr", "1e-4", "--mock-data", "--tokenizer-type", "Llama2Tokenizer",
                         "--tokenizer-model", model], check=False)
        line = " > padded vocab (size: 32000) with 0 dummy tokens (new size: 32000)"
        ch.check(line in r.stdout + r.stderr, f"train lacks {line!r}: {r.stderr[-300:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ch.finish(f"llama 2 vocabulary: {len(texts)} texts identical to llama-tokenizer-js and sentencepiece")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write-model":  # for bench/tokenizer_crosscheck_inputs.sh
        d = tempfile.mkdtemp(prefix="mt_llama2_")
        shutil.copy(build_model(d, *[js({"vocab": True})[k] for k in ("vocab", "merges")]), sys.argv[2])
        shutil.rmtree(d, ignore_errors=True)
    else:
        main()
