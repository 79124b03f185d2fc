"""Fuzzes the vocab.json / merges.txt readers (src/data/tokenizer/bpe_files.cpp) and the
tokenizer built from them (gpt2_bpe_tokenizer.cpp) through `megatron tokenize`.

Most cases mutate a small consistent cut of GPT-2's files (the 256 byte tokens, the first
merges and <|endoftext|>, one vocab entry per line) so that a run takes milliseconds; some
mutate the real files. Mutations: JSON / line edits (punctuation, escapes, invalid UTF-8, ids
set to edge values, lines swapped, deleted or duplicated, three-field merges) and raw byte
edits. Each run encodes a text through the mutated pair: exit 0, or exit 1 with an "error:"
line; never a signal, a hang or unbounded memory (an id of 2^31-1 used to allocate 24 GiB).
Fixed cases: a FIFO in place of either file is refused at once; huge, repeated and missing
ids are refused naming the file and the token.
"""
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fuzz_support as fz  # noqa: E402

TEXT = ("The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary election "
        "produced no evidence.\n  Ünïcödé ☃ 日本語 \t\r\n<|endoftext|> 12345 it's don't\n").encode("utf-8")
TEXT += b"\xff\xfe\n"  # not UTF-8: bytes still tokenize


def main():
    fixtures = tempfile.mkdtemp(prefix="mt_bpe_fuzz_fixtures_")
    small = fz.small_bpe_files(fixtures)
    pairs = {"small": tuple(fz.read(p) for p in small), "gpt2": (fz.read(fz.VOCAB), fz.read(fz.MERGES))}
    for name, paths in (("small", small), ("gpt2", (fz.VOCAB, fz.MERGES))):
        fz.must_succeed(["tokenize", "--vocab-file", paths[0], "--merge-file", paths[1]], stdin=TEXT)

    def case(seed, work):
        rng = random.Random(seed)
        name = "gpt2" if rng.random() < 0.1 else "small"
        vocab, merges = pairs[name]
        which = rng.choice(["vocab.json", "merges.txt"])
        data = vocab if which == "vocab.json" else merges
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            data, how = (fz.mutate_text if rng.random() < 0.7 else fz.mutate_bytes)(data, rng)
        files = {"vocab.json": vocab, "merges.txt": merges}
        files[which] = data
        for f, d in files.items():
            fz.write(os.path.join(work, f), d)
        args = ["tokenize", "--vocab-file", os.path.join(work, "vocab.json"), "--merge-file",
                os.path.join(work, "merges.txt")]
        return [("%s %s: %s" % (name, which, how), fz.run(args, stdin=TEXT))], []

    failures = fz.run_cases("bpe_fuzz", fz.case_seeds(35400, 200), case)

    work = tempfile.mkdtemp(prefix="mt_bpe_fuzz_fixed_")
    vocab_path, merges_path = os.path.join(work, "vocab.json"), os.path.join(work, "merges.txt")
    small_vocab = pairs["small"][0]
    last = small_vocab.rstrip().rsplit(b"\n", 1)[0]  # without the closing brace
    fixed = [
        ("an id of 2^31-1", last + b',\n"zzz": 2147483647\n}\n', 'vocab.json:%d: token "zzz" has id 2147483647, but'),
        ("a repeated id", last + b',\n"zzz": 5\n}\n', 'vocab.json:%d: token "zzz" has id 5, already the id of "&"'),
        ("a missing id", last + b',\n"zzz": 558\n}\n', 'vocab.json:%d: token "zzz" has id 558, but the 558 entries'),
    ]
    line = last.count(b"\n") + 2
    for what, vocab, expected in fixed:
        fz.write(vocab_path, vocab)
        fz.write(merges_path, pairs["small"][1])
        r = fz.run(["tokenize", "--vocab-file", vocab_path, "--merge-file", merges_path], stdin=TEXT)
        # make_tokenizer names the flag before the reader's "<file>:<line>: reason".
        if r.verdict() is not None or r.rc != 1 or ("error: [--vocab-file] " + work + "/" + expected % line) not in r.stderr.decode():
            print("FAIL %s: rc %s, %s\n  %s" % (what, r.rc, r.verdict(), r.tail()), file=sys.stderr)
            failures += 1
    for victim in ("vocab.json", "merges.txt"):
        fz.write(vocab_path, pairs["small"][0])
        fz.write(merges_path, pairs["small"][1])
        path = os.path.join(work, victim)
        os.remove(path)
        os.mkfifo(path)
        r = fz.run(["tokenize", "--vocab-file", vocab_path, "--merge-file", merges_path], stdin=TEXT, timeout=10)
        flag = "--vocab-file" if victim == "vocab.json" else "--merge-file"
        if r.verdict() is not None or r.rc != 1 or "error: [%s] %s: is a FIFO" % (flag, path) not in r.stderr.decode():
            print("FAIL a FIFO as %s: rc %s, %s\n  %s" % (victim, r.rc, r.verdict(), r.tail()), file=sys.stderr)
            failures += 1
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(fixtures, ignore_errors=True)
    if failures:
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
