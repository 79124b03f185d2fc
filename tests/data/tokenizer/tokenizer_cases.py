"""Shared pieces of the tokenizer reference tests (not a test itself).

TEXTS_HARD: the hard cases every tokenizer is compared on: emoji and ZWJ sequences, flags, skin
tones, CJK, Hangul, combining marks, RTL scripts, \\r\\n, tabs, long whitespace runs, digits,
characters a small vocabulary lacks (byte fallback), Unicode spaces (U+0085, U+00A0, U+3000,
U+FEFF), control characters, contractions in both cases, and special-token text written inside
a document ("<s>", "</s>", "<|endoftext|>", "<|begin_of_text|>"). No text holds NUL (the
texts go through `megatron tokenize --null-data`).
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np

MT_BIN = os.environ.get("MT_BIN", "")
DATA_DIR = os.environ.get("MT_DATA_DIR", os.path.join(os.environ.get("MT_SOURCE_DIR", "."), "data"))
SOURCE_DIR = os.environ.get("MT_SOURCE_DIR", ".")

TEXTS_HARD = [
    "Hello world",
    " Hello  world ",
    "I'm sure they'll say it's John's, can't we? THEY'RE HERE. I'M",
    "👨‍👩‍👧‍👦 family, 👩🏽‍💻 coder, 🇯🇵🇫🇷 flags, 👍🏽 ok 🧑‍🤝‍🧑",
    "中文字符测试，日本語のテキストとカタカナ。한국어 텍스트입니다.",
    "e\u0301 combining; Z\u0324\u0354\u0367\u0311\u0353 zalgo; a\u0308\u0304",
    "العربية نص، עברית טקסט, हिन्दी पाठ, ภาษาไทย",
    "line one\r\nline two\r\n\r\nline four\n",
    "\tindented\t\ttabs\t \t end\t",
    "a" + " " * 100 + "b" + "\n" * 50 + "c" + " \t" * 30,
    " " * 17,
    "\n\n\n",
    "1234567890 3.14159 1,000,000 007 x2 ⅷ ١٢٣ ２０２６",
    "rare: ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ᚠᛇᚻ ⠓⠑⠇⠇⠕ 🜁 \U0010FFFD",
    "spaces:\u0085nel\u00a0nbsp\u3000ideographic\ufeffbom\u2028ls\u2029ps\u180emvs",
    "controls \x01\x02\x1b[0m\x7f end",
    "<s> begins, </s> ends, <unk>, <pad>, <|endoftext|> and <|begin_of_text|> "
    "<|end_of_text|> inside",
    "<|endoftext|>",
    "x<|endoftext|>y<|endoftext|><|endoftext|>",
    "''' ''s 's 'S 'LL 've ``quoted'' --dash-- ... !!! ???",
    "https://example.com/path?q=1&r=2#frag user@example.org C:\\\\path\\\\file.txt",
    "def f(x):\n    return x ** 2  # comment\n\n\tif x: pass",
    "",
    " ",
    "Ġ Ċ ▁ ☯ byte-level look-alikes",
    "MiXeD CaSe WoRdS and ALLCAPS and lowercase",
]


def brown_texts(limit_bytes=None):
    """The Brown Corpus documents (data/brown/brown.jsonl), in file order."""
    out, total = [], 0
    with open(os.path.join(DATA_DIR, "brown", "brown.jsonl"), encoding="utf-8") as f:
        for line in f:
            t = json.loads(line)["text"]
            out.append(t)
            total += len(t.encode("utf-8"))
            if limit_bytes is not None and total >= limit_bytes:
                break
    return out


def megatron_tokenize(flags, texts):
    """Our ids of each text (megatron tokenize --null-data): a list of lists."""
    data = b"".join(t.encode("utf-8") + b"\0" for t in texts)
    r = subprocess.run([MT_BIN, "tokenize", "--null-data", *flags], input=data, capture_output=True)
    if r.returncode != 0:
        sys.exit(f"megatron tokenize {' '.join(flags)} failed: {r.stderr.decode(errors='replace')}")
    lines = r.stdout.decode("utf-8").split("\n")[:-1]
    assert len(lines) == len(texts), (len(lines), len(texts))
    return [[int(x) for x in l.split()] for l in lines]


def megatron(args, check=True):
    r = subprocess.run([MT_BIN, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"megatron {' '.join(args)} failed: {r.stderr}")
    return r


def read_indexed(prefix):
    """(tokens per document, dtype) of a Megatron .bin/.idx pair."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", prefix
    code = idx[17]
    dtype = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
             8: np.uint16}[code]
    seqs, docs = struct.unpack("<QQ", idx[18:34])
    lengths = np.frombuffer(idx, dtype=np.int32, count=seqs, offset=34)
    doc_idx = np.frombuffer(idx, dtype=np.int64, count=docs, offset=34 + seqs * 4 + seqs * 8)
    tokens = np.fromfile(prefix + ".bin", dtype=dtype)
    starts = np.concatenate([[0], np.cumsum(lengths.astype(np.int64))])
    out = []
    for d in range(docs - 1):
        out.append(tokens[starts[doc_idx[d]]:starts[doc_idx[d + 1]]].tolist())
    return out, dtype


class Checker:
    def __init__(self):
        self.failures = 0

    def check(self, cond, what):
        if not cond:
            self.failures += 1
            if self.failures <= 20:
                print("FAIL:", what, file=sys.stderr)

    def compare(self, name, texts, expected, got):
        for i, (t, e, g) in enumerate(zip(texts, expected, got)):
            if e != g:
                at = next((k for k in range(min(len(e), len(g))) if e[k] != g[k]), min(len(e), len(g)))
                self.check(False, f"{name} text {i} {t[:120]!r}: first difference at id {at}: "
                                  f"expected {e[max(0, at - 3):at + 5]} got {g[max(0, at - 3):at + 5]}")

    def finish(self, passed_what):
        if self.failures:
            print(f"{self.failures} check(s) failed", file=sys.stderr)
            sys.exit(1)
        print(passed_what)
