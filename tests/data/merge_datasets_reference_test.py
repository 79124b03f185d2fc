"""`megatron merge-datasets` against a numpy re-statement of Megatron-LM's tools/merge_datasets.py.

Megatron's merge (IndexedDatasetBuilder.add_index per input, then finalize): the output dtype is
the first input's; the .bin is the inputs' .bin files concatenated; sequence lengths are
concatenated; each input's document_indices[1:] are shifted by the number of sequences before
it; pointers are recomputed from the lengths (byte offsets, int64). Directory input takes the
datasets in sorted() order of their names.

Inputs are written here with numpy (random multi-sequence documents, empty documents, zero-length
sequences, a dataset with no documents at all), for uint16 and int32; the reference output is
computed from the input arrays, never from our writer. Run by Debian's python3; env MT_BIN.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

MT_BIN = os.environ["MT_BIN"]
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, file=sys.stderr)


def idx_bytes(lengths, doc_idx, dtype, code):
    lengths = np.asarray(lengths, dtype=np.int32)
    pointers = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64)) * np.dtype(dtype).itemsize
    out = b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code)
    out += struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(doc_idx))
    return out + lengths.tobytes() + pointers.tobytes() + np.asarray(doc_idx, dtype=np.int64).tobytes()


def random_dataset(rng, docs, dtype, vocab):
    """(lengths, doc_idx, tokens) of `docs` documents: 0-3 sequences each, lengths 0-9."""
    lengths, doc_idx = [], [0]
    for _ in range(docs):
        lengths.extend(int(x) for x in rng.randint(0, 10, size=rng.randint(0, 4)))
        doc_idx.append(len(lengths))
    tokens = rng.randint(0, vocab, size=sum(lengths)).astype(dtype)
    return lengths, doc_idx, tokens


def write_dataset(prefix, ds, dtype, code):
    lengths, doc_idx, tokens = ds
    with open(prefix + ".bin", "wb") as f:
        f.write(tokens.tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(idx_bytes(lengths, doc_idx, dtype, code))


def merged_reference(datasets, dtype, code):
    lengths, doc_idx, chunks = [], [0], []
    for ds_lengths, ds_doc_idx, tokens in datasets:
        offset = len(lengths)
        lengths.extend(ds_lengths)
        doc_idx.extend(offset + d for d in ds_doc_idx[1:])
        chunks.append(tokens.tobytes())
    return b"".join(chunks), idx_bytes(lengths, doc_idx, dtype, code)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def run_merge(inputs, output):
    p = subprocess.run([MT_BIN, "merge-datasets", "--input"] + inputs + ["--output-prefix", output],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, "merge-datasets %s failed: %s" % (inputs, p.stderr.strip()[-400:]))
    return p


def main():
    tmp = tempfile.mkdtemp(prefix="mt_merge_ref_")
    rng = np.random.RandomState(2024)
    try:
        for dtype, code, vocab in ((np.uint16, 8, 50257), (np.int32, 4, 200000)):
            tag = np.dtype(dtype).name
            d = os.path.join(tmp, tag)
            os.makedirs(os.path.join(d, "in"))
            names = ["shard_10", "shard_2", "Shard_9", "empty", "shard_1"]
            sizes = [40, 7, 25, 0, 1]
            data = {}
            for name, docs in zip(names, sizes):
                data[name] = random_dataset(rng, docs, dtype, vocab)
                write_dataset(os.path.join(d, "in", name), data[name], dtype, code)
            check(any(0 in ds[0] for ds in data.values()), "no zero-length sequence in the fixture")

            # Prefixes in the given order.
            order = ["shard_2", "empty", "shard_10", "Shard_9", "shard_1"]
            out = os.path.join(d, "listed")
            p = run_merge([os.path.join(d, "in", n) for n in order], out)
            ref_bin, ref_idx = merged_reference([data[n] for n in order], dtype, code)
            check(read(out + ".bin") == ref_bin, "%s listed: .bin differs" % tag)
            check(read(out + ".idx") == ref_idx, "%s listed: .idx differs" % tag)
            docs = sum(sizes)
            check("Merged 5 datasets: %d documents" % docs in p.stdout, "%s: summary line: %s" % (tag, p.stdout))

            # A directory: Python's sorted() of the names (byte order, upper case first).
            out = os.path.join(d, "dir")
            run_merge([os.path.join(d, "in")], out)
            ref_bin, ref_idx = merged_reference([data[n] for n in sorted(names)], dtype, code)
            check(read(out + ".bin") == ref_bin, "%s dir: .bin differs" % tag)
            check(read(out + ".idx") == ref_idx, "%s dir: .idx differs" % tag)

            # Merging a merge with another input is the merge of all of them.
            out2 = os.path.join(d, "again")
            run_merge([out, os.path.join(d, "in", "shard_2")], out2)
            ref_bin, ref_idx = merged_reference([data[n] for n in sorted(names)] + [data["shard_2"]], dtype, code)
            check(read(out2 + ".idx") == ref_idx and read(out2 + ".bin") == ref_bin, "%s: merge of a merge" % tag)

        # Mixed dtypes: an error naming the input, no output.
        out = os.path.join(tmp, "mixed")
        p = subprocess.run([MT_BIN, "merge-datasets", "--input", os.path.join(tmp, "uint16", "in", "shard_1"),
                            os.path.join(tmp, "int32", "in", "shard_1"), "--output-prefix", out],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 and "int32/in/shard_1.idx" in p.stderr, "mixed dtypes: %s" % p.stderr)
        check(not os.path.exists(out + ".bin") and not os.path.exists(out + ".idx"), "mixed dtypes left output")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILURES:
        print("%d failure(s)" % len(FAILURES), file=sys.stderr)
        return 1
    print("merge-datasets reference test: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
