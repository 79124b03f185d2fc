"""Reference test of the GPT sample index against classic Megatron-LM (C23 f7727433).

The algorithms of C23 megatron/data/gpt_dataset.py (_num_epochs, _build_doc_idx,
_build_shuffle_idx, _build_index_mappings' cache naming), helpers.cpp (build_sample_idx,
build_blending_indices), dataset_utils.py (get_train_valid_test_split_,
get_datasets_weights_and_num_samples) and blendable_dataset.py are re-implemented here in
plain Python + NumPy, with numpy.random.RandomState as the shuffler, independently of the
C++ code. Small datasets in Megatron's .bin/.idx format (random document lengths, zeros
included) are written with numpy; `megatron dataset-info ... --show-samples K` runs for many
configurations, and the .npy cache files (dtype and values), the .dsc text, the md5 file names
and the shown samples must equal the reference.

Run by Debian's /usr/bin/python3 with numpy; env MT_BIN = the megatron binary.
"""
import functools
import hashlib
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

MT_BIN = os.environ.get("MT_BIN")
FAILURES = []
CHECKS = {"configs": 0, "separate": 0, "not_separate": 0, "multi_epoch": 0, "blend": 0, "loaded": 0, "per_split": 0}


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, file=sys.stderr)


# ---------------------------------------------------------------- dataset files (MMIDIDX v1)

def write_indexed(prefix, lengths, rng, dtype=np.uint16, code=8, vocab=50000, doc_idx=None):
    lengths = np.asarray(lengths, dtype=np.int32)
    tokens = rng.randint(0, vocab, size=int(lengths.sum())).astype(dtype)
    with open(prefix + ".bin", "wb") as f:
        f.write(tokens.tobytes())
    pointers = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64)) * np.dtype(dtype).itemsize
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(lengths)))
        if doc_idx is None:
            doc_idx = np.arange(len(lengths) + 1, dtype=np.int64)
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(lengths.tobytes())
        f.write(pointers.tobytes())
        f.write(np.asarray(doc_idx, dtype=np.int64).tobytes())
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(lengths)
    return {"sizes": lengths, "tokens": tokens.astype(np.int64), "offsets": offsets}


# ---------------------------------------------------------------- C23 algorithms, in Python

def parse_and_normalize_split(split):
    """Megatron-Core blended_megatron_dataset_config.py: every [.0-9]+ is a weight."""
    split = list(map(float, re.findall(r"[.0-9]+", split)))
    split = split + [0.0 for _ in range(3 - len(split))]
    assert len(split) == 3
    w = np.array(split, dtype=np.float64)
    return (w / np.sum(w)).tolist()


def mcore_split_indices(splits_string, size):
    """Megatron-Core _build_megatron_dataset_splits: bookends cumulated, each rounded."""
    bookends = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *parse_and_normalize_split(splits_string)])
    return [int(round(b * float(size))) for b in bookends]


def split_indices(splits_string, size, classic=False):
    """The ranges megatron uses: Megatron-Core's rule, or with --classic-split C23's
    get_train_valid_test_split_ (on the weights Megatron-Core parses)."""
    if not classic:
        return mcore_split_indices(splits_string, size)
    splits = parse_and_normalize_split(splits_string)
    idx = [0]
    for i, s in enumerate(splits):
        idx.append(idx[i] + int(round(s * float(size))))
    diff = idx[-1] - size
    for i in range(1, len(idx)):
        idx[i] -= diff
    return idx


def num_epochs(tokens_per_epoch, seq_length, num_samples):
    e, total = 0, 0
    while True:
        e += 1
        total += tokens_per_epoch
        if ((total - 1) // seq_length) >= num_samples:
            return e


def build_doc_idx(documents, epochs, rng, separate_last_epoch):
    if not separate_last_epoch or epochs == 1:
        doc_idx = np.mgrid[0:epochs, 0:len(documents)][1]
        doc_idx[:] = documents
        doc_idx = doc_idx.reshape(-1).astype(np.int32)
        rng.shuffle(doc_idx)
        return doc_idx
    first = build_doc_idx(documents, epochs - 1, rng, False)
    last = build_doc_idx(documents, 1, rng, False)
    return np.concatenate((first, last))


def build_sample_idx(sizes, doc_idx, seq_length, epochs, tokens_per_epoch):
    n = (epochs * tokens_per_epoch - 1) // seq_length
    out = np.zeros([n + 1, 2], dtype=np.int32)
    di, off = 0, 0
    for i in range(1, n + 1):
        remaining = seq_length + 1
        while remaining != 0:
            length = int(sizes[doc_idx[di]]) - off
            remaining -= length
            if remaining <= 0:
                off += remaining + length - 1
                remaining = 0
            else:
                di += 1
                off = 0
        out[i] = (di, off)
    return out


def build_shuffle_idx(n_first, total, rng):
    dtype = np.uint32
    if total >= (np.iinfo(np.uint32).max - 1):
        dtype = np.int64
    first = np.arange(0, n_first, dtype=dtype)
    rng.shuffle(first)
    if n_first == total:
        return first
    last = np.arange(n_first, total, dtype=dtype)
    rng.shuffle(last)
    return np.concatenate((first, last))


def gpt_index(name, prefix, begin, end, sizes, split_string, n, s, seed, rule_line=False):
    documents = np.arange(begin, end, dtype=np.int32)
    tokens_per_epoch = int(np.sum(sizes[documents]))
    epochs = num_epochs(tokens_per_epoch, s, n)
    rng = np.random.RandomState(seed=seed)
    desc = "GPT Dataset\n\n"
    desc += f"Data prefix {prefix}\n"
    desc += f"Dataset name {name}\n"
    desc += f"Number of samples {n}\n"
    desc += f"Sequence length {s}\n"
    desc += f"Random seed {seed}\n"
    desc += f"Split {split_string}\n"
    if rule_line:  # the range differs from C23's rule: never C23's cache
        desc += "Split rule Megatron-Core\n"
    if epochs == 1:
        separate = False
    else:
        sans = ((epochs - 1) * tokens_per_epoch - 1) // s
        last = n - sans
        per_epoch = (tokens_per_epoch - 1) // s
        separate = last < int(0.80 * per_epoch)
    doc_idx = build_doc_idx(documents, epochs, rng, separate)
    sample_idx = build_sample_idx(sizes, doc_idx, s, epochs, tokens_per_epoch)
    n_first = sans if separate else sample_idx.shape[0] - 1
    shuffle_idx = build_shuffle_idx(n_first, sample_idx.shape[0] - 1, rng)
    return {"desc": desc, "md5": hashlib.md5(desc.encode("utf-8")).hexdigest(), "doc": doc_idx,
            "sample": sample_idx, "shuffle": shuffle_idx, "epochs": epochs, "separate": separate}


def gpt_sample(ds, index, i):
    r = int(index["shuffle"][i])
    d0, o0 = (int(x) for x in index["sample"][r])
    d1, o1 = (int(x) for x in index["sample"][r + 1])
    doc, toks, offs = index["doc"], ds["tokens"], ds["offsets"]
    parts = []
    if d0 == d1:
        b = offs[doc[d0]]
        parts.append(toks[b + o0:b + o1 + 1])
    else:
        parts.append(toks[offs[doc[d0]] + o0:offs[doc[d0] + 1]])
        for d in range(d0 + 1, d1):
            parts.append(toks[offs[doc[d]]:offs[doc[d] + 1]])
        parts.append(toks[offs[doc[d1]]:offs[doc[d1]] + o1 + 1])
    return np.concatenate(parts).tolist()


def blending_indices(weights, size):
    weights = np.array(weights, dtype=np.float64)
    weights /= np.sum(weights)
    count = [0] * len(weights)
    index = np.zeros(size, dtype=np.uint8)
    sample_index = np.zeros(size, dtype=np.int64)
    for i in range(size):
        x = max(float(i), 1.0)
        best, best_err = 0, weights[0] * x - count[0]
        for d in range(1, len(weights)):
            err = weights[d] * x - count[d]
            if err > best_err:
                best, best_err = d, err
        index[i] = best
        sample_index[i] = count[best]
        count[best] += 1
    return index, sample_index


def targets(train_samples, gbs, eval_interval, eval_iters):
    train_iters = train_samples // gbs
    return [train_samples, (train_iters // eval_interval + 1) * eval_iters * gbs, eval_iters * gbs]


# ---------------------------------------------------------------- running the binary

def run(args, expect_ok=True):
    p = subprocess.run([MT_BIN, "dataset-info"] + args, capture_output=True, text=True, timeout=60)
    if expect_ok and p.returncode != 0:
        FAILURES.append(f"dataset-info {args} failed: {p.stderr.strip()[-400:]}")
        print("FAIL:", args, p.stderr[-400:], file=sys.stderr)
    return p


def shown(stdout):
    rows = [json.loads(line) for line in stdout.splitlines()]
    return rows


def check_gpt_cache(tag, cache_dir, ref):
    base = os.path.join(cache_dir, ref["md5"])
    for suffix in (".dsc", "_doc_idx.npy", "_sample_idx.npy", "_shuffle_idx.npy"):
        check(os.path.isfile(base + suffix), f"{tag}: missing {base + suffix}")
    if FAILURES and not os.path.isfile(base + ".dsc"):
        return
    with open(base + ".dsc") as f:
        check(f.read() == ref["desc"], f"{tag}: .dsc text differs")
    for suffix, key in (("_doc_idx.npy", "doc"), ("_sample_idx.npy", "sample"), ("_shuffle_idx.npy", "shuffle")):
        got = np.load(base + suffix, allow_pickle=False)
        check(got.dtype == ref[key].dtype, f"{tag}{suffix}: dtype {got.dtype} != {ref[key].dtype}")
        check(got.shape == ref[key].shape, f"{tag}{suffix}: shape {got.shape} != {ref[key].shape}")
        check(np.array_equal(got, ref[key]), f"{tag}{suffix}: values differ")
        # Byte-identical to np.save of the reference array.
        tmp = base + suffix + ".ref.npy"
        np.save(tmp, ref[key], allow_pickle=True)
        with open(tmp, "rb") as a, open(base + suffix, "rb") as b:
            check(a.read() == b.read(), f"{tag}{suffix}: bytes differ from np.save")
        os.remove(tmp)


def check_summary(tag, stdout, prefix, lengths, doc_idx, dtype_name):
    """The stats block of `dataset-info PREFIX` against numpy (percentiles: numpy's default linear)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    doc_idx = np.asarray(doc_idx, dtype=np.int64)
    doc_tokens = np.array([lengths[doc_idx[k]:doc_idx[k + 1]].sum() for k in range(len(doc_idx) - 1)], dtype=np.int64)
    expect = [f"dataset {prefix}", f"  dtype:      {dtype_name}", f"  sequences:  {len(lengths)}",
              f"  documents:  {len(doc_idx) - 1}", f"  tokens:     {int(lengths.sum())}"]
    if len(doc_tokens):
        p50, p90, p99 = (np.percentile(doc_tokens, q) for q in (50, 90, 99))
        expect.append(f"  document lengths (tokens): min {doc_tokens.min()}, mean {doc_tokens.mean():.2f}, "
                      f"median {p50:.1f}, p90 {p90:.1f}, p99 {p99:.1f}, max {doc_tokens.max()}")
        expect.append(f"  empty documents: {int((doc_tokens == 0).sum())}")
    got = stdout.splitlines()[:len(expect)]
    check(got == expect, f"{tag}: summary\n{got}\n!=\n{expect}")


def check_split_lines(tag, text, prefix, bounds, sizes, refs, wanted):
    """The split block: sequence ranges, tokens, epochs and the separate-last-epoch decision."""
    lines = text.splitlines()
    try:
        at = lines.index(f" > dataset split of {prefix}:")
    except ValueError:
        check(False, f"{tag}: no split block for {prefix}")
        return
    for i, name in enumerate(["train", "validation", "test"]):
        b, e = bounds[i], bounds[i + 1]
        expect = [f"    {name}:", f"     document indices in [{b}, {e}) total of {e - b} documents, "
                  f"{int(sizes[b:e].sum())} tokens"]
        check(lines[at + 1 + 2 * i:at + 3 + 2 * i] == expect, f"{tag}: split line {name}: "
              f"{lines[at + 1 + 2 * i:at + 3 + 2 * i]} != {expect}")
    for i, name in enumerate(["train", "valid", "test"]):
        ref = refs[i]
        if ref is None:
            check(f" > {name}: empty split, not built" in lines, f"{tag}: {name} should be reported empty")
            continue
        tokens = int(sizes[bounds[i]:bounds[i + 1]].sum())
        line = (f" > {name}: {wanted[i]} samples requested, {tokens} tokens per epoch, {ref['epochs']} epoch(s), "
                f"separate last epoch: {'yes' if ref['separate'] else 'no'}, {ref['sample'].shape[0] - 1} samples available")
        check(line in lines, f"{tag}: missing {line!r}")


def rule_line(split, size, i, classic):
    """Whether split i's cache description carries the "Split rule" line."""
    ours, c23 = split_indices(split, size, classic), split_indices(split, size, True)
    return ours[i:i + 2] != c23[i:i + 2]


def single_config(tmp, tag, ds, prefix, s, train_samples, split, seed, gbs=1, eval_interval=1000,
                  eval_iters=2, show=8, use_cache_flag=True, expect_separate=None, classic=False):
    cache = os.path.join(tmp, "cache-" + tag)
    args = [prefix, "--seq-length", str(s), "--train-samples", str(train_samples), "--split", split,
            "--seed", str(seed), "--global-batch-size", str(gbs), "--eval-interval", str(eval_interval),
            "--eval-iters", str(eval_iters), "--show-samples", str(show)]
    if classic:
        args.append("--classic-split")
    if use_cache_flag:
        args += ["--data-cache-path", cache]
    cache_dir = cache if use_cache_flag else os.path.join(os.path.dirname(prefix), "index-cache")
    p = run(args)
    if p.returncode != 0:
        return
    CHECKS["configs"] += 1
    sizes = ds["sizes"]
    bounds = split_indices(split, len(sizes), classic)
    wanted = targets(train_samples, gbs, eval_interval, eval_iters)
    refs = []
    for i, name in enumerate(["train", "valid", "test"]):
        if bounds[i + 1] <= bounds[i]:
            refs.append(None)
            continue
        ref = gpt_index(name, prefix, bounds[i], bounds[i + 1], sizes, split, wanted[i], s, seed,
                        rule_line(split, len(sizes), i, classic))
        refs.append(ref)
        check_gpt_cache(f"{tag}/{name}", cache_dir, ref)
        if i == 0 and expect_separate is not None:
            check(ref["epochs"] == 2 and ref["separate"] == expect_separate, f"{tag}: test setup missed its case")
        if ref["epochs"] > 1:
            CHECKS["multi_epoch"] += 1
            CHECKS["separate" if ref["separate"] else "not_separate"] += 1
    check_split_lines(tag, p.stderr, prefix, bounds, sizes, refs, wanted)
    rows = shown(p.stdout)
    check(len(rows) == show, f"{tag}: {len(rows)} samples shown, expected {show}")
    for k, row in enumerate(rows):
        check(row["index"] == k, f"{tag}: row {k} has index {row['index']}")
        expect = gpt_sample(ds, refs[0], k)
        check(len(row["tokens"]) == s + 1, f"{tag}: sample {k} has {len(row['tokens'])} tokens")
        check(row["tokens"] == expect, f"{tag}: sample {k} tokens differ")
    # A second run maps the cache and prints the same samples.
    p2 = run(args)
    check("loaded cached index" in p2.stderr and "built index" not in p2.stderr,
          f"{tag}: second run did not load the cache: {p2.stderr[-300:]}")
    check(p2.stdout == p.stdout, f"{tag}: second run shows different samples")
    if "loaded cached index" in p2.stderr:
        CHECKS["loaded"] += 1


def blend_config(tmp, tag, datasets, weights, s, train_samples, split, seed, show=12, classic=False):
    cache = os.path.join(tmp, "cache-" + tag)
    data_path = []
    for w, (prefix, _) in zip(weights, datasets):
        data_path += [str(w), prefix]
    args = ["--data-path"] + data_path + ["--seq-length", str(s), "--train-samples", str(train_samples),
                                          "--split", split, "--seed", str(seed), "--eval-iters", "1",
                                          "--data-cache-path", cache, "--show-samples", str(show)]
    if classic:
        args.append("--classic-split")
    p = run(args)
    if p.returncode != 0:
        return
    CHECKS["configs"] += 1
    CHECKS["blend"] += 1
    # get_datasets_weights_and_num_samples: normalise with Python's sum, ceil(n * w * 1.005).
    ws = [float(w) for w in weights]
    total = 0.0
    for w in ws:
        total += w
    ws = [w / total for w in ws]
    wanted = targets(train_samples, 1, 1000, 1)
    per = [[int(math.ceil(val * w * 1.005)) for val in wanted] for w in ws]
    train_refs = []
    for (prefix, ds), counts in zip(datasets, per):
        bounds = split_indices(split, len(ds["sizes"]), classic)
        for i, name in enumerate(["train", "valid", "test"]):
            if bounds[i + 1] <= bounds[i]:
                continue
            ref = gpt_index(name, prefix, bounds[i], bounds[i + 1], ds["sizes"], split, counts[i], s, seed,
                            rule_line(split, len(ds["sizes"]), i, classic))
            check_gpt_cache(f"{tag}/{os.path.basename(prefix)}/{name}", cache, ref)
            if i == 0:
                train_refs.append(ref)
    size = sum(c[0] for c in per)
    index, sample_index = blending_indices(ws, size)
    # Our blend cache (own naming): find the file whose index has `size` entries.
    found = [f for f in os.listdir(cache) if f.endswith("_sample_index.npy")
             and np.load(os.path.join(cache, f)).shape == (size,)]
    check(len(found) == 1, f"{tag}: expected one train blend cache file, found {found}")
    if found:
        got_sample = np.load(os.path.join(cache, found[0]))
        got_index = np.load(os.path.join(cache, found[0].replace("_sample_index.npy", "_index.npy")))
        check(got_index.dtype == np.uint8 and np.array_equal(got_index, index), f"{tag}: blend dataset_index differs")
        check(got_sample.dtype == np.int64 and np.array_equal(got_sample, sample_index),
              f"{tag}: blend dataset_sample_index differs")
    rows = shown(p.stdout)
    check(len(rows) == show, f"{tag}: {len(rows)} samples shown")
    for k, row in enumerate(rows):
        d = int(index[k])
        expect = gpt_sample(datasets[d][1], train_refs[d], int(sample_index[k]))
        check(row["tokens"] == expect, f"{tag}: blended sample {k} differs")
    p2 = run(args)
    check(p2.stdout == p.stdout and "blend: loaded" in p2.stderr, f"{tag}: second blend run differs or rebuilt")


def per_split_config(tmp, tag, paths, s, train_samples, split, seed, eval_iters=2, show=10):
    """--train/valid/test-data-path (C23 build_dataset / _build_dataset): each given split reads
    all sequences [0, S) of its own prefix, or blends its own weighted prefixes with
    ceil(n * w * 1.005) samples each; the --split text still enters each cache description.
    paths[i] is None, [(prefix, ds)] (one prefix) or [(weight, prefix, ds), ...] (a blend)."""
    cache = os.path.join(tmp, "cache-" + tag)
    args = []
    for flag, entries in zip(("--train-data-path", "--valid-data-path", "--test-data-path"), paths):
        if entries is None:
            continue
        args.append(flag)
        for e in entries:
            args += [str(x) for x in e[:-1]]
    args += ["--seq-length", str(s), "--train-samples", str(train_samples), "--split", split, "--seed", str(seed),
             "--eval-iters", str(eval_iters), "--data-cache-path", cache, "--show-samples", str(show)]
    p = run(args)
    if p.returncode != 0:
        return
    CHECKS["configs"] += 1
    CHECKS["per_split"] += 1
    check("separate data paths provided for train, valid & test" in p.stderr, f"{tag}: no separate-paths line")
    wanted = targets(train_samples, 1, 1000, eval_iters)
    names = ["train", "valid", "test"]
    train_ref = None
    for i, entries in enumerate(paths):
        if entries is None:
            check(not any(line.startswith(f" > {names[i]}: ") and "samples requested" in line
                          for line in p.stderr.splitlines()), f"{tag}: {names[i]} built without a path")
            continue
        if len(entries) == 1 and len(entries[0]) == 2:
            prefix, ds = entries[0]
            ref = gpt_index(names[i], prefix, 0, len(ds["sizes"]), ds["sizes"], split, wanted[i], s, seed)
            check_gpt_cache(f"{tag}/{names[i]}", cache, ref)
            bounds = [0 if k <= i else len(ds["sizes"]) for k in range(4)]
            refs = [ref if k == i else None for k in range(3)]
            want = [wanted[i] if k == i else 0 for k in range(3)]
            check_split_lines(f"{tag}/{names[i]}", p.stderr, prefix, bounds, ds["sizes"], refs, want)
            if i == 0:
                train_ref = ("single", ds, ref)
            continue
        ws = [float(e[0]) for e in entries]
        total = 0.0
        for w in ws:
            total += w
        ws = [w / total for w in ws]
        counts = [int(math.ceil(wanted[i] * w * 1.005)) for w in ws]
        members = []
        for (w, prefix, ds), n in zip(entries, counts):
            ref = gpt_index(names[i], prefix, 0, len(ds["sizes"]), ds["sizes"], split, n, s, seed)
            check_gpt_cache(f"{tag}/{os.path.basename(os.path.dirname(prefix))}/{names[i]}", cache, ref)
            members.append((ds, ref))
        size = sum(counts)
        index, sample_index = blending_indices(ws, size)
        found = [f for f in os.listdir(cache) if f.endswith("_sample_index.npy")
                 and np.load(os.path.join(cache, f)).shape == (size,)]
        check(len(found) == 1, f"{tag}: expected one {names[i]} blend cache file of {size}, found {found}")
        if found:
            got_index = np.load(os.path.join(cache, found[0].replace("_sample_index.npy", "_index.npy")))
            got_sample = np.load(os.path.join(cache, found[0]))
            check(np.array_equal(got_index, index) and np.array_equal(got_sample, sample_index),
                  f"{tag}: {names[i]} blend indices differ")
        if i == 0:
            train_ref = ("blend", members, (index, sample_index))
    rows = shown(p.stdout)
    check(len(rows) == show, f"{tag}: {len(rows)} samples shown")
    for k, row in enumerate(rows):
        if train_ref[0] == "single":
            expect = gpt_sample(train_ref[1], train_ref[2], k)
        else:
            index, sample_index = train_ref[2]
            ds, ref = train_ref[1][int(index[k])]
            expect = gpt_sample(ds, ref, int(sample_index[k]))
        check(row["tokens"] == expect, f"{tag}: sample {k} differs")
    p2 = run(args)
    check(p2.stdout == p.stdout and "built index" not in p2.stderr, f"{tag}: second run differs or rebuilt")


def main():
    if not MT_BIN:
        print("MT_BIN is not set", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="gpt_ref_")
    try:
        rng = np.random.RandomState(42)
        data = {}
        # Lengths include zeros; the last few documents of each are non-empty so that small
        # valid/test splits hold tokens.
        for name, n, hi in (("a", 300, 60), ("b", 120, 25), ("c", 1000, 12)):
            lengths = rng.randint(0, hi, size=n)
            lengths[rng.rand(n) < 0.1] = 0
            lengths[-8:] = np.maximum(lengths[-8:], 3)
            prefix = os.path.join(tmp, name, "corpus_text_document")
            os.makedirs(os.path.dirname(prefix))
            data[name] = (prefix, write_indexed(prefix, lengths, rng))

        pa, da = data["a"]
        pb, db = data["b"]
        pc, dc = data["c"]
        ta = int(da["sizes"][:split_indices("969, 30, 1", 300)[1]].sum())
        # Single datasets: several seeds, splits, sequence lengths, epochs.
        single_config(tmp, "a1", da, pa, 16, 50, "969, 30, 1", 1234)
        single_config(tmp, "a2", da, pa, 32, 3 * ta // 32, "969, 30, 1", 7)            # multi-epoch
        single_config(tmp, "a3", da, pa, 7, (ta - 1) // 7 + 3, "98,2,0", 99)            # 2 epochs, separate
        single_config(tmp, "a4", da, pa, 7, 2 * ((ta - 1) // 7) - 1, "98/1/1", 1)       # 2 epochs, not separate
        # The 80% rule at its boundary: last-epoch samples = int(0.8 * per_epoch) - 1 and = int(0.8 * per_epoch).
        t98 = int(da["sizes"][:split_indices("98,2,0", 300)[1]].sum())
        per = (t98 - 1) // 11
        single_config(tmp, "a7", da, pa, 11, per + int(0.8 * per) - 1, "98,2,0", 1234, expect_separate=True)
        single_config(tmp, "a8", da, pa, 11, per + int(0.8 * per), "98,2,0", 1234, expect_separate=False)
        single_config(tmp, "a5", da, pa, 1, 20, "1", 0, show=20)                        # s = 1
        single_config(tmp, "a6", da, pa, 200, 30, "80, 10, 10", 5, eval_iters=3)       # long samples
        single_config(tmp, "b1", db, pb, 9, 700, "949,50,1", 31337, gbs=4, eval_interval=50)
        single_config(tmp, "c1", dc, pc, 64, 200, " 900 , 60 , 40 ", 2024)
        single_config(tmp, "c2", dc, pc, 5, 3000, "969, 30, 1", 1234, show=30, use_cache_flag=False)
        # Where the rules differ ("1,1,1" of 1000: Megatron-Core (0, 333, 667, 1000), C23
        # (0, 334, 667, 1000)), and a quoted split whose quotes Megatron-Core's regex skips.
        check(split_indices("1,1,1", 1000) != split_indices("1,1,1", 1000, True), "d1: the rules should differ")
        single_config(tmp, "d1", dc, pc, 6, 400, "1,1,1", 1234)
        single_config(tmp, "d2", dc, pc, 6, 400, "1,1,1", 1234, classic=True)
        single_config(tmp, "d3", da, pa, 8, 60, "'99,1,0'", 5)
        # Blends.
        blend_config(tmp, "blend1", [data["a"], data["b"]], ["0.3", "0.7"], 16, 80, "969, 30, 1", 1234)
        blend_config(tmp, "blend2", [data["a"], data["b"], data["c"]], ["2", "1", "1"], 8, 300, "90,5,5", 11)
        blend_config(tmp, "blend3", [data["c"]], ["1.0"], 12, 100, "969, 30, 1", 3)     # weighted single = blend
        blend_config(tmp, "blend4", [data["a"], data["c"]], ["1", "3"], 8, 100, "1,1,1", 3, classic=True)

        # Separate data paths per split: whole datasets, own blends, the --split text in the cache key.
        tb = int(db["sizes"].sum())
        per_split_config(tmp, "ps1", [[(pa, da)], [(pb, db)], [(pc, dc)]], 16, 60, "969, 30, 1", 1234)
        per_split_config(tmp, "ps2", [[("0.3", pa, da), ("0.7", pc, dc)], [("1", pb, db)], None], 8, 200, "98,2,0", 5)
        per_split_config(tmp, "ps3", [[(pb, db)], None, None], 9, 3 * tb // 9, "1", 77)  # 3 epochs of all of b
        p = run(["--valid-data-path", pb, "--seq-length", "8", "--train-samples", "4", "--show-samples", "1"],
                expect_ok=False)
        check(p.returncode != 0 and "no --train-data-path" in p.stderr, f"valid path only: {p.stderr}")
        p = run(["--train-data-path", "1", pa, "2", "--seq-length", "8", "--train-samples", "4"], expect_ok=False)
        check(p.returncode != 0 and "[--train-data-path] expected one prefix or (weight, prefix) pairs" in p.stderr,
              f"odd per-split list: {p.stderr}")
        p = run([pa, "--train-data-path", pb], expect_ok=False)
        check(p.returncode != 0 and "[--train-data-path]" in p.stderr, f"prefix and per-split path: {p.stderr}")
        empty = os.path.join(tmp, "empty", "e")
        os.makedirs(os.path.dirname(empty))
        write_indexed(empty, [], rng)
        p = run(["--train-data-path", pa, "--valid-data-path", empty, "--seq-length", "8", "--train-samples", "4"],
                expect_ok=False)
        check(p.returncode != 0 and "[--valid-data-path]" in p.stderr and "no sequences" in p.stderr,
              f"empty valid dataset: {p.stderr}")

        # Errors: one line, non-zero exit, no hang.
        p = run([pa, "--seq-length", "0", "--train-samples", "5"], expect_ok=False)
        check(p.returncode != 0 and "--seq-length" in p.stderr, f"seq-length 0: {p.stderr}")
        p = run([pa, "--show-samples", "3"], expect_ok=False)
        check(p.returncode != 0 and "--show-samples" in p.stderr, f"show-samples without target: {p.stderr}")
        zero = os.path.join(tmp, "zero", "z")
        os.makedirs(os.path.dirname(zero))
        write_indexed(zero, [0, 0, 0, 0], rng)
        p = run([zero, "--seq-length", "4", "--train-samples", "2", "--split", "1,0,0",
                 "--data-cache-path", os.path.join(tmp, "zc")], expect_ok=False)
        check(p.returncode != 0 and "0 tokens" in p.stderr, f"zero-token split: {p.stderr}")
        # The stats block, for one-sequence documents and for documents of several sequences.
        for prefix, ds in (data["a"], data["b"], data["c"]):
            p = run([prefix])
            check_summary(prefix, p.stdout, prefix, ds["sizes"], np.arange(len(ds["sizes"]) + 1), "uint16")
        multi = os.path.join(tmp, "multi", "m")
        os.makedirs(os.path.dirname(multi))
        m_lengths = rng.randint(0, 30, size=50)
        m_doc_idx = np.concatenate(([0], np.sort(rng.randint(0, 51, size=19)), [50]))
        write_indexed(multi, m_lengths, rng, dtype=np.int32, code=4, doc_idx=m_doc_idx)
        p = run([multi])
        check_summary("multi", p.stdout, multi, m_lengths, m_doc_idx, "int32")
        check(" 20\n" in p.stdout and "sequences:  50" in p.stdout, f"multi-sequence fixture: {p.stdout}")

        # The test must have exercised what it claims to.
        check(CHECKS["configs"] == 21 and CHECKS["per_split"] == 3, f"ran {CHECKS['configs']} of 21 configurations")
        check(CHECKS["separate"] >= 1 and CHECKS["not_separate"] >= 1, f"epoch coverage {CHECKS}")
        check(CHECKS["loaded"] >= 11, f"cache reuse coverage {CHECKS}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(CHECKS)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)", file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
