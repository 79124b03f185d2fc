"""Every reader of checkpoints ends by itself on a damaged checkpoint: exit 0, or exit 1 with a line
starting 'error:' -- never a signal, a hang or unbounded memory.

A small checkpoint is written by `$MT_BIN train` (GPT-2 vocabulary, mock data, 2 layers, with
optimizer state); then each seeded case damages a copy of it in one way:
  - metadata.json: a value replaced (zero, negative, huge, fractional, of another type), a key
    removed, or its bytes flipped / truncated;
  - model.safetensors or optimizer.safetensors: a header field changed (dtype, shape,
    data_offsets, a tensor removed, renamed or added), the header length changed, the file
    truncated, or a weight set to NaN;
  - the tracker: other text, or a FIFO / directory in its place (a FIFO in place of any file).
and one command reads it: checkpoint-info, generate, convert --save-hf, convert --save, or train
--load (one more iteration). Children run under an address-space limit and a timeout. The
commands also agree: when generate or train --load refuses a checkpoint over one of its files,
checkpoint-info refuses it too (it is the command a user runs to ask what is wrong).
A failing case prints its seed; FUZZ_SEEDS=a-b reruns a range.
"""
import json
import os
import random
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

MT_BIN = os.environ["MT_BIN"]
SRC = os.environ["MT_SOURCE_DIR"]
DATA = os.environ.get("MT_DATA_DIR", os.path.join(SRC, "data"))
VOCAB = ["--vocab-file", os.path.join(DATA, "gpt2", "vocab.json"), "--merge-file", os.path.join(DATA, "gpt2", "merges.txt")]
MODEL = ["--num-layers", "2", "--hidden-size", "16", "--num-attention-heads", "2", "--seq-length", "16",
         "--micro-batch-size", "2", "--global-batch-size", "2", "--lr", "0.01", "--mock-data", "--log-interval", "1",
         "--eval-iters", "0", "--device", "cpu"]
TIMEOUT_S = 30
ADDRESS_SPACE = 8 << 30
CASES = 240
FAILURES = []


def limit_child():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run(args, cwd):
    """(status, stderr) of one megatron command; status < 0: killed by that signal; None: timeout."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    try:
        p = subprocess.run([MT_BIN] + args, cwd=cwd, capture_output=True, timeout=TIMEOUT_S, preexec_fn=limit_child,
                           env=env)
    except subprocess.TimeoutExpired:
        return None, ""
    return p.returncode, p.stderr.decode(errors="replace") + p.stdout.decode(errors="replace")


def ends_well(status, output):
    if status is None or status < 0:
        return False
    if status == 0:
        return True
    return status == 1 and any(line.startswith("error: ") for line in output.splitlines())


# ---------------------------------------------------------------------------------------------
# Damage, one kind per case.

ODD_VALUES = [0, -1, 1, 3, 2**31, 2**53 + 1, 2**62, 2**63 - 1, -2**63, 10**30, 1e308, -1e308, 0.5, -0.5, 1e-300,
              "x", "", "fp8", None, True, False, [], {}]


def leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from leaves(v, path + (i,))
    yield path


def set_at(obj, path, value, delete=False):
    for k in path[:-1]:
        obj = obj[k]
    if delete:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


def damage_bytes(rng, data, header_end=None):
    b = bytearray(data)
    kind = rng.randrange(3)
    limit = header_end if header_end and rng.random() < 0.7 else len(b)
    if kind == 0:
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(max(1, limit))
            b[i] ^= 1 << rng.randrange(8)
    elif kind == 1:
        b = b[: rng.randrange(len(b))]
    else:
        i = rng.randrange(max(1, limit))
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return bytes(b)


def damage_metadata(rng, path):
    text = open(path, "rb").read()
    if rng.random() < 0.25:
        open(path, "wb").write(damage_bytes(rng, text))
        return "metadata bytes"
    doc = json.loads(text)
    where = [p for p in leaves(doc) if p]
    target = rng.choice(where)
    if rng.random() < 0.15:
        set_at(doc, target, None, delete=True)
        what = "removed %s" % (target,)
    else:
        value = rng.choice(ODD_VALUES)
        set_at(doc, target, value)
        what = "%s = %r" % (target, value)
    open(path, "w").write(json.dumps(doc))
    return "metadata " + what


def damage_safetensors(rng, path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    names = [k for k in header if k != "__metadata__"]
    kind = rng.randrange(9)
    if kind == 0:
        return damage_bytes(rng, data, 8 + n), "bytes"
    if kind == 1:
        fake = rng.choice([0, 1, 7, n - 1, n + 1, len(data), 2**32, 2**62, 2**64 - 1])
        return struct.pack("<Q", fake) + data[8:], "header length %d" % fake
    if kind == 8:
        # A weight set to NaN (fp32 bits 0x7fc00000) or Inf, in the data area.
        t = header[rng.choice(names)]
        lo, hi = t["data_offsets"]
        if hi - lo >= 4:
            at = lo + 4 * rng.randrange((hi - lo) // 4)
            body = body[:at] + rng.choice([b"\x00\x00\xc0\x7f", b"\x00\x00\x80\x7f"]) + body[at + 4 :]
            h = json.dumps(header).encode()
            return struct.pack("<Q", len(h)) + h + body, "NaN/Inf weight"
    name = rng.choice(names)
    t = header[name]
    if kind == 2:
        t["dtype"] = rng.choice(["F64", "I8", "BOOL", "F8_E4M3", "x", 3, None])
        what = "dtype"
    elif kind == 3:
        t["shape"] = rng.choice([[], [0], [-1], [2**62, 2**62], [1] * 40, ["a"], t["shape"][::-1], [2**40], None])
        what = "shape %r" % (t["shape"],)
    elif kind == 4:
        lo, hi = t["data_offsets"]
        t["data_offsets"] = rng.choice([[hi, lo], [lo, hi + 4], [-4, hi], [0, 2**62], [lo, lo], [lo + 1, hi + 1]])
        what = "data_offsets %r" % (t["data_offsets"],)
    elif kind == 5:
        del header[name]
        what = "removed %s" % name
    elif kind == 6:
        header[name + ".extra"] = dict(t)
        what = "added a copy of %s" % name
    else:
        header["renamed." + name] = header.pop(name)
        what = "renamed %s" % name
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + body, what


def damage(rng, ckpt):
    """Damages the checkpoint directory `ckpt` (iteration 2); returns a description."""
    it = os.path.join(ckpt, "iter_0000002")
    tracker = os.path.join(ckpt, "latest_checkpointed_iteration.txt")
    r = rng.random()
    if r < 0.40:
        return damage_metadata(rng, os.path.join(it, "metadata.json"))
    if r < 0.85:
        name = rng.choice(["model.safetensors", "model.safetensors", "optimizer.safetensors"])
        path = os.path.join(it, name)
        data, what = damage_safetensors(rng, path)
        open(path, "wb").write(data)
        return "%s %s" % (name, what)
    if r < 0.95:
        text = rng.choice(["", "0", "-1", "abc", "3", "1", "99999999999999999999", "release", "2\n\n", "\x00\xff",
                           "+2", " 2 ", "2.0", "1e3"])
        open(tracker, "w").write(text)
        return "tracker %r" % text
    victim = rng.choice([tracker, os.path.join(it, "metadata.json"), os.path.join(it, "model.safetensors")])
    os.remove(victim)
    if rng.random() < 0.6:
        os.mkfifo(victim)
        return "FIFO in place of %s" % os.path.basename(victim)
    os.mkdir(victim)
    return "directory in place of %s" % os.path.basename(victim)


# ---------------------------------------------------------------------------------------------

def commands(ckpt, out_dir, work):
    return {
        "checkpoint-info": ["checkpoint-info", ckpt],
        "generate": ["generate", "--load", ckpt, "--prompt", "the", "--max-new-tokens", "2", "--device", "cpu"] + VOCAB,
        "convert-hf": ["convert", "--load", ckpt, "--save-hf", os.path.join(out_dir, "hf")],
        "convert": ["convert", "--load", ckpt, "--save", os.path.join(out_dir, "re"), "--target-tensor-parallel-size",
                    "2"],
        "train": ["train"] + MODEL + VOCAB + ["--train-iters", "3", "--lr-decay-iters", "2",
                                             "--use-checkpoint-opt_param-scheduler", "--load", ckpt, "--data-cache-path",
                                             os.path.join(work, "cache")],
    }


def main():
    work = tempfile.mkdtemp(prefix="mt_ckpt_fuzz_")
    try:
        original = os.path.join(work, "original")
        status, out = run(["train"] + MODEL + VOCAB + ["--train-iters", "2", "--save", original, "--save-interval", "2",
                                                       "--data-cache-path", os.path.join(work, "cache")], work)
        if status != 0:
            print(out)
            sys.exit("the fixture checkpoint could not be written")
        if os.path.exists(os.path.join(original, ".megatron_save.lock")):
            sys.exit("the finished run left its lock file in --save")
        for name, args in commands(original, os.path.join(work, "undamaged"), work).items():
            status, out = run(args, work)
            if status != 0:
                print(out)
                sys.exit("the undamaged checkpoint is refused by %s" % name)

        first, last = 0, CASES
        if "FUZZ_SEEDS" in os.environ:
            first, last = (int(x) for x in os.environ["FUZZ_SEEDS"].split("-"))
            last += 1
        refused = 0
        for seed in range(first, last):
            rng = random.Random(seed)
            case = os.path.join(work, "case")
            shutil.rmtree(case, ignore_errors=True)
            os.makedirs(case)
            ckpt = os.path.join(case, "ckpt")
            shutil.copytree(original, ckpt)
            what = damage(rng, ckpt)
            cmds = commands(ckpt, case, work)
            # checkpoint-info every time; one other reader in turn (train, the slowest, every sixth).
            others = ["generate", "convert-hf", "convert", "generate", "convert-hf", "train"]
            chosen = [others[seed % len(others)], "checkpoint-info"]
            results = {}
            for name in chosen:
                status, out = run(cmds[name], case)
                results[name] = (status, out)
                if not ends_well(status, out):
                    how = "timed out" if status is None else "signal %d" % -status if status < 0 else "exit %d" % status
                    FAILURES.append("seed %d (%s), %s: %s\n%s" % (seed, what, name, how, out[-2000:]))
            reader, (status, out) = chosen[0], results[chosen[0]]
            if status == 1:
                refused += 1
                # A refusal over one of the checkpoint's files must be checkpoint-info's too
                # (finiteness aside: checkpoint-info does not read every weight).
                names_file = ckpt in out and "NaN or Inf" not in out and reader in ("generate", "train")
                if names_file and results["checkpoint-info"][0] == 0:
                    FAILURES.append("seed %d (%s): %s refuses it but checkpoint-info does not:\n%s" %
                                    (seed, what, reader, out[-1000:]))
        print("%d cases, %d refused by their reader" % (last - first, refused))
        if last - first == CASES and refused < CASES // 2:
            FAILURES.append("only %d of %d damaged checkpoints were refused: the damage is too mild to test much" %
                            (refused, CASES))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for f in FAILURES:
        print("FAIL:", f, file=sys.stderr)
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
