"""Megatron-LM's example flag sets (tests/cli/fixtures/megatron_examples/README.md says how they
are stored) through `megatron train --dry-run`, shrunk to a tiny shape on mock data: the error
lines each one still gets must equal its recorded NAME.expected, so that what megatron.cpp
refuses of Megatron's own scripts only changes where the expectation is edited. A set that runs
through also trains 2 iterations on CPU when its world size is 1 (with NullTokenizer: the
tokenizer files are not here).

MT_UPDATE_EXPECTED=1 rewrites the .expected files instead of comparing."""
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

SRC = os.environ["MT_SOURCE_DIR"]
BIN = os.environ["MT_BIN"]
DIR = os.path.join(SRC, "tests", "cli", "fixtures", "megatron_examples")
UPDATE = os.environ.get("MT_UPDATE_EXPECTED") == "1"
# Flags that need a checkpoint to load; the checkpoint-making run leaves them out.
LOAD_FLAGS = {"--load", "--use-checkpoint-args", "--exit-on-missing-checkpoint", "--no-load-optim", "--no-load-rng",
              "--finetune", "--ckpt-step"}
failures = []


def read_fixture(path):
    """(world size, needs a checkpoint, flags, tiny, drop); flags and tiny: [(name, [values])]."""
    world, checkpoint, sections = 1, False, {"flags": [], "tiny": [], "drop": []}
    section = None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
                assert section in sections, f"{path}: unknown section {line}"
                continue
            if section is None:
                words = line.split()
                if words[0] == "world-size":
                    world = int(words[1])
                elif words == ["checkpoint"]:
                    checkpoint = True
                else:
                    raise SystemExit(f"{path}: unknown directive {line!r}")
                continue
            words = shlex.split(line)
            assert words[0].startswith("--"), f"{path}: a line starts with its flag: {line!r}"
            sections[section].append((words[0], words[1:]))
    return world, checkpoint, sections["flags"], sections["tiny"], [name for name, _ in sections["drop"]]


def apply(flags, tiny, drop):
    out = [(name, list(values)) for name, values in flags if name not in drop]
    for name, values in tiny:
        for i, (n, _) in enumerate(out):
            if n == name:
                out[i] = (name, list(values))
                break
        else:
            out.append((name, list(values)))
    return out


def argv_of(flags, scratch):
    argv = []
    for name, values in flags:
        argv.append(name)
        argv.extend(v.replace("<DIR>", scratch) for v in values)
    return argv


def run(argv, world, scratch):
    env = dict(os.environ)
    for k in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(k, None)
    env.update({"WORLD_SIZE": str(world), "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": str(min(world, 8)),
                "OMP_NUM_THREADS": "1"})
    r = subprocess.run([BIN, "train"] + argv, capture_output=True, text=True, env=env, cwd=scratch, timeout=600)
    errors = [line[len("error: "):].replace(scratch, "<DIR>") for line in r.stderr.splitlines()
              if line.startswith("error: ")]
    return r.returncode, errors, r.stdout + r.stderr


for name in sorted(os.listdir(DIR)):
    if not name.endswith(".flags"):
        continue
    stem = name[:-len(".flags")]
    world, checkpoint, flags, tiny, drop = read_fixture(os.path.join(DIR, name))
    scratch = tempfile.mkdtemp(prefix=f"mt_{stem}_")
    job = apply(flags, tiny, drop)
    dry = ["--dry-run", "--gpu", "h100-80gb", "--device", "cpu"]
    errors = []
    if checkpoint:
        # Save one from the same flags, the load flags left out, with a vocabulary of its own
        # (the tokenizer files are not here); --use-checkpoint-args then reads its shape.
        save = [(n, v) for n, v in job if n not in LOAD_FLAGS and n not in ("--tokenizer-type", "--vocab-size")]
        save = apply(save, [("--tokenizer-type", ["NullTokenizer"]), ("--vocab-size", ["50257"]),
                            ("--train-iters", ["1"]), ("--save", [os.path.join(scratch, "ckpt")]),
                            ("--device", ["cpu"])], [])
        rc, save_errors, out = run(argv_of(save, scratch), 1, scratch)
        errors += [f"(saving the checkpoint to load) {e}" for e in save_errors]
        if rc != 0 and not save_errors:
            errors.append(f"(saving the checkpoint to load) exit {rc}")
        job = [(n, [os.path.join(scratch, "ckpt")] if n == "--load" else v) for n, v in job]
    if not errors:
        rc, errors, out = run(argv_of(job, scratch) + dry, world, scratch)
        if rc != 0 and not errors:
            errors = [f"exit {rc} without an error line: {out[-300:]}"]
        if rc == 0 and errors:
            errors.append("(exit 0)")
    expected_path = os.path.join(DIR, stem + ".expected")
    if UPDATE:
        with open(expected_path, "w") as f:
            f.write("".join(e + "\n" for e in errors))
        print(f"{stem}: wrote {len(errors)} lines")
    else:
        with open(expected_path) as f:
            expected = [line.rstrip("\n") for line in f if line.strip()]
        if errors != expected:
            gone = [e for e in expected if e not in errors]
            new = [e for e in errors if e not in expected]
            failures.append(stem)
            print(f"FAIL {stem}: the error lines differ from {stem}.expected"
                  f"\n  no longer printed (edit the expectation): {gone}\n  new: {new}")
        else:
            print(f"ok {stem}: {len(errors)} refusals as expected")
    if not errors and world == 1:
        # No tokenizer files here: the checkpoint's NullTokenizer vocabulary, or GPT-2's size.
        train = apply([(n, v) for n, v in job if n != "--tokenizer-type"],
                      [("--tokenizer-type", ["NullTokenizer"]), ("--vocab-size", ["50257"]), ("--train-iters", ["2"]),
                       ("--eval-iters", ["1"]), ("--device", ["cpu"])], [])
        rc, errs, out = run(argv_of(train, scratch), 1, scratch)
        if rc != 0:
            failures.append(stem + " (2 iterations on CPU)")
            print(f"FAIL {stem}: 2 iterations on CPU exit {rc}: {errs or out[-500:]}")
        else:
            print(f"ok {stem}: 2 iterations on CPU")
    shutil.rmtree(scratch, ignore_errors=True)

if failures:
    print("FAILED:", ", ".join(failures))
    sys.exit(1)
print("all example flag sets as expected")
