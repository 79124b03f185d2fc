"""Fuzzes the index-cache readers (src/data/gpt_dataset.cpp, blended_dataset.cpp, npy.cpp).

Two configurations are built once with `megatron dataset-info ... --show-samples` (which
reads every training sample): one dataset, its cache in dirname(prefix)/index-cache/
(<hash>.dsc, _doc_idx.npy, _sample_idx.npy, _shuffle_idx.npy), and a blend of two datasets
with --data-cache-path (their caches plus the blend's .dsc, _index.npy, _sample_index.npy).
Each seeded case mutates one cache file (header bytes, one element set to an edge value or
moved by one, rows swapped, zeroed or shifted, truncation, the description's text) and runs
the same command again: exit 0 (a mutation that is still a valid index, e.g. another
permutation) or exit 1 with an "error:" line; never an abort (a self-consistent but wrong
sample_idx used to abort in sample()), a hang or unbounded memory. Fixed cases: sample_idx
rows all (0, 0) and reversed; a FIFO in place of each cache file (rebuilt, or refused).
"""
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_support as fz  # noqa: E402

SAMPLES = 70
COMMON = ["--seq-length", "8", "--train-samples", str(SAMPLES), "--split", "1", "--show-samples", str(SAMPLES)]
CONFIGS = {
    # Relative prefixes (the command runs in the case's directory) keep the cache hash fixed.
    "single": (["dataset-info", "ds"] + COMMON, "index-cache"),
    "blend": (["dataset-info", "--data-path", "0.3", "ds", "0.7", "ds2", "--data-cache-path", "cache"] + COMMON,
              "cache"),
}


def npy_data_offset(data):
    if len(data) < 10 or data[:6] != b"\x93NUMPY":
        return None
    return 10 + int.from_bytes(data[8:10], "little")


def mutate_npy(data, name, rng):
    """A mutation of an index .npy: its header, one element, or the rows as a whole."""
    off = npy_data_offset(data)
    width = 8 if name.endswith("_sample_index.npy") else (1 if name.endswith("_index.npy") else 4)
    if name.endswith("_shuffle_idx.npy"):
        width = 4  # uint32 below 2^32 - 2 samples
    n = (len(data) - off) // width if off else 0
    kind = rng.randrange(8)
    if off is None or n == 0 or kind == 0:
        return fz.mutate_bytes(data, rng)
    if kind == 1:  # the header text: shape digits, descr, fortran_order, padding
        header, how = (fz.mutate_text if rng.random() < 0.5 else fz.mutate_bytes)(data[:off], rng)
        return header + data[off:], "header: " + how
    if kind in (2, 3):
        return fz.int_field(data, rng, [(off + width * k, width, "element %d" % k) for k in range(n)])
    row = 2 * width if name.endswith("_sample_idx.npy") else width
    rows = (len(data) - off) // row
    body = [data[off + row * k: off + row * (k + 1)] for k in range(rows)]
    if kind == 4:
        i, j = rng.randrange(rows), rng.randrange(rows)
        body[i], body[j] = body[j], body[i]
        how = "rows %d and %d swapped" % (i, j)
    elif kind == 5:
        i = rng.randrange(rows)
        body = body[:i] + [body[i]] + body[i:-1]
        how = "row %d repeated, rows after it shifted" % i
    elif kind == 6:
        i = rng.randrange(rows)
        k = rng.randrange(i, rows) + 1
        body[i:k] = [bytes(row)] * (k - i)
        how = "rows %d..%d zeroed" % (i, k - 1)
    else:
        body.reverse()
        how = "rows reversed"
    return data[:off] + b"".join(body), how


def main():
    fixtures = tempfile.mkdtemp(prefix="mt_cache_fuzz_fixtures_")
    rng = random.Random(11)
    for name, ndocs in (("ds", 14), ("ds2", 9)):
        docs = [[[rng.randrange(65535) for _ in range(rng.choice([0, 1, 3, 9, 17, 40]))]] for _ in range(ndocs)]
        fz.write_indexed_dataset(os.path.join(fixtures, name), 8, 2, docs)
    pristine = {}  # config -> {relative path: bytes} of its cache files
    for config, (args, cache_dir) in CONFIGS.items():
        ref = fz.must_succeed(args, cwd=fixtures)
        if len(ref.stdout.splitlines()) != SAMPLES:
            sys.exit("fixture: %s printed %d samples" % (config, len(ref.stdout.splitlines())))
        files = {}
        for f in sorted(os.listdir(os.path.join(fixtures, cache_dir))):
            files[os.path.join(cache_dir, f)] = fz.read(os.path.join(fixtures, cache_dir, f))
        pristine[config] = files
        shutil.rmtree(os.path.join(fixtures, cache_dir))
    if len(pristine["single"]) != 4 or len(pristine["blend"]) != 11:
        sys.exit("fixture: unexpected cache files %s" % {c: sorted(f) for c, f in pristine.items()})

    def setup(work, config, files):
        for name in ("ds", "ds2"):
            for ext in (".idx", ".bin"):
                os.symlink(os.path.join(fixtures, name + ext), os.path.join(work, name + ext))
        os.makedirs(os.path.join(work, CONFIGS[config][1]))
        for rel, data in files.items():
            fz.write(os.path.join(work, rel), data)

    def case(seed, work):
        rng = random.Random(seed)
        config = rng.choice(sorted(CONFIGS))
        files = dict(pristine[config])
        victim = rng.choice(sorted(files))
        if victim.endswith(".dsc"):
            files[victim], how = fz.mutate_text(files[victim], rng)
        else:
            files[victim], how = mutate_npy(files[victim], victim, rng)
        setup(work, config, files)
        return [("%s %s: %s" % (config, victim, how), fz.run(CONFIGS[config][0], cwd=work))], []

    failures = fz.run_cases("cache_fuzz", fz.case_seeds(35200, 200), case)

    # Self-consistent but wrong sample_idx files, and FIFOs in place of cache files.
    work = tempfile.mkdtemp(prefix="mt_cache_fuzz_fixed_")
    special = []
    single = pristine["single"]
    sample = [k for k in single if k.endswith("_sample_idx.npy")][0]
    off = npy_data_offset(single[sample])
    rows = [single[sample][off + 8 * k: off + 8 * k + 8] for k in range((len(single[sample]) - off) // 8)]
    special.append(("sample_idx all (0, 0)", {sample: single[sample][:off] + bytes(len(single[sample]) - off)}, True))
    special.append(("sample_idx rows reversed", {sample: single[sample][:off] + b"".join(rows[::-1])}, True))
    for victim in sorted(single):
        special.append(("a FIFO as " + victim, {victim: None}, False))
    for what, changes, must_fail in special:
        shutil.rmtree(work)
        os.makedirs(work)
        files = dict(single)
        files.update({k: v for k, v in changes.items() if v is not None})
        setup(work, "single", files)
        for k, v in changes.items():
            if v is None:
                os.remove(os.path.join(work, k))
                os.mkfifo(os.path.join(work, k))
        r = fz.run(CONFIGS["single"][0], cwd=work, timeout=10)
        bad = r.verdict()
        if bad is None and must_fail and r.rc == 0:
            bad = "accepted"
        if bad is None and must_fail and "to rebuild it)" not in r.stderr.decode("utf-8", "replace"):
            bad = "no rebuild hint: " + r.tail()
        if bad is not None:
            print("FAIL %s: %s\n  %s" % (what, bad, r.tail()), file=sys.stderr)
            failures += 1
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(fixtures, ignore_errors=True)
    if failures:
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
