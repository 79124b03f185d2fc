"""Fuzzes the .idx/.bin reader (src/data/indexed_dataset.cpp) through the real binary.

Two fixtures: a uint16 dataset written by `megatron preprocess` (one sequence per document)
and an int32 one written here with multi-sequence and empty documents. Each seeded case
mutates the .idx (bytes, or one header / length / pointer / document-index field set to an
edge value) or the .bin, then runs one reader of it: `dataset-info PREFIX`, `dataset-info
PREFIX --seq-length ... --show-samples ...` (also builds the index and reads every sample;
half the cases) or `merge-datasets` with it as an input. Each must exit 0 or 1 with an "error:" line (see
fuzz_support.py). Fixed cases: a FIFO, a directory and /dev/null in place of each file, which
must be refused at once.
"""
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_support as fz  # noqa: E402

HEADER = 34


def idx_fields(idx):
    """(offset, width, name) of every integer field of an MMIDIDX index."""
    s = int.from_bytes(idx[18:26], "little")
    d1 = int.from_bytes(idx[26:34], "little")
    fields = [(9, 8, "version"), (17, 1, "dtype"), (18, 8, "sequence count"), (26, 8, "document count + 1")]
    fields += [(HEADER + 4 * i, 4, "length %d" % i) for i in range(s)]
    fields += [(HEADER + 4 * s + 8 * i, 8, "pointer %d" % i) for i in range(s)]
    fields += [(HEADER + 12 * s + 8 * i, 8, "document index %d" % i) for i in range(d1)]
    return fields


def readers(prefix, work):
    other = os.path.join(work, "other")
    return [
        ("dataset-info", ["dataset-info", prefix]),
        ("samples", ["dataset-info", prefix, "--seq-length", "8", "--train-samples", "12", "--split", "1",
                     "--data-cache-path", os.path.join(work, "cache"), "--show-samples", "12"]),
        ("merge", ["merge-datasets", "--input", prefix, other, "--output-prefix", os.path.join(work, "merged")]),
    ]


def main():
    fixtures = tempfile.mkdtemp(prefix="mt_idx_fuzz_fixtures_")
    vocab, merges = fz.small_bpe_files(fixtures)
    jsonl = os.path.join(fixtures, "in.jsonl")
    fz.write(jsonl, b"".join(fz.brown_lines(6, max_chars=300)))
    fz.must_succeed(["preprocess", "--input", jsonl, "--output-prefix", os.path.join(fixtures, "u16"),
                     "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vocab, "--merge-file", merges,
                     "--append-eod", "--workers", "1"])
    rng = random.Random(7)
    docs = [[[rng.randrange(-5, 70000) for _ in range(rng.randrange(0, 12))] for _ in range(rng.randrange(0, 4))]
            for _ in range(9)]
    docs.append([[1, 2, 3] * 9])  # at least one sample of 8 + 1 tokens
    fz.write_indexed_dataset(os.path.join(fixtures, "i32"), 4, 4, docs)
    sets = {}
    for name in ("u16_text_document", "i32"):
        prefix = os.path.join(fixtures, name)
        fz.must_succeed(["dataset-info", prefix])
        sets[name] = (fz.read(prefix + ".idx"), fz.read(prefix + ".bin"))
    failures = 0

    def case(seed, work):
        rng = random.Random(seed)
        name = rng.choice(sorted(sets))
        idx, binary = sets[name]
        what = name
        if rng.random() < 0.75:
            if rng.random() < 0.5:
                idx, how = fz.int_field(idx, rng, idx_fields(idx))
            else:
                idx, how = fz.mutate_bytes(idx, rng)
            what += ".idx: " + how
        else:
            binary, how = fz.mutate_bytes(binary, rng)
            what += ".bin: " + how
        prefix = os.path.join(work, "ds")
        fz.write(prefix + ".idx", idx)
        fz.write(prefix + ".bin", binary)
        # merge-datasets' second input, of the same dtype: the unmutated copy.
        fz.write(os.path.join(work, "other.idx"), sets[name][0])
        fz.write(os.path.join(work, "other.bin"), sets[name][1])
        # One reader per case (each run costs the binary's start-up); all of them open the dataset.
        info, samples, merge = readers(prefix, work)
        reader, args = rng.choice([info, samples, samples, merge])
        return [("%s; %s" % (what, reader), fz.run(args))], []

    failures += fz.run_cases("idx_fuzz", fz.case_seeds(35100, 200), case)

    # Not a regular file where one is mapped: refused at once, naming it (a FIFO used to block).
    work = tempfile.mkdtemp(prefix="mt_idx_fuzz_special_")
    idx, binary = sets["u16_text_document"]
    for victim in (".idx", ".bin"):
        for kind in ("fifo", "directory", "device"):
            prefix = os.path.join(work, "ds")
            for ext in (".idx", ".bin"):
                path = prefix + ext
                if os.path.isdir(path) and not os.path.islink(path):
                    os.rmdir(path)
                elif os.path.lexists(path):
                    os.remove(path)
            fz.write(prefix + (".bin" if victim == ".idx" else ".idx"), binary if victim == ".idx" else idx)
            path = prefix + victim
            if kind == "fifo":
                os.mkfifo(path)
            elif kind == "directory":
                os.mkdir(path)
            else:
                os.symlink("/dev/null", path)
            r = fz.run(["dataset-info", prefix], timeout=10)
            bad = r.verdict()
            if bad is None and r.rc != 1:
                bad = "a %s as %s was accepted" % (kind, victim)
            if bad is None and ("error: " + path + ": is a") not in r.stderr.decode("utf-8", "replace"):
                bad = "the error does not name %s and what it is: %s" % (path, r.tail())
            if bad is not None:
                print("FAIL %s as %s: %s" % (kind, victim, bad), file=sys.stderr)
                failures += 1
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(fixtures, ignore_errors=True)
    if failures:
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
