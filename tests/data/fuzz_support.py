"""Shared parts of the *_fuzz_test.py scripts: run `$MT_BIN` on mutated inputs and judge how it ends.

The contract checked: on any input, a run of `megatron` ends by itself, within a
timeout, either with exit status 0 (the mutation is still valid input) or with exit status 1
and a line starting "error:" on stderr. A signal (abort, segfault), a hang, or memory beyond
the address-space limit ("error: out of memory" counts as that: input must be refused by a
check, not by exhausting memory) is a failure, printed with the seed that reproduces it.

Children run under RLIMIT_AS = 4 GiB (set on this process, so inherited by every child; a
sanitizer build, which reserves terabytes of shadow memory, gets ASan's own allocation cap
instead) and without core files.

Environment: MT_BIN (required), MT_DATA_DIR; MT_FUZZ_SEED=N runs only the case of seed N,
MT_FUZZ_CASES=K runs K cases instead of each test's default, MT_FUZZ_JOBS=J runs J at once.
"""
import concurrent.futures
import os
import random
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time

MT_BIN = os.environ["MT_BIN"]
DATA = os.environ.get("MT_DATA_DIR", os.path.join(os.environ.get("MT_SOURCE_DIR", "."), "data"))
VOCAB = os.path.join(DATA, "gpt2", "vocab.json")
MERGES = os.path.join(DATA, "gpt2", "merges.txt")
BROWN = os.path.join(DATA, "brown", "brown.jsonl")
ADDRESS_SPACE = 4 << 30
TIMEOUT_S = 20


def _limit_children():
    with open(MT_BIN, "rb") as f:
        sanitized = b"__asan_init" in f.read()
    env = dict(os.environ)
    # One BLAS / OpenMP thread: these commands use neither, and idle pools only cost start-up time.
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    if sanitized:
        env["ASAN_OPTIONS"] = "allocator_may_return_null=1:max_allocation_size_mb=4096:" + env.get("ASAN_OPTIONS", "")
    else:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return env


ENV = _limit_children()


class Result:
    def __init__(self, args, rc, stdout, stderr, seconds, timeout):
        self.args, self.rc, self.stdout, self.stderr, self.seconds = args, rc, stdout, stderr, seconds
        self.timeout = timeout

    def verdict(self):
        """None when the run ended as the contract says, else what went wrong."""
        if self.rc is None:
            return "no end within %g s (killed)" % self.timeout
        if self.rc < 0:
            return "killed by signal %d" % -self.rc
        if self.rc == 0:
            return None
        lines = self.stderr.decode("utf-8", "replace").splitlines()
        errors = [l for l in lines if l.startswith("error:")]
        if self.rc != 1:
            return "exit status %d" % self.rc
        if not errors:
            return "exit status 1 without an 'error:' line"
        if any(l.startswith("error: out of memory") for l in errors):
            return "ran out of memory (%d GiB address space): the input was not bounded" % (ADDRESS_SPACE >> 30)
        return None

    def tail(self):
        return self.stderr.decode("utf-8", "replace")[-600:]


def run(args, stdin=b"", timeout=TIMEOUT_S, cwd=None):
    """Runs `$MT_BIN args...`; rc None means it was killed at the timeout."""
    t0 = time.monotonic()
    try:
        p = subprocess.run([MT_BIN] + [str(a) for a in args], input=stdin, capture_output=True, timeout=timeout,
                           cwd=cwd, env=ENV)
        return Result(args, p.returncode, p.stdout, p.stderr, time.monotonic() - t0, timeout)
    except subprocess.TimeoutExpired as e:
        return Result(args, None, e.stdout or b"", e.stderr or b"", time.monotonic() - t0, timeout)


def must_succeed(args, **kw):
    """A fixture step: exits the test when it does not succeed."""
    r = run(args, **kw)
    if r.rc != 0:
        sys.exit("fixture step failed (%s): %s\n%s" % (r.rc, " ".join(map(str, args)), r.tail()))
    return r


# ---------------------------------------------------------------------------------------------
# Mutations. Each takes the bytes and a random.Random and returns (new bytes, what was done).

INTERESTING = [0, 1, 2, 7, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
               0x7FFFFFFFFFFFFFFF, 0x8000000000000000, 0xFFFFFFFFFFFFFFFF]


def interesting_int(rng, width, near=None):
    """A value for a `width`-byte little-endian field: edges of the type, or near the old value."""
    mask = (1 << (8 * width)) - 1
    if near is not None and rng.random() < 0.4:
        return (near + rng.choice([-2, -1, 1, 2, 16, -16])) & mask
    v = rng.choice(INTERESTING)
    if rng.random() < 0.3:
        v = (-v) & 0xFFFFFFFFFFFFFFFF
    return v & mask


def set_int(data, offset, width, value):
    return data[:offset] + (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little") + data[offset + width:]


def get_int(data, offset, width):
    return int.from_bytes(data[offset:offset + width], "little")


def bit_flips(data, rng):
    b = bytearray(data)
    if not b:
        return bytes([rng.randrange(256)]), "byte into an empty file"
    where = []
    for _ in range(rng.choice([1, 1, 2, 4])):
        i = rng.randrange(len(b))
        bit = rng.randrange(8)
        b[i] ^= 1 << bit
        where.append("%d.%d" % (i, bit))
    return bytes(b), "bit flips at " + ",".join(where)


def byte_set(data, rng):
    if not data:
        return b"\x00", "byte into an empty file"
    i = rng.randrange(len(data))
    v = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
    return data[:i] + bytes([v]) + data[i + 1:], "byte %d = 0x%02x" % (i, v)


def truncate(data, rng):
    n = rng.randrange(len(data) + 1) if rng.random() < 0.7 else max(0, len(data) - rng.randrange(1, 9))
    return data[:n], "truncated to %d of %d bytes" % (n, len(data))


def insert_bytes(data, rng):
    i = rng.randrange(len(data) + 1)
    k = rng.choice([1, 1, 2, 8, 64])
    junk = bytes(rng.randrange(256) for _ in range(k)) if rng.random() < 0.5 else bytes([rng.choice([0, 0xFF])]) * k
    return data[:i] + junk + data[i:], "%d bytes inserted at %d" % (k, i)


def delete_range(data, rng):
    if not data:
        return data, "nothing to delete"
    i = rng.randrange(len(data))
    k = min(len(data) - i, rng.choice([1, 2, 8, 64, 1024]))
    return data[:i] + data[i + k:], "%d bytes deleted at %d" % (k, i)


def duplicate_range(data, rng):
    if not data:
        return data, "nothing to duplicate"
    i = rng.randrange(len(data))
    k = min(len(data) - i, rng.choice([1, 4, 16, 256]))
    return data[:i + k] + data[i:i + k] + data[i + k:], "%d bytes at %d duplicated" % (k, i)


BYTE_MUTATIONS = [bit_flips, byte_set, truncate, insert_bytes, delete_range, duplicate_range]


def mutate_bytes(data, rng):
    return rng.choice(BYTE_MUTATIONS)(data, rng)


def int_field(data, rng, fields):
    """Overwrites one of `fields` ((offset, width, name), ...) with an interesting value."""
    offset, width, name = rng.choice(fields)
    if offset + width > len(data):
        return truncate(data, rng)
    old = get_int(data, offset, width)
    v = interesting_int(rng, width, near=old)
    return set_int(data, offset, width, v), "%s (%d bytes at %d) %d -> %d" % (name, width, offset, old, v)


TEXT_SNIPPETS = [b"{", b"}", b"[", b"]", b'"', b"\\", b":", b",", b"\\u", b"\\ud800", b"\\udc00x", b"\\u00zz",
                 b"\x00", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xef\xbb\xbf", b"\r", b"\n", b"\r\n", b" ", b"\t",
                 b"-1", b"1e400", b"2147483647", b"2147483648", b"99999999999999999999", b"NaN", b"null", b"true",
                 b"[" * 200, b"{\"a\":" * 100]


def mutate_text(data, rng):
    """Edits that keep most of a text's structure: snippets, line swaps, line deletes, numbers."""
    kind = rng.randrange(6)
    lines = data.split(b"\n")
    if kind == 0 or len(lines) < 2:
        i = rng.randrange(len(data) + 1)
        s = rng.choice(TEXT_SNIPPETS)
        return data[:i] + s + data[i:], "%r inserted at %d" % (s[:20], i)
    if kind == 1:
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines), "lines %d and %d swapped" % (i + 1, j + 1)
    if kind == 2:
        i = rng.randrange(len(lines))
        del lines[i]
        return b"\n".join(lines), "line %d deleted" % (i + 1)
    if kind == 3:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[rng.randrange(len(lines))])
        return b"\n".join(lines), "a line duplicated before line %d" % (i + 1)
    if kind == 4:
        # A number (a run of digits) replaced by an interesting one.
        digits = [k for k in range(len(data)) if 48 <= data[k] <= 57 and (k == 0 or not 48 <= data[k - 1] <= 57)]
        if not digits:
            return mutate_bytes(data, rng)
        k = rng.choice(digits)
        e = k
        while e < len(data) and 48 <= data[e] <= 57:
            e += 1
        v = rng.choice([b"0", b"1", b"-1", b"2147483647", b"2147483648", b"4294967295", b"9223372036854775808",
                        b"1.5", b"1e3", b"00", str(int(data[k:e]) + rng.choice([-1, 1])).encode()])
        return data[:k] + v + data[e:], "number %r at %d -> %r" % (data[k:e], k, v)
    return mutate_bytes(data, rng)


# ---------------------------------------------------------------------------------------------
# Running many seeded cases.

def case_seeds(base, default_count):
    if "MT_FUZZ_SEED" in os.environ:
        return [int(os.environ["MT_FUZZ_SEED"])]
    return [base + i for i in range(int(os.environ.get("MT_FUZZ_CASES", default_count)))]


def run_cases(name, seeds, case, jobs=None):
    """Runs case(seed, workdir) for every seed, `jobs` at a time, each in a fresh directory.

    A case returns a list of (what, Result) plus optional extra failure strings
    ("what: why"); every Result must pass verdict(). Returns the number of failures."""
    jobs = jobs or int(os.environ.get("MT_FUZZ_JOBS", "2"))
    base = tempfile.mkdtemp(prefix="mt_%s_" % name)
    failures = []
    outcomes = {"exit 0": 0, "error": 0}
    slowest = 0.0

    def one(seed):
        work = os.path.join(base, str(seed))
        os.makedirs(work)
        try:
            return seed, case(seed, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for seed, (runs, extra) in pool.map(one, seeds):
            for what, r in runs:
                slowest = max(slowest, r.seconds)
                bad = r.verdict()
                if bad is None:
                    outcomes["exit 0" if r.rc == 0 else "error"] += 1
                    continue
                failures.append("seed %d: %s: %s\n  command: megatron %s\n  stderr: %s" %
                                (seed, what, bad, " ".join(map(str, r.args)), r.tail()))
            for e in extra:
                failures.append("seed %d: %s" % (seed, e))
    shutil.rmtree(base, ignore_errors=True)
    for f in failures:
        print("FAIL " + f, file=sys.stderr)
    print("%s: %d cases, %d runs exited 0, %d ended with 'error:', %d failures; %.1f s (slowest run %.2f s)" %
          (name, len(seeds), outcomes["exit 0"], outcomes["error"], len(failures), time.monotonic() - t0, slowest))
    if failures:
        print("rerun one case with MT_FUZZ_SEED=<seed>", file=sys.stderr)
    return len(failures)


# ---------------------------------------------------------------------------------------------
# Fixtures.

def small_bpe_files(directory, merges=300):
    """A consistent cut of GPT-2's files: the 256 byte tokens, the first `merges` merges (whose
    results are GPT-2 ids 256..), and <|endoftext|> with the next id. Loads in milliseconds."""
    import json
    with open(VOCAB, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(MERGES, encoding="utf-8") as f:
        merge_lines = f.read().split("\n")[1:-1]
    keep = {t: i for t, i in vocab.items() if i < 256 + merges}
    for line in merge_lines[:merges]:
        a, b = line.split()
        assert a + b in keep and a in keep and b in keep, line
    assert sorted(keep.values()) == list(range(256 + merges))
    keep["<|endoftext|>"] = 256 + merges
    vocab_path, merges_path = os.path.join(directory, "vocab.json"), os.path.join(directory, "merges.txt")
    with open(vocab_path, "w", encoding="utf-8") as f:
        # One entry per line, as GPT-2's encoder.json is not: errors then name distinct lines.
        f.write("{\n" + ",\n".join("%s: %d" % (json.dumps(t), i) for t, i in keep.items()) + "\n}\n")
    with open(merges_path, "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merge_lines[:merges]) + "\n")
    return vocab_path, merges_path


def brown_lines(n, max_chars=None):
    """The first n Brown documents as JSONL lines (bytes), texts cut to max_chars."""
    import json
    out = []
    with open(BROWN, encoding="utf-8") as f:
        for line in f:
            if len(out) == n:
                break
            if max_chars is not None:
                d = json.loads(line)
                d["text"] = d["text"][:max_chars]
                line = json.dumps(d) + "\n"
            out.append(line.encode("utf-8"))
    return out


def write_indexed_dataset(prefix, dtype_code, itemsize, documents):
    """A Megatron MMIDIDX .idx/.bin; documents = [[sequence token lists], ...]."""
    fmt = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 8: "H"}[dtype_code]
    lengths, tokens, doc_idx = [], [], [0]
    for doc in documents:
        for seq in doc:
            lengths.append(len(seq))
            tokens.extend(seq)
        doc_idx.append(len(lengths))
    pointers, p = [], 0
    for n in lengths:
        pointers.append(p)
        p += n * itemsize
    with open(prefix + ".bin", "wb") as f:
        f.write(struct.pack("<%d%s" % (len(tokens), fmt), *tokens))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, dtype_code, len(lengths), len(doc_idx)))
        f.write(struct.pack("<%di" % len(lengths), *lengths))
        f.write(struct.pack("<%dq" % len(pointers), *pointers))
        f.write(struct.pack("<%dq" % len(doc_idx), *doc_idx))


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    if os.path.lexists(path) and not os.path.isfile(path):
        os.remove(path)  # a FIFO left by a case: opening it to write would wait for a reader
    with open(path, "wb") as f:
        f.write(data)
