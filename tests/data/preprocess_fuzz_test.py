"""Fuzzes `megatron preprocess`'s input side (src/data/jsonl_reader.cpp, json_text.cpp,
preprocess.cpp): JSONL, plain and gzip / xz / zstd compressed.

A fixture of Brown documents (texts cut short, plus lists of sentences, empty documents and
escapes) is mutated per seeded case: text edits (JSON punctuation, escapes, invalid UTF-8,
deep nesting, line swaps and deletions, numbers) or raw byte edits, then stored plain or
compressed; or the compressed stream itself is damaged. `preprocess` runs on it with
random flags (--skip-invalid-lines, --workers, --append-eod, --json-keys). It must exit 0
leaving exactly the .bin/.idx pair (which `dataset-info` then opens, in a quarter of the cases), or exit 1 with an
"error:" line leaving nothing at all (outputs are written to temporaries and renamed); never
a signal, a hang or unbounded memory. A small vocabulary (a cut of GPT-2's) keeps each run
short. Fixed cases: a FIFO as --input (a process substitution) works for every format; an
input of only invalid lines with --skip-invalid-lines is an error.
"""
import gzip
import lzma
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_support as fz  # noqa: E402

FORMATS = ["plain", "gzip", "xz", "zstd"]


def compress(data, fmt):
    if fmt == "plain":
        return data
    if fmt == "gzip":
        return gzip.compress(data, mtime=0)
    if fmt == "xz":
        return lzma.compress(data)
    return subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True, check=True).stdout


def fixture_lines():
    lines = fz.brown_lines(8, max_chars=200)
    lines += [b'{"text": ["A list of", "", " sentences."], "id": 7}\n', b'{"text": ""}\r\n',
              b'{"id": "x", "text": "escapes \\u00e9 \\ud83d\\ude00 \\n\\t\\"q\\""}\n', b'{"text": "last"}']
    return lines


def main():
    fixtures = tempfile.mkdtemp(prefix="mt_jsonl_fuzz_fixtures_")
    vocab, merges = fz.small_bpe_files(fixtures)
    base = b"".join(fixture_lines())
    tool = ["preprocess", "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vocab, "--merge-file", merges]
    fz.write(os.path.join(fixtures, "in.jsonl"), base)
    fz.must_succeed(tool + ["--input", os.path.join(fixtures, "in.jsonl"), "--output-prefix",
                            os.path.join(fixtures, "ok")])
    compressed = {fmt: compress(base, fmt) for fmt in FORMATS}

    def case(seed, work):
        rng = random.Random(seed)
        fmt = rng.choice(FORMATS)
        if fmt != "plain" and rng.random() < 0.3:
            data, how = fz.mutate_bytes(compressed[fmt], rng)
            how = "the %s stream: %s" % (fmt, how)
        else:
            text, how = (fz.mutate_text if rng.random() < 0.7 else fz.mutate_bytes)(base, rng)
            if rng.random() < 0.3:
                text, how2 = fz.mutate_text(text, rng)
                how += "; " + how2
            data = compress(text, fmt)
            how = "%s text: %s" % (fmt, how)
        path = os.path.join(work, "in.data")
        fz.write(path, data)
        out = os.path.join(work, "out")
        os.makedirs(out)
        flags = ["--workers", str(rng.choice([1, 2]))]
        if rng.random() < 0.5:
            flags.append("--skip-invalid-lines")
        if rng.random() < 0.5:
            flags.append("--append-eod")
        keys = ["text"] if rng.random() < 0.8 else ["text", "id"]
        flags += ["--json-keys"] + keys
        r = fz.run(tool + ["--input", path, "--output-prefix", os.path.join(out, "p")] + flags)
        what = "%s [%s]" % (how, " ".join(flags))
        runs, extra = [(what, r)], []
        left = sorted(os.listdir(out))
        if r.rc == 0:
            expected = sorted("p_%s_document%s" % (k, e) for k in keys for e in (".bin", ".idx"))
            if left != expected:
                extra.append("%s: exit 0 left %s, expected %s" % (what, left, expected))
            elif rng.random() < 0.25:  # (not always: each run costs the binary's start-up)
                for k in keys:
                    runs.append((what + "; dataset-info of the output",
                                 fz.run(["dataset-info", os.path.join(out, "p_%s_document" % k)])))
                    if runs[-1][1].rc != 0:
                        extra.append("%s: the output does not open: %s" % (what, runs[-1][1].tail()))
        elif r.rc == 1 and left:
            extra.append("%s: failed but left %s" % (what, left))
        return runs, extra

    failures = fz.run_cases("jsonl_fuzz", fz.case_seeds(35300, 200), case)

    # A FIFO as --input (what bash's <(...) gives) is read like a file, in every format.
    reference = fz.read(os.path.join(fixtures, "ok_text_document.bin"))
    for fmt in FORMATS:
        work = tempfile.mkdtemp(prefix="mt_jsonl_fuzz_fifo_")
        fifo = os.path.join(work, "pipe")
        os.mkfifo(fifo)

        def feed():
            with open(fifo, "wb") as f:
                f.write(compressed[fmt])

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        r = fz.run(tool + ["--input", fifo, "--output-prefix", os.path.join(work, "p")], timeout=30)
        writer.join(timeout=5)
        bad = r.verdict() or (None if r.rc == 0 else "failed")
        if bad is None and fz.read(os.path.join(work, "p_text_document.bin")) != reference:
            bad = "a different dataset than from the file"
        if bad is not None:
            print("FAIL %s input through a FIFO: %s\n  %s" % (fmt, bad, r.tail()), file=sys.stderr)
            failures += 1
        shutil.rmtree(work, ignore_errors=True)

    # Only invalid lines, skipped: an error naming the input and the count; nothing written.
    work = tempfile.mkdtemp(prefix="mt_jsonl_fuzz_invalid_")
    path = os.path.join(work, "bad.jsonl")
    fz.write(path, b'not json\n{"other": 1}\n\n[1, 2]\n')
    r = fz.run(tool + ["--input", path, "--output-prefix", os.path.join(work, "p"), "--skip-invalid-lines"])
    msg = "error: %s: all 4 lines are invalid" % path
    if r.verdict() is not None or r.rc != 1 or msg not in r.stderr.decode() or os.listdir(work) != ["bad.jsonl"]:
        print("FAIL only invalid lines: rc %s, left %s: %s" % (r.rc, os.listdir(work), r.tail()), file=sys.stderr)
        failures += 1
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(fixtures, ignore_errors=True)
    if failures:
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
