"""scripts/slurm: the sbatch files and the rank script are valid bash, the command they build
parses (`megatron train ... --dry-run` under a fake Slurm environment), and each sbatch file's
default layout fits according to `megatron plan`.

TP and PP are overridden to 1 for the dry run: the engine accepts only TP = PP = 1 until tensor
and pipeline parallelism land (train_args.cpp says so in a one-line error)."""
import os
import re
import subprocess
import sys

SRC = os.environ["MT_SOURCE_DIR"]
BIN = os.environ["MT_BIN"]
DIR = os.path.join(SRC, "scripts", "slurm")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


for name in ("nlp_benchmark.sh", "nlp_benchmark_13b.sbatch", "nlp_benchmark_175b.sbatch"):
    r = subprocess.run(["bash", "-n", os.path.join(DIR, name)], capture_output=True, text=True)
    check(r.returncode == 0, f"bash -n {name}: {r.stderr}")

# The rank script runs `megatron preflight` on the job's layout, then train; a failing preflight
# stops it before train; PREFLIGHT=0 and --dry-run skip it. MEGATRON is a stand-in that logs
# its command and fails `preflight` when asked to.
import tempfile
tmp = tempfile.mkdtemp()
fake = os.path.join(tmp, "fake_megatron.sh")
with open(fake, "w") as f:
    f.write('#!/bin/bash\necho "$1 $*" >> "$FAKE_LOG"\n[[ "$1" == preflight && "${FAKE_SLOW:-0}" == 1 ]] && exit 1\nexit 0\n')
os.chmod(fake, 0o755)


def rank_run(extra_env):
    log = os.path.join(tmp, "log%d" % len(os.listdir(tmp)))
    env = dict(os.environ, MODEL="gpt3-13b", TP="2", PP="4", MEGATRON=fake, FAKE_LOG=log, **extra_env)
    r = subprocess.run(["bash", os.path.join(DIR, "nlp_benchmark.sh")], env=env, capture_output=True, text=True)
    return r.returncode, [l.split(" ")[0] for l in open(log).read().splitlines()] if os.path.exists(log) else []


rc, calls = rank_run({})
check(rc == 0 and calls == ["preflight", "train"], f"preflight, then train: {rc} {calls}")
rc, calls = rank_run({"FAKE_SLOW": "1"})
check(rc != 0 and calls == ["preflight"], f"a slow preflight stops the rank before train: {rc} {calls}")
rc, calls = rank_run({"PREFLIGHT": "0"})
check(rc == 0 and calls == ["train"], f"PREFLIGHT=0 skips it: {rc} {calls}")
rc, calls = rank_run({"EXTRA_ARGS": "--dry-run"})
check(rc == 0 and calls == ["train"], f"--dry-run skips it: {rc} {calls}")
rank_script = open(os.path.join(DIR, "nlp_benchmark.sh")).read()
check('preflight --tensor-model-parallel-size "$TP" --pipeline-model-parallel-size "$PP"' in rank_script,
      "preflight measures the job's layout")
# The preflight line itself parses and runs: one CPU rank of the layout TP = PP = 1.
r = subprocess.run([BIN, "preflight", "--device", "cpu", "--tensor-model-parallel-size", "1",
                    "--pipeline-model-parallel-size", "1", "--tolerance", "0.1", "--iterations", "2"],
                   capture_output=True, text=True)
check(r.returncode == 0 and "GEMM fp32" in r.stdout, f"megatron preflight runs: {r.stdout[-300:]}{r.stderr}")

for sbatch, model in (("nlp_benchmark_175b.sbatch", "gpt3-175b"), ("nlp_benchmark_13b.sbatch", "gpt3-13b")):
    text = open(os.path.join(DIR, sbatch)).read()
    check(f"export MODEL={model}" in text, f"{sbatch} sets MODEL={model}")
    check("NCCL_NVLS_ENABLE=0" in text and "srun" in text and "scontrol show hostnames" in text,
          f"{sbatch} launches with srun, rendezvous on the first node, NVLS off")
    nodes = int(re.search(r"#SBATCH --nodes=(\d+)", text).group(1))
    tp, pp, mbs, gbs = (int(re.search(rf"{k}=\${{{k}:-(\d+)}}", text).group(1)) for k in ("TP", "PP", "MBS", "GBS"))
    # The rank script's command, printed, then run as a dry run (TP = PP = 1, see the docstring).
    env = dict(os.environ, MODEL=model, TP="1", PP="1", MBS=str(mbs), GBS=str(gbs), MEGATRON=BIN,
               EXTRA_ARGS="--dry-run", MEGATRON_PRINT_ARGS="1",
               VOCAB=os.path.join(os.environ["MT_DATA_DIR"], "gpt2", "vocab.json"),
               MERGES=os.path.join(os.environ["MT_DATA_DIR"], "gpt2", "merges.txt"))
    r = subprocess.run(["bash", os.path.join(DIR, "nlp_benchmark.sh")], env=env, capture_output=True, text=True)
    check(r.returncode == 0, f"print args for {model}: {r.stderr}")
    argv = r.stdout.splitlines()
    check(argv[:2] == [BIN, "train"] and "--dry-run" in argv, f"printed command for {model}: {argv[:4]}")
    world = nodes * 8
    slurm = dict(os.environ, SLURM_PROCID="0", SLURM_NTASKS=str(world), SLURM_LOCALID="0", SLURM_NNODES=str(nodes),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    d = subprocess.run(argv, env=slurm, capture_output=True, text=True)
    check(d.returncode == 0 and "memory plan per rank" in d.stdout, f"dry run of {model}: {d.stdout[-300:]}{d.stderr}")
    # The default layout fits per the planner.
    p = subprocess.run([BIN, "plan", "--model", model, "--gpu", "h100-80gb", "--nodes", str(nodes),
                        "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
                        "--micro-batch-size", str(mbs), "--global-batch-size", str(gbs),
                        "--use-distributed-optimizer", "--sequence-parallel", "--json"], capture_output=True, text=True)
    check(p.returncode == 0 and '"fits": true' in p.stdout, f"plan of {sbatch}'s layout: {p.stderr}{p.stdout[-400:]}")

sys.exit(1 if failures else 0)
