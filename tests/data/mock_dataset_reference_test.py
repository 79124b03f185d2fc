"""Reference test of --mock-data against Megatron-Core's mock GPT dataset, rebuilt with numpy.

Megatron-Core (megatron/core/datasets/gpt_dataset.py, MockGPTLowLevelDataset and GPTDataset;
blended_megatron_dataset_builder.py) draws 100000 document lengths with
numpy.random.default_rng(0).integers(1, 4096, dtype=int32); document d of length L holds
1, 2, ..., L-1 and then the end-of-document id. Without a blend, BlendedMegatronDatasetConfig
replaces --split by "1,1,1" (blended_megatron_dataset_config.py __post_init__), whose cumulated
bookends times 100000 are rounded; the train split's sample index is built as for an
indexed dataset (epochs, document index and shuffle index drawn from
numpy.random.RandomState(seed), the sample index walking the documents). This script rebuilds
all of it in plain Python + numpy -- numpy's own PCG64 draws the lengths, independently of
the C++ generator -- and compares the first training samples and the split ranges that
`megatron dataset-info --mock-data ... --show-samples K` prints.

Run by Debian's /usr/bin/python3 with numpy; env MT_BIN = the megatron binary.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

MT_BIN = os.environ.get("MT_BIN")
FAILURES = []
LENGTHS = np.random.default_rng(0).integers(low=1, high=4096, size=100000, dtype=np.int32)


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, file=sys.stderr)


def split_bookends(split, n):
    weights = [float(x) for x in re.findall(r"[.0-9]+", split)]
    weights = (weights + [0.0, 0.0, 0.0])[:3]
    total = sum(weights)
    weights = [w / total for w in weights]
    ends = [0.0]
    for w in weights:
        ends.append(ends[-1] + w)
    return [int(round(e * float(n))) for e in ends]


def document(d, eod):
    """MockGPTLowLevelDataset.__getitem__; without a tokenizer dataset-info's vocabulary is eod + 1."""
    vocab_size = eod + 1
    return np.int64(np.concatenate([(np.arange(LENGTHS[d] - 1) + 1) % vocab_size, [eod]]))


MOCK_SPLIT = "1,1,1"  # what Megatron-Core uses for mock data, whatever --split says


def train_samples_reference(seq, wanted, seed, eod, k):
    begin, end = split_bookends(MOCK_SPLIT, len(LENGTHS))[0:2]
    docs = np.arange(begin, end, dtype=np.int32)
    tokens_per_epoch = int(LENGTHS[begin:end].sum())
    epochs = 1
    while epochs * tokens_per_epoch < wanted * seq + 1:
        epochs += 1
    separate = False
    if epochs > 1:
        sans_last = ((epochs - 1) * tokens_per_epoch - 1) // seq
        per_epoch = (tokens_per_epoch - 1) // seq
        separate = (wanted - sans_last) < int(0.80 * per_epoch)
    rng = np.random.RandomState(seed)

    def doc_index(n_epochs):
        idx = np.tile(docs, n_epochs).astype(np.int32)
        rng.shuffle(idx)
        return idx

    dindex = np.concatenate([doc_index(epochs - 1), doc_index(1)]) if separate else doc_index(epochs)
    total = (epochs * tokens_per_epoch - 1) // seq
    sample_index = [(0, 0)]
    di, offset = 0, 0
    for _ in range(total):
        remaining = seq + 1
        while remaining != 0:
            length = int(LENGTHS[dindex[di]]) - offset
            remaining -= length
            if remaining <= 0:
                offset += remaining + length - 1
                remaining = 0
            else:
                di += 1
                offset = 0
        sample_index.append((di, offset))
    first = ((epochs - 1) * tokens_per_epoch - 1) // seq if separate else total
    shuffle = np.arange(first, dtype=np.int64)
    rng.shuffle(shuffle)
    rest = np.arange(first, total, dtype=np.int64)
    rng.shuffle(rest)
    shuffle = np.concatenate([shuffle, rest])

    out = []
    for i in range(k):
        (d0, o0), (d1, o1) = sample_index[shuffle[i]], sample_index[shuffle[i] + 1]
        if d0 == d1:
            parts = [document(dindex[d0], eod)[o0:o1 + 1]]
        else:
            parts = [document(dindex[d0], eod)[o0:]]
            parts += [document(dindex[d], eod) for d in range(d0 + 1, d1)]
            parts.append(document(dindex[d1], eod)[:o1 + 1])
        out.append([int(t) for t in np.concatenate(parts)])
    return out, epochs, separate


def run_config(tag, split, seq, wanted, seed, eod, k):
    args = [MT_BIN, "dataset-info", "--mock-data", "--seq-length", str(seq), "--train-samples", str(wanted),
            "--eval-iters", "1", "--split", split, "--seed", str(seed), "--show-samples", str(k)]
    if eod is not None:
        args += ["--eod", str(eod)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        check(False, f"{tag}: dataset-info failed: {p.stderr.strip()[-400:]}")
        return
    want, epochs, separate = train_samples_reference(seq, wanted, seed, 50256 if eod is None else eod, k)
    got = [json.loads(line)["tokens"] for line in p.stdout.splitlines()]
    check(len(got) == k, f"{tag}: {len(got)} samples shown, expected {k}")
    for i, (g, w) in enumerate(zip(got, want)):
        check(g == w, f"{tag}: training sample {i} differs from Megatron-Core's (first tokens {g[:5]} vs {w[:5]})")
    bounds = split_bookends(MOCK_SPLIT, len(LENGTHS))
    for name, lo, hi in (("train", bounds[0], bounds[1]), ("validation", bounds[1], bounds[2]),
                         ("test", bounds[2], bounds[3])):
        line = f"    {name}:\n     document indices in [{lo}, {hi}) total of {hi - lo} documents, " \
               f"{int(LENGTHS[lo:hi].sum())} tokens"
        check(line in p.stderr, f"{tag}: split line not found: {line!r}")
    check(f" > mock data: 100000 documents split {MOCK_SPLIT} (" in p.stderr, f"{tag}: the split note is missing")
    summary = f"{epochs} epoch(s), separate last epoch: {'yes' if separate else 'no'}"
    check(f" > train: {wanted} samples requested" in p.stderr and summary in p.stderr,
          f"{tag}: train summary lacks {summary!r}")
    print(f"{tag}: {k} samples of {seq + 1} tokens, {epochs} epoch(s), separate {separate}: checked")


def main():
    if not MT_BIN:
        print("MT_BIN is not set", file=sys.stderr)
        return 2
    # Every --split gives the same samples: Megatron-Core splits mock data evenly.
    run_config("default --split", "969, 30, 1", 1024, 1000, 1234, None, 16)
    run_config("samples spanning documents, ids modulo 1000", "98,2,0", 4096, 64, 7, 999, 8)
    run_config("short samples", "1,1,1", 16, 50, 3, 50256, 6)
    # 70000 samples of 2048 need a third epoch of the 33333 train documents (~34000 samples each)
    # of which little is used: it is shuffled apart.
    run_config("three epochs, the last separate", "1", 2048, 70000, 1234, None, 12)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)", file=sys.stderr)
        return 1
    print("all mock-data checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
